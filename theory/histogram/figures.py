"""Figures of the histogram (counting) task: learning curves and attention maps.

``FIGURES`` (for ``theory reproduce``):

* ``histogram-learning-curves``: per-token train/validation accuracy and loss against the epoch
  for the semantic and the positional model (mean over seeds, error bars = min..max over seeds);
* ``histogram-attention-maps``: attention matrices of the positional and the semantic model for
  BBCCDDBBBB, LMDMMMAHHB and ONMLKJIHGF.

Quick mode trains on a subset (10 000 sequences drawn, 20 epochs, 2 seeds per variant, about
30 s of CPU); full mode uses the published sizes (50 000 sequences, 200 epochs, seeds 0 and
1) and reuses trained parameters saved as ``histogram-model-<variant>-seed<s>.npz`` next to the
figures (they are written there after a full training, ~100 kB each).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from theory.histogram import blas_threads
from theory.plotting import reproduces, use_agg

SEQUENCES = ("BBCCDDBBBB", "LMDMMMAHHB", "ONMLKJIHGF")
QUICK = dict(n_sequences=10_000, epochs=20, seeds=(0, 1))
FULL = dict(n_sequences=50_000, epochs=200, seeds=tuple(range(10)))  # the published 10 runs
COLORS = {"semantic": "tab:blue", "positional": "tab:orange", "both": "tab:green"}


def plot_learning_curves(runs: dict, out: str | Path | None = None, *, title: str | None = None):
    """``runs``: {variant: [HistogramTrainResult, ...]} (one per seed).  Returns the figure."""
    use_agg()
    import matplotlib.pyplot as plt

    from theory.histogram import CHANCE_ACCURACY

    fig, (ax_acc, ax_err, ax_loss) = plt.subplots(1, 3, figsize=(16, 4.4))
    for variant, results in runs.items():
        c = COLORS.get(variant)
        n_ep = min(len(r.history["epoch"]) for r in results)
        ep = np.arange(1, n_ep + 1)
        for key, ls, lab in (("val", "-", "validation"), ("train", "--", "train")):
            acc = np.array([r.history[f"{key}_accuracy"][:n_ep] for r in results])
            loss = np.array([r.history[f"{key}_loss"][:n_ep] for r in results])
            for ax, arr in ((ax_acc, acc), (ax_err, 1 - acc), (ax_loss, loss)):
                mean = arr.mean(0)
                ax.plot(
                    ep,
                    mean,
                    ls=ls,
                    color=c,
                    lw=1.5,
                    label=f"{variant}, {lab} (simulation, {len(results)} "
                    f"seed{'s' if len(results) > 1 else ''})",
                )
                if len(results) > 1:
                    ax.fill_between(ep, arr.min(0), arr.max(0), color=c, alpha=0.2, lw=0)
    ax_acc.axhline(
        CHANCE_ACCURACY,
        color="gray",
        ls=":",
        lw=1,
        label=f"majority class (count 1): {CHANCE_ACCURACY:.3f}",
    )
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("per-token accuracy (fraction of counts exactly right)")
    ax_acc.set_ylim(0.5, 1.005)
    ax_acc.legend(fontsize=7, loc="lower right")
    ax_err.set_yscale("log")
    ax_err.set_xlabel("epoch")
    ax_err.set_ylabel("per-token error rate 1 - accuracy")
    ax_err.legend(fontsize=7, loc="upper right")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy per token (nats)")
    ax_loss.legend(fontsize=7, loc="upper right")
    n_max = max(len(r.history["epoch"]) for res in runs.values() for r in res)
    for ax in (ax_acc, ax_err, ax_loss):
        ax.grid(alpha=0.3)
        if n_max > 50:
            ax.set_xscale("log")
    fig.suptitle(
        title
        or "histogram task: one attention layer, semantic vs positional "
        "(shaded: min..max over seeds)",
        fontsize=10,
    )
    fig.tight_layout()
    if out is not None:
        from theory._util import atomic_savefig

        atomic_savefig(fig, out, dpi=130)
        plt.close(fig)
    return fig


def plot_attention_maps(
    models: dict, sequences=SEQUENCES, out: str | Path | None = None, *, title: str | None = None
):
    """``models``: {variant: HistogramTrainResult}; one row per model, one column per sequence.
    Cell (i, j) = attention weight of query position i on key position j (rows sum to 1)."""
    use_agg()
    import matplotlib.pyplot as plt

    from theory.histogram import attention, encode

    seqs = list(sequences)
    tokens = np.array([encode(s) for s in seqs])
    fig, axes = plt.subplots(
        len(models), len(seqs), figsize=(3.4 * len(seqs) + 0.8, 3.3 * len(models)), squeeze=False
    )
    im = None
    maps = {v: attention(res.theta, tokens, v) for v, res in models.items()}
    vmax = max(float(A.max()) for A in maps.values())
    for r, (variant, res) in enumerate(models.items()):
        A = maps[variant]
        for c, s in enumerate(seqs):
            ax = axes[r, c]
            im = ax.imshow(A[c], vmin=0, vmax=vmax, cmap="viridis")
            ax.set_xticks(range(len(s)), list(s), fontsize=7)
            ax.set_yticks(range(len(s)), list(s), fontsize=7)
            ax.set_xlabel("key (attended) token", fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{variant} model\nquery token", fontsize=9)
            ax.set_title(f"{s}  ({variant}, val acc {res.val_accuracy:.3f})", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight (rows sum to 1)")
    fig.suptitle(
        title
        or "learned attention maps (simulation): positional attends by offset, "
        "semantic to equal tokens",
        fontsize=10,
    )
    if out is not None:
        from theory._util import atomic_savefig

        atomic_savefig(fig, out, dpi=130)
        plt.close(fig)
    return fig


def same_token_mass(theta: np.ndarray, x: np.ndarray, variant: str) -> tuple[float, float]:
    """How much a query attends to OTHER positions carrying its own token.

    For every query i whose token occurs at least twice in its sequence: the attention weight
    on keys j != i with x_j = x_i divided by the total weight on keys j != i; averaged over
    those queries of the N sequences ``x``.  Returns (value, uniform-attention baseline), the
    baseline being the same average of (count_i - 1) / (L - 1).
    """
    from theory.histogram import attention

    x = np.atleast_2d(np.asarray(x))
    A = attention(theta, x, variant).astype(np.float64)
    n_pos = x.shape[1]
    other = ~np.eye(n_pos, dtype=bool)
    same = (x[:, :, None] == x[:, None, :]) & other
    c = same.sum(-1)
    sel = c >= 1
    ratio = (A * same).sum(-1) / (A * other).sum(-1)
    return float(ratio[sel].mean()), float((c[sel] / (n_pos - 1)).mean())


# --------------------------------------------------------------------------------------------
# reproduction hook
# --------------------------------------------------------------------------------------------

_CACHE: dict = {}


def _runs(out_dir: Path, quick: bool) -> tuple[dict, object, dict]:
    """Train (or load) the semantic and positional models for all seeds; cached per process."""
    from theory.histogram import load_model, make_data, save_model, train

    cfg = QUICK if quick else FULL
    key = (quick, str(out_dir))
    if key in _CACHE:
        return _CACHE[key]
    data = make_data(cfg["n_sequences"], rng=0)
    runs = {}
    for variant in ("semantic", "positional"):
        runs[variant] = []
        for seed in cfg["seeds"]:
            path = Path(out_dir) / f"histogram-model-{variant}-seed{seed}.npz"
            res = None
            if not quick and path.exists():
                res = load_model(path)
                if (
                    res.epochs != cfg["epochs"]
                    or res.params.get("n_train") != len(data.x_train)
                    or res.params.get("data_seed") != 0
                ):
                    res = None
            if res is None:
                ck = None if quick else Path(out_dir) / ".histogram-checkpoints"
                res = train(
                    data, variant, cfg["epochs"], seed=seed, checkpoint=ck, progress=not quick
                )
                if not quick:
                    save_model(path, res)
            runs[variant].append(res)
    _CACHE[key] = (runs, data, cfg)
    return _CACHE[key]


def _published_accuracy(variant: str) -> str:
    from theory.published import published

    rec = published(f"cui2024/histogram/val_accuracy/{variant}")
    return f"{rec.value} ± {rec.uncertainty}"


def _how(cfg, data, quick):
    return (
        f"{'quick' if quick else 'full'} mode: {cfg['n_sequences']} sequences drawn (seed 0), "
        f"{len(data.x_train)} train / {len(data.x_val)} validation after dedup, Adam lr 1e-3 "
        f"batch 32, {cfg['epochs']} epochs, seeds {list(cfg['seeds'])}; mean over seeds"
    )


@blas_threads(1)
@reproduces(
    "cui2024",
    "App. histogram training",
    "training curves of the histogram task for the positional and the semantic solution",
    ["histogram-learning-curves.png"],
)
def fig_learning_curves(out_dir, quick: bool) -> dict:
    out_dir = Path(out_dir)
    runs, data, cfg = _runs(out_dir, quick)
    out = out_dir / "histogram-learning-curves.png"
    plot_learning_curves(
        runs,
        out,
        title=(
            f"histogram task (L=10, T=15, d=64): {len(data.x_train)} train sequences, "
            f"Adam lr 1e-3 batch 32, seeds {list(cfg['seeds'])} (shaded: min..max)"
        ),
    )
    numbers = []
    for variant, results in runs.items():
        acc = np.array([r.val_accuracy for r in results])
        se = float(acc.std(ddof=1) / np.sqrt(acc.size)) if acc.size > 1 else float("nan")
        numbers.append(
            dict(
                name=f"histogram_val_accuracy_{variant}",
                value=float(acc.mean()),
                value_err=se,
                spread=float(acc.max() - acc.min()),
                how=f"per-token validation accuracy of the {variant} model, mean and SE over "
                f"{acc.size} seeds (published: {_published_accuracy(variant)} over 10 runs); "
                + _how(cfg, data, quick),
            )
        )
    return dict(files=[out], numbers=numbers)


@blas_threads(1)
@reproduces(
    "cui2024",
    "Fig. 1",
    "attention maps of the trained positional and semantic solutions of the histogram task",
    ["histogram-attention-maps.png"],
)
def fig_attention_maps(out_dir, quick: bool) -> dict:
    out_dir = Path(out_dir)
    runs, data, cfg = _runs(out_dir, quick)
    models = {v: runs[v][0] for v in ("positional", "semantic")}
    out = out_dir / "histogram-attention-maps.png"
    plot_attention_maps(
        models,
        SEQUENCES,
        out,
        title=(
            f"learned attention (seed {cfg['seeds'][0]}, {cfg['epochs']} epochs, "
            f"{len(data.x_train)} train sequences): positional by offset, semantic to equal tokens"
        ),
    )
    numbers = []
    for v, m in models.items():
        value, base = same_token_mass(m.theta, data.x_val, v)
        numbers.append(
            dict(
                name=f"histogram_same_token_attention_{v}",
                value=value,
                uniform_baseline=base,
                how=f"share of a query's attention off the diagonal that goes to other positions "
                f"with its own token (queries whose token repeats; uniform attention gives "
                f"{base:.3f}), {len(data.x_val)} validation sequences, {v} model seed "
                f"{cfg['seeds'][0]}; " + _how(cfg, data, quick),
            )
        )
    return dict(files=[out], numbers=numbers)


FIGURES = {
    "histogram-learning-curves": fig_learning_curves,
    "histogram-attention-maps": fig_attention_maps,
}
