"""The generic fixed-point solvers of theory.solve.fixed_point on maps with known fixed points."""

import math

import numpy as np
import pytest

from theory.solve.fixed_point import anderson_iteration, damped_iteration, newton_iteration

XSTAR = np.array([0.05, 11.4, 0.26])
# a Jacobian like the positional ERM map's at α = 2 (eigenvalues ≈ -5.4, 0.43, 0.34 in
# relative variables): plain iteration diverges, damping 0.5 does too
JREL = np.array([[-0.85, -4.09, 0.04], [-1.73, -3.95, 0.27], [0.11, -1.19, 0.14]])


def make_map(jrel=JREL, curvature=0.3):
    keys = ("q", "V", "m")

    def F(x):
        v = np.array([x[k] for k in keys])
        y = (v - XSTAR) / XSTAR
        fy = jrel @ y + curvature * y**2  # a smooth nonlinearity vanishing at the fixed point
        return dict(zip(keys, XSTAR * (1 + fy))), None

    return F


START = dict(q=0.055, V=12.0, m=0.25)


def test_newton_finds_the_fixed_point_the_damped_iteration_misses():
    F = make_map()
    r = newton_iteration(F, START, tol=1e-12, max_iter=40)
    assert r.status == "converged"
    assert np.allclose([r.x[k] for k in ("q", "V", "m")], XSTAR, rtol=1e-11)
    d = damped_iteration(F, START, mixing=0.5, tol=1e-12, max_iter=200, keep_history=False)
    assert d.status != "converged" or d.iterations > r.iterations


def test_newton_with_a_cheap_approximate_jacobian_map_still_converges_to_the_true_point():
    F = make_map()
    cheap = make_map(JREL * 1.05 + 0.02, curvature=0.25)  # another map, 5 % different Jacobian
    r = newton_iteration(F, START, jacobian_map=cheap, tol=1e-12, max_iter=40)
    assert r.status == "converged"
    assert np.allclose([r.x[k] for k in ("q", "V", "m")], XSTAR, rtol=1e-11)


def test_newton_reports_max_iter_when_there_is_no_fixed_point():
    def F(x):  # F(x) = x + 1 has no fixed point
        return {k: v + 1.0 for k, v in x.items()}, None

    r = newton_iteration(F, dict(a=1.0, b=2.0), tol=1e-10, max_iter=15)
    assert r.status in ("max_iter", "nan")
    assert r.status != "converged" and math.isfinite(r.iterations)


def test_newton_turns_map_failures_into_a_status_not_an_exception():
    def F(x):
        raise FloatingPointError("boom")

    r = newton_iteration(F, dict(a=1.0), tol=1e-10)
    assert r.status == "nan" and "boom" in r.message


def test_anderson_agrees_with_newton_where_both_converge():
    # a contracting map (eigenvalues 0.5, 0.3, 0.1): every solver finds the same point
    F = make_map(np.diag([0.5, 0.3, 0.1]), curvature=0.1)
    a = anderson_iteration(F, START, mixing=0.7, tol=1e-12, max_iter=300)
    n = newton_iteration(F, START, tol=1e-12)
    assert a.status == n.status == "converged"
    for k in ("q", "V", "m"):
        assert a.x[k] == pytest.approx(n.x[k], rel=1e-10)
