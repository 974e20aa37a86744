"""The (e, m) ODE of theory.ssi.ode: closed-form cases, invariants, the weak-recovery event,
and agreement with an independent numpy implementation of online spherical SGD at small d."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from theory import ssi
from theory.ssi._kernels import attention_jac
from theory.ssi.ode import rhs


def _closed(rhs, y0, ts):
    sol = solve_ivp(rhs, (0, ts[-1]), y0, t_eval=ts, rtol=1e-11, atol=1e-13, method="DOP853")
    return sol.y.T


def test_tied_linear_network_matches_closed_form_ode():
    # f = (z1+z2)/sqrt2, g = z1+z2: dR/dm = -2 sqrt2, K = 4 R = 4 (3 - 2 sqrt2 m)
    lr, d = 0.05, 1000
    res = ssi.integrate_ode(ssi.TiedNetwork("z1 + z2", 2, "linear"), lr=lr, d=d, m0=0.1)
    s2 = math.sqrt(2)
    ref = _closed(
        lambda t, y: [2 * s2 * (1 - y[0] ** 2) - lr / 2 * 4 * (3 - 2 * s2 * y[0]) * y[0]],
        [0.1],
        res.t,
    )
    assert np.allclose(res.m, ref[:, 0], atol=1e-6)
    # stationary point: 2 sqrt2 (1 - m^2) = 2 lr (3 - 2 sqrt2 m) m
    m_star = res.final_m
    assert 2 * s2 * (1 - m_star**2) == pytest.approx(
        2 * lr * (3 - 2 * s2 * m_star) * m_star, abs=1e-7
    )
    assert res.status == "converged" and res.minimum == "semantic"
    assert np.allclose(res.steps, res.t * d / lr)


def test_untied_linear_network_matches_closed_form_ode():
    # untied linear: dR/dm_l = -sqrt2, K_l = 4 E(g-f)^2 / 2 = 2 R, R = 3 - sqrt2 (m1 + m2)
    lr, s2 = 0.1, math.sqrt(2)
    res = ssi.integrate_ode(
        ssi.UntiedNetwork("z1 + z2", 2, "linear"), lr=lr, d=400, m0=[0.05, -0.1]
    )

    def rhs(t, y):
        R = 3 - s2 * (y[0] + y[1])
        return [s2 * (1 - y[l] ** 2) - lr / 2 * 2 * R * y[l] for l in range(2)]

    ref = _closed(rhs, [0.05, -0.1], res.t)
    assert np.allclose(res.m_rows, ref, atol=1e-6)
    assert np.allclose(res.m, np.linalg.norm(ref, axis=1) / s2, atol=1e-6)


def test_circle_is_invariant_without_noise():
    model = ssi.AttentionModel("1 + He2(z1) + z1*z2", 2, pe="opposite", reduction="trace")
    res = ssi.integrate_ode(model, lr=0.0, d=100, e0=0.6, m0=0.8, t_max=20.0, n_out=30)
    assert np.allclose(res.e**2 + res.m**2, 1.0, atol=1e-6)


def test_escape_event_and_stuck_tied_network():
    model = ssi.TiedNetwork("He2(z1) + He2(z2)", 2, "relu")
    d, lr = 1000, 0.05
    res = ssi.integrate_ode(model, lr=lr, d=d)
    assert res.t_escape is not None and res.steps_escape == pytest.approx(res.t_escape * d / lr)
    eta = 2 / math.sqrt(d)
    part = ssi.integrate_ode(model, lr=lr, d=d, t_max=res.t_escape, n_out=5)
    assert abs(part.m[-1]) == pytest.approx(eta, rel=1e-5)
    # small-m growth: m' = (4/sqrt(2 pi) - lr K(0)/2) m at leading order (K(0) = 10)
    rate = 4 / math.sqrt(2 * math.pi) - lr * 10 / 2
    assert res.t_escape == pytest.approx(math.log(2) / rate, rel=2e-2)
    stuck = ssi.integrate_ode(ssi.TiedNetwork("z1 - z2", 2, "relu"), lr=lr, d=d)
    assert stuck.t_escape is None and stuck.minimum == "other"
    untied = ssi.integrate_ode(ssi.UntiedNetwork("z1 - z2", 2, "relu"), lr=lr, d=d)
    assert untied.t_escape is not None and untied.minimum == "semantic"


# --------------------------------------------------------------------------- vs numpy SGD


def _numpy_sgd_tied(d, lr, m0, t_grid, seeds, rng):
    """Independent online spherical SGD for the tied relu network, target He2(z1)+He2(z2):
    returns m (len(seeds), len(t_grid)).  Several seeds advance together (vectorised)."""
    L = 2
    S = len(seeds)
    wstar = np.zeros(d)
    wstar[0] = math.sqrt(d)
    w = rng.standard_normal((S, d))
    w[:, 0] = 0.0
    w *= math.sqrt(d * (1 - m0**2)) / np.linalg.norm(w, axis=1, keepdims=True)
    w[:, 0] = m0 * math.sqrt(d)
    steps = np.round(np.asarray(t_grid) * d / lr).astype(int)
    out = np.zeros((S, len(steps)))
    j = 0
    for nu in range(steps[-1] + 1):
        while j < len(steps) and steps[j] == nu:
            out[:, j] = w @ wstar / d
            j += 1
        X = rng.standard_normal((S, L, d)) / math.sqrt(d)
        zs = X @ wstar  # (S, L)
        y = np.sum(zs**2 - 1, axis=1)
        z = np.einsum("sld,sd->sl", X, w)
        u = z.sum(axis=1) / math.sqrt(L)
        f = np.maximum(u, 0)
        gl = -2 * (y - f) * (u > 0) / math.sqrt(L)  # dl/dz_l (same for every l)
        grad = gl[:, None] * X.sum(axis=1)
        w = w - lr * grad
        w *= math.sqrt(d) / np.linalg.norm(w, axis=1, keepdims=True)
    return out


def test_ode_matches_numpy_sgd_tied_network():
    d, lr, m0 = 600, 0.1, 0.25
    t_grid = np.array([0.0, 0.5, 1.0, 2.0])
    sim = _numpy_sgd_tied(d, lr, m0, t_grid, range(6), np.random.default_rng(3))
    res = ssi.integrate_ode(
        ssi.TiedNetwork("He2(z1) + He2(z2)", 2, "relu"), lr=lr, d=d, m0=m0, t_max=2.0, n_out=400
    )
    ode = np.interp(t_grid, np.concatenate([[0], res.t]), np.concatenate([[m0], res.m]))
    mean = sim.mean(axis=0)
    sem = sim.std(axis=0, ddof=1) / math.sqrt(sim.shape[0])
    # 4 standard errors plus a finite-size allowance 0.02 (O(1/d) drift corrections)
    assert np.all(np.abs(mean - ode) <= 4 * sem + 0.02), (mean, ode, sem)
    assert ode[-1] - ode[0] > 0.3  # the comparison is over a macroscopic change of m


def _numpy_sgd_attention_ps(d, lr, e0, m0, a, omega, t_grid, n_seeds, rng):
    """Independent online SGD for tied attention with P_1 = -P_2 = p, identity reduction,
    squared Frobenius loss, target (1-omega) softmax(z*z*^T) + omega A_a."""
    S = n_seeds
    wstar = np.zeros(d)
    wstar[0] = math.sqrt(d)
    p = np.zeros(d)
    p[1] = 1.0
    P = np.stack([p, -p])  # (2, d)
    A = ssi.positional_matrix(a)
    w = rng.standard_normal((S, d))
    w[:, :2] = 0.0
    w *= math.sqrt(d * (1 - m0**2 - e0**2)) / np.linalg.norm(w, axis=1, keepdims=True)
    w[:, 0] = m0 * math.sqrt(d)
    w[:, 1] = e0 * math.sqrt(d)
    steps = np.round(np.asarray(t_grid) * d / lr).astype(int)
    out_m = np.zeros((S, len(steps)))
    out_e = np.zeros((S, len(steps)))
    j = 0
    for nu in range(steps[-1] + 1):
        while j < len(steps) and steps[j] == nu:
            out_m[:, j] = w @ wstar / d
            out_e[:, j] = w @ p / math.sqrt(d)
            j += 1
        X = rng.standard_normal((S, 2, d)) / math.sqrt(d)
        zs = X @ wstar
        y = (1 - omega) * attention_jac(zs)[0] + omega * A
        Xp = X + P[None] / math.sqrt(d)
        z = np.einsum("sld,sd->sl", Xp, w)
        F, dF = attention_jac(z)
        gl = -2 * np.einsum("sij,sijl->sl", y - F, dF)
        grad = np.einsum("sl,sld->sd", gl, Xp)
        w = w - lr * grad
        w *= math.sqrt(d) / np.linalg.norm(w, axis=1, keepdims=True)
    return out_e, out_m


@pytest.mark.slow
def test_ode_matches_numpy_sgd_attention_with_positional_encoding():
    d, lr, e0, m0 = 500, 0.1, 0.3, 0.3
    a, omega = 1.0, 0.67
    t_grid = np.array([0.0, 2.0, 5.0, 10.0])
    se, sm = _numpy_sgd_attention_ps(d, lr, e0, m0, a, omega, t_grid, 6, np.random.default_rng(5))
    res = ssi.integrate_ode(ssi.ps_model(a, omega), lr=lr, d=d, e0=e0, m0=m0, t_max=10.0, n_out=400)
    tt = np.concatenate([[0], res.t])
    for sim, th, y0 in ((se, res.e, e0), (sm, res.m, m0)):
        ode = np.interp(t_grid, tt, np.concatenate([[y0], th]))
        mean = sim.mean(axis=0)
        sem = sim.std(axis=0, ddof=1) / math.sqrt(sim.shape[0])
        assert np.all(np.abs(mean - ode) <= 4 * sem + 0.02), (mean, ode, sem)


def test_ode_gain_matches_hermite_prediction():
    # sum He2 / sqrt2 at equal (small) step size: nu_untied / nu_tied = L (docs/ssi.md eq. 29),
    # from the ODEs of the two networks vs theory.ssi.hermite's tensor data
    for L in (2, 3):
        tgt = "(" + "+".join(f"He2(z{i + 1})" for i in range(L)) + ")/sqrt(2)"
        p = ssi.predicted_escape(tgt, L, d=1000, lr=0.005)
        assert p.gain_equal == pytest.approx(L)
        # the noise term (lr K/2) shifts the two growth rates differently: 1 % at lr = 0.005
        assert p.gain_ode == pytest.approx(p.gain_equal, rel=1e-2)
    assert ssi.predicted_escape("z1 - z2", 2, d=1000, lr=0.05).steps_escape_tied is None


@pytest.mark.parametrize(
    "model",
    [
        ssi.UntiedNetwork("(z1+z2)/sqrt(2)", 2, "linear"),
        ssi.TiedNetwork("(z1+z2)/sqrt(2)", 2, "linear"),
        ssi.UntiedNetwork("z1", 1, "linear"),
        ssi.ps_model(1.0, 0.5),
    ],
)
def test_trajectory_never_leaves_the_ball(model):
    """The exact flow leaves |(e, m)| <= 1 (untied: every |m_l| <= 1) invariant; a realisable
    linear target is learnt to m = 1 ON the boundary, where the integrator's error used to step
    out (final_m = 1.0000000013 for the untied network): every reported state lies in the ball,
    exactly (no tolerance), and the linear networks reach the closed-form m* = 1 (gamma < 1:
    K = 8 (1 - m) vanishes there) to the ODE's rtol 1e-8."""
    res = ssi.integrate_ode(model, 0.05, 1000)
    if model.untied:
        assert np.all(np.abs(res.m_rows) <= 1.0)
    E = np.reshape(res.e, (len(res.t), -1))
    norms = np.sqrt((E**2).sum(1) + res.m**2)  # e is reported as the reduced coordinate c
    assert np.all(norms <= 1.0) and np.all(res.m <= 1.0) and res.final_m <= 1.0
    if isinstance(model, ssi.TiedNetwork):
        assert res.final_m == pytest.approx(1.0, abs=1e-8)


