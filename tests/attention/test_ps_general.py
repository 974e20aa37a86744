"""Generalised replica state equations (docs/attention.md §10) and their finite-d simulator.

Independent references: the L = 2, r = 1 code (theory.attention: its own prox, split
quadrature rule and fixed points), scipy BFGS for the prox, finite differences and
the full-token risk for the simulator, and finite-d L-BFGS for the new cases (slow tests)."""

import argparse
import json
import math

import numpy as np
import pytest

from theory import attention as ps
from theory.attention import general as pg
from theory.attention import state_equations as se2
from theory.attention.finite_d import general as eg
from theory.attention.general import channel as gc
from theory.attention.general import state_equations as gs

P2 = pg.GeneralParams()  # L = 2, r = r_t = 1, reference A, G = [[1, -1], [-1, 1]]
P2REF = ps.ERMParams()


def _o(q, m, theta, V):
    """Overlaps of the general code for the L = 2 reference values (m_ℓ = s_ℓ m)."""
    return dict(
        q=np.array([[q]]), m=np.array([[m], [-m]]), theta=np.array([[theta]]), V=np.array([[V]])
    )


# --------------------------------------------------------------------------- parameters


def test_defaults_reduce_to_the_reference_and_bad_input_is_rejected():
    assert np.allclose(P2.A_array, [[0.6, 0.4], [0.4, 0.6]])
    assert np.allclose(P2.G_array, [[1, -1], [-1, 1]])
    assert np.allclose(P2.rho_array, [[0.25]])
    G3 = pg.simplex_gram(3)
    assert np.allclose(np.diag(G3), 1) and np.allclose(G3.sum(axis=1), 0)
    with pytest.raises(ValueError, match="row-stochastic"):
        pg.GeneralParams(A=[[0.5, 0.6], [0.4, 0.6]])
    with pytest.raises(ValueError, match="3x3"):
        pg.GeneralParams(L=3, A=[[0.6, 0.4], [0.4, 0.6]])
    with pytest.raises(ValueError, match="positive semi-definite"):
        pg.GeneralParams(G=[[1, 2], [2, 1]])
    with pytest.raises(ValueError, match="integer >= 2"):
        pg.GeneralParams(L=1)
    with pytest.raises(ValueError, match="integer >= 1"):
        pg.GeneralParams(r=0)
    with pytest.raises(ValueError, match="omega"):
        pg.GeneralParams(omega=1.5)
    with pytest.raises(ValueError, match="positive definite"):
        pg.GeneralParams(rho=-1.0)


# --------------------------------------------------------------------------- loss and prox


@pytest.mark.parametrize("L,r,rt", [(2, 1, 1), (3, 2, 2), (4, 1, 2)])
def test_numba_loss_gradient_matches_numpy_and_finite_differences(L, r, rt):
    p = pg.GeneralParams(L=L, r=r, r_t=rt)
    rng = np.random.default_rng(L * 10 + r)
    x = rng.standard_normal((20, L, r))
    T = gc.teacher_matrix(0.5 * rng.standard_normal((20, L, rt)), p)
    v1, g1 = gc.loss_grad_reference(x, T, p.s2)
    v2, g2 = gc.loss_grad(x, T, p.s2)
    assert np.allclose(v1, v2, rtol=1e-13, atol=1e-16)
    assert np.allclose(g1, g2, rtol=1e-12, atol=1e-15)
    assert np.allclose(v1, gc.loss(x, T, p.s2), rtol=1e-13)
    E = rng.standard_normal(x.shape)
    h = 1e-6
    fd = (gc.loss(x + h * E, T, p.s2) - gc.loss(x - h * E, T, p.s2)) / (2 * h)
    # central differences: O(h²) truncation + 1e-16/h round-off ≈ 1e-10
    assert np.allclose(fd, (g1 * E).sum(axis=(1, 2)), atol=1e-9)


