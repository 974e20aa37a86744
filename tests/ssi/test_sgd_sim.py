"""Full finite-d online SGD: numba kernels vs numpy references, gradients vs finite differences,
one step vs an explicit construction, seeds in parallel and resumable output."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory.rng import xoshiro_state
from theory.ssi import (
    AttentionModel,
    TiedNetwork,
    load_results,
    ps_model,
    simulate_seeds,
    simulate_sgd,
)
from theory.ssi._kernels import ACTIVATION_CODES as CODES
from theory.ssi.sgd import _blocknormal as BN
from theory.ssi.sgd import _kernels as K

z1, z2 = sp.symbols("z1 z2", real=True)

HEADS = [
    # (head, act, L, k_out)
    (K.HEAD_MATRIX, 0, 2, 4),
    (K.HEAD_MATRIX, 0, 3, 9),
    (K.HEAD_FUNCTIONAL, 0, 2, 1),
    (K.HEAD_NETWORK, CODES["relu"], 3, 1),
    (K.HEAD_NETWORK, CODES["tanh"], 2, 1),
    (K.HEAD_NETWORK, CODES["he3n"], 2, 1),
    (K.HEAD_NETWORK, CODES["erf"], 2, 1),
    (K.HEAD_NETWORK, CODES["sigmoid"], 2, 1),
    (K.HEAD_NETWORK, "x**2+x", 2, 1),  # written: compiled callbacks vs the numpy expression
    (K.HEAD_NETWORK, "tanh(2*x)-x/3", 3, 1),
]


def _loss_reference(head, z, y, Rm, act):
    return K.head_grad_reference(head, z, y, Rm, act)[0]


@pytest.mark.parametrize("head,act,L,kout", HEADS)
def test_head_gradient_matches_finite_differences(head, act, L, kout):
    rng = np.random.default_rng(1)
    Rm = rng.standard_normal((L, L))
    for _ in range(5):
        z = rng.standard_normal(L)
        y = rng.standard_normal(kout)
        work, delta = np.empty((L, L)), np.empty(L)
        loss = K.head_grad(head, z, y, Rm, *K.act_args(act), delta, work)
        loss_np, delta_np = K.head_grad_reference(head, z, y, Rm, act)
        np.testing.assert_allclose(loss, loss_np, rtol=1e-12)
        np.testing.assert_allclose(delta, delta_np, rtol=1e-10, atol=1e-12)
        # central differences: error O(h^2) ~ 1e-10 relative, well inside 1e-6
        hstep = 1e-5
        fd = np.array(
            [
                (
                    _loss_reference(head, z + hstep * np.eye(L)[i], y, Rm, act)
                    - _loss_reference(head, z - hstep * np.eye(L)[i], y, Rm, act)
                )
                / (2 * hstep)
                for i in range(L)
            ]
        )
        np.testing.assert_allclose(delta, fd, rtol=1e-6, atol=1e-7)


def _random_frame(rng, d, k):
    M = np.linalg.qr(rng.standard_normal((d, 1 + k)))[0]
    return np.ascontiguousarray(M[:, 0]), np.ascontiguousarray(M[:, 1:].T)


CASES = [
    # (head, act, L, kout, untied, B)
    (K.HEAD_MATRIX, 0, 2, 4, False, np.array([[1.0], [-1.0]])),
    (K.HEAD_FUNCTIONAL, 0, 2, 1, False, np.array([[1.0], [-1.0]])),
    (
        K.HEAD_FUNCTIONAL,
        0,
        3,
        1,
        False,
        np.linalg.cholesky(np.array([[1, 0.3, 0.1], [0.3, 1, 0.2], [0.1, 0.2, 1.0]])),
    ),
    (K.HEAD_NETWORK, 1, 3, 1, False, np.zeros((3, 0))),
    (K.HEAD_NETWORK, 2, 2, 1, True, np.zeros((2, 0))),
    # activations written as expressions: the kernels call their compiled sigma, sigma'
    (K.HEAD_NETWORK, "x**2+x", 3, 1, False, np.zeros((3, 0))),
    (K.HEAD_NETWORK, "tanh(2*x)-x/3", 2, 1, True, np.zeros((2, 0))),
]


@pytest.mark.parametrize("head,act,L,kout,untied,B", CASES)
def test_full_kernel_matches_numpy_reference(head, act, L, kout, untied, B):
    rng = np.random.default_rng(2)
    d, n, gamma = 40, 30, 0.3
    k = B.shape[1]
    ustar, Qp = _random_frame(rng, d, k)
    R = L if untied else 1
    W = rng.standard_normal((R, d))
    W *= math.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    C = np.concatenate([W @ ustar[:, None], W @ Qp.T], axis=1) / math.sqrt(d)
    G = rng.standard_normal((n, L, d))
    zs = rng.standard_normal((n, L))
    Y = rng.uniform(0, 1, (n, kout))
    Rm = rng.standard_normal((L, L))
    W1, C1 = W.copy(), C.copy()
    W2, C2 = W.copy(), C.copy()
    h1, l1 = K.full_chunk(
        W1,
        ustar,
        Qp,
        np.ascontiguousarray(B),
        G,
        zs,
        Y,
        gamma,
        head,
        Rm,
        *K.act_args(act),
        untied,
        0.5,
        C1,
    )
    h2, l2 = K.full_chunk_reference(
        W2, ustar, Qp, B, G, zs, Y, gamma, head, Rm, act, untied, 0.5, C2
    )
    # 30 steps of O(d) sums: round-off grows to ~1e-13; 1e-9 leaves ample margin
    np.testing.assert_allclose(W1, W2, atol=1e-9)
    np.testing.assert_allclose(C1, C2, atol=1e-11)
    np.testing.assert_allclose(l1, l2, rtol=1e-9)
    assert h1 == h2
    np.testing.assert_allclose(np.linalg.norm(W1, axis=1), math.sqrt(d), rtol=1e-12)


def test_one_full_step_against_explicit_gradient():
    """Build X and P explicitly, differentiate the loss in w numerically, apply the spherical
    update by hand: the kernel must agree (attention, identity reduction, P_1 = -P_2)."""
    rng = np.random.default_rng(3)
    d, L, gamma = 7, 2, 0.2
    ustar, Qp = _random_frame(rng, d, 1)
    B = np.array([[1.0], [-1.0]])
    P = B @ Qp
    w = rng.standard_normal(d)
    w *= math.sqrt(d) / np.linalg.norm(w)
    g = rng.standard_normal((1, L, d))
    zs = rng.standard_normal((1, L))
    X = g[0] / math.sqrt(d)
    X = X + np.outer(zs[0] / math.sqrt(d) - X @ ustar, ustar)
    np.testing.assert_allclose(X @ (math.sqrt(d) * ustar), zs[0], atol=1e-12)
    Y = rng.uniform(0, 1, (1, 4))

    def loss(v):
        z = (X + P / math.sqrt(d)) @ v
        A = np.outer(z, z)
        S = np.exp(A - A.max(1, keepdims=True))
        S /= S.sum(1, keepdims=True)
        return ((Y[0].reshape(2, 2) - S) ** 2).sum()

    hs = 1e-6
    grad = np.array([(loss(w + hs * e) - loss(w - hs * e)) / (2 * hs) for e in np.eye(d)])
    wn = w - gamma * grad
    wn *= math.sqrt(d) / np.linalg.norm(wn)
    W = w[None].copy()
    C = np.array([[w @ ustar, w @ Qp[0]]]) / math.sqrt(d)
    K.full_chunk(
        W,
        ustar,
        Qp,
        B,
        g,
        zs,
        Y,
        gamma,
        K.HEAD_MATRIX,
        np.zeros((2, 2)),
        *K.act_args(0),
        False,
        9.0,
        C,
    )
    np.testing.assert_allclose(W[0], wn, atol=1e-8)  # finite-difference error ~1e-10
    np.testing.assert_allclose(C[0, 0], wn @ ustar / math.sqrt(d), atol=1e-8)


def test_linear_tied_network_recovers_and_reports():
    model = TiedNetwork((z1 + z2) / sp.sqrt(2), L=2, activation="linear")
    r = simulate_sgd(model, 100, 0.1, 0, n_record=50)
    assert r.status == "converged"
    assert r.steps_escape is not None and r.steps_escape > 0
    assert r.t_escape == pytest.approx(r.steps_escape * 0.1 / 100)
    # the linear target is realisable: m -> 1 (noise term makes the fixed point 1 - O(gamma))
    assert r.final_m > 0.98 and r.minimum == "semantic"
    assert np.all(np.diff(r.steps) > 0) and r.steps[0] == 0
    np.testing.assert_allclose(r.t, r.steps * 0.1 / 100)


def test_invalid_inputs_raise_value_error():
    model = TiedNetwork(z1 * z2, L=2, activation="relu")
    with pytest.raises(ValueError, match="lr"):
        simulate_sgd(model, 50, -1.0, 0, steps=10)
    with pytest.raises(ValueError, match="too small"):
        simulate_sgd(model, 2, 0.1, 0, steps=10)
    with pytest.raises(ValueError, match="activation"):
        simulate_sgd(TiedNetwork(z1, L=2, activation="nope"), 50, 0.1, 0)
    with pytest.raises(ValueError, match="matrix target"):
        simulate_sgd(AttentionModel(z1, L=2), 50, 0.1, 0)


def test_seeds_in_parallel_and_resume(tmp_path):
    model = TiedNetwork(z1 * z2, L=2, activation="square")
    out = tmp_path / "runs.jsonl"
    seeds = [1, 2, 3]
    res = simulate_seeds(
        model, 30, 0.2, seeds, reduced=True, workers=2, progress=False, store=out, steps=2000
    )
    assert [r.seed for r in res] == seeds
    assert len(out.read_text().splitlines()) == 3
    # same seed -> same trajectory (per-seed determinism, whatever the process)
    again = simulate_seeds(
        model, 30, 0.2, [2], reduced=True, workers=1, progress=False, steps=2000
    )[0]
    np.testing.assert_allclose(again.m, res[1].m)
    # resume: nothing re-run, results read back from disk
    loaded = load_results(out)
    assert sorted(loaded) == seeds
    np.testing.assert_allclose(loaded[3].m, res[2].m)
    res2 = simulate_seeds(
        model, 30, 0.2, seeds + [4], reduced=True, workers=1, progress=False, store=out, steps=2000
    )
    assert len(out.read_text().splitlines()) == 4
    np.testing.assert_allclose(res2[0].m, res[0].m)


def test_ziggurat_normals_have_the_standard_normal_law():
    s = xoshiro_state(2024)
    x = np.empty(200_000)
    K.fill_normals(s, x)
    # mean/variance within 5 standard errors (SE = 1/sqrt(n), sqrt(2/n))
    assert abs(x.mean()) < 5 / math.sqrt(x.size)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / x.size)
    from scipy import stats

    assert stats.kstest(x, "norm").pvalue > 1e-3
    # the tail beyond the ziggurat base R = 3.4426 (sampled by the separate tail algorithm)
    p = 2 * stats.norm.sf(3.442619855899)
    frac = np.mean(np.abs(x) > 3.442619855899)
    assert abs(frac - p) < 5 * math.sqrt(p / x.size)


@pytest.mark.parametrize("head,act,L,kout,untied,B", CASES[:2] + CASES[4:])
def test_in_kernel_rng_chunk_equals_explicit_chunk(head, act, L, kout, untied, B):
    rng = np.random.default_rng(8)
    d, n, gamma = 30, 12, 0.3
    k = B.shape[1]
    ustar, Qp = _random_frame(rng, d, k)
    R = L if untied else 1
    W = rng.standard_normal((R, d))
    W *= math.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    C = np.concatenate([W @ ustar[:, None], W @ Qp.T], axis=1) / math.sqrt(d)
    zs = rng.standard_normal((n, L))
    Y = rng.uniform(0, 1, (n, kout))
    Rm = rng.standard_normal((L, L))
    s1, s2 = xoshiro_state(5), xoshiro_state(5)
    G = np.empty((n, L, d))
    K.fill_normals(s2, G)
    W1, C1, W2, C2 = W.copy(), C.copy(), W.copy(), C.copy()
    B = np.ascontiguousarray(B)
    o1 = K.full_chunk_rng(
        W1, ustar, Qp, B, s1, zs, Y, gamma, head, Rm, *K.act_args(act), untied, 0.5, C1
    )
    o2 = K.full_chunk(
        W2, ustar, Qp, B, G, zs, Y, gamma, head, Rm, *K.act_args(act), untied, 0.5, C2
    )
    np.testing.assert_array_equal(W1, W2)
    np.testing.assert_array_equal(C1, C2)
    assert o1 == o2
    np.testing.assert_array_equal(s1, s2)


def test_figures_registry():
    from theory.ssi.figures.sgd import FIGURES

    assert set(FIGURES) >= {
        "sgd-trajectories",
        "sgd-escape",
        "sgd-gain",
        "sgd-pathological",
        "sgd-fraction-positional",
        "sgd-fraction-positional-d100",
        "sgd-landscape-trajectories",
    }
    assert all(callable(f) for f in FIGURES.values())


# ----------------------------------------------------------------- block generator + fast kernel


def test_block_ziggurat_tables_are_the_equal_area_ziggurat():
    """R solves "top layer area = V" for C = 2048 layers (so the layers have equal area), the
    fast path's bit patterns are the table, and the fast-path thresholds stored in their low
    bits never exceed the exact rectangle ratios (a rounded-up threshold would accept wedge
    points: a wrong law)."""
    X, ratio, bits, V = BN.ZIG_X, BN.ZIG_RATIO, BN.ZIG_BITS, BN.ZIG_V
    C = BN.ZIG_C
    top = X[C - 1] * (1.0 - math.exp(-0.5 * X[C - 1] ** 2))
    # float64 recursion over 2048 layers (1.5e-11), then each X moved by <= 2^-42 relative to
    # hold the threshold bits; the areas are differences of nearby f values (condition number
    # ~ X^2 f / V ~ 1e3), hence ~6e-10: bound 1e-9 (a law error < 1e-9 in total variation)
    assert abs(top / V - 1.0) < 1e-9
    # every rectangle layer i >= 1 has area V: X[i] (f(X[i+1]) - f(X[i])) = V
    f = np.exp(-0.5 * X * X)
    areas = X[1:C] * (f[2 : C + 1] - f[1:C])
    np.testing.assert_allclose(areas, V, rtol=1e-9)
    assert X[0] * f[1] == pytest.approx(V, rel=1e-12)
    np.testing.assert_array_equal(bits.view(np.float64), X[:C])
    thr = (bits & np.uint64(2047)).astype(np.float64) / 2048
    # the rounding down costs < 2 / 2^11 of each layer (one decrement at most)
    assert np.all(thr <= ratio) and np.all(ratio - thr < 2.0 / 2048)
    # fast-path acceptance = mean threshold: 99.7 % (so ~0.26 % of draws take the slow path)
    assert 1.0 - thr.mean() < 0.003


def test_block_normals_have_the_standard_normal_law():
    S, s = BN.seed_block_state(2024)
    x = np.empty(2_000_000)
    BN.fill_block_normals(S, s, x)
    n = x.size
    from scipy import stats

    # moments within 4 standard errors: SE(mean) = 1/sqrt(n), SE(var) = sqrt(2/n),
    # SE(4th moment) = sqrt((105 - 9)/n), SE(3rd) = sqrt(15/n)
    assert abs(x.mean()) < 4 / math.sqrt(n)
    assert abs(x.var() - 1) < 4 * math.sqrt(2 / n)
    assert abs((x**3).mean()) < 4 * math.sqrt(15 / n)
    assert abs((x**4).mean() - 3) < 4 * math.sqrt(96 / n)
    assert stats.kstest(x, "norm").pvalue > 1e-3
    # quantiles: the fraction below each decile matches within 4 binomial SE
    for q in (0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.999):
        frac = np.mean(x < stats.norm.ppf(q))
        assert abs(frac - q) < 4 * math.sqrt(q * (1 - q) / n)
    # the tail beyond R = 4.216 (sampled by the separate tail algorithm), expected ~50 draws
    p = 2 * stats.norm.sf(BN.ZIG_R)
    k = np.sum(np.abs(x) > BN.ZIG_R)
    assert abs(k - n * p) < 4 * math.sqrt(n * p) + 1


def test_block_normals_reproducible_and_equal_to_the_python_replay():
    S1, s1 = BN.seed_block_state(11)
    S2, s2 = BN.seed_block_state(11)
    a = np.empty(5000)
    b = np.empty(5000)
    BN.fill_block_normals(S1, s1, a)
    BN.fill_block_normals(S2, s2, b)
    np.testing.assert_array_equal(a, b)  # same seed -> same stream
    S3, s3 = BN.seed_block_state(12)
    c = np.empty(5000)
    BN.fill_block_normals(S3, s3, c)
    assert not np.any(a == c)
    # the pure-Python replay (independent code, includes ~13 slow-path completions)
    ref = BN.block_normals_numpy_reference(11, 5000)
    np.testing.assert_array_equal(a, ref)
    # a (rows, width) fill is the flat fill of rows * width
    S4, s4 = BN.seed_block_state(11)
    buf = np.empty((2, 2 * BN.NB))
    BN.fill_rows(
        S4,
        s4,
        buf,
        np.empty(BN.NB, np.uint64),
        np.empty(buf.size, np.int64),
        np.empty(buf.size, np.uint64),
    )
    np.testing.assert_array_equal(buf.ravel(), BN.block_normals_numpy_reference(11, buf.size))


FAST_CASES = CASES + [
    (K.HEAD_NETWORK, 1, 2, 1, False, np.zeros((2, 0))),  # fused path, no encoding
    (K.HEAD_MATRIX, 0, 2, 4, False, np.array([[0.6], [-0.8]])),  # fused path, general B
]


@pytest.mark.parametrize("gamma", [0.3, 40.0])
@pytest.mark.parametrize("head,act,L,kout,untied,B", FAST_CASES)
def test_fast_kernel_matches_the_reference_kernel(head, act, L, kout, untied, B, gamma):
    """full_chunk_fast (block generator, fused passes, lazy scale) = full_chunk fed with the same
    rows (fill_steps) up to round-off, and leaves the generator states where fill_steps does.
    gamma = 40 moves |w / sig| out of [1/2, 2] often (16 in-loop rescalings for the matrix
    head), exercising the rescale branch of the lazy scale."""
    rng = np.random.default_rng(8)
    d, n = 300, 40
    k = B.shape[1]
    ustar, Qp = _random_frame(rng, d, k)
    R = L if untied else 1
    W = rng.standard_normal((R, d))
    W *= math.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    C = np.concatenate([W @ ustar[:, None], W @ Qp.T], axis=1) / math.sqrt(d)
    zs = rng.standard_normal((n, L))
    Y = rng.uniform(0, 1, (n, kout))
    Rm = rng.standard_normal((L, L))
    S1, s1 = BN.seed_block_state(5)
    S2, s2 = BN.seed_block_state(5)
    G = K.fill_steps(S2, s2, n, L, d)
    B = np.ascontiguousarray(B)
    W1, C1, W2, C2 = W.copy(), C.copy(), W.copy(), C.copy()
    h1, l1 = K.full_chunk_fast(
        W1, ustar, Qp, B, S1, s1, zs, Y, gamma, head, Rm, *K.act_args(act), untied, 0.5, C1
    )
    h2, l2 = K.full_chunk(
        W2, ustar, Qp, B, G, zs, Y, gamma, head, Rm, *K.act_args(act), untied, 0.5, C2
    )
    # 40 steps of O(d) sums in another order: round-off ~1e-14; 1e-9 leaves ample margin
    np.testing.assert_allclose(W1, W2, atol=1e-9)
    np.testing.assert_allclose(C1, C2, atol=1e-11)
    np.testing.assert_allclose(l1, l2, rtol=1e-9)
    assert h1 == h2
    np.testing.assert_allclose(np.linalg.norm(W1, axis=1), math.sqrt(d), rtol=1e-12)
    np.testing.assert_array_equal(S1, S2)
    np.testing.assert_array_equal(s1, s2)


def test_simulate_sgd_is_reproducible_per_seed():
    model = ps_model(1.0, 0.5)
    a = simulate_sgd(model, 200, 0.05, 3, steps=3000, n_record=10, start="origin")
    b = simulate_sgd(model, 200, 0.05, 3, steps=3000, n_record=10, start="origin")
    c = simulate_sgd(model, 200, 0.05, 4, steps=3000, n_record=10, start="origin")
    np.testing.assert_array_equal(a.m, b.m)
    np.testing.assert_array_equal(a.e, b.e)
    assert not np.array_equal(a.m, c.m)
