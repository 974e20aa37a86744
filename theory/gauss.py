"""Gaussian expectations E f(z), z ~ N(mean, cov), in any dimension.

Three estimators behind one call, :func:`expect`:

``"gh"``   tensor-product Gauss-Hermite (probabilists' rule, weights summing to 1), ``n`` nodes per
           dimension.  Exact for polynomials of degree <= 2n-1 in each variable; the method of
           choice for smooth integrands in <= 4 dimensions.  Error estimate: the difference with
           the rule of ``n - max(2, n // 4)`` nodes (a conservative, a-posteriori estimate).
``"qmc"``  scrambled Sobol points mapped through the normal quantile, ``n`` points per
           scrambling, ``n_rep`` independent scramblings; value = mean over scramblings,
           error = their standard error.
``"mc"``   plain Monte Carlo with ``n`` samples and the standard error.  When ``f`` is a numba
           ``@njit`` function of one vector ``z`` (shape ``(dim,)``) returning a float or a 1-D
           array, samples are drawn and reduced inside a numba kernel without storing them:
           xoshiro256** + ziggurat normals from :mod:`theory.rng`, seeded per chunk of 2^15
           samples from (seed, chunk), so serial and ``parallel=True`` runs give identical
           numbers (:func:`theory.rng.normals_reference` replicates the stream in pure Python).
           Otherwise ``f`` is evaluated vectorised on chunks of ``(chunk, dim)`` numpy samples
           (:func:`expect_mc_numpy_reference`, the baseline of the benchmark).

Conventions: ``f`` (for "gh", "qmc" and the numpy "mc" path) takes an array of shape
``(N, dim)`` and returns shape ``(N,)`` or ``(N, *out_shape)``.  The covariance root is taken with
``eigh`` (negative round-off eigenvalues are clipped), so a singular or near-singular ``cov``
works: the rule then lives on the support of the Gaussian.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtri
from scipy.stats import qmc as _qmc

from theory.rng import RNGLike, as_rng, normals, seed_int, xoshiro_seed

METHODS = ("auto", "gh", "qmc", "mc")

#: default Gauss-Hermite nodes per dimension, by dimension (the product grid stays <= ~1e5 points)
GH_DEFAULT_NODES = {1: 60, 2: 40, 3: 24, 4: 14, 5: 9, 6: 7}
QMC_DEFAULT_N = 2**14
QMC_DEFAULT_REP = 8
MC_DEFAULT_N = 10**6


@dataclass(frozen=True)
class Expectation:
    """Value and error estimate of a Gaussian expectation.

    ``value`` and ``error`` have the output shape of ``f`` (floats for scalar ``f``);
    ``n_evals`` counts evaluations of ``f``.
    """

    value: float | np.ndarray
    error: float | np.ndarray
    method: str
    n_evals: int

    def __iter__(self):  # allows ``value, error = expect(...)``
        yield self.value
        yield self.error


# --------------------------------------------------------------------------- rules


@lru_cache(maxsize=64)
def _gh_rule_cached(n: int):
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()  # = w / sqrt(2 pi), normalised to the standard Gaussian measure
    x.setflags(write=False)
    w.setflags(write=False)
    return x, w


def gh_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss-Hermite nodes and weights for N(0, 1), weights summing to 1 (cached)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"the number of Gauss-Hermite nodes must be >= 1, got {n}")
    return _gh_rule_cached(n)


@lru_cache(maxsize=32)
def _gh_tensor_cached(n: int, dim: int):
    x, w = gh_rule(n)
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    nodes = np.stack([g.ravel() for g in grids], axis=1)
    wg = np.meshgrid(*([w] * dim), indexing="ij")
    weights = np.prod(np.stack([g.ravel() for g in wg], axis=1), axis=1)
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def gh_tensor(n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-product rule for N(0, I_dim): nodes ``(n**dim, dim)``, weights ``(n**dim,)``.

    Cached; the arrays are read-only.
    """
    n, dim = int(n), int(dim)
    if dim < 1:
        raise ValueError(f"dimension must be >= 1, got {dim}")
    if n**dim > 5 * 10**7:
        raise ValueError(
            f"a {n}-node tensor Gauss-Hermite rule in {dim} dimensions has {n**dim:.2e} points; "
            "lower n or use method='qmc' / 'mc'"
        )
    return _gh_tensor_cached(n, dim)


