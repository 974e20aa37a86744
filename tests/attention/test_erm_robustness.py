"""Fixes from the robustness sweep (issue 13 §3, BENCHMARKS.md "Robustness sweep"): the Q = 0
trivial point in closed form, and cold starts at large σ."""

import math

import numpy as np
import pytest

from theory.attention import ERMParams, fixed_point
from theory.attention.channel import sample_loss, teacher_diag
from theory.attention.quadrature import make_rule
from theory.attention.state_equations import state_map, zero_point

#: setting 3 of the sweep (seed 0): the trivial point is Q = 0
P_S3 = ERMParams(omega=0.3889, sigma=0.3567, lam=0.0769, A=[[0.808, 0.192], [0.195, 0.805]])
A_S3 = 3.0928
#: setting 0: σ = 1.25, the default trivial start's ridge step is unstable
P_C0 = ERMParams(
    omega=0.9127555772777217,
    sigma=1.2526079739576417,
    lam=0.08279159394670349,
    A=[[0.4000707853732506, 0.5999292146267494], [0.8972038510508373, 0.10279614894916263]],
)
A_C0 = 6.533530997515581


def test_zero_point_is_the_small_q_limit_of_the_state_map():
    # independent: the full state map (split quadrature of the global prox over ξ and η) at
    # q = 1e-9 against the closed form (quadratic loss at 0, η-only sums).  The map's V and
    # q-multiplier differ from the q → 0 limit by O(√q) = 3e-5 at most; measured 1e-8
    rule = make_rule("split")
    z = zero_point(A_S3, P_S3, rule)
    assert z["exists"] and 0 < z["mu"] < 1
    q = 1e-9
    new, ch, h, _ = state_map(A_S3, dict(q=q, m=0.0, theta=0.0, V=z["V"]), P_S3, rule)
    assert new["V"] == pytest.approx(z["V"], rel=1e-5)
    assert new["q"] / q == pytest.approx(z["mu"], rel=1e-4)
    assert h["Vhat"] == pytest.approx(z["Vhat"], rel=1e-5)
    assert abs(new["m"]) < 1e-15 and new["theta"] == 0  # m: rounding of odd sums
    assert ch["eps_g"] == pytest.approx(z["eps_g"], rel=1e-6)


def test_zero_point_energy_is_the_loss_at_zero_field():
    # Q = 0: f_Q(X) = (x_1 + x_2)/2, the loss per sample is ℓ(h = 0); Monte-Carlo over the
    # teacher's fields (2e5 samples: standard error ~1e-3 relative, 5 sigma allowed)
    rng = np.random.default_rng(3)
    hs = math.sqrt(P_S3.rho) * rng.standard_normal((200_000, 2))
    t = teacher_diag(hs, P_S3)
    ell = sample_loss(np.zeros_like(hs), P_S3.s2, t[:, 0], t[:, 1])
    z = zero_point(A_S3, P_S3)
    assert z["eps_g"] == pytest.approx(ell.mean(), abs=5 * ell.std() / math.sqrt(ell.size))
    assert z["eps_t"] == pytest.approx(A_S3 * z["eps_g"], rel=1e-12)


def test_zero_point_absent_at_the_reference_parameters():
    # σ = 0.5, λ = 0.01: V = σ²/λ at small α lies beyond 1/|λ_min(H₀)|; the trivial point
    # there has q > 0 (the solver's trivial fixed points at the reference, tested elsewhere)
    assert not zero_point(2.0, ERMParams())["exists"]


def test_trivial_solve_reports_the_q_zero_point_converged():
    # before: q crept to 1e-24 at a relative tolerance and hit max_iter
    r = fixed_point(A_S3, P_S3, "trivial")
    z = zero_point(A_S3, P_S3)
    assert r.status == "converged" and r.branch == "trivial"
    assert r.q == 0 and r.V == pytest.approx(z["V"], rel=1e-6)  # same closed form, other rule
    assert "Q = 0" in r.message
    assert r.iterations < 60


@pytest.mark.slow
def test_cold_trivial_start_at_large_sigma_reaches_the_q_zero_point():
    # sweep setting 0 (σ = 1.25, non-symmetric A): the default trivial start (q = 0.05,
    # V = 30/√(1 + α/5)) made λ + σ²V̂ = -0.54 < 0 at the first map (status nan).  Now the
    # start's V is the Q = 0 point's, and the solve ends there; independent check: the full
    # state map at q = 1e-9 and that V returns V and shrinks q (μ < 1)
    r = fixed_point(A_C0, P_C0, "trivial")
    assert r.status == "converged" and r.branch == "trivial" and r.q == 0
    assert "start" in r.message and "unstable" in r.message
    new, *_ = state_map(A_C0, dict(q=1e-9, m=0.0, theta=0.0, V=r.V), P_C0, make_rule("split"))
    assert new["V"] == pytest.approx(r.V, rel=1e-5)  # O(√q) from the limit, see above
    assert new["q"] < 1e-9


#: setting 27 of the sweep (seed 0): A_11 ≠ A_22, σ = 1.04, α = 9.1; the positional start
#: decays onto the trivial subspace, whose default cold start makes λ + σ²V̂ = -1.06 < 0
P_S27 = ERMParams(
    omega=0.6340699793474432,
    sigma=1.0434862182178208,
    lam=0.0004509970122479893,
    A=[[0.9141940991814622, 0.08580590081853776], [0.3729798141646262, 0.6270201858353737]],
)
A_S27 = 9.115510632043847