@pytest.mark.parametrize("V", [0.5, 3.0, 11.0, 25.0])
def test_prox_reduces_to_the_L2_global_prox(V):
    # the L = 2 code's prox has its own start set (zero-loss points, ...): same global minimum
    rng = np.random.default_rng(1)
    w = rng.standard_normal((1500, 2, 1)) * 1.5
    hs = rng.standard_normal((1500, 2, 1)) * 0.5
    a = pg.prox(w, hs, V, P2)
    b = ps.prox(w[:, :, 0], hs[:, :, 0], V, P2REF)
    assert a.ok.all()
    # values to round-off (a different local minimum would differ by >> 1e-12)
    assert np.abs(a.value - b.value).max() < 1e-12


@pytest.mark.parametrize("L,r,rt", [(3, 1, 1), (2, 2, 1), (3, 2, 2)])
def test_prox_global_minimum_against_scipy_multistart(L, r, rt):
    p = pg.GeneralParams(L=L, r=r, r_t=rt)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((12, L, r)) * 0.8
    hs = rng.standard_normal((12, L, rt)) * 0.5
    for V in (1.0, 10.0):
        a = pg.prox(w, hs, V * np.eye(r), p)
        _, vals = pg.prox_reference(w, hs, V * np.eye(r), p, n_random=16, rng=3)
        # numba must never be above the best of ~25 BFGS runs (1e-12: round-off)
        assert (a.value - vals).max() < 1e-12


def test_prox_symmetries_behind_the_branch_invariants():
    # S(-x) = S(x) and T(-h*) = T(h*): the prox is odd under (w, h*) → -(w, h*) (so m = 0 is
    # invariant: E[g] = 0) and even in h* alone (so θ = 0 is invariant: E[g ηᵀ] = 0)
    p = pg.GeneralParams(L=3, r=2, r_t=1)
    rng = np.random.default_rng(4)
    w = rng.standard_normal((200, 3, 2)) * 0.7
    hs = rng.standard_normal((200, 3, 1)) * 0.5
    V = np.array([[2.0, 0.3], [0.3, 1.5]])
    a = pg.prox(w, hs, V, p)
    b = pg.prox(-w, -hs, V, p)
    c = pg.prox(w, -hs, V, p)
    assert np.allclose(a.value, b.value, atol=1e-14) and np.allclose(a.value, c.value, atol=1e-14)
    unique = np.abs(a.x - (-b.x)).max(axis=(1, 2)) < 1e-6  # ties between basins: measure zero
    assert unique.mean() > 0.99
    assert np.allclose(a.x, c.x, atol=1e-6)


# --------------------------------------------------------------------------- state equations


def test_ridge_step_and_free_energy_reduce_to_L2_algebra():
    rng = np.random.default_rng(2)
    qh, mh, th, Vh = 0.3, 0.7, 0.4, 0.9
    q, m, theta, V = 0.2, 0.15, 0.1, 3.0
    # general m̂_ℓ = α E[g_ℓ]; reference m̂ = α E[g_1 - g_2]: any split with m̂1 - m̂2 = mh
    split = rng.uniform()
    h = dict(
        qhat=np.array([[qh]]),
        mhat=np.array([[mh * split], [mh * (split - 1)]]),
        thetahat=np.array([[th]]),
        Vhat=np.array([[Vh]]),
    )
    o = pg.overlaps_from_hats(h, P2)
    ref = ps.overlaps_from_hats(qh, mh, th, Vh, P2REF)
    assert o["q"][0, 0] == pytest.approx(ref["q"], rel=1e-14)
    assert o["V"][0, 0] == pytest.approx(ref["V"], rel=1e-14)
    assert o["theta"][0, 0] == pytest.approx(ref["theta"], rel=1e-14)
    assert np.allclose(o["m"].ravel(), [ref["m"], -ref["m"]], rtol=1e-14)
    # Φ: the general m enters as Σ m_ℓ m̂_ℓ = m (m̂1 - m̂2)
    EM = 0.0123
    phi = pg.free_energy(2.0, _o(q, m, theta, V), h, EM, P2)
    phi_ref = ps.free_energy(
        2.0,
        dict(q=q, m=m, theta=theta, V=V),
        dict(qhat=qh, mhat=mh, thetahat=th, Vhat=Vh),
        EM,
        P2REF,
    )
    assert phi == pytest.approx(phi_ref, rel=1e-13)


