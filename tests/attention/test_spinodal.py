"""Spinodals, branch existence, bounded transition search and input validation (issue 13)."""

import importlib
import math

import numpy as np
import pytest

from theory import attention as A
from theory.attention.params import ALPHA_SUPPORTED
from theory.cli import main

P = A.ERMParams(omega=0.3)


@pytest.mark.parametrize("alpha", [1e300, ALPHA_SUPPORTED * 1.01, math.nan, math.inf, -1.0, 0.0])
def test_fixed_point_rejects_alpha_outside_the_supported_range(alpha):
    with pytest.raises(ValueError, match="alpha"):
        A.fixed_point(alpha, P, "semantic")


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(omega=-0.1), "omega"),
        (dict(omega=math.nan), "omega"),
        (dict(sigma=0.0), "sigma"),
        (dict(lam=-1e-3), "lam"),
        (dict(A=((0.5, 0.6), (0.4, 0.6))), "row-stochastic"),
        (dict(A=((0.5, 0.5, 0.0), (0.5, 0.5, 0.0), (0.0, 0.0, 1.0))), "2x2"),
    ],
)
def test_bad_parameters_raise_value_errors(kw, needle):
    with pytest.raises(ValueError, match=needle):
        A.ERMParams(**kw)


def test_spinodal_and_transition_reject_bad_options():
    with pytest.raises(ValueError, match="branch"):
        A.spinodal(P, "trivial")
    for bad in (math.nan, 0.0, 1e300):
        with pytest.raises(ValueError, match="alpha_max"):
            A.spinodal(P, alpha_max=bad)
        with pytest.raises(ValueError, match="alpha_max"):
            A.transition(P, alpha_max=bad)
    with pytest.raises(ValueError, match="when_absent"):
        A.fixed_point(1.0, P, "semantic", when_absent="maybe")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["fixed-point", "--alpha", "1e300", "--omega", "0.3"], "at most"),
        (["fixed-point", "--alpha", "nan", "--omega", "0.3"], "alpha"),
        (["fixed-point", "--alpha", "inf", "--omega", "0.3"], "alpha"),
        (["spinodal", "--omega", "2"], "omega"),
        (["spinodal", "--omega", "0.3", "--alpha-max", "-1"], "alpha_max"),
        (["transition", "--omega", "0.3", "--alpha-max", "nan"], "--alpha-max"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, needle):
    try:
        code = main(["erm", *argv, "--json"])
    except SystemExit as exc:  # NaN and inf are refused by the parser itself
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_the_theta_direction_decouples_at_the_trivial_point():
    # the eigenvalue is F_θ(δ)/δ because F_θ is odd in θ and the even overlaps do not move at
    # first order: checked on a cheap rule against the full finite-difference Jacobian column
    rule = A.make_rule("split", 4, n_r=8, n_phi=8, n_arc=2)
    x = dict(q=0.052, m=0.0, theta=0.0, V=30.3)
    delta = 1e-3 * math.sqrt(P.rho * x["q"])
    plus, *_ = A.state_map(0.72, dict(x, theta=delta), P, rule)
    minus, *_ = A.state_map(0.72, dict(x, theta=-delta), P, rule)
    base, *_ = A.state_map(0.72, x, P, rule)
    assert plus["theta"] == pytest.approx(-minus["theta"], rel=1e-9)  # odd
    for k in ("q", "V"):  # even: no first-order change (δ² ~ 1e-6 relative)
        assert plus[k] == pytest.approx(base[k], rel=1e-5)
    lam = A.bifurcation_eigenvalue(0.72, x, P, "semantic", rule)
    assert lam == pytest.approx((plus["theta"] - minus["theta"]) / (2 * delta), rel=1e-6)


