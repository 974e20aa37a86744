"""Block standard-normal generator for the full-d SGD kernel: SIMD xoshiro256** lanes + a
2048-layer ziggurat whose fast path LLVM vectorises (AVX2 / AVX-512) inside numba.

Why a separate generator: one full-d SGD step needs L d fresh N(0, 1) draws, and the scalar
xoshiro256** + 128-layer ziggurat of ``theory.gauss`` (~2.4 ns per draw) made them the floor of
the simulator.  Here the draws come in blocks of ``NB = 2 * NLANES = 128`` values:

* ``NLANES = 64`` independent xoshiro256** generators (state ``S`` of shape (4, 64), seeded from
  consecutive splitmix64 outputs) advance together; the loop over lanes is vectorised, and each
  lane makes two outputs per block (block position ``q * 64 + j`` = output q of lane j).
* Each 64-bit output r gives one candidate: layer i = r & 2047 (low 11 bits) and
  u = ((r >> 11) + 1/2) 2^-52 - 1 in (-1, 1) (top 53 bits, disjoint from the layer bits; exact in
  float64), x = u X[i] -- Doornik's ZIGNOR form of the Marsaglia-Tsang ziggurat with C = 2048
  layers instead of 128 (exact rejection rate 0.23 % instead of 2.8 %).
* The fast acceptance test costs one table lookup (a vector gather): the 64-bit pattern of the
  float64 abscissa X[i] whose 11 lowest mantissa bits hold the threshold
  T[i] = floor(2^11 X[i+1] / X[i]), i.e. the ZIGNOR ratio rounded DOWN to 11 bits; the pattern
  is used as is for x = u X[i] (a bit cast) and its low bits for an integer test.
  |u| < T[i] accepts (99.74 % of candidates).  A rejected candidate is written as NaN; the NaN of
  the block sum flags the block, a scalar scan records (position, r), and after the whole fill
  the recorded candidates are completed in order, in scalar code, by the exact ZIGNOR steps:
  |u| < X[i+1] / X[i] accepts (the sliver between T[i] and the exact ratio), else the tail
  (i = 0, Marsaglia 1964) or the wedge test (i >= 1), and a failed wedge restarts with a fresh
  complete ziggurat draw; the extra uniforms come from a scalar xoshiro256** state ``s`` (4,).
* Tables: X is the equal-area ziggurat for C = 2048 (R from a 40-digit solve of "top layer area
  = V"), computed by the float64 recursion, then each X[i] moved to the nearest float64 whose
  11 lowest mantissa bits hold the threshold (<= 2^-42 relative).  The layer areas are
  ill-conditioned in X (a difference of nearby f values), so every layer's area is V only to
  6.3e-10 relative (tested; 1.5e-11 before the bits are written): the law is N(0, 1) to < 1e-9
  in total variation, far below anything a simulation can resolve (~1e18 draws).  Fast and slow
  paths use this same table.

Exactness argument: the fast path accepts only points of the rectangle {|u| < X[i+1]/X[i]} and
every other candidate goes through the complete ZIGNOR algorithm on fresh independent uniforms,
so each output is a ZIGNOR draw; positions use disjoint random bits, so the outputs are i.i.d.

The stream is defined by (S, s): :func:`fill_rows` / :func:`fill_block_normals` consume whole
blocks (the unused tail of the last block is discarded) and complete the rejects after the fill.
:func:`block_normals_numpy_reference` replays the same stream in pure Python (tests).

Numba caching caveat: a cached kernel of another module that calls these functions
(``_sgd_kernels.full_chunk_fast``) is NOT recompiled when this file changes; after editing it,
delete ``theory/simulate/__pycache__/_sgd_kernels.full_chunk_fast*`` (a stale cache once ran the
previous, slower generator in the benchmark).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from theory.rng import splitmix64, xoshiro_next_py

_U64 = np.uint64

NLANES = 64  # xoshiro lanes (vector loop length)
NB = 2 * NLANES  # normals per block
ZIG_C = 2048  # ziggurat layers
_ZIG_MASK = _U64(ZIG_C - 1)
# R for C = 2048 layers: root of "top layer area = V" (mpmath, 40 digits), see the test
ZIG_R = 4.2163704095118968639
_TBITS = 11  # threshold bits stored in the low mantissa bits of X[i]
_TMASK = (1 << _TBITS) - 1


def _tables(C=ZIG_C, R=ZIG_R):
    """ZIGNOR tables for C layers.

    Returns X (C + 1,) with X[0] = V / f(R), X[1] = R, X[C] = 0, where each X[i] (i < C) is the
    float64 abscissa of the equal-area recursion moved to the nearest float64 whose 11 lowest
    mantissa bits are the fast-path threshold T[i] (X[i] moves by <= 1024 ulps = 2^-42
    relative); the exact ratios X[i+1] / X[i] of THAT table; the bit patterns of X[:C] (the
    fast path's single gather); f(X) = exp(-X^2 / 2); V.  T[i] = floor(2^11 X[i+1] / X[i])
    (decremented where needed) so that T[i] / 2^11 <= X[i+1] / X[i]: the fast test never
    accepts a point outside the rectangle."""
    f = lambda x: math.exp(-0.5 * x * x)
    V = R * f(R) + math.sqrt(math.pi / 2.0) * math.erfc(R / math.sqrt(2.0))
    X0 = np.zeros(C + 1)
    X0[0] = V / f(R)
    X0[1] = R
    for i in range(2, C):
        X0[i] = math.sqrt(-2.0 * math.log(V / X0[i - 1] + f(X0[i - 1])))
    X0[C] = 0.0
    orig = X0[:C].view(np.int64)
    thr = np.minimum(np.floor(X0[1:] / X0[:-1] * (1 << _TBITS)), _TMASK).astype(np.int64)
    for _ in range(8):
        # the float64 nearest to X0[i] whose low 11 bits are T[i] (moves X by <= 1024 ulps)
        cand = (orig & ~np.int64(_TMASK)) | thr
        cand = np.where(cand - orig > (1 << (_TBITS - 1)), cand - (1 << _TBITS), cand)
        cand = np.where(orig - cand > (1 << (_TBITS - 1)), cand + (1 << _TBITS), cand)
        bits = cand.astype(np.uint64)
        X = np.concatenate([bits.view(np.float64), [0.0]])
        ratio = X[1:] / X[:-1]
        bad = thr.astype(np.float64) / (1 << _TBITS) > ratio
        if not bad.any():
            break
        thr[bad] -= 1
    else:  # pragma: no cover - the loop settles after one correction at most
        raise RuntimeError("ziggurat thresholds did not settle")
    return X, ratio, bits, np.exp(-0.5 * X * X), V


ZIG_X, ZIG_RATIO, ZIG_BITS, ZIG_FX, ZIG_V = _tables()


@intrinsic
def _as_f64(typingctx, x):
    """Reinterpret the bits of a uint64 as a float64 (no conversion)."""
    sig = types.float64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@numba.njit(cache=True, inline="always")
def _rotl(x, k):
    return (x << _U64(k)) | (x >> _U64(64 - k))


@numba.njit(cache=True, inline="always")
def _next(st):
    """Next output of the scalar xoshiro256** state ``st`` (4,)."""
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    r = _rotl(s1 * _U64(5), 7) * _U64(9)
    t = s1 << _U64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return r


@numba.njit(cache=True, inline="always")
def _uniform(st):
    """Uniform in (0, 1), never 0 or 1 (top 53 bits)."""
    return (float(np.int64(_next(st) >> _U64(11))) + 0.5) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, inline="always")
def _u_of(r):
    # ((r >> 11) + 1/2) 2^-52 - 1, exact in float64
    return float(np.int64(r >> _U64(11))) * (2.0 / 9007199254740992.0) + (
        1.0 / 9007199254740992.0 - 1.0
    )


@numba.njit(cache=True)
def _finish(r, s):
    """Complete the ziggurat draw whose first candidate ``r`` failed the fast test."""
    X = ZIG_X
    while True:
        i = r & _ZIG_MASK
        u = _u_of(r)
        if abs(u) < ZIG_RATIO[i]:
            return u * X[i]
        if i == 0:  # tail beyond R (Marsaglia 1964)
            while True:
                x = math.log(_uniform(s)) / ZIG_R
                y = math.log(_uniform(s))
                if -2.0 * y >= x * x:
                    return x - ZIG_R if u < 0 else ZIG_R - x
        x = u * X[i]
        # wedge: uniform height in [f(X[i]), f(X[i+1])] below f(x)
        if ZIG_FX[i + 1] + _uniform(s) * (ZIG_FX[i] - ZIG_FX[i + 1]) < math.exp(-0.5 * x * x):
            return x
        r = _next(s)  # rejected: a fresh, complete draw


@numba.njit(cache=True, inline="always")
def _cand(r):
    """Fast-path value of candidate ``r``: u X[i], or NaN when |u| >= T[i] / 2^11 (slow path).

    The test is done on integers: with c = (r >> 11) - 2^52 (so u = (2c + 1) / 2^53) and
    a = c ^ (c >> 63) (= c or -c - 1), |u| < T / 2^11  <=>  a < T 2^41  <=>  (a >> 41) < T."""
    w = ZIG_BITS[r & _ZIG_MASK]
    u = _u_of(r)
    c = np.int64(r >> _U64(11)) - np.int64(1 << 52)
    a = c ^ (c >> np.int64(63))
    return u * _as_f64(w) if (a >> np.int64(41)) < np.int64(w & _U64(_TMASK)) else np.nan


@numba.njit(cache=True, fastmath={"reassoc"})
def _blocks(S, flat, rb, rpos, rval):
    """Blocks of NB = 2 * NLANES candidates filling ``flat`` (length a multiple of NB).

    Fast-path rejects are written as NaN and recorded as (flat position, candidate r) in
    ``rpos``/``rval``; returns their count.  (One function for all blocks: a call per block
    cost 9 % of the time, measured.)  A block holds a reject with probability ~0.3: it is
    found by the NaN of the sum of each half-block (vectorised reductions; ``reassoc`` only,
    NaN semantics are kept) and located by a scalar scan of that half.  ``rb`` (NB,) uint64
    scratch.  The rejects are completed later, in order, by :func:`_complete` (completing them
    in a batch is ~5x cheaper than one at a time inside the scan: measured)."""
    nl = S.shape[1]
    s0a = S[0]
    s1a = S[1]
    s2a = S[2]
    s3a = S[3]
    nrej = 0
    for base in range(0, flat.shape[0], 2 * nl):
        ob = flat[base : base + 2 * nl]
        ob0 = ob[:nl]
        ob1 = ob[nl : 2 * nl]
        rb0 = rb[:nl]
        rb1 = rb[nl : 2 * nl]
        chk = 0.0
        chk1 = 0.0
        for j in range(nl):
            s0 = s0a[j]
            s1 = s1a[j]
            s2 = s2a[j]
            s3 = s3a[j]
            # output 0 of lane j
            r = _rotl(s1 * _U64(5), 7) * _U64(9)
            t = s1 << _U64(17)
            s2 ^= s0
            s3 ^= s1
            s1 ^= s2
            s0 ^= s3
            s2 ^= t
            s3 = _rotl(s3, 45)
            rb0[j] = r
            x0 = _cand(r)
            ob0[j] = x0
            # output 1 of lane j
            r = _rotl(s1 * _U64(5), 7) * _U64(9)
            t = s1 << _U64(17)
            s2 ^= s0
            s3 ^= s1
            s1 ^= s2
            s0 ^= s3
            s2 ^= t
            s3 = _rotl(s3, 45)
            rb1[j] = r
            x1 = _cand(r)
            ob1[j] = x1
            chk += x0
            chk1 += x1
            s0a[j] = s0
            s1a[j] = s1
            s2a[j] = s2
            s3a[j] = s3
        if chk != chk:  # a reject among the first outputs of the lanes
            for p in range(nl):
                if ob0[p] != ob0[p]:
                    rpos[nrej] = base + p
                    rval[nrej] = rb0[p]
                    nrej += 1
        if chk1 != chk1:  # ... among the second outputs
            for p in range(nl):
                if ob1[p] != ob1[p]:
                    rpos[nrej] = base + nl + p
                    rval[nrej] = rb1[p]
                    nrej += 1
        # "+ (chk > 1e300)" adds 0 (|chk| <= 64 * 4.5; NaN compares False) but keeps the numeric
        # sums live: otherwise LLVM rewrites "isnan(sum)" as a per-element unordered-compare
        # mask reduction, 1.4x slower on this CPU (measured)
        nrej += (chk > 1e300) + (chk1 > 1e300)
    return nrej


@numba.njit(cache=True)
def _complete(flat, s, rpos, rval, nrej):
    """Complete the recorded fast-path rejects, in recording order, from the scalar state."""
    for q in range(nrej):
        flat[rpos[q]] = _finish(rval[q], s)


@numba.njit(cache=True)
def fill_rows(S, s, buf, rb, rpos, rval):
    """Fill every row of the 2-D C-contiguous ``buf`` (rows, width), width a multiple of NB,
    with N(0, 1) draws: blocks row by row, then the rejects completed in order.  Scratch: rb
    (NB,) uint64, rpos (rows * width,) int64, rval (rows * width,) uint64."""
    flat = buf.reshape(-1)
    nrej = _blocks(S, flat, rb, rpos, rval)
    _complete(flat, s, rpos, rval, nrej)


@numba.njit(cache=True)
def padded_width(d):
    """Row width (multiple of NB) that holds d normals."""
    return ((d + NB - 1) // NB) * NB


def fill_block_normals(S, s, out):
    """Fill the 1-D ``out`` (length n) with N(0, 1) draws: one row of width padded_width(n)
    (the unused tail is discarded).  Same stream as a (1, width) :func:`fill_rows` call."""
    n = out.shape[0]
    w = padded_width(n)
    buf = np.empty((1, w))
    fill_rows(S, s, buf, np.empty(NB, np.uint64), np.empty(w, np.int64), np.empty(w, np.uint64))
    out[:] = buf[0, :n]


def seed_block_state(seed: int, nlanes: int = NLANES) -> tuple[np.ndarray, np.ndarray]:
    """(S (4, nlanes), s (4,)) uint64 states from an integer seed: consecutive splitmix64
    outputs (lane j gets outputs 4j..4j+3, the scalar state the last four)."""
    arr = np.array(splitmix64(int(seed), 4 * nlanes + 4), dtype=np.uint64)
    S = np.ascontiguousarray(arr[: 4 * nlanes].reshape(nlanes, 4).T)
    return S, arr[4 * nlanes :].copy()


def block_normals_numpy_reference(seed: int, n: int, nlanes: int = NLANES) -> np.ndarray:
    """Pure-Python replay of ``fill_block_normals`` from ``seed_block_state(seed)`` (tests)."""
    nxt = xoshiro_next_py
    S, s = seed_block_state(seed, nlanes)
    lanes = [[int(S[k, j]) for k in range(4)] for j in range(nlanes)]
    sc = [int(v) for v in s]

    def uni():
        return ((nxt(sc) >> 11) + 0.5) / 9007199254740992.0

    def u_of(r):
        return (r >> 11) * (2.0 / 9007199254740992.0) + (1.0 / 9007199254740992.0 - 1.0)

    X, ratio, fX = ZIG_X, ZIG_RATIO, ZIG_FX

    def finish(r):
        while True:
            i = r & (ZIG_C - 1)
            u = u_of(r)
            if abs(u) < ratio[i]:
                return u * X[i]
            if i == 0:
                while True:
                    x = math.log(uni()) / ZIG_R
                    y = math.log(uni())
                    if -2.0 * y >= x * x:
                        return x - ZIG_R if u < 0 else ZIG_R - x
            x = u * X[i]
            if fX[i + 1] + uni() * (fX[i] - fX[i + 1]) < math.exp(-0.5 * x * x):
                return x
            r = nxt(sc)

    thr = (ZIG_BITS & np.uint64(_TMASK)).astype(float) / (1 << _TBITS)
    out = []
    pending = []
    width = -(-n // (2 * nlanes)) * 2 * nlanes
    while len(out) < width:
        rs = [[0] * nlanes for _ in range(2)]
        for j in range(nlanes):
            rs[0][j] = nxt(lanes[j])
            rs[1][j] = nxt(lanes[j])
        for q in range(2):
            for j in range(nlanes):
                r = rs[q][j]
                i = r & (ZIG_C - 1)
                u = u_of(r)
                if abs(u) < thr[i]:
                    out.append(u * X[i])
                else:
                    pending.append((len(out), r))
                    out.append(None)
    for p, r in pending:  # completed after the whole fill, in order
        out[p] = finish(r)
    return np.array(out[:n])