def test_ridge_step_is_the_stationary_point_of_phi_in_the_hats():
    # ∂Φ/∂(hats) = 0 at the ridge-step overlaps (general L = 3, r = 2, r_t = 2), by finite
    # differences: the closed-form ridge step and Φ are consistent.
    p = pg.GeneralParams(L=3, r=2, r_t=2, omega=0.4)
    rng = np.random.default_rng(5)

    def spd(k):
        a = rng.standard_normal((k, k))
        return a @ a.T + k * np.eye(k)

    h = dict(
        qhat=spd(2),
        mhat=rng.standard_normal((3, 2)),
        thetahat=rng.standard_normal((2, 2)),
        Vhat=spd(2),
    )
    o = pg.overlaps_from_hats(h, p)
    eps = 1e-6
    for k in h:
        for idx in np.ndindex(h[k].shape):
            hp = {a: b.copy() for a, b in h.items()}
            hm = {a: b.copy() for a, b in h.items()}
            hp[k][idx] += eps
            hm[k][idx] -= eps
            if k in ("qhat", "Vhat"):  # symmetric perturbation
                hp[k][idx[::-1]] = hp[k][idx]
                hm[k][idx[::-1]] = hm[k][idx]
            d = pg.free_energy(1.0, o, hp, 0.0, p) - pg.free_energy(1.0, o, hm, 0.0, p)
            assert abs(d / (2 * eps)) < 1e-7, (k, idx, d / (2 * eps))


def test_channel_matches_the_L2_split_rule_within_qmc_error():
    # expectations at the L = 2 code's positional fixed point (the prox jumps there): QMC with
    # 4 scramblings of 2^12 points against the split rule; 4 standard errors + 1e-3 relative
    # for the split rule's own accuracy (BENCHMARKS.md "ERM (replica theory)")
    q, m, V = 0.0511, 0.2582, 11.37
    nodes = pg.make_nodes(P2, 2**12, 4, rng=11)
    ch = gs.channel(_o(q, m, 0.0, V), P2, nodes)
    ref = se2.channel(q, m, 0.0, V, P2REF, ps.make_rule("split", 8, n_r=12, n_phi=24))
    pairs = dict(
        g2=np.einsum("Raa->R", ch["gg"]),
        sg=ch["g"][:, 0, 0] - ch["g"][:, 1, 0],
        gxi=np.einsum("Raa->R", ch["gxi"]),
        M=ch["M"],
        eps_g=ch["eps_g"],
        geta=np.einsum("Raa->R", ch["geta"]),
    )
    for k, reps in pairs.items():
        se = reps.std(ddof=1) / 2
        assert abs(reps.mean() - ref[k]) < 4 * se + 1e-3 * abs(ref[k]) + 1e-12, (
            k,
            reps.mean(),
            ref[k],
            se,
        )