@pytest.mark.slow
def test_semantic_spinodal_is_a_supercritical_pitchfork_at_omega_03():
    # independent check: continue the semantic branch towards its end (no early stop) and fit
    # the pitchfork's normal form α = α_0 + a θ² + b θ⁴ through three points: the branch meets
    # θ = 0 at α_0, which must be the α where the trivial point's eigenvalue crosses 1, and
    # a > 0 (supercritical: no fold below α_s).  Measured: α_0 = 0.71967 vs α_s = 0.71938; a
    # linear fit through the two lowest points is 1e-2 off, so the θ⁶ term left out is
    # expected at ≲ 1e-3 -- the tolerance.
    s = A.spinodal(P, "semantic")
    assert s.converged and s.kind == "pitchfork" and s.base == "trivial"
    assert s.alpha_spinodal == pytest.approx(0.71938, abs=2e-4)
    alphas, theta2 = [], []
    prev = None
    for a in (0.9, 0.8, 0.76):
        r = A.fixed_point(a, P, "semantic", init=prev, when_absent="off")
        assert r.converged and r.branch == "semantic"
        alphas.append(a)
        theta2.append(r.theta**2)
        prev = r
    b, a2, a0 = np.polyfit(theta2, alphas, 2)
    assert a0 == pytest.approx(s.alpha_spinodal, abs=1e-3)
    assert a2 > 0
    # the trivial point's eigenvalue crosses 1 there: below, the trivial point is stable in θ
    t = A.fixed_point(0.9 * s.alpha_spinodal, P, "trivial")
    assert A.bifurcation_eigenvalue(t.alpha, t, P, "semantic", A.make_rule("split")) < 1


@pytest.mark.slow
def test_below_its_spinodal_the_semantic_start_reports_the_trivial_point(capsys):
    code = main(["erm", "fixed-point", "--alpha", "0.5691", "--omega", "0.3", "--json"])
    import json

    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert d["status"] == "converged" and d["branch"] == "trivial" and d["init"] == "semantic"
    # α is 21 % below the spinodal, so the existence question is answered on the cheap rule's
    # spinodal (solver.SPINODAL_MARGIN 10 %), to xtol 1e-3: the rules' α_s differ by 0.9 % here
    # (the default rule's 0.7194: test_semantic_spinodal_is_a_supercritical_pitchfork_at_omega_03)
    assert "does not exist" in d["message"] and "cheap rule" in d["message"]
    assert d["alpha_spinodal_cheap_rule"] is True
    assert d["alpha_spinodal"] == pytest.approx(0.7194, rel=0.02)
    t = A.fixed_point(0.5691, P, "trivial")  # the trivial point solved directly
    assert d["q"] == pytest.approx(t.q, rel=1e-5) and d["V"] == pytest.approx(t.V, rel=1e-5)
    assert d["theta"] == 0.0 and d["m"] == 0.0


@pytest.mark.slow
def test_transition_without_a_semantic_branch_answers_no_transition():
    # ω = 0.95: a semantic start decays to θ = 0 at α_max (one capped cheap solve, ~10 s CPU)
    t = A.transition(A.ERMParams(omega=0.95), alpha_max=20.0)
    assert t.status == "no_transition" and t.alpha_max == 20.0
    assert "positional is the global minimiser for all α ≤ α_max" in t.message
    assert np.isnan(t.alpha_c)


def test_m_zero_is_invariant_for_a_non_symmetric_A():
    # why the semantic branch imposes m ≡ 0 for any A: at m = 0 the prox is odd under
    # (ξ, η) → -(ξ, η) whatever A, so E[Σ s_ℓ g_ℓ] vanishes (checked without the quadrature's
    # symmetry shortcuts, against its size ~1e-4 at m = 0.01; 1e-15 is rounding)
    rule = A.make_rule("split", 4, n_r=8, n_phi=8, n_arc=2)
    p = A.ERMParams(omega=0.15, A=((0.3, 0.7), (0.8, 0.2)))
    from theory.attention.state_equations import channel

    at0 = channel(0.0645, 0.0, 0.115, 13.16, p, rule, symmetry=False)
    off = channel(0.0645, 0.01, 0.115, 13.16, p, rule, symmetry=False)
    assert abs(off["sg"]) > 1e-5
    assert abs(at0["sg"]) < 1e-15


@pytest.mark.slow
def test_a_non_symmetric_A_solves_in_as_many_maps_as_the_symmetric_one():
    # measured: 17 map evaluations (A = [[0.3, 0.7], [0.8, 0.2]]) vs 15 (reference A); before
    # m ≡ 0 was imposed, the four-unknown solve did not finish in 60 s
    p = A.ERMParams(omega=0.15, A=((0.3, 0.7), (0.8, 0.2)))
    r = A.fixed_point(1.5, p, "semantic")
    s = A.fixed_point(1.5, A.ERMParams(omega=0.15), "semantic")
    assert r.converged and r.branch == "semantic" and s.converged
    assert r.iterations <= 1.5 * s.iterations


