"""The histogram counting task of Cui et al.: one attention layer that counts, per position, how
often its token occurs in the sequence, learned either positionally or semantically
(docs/histogram.md).

>>> from theory import histogram as H
>>> data = H.make_data(10_000, rng=0)                                    # doctest: +SKIP
>>> run = H.train(data, "semantic", epochs=20, seed=0)                   # doctest: +SKIP
>>> H.stationarity(run, data).distance_frozen_to_retrained               # doctest: +SKIP
"""

from theory.histogram.data import (
    ALPHABET,
    CHANCE_ACCURACY,
    HistogramData,
    L,
    T,
    counts,
    decode,
    dedup_sequences,
    encode,
    make_data,
)
from theory.histogram.model import (
    N_PARAMS,
    PARAM_SHAPES,
    VARIANTS,
    attention,
    block_slice,
    embed_restricted,
    evaluate,
    full_gradient,
    init_params,
    loss_and_grad,
    loss_only,
    predict,
    qk_mask,
    unpack,
)
from theory.histogram.optim import SGD, Adam
from theory.histogram.stationarity import (
    StationarityResult,
    init_to_frozen,
    stationarity,
    tensor_sum_distance,
)
from theory.histogram.train import (
    HISTORY_KEYS,
    HistogramTrainResult,
    blas_threads,
    checkpoint_path,
    load_checkpoint,
    load_model,
    save_model,
    train,
)

__all__ = [
    "ALPHABET",
    "CHANCE_ACCURACY",
    "HISTORY_KEYS",
    "L",
    "N_PARAMS",
    "PARAM_SHAPES",
    "SGD",
    "T",
    "VARIANTS",
    "Adam",
    "HistogramData",
    "HistogramTrainResult",
    "StationarityResult",
    "attention",
    "blas_threads",
    "block_slice",
    "checkpoint_path",
    "counts",
    "decode",
    "dedup_sequences",
    "embed_restricted",
    "encode",
    "evaluate",
    "full_gradient",
    "init_params",
    "load_checkpoint",
    "load_model",
    "loss_and_grad",
    "loss_only",
    "make_data",
    "predict",
    "qk_mask",
    "save_model",
    "stationarity",
    "init_to_frozen",
    "tensor_sum_distance",
    "train",
    "unpack",
]