@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_L2_fixed_point_is_a_fixed_point_of_the_general_map(branch):
    # one application of the general map at the L = 2 code's fixed point returns it within the
    # QMC error (4 SE from 4 scramblings, + the reference's own 1e-3 accuracy); hats agree too
    ref = ps.fixed_point(
        2.0, P2REF, branch, rule=ps.make_rule("split", 8, n_r=12, n_phi=24), coarse=False
    )
    assert ref.converged
    o = _o(ref.q, ref.m, ref.theta, ref.V)
    nodes = pg.make_nodes(P2, 2**12, 4, rng=3)
    ch = gs.channel(o, P2, nodes)
    outs = []
    for k in range(4):
        c = gs.pooled(
            {
                a: (
                    b[k : k + 1]
                    if isinstance(b, np.ndarray) and b.ndim >= 1 and b.shape[0] == 4
                    else b
                )
                for a, b in ch.items()
            }
        )
        outs.append(pg.overlaps_from_hats(pg.hats_from_channel(2.0, o, c, P2), P2))
    for key, val in (("q", ref.q), ("V", ref.V), ("theta", ref.theta), ("m", ref.m)):
        reps = np.array([abs(x[key].ravel()[0]) for x in outs])
        se = reps.std(ddof=1) / 2
        assert abs(reps.mean() - val) < 4 * se + 2e-3 * abs(val) + 1e-9, (key, reps, val)


def test_fixed_point_status_and_error_bars_on_a_cheap_rule():
    r = pg.fixed_point(2.0, P2, "semantic", n=2**10, n_rep=3, tol=1e-5)
    assert r.status == "converged" and r.branch == "semantic"
    assert np.all(r.m == 0) and r.q_err.shape == (1, 1) and r.q_err[0, 0] > 0
    d = r.to_dict()
    json.dumps(d)  # JSON-able (arrays → lists)
    with pytest.raises(ValueError, match="branch"):
        pg.fixed_point(2.0, P2, "nonsense")
    with pytest.raises(ValueError, match="mixing"):
        pg.fixed_point(2.0, P2, mixing=0.0)
    with pytest.raises(ValueError, match="power-of-2"):
        pg.make_nodes(P2, 1000)


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_reduction_full_solve_reproduces_the_L2_fixed_point(branch):
    # the full solve from the cold start (2^12 x 4 QMC) against the L = 2 code (split rule,
    # independent): q, m, θ, V, ε_t, ε_g within 4 QMC standard errors + 1e-3 relative (the
    # reference's own quadrature accuracy)
    r = pg.fixed_point(2.0, P2, branch, n=2**12, n_rep=4)
    ref = ps.fixed_point(2.0, P2REF, branch)
    assert r.converged and ref.converged
    for key, val, mine in (
        ("q", ref.q, r.q[0, 0]),
        ("V", ref.V, r.V[0, 0]),
        ("theta", ref.theta, abs(r.theta[0, 0])),
        ("m", ref.m, abs(r.m[0, 0])),
        ("eps_t", ref.eps_t, r.eps_t),
        ("eps_g", ref.eps_g, r.eps_g),
    ):
        se = float(np.ravel(getattr(r, f"{key}_err"))[0])
        assert abs(mine - val) < 4 * se + 1e-3 * abs(val) + 1e-9, (key, mine, val, se)


# --------------------------------------------------------------------------- simulator


@pytest.mark.parametrize("L,r,rt", [(2, 1, 1), (3, 2, 2)])
def test_simulator_risk_is_exact_and_gradient_matches_finite_differences(L, r, rt):
    p = pg.GeneralParams(L=L, r=r, r_t=rt)
    pr = eg.make_problem(1.0, p, d=30, seed=1, keep_tokens=True)
    assert np.allclose(pr.P @ pr.P.T, p.G_array, atol=1e-12)
    assert np.allclose(p.s2 * pr.qstar.T @ pr.qstar / 30, p.rho_array, atol=1e-12)
    if L == 2:  # the reference encodings ±1_d/√d
        assert np.allclose(pr.P[0], 1 / np.sqrt(30)) and np.allclose(pr.P[1], -1 / np.sqrt(30))
    Q = np.random.default_rng(0).standard_normal((30, r)) * 1.3
    v, g = eg.risk(Q, pr.train, p.lam)
    assert v == pytest.approx(eg.naive_risk(Q, pr.train, p), rel=1e-12)
    E = np.random.default_rng(1).standard_normal(Q.shape)
    h = 1e-6
    fd = (eg.risk(Q + h * E, pr.train, p.lam)[0] - eg.risk(Q - h * E, pr.train, p.lam)[0]) / (2 * h)
    assert fd == pytest.approx((g * E).sum(), rel=1e-6, abs=1e-9)