def sobol_normal(n: int, dim: int, rng: RNGLike) -> np.ndarray:
    """``n`` scrambled-Sobol points mapped to N(0, I_dim), shape ``(n, dim)``; n should be 2^k."""
    sampler = _qmc.Sobol(d=dim, scramble=True, seed=as_rng(rng))
    u = sampler.random(n)
    # the scrambled points are never exactly 0 or 1, but guard the quantile anyway
    u = np.clip(u, 1e-300, 1 - 1e-16)
    return ndtri(u)


def cov_root(cov: ArrayLike, dim: int | None = None) -> np.ndarray:
    """A root R with R R^T = cov (via eigh; negative round-off eigenvalues clipped)."""
    cov = np.atleast_2d(np.asarray(cov, dtype=float))
    if cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be a square matrix, got shape {cov.shape}")
    if dim is not None and cov.shape[0] != dim:
        raise ValueError(f"cov is {cov.shape[0]}x{cov.shape[0]} but mean has {dim} entries")
    if not np.all(np.isfinite(cov)):
        raise ValueError("cov has non-finite entries")
    if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12):
        raise ValueError("cov must be symmetric")
    lam, U = np.linalg.eigh(cov)
    scale = max(1.0, float(np.max(np.abs(lam))))
    if lam.min() < -1e-10 * scale:
        raise ValueError(
            f"cov must be positive semi-definite; its smallest eigenvalue is {lam.min():.3g}"
        )
    return U * np.sqrt(np.clip(lam, 0.0, None))


def _prepare(mean, cov, dim):
    if mean is None and cov is None:
        if dim is None:
            raise ValueError("give mean, cov or dim")
        mean = np.zeros(dim)
    if mean is None:
        mean = np.zeros(np.atleast_2d(cov).shape[0])
    mean = np.atleast_1d(np.asarray(mean, dtype=float))
    if mean.ndim != 1:
        raise ValueError(f"mean must be a vector, got shape {mean.shape}")
    if dim is not None and mean.size != dim:
        raise ValueError(f"mean has {mean.size} entries but dim={dim}")
    root = np.eye(mean.size) if cov is None else cov_root(cov, mean.size)
    return mean, root


def _check_finite(value, method):
    if not np.all(np.isfinite(value)):
        raise ValueError(
            f"the expectation is not finite ({method} rule gave {value}); check that f is "
            "integrable against the Gaussian and finite at every point"
        )


def _eval(f, z):
    out = np.asarray(f(z), dtype=float)
    if out.shape[:1] != (z.shape[0],):
        raise ValueError(
            f"f must map an array of shape (N, dim) = {z.shape} to shape (N, ...); got {out.shape}"
        )
    return out


def _weighted(out, w):
    return np.tensordot(w, out, axes=(0, 0))


# --------------------------------------------------------------------------- estimators