class _FullJacobianTrace(ssi.AttentionModel):
    """The trace-reduced attention student through the full (N, L, L, L) Jacobian: the route the
    ODE took before the O(N L^2) kernel ``attention_trace_jac``."""

    def student(self, z):
        A, dA = attention_jac(z)
        L = z.shape[1]
        idx = np.arange(L)
        return A[:, idx, idx].sum(axis=1)[:, None], dA[:, idx, idx, :].sum(axis=1)[:, :, None]


def test_trace_kernel_keeps_the_ode_of_the_full_jacobian():
    """The L = 3 ODE (orthonormal encoding) with the fast trace kernel against the same ODE
    through the full Jacobian (the previous route): the right-hand sides differ by roundoff
    only, so the trajectories agree to the integrator's tolerance (rtol 1e-8; 1e-6 leaves room
    for a different adaptive step).  8^3 student nodes keep it fast: the two routes share them,
    whatever their number."""
    target = "He2(z1)+0.5*z2*z3"
    kw = dict(L=3, pe="orthonormal", reduction="trace", n_student=8)
    fast = ssi.integrate_ode(ssi.AttentionModel(target, **kw), lr=0.05, d=1000)
    ref = ssi.integrate_ode(_FullJacobianTrace(target, **kw), lr=0.05, d=1000)
    assert fast.status == ref.status
    assert fast.t_escape == pytest.approx(ref.t_escape, rel=1e-6)
    assert fast.final_m == pytest.approx(ref.final_m, rel=1e-6, abs=1e-9)
    np.testing.assert_allclose(fast.risk, ref.risk, rtol=1e-6)
    np.testing.assert_allclose(fast.e, ref.e, rtol=1e-6, atol=1e-9)