def test_simulator_lbfgs_converges_and_reports_overlaps():
    r = eg.simulate(2.0, P2, d=60, init="positional", seed=0, n_test=500)
    assert r.status == "converged"
    assert r.q.shape == (1, 1) and r.m.shape == (2, 1) and r.theta.shape == (1, 1)
    assert r.m[0, 0] == pytest.approx(-r.m[1, 0])  # p_2 = -p_1
    with pytest.raises(ValueError, match="init"):
        eg.simulate(2.0, P2, d=20, init="bogus")


# ------------------------------------------------------------------ fixed-m profile, RS stability


def test_prox_jacobian_is_the_derivative_of_the_prox():
    # (I + V ∇²ℓ)⁻¹ (implicit function theorem) against central differences of the global
    # prox in ω, at nodes where ±h stay in one basin (all of them here); 1e-6 covers the
    # O(h²) truncation and the 1e-10 Newton tolerance / h
    p = pg.GeneralParams(L=3)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((200, 3, 1)) * 0.6
    hs = rng.standard_normal((200, 3, 1)) * 0.5
    x = pg.prox(w, hs, 5.0, p).x
    J = pg.prox_jacobian(x, hs, 5.0, p)
    h = 1e-6
    same = np.ones(200, bool)
    Jfd = np.empty_like(J)
    for j in range(3):
        e = np.zeros((1, 3, 1))
        e[0, j, 0] = h
        xp = pg.prox(w + e, hs, 5.0, p, warm=x).x
        xm = pg.prox(w - e, hs, 5.0, p, warm=x).x
        Jfd[:, :, j] = ((xp - xm) / (2 * h))[:, :, 0]
        same &= np.abs(xp - xm).max(axis=(1, 2)) < 1e-3
    assert same.mean() > 0.95
    assert np.abs(J - Jfd)[same].max() < 1e-6


def test_fixed_m_input_validation():
    p3 = pg.GeneralParams(L=3)
    with pytest.raises(ValueError, match="range of the encodings"):
        pg.fixed_m_point(1.0, [0.1, 0.1, 0.1], p3)  # not orthogonal to 1: unreachable
    with pytest.raises(ValueError, match="rank r = 1"):
        pg.fixed_m_point(1.0, [0.1, -0.1], pg.GeneralParams(r=2))
    with pytest.raises(ValueError, match="L = 3 entries"):
        pg.fixed_m_point(1.0, [0.1, -0.1], p3)
    with pytest.raises(ValueError, match="range of the encodings"):
        eg.simulate_fixed_m(1.0, [0.1, 0.1, 0.1], p3, d=30)


def test_simulate_fixed_m_holds_the_constraint_and_reports_overlaps():
    # Q = Q₀ + (free part ⊥ constraints): q - (free self-overlap) = σ²|Q₀|²/d to round-off,
    # with Q₀ the minimum-norm solution of PQ/√d = m, σ²Q*ᵀQ/d = 0 recomputed here
    # (≈ σ² mᵀG⁺m up to the O(1/√d) overlap of Q* with the encodings)
    p = pg.GeneralParams(L=3)
    m = np.array([0.2, -0.1, -0.1])
    r = eg.simulate_fixed_m(1.0, m, p, d=60, seed=1, restarts=2, n_test=200)
    assert r.status == "converged" and r.grad_max < 1e-6
    pr = eg.make_problem(1.0, p, 60, 1, n_test=200)
    C = np.vstack([pr.P / np.sqrt(60), p.s2 * pr.qstar.T / 60])
    Q0 = np.linalg.lstsq(C, np.r_[m, 0.0], rcond=None)[0]
    fixed = p.s2 * Q0 @ Q0 / 60
    assert np.allclose(np.array(r.q) - np.diag(r.overlap), fixed, atol=1e-12)
    assert fixed == pytest.approx(p.s2 * m @ np.linalg.pinv(p.G_array) @ m, rel=0.2)
    assert r.overlap.shape == (2, 2) and 0 < r.mutual_ratio <= 1 + 1e-9


