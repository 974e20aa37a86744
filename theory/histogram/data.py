"""Data of the histogram (counting) task (docs/histogram.md §1).

Sequences of ``L = 10`` tokens over an alphabet of ``T = 15`` letters (``A`` .. ``O`` = tokens
0 .. 14); the target at position ``i`` is the count ``#{j : x_j = x_i}`` (it includes ``j = i``,
so it lies in 1 .. 10; the classifier has 11 classes 0 .. 10).  Chance level: the majority class
(count 1) has probability (14/15)^9 = 0.537 per token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from theory.rng import RNGLike, as_rng

ALPHABET = "ABCDEFGHIJKLMNO"
L = 10  # sequence length
T = 15  # alphabet size
CHANCE_ACCURACY = (14 / 15) ** 9  # majority class (count 1) per token


def encode(text: str) -> np.ndarray:
    """Letters ``A..O`` -> tokens 0..14, shape (len(text),)."""
    text = text.strip().upper()
    bad = [c for c in text if c not in ALPHABET]
    if bad or len(text) != L:
        raise ValueError(f"a sequence must be {L} letters from {ALPHABET}, got {text!r}")
    return np.array([ALPHABET.index(c) for c in text], dtype=np.int64)


def decode(tokens: ArrayLike) -> str:
    return "".join(ALPHABET[int(t)] for t in tokens)


def counts(x: np.ndarray) -> np.ndarray:
    """Targets: ``y[n, i] = #{j : x[n, j] == x[n, i]}``, shape (N, L), int64."""
    x = np.asarray(x)
    return (x[:, :, None] == x[:, None, :]).sum(-1).astype(np.int64)


@dataclass(frozen=True)
class HistogramData:
    """Train/validation split: tokens (N, L) int64 and count targets (N, L) int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    n_drawn: int
    n_unique: int
    seed: int

    def subset(self, n_train: int, n_val: int) -> HistogramData:
        return dataclasses.replace(
            self,
            x_train=self.x_train[:n_train],
            y_train=self.y_train[:n_train],
            x_val=self.x_val[:n_val],
            y_val=self.y_val[:n_val],
        )


def dedup_sequences(x: np.ndarray) -> np.ndarray:
    """Remove repeated rows of ``x`` (N, L), keeping first occurrences in their order."""
    _, first = np.unique(x, axis=0, return_index=True)
    return x[np.sort(first)]


def make_data(
    n_sequences: int = 50_000, rng: RNGLike = 0, train_fraction: float = 0.7
) -> HistogramData:
    """Draw ``n_sequences`` uniform sequences, remove duplicates, shuffle, split 70/30.

    ``rng``: an int seed (default 0; the published protocol draws its data with one fixed seed) or
    a Generator.
    """
    n_sequences = int(n_sequences)
    if n_sequences < 10:
        raise ValueError(f"n_sequences must be at least 10, got {n_sequences}")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction}")
    seed = rng if isinstance(rng, (int, np.integer)) else -1
    gen = as_rng(rng)
    x = gen.integers(0, T, size=(n_sequences, L))
    x = dedup_sequences(x)
    x = x[gen.permutation(len(x))]
    n_train = int(round(train_fraction * len(x)))
    y = counts(x)
    return HistogramData(
        x[:n_train],
        y[:n_train],
        x[n_train:],
        y[n_train:],
        n_drawn=n_sequences,
        n_unique=len(x),
        seed=int(seed),
    )