def test_spinodal_kind_options_are_checked():
    with pytest.raises(ValueError, match="side"):
        A.spinodal(P, "semantic", side="middle")
    not_solved = A.ERMResult(alpha=1.0, omega=0.3, status="max_iter", init="positional")
    with pytest.raises(ValueError, match="converged fixed point"):
        A.saddle_node(P, "positional", not_solved)


def test_classify_reads_the_regions_off_the_boundaries():
    # the ω = 0 picture (cheap rule): semantic from 0.51, positional on (0.11, 0.915) and
    # again above its saddle-node 10.3, α_c between
    from theory.attention.phases import REGIONS, classify

    b = dict(
        alpha_semantic=0.513,
        alpha_positional=0.11,
        alpha_positional_end=0.915,
        alpha_positional_fold=10.3,
        alpha_c=0.7,
    )
    got = [classify(a, b) for a in (0.03, 0.3, 0.6, 0.8, 5.0, 15.0)]
    assert got == [REGIONS[k] for k in (0, 1, 2, 3, 4, 3)]
    # no gap (nan end), no transition below alpha_max (inf), and α_c not found (nan)
    b.update(alpha_positional_end=math.nan, alpha_c=math.inf)
    assert classify(15.0, b) == "both, positional global"
    b.update(alpha_c=math.nan)
    assert classify(15.0, b) == "both, global undetermined"
    # positional absent above its end when no saddle-node brings it back (inf fold)
    b.update(alpha_positional_end=0.915, alpha_positional_fold=math.inf)
    assert classify(15.0, b) == "only semantic"


def test_regions_result_applies_the_rule_on_its_omegas():
    from theory.attention.phases import RegionsResult

    cols = dict(
        alpha_semantic=(0.513, 0.713),
        alpha_positional=(0.11, 0.057),
        alpha_positional_end=(0.915, math.nan),
        alpha_positional_fold=(10.3, math.nan),
        alpha_c=(0.62, 1.25),
    )
    r = RegionsResult(status="converged", omegas=(0.0, 0.3), **cols)
    assert r.region(5.0, 0.0) == "only semantic" and r.region(5.0, 0.3) == "both, semantic global"
    assert r.grid([0.3, 0.8, 5.0]).tolist() == [[1, 3, 4], [1, 2, 3]]
    with pytest.raises(ValueError, match="omega must be one of"):
        r.region(1.0, 0.2)


@pytest.mark.slow
def test_the_normal_form_sign_test_agrees_with_the_solved_branch():
    # ω = 0.3: spinodal reads a of α = α_s + a t² + b t⁴ (t = θ/√(ρq)) off two points of the
    # branch solved as α(t) on the cheap rule; independently, the fixed-point iteration on the
    # default rule a little above α_s gives t, hence a ≈ (α - α_s)/t².  The two differ by the
    # rules (α_s moves by 0.9 % between them) and the b t⁴ term (|b| t² ≈ 0.2 × 0.02 ≈ 1 % of a
    # at t ≈ 0.15): 10 % tolerance
    s = A.spinodal(P, "semantic")
    assert s.converged and s.kind == "pitchfork" and s.normal_form_a > 0
    assert s.alpha_pitchfork == s.alpha_spinodal
    assert "supercritical" in s.message
    alpha = s.alpha_spinodal + 0.008
    r = A.fixed_point(alpha, P, "semantic", when_absent="off")
    assert r.converged and r.branch == "semantic"
    t = A.amplitude(r, P, "semantic")
    assert (alpha - s.alpha_spinodal) / t**2 == pytest.approx(s.normal_form_a, rel=0.1)


