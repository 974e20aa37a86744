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