def test_absent_branch_solves_the_trivial_point_from_where_the_flow_got_to(monkeypatch):
    # the logic of solver._absent, the maps replaced (no spinodal for a non-symmetric A's
    # positional branch, so no map is evaluated here): the trivial solve starts from the point
    # the collapsed iteration reached, then cold; a trivial solve that fails gives a status
    # that says why, never a bare "nan" (sweep settings 26, 27: positional "nan")
    from theory.attention import solver
    from theory.attention.quadrature import coarse_rule

    calls = []

    def fake(alpha, p, branch, init=None, **kw):
        calls.append((branch, init, kw.get("when_absent")))
        return solver.ERMResult(alpha=alpha, omega=p.omega, status="nan", message="map failed")

    monkeypatch.setattr(solver, "fixed_point", fake)
    kw = dict(mixing=0.5, tol=1e-6, max_iter=300, rule=coarse_rule(), accel="newton")
    flow = dict(q=0.3, m=0.0, theta=0.0, V=2.0)
    r = solver._absent(A_S27, P_S27, "positional", kw, flow)
    assert [c[0] for c in calls] == ["trivial", "trivial"]
    assert calls[0][1] == flow and calls[1][1] is None  # warm from the flow, then cold
    assert r.status == "diverged" and r.init == "positional"
    assert "does not exist" in r.message and "not found either (nan: map failed)" in r.message

    def fake_ok(alpha, p, branch, init=None, **kw):
        calls.append((branch, init))
        return solver.ERMResult(
            alpha=alpha, omega=p.omega, status="converged", branch="trivial", q=init["q"]
        )

    calls.clear()
    monkeypatch.setattr(solver, "fixed_point", fake_ok)
    r = solver._absent(A_S27, P_S27, "positional", kw, flow)
    assert len(calls) == 1 and r.converged and r.branch == "trivial" and r.q == 0.3
    assert r.init == "positional" and "flows to the trivial fixed point" in r.message


def test_absent_branch_searches_its_spinodal_once_per_setting(monkeypatch):
    # α_s does not depend on α: a curve along which a branch is absent everywhere (the positional
    # branch at σ = 0.7, docs/attention.md §6) searches once, not once per α; another setting,
    # or a bracket grown from the other side of the default hint, searches again
    import importlib

    from theory.attention import solver

    S = importlib.import_module("theory.attention.spinodal")  # the package exports the function
    searches = []

    def fake_spinodal(p, branch, hint=None, rule=None, **opt):
        searches.append((p.sigma, branch, hint))
        return S.SpinodalResult(
            status="no_spinodal", omega=p.omega, branch=branch, message="lambda < 1 up to 20"
        )

    def fake_fp(alpha, p, branch, init=None, **kw):
        return solver.ERMResult(alpha=alpha, omega=p.omega, status="converged", branch="trivial")

    monkeypatch.setattr(S, "spinodal", fake_spinodal)
    monkeypatch.setattr(solver, "fixed_point", fake_fp)
    monkeypatch.setattr(solver, "_CHEAP_SPINODALS", {})
    kw = dict(rule=None)
    p7 = ERMParams(omega=0.3, sigma=0.7)
    for a in (0.5, 1.0, 2.0):  # all above the positional default hint 0.1
        r = solver._absent(a, p7, "positional", kw)
        assert r.branch == "trivial" and "lambda < 1 up to 20" in r.message
    assert searches == [(0.7, "positional", 0.5), (0.7, "positional", None)]
    solver._absent(0.05, p7, "positional", kw)  # below the hint: its own bracket
    solver._absent(1.0, p7.replace(sigma=0.71), "positional", kw)
    assert [s[0] for s in searches] == [0.7, 0.7, 0.7, 0.7, 0.71, 0.71]


def _m_map(alpha, p, m, start, rule):
    """m' of the state map at (q, V) solved with m held fixed (θ = 0): its roots m' = m > 0 are the
    positional fixed points, found without the solver or the spinodal code."""
    from scipy.optimize import root

    def F(u):
        q, V = np.exp(u)
        new = state_map(alpha, dict(q=q, m=m, theta=0.0, V=V), p, rule)[0]
        return [np.log(new["q"] / q), np.log(new["V"] / V)]

    sol = root(F, np.log(start), method="hybr", options=dict(xtol=1e-8))
    assert sol.success and np.abs(sol.fun).max() < 1e-8
    q, V = np.exp(sol.x)
    return state_map(alpha, dict(q=q, m=m, theta=0.0, V=V), p, rule)[0]["m"], (q, V)


@pytest.mark.slow
def test_positional_branch_ends_between_sigma_05_and_055():
    # docs/attention.md §6: at alpha = 2, omega = 0.3 the positional fixed point m = 0.2582 of
    # sigma = 0.5 is gone at sigma = 0.55 (m' < m for every m tried), and the trivial point's m
    # eigenvalue turns negative by sigma = 0.6 (where L-BFGS still ends at m ~ 0.19)
    from theory.attention.quadrature import coarse_rule

    rule = coarse_rule()
    p5 = ERMParams(omega=0.3, sigma=0.5)
    start = (0.05, 11.0)
    gaps = {}
    for m in (0.22, 0.26):
        mp, start = _m_map(2.0, p5, m, start, rule)
        gaps[m] = mp - m
    assert gaps[0.22] > 0.02 and gaps[0.26] < 0  # a root between: the fixed point at 0.2582
    p55 = ERMParams(omega=0.3, sigma=0.55)
    start = (0.085, 13.0)
    for m in (0.25, 0.2, 0.1, 0.03):
        mp, start = _m_map(2.0, p55, m, start, rule)
        assert mp - m < -0.025, (m, mp)
    mp, _ = _m_map(2.0, ERMParams(omega=0.3, sigma=0.6), 0.03, (0.2, 19.5), rule)
    assert -0.8 < mp / 0.03 < -0.7  # -0.75: the map overshoots m = 0
