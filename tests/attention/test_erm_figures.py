"""Helpers of the ERM figures (theory.attention.figures): checked against closed forms."""

import math

import numpy as np
import pytest

from theory.attention.figures.heatmap import cell_edges, nice_limit


@pytest.mark.parametrize(
    "v, lim, k",
    [
        (0.00173, 0.002, -3),  # 1.73e-3 -> next round mantissa 2
        (7.2e-4, 8e-4, -4),
        (9.5e-4, 1e-3, -3),  # 9.5e-4 rounds up to 10e-4 = 1e-3: the power moves up
        (1.0, 1.0, 0),  # a round value is its own limit
        (-0.0231, 0.025, -2),  # the sign is ignored
        (0.0, 1.0, 0),
        (math.nan, 1.0, 0),
    ],
)
def test_nice_limit_is_the_next_round_number(v, lim, k):
    got, gk = nice_limit(v)
    assert gk == k
    assert got == pytest.approx(lim, rel=1e-12)  # exact up to floating-point powers of 10
    assert got >= abs(v) or not math.isfinite(v) or v == 0


def test_cell_edges_are_midpoints_with_half_cells_at_the_ends():
    c = np.linspace(0.01, 2.0, 25)
    e = cell_edges(c)
    h = (2.0 - 0.01) / 24 / 2  # half the uniform spacing
    assert len(e) == 26
    np.testing.assert_allclose(e, np.concatenate([[0.01 - h], c + h]), rtol=0, atol=1e-14)
    e = cell_edges([1.0, 2.0, 4.0])  # non-uniform: midpoints 1.5, 3; ends mirrored
    np.testing.assert_allclose(e, [0.5, 1.5, 3.0, 5.0])


def test_linear_baseline_fit_is_the_minimiser_of_its_ridge_risk():
    # independent route: scipy's BFGS on the risk itself, from B = 0
    from scipy.optimize import minimize

    from theory.attention import ERMParams, make_problem
    from theory.attention.figures.linear import fit_linear_baseline, linear_risk

    pr = make_problem(0.5, ERMParams(omega=0.3), 30, 3, n_test=10)
    lam_b = 0.05  # a ridge large enough to matter at n = 15
    B = fit_linear_baseline(pr, lam_b)
    res = minimize(lambda b: linear_risk(b.reshape(2, 2), pr.train, lam_b), np.zeros(4), tol=1e-12)
    # the risk is a convex quadratic: both reach the unique minimiser; 1e-5 = BFGS's accuracy
    np.testing.assert_allclose(B, res.x.reshape(2, 2), atol=1e-5)
    assert linear_risk(B, pr.train, lam_b) <= res.fun + 1e-12


def test_power_law_fit_recovers_an_exact_power_law_and_a_noisy_one():
    from theory.attention.figures.stats import power_law_fit

    d = np.array([10, 23, 56, 135, 323, 500.0])
    f = power_law_fit(d, 0.3 * d**-0.5)
    assert f["b"] == pytest.approx(-0.5, abs=1e-12)  # exact data: exact exponent
    assert f["c"] == pytest.approx(0.3, rel=1e-12)
    rng = np.random.default_rng(1)
    err = 0.05 * 0.3 * d**-0.5  # 5 % relative errors
    b = [
        power_law_fit(d, 0.3 * d**-0.5 + err * rng.standard_normal(6), err)["b"] for _ in range(400)
    ]
    f = power_law_fit(d, 0.3 * d**-0.5, err)
    # the fit's b_err is the spread of b over noisy repetitions (400 draws: ~4 % sampling error)
    assert np.std(b) == pytest.approx(f["b_err"], rel=0.15)
    assert np.mean(b) == pytest.approx(-0.5, abs=4 * f["b_err"] / np.sqrt(400) + 2e-3)


def test_spread_is_the_sample_std_with_its_gaussian_error():
    from theory.attention.figures.stats import spread

    s, e = spread([1.0, 2.0, 3.0, 4.0])
    assert s == pytest.approx(np.sqrt(5 / 3))  # sum of squared deviations 5, ddof 1
    assert e == pytest.approx(np.sqrt(5 / 3) / np.sqrt(6))
    with pytest.raises(ValueError, match="at least 2"):
        spread([1.0])


def test_adam_reaches_the_lbfgs_minimiser_of_a_small_instance():
    # independent route: L-BFGS (scipy) from the same point; the risk near Q* is locally convex
    from theory.attention import ERMParams, make_problem, simulate_gd
    from theory.attention.figures.adam import adam

    pr = make_problem(2.0, ERMParams(omega=0.3), 20, 0, n_test=10)
    ref = simulate_gd(2.0, init="semantic", method="lbfgs", problem=pr, tol=1e-9)
    Q = adam(pr.teacher.qstar, pr.train, pr.params.lam, lr=0.01, steps=4000)
    th = abs(pr.teacher.qstar @ Q) / 20
    # Adam with a fixed lr hovers within ~lr of the minimum: 2 % on the overlap
    assert th == pytest.approx(ref.theta_over_sigma2, rel=0.02)


