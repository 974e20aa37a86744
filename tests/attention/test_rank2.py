"""The rank-2 student piece (theory/attention/figures/rank2.py): its invariants, its published
numbers, and the piece in quick mode."""

from __future__ import annotations

import math

import numpy as np
import pytest

from theory.attention.figures import rank2
from theory.published import published


def test_invariants_are_rotation_invariant_and_see_orthogonal_columns():
    # Q = [positional column, semantic column]: m in one direction, theta in the other;
    # any rotation Q -> Q O leaves |m|, |theta|, eig q and cos(m_1, theta) unchanged
    q = np.diag([0.05, 0.1])
    m = np.array([[0.0, 0.25], [0.0, -0.25]])
    th = np.array([[0.15], [0.0]])
    base = rank2.invariants(q, m, th, 0.25)
    assert base["m_norm"] == pytest.approx(0.25)
    assert base["theta_over_sigma2"] == pytest.approx(0.6)
    assert (base["q_min"], base["q_max"]) == pytest.approx((0.05, 0.1))
    assert base["cos_m_theta"] == pytest.approx(0.0, abs=1e-15)
    c, s = math.cos(0.7), math.sin(0.7)
    O = np.array([[c, -s], [s, c]])
    rot = rank2.invariants(O.T @ q @ O, m @ O, O.T @ th, 0.25)
    for k, v in base.items():
        assert rot[k] == pytest.approx(v, abs=1e-14), k
    # one column carrying both: |cos| = 1; a vanishing theta: cos undefined
    assert abs(rank2.invariants(q, m, np.array([[0.0], [0.1]]), 0.25)["cos_m_theta"]) == 1.0
    assert math.isnan(rank2.invariants(q, m, np.zeros((2, 1)), 0.25)["cos_m_theta"])


def test_published_rank2_values_are_the_spec_table():
    # shared spec published-numbers.md, "Rank-2 student": 7 alphas at omega = 0.3
    pub = dict(rank2.published_rank2())
    assert sorted(pub) == [0.01, 1.0, 2.0, 2.33, 3.0, 3.67, 4.0]
    assert pub[2.0] == published("cui2024/rank2/eps_g/alpha=2").value == 0.00254


def test_random_init_ends_in_the_minimum_of_the_semantic_init():
    """α = 2, ω = 0.3, d = 200, seed 0: L-BFGS from the random init (the piece's simulation)
    and from Q = Q* end in the same minimum -- the one tests/attention/test_ps_general.py::
    test_rank2_mixed_fixed_point_against_finite_d_lbfgs compares with the r = 2 mixed fixed
    point (so the piece's points are that theory's).  Tolerances: both runs stop at max |grad|
    < 1e-7, which fixes ε_t to second order (measured difference 2e-14 absolute) and the
    overlaps to first order (2e-6 relative); two distinct minima of this landscape would differ
    by O(1/d), 1e-3 relative or more.  The minimiser is genuinely rank 2 (both eigenvalues of q
    > 0) with the positional and semantic parts in orthogonal directions."""
    from theory.attention.finite_d.general import simulate

    rnd = rank2.run_rank2([(2.0, 0.3, 200, 0)], progress=False)[0]
    sem = simulate(2.0, rank2.PARAMS2, d=200, init="semantic", seed=0, n_test=4000, tol=1e-7)
    assert rnd["status"] == sem.status == "converged"
    assert rnd["eps_t"] == pytest.approx(sem.eps_t, rel=1e-9)
    inv = rank2.invariants(sem.q, sem.m, sem.theta, rank2.PARAMS2.s2)
    for k in rank2.INVARIANTS:
        assert rnd[k] == pytest.approx(inv[k], rel=1e-4), k
    assert rnd["q_min"] > 0.1 * rnd["q_max"] > 0
    assert abs(rnd["cos_m_theta"]) < 4 / math.sqrt(200)


def _stub_theory(monkeypatch, calls):
    """Replace the piece's three theory calls by cheap stand-ins that count their calls (the
    r = 2 mixed fixed point against finite-d L-BFGS: tests/attention/test_ps_general.py::
    test_rank2_mixed_fixed_point_against_finite_d_lbfgs; the shared machine could not run
    the r = 2 solve inside a test here)."""

    def curve(alphas, params, rule=None, store=None):
        calls.append("curve")
        rows = [
            dict(alpha=a, init=b, branch=b, status="converged", eps_g=0.003)
            for a in alphas
            for b in ("semantic", "positional")
        ]
        return dict(rows=rows, global_=[], eps_g_lin=0.00197)

    def lines(omegas, params, rule=None, store=None):
        calls.append("lines")
        return [dict(omega=w, alpha_c=0.6 + 2 * w, alpha_l=0.8 + 2 * w) for w in omegas]

    def fixed_points(alpha, sectors=rank2.SECTORS, store=None, **kw):
        calls.append("r2")
        row = dict(status="converged", label="mixed", eps_t=0.003, eps_t_err=1e-5)
        row.update(eps_g=0.0014, eps_g_err=1e-5, m_norm=0.2, theta_over_sigma2=0.5)
        row.update(q_min=0.02, q_max=0.08, cos_m_theta=0.0)
        return {s: dict(row) for s in sectors}

    monkeypatch.setattr(rank2, "theory_curve", curve)
    monkeypatch.setattr(rank2, "theory_phase_rows", lines)
    monkeypatch.setattr(rank2, "rank2_theory", fixed_points)


@pytest.mark.slow
def test_piece_runs_in_quick_mode_and_resumes_from_its_stores(tmp_path, monkeypatch):
    """The quick piece (29 L-BFGS runs at d = 100, GD 5000 steps at d = 100; 695 s wall for
    both calls on the shared machine at load 25) with the theory stubbed: files, the published
    comparison in the numbers, no failed run, and a second call that finds every run in the
    folder's store."""
    calls = []
    _stub_theory(monkeypatch, calls)
    out = rank2.fig_rank2(tmp_path, True)
    assert out["files"] == [str(tmp_path / "erm-rank2.png")]
    assert (tmp_path / "erm-rank2.png").stat().st_size > 10_000
    assert sorted(set(calls)) == ["curve", "lines", "r2"]
    nums = {n["name"]: n for n in out["numbers"]}
    # every published alpha is simulated and quoted beside the authors' value
    for a, v in rank2.published_rank2():
        row = nums[f"eps_g rank 2 (alpha={a:g}, omega=0.3) simulated"]
        assert f"authors' GD (10 runs): {v:g}" in row["how"]
        assert 0 < row["value"] < 0.01
    assert nums["erm-rank2_failed_runs"]["value"] == 0
    # a second call finds every run in the folder's store: no simulation CPU, same numbers
    again = {n["name"]: n for n in rank2.fig_rank2(tmp_path, True)["numbers"]}
    assert again["erm-rank2_sim_cpu_s"]["value"] < 0.2 * nums["erm-rank2_sim_cpu_s"]["value"]
    key = "eps_g rank 2 (alpha=2, omega=0.3) simulated"
    assert again[key] == nums[key]