# --------------------------------------------------------------------------- CLI


def test_cli_parsers_and_json(capsys):
    from theory.cli import erm_general

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    erm_general.add_parsers(sub)
    args = parser.parse_args(
        [
            "general-fixed-point",
            "--alpha",
            "2",
            "--n",
            "512",
            "--n-rep",
            "2",
            "--tol",
            "1e-4",
            "--json",
        ]
    )
    rc = args.func(args)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "converged" and len(out["q"]) == 1
    args = parser.parse_args(
        [
            "general-simulate",
            "--alpha",
            "1",
            "--d",
            "30",
            "--init",
            "semantic",
            "--n-test",
            "100",
            "--L",
            "3",
            "--json",
        ]
    )
    args.func(args)
    out = json.loads(capsys.readouterr().out)
    assert len(out["runs"]) == 1 and len(out["runs"][0]["m"]) == 3
    args = parser.parse_args(["general-fixed-point", "--alpha", "2", "--L", "3", "--A", "1,0,0,1"])
    with pytest.raises(ValueError, match="L\\*L = 9"):
        args.func(args)


def test_cli_fixed_m(capsys):
    from theory.cli import erm_general

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    erm_general.add_parsers(sub)
    args = parser.parse_args(
        [
            "general-fixed-m",
            "--alpha",
            "1",
            "--L",
            "3",
            "--m",
            "0.1,0.1,-0.2",
            "--n",
            "128",
            "--d",
            "20",
            "--restarts",
            "2",
            "--json",
        ]
    )
    args.func(args)
    out = json.loads(capsys.readouterr().out)
    assert out["theory"]["q"] > 0 and len(out["theory"]["grad_m"]) == 3
    assert len(out["simulations"]) == 1 and len(out["simulations"][0]["eps_t"]) == 2
    args = parser.parse_args(["general-fixed-m", "--alpha", "1", "--L", "3", "--m", "0.1,0.1"])
    with pytest.raises(ValueError, match="L = 3 entries"):
        args.func(args)


# --------------------------------------------------------------------------- validation (slow)


#: the new case validated against finite d: L = 3, r = r_t = 1, simplex encodings,
#: A = 0.6 on the diagonal / 0.2 elsewhere, ω = 0.3, α = 2
P3 = pg.GeneralParams(L=3)


def _extrapolate(rows_a, rows_b):
    """Seed means at d and 2d, linear in 1/d: f(0) = 2 f(2d) - f(d), with its standard error."""
    a, b = np.mean(rows_a), np.mean(rows_b)
    sa = np.std(rows_a, ddof=1) / math.sqrt(len(rows_a))
    sb = np.std(rows_b, ddof=1) / math.sqrt(len(rows_b))
    return 2 * b - a, math.sqrt(4 * sb**2 + sa**2)


