"""Training of the histogram model: mini-batch epochs, checkpoints, saved models
(docs/histogram.md §3).

Training (:func:`train`) shuffles with a seed derived from ``(seed, epoch)``, so a run interrupted
after epoch k and resumed from its checkpoint retraces exactly the uninterrupted run.
Checkpoints go through :class:`theory.store.ArrayStore` (one atomic ``.npz`` per configuration).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from theory._util import atomic_write_bytes, blas_threads
from theory.histogram.data import HistogramData
from theory.histogram.model import (
    N_PARAMS,
    VARIANTS,
    evaluate,
    init_params,
    loss_and_grad,
    qk_mask,
    unpack,
)
from theory.histogram.optim import SGD, Adam
from theory.results import Result
from theory.store import ArrayStore

# BLAS threads: the matrices here are tiny (320 x 64); a multi-threaded BLAS on a loaded machine
# makes a training step ~30x slower (2 epochs of 1400 sequences: 17 s with the default OpenBLAS
# threads under load, 0.45 s with one thread).  Training pins BLAS to one thread
# (theory._util.blas_threads).


HISTORY_KEYS = (
    "epoch",
    "train_loss",
    "train_accuracy",
    "train_seq_accuracy",
    "val_loss",
    "val_accuracy",
    "val_seq_accuracy",
    "seconds",
)


@dataclass(frozen=True, kw_only=True)
class HistogramTrainResult(Result):
    """Outcome of :func:`train`.  ``history`` is a dict of per-epoch lists (HISTORY_KEYS);
    ``theta`` the final flat parameters; ``init_theta`` the parameters training started from."""

    variant: str
    epochs: int
    train_accuracy: float
    val_accuracy: float
    train_loss: float
    val_loss: float
    seconds: float
    theta: np.ndarray = field(repr=False, compare=False)
    init_theta: np.ndarray = field(repr=False, compare=False)

    def to_dict(self, *, history: bool = False) -> dict:
        d = super().to_dict(history=history)
        d.pop("theta", None)
        d.pop("init_theta", None)
        return d

    def row(self) -> dict:
        d = super().row()
        d.pop("theta", None)
        d.pop("init_theta", None)
        return d


def evaluated(epoch: int, every: int, first: int = 0) -> bool:
    """Whether training evaluates after epoch ``epoch`` (counted from 1): each of the first
    ``first`` epochs, and every ``every``-th (0: none of those)."""
    return epoch <= first or (every > 0 and epoch % every == 0)


def _epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), 1, int(epoch)]))


def _theta_digest(theta) -> str:
    return hashlib.sha1(np.ascontiguousarray(theta).tobytes()).hexdigest()[:16]


def _checkpoints(directory, config: dict) -> ArrayStore:
    """The checkpoint store of a run: one file per configuration, named after its key settings."""
    prefix = (
        f"histogram-{config['variant']}-{config['optimizer']}-seed{config['seed']}-"
        f"n{config['n_train']}"
    )
    return ArrayStore(directory, prefix=prefix)


def checkpoint_path(directory: str | Path, config: dict) -> Path:
    """The checkpoint file of a run with ``config`` inside ``directory``."""
    return _checkpoints(directory, config).path(config)


def _save_checkpoint(store, config, theta, init_theta, opt, epoch, history):
    store.save(
        config,
        theta=theta,
        init_theta=init_theta,
        epoch=np.int64(epoch),
        history=np.array(json.dumps(history)),
        **{f"opt_{k}": v for k, v in opt.state().items()},
    )


def _unpack_checkpoint(arrays: dict) -> dict:
    out = dict(arrays)
    out["history"] = json.loads(str(out["history"]))
    out["epoch"] = int(out["epoch"])
    out["opt"] = {k[4:]: out.pop(k) for k in list(out) if k.startswith("opt_")}
    return out


def load_checkpoint(path: str | Path) -> dict:
    """The state stored in a checkpoint file: theta, init_theta, epoch, history, opt."""
    with np.load(path, allow_pickle=False) as z:
        return _unpack_checkpoint({k: z[k] for k in z.files if k != "_key"})


def train(
    data: HistogramData,
    variant: str = "semantic",
    epochs: int = 200,
    seed: int = 0,
    *,
    optimizer: str = "adam",
    lr: float = 1e-3,
    batch_size: int = 32,
    dtype=np.float32,
    init_theta: np.ndarray | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    callback=None,
    threads: int | None = 1,
    evaluate_every: int = 1,
    evaluate_first: int = 0,
) -> HistogramTrainResult:
    """Train the one-layer model on ``data`` for ``epochs`` epochs (total, counting resumed ones).

    seed: int; initialisation from SeedSequence([seed, 0]) (unless ``init_theta`` is given),
    shuffling of epoch e from SeedSequence([seed, 1, e]).
    checkpoint: a directory; after every epoch the state (parameters, optimiser moments, epoch,
    history) is written atomically to ``checkpoint_path(dir, config)``; a later call with the same
    configuration resumes from it (a run that already has >= ``epochs`` epochs is returned as is).
    callback(epoch, history): called after each epoch, after the checkpoint is written (raising
    KeyboardInterrupt there simulates an interruption).
    threads: BLAS threads during training (default 1: fastest for these tiny matrices).
    evaluate_every: evaluate the loss and accuracy on the training and validation sets after
    every ``evaluate_every``-th epoch (1: every epoch, the learning curves; 0: never, only the
    final numbers), NaN in ``history`` for the others.  The evaluation is ~1/3 of an epoch's
    time (BENCHMARKS.md) and does not change the training.
    evaluate_first: also evaluate after each of the first ``evaluate_first`` epochs (the fast
    early part of the learning curve; :func:`evaluated` is the rule).
    """
    for name, v in (("evaluate_every", evaluate_every), ("evaluate_first", evaluate_first)):
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0 (0: only at the end), got {v!r}")
    with blas_threads(threads):
        return _train(
            data,
            variant,
            epochs,
            seed,
            optimizer=optimizer,
            lr=lr,
            batch_size=batch_size,
            dtype=dtype,
            init_theta=init_theta,
            checkpoint=checkpoint,
            progress=progress,
            callback=callback,
            evaluate_every=int(evaluate_every),
            evaluate_first=int(evaluate_first),
        )


def _train(
    data,
    variant,
    epochs,
    seed,
    *,
    optimizer,
    lr,
    batch_size,
    dtype,
    init_theta,
    checkpoint,
    progress,
    callback,
    evaluate_every=1,
    evaluate_first=0,
):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    epochs = int(epochs)
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not isinstance(seed, (int, np.integer)):
        raise ValueError("seed must be an integer (it also fixes the shuffling of every epoch)")
    seed = int(seed)
    dtype = np.dtype(dtype)
    if init_theta is None:
        theta0 = init_params(np.random.SeedSequence([seed, 0]), dtype=dtype)
    else:
        theta0 = np.array(init_theta, dtype=dtype)
        unpack(theta0)  # shape check
    n_train = len(data.x_train)
    config = dict(
        variant=variant,
        seed=seed,
        optimizer=optimizer,
        lr=float(lr),
        batch_size=int(batch_size),
        dtype=dtype.name,
        n_train=n_train,
        n_val=len(data.x_val),
        data_seed=data.seed,
        data_digest=_theta_digest(data.x_train[:1000]),
        init=_theta_digest(theta0),
    )
    opt = (
        Adam(N_PARAMS, lr=lr, dtype=dtype)
        if optimizer == "adam"
        else SGD(N_PARAMS, lr=lr, dtype=dtype)
    )
    theta = theta0.copy()
    history = {k: [] for k in HISTORY_KEYS}
    start = 0
    store = path = None
    if checkpoint is not None:
        store = _checkpoints(checkpoint, config)
        path = store.path(config)
        saved = store.load(config)  # only a checkpoint of this very configuration
        if saved is not None:
            ck = _unpack_checkpoint(saved)
            theta = ck["theta"].astype(dtype)
            opt.load(ck["opt"])
            history = ck["history"]
            start = ck["epoch"]
    f = qk_mask(variant).astype(dtype)
    xs, ys = data.x_train, data.y_train
    bar = None
    if progress and epochs > start:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=epochs, initial=start, desc=f"histogram {variant}", unit="epoch", leave=False
        )
    try:
        for epoch in range(start, epochs):
            t0 = time.perf_counter()
            perm = _epoch_rng(seed, epoch).permutation(n_train)
            for s in range(0, n_train, batch_size):
                idx = perm[s : s + batch_size]
                _, g = loss_and_grad(theta, xs[idx], ys[idx], f=f)
                opt.step(theta, g)
            if not np.all(np.isfinite(theta)):
                break
            if evaluated(epoch + 1, evaluate_every, evaluate_first):
                tr = evaluate(theta, xs, ys, variant)
                va = evaluate(theta, data.x_val, data.y_val, variant)
            else:
                tr = va = dict(loss=math.nan, accuracy=math.nan, seq_accuracy=math.nan)
            row = dict(
                epoch=epoch + 1,
                train_loss=tr["loss"],
                train_accuracy=tr["accuracy"],
                train_seq_accuracy=tr["seq_accuracy"],
                val_loss=va["loss"],
                val_accuracy=va["accuracy"],
                val_seq_accuracy=va["seq_accuracy"],
                seconds=time.perf_counter() - t0,
            )
            for k in HISTORY_KEYS:
                history[k].append(row[k])
            if path is not None:
                _save_checkpoint(store, config, theta, theta0, opt, epoch + 1, history)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(val_acc=f"{va['accuracy']:.4f}", loss=f"{tr['loss']:.3g}")
            if callback is not None:
                callback(epoch + 1, history)
    finally:
        if bar is not None:
            bar.close()
    finite = bool(np.all(np.isfinite(theta)))
    tr = evaluate(theta, xs, ys, variant)
    va = evaluate(theta, data.x_val, data.y_val, variant)
    done = len(history["epoch"])
    status = "ok" if finite else "nan"
    msg = "" if finite else f"parameters became non-finite in epoch {done + 1}"
    return HistogramTrainResult(
        status=status,
        message=msg,
        history=history,
        params=dict(config, epochs=epochs),
        metadata=dict(
            method="one-layer attention, hand-written backward, numpy",
            checkpoint=str(path) if path else None,
            n_params=N_PARAMS,
        ),
        variant=variant,
        epochs=done,
        train_accuracy=tr["accuracy"],
        val_accuracy=va["accuracy"],
        train_loss=tr["loss"],
        val_loss=va["loss"],
        seconds=float(np.sum(history["seconds"])),
        theta=theta,
        init_theta=theta0,
    )


def save_model(path: str | Path, result: HistogramTrainResult) -> Path:
    """Write the final parameters, settings and history (compressed npz, atomic, ~100 kB).

    The initial parameters are stored only if they are not the seed's default initialisation
    (which :func:`load_model` regenerates)."""
    seed_init = init_params(
        np.random.SeedSequence([int(result.params["seed"]), 0]), dtype=result.init_theta.dtype
    )
    extra = (
        {} if np.array_equal(seed_init, result.init_theta) else {"init_theta": result.init_theta}
    )
    buf = io.BytesIO()
    np.savez_compressed(
        buf, theta=result.theta, summary=np.array(json.dumps(result.to_dict(history=True))), **extra
    )
    return atomic_write_bytes(path, buf.getvalue())


def load_model(path: str | Path) -> HistogramTrainResult:
    """Read a model written by :func:`save_model`."""
    with np.load(path, allow_pickle=False) as z:
        theta = z["theta"]
        init_theta = z["init_theta"] if "init_theta" in z.files else None
        d = json.loads(str(z["summary"]))
    if init_theta is None:
        init_theta = init_params(
            np.random.SeedSequence([int(d["params"]["seed"]), 0]), dtype=theta.dtype
        )
    fields = {f.name for f in dataclasses.fields(HistogramTrainResult)}
    kw = {k: v for k, v in d.items() if k in fields}
    return HistogramTrainResult(**kw, theta=theta, init_theta=init_theta)