@pytest.mark.slow
def test_the_positional_branch_at_omega_0_ends_in_a_saddle_node_off_nothing():
    # ω = 0 (cheap rule throughout, ~2 min under load): the positional fixed point at α = 20,
    # followed down as α(t), turns at a fold α_sn ≈ 10.30.  Independent check by the
    # fixed-point iteration warm-started down the branch: it converges on the positional
    # branch 2 % above the fold and not 2 % below (the fold's α is quadratic in the amplitude
    # step 1e-3 of the Brent search: error ≪ 2 %)
    from theory.attention.quadrature import coarse_rule

    rule = coarse_rule()
    p = A.ERMParams(omega=0.0)
    top = A.fixed_point(20.0, p, "positional", rule=rule)
    assert top.converged and top.branch == "positional"
    s = A.saddle_node(p, "positional", top, rule=rule)
    assert s.converged and s.kind == "saddle-node" and 5.0 < s.alpha_spinodal < 20.0
    prev = top
    for a in np.geomspace(20.0, 1.02 * s.alpha_spinodal, 6)[1:]:
        prev = A.fixed_point(a, p, "positional", init=prev, rule=rule, when_absent="stop")
        assert prev.converged and prev.branch == "positional"
    below = A.fixed_point(
        0.98 * s.alpha_spinodal, p, "positional", init=prev, rule=rule, when_absent="stop"
    )
    assert not (below.converged and below.branch == "positional")


@pytest.mark.slow
def test_the_positional_branch_at_omega_0_returns_to_the_trivial_point():
    # ω = 0: the trivial point's m eigenvalue falls back through 1 at α ≈ 0.915 (side "upper"),
    # supercritically (a < 0: the branch lies below).  Independent check by the fixed-point
    # iteration: a small-m positional point 3 % below, the trivial point 3 % above
    from theory.attention.quadrature import coarse_rule

    rule = coarse_rule()
    p = A.ERMParams(omega=0.0)
    s = A.spinodal(p, "positional", side="upper", rule=rule)
    assert s.converged and s.kind == "pitchfork" and s.normal_form_a < 0
    r = A.fixed_point(0.97 * s.alpha_spinodal, p, "positional", rule=rule, when_absent="off")
    assert r.converged and r.branch == "positional" and 0 < A.amplitude(r, p, "positional") < 0.3
    up = A.fixed_point(1.03 * s.alpha_spinodal, p, "positional", rule=rule)
    assert up.converged and up.branch == "trivial"


@pytest.mark.slow
def test_the_regions_at_omega_0_match_the_fixed_points():
    # ω = 0 on the cheap rule (26 min wall on a ~10-fold shared machine): each boundary of
    # regions() checked by the fixed-point iteration on both sides -- the semantic start
    # reaches the semantic branch 10 % above α_s^sem and the trivial point 10 % below; the
    # positional start is positional on both sides of α_c and not in the gap (end, fold);
    # the global minimiser (lower ε_t) is positional 10 % below α_c and semantic 10 % above
    # (margins of 10 %: the boundaries come from other methods -- spinodals, saddle-node,
    # Brent on Δε_t -- and are sharp)
    from theory.attention.phases import classify, regions
    from theory.attention.quadrature import coarse_rule

    rule = coarse_rule()
    p = A.ERMParams(omega=0.0)
    r = regions([0.0], p, rule=rule)
    b = r.rows()[0]
    assert r.converged, r.message
    assert b["alpha_positional"] < b["alpha_semantic"] < b["alpha_c"]
    assert b["alpha_c"] < b["alpha_positional_end"] < b["alpha_positional_fold"]

    def on(alpha, branch):
        f = A.fixed_point(alpha, p, branch, rule=rule)
        return f if f.converged and f.branch == branch else None

    assert on(0.9 * b["alpha_semantic"], "semantic") is None
    assert on(1.1 * b["alpha_semantic"], "semantic") is not None
    for a, winner in ((0.9 * b["alpha_c"], "positional"), (1.1 * b["alpha_c"], "semantic")):
        s, q = on(a, "semantic"), on(a, "positional")
        assert s is not None and q is not None
        assert (s.eps_t < q.eps_t) == (winner == "semantic")
        assert r.region(a, 0.0) == f"both, {winner} global"
    mid = math.sqrt(b["alpha_positional_end"] * b["alpha_positional_fold"])
    assert on(mid, "positional") is None and on(mid, "semantic") is not None
    assert classify(mid, b) == "only semantic"


