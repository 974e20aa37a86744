"""Gaussian expectations: closed forms (Wick, Hermite orthogonality, erf / ReLU arc-cosine
kernels) in 1-6 dimensions for the three estimators; MC vs GH; near-singular covariances; the
numba MC kernel against its numpy reference.

Tolerances: Gauss-Hermite is exact for polynomials of degree <= 2n-1 per variable (1e-10 relative
round-off slack); QMC/MC are judged in units of their own standard error (5 sigma: a false alarm
has probability < 1e-6 per check) plus a 1e-12 floor.
"""

from __future__ import annotations

import itertools
import math

import numba
import numpy as np
import pytest

from theory.gauss import (
    Expectation,
    cov_root,
    expect,
    expect_mc_numpy_reference,
    gh_rule,
    gh_tensor,
    is_jitted,
    sobol_normal,
)

NSIG = 5.0


def random_cov(dim, rng, cond=1.0):
    A = rng.standard_normal((dim, dim))
    C = A @ A.T / dim + cond * np.eye(dim) * 0.3
    return C


def wick4(C, i, j, k, l):
    return C[i, j] * C[k, l] + C[i, k] * C[j, l] + C[i, l] * C[j, k]


def within(e: Expectation, exact, nsig=NSIG):
    v, err = np.asarray(e.value), np.asarray(e.error)
    return np.all(np.abs(v - exact) <= nsig * err + 1e-12 * (1 + np.abs(exact)))


# --------------------------------------------------------------------------- rules


def test_gh_rule_properties():
    x, w = gh_rule(10)
    assert w.sum() == pytest.approx(1.0, rel=1e-14)
    # moments of N(0,1): E z^(2m) = (2m-1)!!, exact up to degree 19
    for m in range(10):
        ref = float(math.prod(range(2 * m - 1, 0, -2))) if m else 1.0
        assert np.sum(w * x ** (2 * m)) == pytest.approx(ref, rel=1e-11)
        assert abs(np.sum(w * x ** (2 * m + 1))) < 1e-9 * max(ref, 1)
    assert gh_rule(10)[0] is x  # cached
    nodes, wt = gh_tensor(5, 3)
    assert nodes.shape == (125, 3) and wt.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        gh_rule(0)
    with pytest.raises(ValueError):
        gh_tensor(100, 6)


def test_sobol_normal_moments():
    u = sobol_normal(2**14, 3, rng=0)
    assert u.shape == (2**14, 3) and np.all(np.isfinite(u))
    np.testing.assert_allclose(u.mean(axis=0), 0, atol=1e-3)
    np.testing.assert_allclose(np.cov(u.T), np.eye(3), atol=5e-3)


