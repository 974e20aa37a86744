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