SP = importlib.import_module("theory.attention.spinodal")  # the module (A.spinodal: the function)


class _Poly(SP._Amplitude):
    """A branch whose α(t) is the normal form a_p + a t² + b t⁴, in place of the solved one."""

    def __init__(self, a_p, a, b):
        super().__init__(None, "semantic", "trivial", {}, None)
        self.poly = lambda t: a_p + a * t**2 + b * t**4

    def at(self, t, depth=0):
        return self.solved.setdefault(float(t), (self.poly(float(t)), {}))


@pytest.mark.parametrize(
    "a, b",
    [
        (-1.40, 77.3),  # a shallow fold, t* = 0.095: between the normal-form points (found at
        # ω = 0.58 with a non-symmetric A, where the walk from t = 0.15 up missed it)
        (-0.5, 2.0),  # a deep one, t* = 0.354: found by the walk
        (-4.0, 1000.0),  # shallower still, t* = 0.045: between the pitchfork and t = 0.05
    ],
)
def test_the_fold_walk_finds_the_minimum_of_alpha_of_t(a, b):
    # independent closed form: α(t) = a_p + a t² + b t⁴ is smallest at t*² = -a / 2b, where
    # α* = a_p - a² / 4b; Brent's xatol 1e-3 in t moves α by O(b t*² · 1e-6): rel 1e-6
    amp = _Poly(3.86, a, b)
    for t in (SP.DELTA, *SP.NORMAL_FORM_T):  # what _kind has solved before the walk
        amp.at(t)
    t_fold, alpha_fold, why = amp.fold(SP.NORMAL_FORM_T[1], 0.05, -1.0)
    assert t_fold == pytest.approx((-a / (2 * b)) ** 0.5, abs=2e-3), why
    assert alpha_fold == pytest.approx(3.86 - a**2 / (4 * b), rel=1e-6)


def test_the_fold_walk_goes_down_from_a_start_high_on_the_branch():
    # saddle_node walks from a point high on the branch towards smaller t (dt < 0)
    amp = _Poly(10.0, -0.5, 2.0)  # t* = 0.354
    amp.at(0.7)
    amp.at(0.65)
    t_fold, alpha_fold, why = amp.fold(0.7, -0.05, -1.0)
    assert t_fold == pytest.approx(0.125**0.5, abs=2e-3), why
    assert alpha_fold == pytest.approx(10.0 - 0.25 / 8.0, rel=1e-6)


@pytest.mark.slow
def test_without_a_positional_branch_alpha_c_is_where_the_semantic_branch_takes_over():
    # A = [[0.3, 0.7], [0.8, 0.2]], omega = 0.14: the tied student's positional scores +-m^2
    # favour the diagonal, the positional start collapses onto the trivial point, and the
    # semantic branch begins at a fold just below its subcritical pitchfork. The transition's
    # rival is then the trivial point, and alpha_c lies at the fold (within the 1e-3 relative
    # step the search takes above it). Checked by plain cold solves, not by the spinodal code
    # that placed it: no positional branch at 1.5 alpha_c; 3 % below alpha_c a semantic start
    # finds no semantic fixed point (it collapses onto the trivial one); 1 % above and at
    # 2 alpha_c it finds one below the trivial point in eps_t. So the takeover lies in
    # [0.97, 1.01] alpha_c whatever the spinodal search did.
    from theory.attention.figures.simulation import figure_rule

    rule = figure_rule(True)
    p = A.ERMParams(omega=0.14, A=((0.3, 0.7), (0.8, 0.2)))
    t = A.transition(p, rule=rule)
    assert t.status == "converged", t.message
    assert "no positional branch" in t.message
    pos = A.fixed_point(1.5 * t.alpha_c, p, "positional", rule=rule)
    assert pos.converged and pos.branch == "trivial"
    below = A.fixed_point(0.97 * t.alpha_c, p, "semantic", rule=rule)
    assert below.branch != "semantic"
    for a in (1.01 * t.alpha_c, 2 * t.alpha_c):
        sem = A.fixed_point(a, p, "semantic", rule=rule)
        triv = A.fixed_point(a, p, "trivial", rule=rule)
        assert sem.converged and sem.branch == "semantic"
        assert sem.eps_t < triv.eps_t
