"""Replica theory of the ERM model: quadrature, Stein vs derivative forms, stationarity of Φ,
exact symmetries, branches, fixed points."""

import math

import pytest

from theory import attention as A
from theory.attention import quadrature, state_equations

P = A.ERMParams()
# a cheap split rule for the fast tests (η 6x6, 12 radii, 24 scan angles)
COARSE = A.make_rule("split", 6, n_r=12, n_phi=24)


def test_split_rule_matches_tensor_gauss_hermite_where_the_prox_is_unique():
    # small V: I/V + ∇²ℓ is positive definite everywhere that matters, the prox is single-valued
    # and smooth, so plain tensor Gauss-Hermite converges fast and is an independent reference
    q, m, th, V = 0.3, 0.2, 0.15, 0.5
    gh = state_equations.channel(q, m, th, V, P, A.make_rule("gh", 14))
    gh2 = state_equations.channel(q, m, th, V, P, A.make_rule("gh", 18))
    sp = state_equations.channel(q, m, th, V, P, A.make_rule("split", 14, n_r=20, n_phi=24))
    assert sp["jumps"] == 0
    for k in ("g2", "sg", "geta", "gxi", "M", "eps_g"):
        tol = 5 * abs(gh[k] - gh2[k]) + 1e-9 * max(1.0, abs(gh[k]))  # GH's own convergence
        assert abs(sp[k] - gh2[k]) <= max(tol, 2e-7 * abs(gh2[k])), (k, sp[k], gh2[k])


def test_stein_forms_equal_derivative_forms_without_jumps():
    # V̂ = -(α/√q) E[Σ g ξ] + θ θ̂ / q  and  θ̂ = α E[Σ g η]/√(ρ - θ²/q)  (Stein forms, used in
    # the iteration) against V̂ = -α E[tr ∂g/∂ω], θ̂ = α E[tr ∂g/∂h*] from the prox Jacobians.
    # At a generic point with m ≠ 0 and θ ≠ 0 and no jumps they must agree to quadrature accuracy.
    alpha = 1.7
    q, m, th, V = 0.3, 0.2, 0.15, 0.5
    # (the split rule: plain GH with 16^4 nodes is only converged to ~1e-5 for E[g ξ])
    ch = state_equations.channel(
        q, m, th, V, P, A.make_rule("split", 12, n_r=20, n_phi=24), jac=True
    )
    assert ch["jumps"] == 0
    h = state_equations.hats_from_channel(alpha, q, m, th, V, ch, P)
    assert h["Vhat"] == pytest.approx(h["Vhat_jac"], rel=1e-6)
    assert h["thetahat"] == pytest.approx(h["thetahat_jac"], rel=1e-6)


def test_stein_and_derivative_forms_differ_by_the_jump_term_on_the_positional_branch():
    # where x̂ jumps, E[∂g/∂ω] misses the surface term of the discontinuity: the derivative form
    # overestimates V̂ (jumps move x̂ forward with ω).  The Stein form is the correct one (it is
    # the derivative of E[M], checked in test_phi_is_stationary_at_the_fixed_point).
    q, m, V = 0.051, 0.258, 11.37
    ch = state_equations.channel(q, m, 0.0, V, P, COARSE, jac=True)
    h = state_equations.hats_from_channel(2.0, q, m, 0.0, V, ch, P)
    assert ch["jumps"] > 0
    assert h["Vhat_jac"] > h["Vhat"] * 1.02  # measured: +4.7 % at this point


@pytest.fixture(scope="module")
def fp_pos():
    return A.fixed_point(2.0, P, "positional", rule=COARSE, coarse=False, tol=1e-9)


@pytest.fixture(scope="module")
def fp_sem():
    return A.fixed_point(2.0, P, "semantic", rule=COARSE, coarse=False, tol=1e-9)