def test_run_sims_keeps_runs_of_another_test_set_apart(tmp_path):
    # the heat map (1000 test samples) and erm-omega03 (4000) share a store: a cell of one must
    # not be served the other's run, whose eps_g carries another test set's fluctuation (the
    # omega = 0.3 row of the full heat map stood out as a stripe)
    from theory.attention.figures.simulation import run_sims
    from theory.store import Store

    store = Store(tmp_path / "sims.jsonl")
    pt = [(1.5, 0.3, 20, 0, "positional")]
    a = run_sims(pt, store=store, n_test=400, progress=False)[0]
    b = run_sims(pt, store=store, n_test=100, progress=False)[0]
    assert (a["n_test"], b["n_test"]) == (400, 100)
    assert a["eps_t"] == pytest.approx(b["eps_t"], rel=1e-9)  # the same minimiser
    assert a["eps_g"] != b["eps_g"]  # measured on another test set
    n = len(store.rows())
    again = [run_sims(pt, store=store, n_test=k, progress=False)[0] for k in (400, 100)]
    assert [r["eps_g"] for r in again] == [a["eps_g"], b["eps_g"]] and len(store.rows()) == n


def _eps_g_of_q0(sigma, omega, a11=0.6):
    """ε_g of the student Q = 0 (uniform attention), by adaptive 2-D quadrature: with
    S(0) = 1/2 everywhere and rows summing to 1, ε_g = 2σ² E[(T_11 - 1/2)²],
    T_11 = (1-ω) softmax(h h^T)_11 + ω A_11, h ~ N(0, σ² I_2) (reference teacher, ρ = σ²)."""
    from scipy import integrate

    rho = sigma**2

    def f(a, b):
        t11 = (1 - omega) / (1 + math.exp(a * b - a * a)) + omega * a11
        return (t11 - 0.5) ** 2 * math.exp(-(a * a + b * b) / (2 * rho)) / (2 * math.pi * rho)

    c = 12 * sigma
    v, _ = integrate.dblquad(f, -c, c, -c, c, epsabs=1e-13)
    return 2 * rho * v


def test_global_minimiser_is_the_trivial_point_where_no_branch_exists():
    # sigma = 0.3, omega = 0.3: the semantic branch exists nowhere below alpha_max and the
    # positional one only above alpha ~ 0.5 (its order parameter decays at 0.2 and 0.3; the
    # L-BFGS minimisers of the erm-slices run at d = 1000 sit at m = 0 there too), so the global
    # minimiser is the trivial point, here Q = 0 (q -> 0): its eps_g is the uniform-attention
    # student's. Tolerance: the quick rule's quadrature error on this teacher average, measured
    # 2.5e-6 relative (the figure rule's agrees with the adaptive quadrature to 1e-11).
    from theory.attention import ERMParams, curve
    from theory.attention.figures.simulation import figure_rule, theory_curve

    p = ERMParams(omega=0.3, sigma=0.3)
    ref = _eps_g_of_q0(0.3, 0.3)
    th = theory_curve([0.2, 0.3], p, rule=figure_rule(True))
    assert [r["branch"] for r in th["global_"]] == ["trivial", "trivial"]
    for r in th["global_"]:
        assert r["eps_g"] == pytest.approx(ref, rel=2e-5)
        assert r["q"] < 1e-8
    c = curve([0.2], p, ("positional", "trivial"), rule=figure_rule(True))
    (g,) = c.global_minimiser()  # the positional start collapsed: only the trivial point is left
    assert g.branch == "trivial" and g.eps_g == pytest.approx(ref, rel=2e-5)


def test_branch_fixed_points_says_where_a_start_lands_when_not_strict(tmp_path):
    # A = [[0.3, 0.7], [0.8, 0.2]] has no positional branch (A_11 != A_22: the m-sector needs a
    # symmetric positional teacher), so its positional start collapses to the trivial point
    # (m = theta = 0): strict mode raises, strict=False returns that row and says so
    from theory.attention.figures.simulation import PARAMS, branch_fixed_points, figure_rule
    from theory.store import Store

    p = PARAMS.replace(omega=0.14, A=((0.3, 0.7), (0.8, 0.2)))
    store = Store(tmp_path / "th.jsonl")
    kw = dict(rule=figure_rule(True), store=store)
    with pytest.raises(RuntimeError, match="positional fixed point .* trivial"):
        branch_fixed_points(1.005, p, **kw)
    th = branch_fixed_points(1.005, p, strict=False, **kw)
    assert th["semantic"]["branch"] == "semantic" and th["semantic"]["theta"] > 0.05
    pos = th["positional"]
    assert (pos["branch"], pos["m"], pos["theta"]) == ("trivial", 0.0, 0.0)
    assert "does not exist" in pos["message"]
    assert len(store.rows()) == 2  # both points solved once, the second call served from store


def test_phase_lines_are_computed_once_per_folder(tmp_path, monkeypatch):
    """The α_c(ω) lines of the theory piece, the heat maps and the rank-2 map are one store
    row: a row another process wrote after this Store was opened is read, not recomputed."""
    from theory.attention.figures import simulation
    from theory.store import Store

    calls = []

    class Diagram:
        def rows(self):
            return [dict(omega=0.1, alpha_c=0.75, alpha_l=0.89)]

    def fake(omegas, params, rule):
        calls.append(list(omegas))
        return Diagram()

    monkeypatch.setattr(simulation, "phase_diagram", fake)
    path = tmp_path / "theory.jsonl"
    mine = Store(path)  # opened before the other process writes
    rows = simulation.theory_phase_rows([0.1], store=Store(path))  # "the other process"
    assert calls == [[0.1]] and rows[0]["alpha_c"] == 0.75
    again = simulation.theory_phase_rows([0.1], store=mine)
    assert calls == [[0.1]] and again == rows  # read from the file, not recomputed
