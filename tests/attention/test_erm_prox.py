"""The 2-D non-convex prox of the ERM model: global minimum, Jacobians, loss, parameters."""

import math

import numpy as np
import pytest

from theory import attention as A
from theory.attention import _kernels as K
from theory.attention import channel as C
from theory.attention import proximal as X

P = A.ERMParams()


def _objective_grid(w, t, V, s2, n=301):
    """Dense grid over the disk |x - w| <= sqrt(2 V ℓ(w)) that contains every minimiser."""
    lw = s2 * (
        (1 / (1 + np.exp(-w[0] * (w[0] - w[1]))) - t[0]) ** 2
        + (1 / (1 + np.exp(-w[1] * (w[1] - w[0]))) - t[1]) ** 2
    )
    R = math.sqrt(2 * V * lw) + 1e-9
    g = np.linspace(-R, R, n)
    X1, X2 = np.meshgrid(w[0] + g, w[1] + g, indexing="ij")
    a = 1 / (1 + np.exp(-X1 * (X1 - X2)))
    b = 1 / (1 + np.exp(-X2 * (X2 - X1)))
    F = ((X1 - w[0]) ** 2 + (X2 - w[1]) ** 2) / (2 * V) + s2 * ((a - t[0]) ** 2 + (b - t[1]) ** 2)
    return F.min(), (g[1] - g[0])