def _sims(alpha, p, d, init, summary, seeds=4):
    rs = [eg.simulate(alpha, p, d=d, init=init, seed=s, n_test=4000) for s in range(seeds)]
    assert all(r.converged for r in rs)
    return {k: [f(r) for r in rs] for k, f in summary.items()}, rs


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_L3_semantic_theory_against_finite_d_lbfgs(alpha):
    """L = 3 semantic fixed point (QMC 2^11 x 4) vs L-BFGS from Q = Q* at d = 400 and 800
    (4 seeds each), extrapolated linearly in 1/d (the finite-d bias at d = 800 is 1-2 % and
    several seed-SE at α = 2: BENCHMARKS.md).  Tolerance: 4 standard errors of the
    extrapolation (seed spread) + 4 QMC standard errors.  m → 0 like 1/√d on this branch."""
    th = pg.fixed_point(alpha, P3, "semantic", n=2**11, n_rep=4)
    assert th.converged
    summary = dict(
        q=lambda r: r.q[0, 0],
        theta=lambda r: abs(r.theta[0, 0]),
        eps_t=lambda r: r.eps_t,
        eps_g=lambda r: r.eps_g,
    )
    s400, _ = _sims(alpha, P3, 400, "semantic", summary)
    s800, rs = _sims(alpha, P3, 800, "semantic", summary)
    for key, tv in (
        ("q", th.q[0, 0]),
        ("theta", abs(th.theta[0, 0])),
        ("eps_t", th.eps_t),
        ("eps_g", th.eps_g),
    ):
        ext, se = _extrapolate(s400[key], s800[key])
        tq = float(np.ravel(getattr(th, f"{key}_err"))[0])
        assert abs(ext - tv) < 4 * se + 4 * tq, (key, ext, se, tv, tq)
    assert max(np.linalg.norm(x.m) for x in rs) < 4 / math.sqrt(800)


@pytest.mark.slow
def test_rank2_mixed_fixed_point_against_finite_d_lbfgs():
    """L = 2, r = 2, r_t = 1, α = 2: the student uses one direction for the positional and one
    for the semantic part (every init ends there at finite d).  Theory: the "free" branch
    (QMC 2^11 x 4) from a mixed start; compared through rotation invariants (eigenvalues of
    q, singular value of θ, per-token |m|) and ε_t, ε_g with the 1/d extrapolation of
    d = 400, 800 (4 seeds), 4 standard errors + 4 QMC errors."""
    p = pg.GeneralParams(L=2, r=2, r_t=1)
    init = dict(
        q=np.diag([0.07, 0.02]),
        m=np.array([[0, 0.2], [0, -0.2]]),
        theta=np.array([[0.12], [0.0]]),
        V=np.diag([10.0, 10.0]),
    )
    th = pg.fixed_point(2.0, p, "free", init=init, n=2**11, n_rep=4, tol=1e-5)
    assert th.converged and th.branch == "mixed"
    inv_err = th.metadata["invariants_err"]  # q eig (2), θ sv (1), eig(mᵀm) (2)
    summary = dict(
        q1=lambda r: np.linalg.eigvalsh(r.q)[0],
        q2=lambda r: np.linalg.eigvalsh(r.q)[1],
        theta=lambda r: np.linalg.svd(r.theta, compute_uv=False)[0],
        mm=lambda r: np.linalg.eigvalsh(r.m.T @ r.m)[1],
        eps_t=lambda r: r.eps_t,
        eps_g=lambda r: r.eps_g,
    )
    s400, _ = _sims(2.0, p, 400, "semantic", summary)
    s800, _ = _sims(2.0, p, 800, "semantic", summary)
    qe = np.linalg.eigvalsh(th.q)
    theory = dict(
        q1=(qe[0], inv_err[0]),
        q2=(qe[1], inv_err[1]),
        theta=(np.linalg.svd(th.theta, compute_uv=False)[0], inv_err[2]),
        mm=(np.linalg.eigvalsh(th.m.T @ th.m)[1], inv_err[4]),
        eps_t=(th.eps_t, float(th.eps_t_err)),
        eps_g=(th.eps_g, float(th.eps_g_err)),
    )
    for key, (tv, tq) in theory.items():
        ext, se = _extrapolate(s400[key], s800[key])
        assert abs(ext - tv) < 4 * se + 4 * tq, (key, ext, se, tv, tq)