def test_fixed_points_converge_and_are_labelled_from_order_parameters(fp_pos, fp_sem):
    assert fp_pos.status == "converged" and fp_sem.status == "converged"
    assert fp_pos.branch == "positional" and fp_pos.theta == 0.0 and fp_pos.m > 0.05
    assert fp_sem.branch == "semantic" and fp_sem.m == 0.0 and fp_sem.theta > 0.05
    for r in (fp_pos, fp_sem):
        assert r.params["rho"] - r.theta**2 / r.q > 0
        # Cauchy-Schwarz: m² <= q/σ², θ² <= ρ q
        assert r.m**2 <= r.q / P.s2 and r.theta**2 <= P.rho * r.q
        # ε_t = -Φ equals the energy α E[ℓ(x̂)] + λ q/(2σ²) at a fixed point (independent sum)
        assert r.eps_t == pytest.approx(r.metadata["eps_t_energy"], rel=1e-6)
        assert r.eps_t > 0 and r.eps_g > 0


def _phi_grad(r, rule):
    o = dict(q=r.q, m=r.m, theta=r.theta, V=r.V)
    h = dict(qhat=r.qhat, mhat=r.mhat, thetahat=r.thetahat, Vhat=r.Vhat)
    out = {}
    for k, step in (("q", 1e-4), ("m", 1e-4), ("theta", 1e-4), ("V", 1e-3)):
        if k == "theta" and r.theta == 0.0:
            continue
        if k == "m" and r.m == 0.0:
            continue
        d = step * max(abs(o[k]), 1e-2)
        up = dict(o)
        dn = dict(o)
        up[k] += d
        dn[k] -= d
        out[k] = (
            state_equations.phi_at(r.alpha, up, h, P, rule)
            - state_equations.phi_at(r.alpha, dn, h, P, rule)
        ) / (2 * d)
    return out, o, h


@pytest.mark.parametrize("which", ["fp_pos", "fp_sem"])
def test_phi_is_stationary_at_the_fixed_point(which, request):
    # ∂Φ/∂x = 0 for x in (q, m, θ, V) at the fixed point.  Each derivative is a difference of two
    # terms of size ~ |hat|; require the sum to vanish to 1e-3 of the terms (the finite
    # difference has O(step²) ~ 1e-8 error; the rest is quadrature consistency).
    r = request.getfixturevalue(which)
    grads, o, h = _phi_grad(r, COARSE)
    scale = {
        "q": abs(h["Vhat"]),
        "m": abs(h["mhat"]),
        "theta": abs(h["thetahat"]),
        "V": abs(h["qhat"]),
    }
    for k, g in grads.items():
        assert abs(g) <= 1e-3 * scale[k], (k, g, scale[k])


def test_exact_symmetries_theta_and_m(fp_pos, fp_sem):
    # θ = 0 is invariant on the positional branch (T even in h*): θ̂ vanishes to round-off;
    # m = 0 is invariant on the semantic branch for A_11 = A_22: m̂ vanishes to round-off.
    # Computed on the full η grid (symmetry=False: nothing imposed).
    r = fp_pos
    ch = state_equations.channel(r.q, r.m, 0.0, r.V, P, COARSE, symmetry=False)
    h = state_equations.hats_from_channel(r.alpha, r.q, r.m, 0.0, r.V, ch, P)
    assert abs(h["thetahat"]) < 1e-10 * abs(h["mhat"])
    assert h["Vhat"] == pytest.approx(r.Vhat, rel=1e-9)  # the symmetric shortcut is exact
    r = fp_sem
    ch = state_equations.channel(r.q, 0.0, r.theta, r.V, P, COARSE, symmetry=False)
    h = state_equations.hats_from_channel(r.alpha, r.q, 0.0, r.theta, r.V, ch, P)
    assert abs(h["mhat"]) < 1e-8 * abs(h["thetahat"])
    assert h["Vhat"] == pytest.approx(r.Vhat, rel=1e-9)


@pytest.mark.slow
def test_positional_beats_semantic_at_small_alpha_and_loses_at_large_alpha():
    # the first-order transition: at α = 0.5 the positional branch is the global minimiser (the
    # semantic one is either absent — it collapses to θ → 0 — or higher in ε_t), at α = 3 the
    # semantic branch has the lower ε_t (ω = 0.3)
    e = {}
    for a in (0.5, 3.0):
        for b in ("positional", "semantic"):
            r = A.fixed_point(a, P, b, rule=COARSE, coarse=False, tol=1e-7, max_iter=150)
            e[a, b] = r.eps_t if (r.converged and r.branch == b) else math.inf
    assert math.isfinite(e[0.5, "positional"]) and e[0.5, "positional"] < e[0.5, "semantic"]
    assert math.isfinite(e[3.0, "semantic"]) and e[3.0, "semantic"] < e[3.0, "positional"]