def test_l8_right_hand_side_never_builds_the_full_jacobian():
    """The L = 8 ODE of the robustness sweep (-0.077 He1(z6) He4(z4) - 0.498 He1(z6) He2(z7) -
    0.629 He3(z3), orthonormal encoding, gamma = 0.12) ran > 120 s CPU: every right-hand side
    built the (N, L, L, L) Jacobian on 2^15 QMC nodes, 134 MB (~1.3 s).  Deterministic proxy of
    that cost: the peak memory of one right-hand side, now O(N L^2) (a few 16 MB arrays)."""
    import tracemalloc

    from theory.ssi.ode import rhs

    target = "-0.077*He1(z6)*He4(z4)-0.498*He1(z6)*He2(z7)-0.629*He3(z3)"
    model = ssi.AttentionModel(target, L=8, pe="orthonormal", reduction="trace")
    y = np.full(9, 0.02)
    rhs(model, y, 0.12)  # builds the nodes and the Hermite tables once
    y[0] = 0.03
    tracemalloc.start()
    try:
        dy = rhs(model, y, 0.12)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.all(np.isfinite(dy))
    # measured: 558 MB through the full Jacobian (2^15 * 8^4 * 8 bytes = 134 MB per array),
    # 27 MB with the trace kernel (its temporaries are (N, L, L) arrays of 16.8 MB)
    assert peak < 80e6, peak


