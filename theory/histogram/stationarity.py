"""The local-minimum (stationarity) test of a restricted histogram model (docs/histogram.md §4):
embed it in the unrestricted model, perturb, retrain, and measure how far the parameters move.

Distances come in two conventions:

* the Euclidean norm over all parameters (``distance_*``);
* the authors' convention (``tensor_sum_*``): the SUM over the 11 parameter tensors of the
  Euclidean norm of each tensor's difference (``model_distance`` in their 01-histogram.ipynb,
  github.com/SPOC-group/positional-and-semantic-attention).  It is what the published 158.9 /
  163.7 (init -> frozen), 0.612 / 0.465 (frozen -> retrained) and 0.115 / 0.103 (originally-zero
  parameters) measure; the sum of norms exceeds the norm of the whole vector by up to sqrt(11).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from theory.histogram.data import HistogramData
from theory.histogram.model import (
    PARAM_SHAPES,
    block_slice,
    embed_restricted,
    evaluate,
    full_gradient,
    qk_mask,
    unpack,
)
from theory.histogram.train import HistogramTrainResult, blas_threads, train
from theory.results import Result

OPTIMIZERS = ("sgd", "adam")


def tensor_sum_distance(a: np.ndarray, b: np.ndarray, *, only_zeros_of_b: bool = False) -> float:
    """The authors' distance between two flat parameter vectors: the sum over the parameter
    tensors (PARAM_SHAPES) of the Euclidean norm of ``a - b`` restricted to that tensor.

    only_zeros_of_b: restrict each tensor to the entries where ``b`` is exactly 0 (their
    "distance on the originally-zero parameters": with ``b`` the embedded restricted model these
    are the W_Q, W_K rows the mask hid)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    unpack(a), unpack(b)  # shape checks
    total = 0.0
    for k in PARAM_SHAPES:
        d = a[block_slice(k)] - b[block_slice(k)]
        if only_zeros_of_b:
            d = d[b[block_slice(k)] == 0]
        total += float(np.linalg.norm(d))
    return total


def init_to_frozen(trained: HistogramTrainResult) -> tuple[float, float]:
    """How far training moved the restricted model ``trained`` from its random initialisation:
    (the authors' tensor-sum distance, the Euclidean norm over all parameters), both between
    the initialisation and the trained model embedded in the unrestricted one.  A property of
    the training alone: no retraining is needed."""
    frozen = embed_restricted(trained.theta.astype(np.float64), trained.variant)
    init = trained.init_theta.astype(np.float64)
    return (
        tensor_sum_distance(embed_restricted(init, trained.variant), frozen),
        float(np.linalg.norm(init - frozen)),
    )


@dataclass(frozen=True, kw_only=True)
class StationarityResult(Result):
    """Distances (Euclidean norm over ALL parameters) in the local-minimum test.

    distance_frozen_to_retrained: ||theta_retrained - theta_frozen||, theta_frozen = the trained
        restricted model embedded in the unrestricted one;

    distance_init_to_frozen: ||theta_init - theta_frozen||, theta_init = the random initialisation
        the restricted training started from (the scale of a training run);

    distance_perturbation: ||theta_start - theta_frozen|| (the 1e-3 noise);

    hidden_norm_retrained: Frobenius norm of the W_Q, W_K rows the mask had hidden, after
        retraining (0 at the start up to noise): how much the other mechanism grew.

    tensor_sum_frozen_to_retrained, tensor_sum_hidden_retrained, tensor_sum_init_to_frozen: the
        same three distances in the authors' convention (:func:`tensor_sum_distance`; the
        initialisation embedded like the trained model, as they do), comparable with the
        published numbers.

    grad_norm_frozen, grad_norm_hidden_frozen, grad_norm_init: norm of the full-batch gradient
        of the unrestricted training loss at theta_frozen (all parameters / the hidden W_Q, W_K
        rows only) and at theta_init, for scale.
    """

    variant: str
    retrain_epochs: int
    distance_frozen_to_retrained: float
    distance_init_to_frozen: float
    distance_perturbation: float
    hidden_norm_retrained: float
    tensor_sum_frozen_to_retrained: float
    tensor_sum_hidden_retrained: float
    tensor_sum_init_to_frozen: float
    optimizer: str
    val_accuracy_frozen: float
    val_accuracy_retrained: float
    grad_norm_frozen: float
    grad_norm_hidden_frozen: float
    grad_norm_init: float
    block_distances: dict = field(default_factory=dict)