@pytest.mark.slow
def test_fixed_m_profile_has_its_minimum_at_the_L2_positional_fixed_point():
    """The fixed-m RS profile (m̂ as Lagrange multiplier) at the L = 2 code's positional m*
    reproduces that fixed point (q, V, ε_t, ε_g within 4 QMC SE + 1e-3 relative, dε_t/dm
    within 4 SE of 0), and ε_t(m) rises on both sides (m = 0.2 and 0.32; measured rises
    7e-5 and 2.5e-4 against SE ~1.5e-5, same nodes)."""
    ref = ps.fixed_point(2.0, P2REF, "positional")
    assert ref.converged
    nodes = pg.make_nodes(P2, 2**11, 4, rng=1)
    r = pg.fixed_m_point(2.0, [ref.m, -ref.m], P2, q0=0.05, V0=11.0, nodes=nodes)
    assert r.converged
    for key, val in (("q", ref.q), ("V", ref.V), ("eps_t", ref.eps_t), ("eps_g", ref.eps_g)):
        se = float(getattr(r, f"{key}_err"))
        assert abs(getattr(r, key) - val) < 4 * se + 1e-3 * abs(val), (key, r, val, se)
    assert abs(r.grad_m[0]) < 4 * float(r.grad_m_err[0]) + 1e-5
    for mm in (0.2, 0.32):
        side = pg.fixed_m_point(2.0, [mm, -mm], P2, q0=0.05, V0=11.0, nodes=nodes, error=False)
        assert side.converged and side.eps_t > r.eps_t + 4 * float(r.eps_t_err)


#: L = 3 rank-1 θ = 0 sector: vertex-type direction of m in the encoding plane
V1 = np.array([1.0, 1.0, -2.0]) / math.sqrt(6)


@pytest.mark.slow
def test_L3_theta0_sector_rs_profile_is_monotone_and_the_finite_d_landscape_is_glassy():
    """Issue 3 (BENCHMARKS.md "L = 3 positional side"): at L = 3, α = 1 the RS training loss
    at fixed m (θ = 0) rises with |m| (no positional fixed point besides m ≈ 0: what the θ = 0
    iteration converges to), while the finite-d risk restricted to m = 0 is glassy:
    independent L-BFGS restarts on the SAME data end in distinct minima with mutual overlap
    |q_ab| far below their self-overlap (measured ratio 0.0-0.5), unlike the L = 2 positional
    fixed point (one minimum: ratio 1 to 1e-9).  RS assumes q_ab = q, so the RS θ = 0 branch
    is not a description of those minima.  At |m| = 0.35 (less glassy, ratio ~0.9) the seed
    mean of the L-BFGS ε_t agrees with the RS profile within 4 SE."""
    nodes = pg.make_nodes(P3, 2**11, 4, rng=2)
    prof = [
        pg.fixed_m_point(1.0, a * V1, P3, q0=0.11, V0=25.0, nodes=nodes) for a in (0.0, 0.2, 0.35)
    ]
    assert all(x.converged for x in prof)
    for lo, hi in zip(prof, prof[1:]):
        # paired over the scramblings (same nodes): the QMC error largely cancels
        dif = np.subtract(hi.metadata["rep_eps_t"], lo.metadata["rep_eps_t"])
        assert dif.mean() > 4 * dif.std(ddof=1) / 2, dif
    # the slope along V1 at 0.2 and 0.35 is positive beyond 4 SE
    for x in prof[1:]:
        assert x.grad_m @ V1 > 4 * (np.abs(V1) @ x.grad_m_err)
    glass = [eg.simulate_fixed_m(1.0, np.zeros(3), P3, d=400, seed=s, restarts=3) for s in range(3)]
    assert all(x.converged for x in glass)
    assert np.mean([x.mutual_ratio for x in glass]) < 0.6
    ctrl = eg.simulate_fixed_m(2.0, [0.258229, -0.258229], P2, d=400, seed=0, restarts=3)
    assert ctrl.converged and ctrl.mutual_ratio > 0.999
    sims = [eg.simulate_fixed_m(1.0, 0.35 * V1, P3, d=800, seed=s, restarts=1) for s in range(4)]
    et = np.array([x.eps_t[0] for x in sims])
    se = et.std(ddof=1) / 2
    assert abs(et.mean() - prof[2].eps_t) < 4 * se + 4 * float(prof[2].eps_t_err)