def _hard_cases(n, seed):
    """Large V (weak quadratic ⇒ many basins) and w near the bisector of the ±x* basins."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        V = float(np.exp(rng.uniform(np.log(0.5), np.log(300))))
        h = rng.normal(size=2) * rng.uniform(0.3, 1.5)
        om = rng.uniform()
        t = K.teacher_t(h[0], h[1], om, 0.6, 0.6)
        z = np.array(K.zero_loss_point(*t))
        perp = np.array([-z[1], z[0]])
        kind = rng.integers(3)
        if kind == 0:  # near the jump between the +x* and -x* basins
            w = perp * rng.normal() * 2 + z * rng.normal() * 0.05 + rng.normal(size=2) * 0.05
        elif kind == 1:  # anywhere, far out (axis / diagonal valleys)
            w = rng.normal(size=2) * rng.uniform(1, 8)
        else:
            w = rng.normal(size=2) * 0.5
        out.append((V, w, t, h, om))
    return out


def test_prox_is_global_minimum_on_a_grid_of_hard_cases():
    # the grid minimum is an upper bound on the true minimum up to the grid's resolution: the
    # objective changes by at most |∇f|·δ between a grid point and the minimiser, and we also
    # polish the grid minimum's neighbourhood by demanding the prox value be <= grid min + tol
    s2 = P.s2
    worst = 0.0
    for V, w, t, _, _ in _hard_cases(100, seed=11):
        x1, x2, f, ok = K.prox_point(w[0], w[1], t[0], t[1], V, s2)
        fg, _ = _objective_grid(w, t, V, s2)
        assert ok
        worst = max(worst, f - fg)
        # f must not exceed the dense-grid minimum (it should be below it, by up to the grid's
        # discretisation error which is ~|H| δ² ~ 1e-6 here)
        assert f <= fg + 1e-12, (V, w, t, f, fg)
    assert worst <= 1e-12


def test_abandoning_descents_that_merge_into_a_known_minimum_changes_no_minimiser():
    # prox_point stops a start's Newton descent once it reaches (within MERGE_TOL/(1+|x_k|)) a
    # local minimum already found; the reference runs every start to convergence
    # (K.newton) and keeps the lowest value.  Hard nodes: |w| up to 20, V in [0.01, 300].
    rng = np.random.default_rng(7)
    n = 20_000
    w = rng.uniform(-20, 20, (n, 2)) * rng.uniform(0, 1, (n, 1))
    t = rng.uniform(0, 1, (n, 2))
    V = np.exp(rng.uniform(math.log(0.01), math.log(300), n))
    worse = 0
    for i in range(n):
        x1, x2, f, _ = K.prox_point(w[i, 0], w[i, 1], t[i, 0], t[i, 1], V[i], 0.25)
        z1, z2 = K.zero_loss_point(t[i, 0], t[i, 1])
        best = min(
            K.newton(
                *K.start_point(k, w[i, 0], w[i, 1], z1, z2),
                w[i, 0],
                w[i, 1],
                t[i, 0],
                t[i, 1],
                V[i],
                0.25,
            )[2]
            for k in range(K.N_STARTS)
        )
        worse += f > best + 1e-13 * (1 + abs(best))
    assert worse == 0


def test_prox_matches_scipy_node_by_node():
    rng = np.random.default_rng(3)
    n = 20  # x 3 values of V, 25 BFGS starts each (scipy is slow: ~0.5 s per node)
    w = rng.normal(size=(n, 2)) * rng.uniform(0.1, 3, size=(n, 1))
    h = rng.normal(size=(n, 2)) * 0.5
    for V in (0.3, 4.0, 25.0):
        r = A.prox(w, h, V, P)
        xs, vals = X.prox_reference(w, h, V, P)
        # values: scipy's BFGS stops at gtol 1e-11, so values agree to ~1e-12
        np.testing.assert_allclose(r.value, vals, rtol=0, atol=1e-10)
        # the numba prox is never worse than scipy from 25 starts
        assert np.all(r.value <= vals + 1e-12)
        # minimisers agree wherever the minimum is unique (distinct values → same point)
        np.testing.assert_allclose(r.x, xs, atol=2e-5)


def test_prox_stationarity_and_second_order():
    rng = np.random.default_rng(5)
    w = rng.normal(size=(200, 2))
    h = rng.normal(size=(200, 2)) * 0.5
    V = 5.0
    r = A.prox(w, h, V, P)
    grad = (r.x - w) / V + A.loss_grad(r.x, h, P)
    assert np.max(np.abs(grad)) < 1e-9
    # Jacobian dx/dw = (I + V ∇²ℓ)^{-1} must have positive determinant at a minimum
    assert np.all(np.linalg.det(r.jac) > 0)


def test_prox_jacobians_match_finite_differences():
    rng = np.random.default_rng(7)
    w = rng.normal(size=(80, 2)) * 0.7
    h = rng.normal(size=(80, 2)) * 0.5
    V = 2.0
    r = A.prox(w, h, V, P)
    eps = 1e-6
    for j in range(2):
        dw = np.zeros(2)
        dw[j] = eps
        rp = A.prox(w + dw, h, V, P, jac=False)
        rm = A.prox(w - dw, h, V, P, jac=False)
        fd = (rp.x - rm.x) / (2 * eps)
        smooth = np.abs(rp.x - rm.x).sum(1) < 1e-3  # skip the rare node sitting on a jump
        np.testing.assert_allclose(r.jac[smooth, :, j], fd[smooth], atol=1e-5)
        rp = A.prox(w, h + dw, V, P, jac=False)
        rm = A.prox(w, h - dw, V, P, jac=False)
        fd = (rp.x - rm.x) / (2 * eps)
        smooth = np.abs(rp.x - rm.x).sum(1) < 1e-3
        np.testing.assert_allclose(r.jac_h[smooth, :, j], fd[smooth], atol=1e-5)


def test_prox_value_is_the_objective_at_x():
    rng = np.random.default_rng(8)
    w = rng.normal(size=(50, 2))
    h = rng.normal(size=(50, 2))
    V = 3.0
    r = A.prox(w, h, V, P)
    f = ((r.x - w) ** 2).sum(1) / (2 * V) + A.loss(r.x, h, P)
    np.testing.assert_allclose(r.value, f, atol=1e-14)


def test_loss_matches_full_matrix_reference_and_gradient():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(100, 2)) * 2
    h = rng.normal(size=(100, 2))
    for p in (P, A.ERMParams(omega=0.0), A.ERMParams(omega=1.0, A=[[0.9, 0.1], [0.3, 0.7]])):
        np.testing.assert_allclose(A.loss(x, h, p), C.loss_full(x, h, p), atol=1e-15)
        eps = 1e-6
        g = A.loss_grad(x, h, p)
        for j in range(2):
            d = np.zeros(2)
            d[j] = eps
            fd = (A.loss(x + d, h, p) - A.loss(x - d, h, p)) / (2 * eps)
            np.testing.assert_allclose(g[:, j], fd, atol=1e-8)
    # numba scalar loss equals the numpy one
    t = A.teacher_diag(h, P)
    nb = np.array([K.loss_value(x[i, 0], x[i, 1], t[i, 0], t[i, 1], P.s2) for i in range(100)])
    np.testing.assert_allclose(nb, A.loss(x, h, P), atol=1e-15)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(sigma=0.0), "sigma"),
        (dict(sigma=-1), "sigma"),
        (dict(lam=-0.1), "lam"),
        (dict(omega=1.5), "omega"),
        (dict(omega=-0.1), "omega"),
        (dict(A=[[0.6, 0.5], [0.4, 0.6]]), "row-stochastic"),
        (dict(A=[[1.0]]), "2x2"),
        (dict(A=[[1.2, -0.2], [0.4, 0.6]]), "row-stochastic"),
    ],
)
def test_params_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        A.ERMParams(**kw)


def test_prox_input_validation():
    with pytest.raises(ValueError, match="V"):
        A.prox(np.zeros((3, 2)), np.zeros((3, 2)), 0.0, P)
    with pytest.raises(ValueError, match="shape"):
        A.prox(np.zeros((3, 3)), np.zeros((3, 3)), 1.0, P)
    with pytest.raises(ValueError, match="alpha"):
        A.fixed_point(0.0, P)
    with pytest.raises(ValueError, match="branch"):
        A.fixed_point(1.0, P, branch="nope")


def test_linear_baseline_against_adaptive_quadrature():
    from scipy import integrate
    from scipy.special import expit

    rho = P.rho

    # E[S11^k] with h ~ N(0, rho I_2), directly in (h1, h2) with scipy's adaptive dblquad
    def mom(k):
        f = lambda h2, h1: (
            expit(h1 * (h1 - h2)) ** k
            * math.exp(-(h1**2 + h2**2) / (2 * rho))
            / (2 * math.pi * rho)
        )
        L = 12 * math.sqrt(rho)
        return integrate.dblquad(f, -L, L, -L, L, epsabs=1e-13, epsrel=1e-12)[0]

    m1, m2 = mom(1), mom(2)
    for omega in (0.0, 0.3, 1.0):
        p = A.ERMParams(omega=omega)
        ref = 2 * p.s2 * (1 - omega) ** 2 * (m2 - m1**2)
        assert A.linear_baseline(p) == pytest.approx(ref, rel=1e-9, abs=1e-15)
    B = A.linear_baseline_B(P)
    np.testing.assert_allclose(B.sum(1), 1.0)
    assert B[0, 0] == pytest.approx(0.3 * 0.6 + 0.7 * m1, rel=1e-10)


def test_numba_kernels_match_their_numpy_references():
    # sigmoid, the teacher's diagonal and its Jacobian, the loss and the prox objective's
    # gradient and Hessian: numba (per node) against theory.attention.channel (vectorised)
    rng = np.random.default_rng(12)
    n = 300
    x = rng.normal(size=(n, 2)) * 2
    h = rng.normal(size=(n, 2))
    w = rng.normal(size=(n, 2))
    kap, V = rng.uniform(0.1, 1.0, n), rng.uniform(0.1, 20.0, n)
    u = rng.normal(size=n) * 30
    np.testing.assert_allclose([K.sig(v) for v in u], C.sigmoid(u), rtol=1e-15, atol=1e-300)
    for om in (0.0, 0.3, 1.0):
        p = A.ERMParams(omega=om, A=[[0.7, 0.3], [0.2, 0.8]])
        t = A.teacher_diag(h, p)
        tk = np.array([K.teacher_t(a, b, om, 0.7, 0.8) for a, b in h])
        np.testing.assert_allclose(tk, t, rtol=1e-15, atol=1e-16)
        jk = np.array([K.teacher_t_jac(a, b, om) for a, b in h]).reshape(n, 2, 2)
        np.testing.assert_allclose(jk, C.teacher_diag_jac(h, om), rtol=1e-13, atol=1e-15)
    t1, t2 = rng.uniform(-0.05, 1.05, n), rng.uniform(-0.05, 1.05, n)
    g, H = C.sample_loss_hess(x, kap, t1, t2)
    for i in range(n):
        f, g1, g2, H11, H12, H22 = K.fgh(
            x[i, 0], x[i, 1], w[i, 0], w[i, 1], t1[i], t2[i], V[i], kap[i]
        )
        ref = ((x[i] - w[i]) ** 2).sum() / (2 * V[i]) + C.sample_loss(x[i], kap[i], t1[i], t2[i])
        assert f == pytest.approx(ref, rel=1e-13, abs=1e-15)
        np.testing.assert_allclose([g1, g2], g[i] + (x[i] - w[i]) / V[i], rtol=1e-12, atol=1e-14)
        Hr = H[i] + np.eye(2) / V[i]
        np.testing.assert_allclose(
            [H11, H12, H22], [Hr[0, 0], Hr[0, 1], Hr[1, 1]], rtol=1e-12, atol=1e-14
        )


def test_one_prox_serves_the_effective_and_the_exact_channel():
    # the effective prox (teacher fields) is prox_rows with kappa = sigma^2, t = diag T(h*); the
    # exact channel's per-sample (kappa, t) go through the same kernel; both against the
    # vectorised numpy Newton reference (its own start set): same global minimum
    rng = np.random.default_rng(21)
    n = 500
    w = rng.normal(size=(n, 2)) * 1.2
    h = rng.normal(size=(n, 2)) * 0.5
    eff = A.prox(w, h, 4.0, P)
    kap, t1, t2 = C.effective_channel(h, P)
    rows = A.prox_rows(w, 4.0, kap, t1, t2)
    np.testing.assert_array_equal(eff.x, rows.x)
    ref = X.prox_newton_reference(w, 4.0, kap, t1, t2)
    np.testing.assert_allclose(eff.value, ref.value, rtol=1e-10, atol=1e-13)
    kap_x = rng.uniform(0.2, 0.3, n)  # exact channel: per-sample kappa, targets off [0, 1]
    a, b = rng.uniform(-0.05, 1.05, n), rng.uniform(-0.05, 1.05, n)
    V = np.exp(rng.uniform(np.log(0.1), np.log(30), n))
    ex = A.prox_rows(w, V, kap_x, a, b)
    rx = X.prox_newton_reference(w, V, kap_x, a, b)
    assert np.all(ex.value <= rx.value + 1e-12)  # never worse than the reference
    np.testing.assert_allclose(ex.value, rx.value, rtol=1e-10, atol=1e-13)
    # the local ("warm") prox from the global minimiser stays there
    loc = A.prox_rows(w, V, kap_x, a, b, x_start=ex.x)
    np.testing.assert_allclose(loc.x, ex.x, atol=1e-12)
    np.testing.assert_allclose(loc.jac, ex.jac, atol=1e-9)