def test_trivial_branch_stays_trivial():
    r = A.fixed_point(1.0, P, "trivial", rule=COARSE, coarse=False)
    assert r.m == 0.0 and r.theta == 0.0 and r.branch == "trivial"


@pytest.mark.slow
def test_damped_iteration_agrees_with_anderson(fp_sem):
    r = A.fixed_point(
        2.0,
        P,
        "semantic",
        rule=COARSE,
        coarse=False,
        accel="none",
        mixing=0.5,
        tol=1e-8,
        max_iter=400,
    )
    assert r.status == "converged"
    for k in ("q", "theta", "V"):
        assert getattr(r, k) == pytest.approx(getattr(fp_sem, k), rel=1e-6)


def test_bad_inputs_raise_value_errors():
    with pytest.raises(ValueError, match="alpha"):
        A.fixed_point(-1.0, P)
    with pytest.raises(ValueError, match="mixing"):
        A.fixed_point(1.0, P, mixing=0.0)
    with pytest.raises(ValueError, match="rho - theta"):
        state_equations.channel(0.1, 0.0, 0.5, 1.0, P, COARSE)
    with pytest.raises(ValueError, match="method"):
        A.make_rule("simpson")


@pytest.mark.slow
def test_quadrature_converged_when_nodes_are_raised():
    # the default split rule (trapezoid h = 0.5 in η, 16 radii, 16 scan angles) against a finer
    # one (h = 0.35, 24 radii, 32 angles, 6 arc nodes) at the positional and semantic fixed
    # points (ω = 0.3, α = 2): the 1e-4 relative on every reported quantity (measured:
    # positional q 4e-5, m 1.1e-5, V 1.8e-5, ε_t 1.6e-6, ε_g 1.1e-5; semantic < 1e-6)
    fine = A.make_rule("split", h=0.35, n_r=24, n_phi=32, n_arc=6)
    for b in ("positional", "semantic"):
        r0 = A.fixed_point(2.0, P, b, tol=1e-8)
        r1 = A.fixed_point(2.0, P, b, rule=fine, init=r0, tol=1e-8)
        assert r0.converged and r1.converged
        for k in ("q", "V", "eps_t", "eps_g") + (("m",) if b == "positional" else ("theta",)):
            assert getattr(r1, k) == pytest.approx(getattr(r0, k), rel=1e-4), (b, k)


@pytest.mark.slow
def test_semantic_branch_learns_the_teacher_at_omega_zero():
    r = A.fixed_point(6.0, P.replace(omega=0.0), "semantic")
    assert r.converged
    assert r.theta / P.s2 > 0.9
    # measured (6²/12/24 rule): θ/σ² = 0.929, ε_g = 8.6e-5 = 0.021 ε_g^lin
    assert r.eps_g < 0.05 * A.linear_baseline(P.replace(omega=0.0))
    assert math.isfinite(r.eps_t)


@pytest.mark.parametrize("point", [(0.0512, 0.258, 0.0, 11.37), (0.1148, 0.0, 0.1582, 12.67)])
def test_four_fold_eta_symmetry_gives_the_unsymmetrised_sums(point):
    # η → -η and the swap ℓ1 ↔ ℓ2 (A_11 = A_22): a quarter of the η nodes, the same sums up to
    # the skipped negligible-weight circles (measured ~1e-9 relative)
    q, m, th, V = point
    rule = A.make_rule("split", 8, n_r=10, n_phi=16, n_arc=4)
    a = state_equations.channel(q, m, th, V, P, rule, symmetry=True)
    b = state_equations.channel(q, m, th, V, P, rule, symmetry=False)
    for k in ("g2", "sg", "geta", "gxi", "M", "eps_g"):
        assert a[k] == pytest.approx(b[k], rel=1e-7, abs=1e-12), k