def test_cov_root_and_validation():
    rng = np.random.default_rng(0)
    C = random_cov(4, rng)
    R = cov_root(C)
    np.testing.assert_allclose(R @ R.T, C, atol=1e-13)
    with pytest.raises(ValueError, match="positive semi-definite"):
        cov_root(np.diag([1.0, -0.5]))
    with pytest.raises(ValueError, match="symmetric"):
        cov_root(np.array([[1.0, 0.2], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="square"):
        cov_root(np.ones((2, 3)))


# --------------------------------------------------------------------------- Wick moments


@pytest.mark.parametrize("dim", [1, 2, 3, 4, 5, 6])
def test_wick_second_and_fourth_moments_gh(dim):
    rng = np.random.default_rng(dim)
    C = random_cov(dim, rng)
    mu = rng.standard_normal(dim) * 0.5
    # second moments with mean: E z_i z_j = C_ij + mu_i mu_j (all pairs at once, vector output)
    pairs = list(itertools.product(range(dim), repeat=2))
    f2 = lambda z: np.stack([z[:, i] * z[:, j] for i, j in pairs], axis=1)
    e = expect(f2, mu, C, method="gh", n=3)
    ref = np.array([C[i, j] + mu[i] * mu[j] for i, j in pairs])
    np.testing.assert_allclose(e.value, ref, rtol=1e-11, atol=1e-12)
    # centred fourth moments (Isserlis) on a few index quadruples
    quads = [(0, 0, 0, 0), (0, dim - 1, 0, dim - 1), (0, 1 % dim, 2 % dim, 3 % dim)]
    f4 = lambda z: np.stack([np.prod(z[:, list(q)], axis=1) for q in quads], axis=1)
    e = expect(f4, None, C, method="gh", n=3)
    np.testing.assert_allclose(e.value, [wick4(C, *q) for q in quads], rtol=1e-10)


@pytest.mark.parametrize("dim", [1, 3, 6])
@pytest.mark.parametrize("method", ["qmc", "mc"])
def test_wick_fourth_moments_sampling(dim, method):
    rng = np.random.default_rng(10 + dim)
    C = random_cov(dim, rng)
    quads = [(0, 0, 0, 0), (0, dim - 1, 0, dim - 1), (0, 1 % dim, 2 % dim, 3 % dim)]
    f4 = lambda z: np.stack([np.prod(z[:, list(q)], axis=1) for q in quads], axis=1)
    e = expect(f4, None, C, method=method, n=2**14 if method == "qmc" else 200_000, rng=1)
    assert e.method == method
    assert within(e, np.array([wick4(C, *q) for q in quads]))


# --------------------------------------------------------------------------- Hermite orthogonality


@pytest.mark.parametrize("rho", [-0.7, 0.0, 0.35, 0.999])
def test_hermite_correlated_pairs(rho):
    # E[He_j(x) He_k(y)] = delta_jk k! rho^k for unit-variance (x, y) with correlation rho
    C = np.array([[1.0, rho], [rho, 1.0]])
    he = np.polynomial.hermite_e.hermeval
    jk = [(j, k) for j in range(5) for k in range(5)]

    def f(z):
        return np.stack(
            [he(z[:, 0], [0] * j + [1]) * he(z[:, 1], [0] * k + [1]) for j, k in jk], axis=1
        )

    ref = np.array([(j == k) * math.factorial(k) * rho**k for j, k in jk])
    e = expect(f, None, C, method="gh", n=6)
    np.testing.assert_allclose(e.value, ref, atol=1e-11)
    e = expect(f, None, C, method="qmc", n=2**13, rng=2)
    assert within(e, ref)
    e = expect(f, None, C, method="mc", n=100_000, rng=3)
    assert within(e, ref)


def test_hermite_pairs_embedded_in_6d():
    # the pair (u.z, v.z) of unit-variance projections of a 6-d Gaussian
    rng = np.random.default_rng(7)
    C = random_cov(6, rng)
    R = cov_root(C)
    u, v = rng.standard_normal(6), rng.standard_normal(6)
    u /= np.linalg.norm(R.T @ u)
    v /= np.linalg.norm(R.T @ v)
    rho = float(u @ C @ v)
    f = lambda z: np.stack(
        [
            (z @ u) ** 2 - 1,
            ((z @ u) ** 2 - 1) * ((z @ v) ** 2 - 1),
            (z @ u) * (z @ v) ** 3 - 3 * (z @ u) * (z @ v),
        ],
        axis=1,
    )
    ref = np.array([0.0, 2 * rho**2, 0.0])
    e = expect(f, None, C, method="gh", n=4)
    np.testing.assert_allclose(e.value, ref, atol=1e-11)
    e = expect(f, None, C, method="qmc", n=2**14, rng=4)
    assert within(e, ref)


# --------------------------------------------------------------------------- kernels


def erf_kernel(u, v, C):
    return 2 / np.pi * np.arcsin(2 * u @ C @ v / np.sqrt((1 + 2 * u @ C @ u) * (1 + 2 * v @ C @ v)))


def relu_kernel(u, v, C):
    su, sv = math.sqrt(u @ C @ u), math.sqrt(v @ C @ v)
    rho = float(u @ C @ v) / (su * sv)
    return su * sv / (2 * np.pi) * (math.sqrt(1 - rho**2) + rho * (np.pi - math.acos(rho)))


@pytest.mark.parametrize("dim", [1, 2, 4, 6])
def test_erf_kernel(dim):
    from scipy.special import erf

    rng = np.random.default_rng(20 + dim)
    C = random_cov(dim, rng)
    u, v = rng.standard_normal(dim), rng.standard_normal(dim)
    u *= 0.8 / math.sqrt(u @ C @ u)  # projections of std 0.8 (1.2): erf stays smooth on the
    v *= 1.2 / math.sqrt(v @ C @ v)  # Gaussian's scale, so GH converges fast
    ref = erf_kernel(u, v, C)
    f = lambda z: erf(z @ u) * erf(z @ v)
    if dim <= 4:  # smooth: GH converges fast
        e = expect(f, None, C, method="gh", n={1: 60, 2: 40, 4: 16}[dim])
        assert e.value == pytest.approx(ref, abs=1e-6)
        assert e.error < 1e-4
    e = expect(f, None, C, method="qmc", n=2**13, rng=5)
    assert within(e, ref)
    e = expect(f, None, C, method="mc", n=100_000, rng=6)
    assert within(e, ref)


@pytest.mark.parametrize("dim", [2, 3, 6])
def test_relu_arccos_kernel(dim):
    rng = np.random.default_rng(30 + dim)
    C = random_cov(dim, rng)
    u, v = rng.standard_normal(dim), rng.standard_normal(dim)
    ref = relu_kernel(u, v, C)
    f = lambda z: np.maximum(z @ u, 0) * np.maximum(z @ v, 0)
    e = expect(f, None, C, method="qmc", n=2**14, rng=7)
    assert within(e, ref)
    e = expect(f, None, C, method="mc", n=200_000, rng=8)
    assert within(e, ref)
    if dim == 2:  # non-smooth: GH converges slowly, and its error estimate must say so
        e = expect(f, None, C, method="gh", n=60)
        assert abs(e.value - ref) < max(10 * e.error, 1e-3)


# --------------------------------------------------------------------------- MC vs GH, numba


@numba.njit(cache=True)
def _smooth_jit(z):
    return math.tanh(z[0] + 0.5 * z[1]) ** 2 * math.exp(-0.1 * z[2] * z[2]) + z[0] * z[1]


def _smooth_vec(z):
    return np.tanh(z[:, 0] + 0.5 * z[:, 1]) ** 2 * np.exp(-0.1 * z[:, 2] ** 2) + z[:, 0] * z[:, 1]


@numba.njit(cache=True)
def _vec_jit(z):
    out = np.empty(2)
    out[0] = z[0] * z[0]
    out[1] = math.cos(z[1]) + z[2]
    return out


def test_mc_numba_vs_gh_and_numpy():
    rng = np.random.default_rng(40)
    C = random_cov(3, rng)
    mu = np.array([0.2, -0.1, 0.3])
    assert is_jitted(_smooth_jit) and not is_jitted(_smooth_vec)
    gh = expect(_smooth_vec, mu, C, method="gh", n=30)
    assert gh.error < 1e-6  # GH reference: its error is << the MC error bar (~1e-3)
    mc = expect(_smooth_jit, mu, C, method="mc", n=400_000, rng=9)
    assert mc.method == "mc" and mc.n_evals == 400_000
    assert abs(mc.value - gh.value) < NSIG * mc.error
    ref = expect_mc_numpy_reference(_smooth_vec, mu, C, n=400_000, rng=10)
    assert abs(ref.value - gh.value) < NSIG * ref.error
    # both estimators of the same variance: standard errors agree to a few percent
    assert mc.error == pytest.approx(ref.error, rel=0.05)
    # reproducible for a given seed
    assert (
        expect(_smooth_jit, mu, C, method="mc", n=50_000, rng=11).value
        == expect(_smooth_jit, mu, C, method="mc", n=50_000, rng=11).value
    )
    # auto picks the numba path for a jitted f
    assert expect(_smooth_jit, mu, C, n=10_000, rng=1).method == "mc"


def test_mc_numba_vector_output():
    C = np.array([[1.0, 0.3, 0.0], [0.3, 2.0, 0.5], [0.0, 0.5, 1.0]])
    mu = np.array([0.5, 0.0, -1.0])
    e = expect(_vec_jit, mu, C, method="mc", n=200_000, rng=12)
    ref = np.array([C[0, 0] + mu[0] ** 2, math.exp(-C[1, 1] / 2) + mu[2]])
    assert e.value.shape == (2,) and within(e, ref)


# --------------------------------------------------------------------------- singular covariances


@pytest.mark.parametrize("eps", [0.0, 1e-14, -1e-17, 1e-8])
def test_near_singular_cov(eps):
    # z = (x, x + noise): E[z1^2 z2^2] = 3 + eps (x ~ N(0,1)); E[(z1 - z2)^2] = eps
    C = np.array([[1.0, 1.0], [1.0, 1.0 + eps]])
    f = lambda z: np.stack([z[:, 0] ** 2 * z[:, 1] ** 2, (z[:, 0] - z[:, 1]) ** 2], axis=1)
    ref = np.array([3 + max(eps, 0.0), max(eps, 0.0)])
    e = expect(f, None, C, method="gh", n=4)
    np.testing.assert_allclose(e.value, ref, rtol=1e-10, atol=1e-14)
    e = expect(f, None, C, method="mc", n=50_000, rng=13)
    assert within(e, ref)
    # a singular 6-d covariance (rank 2)
    rng = np.random.default_rng(14)
    B = rng.standard_normal((6, 2))
    C6 = B @ B.T
    e = expect(lambda z: z[:, 0] * z[:, 5], None, C6, method="gh", n=3)
    assert e.value == pytest.approx(C6[0, 5], rel=1e-10)


# --------------------------------------------------------------------------- errors


def test_expect_errors():
    f = lambda z: z[:, 0]
    with pytest.raises(ValueError, match="method"):
        expect(f, dim=1, method="simpson")
    with pytest.raises(ValueError, match="seed"):
        expect(f, dim=1, method="mc", n=100)
    with pytest.raises(ValueError, match="not finite"):
        expect(lambda z: 1 / (z[:, 0] - z[:, 0]), dim=1, method="gh", n=3)
    with pytest.raises(ValueError, match="mean"):
        expect(f, np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="shape"):
        expect(lambda z: np.ones(3), dim=1, method="gh", n=5)


@pytest.mark.slow
def test_mc_parallel_kernel_identical_to_serial():
    # same chunks, same per-chunk seeds: identical sums whatever the thread count
    C = np.array([[1.0, 0.2, 0.1], [0.2, 1.5, 0.0], [0.1, 0.0, 0.7]])
    a = expect(_smooth_jit, None, C, method="mc", n=100_003, rng=21)
    b = expect(_smooth_jit, None, C, method="mc", n=100_003, rng=21, parallel=True)
    assert a.value == pytest.approx(b.value, rel=1e-12) and a.error == pytest.approx(b.error)
    a = expect(_vec_jit, None, C, method="mc", n=70_000, rng=22)
    b = expect(_vec_jit, None, C, method="mc", n=70_000, rng=22, parallel=True)
    np.testing.assert_allclose(a.value, b.value, rtol=1e-12)


def test_numba_mc_kernel_equals_numpy_replica():
    # the numba estimator reproduced step by step in numpy (same xoshiro256** + Box-Muller
    # stream per chunk of 2^15 samples): identical sums, spanning two chunks
    from theory.gauss import _MC_CHUNK, _mc_kernel_scalar_serial
    from theory.rng import normals_reference

    C = np.array([[1.0, 0.4, 0.0], [0.4, 1.0, 0.2], [0.0, 0.2, 0.5]])
    mu = np.array([0.1, -0.2, 0.3])
    R = cov_root(C)
    n = _MC_CHUNK + 300
    seed = 123456789
    vals = []
    for c in range(2):
        m = min(_MC_CHUNK, n - c * _MC_CHUNK)
        u = normals_reference(seed, c, m * 3).reshape(m, 3)
        vals.append(_smooth_vec(mu + u @ R.T))
    vals = np.concatenate(vals)
    shift = float(_smooth_jit(mu.copy()))
    s, s2 = _mc_kernel_scalar_serial(_smooth_jit, mu, np.ascontiguousarray(R), n, seed, shift)
    assert s / n + shift == pytest.approx(vals.mean(), rel=1e-12, abs=1e-14)
    assert s2 / n == pytest.approx(np.mean((vals - shift) ** 2), rel=1e-12)


def test_ziggurat_normals_distribution():
    # moments of 2e6 draws within 5 standard errors; Kolmogorov-Smirnov against N(0, 1);
    # tail mass beyond the ziggurat base R = 3.4426 (the separate tail sampler)
    from scipy import stats

    from theory.rng import normals, xoshiro_seed

    b = np.empty(2 * 10**6)
    normals(xoshiro_seed(2024, 0), b)
    n = b.size
    assert abs(b.mean()) < NSIG / math.sqrt(n)
    assert abs(b.var() - 1) < NSIG * math.sqrt(2 / n)
    assert abs(np.mean(b**3)) < NSIG * math.sqrt(15 / n)
    assert abs(np.mean(b**4) - 3) < NSIG * math.sqrt(96 / n)
    assert stats.kstest(b, "norm").pvalue > 1e-4
    p = 2 * stats.norm.sf(3.442619855899)
    assert abs(np.mean(np.abs(b) > 3.442619855899) - p) < NSIG * math.sqrt(p / n)
