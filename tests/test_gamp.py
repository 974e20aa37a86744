"""GAMP for the positional-semantic model: the 2-D prox, fixed points, state evolution."""

import numpy as np
import pytest
from scipy.optimize import minimize

from theory.simulate.erm_gd import lbfgs, make_problem, risk
from theory.simulate.gamp import SEState, _phi, prox, run_gamp, state_evolution


def _hard_cases(n, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, 2)) * 1.5
    w[: n // 4, 1] = w[: n // 4, 0] + rng.normal(0, 0.05, n // 4)  # near the valley x1 = x2
    w[n // 4: n // 2] *= 0.1  # near the saddle at the origin
    V = np.exp(rng.uniform(np.log(0.1), np.log(30), n))  # GAMP meets V ~ 10-20
    kap = rng.uniform(0.2, 0.3, n)  # exact channel: kappa = |delta|^2/(2d) ~ sigma^2
    a = rng.uniform(-0.05, 1.05, n)  # a*, b* of the exact channel can leave [0, 1] slightly
    b = rng.uniform(-0.05, 1.05, n)
    return w, V, kap, a, b


def test_prox_is_the_global_minimum():
    n = 40
    w, V, kap, a, b = _hard_cases(n, 0)
    p = prox(w, V, kap, a, b)
    for i in range(n):
        def f(x, i=i):
            return ((x - w[i]) ** 2).sum() / (2 * V[i]) + _phi(x[None], kap[i], a[i], b[i])[0]
        # brute force: dense grid over the disk that must contain every minimiser, then polish
        R = np.sqrt(2 * V[i] * _phi(w[i][None], kap[i], a[i], b[i])[0]) + 1e-9
        u = np.linspace(-R, R, 161)
        P = np.stack(np.meshgrid(u, u), -1).reshape(-1, 2) + w[i]
        F = ((P - w[i]) ** 2).sum(-1) / (2 * V[i]) + _phi(P, kap[i], a[i], b[i])
        r = minimize(f, P[np.argmin(F)], method="Nelder-Mead",
                     options=dict(xatol=1e-12, fatol=1e-15, maxiter=5000))
        assert p.value[i] <= min(r.fun, F.min()) + 1e-12, (i, p.value[i], r.fun)
        assert p.value[i] == pytest.approx(f(p.x[i]), rel=1e-14)


def test_prox_jacobian_matches_finite_differences():
    n = 200
    w, V, kap, a, b = _hard_cases(n, 1)
    p = prox(w, V, kap, a, b)
    eps = 1e-6
    J = np.zeros((n, 2, 2))
    for k in range(2):
        dw = np.zeros(2)
        dw[k] = eps
        J[:, :, k] = (prox(w + dw, V, kap, a, b).x - prox(w - dw, V, kap, a, b).x) / (2 * eps)
    err = np.abs(J - p.jac).max(axis=(1, 2))
    # away from the (measure-zero) jumps of the global minimiser the prox is smooth: the
    # central difference is accurate to ~1e-8; allow a couple of cases straddling a jump
    assert np.mean(err < 1e-5) >= 0.98
    # first-order condition: x - w + V grad(phi) = 0
    from theory.simulate.erm_data import sample_loss_grad

    _, g = sample_loss_grad(p.x, kap, a, b, 0.0)
    assert np.abs(p.x - w + V[:, None] * g).max() < 1e-10


def test_prox_agrees_with_the_theory_prox():
    # E1's numba prox (effective channel ℓ = σ²[(a - t1)² + (b - t2)²]) and ours: same minimum
    ps = pytest.importorskip("theory.models.positional_semantic")
    rng = np.random.default_rng(3)
    n = 400
    params = ps.ERMParams(omega=0.3)
    w = rng.standard_normal((n, 2)) * 0.8
    hs = rng.standard_normal((n, 2)) * 0.5
    V = 3.0
    ref = ps.prox(w, hs, V, params)
    t = ps.teacher_diag(hs, params)
    ours = prox(w, V, np.full(n, 0.25), t[:, 0], t[:, 1])
    np.testing.assert_allclose(ours.value, ref.value, rtol=1e-10, atol=1e-13)
    same = np.abs(ours.x - ref.x).max(1) < 1e-6  # differs only on ties between two basins
    assert same.mean() > 0.99
    np.testing.assert_allclose(ours.jac[same], ref.jac[same], atol=1e-6)


@pytest.mark.parametrize("init", ["semantic", "positional"])
def test_gamp_fixed_point_is_a_stationary_point_of_the_risk(init):
    # exact finite-d channel: at a fixed point lam Q = -grad sum_mu l_mu, so GD does not move
    alpha, d = 2.0 if init == "semantic" else 1.0, 150
    pb = make_problem(alpha, 0.3, d, seed=0, n_test=200)
    r, Q = run_gamp(alpha, 0.3, d, init, 0, problem=pb, mixing=0.3, V0=10.0, max_iter=400,
                    tol=1e-7, return_weights=True)
    assert r.status == "converged", r.message
    L, g = risk(Q, pb.train, 0.01)
    assert np.linalg.norm(g) / np.sqrt(d) < 1e-6  # undamped relative change 1e-7 -> tiny grad
    Q2, st, _, _, _ = lbfgs(Q, pb.train, 0.01, tol=1e-9)
    assert np.linalg.norm(Q2 - Q) / np.linalg.norm(Q) < 1e-5
    assert r.stability < 1  # the replicon condition of a convergent GAMP
    h = r.history
    assert len(h["q"]) == r.iterations + 1 and np.isfinite(h["V"]).all()


def test_gamp_bad_input():
    with pytest.raises(ValueError):
        run_gamp(1.0, 0.3, 50, mixing=0.0)
    with pytest.raises(ValueError):
        run_gamp(-1.0, 0.3, 50)
    with pytest.raises(ValueError):
        run_gamp(1.0, 0.3, 50, init="sideways")


@pytest.mark.slow
def test_gamp_first_iterations_follow_the_state_evolution():
    # undamped GAMP at d = 1000 vs the undamped state equations (Monte Carlo, 1e5 draws,
    # antithetic) from the same (q, m, theta, V); the undamped map is unstable, so compare the
    # first two iterations.  Finite-d deviations of an O(1) overlap are O(1/sqrt(d)) ~ 0.03
    # relative; m starts at 1^T Q*/d = O(1/sqrt(d)) and its update carries O(1/sqrt(d))
    # absolute noise from the data.
    alpha, d = 2.0, 1000
    pb = make_problem(alpha, 0.3, d, seed=0, n_test=100)
    r = run_gamp(alpha, 0.3, d, "semantic", 0, problem=pb, mixing=1.0, V0=10.0, max_iter=2,
                 prox_mode="global")
    h = r.history
    se = state_evolution(SEState(h["q"][0], h["m"][0], h["theta"][0], h["V"][0]), alpha, 0.3,
                         2, n_mc=100_000, rho=pb.teacher.rho)
    for t in (1, 2):
        for k in ("q", "theta", "V"):
            assert h[k][t] == pytest.approx(se[k][t], rel=0.15 if t == 2 else 0.05), (t, k)
        assert abs(h["m"][t] - se["m"][t]) < 4 / np.sqrt(d)
