"""Random streams: every random draw of the package flows from an explicit seed.

Two kinds of stream:

* numpy ``Generator`` objects for everything drawn in Python (:func:`as_rng` turns an int seed,
  a ``SeedSequence`` or a ``Generator`` into one; ``None`` is refused on purpose), and
  :func:`seed_int` to hand a 63-bit seed from such a generator to a numba kernel;
* inside numba kernels, xoshiro256** (Blackman & Vigna 2018) seeded through splitmix64, with
  standard normals by the 128-layer ziggurat of Doornik (2005, "An improved ziggurat method",
  ZIGNOR).  :func:`xoshiro_seed` seeds one stream per (seed, chunk) pair, so a Monte Carlo
  estimate split into chunks gives the same numbers whichever thread runs a chunk.  Pure-Python
  replicas (:func:`splitmix64`, :func:`xoshiro_next_py`, :func:`normals_reference`) are the
  independent references the tests hold the kernels against.

The SIMD block generator of the SGD kernel (``theory.ssi.sgd._blocknormal``) runs 64 xoshiro256**
lanes side by side with a 2048-layer ziggurat; it seeds its lanes from :func:`splitmix64`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_MASK64 = (1 << 64) - 1

#: what every ``rng=`` parameter of the package accepts
RNGLike = int | np.integer | np.random.SeedSequence | np.random.Generator


def as_rng(rng: RNGLike) -> np.random.Generator:
    """A ``numpy.random.Generator`` from a Generator, an int seed or a ``SeedSequence``.

    ``None`` is refused: pass ``rng=0`` (or any integer) for a reproducible stream.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        raise ValueError("a random seed is required: pass rng=<int> or a numpy Generator")
    if isinstance(rng, (bool, np.bool_)):
        raise ValueError("rng must be an int seed or a numpy Generator, got a bool")
    if isinstance(rng, (int, np.integer)):
        if rng < 0:
            raise ValueError(f"a seed must be a non-negative integer, got {rng}")
        return np.random.default_rng(int(rng))
    if isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    raise ValueError(f"rng must be an int seed or a numpy Generator, got {type(rng).__name__}")


def seed_int(rng: RNGLike) -> int:
    """A 63-bit integer seed for a numba kernel, drawn from ``rng`` (see :func:`as_rng`)."""
    return int(as_rng(rng).integers(0, 2**63 - 1))


def xoshiro_state(seed: int) -> np.ndarray:
    """A xoshiro256** state (4 uint64) from an integer seed: four splitmix64 outputs."""
    return np.array(splitmix64(int(seed), 4), dtype=np.uint64)


# --------------------------------------------------------------------------- numba streams

_U64 = np.uint64


@numba.njit(cache=True, inline="always")
def _rotl(x, k):
    return (x << _U64(k)) | (x >> _U64(64 - k))


@numba.njit(cache=True)
def xoshiro_seed(seed, chunk):
    st = np.empty(4, dtype=np.uint64)
    x = _U64(seed) ^ (_U64(chunk) * _U64(0xD1342543DE82EF95))
    for i in range(4):
        x = x + _U64(0x9E3779B97F4A7C15)
        z = x
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        st[i] = z ^ (z >> _U64(31))
    return st


@numba.njit(cache=True, inline="always")
def xoshiro_next(st):
    """Next 64-bit output of xoshiro256** (state ``st``: 4 uint64, updated in place)."""
    r = _rotl(st[1] * _U64(5), 7) * _U64(9)
    t = st[1] << _U64(17)
    st[2] ^= st[0]
    st[3] ^= st[1]
    st[1] ^= st[2]
    st[0] ^= st[3]
    st[2] ^= t
    st[3] = _rotl(st[3], 45)
    return r


@numba.njit(cache=True, inline="always")
def uniform(st):
    """Uniform in (0, 1) (never 0 or 1): the top 53 bits of the next output."""
    return (float(xoshiro_next(st) >> _U64(11)) + 0.5) * (1.0 / 9007199254740992.0)


