"""``theory histogram``: the counting task with one attention layer (positional vs semantic).

theory histogram train --variant semantic --epochs 200 --seed 0 --checkpoint ckpt/ --json
theory histogram stationarity --variant positional --epochs 200 --seed 0 --checkpoint ckpt/
theory histogram attention-maps --epochs 200 --seed 0 --checkpoint ckpt/ --out maps.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from theory._util import check_int, check_positive
from theory.cli._common import add_json, emit
from theory.histogram import blas_threads

DEFAULT_SEQUENCES = "BBCCDDBBBB,LMDMMMAHHB,ONMLKJIHGF"


def _add_training(p: argparse.ArgumentParser, *, variant_choices=None, default_variant=None):
    if variant_choices:
        p.add_argument(
            "--variant",
            choices=variant_choices,
            default=default_variant,
            help="mask F seen by queries and keys: semantic (token dims 0-31), "
            "positional (position dims 32-63), both (identity) "
            f"[default {default_variant}]",
        )
    p.add_argument(
        "--epochs",
        type=int,
        default=200,
        help="total training epochs (a resumed run counts its earlier ones) [default 200]",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the initialisation and of the shuffling [default 0]",
    )
    p.add_argument(
        "--n-sequences",
        type=int,
        default=50_000,
        help="sequences drawn before deduplication and the 70/30 split [default 50000]",
    )
    p.add_argument(
        "--data-seed",
        type=int,
        default=0,
        help="seed of the data set (fixed across training seeds) [default 0]",
    )
    p.add_argument("--batch-size", type=int, default=32, help="mini-batch size [default 32]")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate [default 1e-3]")
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="directory for per-epoch checkpoints; rerunning the same command "
        "resumes an interrupted run",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


MAX_EPOCHS = 100_000
MAX_SEQUENCES = 10_000_000  # sequences drawn (a few hundred bytes each)


def _check(args) -> None:
    """The training options, checked before anything is drawn or trained (the messages name the
    option; ``theory.histogram`` checks the same quantities when called from Python)."""
    check_int("--epochs", args.epochs, lo=0, hi=MAX_EPOCHS)
    check_int("--seed", args.seed, lo=0)
    check_int("--data-seed", args.data_seed, lo=0)
    check_int("--n-sequences", args.n_sequences, lo=10, hi=MAX_SEQUENCES)
    check_int("--batch-size", args.batch_size, lo=1, hi=MAX_SEQUENCES)
    check_positive("--lr", args.lr, hi=10)
    if hasattr(args, "retrain_epochs"):
        check_int("--retrain-epochs", args.retrain_epochs, lo=0, hi=MAX_EPOCHS)
        check_positive("--retrain-lr", args.retrain_lr, hi=10)
        check_positive("--noise", args.noise, strict=False, hi=1e3)


def _data(args):
    from theory.histogram import make_data

    return make_data(args.n_sequences, rng=args.data_seed)


def _train(args, variant, data=None):
    from theory.histogram import train

    data = _data(args) if data is None else data
    return train(
        data,
        variant,
        args.epochs,
        seed=args.seed,
        optimizer="adam",
        lr=args.lr,
        batch_size=args.batch_size,
        checkpoint=args.checkpoint,
        progress=not args.no_progress,
    ), data


@blas_threads(1)
def _cmd_train(args):
    from theory.histogram import save_model

    _check(args)
    res, _ = _train(args, args.variant)
    if args.save_model:
        save_model(args.save_model, res)
    payload = dict(
        variant=res.variant,
        val_accuracy=res.val_accuracy,
        train_accuracy=res.train_accuracy,
        val_loss=res.val_loss,
        train_loss=res.train_loss,
        epochs=res.epochs,
        seconds=res.seconds,
        status=res.status,
        seed=args.seed,
        n_train=res.params["n_train"],
        n_val=res.params["n_val"],
    )
    text = (
        f"histogram {res.variant} seed {args.seed}: {res.epochs} epochs, "
        f"train accuracy {res.train_accuracy:.4f}, validation accuracy "
        f"{res.val_accuracy:.4f} ({res.seconds:.1f} s of training, status {res.status})"
    )
    emit(args, payload, text)
    return 0 if res.status == "ok" else 1


@blas_threads(1)
def _cmd_stationarity(args):
    from theory.histogram import load_model, stationarity

    _check(args)
    data = _data(args)
    if args.model:
        trained = load_model(args.model)
        if trained.variant not in ("semantic", "positional"):
            raise ValueError(
                f"{args.model} holds a '{trained.variant}' model; the test needs "
                "a semantic or positional one"
            )
    else:
        trained, data = _train(args, args.variant, data)
    res = stationarity(
        trained,
        data,
        retrain_epochs=args.retrain_epochs,
        noise=args.noise,
        lr=args.retrain_lr,
        seed=args.seed,
        batch_size=args.batch_size,
        checkpoint=args.checkpoint,
        progress=not args.no_progress,
    )
    payload = dict(
        variant=res.variant,
        retrain_epochs=res.retrain_epochs,
        distance_frozen_to_retrained=res.distance_frozen_to_retrained,
        distance_init_to_frozen=res.distance_init_to_frozen,
        distance_perturbation=res.distance_perturbation,
        hidden_norm_retrained=res.hidden_norm_retrained,
        val_accuracy_frozen=res.val_accuracy_frozen,
        val_accuracy_retrained=res.val_accuracy_retrained,
        grad_norm_frozen=res.grad_norm_frozen,
        grad_norm_hidden_frozen=res.grad_norm_hidden_frozen,
        grad_norm_init=res.grad_norm_init,
        block_distances=res.block_distances,
        trained_epochs=trained.epochs,
        status=res.status,
    )
    text = (
        f"{res.variant} solution embedded in the unrestricted model, perturbed by "
        f"{args.noise:g}, retrained {res.retrain_epochs} epochs with SGD lr "
        f"{args.retrain_lr:g}:\n"
        f"  distance frozen -> retrained   {res.distance_frozen_to_retrained:.4g}\n"
        f"  distance init -> frozen        {res.distance_init_to_frozen:.4g}\n"
        f"  distance of the perturbation   {res.distance_perturbation:.4g}\n"
        f"  norm of the hidden W_Q/W_K rows after retraining {res.hidden_norm_retrained:.4g}\n"
        f"  full-batch gradient norm at frozen {res.grad_norm_frozen:.3g} (hidden rows "
        f"{res.grad_norm_hidden_frozen:.3g}), at init {res.grad_norm_init:.3g}\n"
        f"  validation accuracy {res.val_accuracy_frozen:.4f} -> "
        f"{res.val_accuracy_retrained:.4f}"
    )
    emit(args, payload, text)
    return 0 if res.status == "ok" else 1


@blas_threads(1)
def _cmd_attention(args):
    from theory.histogram import attention, encode
    from theory.histogram.figures import plot_attention_maps

    _check(args)
    seqs = [s.strip() for s in args.sequences.split(",") if s.strip()]
    tokens = [encode(s) for s in seqs]
    data = _data(args)
    models = {}
    for variant in ("positional", "semantic"):
        models[variant], _ = _train(args, variant, data)
    out = Path(args.out)
    plot_attention_maps(models, seqs, out)
    payload = dict(
        out=str(out),
        sequences=seqs,
        val_accuracy={v: m.val_accuracy for v, m in models.items()},
        attention={v: attention(m.theta, tokens, v).tolist() for v, m in models.items()},
    )
    text = (
        f"wrote {out} (validation accuracy: "
        + ", ".join(f"{v} {m.val_accuracy:.4f}" for v, m in models.items())
        + ")"
    )
    emit(args, payload, text)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "histogram",
        help="counting task: one attention layer, positional vs semantic",
        description="The histogram (counting) task of Cui et al. (2024): sequences of 10 "
        "letters A..O, predict at each position how often its letter occurs. One "
        "attention layer whose queries/keys see only token (semantic) or only "
        "position (positional) dimensions.",
    )
    sub = p.add_subparsers(dest="histogram_command", metavar="ACTION")

    t = sub.add_parser(
        "train",
        help="train one variant (Adam, batch 32), report accuracies",
        description="Train the one-layer attention model with Adam (lr 1e-3, "
        "betas 0.9/0.98, eps 1e-9). Prints val_accuracy, "
        "train_accuracy, epochs, seconds.",
    )
    _add_training(t, variant_choices=("semantic", "positional", "both"), default_variant="semantic")
    t.add_argument(
        "--save-model",
        metavar="PATH",
        default=None,
        help="write the final parameters and history to this .npz (~100 kB)",
    )
    add_json(t)
    t.set_defaults(func=_cmd_train)

    s = sub.add_parser(
        "stationarity",
        help="local-minimum test of a restricted solution in the full model",
        description="Train (or resume/load) a restricted model, embed it in the "
        "unrestricted model (hidden W_Q/W_K rows set to zero), add "
        "noise, retrain with plain SGD and report "
        "distance_frozen_to_retrained and distance_init_to_frozen "
        "(Euclidean norms over all parameters).",
    )
    _add_training(s, variant_choices=("semantic", "positional"), default_variant="positional")
    s.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="use a model saved with `train --save-model` instead of training",
    )
    s.add_argument(
        "--retrain-epochs",
        type=int,
        default=10,
        help="epochs of SGD on the unrestricted model [default 10]",
    )
    s.add_argument(
        "--retrain-lr", type=float, default=1e-3, help="SGD learning rate [default 1e-3]"
    )
    s.add_argument(
        "--noise",
        type=float,
        default=1e-3,
        help="standard deviation of the perturbation [default 1e-3]",
    )
    add_json(s)
    s.set_defaults(func=_cmd_stationarity)

    a = sub.add_parser(
        "attention-maps",
        help="attention maps of the positional and the semantic model",
        description="Train (or resume from --checkpoint) the positional and the "
        "semantic model and draw their attention matrices for a few "
        "sequences side by side.",
    )
    _add_training(a)
    a.add_argument(
        "--sequences",
        default=DEFAULT_SEQUENCES,
        help=f"comma-separated sequences of 10 letters A..O [default {DEFAULT_SEQUENCES}]",
    )
    a.add_argument(
        "--out",
        metavar="FIG",
        default="figures/histogram-attention-maps.png",
        help="output PNG [default figures/histogram-attention-maps.png]",
    )
    add_json(a)
    a.set_defaults(func=_cmd_attention)

    p.set_defaults(func=_no_action)


def _no_action(args):
    raise ValueError("give an action: train, stationarity or attention-maps (see --help)")