def _expect_gh(f, mean, root, n):
    dim = mean.size
    n = int(n if n is not None else GH_DEFAULT_NODES.get(dim, 5))
    m = max(1, n - max(2, n // 4))
    vals = []
    evals = 0
    for k in (n, m):
        u, w = gh_tensor(k, dim)
        z = mean + u @ root.T
        vals.append(_weighted(_eval(f, z), w))
        evals += w.size
    value, coarse = vals
    return value, np.abs(value - coarse), evals


def _expect_qmc(f, mean, root, n, rng, n_rep):
    n = int(n if n is not None else QMC_DEFAULT_N)
    if n < 2:
        raise ValueError("qmc needs n >= 2 points per scrambling")
    if n & (n - 1):
        n = 1 << int(math.ceil(math.log2(n)))  # Sobol balance properties need a power of 2
    rng = as_rng(rng)
    reps = []
    for _ in range(int(n_rep)):
        u = sobol_normal(n, mean.size, rng)
        reps.append(_eval(f, mean + u @ root.T).mean(axis=0))
    reps = np.asarray(reps)
    value = reps.mean(axis=0)
    error = (
        reps.std(axis=0, ddof=1) / np.sqrt(len(reps))
        if len(reps) > 1
        else np.full_like(value, np.nan)
    )
    return value, error, n * int(n_rep)


def _expect_mc_numpy(f, mean, root, n, rng, chunk=2**16):
    rng = as_rng(rng)
    s = s2 = None
    done = 0
    shift = None
    while done < n:
        k = min(chunk, n - done)
        z = mean + rng.standard_normal((k, mean.size)) @ root.T
        out = _eval(f, z)
        if shift is None:
            shift = out[0].copy()  # shifted sums: stable variance
            s = np.zeros_like(shift)
            s2 = np.zeros_like(shift)
        d = out - shift
        s = s + d.sum(axis=0)
        s2 = s2 + (d * d).sum(axis=0)
        done += k
    mu = s / n
    var = np.maximum(s2 / n - mu**2, 0.0) * n / max(n - 1, 1)
    return shift + mu, np.sqrt(var / n), n


_MC_CHUNK = 2**15
_BLOCK = 512  # samples whose normals are generated in one Box-Muller block


@numba.njit(cache=True, inline="always")
def _affine(mean, root, buf, off, z):
    dim = mean.shape[0]
    for j in range(dim):
        acc = mean[j]
        for k in range(dim):
            acc += root[j, k] * buf[off + k]
        z[j] = acc


@numba.njit(cache=True, inline="always")
def _chunk_scalar(f, mean, root, n, seed, shift, c):
    st = xoshiro_seed(seed, c)
    dim = mean.shape[0]
    buf = np.empty(_BLOCK * dim)
    z = np.empty(dim)
    lo = c * _MC_CHUNK
    hi = min(n, lo + _MC_CHUNK)
    s = 0.0
    s2 = 0.0
    for b0 in range(lo, hi, _BLOCK):
        normals(st, buf)
        for i in range(min(_BLOCK, hi - b0)):
            _affine(mean, root, buf, i * dim, z)
            v = f(z) - shift
            s += v
            s2 += v * v
    return s, s2


@numba.njit(cache=True, inline="always")
def _chunk_vector(f, mean, root, n, seed, shift, c, out, out2):
    st = xoshiro_seed(seed, c)
    dim = mean.shape[0]
    buf = np.empty(_BLOCK * dim)
    z = np.empty(dim)
    lo = c * _MC_CHUNK
    hi = min(n, lo + _MC_CHUNK)
    for b0 in range(lo, hi, _BLOCK):
        normals(st, buf)
        for i in range(min(_BLOCK, hi - b0)):
            _affine(mean, root, buf, i * dim, z)
            v = f(z)
            for q in range(shift.shape[0]):
                d = v[q] - shift[q]
                out[q] += d
                out2[q] += d * d


@numba.njit(cache=True)
def _mc_kernel_scalar_serial(f, mean, root, n, seed, shift):
    """MC of a scalar jitted f, one thread; returns (sum, sum of squares) of f - shift."""
    nchunk = (n + _MC_CHUNK - 1) // _MC_CHUNK
    s = 0.0
    s2 = 0.0
    for c in range(nchunk):
        a, b = _chunk_scalar(f, mean, root, n, seed, shift, c)
        s += a
        s2 += b
    return s, s2


@numba.njit(cache=True, parallel=True)
def _mc_kernel_scalar(f, mean, root, n, seed, shift):
    """Parallel MC of a scalar jitted f (same chunks and seeds as the serial kernel)."""
    nchunk = (n + _MC_CHUNK - 1) // _MC_CHUNK
    sums = np.zeros(nchunk)
    sums2 = np.zeros(nchunk)
    for c in numba.prange(nchunk):
        a, b = _chunk_scalar(f, mean, root, n, seed, shift, c)
        sums[c] = a
        sums2[c] = b
    return sums.sum(), sums2.sum()


@numba.njit(cache=True)
def _mc_kernel_vector_serial(f, mean, root, n, seed, shift):
    k_out = shift.shape[0]
    nchunk = (n + _MC_CHUNK - 1) // _MC_CHUNK
    sums = np.zeros((nchunk, k_out))
    sums2 = np.zeros((nchunk, k_out))
    for c in range(nchunk):
        _chunk_vector(f, mean, root, n, seed, shift, c, sums[c], sums2[c])
    return sums.sum(axis=0), sums2.sum(axis=0)


@numba.njit(cache=True, parallel=True)
def _mc_kernel_vector(f, mean, root, n, seed, shift):
    """Parallel MC of a vector-valued jitted f (1-D output)."""
    k_out = shift.shape[0]
    nchunk = (n + _MC_CHUNK - 1) // _MC_CHUNK
    sums = np.zeros((nchunk, k_out))
    sums2 = np.zeros((nchunk, k_out))
    for c in numba.prange(nchunk):
        _chunk_vector(f, mean, root, n, seed, shift, c, sums[c], sums2[c])
    return sums.sum(axis=0), sums2.sum(axis=0)


def is_jitted(f) -> bool:
    """True for a numba ``@njit`` dispatcher (the "mc" path then runs inside numba)."""
    return isinstance(f, numba.core.registry.CPUDispatcher)


def _expect_mc_numba(f, mean, root, n, rng, parallel=False):
    seed = seed_int(rng)
    # shift = f(mean): the sums of (f - shift) keep the variance formula accurate; a non-finite
    # f(mean) (f singular at the mean) falls back to no shift
    first = f(mean.copy())
    if np.ndim(first) == 0:
        shift = float(first) if np.isfinite(first) else 0.0
        ker = _mc_kernel_scalar if parallel else _mc_kernel_scalar_serial
    else:
        shift = np.asarray(first, dtype=float).ravel()
        shift = np.where(np.isfinite(shift), shift, 0.0)
        ker = _mc_kernel_vector if parallel else _mc_kernel_vector_serial
    s, s2 = ker(f, mean, np.ascontiguousarray(root), n, seed, shift)
    mu = s / n
    var = np.maximum(s2 / n - mu**2, 0.0) * n / max(n - 1, 1)
    return shift + mu, np.sqrt(var / n), n


def expect(
    f: Callable,
    mean: ArrayLike | None = None,
    cov: ArrayLike | None = None,
    *,
    dim: int | None = None,
    method: str = "auto",
    n: int | None = None,
    rng: RNGLike | None = None,
    n_rep: int = QMC_DEFAULT_REP,
    parallel: bool = False,
) -> Expectation:
    """E f(z) for z ~ N(mean, cov), with an error estimate.

    Parameters
    ----------
    f : callable
        Vectorised: ``f(z)`` with ``z`` of shape ``(N, dim)`` returns ``(N,)`` or ``(N, ...)``.
        For ``method="mc"`` a numba ``@njit`` function of a single ``z`` of shape ``(dim,)``
        (returning a float or a 1-D array) is run in a numba kernel instead (see ``parallel``).
    mean, cov : array_like, optional
        Mean ``(dim,)`` (default 0) and covariance ``(dim, dim)`` (default identity).
    dim : int, optional
        Dimension when neither mean nor cov is given.
    method : {"auto", "gh", "qmc", "mc"}
        "auto" = Gauss-Hermite in <= 4 dimensions, scrambled Sobol above.
    n : int, optional
        "gh": nodes per dimension (default ``GH_DEFAULT_NODES[dim]``); "qmc": points per
        scrambling (rounded up to a power of 2, default 2^14); "mc": samples (default 10^6).
    rng : int or numpy Generator
        Seed for "qmc" and "mc" (required there).
    n_rep : int
        Independent scramblings for "qmc" (default 8).
    parallel : bool
        Numba "mc" path only: run the chunks on all threads (``prange``).  Off by default: the
        parallel kernel takes ~10 s to compile per process and per ``f`` (numba cannot cache
        kernels that receive a function argument), the serial one ~1-3 s.  Both use the same
        chunks and seeds, so they return identical numbers.

    Returns
    -------
    Expectation
        ``value``, ``error`` (same shape as f's output), ``method``, ``n_evals``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    mean, root = _prepare(mean, cov, dim)
    d = mean.size
    if method == "auto":
        method = "gh" if d <= 4 and not is_jitted(f) else "qmc"
        if is_jitted(f):
            method = "mc"
    if method == "gh":
        if is_jitted(f):
            raise ValueError("method='gh' needs a vectorised f; jitted scalar f works with 'mc'")
        value, error, evals = _expect_gh(f, mean, root, n)
    elif method == "qmc":
        if is_jitted(f):
            raise ValueError("method='qmc' needs a vectorised f; jitted scalar f works with 'mc'")
        value, error, evals = _expect_qmc(f, mean, root, n, rng, n_rep)
    else:
        n = int(n if n is not None else MC_DEFAULT_N)
        if n < 2:
            raise ValueError("mc needs n >= 2 samples")
        if is_jitted(f):
            value, error, evals = _expect_mc_numba(f, mean, root, n, rng, parallel)
        else:
            value, error, evals = _expect_mc_numpy(f, mean, root, n, rng)
    _check_finite(value, method)
    if np.ndim(value) == 0:
        value, error = float(value), float(error)
    return Expectation(value=value, error=error, method=method, n_evals=int(evals))


def expect_mc_numpy_reference(
    f_vec: Callable, mean: ArrayLike, cov: ArrayLike, n: int, rng: RNGLike
) -> Expectation:
    """Plain vectorised-numpy Monte Carlo (the reference / baseline of the numba kernel)."""
    mean, root = _prepare(mean, cov, None)
    value, error, evals = _expect_mc_numpy(f_vec, mean, root, int(n), rng)
    _check_finite(value, "mc")
    if np.ndim(value) == 0:
        value, error = float(value), float(error)
    return Expectation(value=value, error=error, method="mc-numpy", n_evals=int(evals))