@blas_threads(1)
def stationarity(
    trained: HistogramTrainResult,
    data: HistogramData,
    *,
    retrain_epochs: int = 10,
    noise: float = 1e-3,
    lr: float = 1e-3,
    optimizer: str = "sgd",
    seed=0,
    batch_size: int = 32,
    checkpoint=None,
    progress: bool = True,
) -> StationarityResult:
    """Embed the restricted model ``trained`` in the unrestricted one, perturb every parameter
    by ``noise`` * N(0, 1), retrain the unrestricted model (F = identity) for ``retrain_epochs``
    epochs with ``optimizer`` (``"sgd"``: plain SGD, the published test; ``"adam"``: Adam with
    betas 0.9/0.98, eps 1e-9, as in training) at rate ``lr``, and report how far the parameters
    move."""
    variant = trained.variant
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if variant == "both":
        raise ValueError(
            "the stationarity test needs a restricted model: train it with "
            "variant 'semantic' or 'positional'"
        )
    frozen = embed_restricted(trained.theta.astype(np.float64), variant)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), 2]))
    start = frozen + noise * gen.standard_normal(frozen.shape)
    res = train(
        data,
        "both",
        retrain_epochs,
        seed=seed,
        optimizer=optimizer,
        lr=lr,
        batch_size=batch_size,
        dtype=trained.theta.dtype,
        init_theta=start,
        checkpoint=checkpoint,
        progress=progress,
        evaluate_every=0,  # only the end point counts: a third less time per epoch
    )
    retrained = res.theta.astype(np.float64)
    start = res.init_theta.astype(np.float64)  # what training really started from (dtype)
    init = trained.init_theta.astype(np.float64)
    tensor_init, euclid_init = init_to_frozen(trained)
    hidden = qk_mask(variant) == 0
    Pr = unpack(retrained)
    hidden_norm = float(np.sqrt((Pr["Wq"][hidden] ** 2).sum() + (Pr["Wk"][hidden] ** 2).sum()))
    blocks = {
        k: float(np.linalg.norm(retrained[block_slice(k)] - frozen[block_slice(k)]))
        for k in PARAM_SHAPES
    }
    va_frozen = evaluate(frozen.astype(trained.theta.dtype), data.x_val, data.y_val, "both")
    g_frozen = full_gradient(frozen, data.x_train, data.y_train, "both")
    g_init = full_gradient(init, data.x_train, data.y_train, "both")
    Gf = unpack(g_frozen)
    g_hidden = float(np.sqrt((Gf["Wq"][hidden] ** 2).sum() + (Gf["Wk"][hidden] ** 2).sum()))
    return StationarityResult(
        status=res.status,
        message=res.message,
        history=res.history,
        params=dict(
            variant=variant,
            retrain_epochs=retrain_epochs,
            noise=noise,
            lr=lr,
            optimizer=optimizer,
            seed=seed,
            batch_size=batch_size,
            trained_epochs=trained.epochs,
        ),
        metadata=dict(
            method=f"embed restricted model, perturb, retrain unrestricted with {optimizer}"
        ),
        variant=variant,
        retrain_epochs=res.epochs,
        distance_frozen_to_retrained=float(np.linalg.norm(retrained - frozen)),
        distance_init_to_frozen=euclid_init,
        distance_perturbation=float(np.linalg.norm(start - frozen)),
        hidden_norm_retrained=hidden_norm,
        tensor_sum_frozen_to_retrained=tensor_sum_distance(retrained, frozen),
        tensor_sum_hidden_retrained=tensor_sum_distance(retrained, frozen, only_zeros_of_b=True),
        tensor_sum_init_to_frozen=tensor_init,
        optimizer=optimizer,
        val_accuracy_frozen=va_frozen["accuracy"],
        val_accuracy_retrained=res.val_accuracy,
        grad_norm_frozen=float(np.linalg.norm(g_frozen)),
        grad_norm_hidden_frozen=g_hidden,
        grad_norm_init=float(np.linalg.norm(g_init)),
        block_distances=blocks,
    )
