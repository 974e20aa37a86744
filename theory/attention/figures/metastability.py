"""The ERM metastability diagram (issue 13 §2, docs/attention.md §7): the theory regions of the
(α, ω) plane -- which fixed points exist and which is global -- and, against them, where
finite-d gradient descent from each initialisation lands.

``FIGURES`` (the ``theory reproduce`` hook): ``"erm-metastability"``.

Theory: :func:`theory.attention.phases.regions` (spinodals of both branches, the positional
branch's saddle-node, α_c) on an ω grid, kept in the figure store ``erm-theory.jsonl``.
Simulation: :func:`~theory.attention.figures.simulation.run_sims` (L-BFGS on the empirical risk
from Q = 1_d/√d "positional", Q = Q* "semantic", Q = 0.1 N(0, I_d) "random"), kept in
``erm-sims.jsonl`` (an interrupted run resumes); per cell the mean over seeds of |θ|/σ² at the
end point (0: no semantic component -- a positional or trivial minimiser).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from theory.attention.figures import finish_figure
from theory.attention.figures.simulation import PARAMS, SIM_STORE, THEORY_STORE, run_sims
from theory.attention.phases import BOUNDARIES, REGIONS, classify, regions
from theory.attention.quadrature import coarse_rule
from theory.plotting import reproduces, use_agg
from theory.store import Store

#: the three initialisations of the GD panels
INITS = ("positional", "semantic", "random")
#: the colours of the theory regions (:data:`~theory.attention.phases.REGIONS`)
REGION_COLOURS = ("0.85", "#9ecae1", "#c6dbef", "#fdd0a2", "#fd8d3c", "0.6")
#: the boundary lines: (field, style)
LINES = (
    ("alpha_semantic", dict(color="tab:green", ls="-", marker="o", label=r"$\alpha_s^{sem}$")),
    ("alpha_c", dict(color="k", ls="-", marker="s", label=r"$\alpha_c$")),
    ("alpha_positional", dict(color="C0", ls=":", marker="^", label=r"$\alpha_s^{pos}$")),
    (
        "alpha_positional_end",
        dict(color="C0", ls="--", marker="v", label=r"positional ends (pitchfork)"),
    ),
    (
        "alpha_positional_fold",
        dict(color="C0", ls="-.", marker="D", label=r"positional re-appears (saddle-node)"),
    ),
)


def theory_regions(omegas, params=PARAMS, *, rule=None, store: Store | None = None) -> list[dict]:
    """Rows (omega and :data:`~theory.attention.phases.BOUNDARIES`) of
    :func:`~theory.attention.phases.regions` over ``omegas`` (cheap rule by default: the
    boundaries move by ~1 % against the default rule, below a cell of the heat map), each ω
    kept in ``store`` as it is done."""
    rule = coarse_rule() if rule is None else rule
    store = Store(None) if store is None else store
    out = []
    for w in omegas:
        key = dict(kind="regions", omega=float(w), sigma=params.sigma, lam=params.lam)
        key.update(A=[list(map(float, r)) for r in params.A], rule=rule.describe())
        row = store.get(key)
        if row is None:
            r = regions([float(w)], params, rule=rule)
            row = store.put(key, dict(r.rows()[0], status=r.status, message=r.message))
        out.append({k: (math.nan if v is None else v) for k, v in row.items()})
    return out


def _draw_lines(ax, rows, xe):
    """The boundary lines in log10 α (only the points inside the frame ``xe``)."""
    for key, style in LINES:
        pts = [
            (math.log10(r[key]), r["omega"])
            for r in rows
            if math.isfinite(r[key]) and r[key] > 0 and xe[0] <= math.log10(r[key]) <= xe[-1]
        ]
        if pts:
            ax.plot(*zip(*pts), ms=4, lw=1.4, clip_on=False, zorder=5, **style)


def _frame(ax, xe, ye):
    """Axes cropped to the grid (ω within [0, 1]); x is log10 α, labelled in α."""
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(max(ye[0], 0.0), min(ye[-1], 1.0))
    pad = 0.03 * (xe[-1] - xe[0])  # no tick label at the very edge (the colour bar's legend)
    ticks = [
        v
        for v in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50)
        if xe[0] + pad <= math.log10(v) <= xe[-1] - pad
    ]
    ax.set_xticks([math.log10(v) for v in ticks], [f"{v:g}" for v in ticks])
    ax.set_xlabel(r"sample ratio $\alpha = n/d$ (log scale)")
    ax.set_ylabel(r"teacher mixing $\omega$")


@reproduces(
    "beyond",
    "App. metastability",
    "the theory regions of the (alpha, omega) plane (which fixed points exist, which is "
    "global) with |theta|/sigma^2 of finite-d L-BFGS minimisers from the positional, semantic "
    "and random initialisations against them",
    ["erm-metastability.png"],
    cut="one seed per cell (no published count: the piece goes beyond the paper); a second "
    "seed, 315 more L-BFGS runs at d = 1000, would cost ~20 CPU-min",
    cost=1100,
)
def fig_metastability(out_dir: Path, quick: bool) -> dict:
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    from theory.attention.figures.heatmap import cell_edges, draw_heatmap, legend_below

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    if quick:  # same code path: a coarse grid at small d, theory at two ω (measured: 223 s CPU,
        # nearly all theory; seconds once erm-theory.jsonl holds the two ω)
        d, seeds = 100, [0]
        alphas = list(np.geomspace(0.25, 16.0, 7))
        omegas = [0.0, 0.3]
    else:  # 15 × 7 cells, 1 seed, 3 inits: 315 L-BFGS runs at d = 1000 (2-5 CPU s each,
        # measured at α = 2 and 20, ω = 0.3: ~20 CPU-min) and the theory at 7 ω (~2-4 CPU-min
        # each): ~40 min on one core (a second seed: ~20 CPU-min more, the compute budget)
        d, seeds = 1000, [0]
        alphas = list(np.geomspace(0.2, 20.0, 15))
        omegas = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    t_th = time.perf_counter()
    rows = theory_regions(omegas, PARAMS, store=Store(out_dir / THEORY_STORE))
    theory_wall = time.perf_counter() - t_th
    pts = [
        (float(a), float(w), d, s, init)
        for w in omegas
        for a in alphas
        for s in seeds
        for init in INITS
    ]
    sims = run_sims(pts, PARAMS, store=Store(out_dir / SIM_STORE), desc="erm-metastability")
    ok = [r for r in sims if r["status"] == "converged"]
    heat = {}
    for init in INITS:
        v = np.full((len(omegas), len(alphas)), np.nan)
        for i, w in enumerate(omegas):
            for j, a in enumerate(alphas):
                got = [
                    abs(r["theta_over_sigma2"])
                    for r in ok
                    if r["init"] == init
                    and math.isclose(r["alpha"], a)
                    and math.isclose(r["omega"], w)
                ]
                if got:
                    v[i, j] = np.mean(got)
        heat[init] = v

    fig, axes = plt.subplots(2, 2, figsize=(12.5, 9.5))
    la = np.log10(alphas)
    xe, ye = cell_edges(la), cell_edges(omegas)
    fine = np.linspace(xe[0], xe[-1], 400)
    codes = np.array([[REGIONS.index(classify(10.0**x, r)) for x in fine] for r in rows])
    ax = axes[0, 0]
    cmap = ListedColormap(REGION_COLOURS)
    norm = BoundaryNorm(np.arange(len(REGIONS) + 1) - 0.5, cmap.N)
    ax.pcolormesh(cell_edges(fine), ye, codes, cmap=cmap, norm=norm)
    _draw_lines(ax, rows, xe)
    _frame(ax, xe, ye)
    present = sorted(set(codes.ravel()))
    handles = [Patch(facecolor=REGION_COLOURS[k], label=REGIONS[k]) for k in present]
    handles += ax.get_legend_handles_labels()[0]
    ax.legend(
        handles=handles,
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=3,
        frameon=False,
    )
    ax.set_title("theory regions (replica fixed points, cheap rule)", fontsize=9)
    for ax, init in zip((axes[0, 1], axes[1, 0], axes[1, 1]), INITS):
        draw_heatmap(
            fig,
            ax,
            la,
            omegas,
            heat[init],
            label=r"$|\theta|/\sigma^2$ at the minimiser",
            cmap="Reds",
            sequential=True,
        )
        _draw_lines(ax, rows, xe)
        _frame(ax, xe, ye)
        legend_below(ax, ncol=3)
        ax.set_title(
            f"L-BFGS from the {init} initialisation (white: no semantic component)", fontsize=9
        )
    how_sims = f"d={d}, {len(seeds)} seed(s), L-BFGS"
    path = finish_figure(
        fig,
        out_dir / "erm-metastability.png",
        rf"ERM metastability, $\sigma$={PARAMS.sigma}, $\lambda$={PARAMS.lam}, "
        f"A={[list(r) for r in PARAMS.A]}; simulation: {how_sims}",
    )
    numbers = [
        dict(name="erm-metastability_wall_s", value=time.perf_counter() - t0, how="wall time"),
        dict(
            name="erm-metastability_theory_wall_s",
            value=theory_wall,
            how=f"theory regions at {len(omegas)} omegas (0 when cached)",
        ),
        dict(
            name="erm-metastability_failed_runs",
            value=len(sims) - len(ok),
            how=f"{len(sims)} runs, {how_sims}",
        ),
    ]
    for r in rows:
        if not any(math.isclose(r["omega"], w) for w in (0.0, 0.3)):
            continue
        for k in BOUNDARIES:
            if math.isfinite(r[k]):
                numbers.append(
                    dict(
                        name=f"{k}(omega={r['omega']:.2f}) theory",
                        value=r[k],
                        how="theory.attention.phases.regions (cheap rule SPLIT_COARSE)",
                    )
                )
    return dict(files=[str(path)], numbers=numbers)


FIGURES = {"erm-metastability": fig_metastability}