# ---- issue 13: the robustness sweep's `sgd ode` calls that ended with status "nan"


class _FailsPastOne:
    """An RK45 that stops with a solver failure once past t = 1, as LSODA did ("Unexpected
    istate") at t = 5.7e8 in the sweep: a deterministic stand-in for an integrator failure at a
    finite state."""

    @staticmethod
    def make():
        from scipy.integrate import RK45

        class FailsPastOne(RK45):
            def _step_impl(self):
                if self.t >= 1.0:
                    return False, "synthetic failure"
                return super()._step_impl()

        return FailsPastOne


def _relax(t, y):
    return -(y - 0.5)  # y -> 0.5, a closed form y(t) = 0.5 + 0.5 exp(-t) from y(0) = 1


def _stationary(t, y, dy, escaped):
    return float(np.linalg.norm(dy)) * t <= 1e-9


def test_integrator_failure_at_a_finite_state_is_retried_not_nan():
    from theory.solve.ode import integrate_log_time

    failing = _FailsPastOne.make()
    sol = integrate_log_time(_relax, [1.0], t_first=1e-3, stop=_stationary, method=failing)
    # the stiff fallback (Radau) continues from the failing chunk's last good state
    assert sol.status == "converged", sol.message
    assert sol.y_final[0] == pytest.approx(0.5, abs=1e-8)
    ref = 0.5 + 0.5 * np.exp(-sol.t)
    assert np.allclose(sol.y[:, 0], ref, rtol=1e-6)  # the integration tolerance is 1e-8


def test_integrator_failure_without_a_working_fallback_names_it():
    from theory.solve.ode import integrate_log_time

    failing = _FailsPastOne.make()
    sol = integrate_log_time(
        _relax, [1.0], t_first=1e-3, stop=_stationary, method=failing, fallback=(failing,)
    )
    # stopped at t = 1, finite, not stationary: a named status with the solver's reason
    assert sol.status == "max_iter"
    assert "could not continue" in sol.message and "synthetic failure" in sol.message
    assert np.all(np.isfinite(sol.y_final))
    assert sol.t_final == pytest.approx(1.0)
    assert sol.y_final[0] == pytest.approx(0.5 + 0.5 * math.exp(-1.0), rel=1e-6)


def test_attention_student_rule_keeps_the_zero_encoding_fixed_point():
    # The attention student f(z) = Tr softmax(z z^T) is even in z, so at (e, m) = 0 the
    # encoding gradient is an odd Gaussian average: exactly 0, and (e, m) = 0 is a fixed point of
    # the ODE.  At L >= 5 the student moments use QMC points; plain scrambled Sobol broke the
    # symmetry by its error (|dc/dt| = 6e-4 at L = 7), a spurious fixed point |c| ~ 1e-4 the flow
    # of sweep setting 7 neither escaped nor collapsed from, until LSODA failed at t = 5.7e8.
    # The antithetic rule is exact for odd functions: only rounding is left (sum of 2^15 terms).
    model = ssi.AttentionModel(
        ssi.parse_target("1.051*He4(z5)", 5), L=5, pe="orthonormal", reduction="trace"
    )
    dy = rhs(model, np.zeros(model.r + 1), 0.43)
    assert np.max(np.abs(dy)) < 1e-14
    # and the rule still integrates: the c-drift at c = m = 1e-3 is the same in every token
    # coordinate but the target's (token 5 carries He4): symmetric among the others to 1e-3
    dy = rhs(model, np.full(model.r + 1, 1e-3), 0.43)
    others = np.delete(dy[: model.r], 4)
    assert np.ptp(others) < 1e-3 * np.max(np.abs(others))