@pytest.mark.parametrize("point", [(0.1148, 0.0, 0.1582, 12.67), (0.05, 0.0, 0.0, 20.0)])
def test_eta_symmetry_without_swap_symmetry_gives_the_unsymmetrised_sums(point):
    # A_11 != A_22 (the other-A phase diagram): η → -η (with ξ → -ξ at m = 0: T is even in h*,
    # the loss in x) still halves the η nodes of the semantic and trivial points
    q, m, th, V = point
    p = P.replace(A=((0.3, 0.7), (0.8, 0.2)), omega=0.14)
    assert not p.swap_symmetric
    rule = A.make_rule("split", 8, n_r=10, n_phi=16, n_arc=4)
    a = state_equations.channel(q, m, th, V, p, rule, symmetry=True)
    b = state_equations.channel(q, m, th, V, p, rule, symmetry=False)
    for k in ("g2", "sg", "geta", "gxi", "M", "eps_g"):
        assert a[k] == pytest.approx(b[k], rel=1e-7, abs=1e-12), k


def test_trapezoid_eta_rule_is_symmetric_and_integrates_gaussian_moments():
    import numpy as np

    x, w = quadrature.eta_rule(A.make_rule("split", h=0.5))
    assert len(x) % 2 == 0 and np.allclose(x, -x[::-1])
    # the trapezoidal rule is spectrally accurate for entire integrands: E[1], E[z²], E[z⁴]
    # (the domain is cut at ±ETA_CUT = 7.5 where the density is 1e-12.6)
    assert w.sum() == pytest.approx(1.0, abs=1e-11)
    assert (w * x**2).sum() == pytest.approx(1.0, abs=1e-10)
    assert (w * x**4).sum() == pytest.approx(3.0, abs=1e-9)
    # ... and, for an integrand like the teacher's sigmoid of a quadratic form (complex poles
    # near the real axis), much faster than Gauss-Hermite: measured errors for
    # E[sigmoid(z(z - 1))] are trapezoid h = 0.5 (30 nodes) 6e-7, h = 0.35 (42 nodes) 8e-11;
    # Gauss-Hermite 30 nodes 1.8e-6, 42 nodes ~4e-7, 60 nodes 1.5e-8
    from scipy.integrate import quad

    from theory.gauss import gh_rule

    g = lambda z: 1 / (1 + np.exp(-z * (z - 1.0)))
    ref = quad(
        lambda z: g(z) * np.exp(-z * z / 2) / math.sqrt(2 * math.pi),
        -12,
        12,
        epsabs=1e-14,
        epsrel=1e-13,
        limit=200,
    )[0]
    x, w = quadrature.eta_rule(A.make_rule("split", h=0.35))
    xg, wg = gh_rule(len(x))
    assert abs((w * g(x)).sum() - ref) < 1e-9
    assert abs((wg * g(xg)).sum() - ref) > 1e-7


def test_default_rule_is_the_trapezoid_in_eta():
    r = A.make_rule()
    assert r.eta == "trap" and r.h == quadrature.SPLIT_DEFAULT["h"]
    assert A.make_rule("split", 10).eta == "gh"  # giving only nodes selects Gauss-Hermite
    with pytest.raises(ValueError, match="h"):
        A.make_rule("split", h=5.0)


@pytest.mark.slow
def test_curve_continuation_matches_cold_solves_and_stops_at_the_branch_end():
    # default rule: the warm starts of the continuation take the direct quasi-Newton route
    # (accurate map, cheap Jacobian); the cold solves take the cheap-then-accurate route, so
    # the two meet only if both converge to the same fixed point (tol 1e-6 → agreement to a
    # few 1e-6).  Backward along the semantic branch, α = 0.6 lies below its end (~0.75):
    # it collapses there and is not continued to 0.55.
    alphas = [0.55, 0.6, 1.9, 2.0, 2.1]
    rs = {(r.init, r.alpha): r for r in A.curve(alphas, P)}
    for b in ("semantic", "positional"):
        cold = A.fixed_point(2.0, P, b)
        warm = rs[b, 2.0]
        assert warm.converged and warm.branch == b
        for k in ("q", "m", "theta", "V", "eps_t", "eps_g"):
            assert getattr(warm, k) == pytest.approx(getattr(cold, k), rel=2e-5, abs=1e-12), k
    assert all(rs["positional", a].converged for a in alphas)
    assert rs["semantic", 0.6].status == "diverged" and rs["semantic", 0.6].metadata["collapsed"]
    assert rs["semantic", 0.55].metadata.get("not_continued")
    assert "collapsed at α = 0.6" in rs["semantic", 0.55].message
