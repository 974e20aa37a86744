"""The iteration core of theory.solve (one loop, three strategies, stop rules, two-fidelity
solve, roots) on maps with known fixed points and functions with known roots."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from theory.solve import (
    Anderson,
    Damped,
    DecayStop,
    Packing,
    QuasiNewton,
    bracket,
    find_root,
    iterate,
    solve_two_fidelity,
)

XSTAR = np.array([0.05, 11.4, 0.26])
# a Jacobian like the positional ERM map's at α = 2 (eigenvalues ≈ -5.4, 0.43, 0.34 in
# relative variables): plain iteration diverges, damping 0.5 does too
JREL = np.array([[-0.85, -4.09, 0.04], [-1.73, -3.95, 0.27], [0.11, -1.19, 0.14]])
KEYS = ("q", "V", "m")


def make_map(jrel=JREL, curvature=0.3, xstar=XSTAR):
    def F(x):
        v = np.array([x[k] for k in KEYS])
        y = (v - xstar) / xstar
        fy = jrel @ y + curvature * y**2  # a smooth nonlinearity vanishing at the fixed point
        return dict(zip(KEYS, xstar * (1 + fy))), None

    return F


START = dict(q=0.055, V=12.0, m=0.25)


def _x(r):
    return np.array([r.x[k] for k in KEYS])


def test_newton_finds_the_fixed_point_the_damped_iteration_misses():
    F = make_map()
    r = iterate(F, START, strategy=QuasiNewton(), tol=1e-12, max_iter=40)
    assert r.status == "converged"
    assert np.allclose(_x(r), XSTAR, rtol=1e-11)
    d = iterate(F, START, strategy=Damped(0.5), tol=1e-12, max_iter=200)
    assert d.status != "converged" or d.iterations > r.iterations


def test_newton_with_a_cheap_approximate_jacobian_map_still_converges_to_the_true_point():
    F = make_map()
    cheap = make_map(JREL * 1.05 + 0.02, curvature=0.25)  # another map, 5 % different Jacobian
    r = iterate(F, START, strategy=QuasiNewton(jacobian_map=cheap), tol=1e-12, max_iter=40)
    assert r.status == "converged"
    assert np.allclose(_x(r), XSTAR, rtol=1e-11)


def test_newton_reports_max_iter_when_there_is_no_fixed_point():
    def F(x):  # F(x) = x + 1 has no fixed point
        return {k: v + 1.0 for k, v in x.items()}, None

    r = iterate(F, dict(a=1.0, b=2.0), strategy=QuasiNewton(), tol=1e-10, max_iter=15)
    assert r.status in ("max_iter", "nan")
    assert r.status != "converged" and math.isfinite(r.iterations)


def test_newton_turns_map_failures_into_a_status_not_an_exception():
    def F(x):
        raise FloatingPointError("boom")

    r = iterate(F, dict(a=1.0), strategy=QuasiNewton(), tol=1e-10)
    assert r.status == "nan" and "boom" in r.message


def test_anderson_agrees_with_newton_where_both_converge():
    # a contracting map (eigenvalues 0.5, 0.3, 0.1): every solver finds the same point
    F = make_map(np.diag([0.5, 0.3, 0.1]), curvature=0.1)
    a = iterate(F, START, strategy=Anderson(0.7), tol=1e-12, max_iter=300)
    n = iterate(F, START, strategy=QuasiNewton(), tol=1e-12)
    assert a.status == n.status == "converged"
    for k in KEYS:
        assert a.x[k] == pytest.approx(n.x[k], rel=1e-10)


@pytest.mark.parametrize(
    "strategy",
    [
        Damped(0.6),
        Anderson(0.6),
        Anderson(
            0.6, restart_from_best=False, clear_on_reject=False, forget_above_start=True, rcond=None
        ),
        QuasiNewton(),
    ],
    ids=["damped", "anderson", "anderson-keep-memory", "newton"],
)
def test_every_strategy_finds_the_known_fixed_point(strategy):
    # contracting map with a rotation-like coupling (eigenvalues of modulus < 1): the closed-form
    # fixed point XSTAR is reached by the damped, the Anderson and the quasi-Newton loop
    jrel = np.array([[0.3, -0.4, 0.0], [0.4, 0.3, 0.1], [0.0, 0.1, -0.5]])
    r = iterate(make_map(jrel, curvature=0.2), START, strategy=strategy, tol=1e-12, max_iter=500)
    assert r.status == "converged", r.message
    assert np.allclose(_x(r), XSTAR, rtol=1e-10)
    # convergence is judged on the UNDAMPED relative residual at the reported point
    fx = np.array([r.fx[k] for k in KEYS])
    assert np.max(np.abs(fx - _x(r)) / np.abs(fx)) < 1e-12


def test_acceleration_saves_map_evaluations():
    # a slowly contracting map (eigenvalue 0.95): Anderson and quasi-Newton beat damping by far
    F = make_map(np.diag([0.95, 0.9, 0.5]), curvature=0.05)
    counts = {
        name: iterate(F, START, strategy=s, tol=1e-10, max_iter=2000).iterations
        for name, s in (
            ("damped", Damped(1.0)),
            ("anderson", Anderson(1.0)),
            ("newton", QuasiNewton()),
        )
    }
    assert counts["anderson"] < counts["damped"] / 5 and counts["newton"] < counts["damped"] / 10


@pytest.mark.parametrize("strategy", [Damped(0.5), Anderson(0.5)], ids=["damped", "anderson"])
def test_a_failed_map_restores_the_last_good_state_and_halves_the_mixing(strategy):
    # F(q) = 0.1, but the map fails (NaN) for q > 0.3 and its first image is a wild 0.9: the
    # damped step from q0 = 0.2 (mixing 0.5 → 0.55) fails, the loop must restore q0 and halve
    # the mixing until the step stays below 0.3 (0.125 → 0.2875), then converge to 0.1
    calls = []

    def F(x):
        calls.append(x["q"])
        if x["q"] > 0.3:
            return dict(q=math.nan, V=1.0), None
        return dict(q=0.9 if len(calls) == 1 else 0.1, V=1.0), None

    r = iterate(F, dict(q=0.2, V=1.0), strategy=strategy, tol=1e-9, max_iter=400)
    assert r.status == "converged", r.message
    assert r.x["q"] == pytest.approx(0.1, rel=1e-9)
    assert r.mixing < 0.5  # halved after the failure
    assert any(c > 0.3 for c in calls)  # the failure did happen


def test_a_map_that_always_fails_gives_status_nan():
    def F(x):
        return dict(q=math.nan), None

    for s in (Damped(0.5), Anderson(0.5)):
        r = iterate(F, dict(q=1.0), strategy=s, max_iter=50)
        assert r.status == "nan"


@pytest.mark.parametrize(
    "strategy", [Damped(0.5), Anderson(0.5), QuasiNewton()], ids=["damped", "anderson", "newton"]
)
def test_a_map_undefined_at_the_start_says_so_whatever_the_strategy(strategy):
    # the ERM solver restarts a cold start from a derived one on "map failed at the start"
    # (solver.start_point); before, only QuasiNewton said so, and the cold semantic and trivial
    # starts (Anderson) ended in a bare "nan".  A failure after a good point does not say it.
    def F(x):
        if x["q"] > 1.5:
            raise FloatingPointError("the ridge step is unstable")
        return dict(q=0.5 * x["q"] + 0.5), None

    r = iterate(F, dict(q=2.0), strategy=strategy, max_iter=20)
    assert r.status == "nan" and r.message.startswith("map failed at the start")
    assert "ridge step" in r.message
    r = iterate(F, dict(q=1.0), strategy=strategy, tol=1e-9, max_iter=50)
    assert r.status == "converged" and r.x["q"] == pytest.approx(1.0, rel=1e-8)


def test_array_states_are_judged_per_order_parameter():
    # a state with a matrix and a vector: the contraction x -> x* + 0.5 (x - x*) per entry
    qs, ms = np.array([[2.0, 0.5], [0.5, 1.0]]), np.array([0.3, -0.3, 0.1])

    def F(x):
        return dict(q=qs + 0.5 * (x["q"] - qs), m=ms + 0.5 * (x["m"] - ms)), None

    x0 = dict(q=np.eye(2), m=np.zeros(3))
    r = iterate(
        F, x0, strategy=Anderson(0.8, keep_signs=False), tol=1e-11, max_iter=200, keep_history=True
    )
    assert r.status == "converged"
    assert np.allclose(r.x["q"], qs, rtol=1e-10) and np.allclose(r.x["m"], ms, rtol=1e-10)
    assert r.history["q"].shape == (len(r.history["residual"]), 2, 2)
    p = Packing.of(x0)
    assert p.keys == ("q", "m") and p.size == 7
    back = p.unpack(p.pack(dict(q=qs, m=ms)))
    assert np.array_equal(back["q"], qs) and np.array_equal(back["m"], ms)


def test_decay_stop_ends_a_collapsing_run():
    # m decays geometrically to 0 (a branch collapsing onto the trivial one): the stop rule
    # fires with status "diverged" once m < threshold and decreasing for 15 iterations
    def F(x):
        return dict(m=0.8 * x["m"], V=1.0), None

    stop = DecayStop(lambda fx: abs(fx["m"]), 2e-2, "m collapsed")
    r = iterate(
        F, dict(m=0.5, V=1.0), strategy=Damped(1.0), tol=1e-14, max_iter=500, callbacks=[stop]
    )
    assert r.status == "diverged" and r.message.startswith("m collapsed")
    assert abs(r.fx["m"]) < 2e-2 and r.iterations < 100


def test_decay_stop_ends_a_run_whose_order_parameter_flips_sign_at_zero():
    # the positional start at sigma = 0.7 (docs/attention.md §6): the map's eigenvalue along m
    # at the trivial point is -1.35, so m lands at ~1e-11 and flips sign there for ever, never
    # decreasing for 15 iterations; the stop fires once it is zero to rounding (< 2e-8)
    vals = iter([0.3, 0.1, 0.04, 1e-3] + [1.3e-11, 2.7e-12] * 50)
    stop = DecayStop(lambda fx: next(vals), 2e-2, "m collapsed")
    step = SimpleNamespace(fx={})
    why = [stop(step) for _ in range(5)]
    assert why[:4] == [None] * 4 and why[4].startswith("m collapsed (order parameter 1.30e-11")
    late = DecayStop(lambda fx: 1e-7, 2e-2, "m", window=15)  # small, not yet zero: no stop
    assert all(late(step) is None for _ in range(10))


def test_an_exact_cycle_ends_the_loop_instead_of_spending_max_iter():
    # F(a) = -a with the full step visits 1, -1, 1, -1, ...: the third visit of a point stops
    # the loop (evaluation 5 of the 500 allowed); a slow spiral that never repeats is not a cycle
    r = iterate(
        lambda x: (dict(a=-x["a"]), None),
        dict(a=1.0),
        strategy=Damped(1.0, adapt=False),
        tol=1e-12,
        max_iter=500,
    )
    assert r.status == "max_iter" and r.iterations == 5 and "cycles" in r.message
    r = iterate(
        lambda x: (dict(a=-0.999 * x["a"]), None),
        dict(a=1.0),
        strategy=Damped(1.0, adapt=False),
        tol=1e-12,
        max_iter=50,
    )
    assert r.status == "max_iter" and r.iterations == 50 and "cycles" not in r.message
    r = iterate(  # an algorithm (tol = 0) runs all its steps, even sitting at its fixed point
        lambda x: (dict(a=-x["a"]), None),
        dict(a=1.0),
        strategy=Damped(1.0, adapt=False),
        tol=0.0,
        max_iter=20,
    )
    assert r.iterations == 20 and "cycles" not in r.message


def test_a_fixed_step_run_evaluates_exactly_max_iter_times():
    seen = []
    r = iterate(
        lambda x: (dict(a=0.5 * x["a"] + 1.0), None),
        dict(a=0.0),
        strategy=Damped(0.5, adapt=False),
        tol=0.0,
        max_iter=7,
        callbacks=[lambda step: seen.append(step.damped()["a"])],
    )
    assert r.status == "max_iter" and r.iterations == 7 and len(seen) == 7
    # the recorded damped iterates of x <- x + 0.5 (0.5 x + 1 - x) = 0.75 x + 0.5 from 0
    expect = [0.0]
    for _ in range(7):
        expect.append(0.75 * expect[-1] + 0.5)
    assert np.allclose(seen, expect[1:], rtol=1e-14)


@pytest.mark.parametrize("strategy", [Damped(0.5, adapt=False), Anderson(0.5)])
def test_max_time_stops_the_loop_inside_a_solve_and_keeps_the_last_point(strategy):
    # a map that takes 50 ms per evaluation and contracts slowly (F(a) = 0.99 a + 0.02, fixed
    # point 2): a 0.3 s bound stops it long before tol or max_iter
    import time

    def F(x):
        time.sleep(0.05)
        return dict(a=0.99 * x["a"] + 0.02), None

    t0 = time.perf_counter()
    r = iterate(F, dict(a=0.0), strategy=strategy, tol=1e-12, max_iter=10_000, max_time=0.3)
    wall = time.perf_counter() - t0
    assert r.status == "max_time" and "max_time = 0.3 s exceeded" in r.message
    # the overrun is the evaluation under way when the bound passed (50 ms) plus scheduling
    # noise on a loaded machine: 0.5 s of slack
    assert 0.3 <= wall < 0.8 and 2 <= r.iterations < 10_000
    # the last accepted point and its (undamped) image are kept, consistent with the map
    assert r.fx["a"] == pytest.approx(0.99 * r.x["a"] + 0.02, rel=1e-14)
    assert 0 < r.x["a"] < 2


def test_an_unspent_max_time_leaves_the_run_bit_identical():
    kw = dict(strategy=None, tol=1e-10, max_iter=200)
    a = iterate(make_map(), START, **kw)
    b = iterate(make_map(), START, max_time=1e9, **kw)
    assert a.status == b.status and a.iterations == b.iterations
    assert all(a.x[k] == b.x[k] for k in KEYS) and a.message == b.message
    with pytest.raises(ValueError, match="max_time"):
        iterate(make_map(), START, max_time=-1.0)


def test_two_fidelity_solve_needs_few_accurate_maps():
    # accurate map: the ERM-like Jacobian; cheap map: a fixed point 2e-3 off and a 5 % different
    # Jacobian.  The solve reaches the ACCURATE fixed point with a few accurate evaluations.
    acc_calls = []
    F_acc = make_map()

    def F(x):
        acc_calls.append(1)
        return F_acc(x)

    cheap = make_map(JREL * 1.05 + 0.02, curvature=0.25, xstar=XSTAR * (1 + 2e-3))
    r = solve_two_fidelity(F, START, cheap=cheap, newton_first=True, tol=1e-10)
    assert r.status == "converged"
    assert np.allclose(_x(r), XSTAR, rtol=1e-9)
    assert len(acc_calls) <= 8  # accurate maps (cheap stages count in r.iterations too)
    assert r.iterations > len(acc_calls)
    assert np.allclose(
        [r.metadata["cheap_fixed_point"][k] for k in KEYS], XSTAR * (1 + 2e-3), rtol=1e-4
    )


def test_find_root_and_bracket_locate_a_known_root():
    f = lambda a: math.log(a / 1.2515)
    g = bracket(lambda a: -f(a), 1.0, sign_below=+1.0)
    r = find_root(lambda a: -f(a), g, xtol=1e-12)
    assert r.status == "converged" and r.root == pytest.approx(1.2515, rel=1e-10)
    assert min(g) <= 1.2515 <= max(g)
    none = find_root(lambda a: 1.0, [1.0, 2.0, 3.0])
    assert none.status == "max_iter" and math.isnan(none.root) and "sign change" in none.message
    # a branch that ends (nan) before the root: the walk steps back and still brackets it
    h = lambda a: (a - 2.0) if a < 2.6 else math.nan
    gb = bracket(h, 1.0, sign_below=-1.0)
    assert find_root(h, gb).root == pytest.approx(2.0, abs=1e-6)


def test_extrapolate_matrix_order_parameters_entry_by_entry():
    from theory.solve import extrapolate

    # linear in x entry by entry: the exact line through the two points (closed form)
    prev = [dict(q=np.array([[1.0, 0.2], [0.2, 2.0]])), dict(q=np.array([[1.5, 0.1], [0.1, 2.5]]))]
    out = extrapolate(prev, [1.0, 2.0], 3.0, ["q"])["q"]
    # (1, 1) and (2, 2) follow the line; (1, 2) would reach 0.0 (a zero): it keeps the last 0.1
    np.testing.assert_allclose(out, [[2.0, 0.1], [0.1, 3.0]], atol=1e-14)
    # a scalar keeps the scalar rule
    assert extrapolate([dict(v=1.0), dict(v=2.0)], [0.0, 1.0], 2.0, ["v"])["v"] == 3.0


def test_a_stalled_cold_anderson_stage_hands_over_to_newton():
    # a map whose damped step (mixing 0.5) has slope exactly -1 in q (F's slope -3): the
    # damped iteration cycles with a residual ~1, never below the 5e-2 where Anderson engages,
    # so a cold two-fidelity solve spends its whole Anderson budget on the cheap map (as the
    # cold semantic starts at small α did in the robustness sweep) before the accurate stage
    # solves it.  With newton_after the cheap stage hands over to quasi-Newton after 20 maps
    xs, jac = np.array([0.4, 3.0]), np.array([[-3.0, 0.2], [0.1, 0.5]])

    def lin(x0, J):
        def F(x):
            y = (np.array([x["q"], x["V"]]) - x0) / x0
            return dict(zip(("q", "V"), x0 * (1 + J @ y + 0.1 * y**2))), None

        return F

    kw = dict(cheap=lin(xs * (1 + 2e-3), 1.02 * jac), tol=1e-10, max_iter=80)
    start = dict(q=0.6, V=3.3)
    stuck = solve_two_fidelity(lin(xs, jac), start, **kw)
    assert stuck.iterations > 80 and "newton_after" not in stuck.metadata
    r = solve_two_fidelity(lin(xs, jac), start, newton_after=20, **kw)
    assert r.status == "converged", r.message
    assert np.allclose([r.x["q"], r.x["V"]], xs, rtol=1e-9)
    assert r.metadata["newton_after"] == 20 and r.iterations < 45