def _zig_tables(C=128, R=3.442619855899, V=9.91256303526217e-3):
    """Ziggurat tables of Doornik (2005), "An improved ziggurat method" (ZIGNOR)."""
    X = np.zeros(C + 1)
    f = math.exp(-0.5 * R * R)
    X[0] = V / f
    X[1] = R
    for i in range(2, C):
        X[i] = math.sqrt(-2.0 * math.log(V / X[i - 1] + f))
        f = math.exp(-0.5 * X[i] * X[i])
    X[C] = 0.0
    return X, X[1:] / X[:-1]


_ZIG_R = 3.442619855899
_ZIG_X, _ZIG_RATIO = _zig_tables()


@numba.njit(cache=True, inline="always")
def normal(st):
    """One standard normal: ziggurat (128 layers) on xoshiro256**.

    Bits: the top 53 bits of one output give u in (-1, 1), its low 7 bits the layer (disjoint
    bits); the rare tail and wedge steps draw further uniforms.
    """
    while True:
        r = xoshiro_next(st)
        i = int(r & _U64(0x7F))
        u = 2.0 * ((float(r >> _U64(11)) + 0.5) * (1.0 / 9007199254740992.0)) - 1.0
        if abs(u) < _ZIG_RATIO[i]:
            return u * _ZIG_X[i]
        if i == 0:  # base strip: sample the tail beyond R (Marsaglia 1964)
            while True:
                x = math.log(uniform(st)) / _ZIG_R
                y = math.log(uniform(st))
                if -2.0 * y >= x * x:
                    return x - _ZIG_R if u < 0 else _ZIG_R - x
        x = u * _ZIG_X[i]
        f0 = math.exp(-0.5 * (_ZIG_X[i] * _ZIG_X[i] - x * x))
        f1 = math.exp(-0.5 * (_ZIG_X[i + 1] * _ZIG_X[i + 1] - x * x))
        if f1 + uniform(st) * (f0 - f1) < 1.0:
            return x


@numba.njit(cache=True)
def normals(st, buf):
    """Fill ``buf`` with standard normals."""
    for i in range(buf.shape[0]):
        buf[i] = normal(st)


# --------------------------------------------------------------------------- pure-Python references


def splitmix64(x: int, count: int) -> list[int]:
    """``count`` outputs of splitmix64 from state ``x`` (pure Python; seeds xoshiro256**)."""
    out = []
    x &= _MASK64
    for _ in range(count):
        x = (x + 0x9E3779B97F4A7C15) & _MASK64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        out.append(z ^ (z >> 31))
    return out


def xoshiro_next_py(st: list[int]) -> int:
    """One xoshiro256** output; advances the 4-word state list ``st`` in place (pure Python)."""

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & _MASK64

    r = (rotl((st[1] * 5) & _MASK64, 7) * 9) & _MASK64
    t = (st[1] << 17) & _MASK64
    st[2] ^= st[0]
    st[3] ^= st[1]
    st[1] ^= st[2]
    st[0] ^= st[3]
    st[2] ^= t
    st[3] = rotl(st[3], 45)
    return r


def normals_reference(seed: int, chunk: int, count: int) -> np.ndarray:
    """Pure-Python replica of the numba generator (xoshiro256** + ziggurat) for tests."""
    st = splitmix64(int(seed) ^ (int(chunk) * 0xD1342543DE82EF95), 4)

    def nxt():
        return xoshiro_next_py(st)

    def uni():
        return ((nxt() >> 11) + 0.5) / 9007199254740992.0

    X, ratio = _ZIG_X, _ZIG_RATIO

    def normal():
        while True:
            r = nxt()
            i = r & 0x7F
            u = 2.0 * (((r >> 11) + 0.5) / 9007199254740992.0) - 1.0
            if abs(u) < ratio[i]:
                return u * X[i]
            if i == 0:
                while True:
                    xx = math.log(uni()) / _ZIG_R
                    y = math.log(uni())
                    if -2.0 * y >= xx * xx:
                        return xx - _ZIG_R if u < 0 else _ZIG_R - xx
            xx = u * X[i]
            f0 = math.exp(-0.5 * (X[i] * X[i] - xx * xx))
            f1 = math.exp(-0.5 * (X[i + 1] * X[i + 1] - xx * xx))
            if f1 + uni() * (f0 - f1) < 1.0:
                return xx

    return np.array([normal() for _ in range(count)])
