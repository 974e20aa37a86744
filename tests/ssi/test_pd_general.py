"""Phase-diagram boundaries of any L = 2 teacher (theory.ssi.phase_diagram, issue 14 §1):
the A_a family against the numbers of the code before the generalisation, a non-family A and
the P_1 = P_2 encoding against independent computations, strength lines against omega lines."""

import json

import numpy as np
import pytest

from theory import ssi
from theory.gauss import gh_rule
from theory.ssi._kernels import attention_scores
from theory.ssi.phase_diagram import FAMILY_LOGITS, FLIP_NAMES

# The pre-generalisation values: ssi.boundaries(a) on main at ec12805 (the A_a-only code),
# computed before this change, 200^2 Gauss-Hermite nodes.  Order: steepest switch, global
# switch, positional minimum appears, semantic minimum disappears.
PRE_GENERALISATION = {
    1.0: (0.6409626178138653, 0.7376068294291112, 0.5082142379836448, 0.8416054040897432),
    0.9: (0.7266098346263046, 0.8120875718759215, 0.6238146408557013, 0.8877704598607272),
    0.85: (0.7849014250517935, 0.8603729986342743, 0.714091541905347, 0.9156870357239556),
}
A_EX = np.array([[0.95, 0.05], [0.3, 0.7]])  # a non-family, non-symmetric teacher


def _omegas(b):
    return np.array([getattr(b, "omega_" + k) for k in FLIP_NAMES], dtype=float)


def _table_root(f, lo, hi, n=81):
    """The sign change of f on a grid of n points, refined by linear interpolation (the
    criteria are affine in omega, so the interpolation adds no error of its own)."""
    x = np.linspace(lo, hi, n)
    y = np.array([f(v) for v in x])
    i = np.nonzero(np.sign(y[:-1]) != np.sign(y[1:]))[0]
    assert len(i) == 1, "expected one sign change on the scan"
    i = i[0]
    return x[i] - y[i] * (x[i + 1] - x[i]) / (y[i + 1] - y[i])


def test_family_identical_to_pre_generalisation():
    # the same criteria and Brent roots: only float rounding of <A, M> may differ (~1e-16);
    # 1e-9 is the brief's bar
    for a, ref in PRE_GENERALISATION.items():
        assert np.allclose(_omegas(ssi.boundaries(a)), ref, atol=1e-9, rtol=0), a
    # the same teacher given as a matrix and as logits a^2 [[1,-1],[-1,1]]
    ref = PRE_GENERALISATION[1.0]
    assert np.allclose(_omegas(ssi.boundaries(A=ssi.positional_matrix(1.0))), ref, atol=1e-9)
    assert np.allclose(_omegas(ssi.boundaries(A_logits=FAMILY_LOGITS)), ref, atol=1e-9)


def test_family_global_switch_by_dense_table_scan():
    # independent cross-check of one pre-generalisation value: the sign of R(1,0) - R(0,1)
    # from the Mehler/Chebyshev tables (another reduction of the same risk) scanned on 81
    # omegas; the tables carry R to ~5e-6 and |d(dR)/d omega| ~ 0.5, hence 2e-5
    tb = ssi.ps_tables()
    A = ssi.positional_matrix(1.0)
    dR = lambda w: float(tb.eval(1.0, 0.0, w, A)["R"] - tb.eval(0.0, 1.0, w, A)["R"])
    assert _table_root(dR, 0.6, 0.9) == pytest.approx(PRE_GENERALISATION[1.0][1], abs=2e-5)


def test_non_family_boundaries_independent():
    b = ssi.boundaries(A=A_EX)
    w = _omegas(b)
    assert np.all(np.isfinite(w)) and b.message == ""
    # global switch: equal risks of the two candidates, by the dense table scan (see above)
    tb = ssi.ps_tables()
    dR = lambda x: float(tb.eval(1.0, 0.0, x, A_EX)["R"] - tb.eval(0.0, 1.0, x, A_EX)["R"])
    assert _table_root(dR, 0.6, 1.0) == pytest.approx(b.omega_global_switch, abs=2e-5)
    # positional minimum appears: R_e(1, 0) < 0 and R_mm(1, 0) - R_e(1, 0) > 0; for this A the
    # second condition is the later one (tables: 2e-6 on R_e and R_mm, slopes ~0.4)
    v = lambda x: tb.eval(1.0, 0.0, x, A_EX)
    w_re = _table_root(lambda x: float(v(x)["Re"]), 0.4, 0.9)
    w_curv = _table_root(
        lambda x: float(np.subtract(*(lambda d: (d["Rmm"], d["Re"]))(v(x)))), 0.4, 0.9
    )
    assert w_re < w_curv
    assert w_curv == pytest.approx(b.omega_positional_min_appears, abs=2e-5)
    # brute force on the disk (tables, 81 radii x 324 angles): just below the global switch
    # the lowest point is the semantic corner, just above it the positional one
    r = np.linspace(0, 1, 81)
    th = np.linspace(0, 2 * np.pi, 324, endpoint=False)
    E, M = np.outer(r, np.sin(th)).ravel(), np.outer(r, np.cos(th)).ravel()
    for dw, corner in ((-0.005, "semantic"), (0.005, "positional")):
        R = tb.eval(E, M, b.omega_global_switch + dw, A_EX, second=False)["R"]
        i = int(np.argmin(R))
        at = "semantic" if abs(abs(M[i]) - 1) < 1e-9 else "positional"
        assert abs(abs(E[i]) - 1) < 1e-9 or at == "semantic"
        assert at == corner
    # steepest switch: R_ee(0, 0) = R_mm(0, 0) on the table scan (2e-6 on each, slope ~1)
    v0 = lambda x: tb.eval(0.0, 0.0, x, A_EX)
    w_st = _table_root(
        lambda x: float(np.subtract(*(lambda d: (d["Ree"], d["Rmm"]))(v0(x)))), 0.5, 1.0
    )
    assert w_st == pytest.approx(b.omega_steepest_switch, abs=2e-5)
    # semantic minimum disappears: R_ee(0, 1) - R_m(0, 1) = 0 on the table scan; the tables
    # carry the derivatives at |m| = 1 to ~2e-4 only (Mehler series truncated at order 40),
    # slope ~0.5: 1e-3
    v1 = lambda x: tb.eval(0.0, 1.0, x, A_EX)
    w_sem = _table_root(
        lambda x: float(np.subtract(*(lambda d: (d["Ree"], d["Rm"]))(v1(x)))), 0.6, 0.99
    )
    assert w_sem == pytest.approx(b.omega_semantic_min_disappears, abs=1e-3)


def test_same_sign_encoding_by_finite_differences():
    # P_1 = P_2 (Gram [[1,1],[1,1]], e_raw = (c, c)): the Stein-reduced e-derivatives of the
    # criteria against central differences of R(c, 0) - const = F2 - 2(1-w) <E S, F1> - 2w <A, F1>
    # with F1(c) = E S((c, c) + zeta), F2(c) = E||S||^2 by a 2-D 120^2 Gauss-Hermite rule
    # (another rule and another method; h = 1e-3: truncation ~h^2 * 1 = 1e-6)
    w, h = 0.6, 1e-3
    x, wt = gh_rule(120)
    Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(wt, wt).ravel()
    ES = np.einsum("n,nij->ij", W, attention_scores(Z))

    def R(c):
        S = attention_scores(Z + c)
        F1 = np.einsum("n,nij->ij", W, S)
        return (
            W @ np.sum(S**2, axis=(1, 2))
            - 2 * (1 - w) * np.sum(ES * F1)
            - 2 * w * np.sum(A_EX * F1)
        )

    c = ssi.pd_criteria(omega=w, A=A_EX, pe=[[1, 1], [1, 1]])
    assert float(c.Re10) == pytest.approx((R(1 + h) - R(1 - h)) / (2 * h), abs=1e-5)
    Ree_fd = (R(h) - 2 * R(0.0) + R(-h)) / h**2
    assert float(c.Ree00) == pytest.approx(Ree_fd, abs=1e-4)  # 2nd difference: 1e-16/h^2 noise
    # and the same-sign encoding is another problem than P_1 = -P_2
    c_opp = ssi.pd_criteria(omega=w, A=A_EX)
    assert abs(float(c_opp.Re10) - float(c.Re10)) > 1e-2


def test_strength_line_crosses_omega_line():
    # the point (omega_steepest(A), A) lies on the strength line through A at s = 1; the flip
    # found on that line must be there (Brent on both lines, 1e-9)
    for teacher in (dict(A=A_EX), dict(a=0.9)):
        b = ssi.boundaries(**teacher)
        for name in ("steepest_switch", "positional_min_appears"):
            w0 = getattr(b, "omega_" + name)
            bs = ssi.boundaries(**teacher, along="strength", omega=w0, s_range=(0.5, 2.0))
            assert getattr(bs, "s_" + name) == pytest.approx(1.0, abs=1e-9), (teacher, name)
    # the A_a family on the strength line of B = FAMILY_LOGITS: s = a^2
    bs = ssi.boundaries(A_logits=FAMILY_LOGITS, along="strength", omega=0.7, s_range=(0.3, 1.5))
    a_at = np.sqrt(bs.s_steepest_switch)
    assert ssi.boundaries(a_at).omega_steepest_switch == pytest.approx(0.7, abs=1e-9)


def test_phase_diagram_of_a_strength_grid_matches_pointwise():
    B = np.log(A_EX)
    s, w = np.linspace(0.5, 1.5, 5), np.linspace(0.5, 1.0, 6)
    pdg = ssi.phase_diagram(s, w, B=B)
    for i, j in ((0, 0), (2, 3), (4, 5)):
        one = ssi.pd_booleans(omega=w[j], A=ssi.strength_matrix(s[i], B))
        assert int(one.region) == pdg.region[i, j]
    assert np.allclose(ssi.strength_matrix(1.0, B), A_EX, atol=1e-15)


def test_general_teacher_errors():
    with pytest.raises(ValueError, match="row-stochastic"):
        ssi.boundaries(A=[[0.5, 0.6], [0.3, 0.7]])
    with pytest.raises(ValueError, match="2x2"):
        ssi.boundaries(A=np.eye(3))
    with pytest.raises(ValueError, match="exactly one"):
        ssi.boundaries(1.0, A=A_EX)
    with pytest.raises(ValueError, match="L = 2"):
        ssi.boundaries(A=A_EX, L=3)
    with pytest.raises(ValueError, match="identity reduction"):
        ssi.boundaries(A=A_EX, reduction="trace")
    with pytest.raises(ValueError, match="rank 2"):
        ssi.boundaries(A=A_EX, pe=[[1, 0.5], [0.5, 1]])
    with pytest.raises(ValueError, match="semi-definite"):
        ssi.boundaries(A=A_EX, pe=[[1, 2], [2, 1]])
    with pytest.raises(ValueError, match="no positional candidate"):
        ssi.boundaries(A=A_EX, pe="none")
    with pytest.raises(ValueError, match="needs the fixed omega"):
        ssi.boundaries(A=A_EX, along="strength")
    with pytest.raises(ValueError, match="every entry of A > 0"):
        ssi.boundaries(A=[[1.0, 0.0], [0.2, 0.8]], along="strength", omega=0.5)
    with pytest.raises(ValueError, match="exp overflow"):
        ssi.boundaries(A=A_EX, along="strength", omega=0.5, s_range=(0, 1e6))


# --------------------------------------------------------------------------- CLI


def _cli_json(capsys, argv):
    from theory.cli import main

    assert main(argv) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert len(lines) == 1
    return json.loads(lines[0])


def test_cli_boundaries_any_teacher(capsys):
    base = ["sgd", "boundaries", "--json"]
    d = _cli_json(capsys, base + ["--A", "0.95,0.05,0.3,0.7"])
    lib = ssi.boundaries(A=A_EX)
    for k in FLIP_NAMES:
        assert d["omega_" + k] == pytest.approx(getattr(lib, "omega_" + k), abs=1e-12)
    # the same teacher by its logits (--A-logits=..., as they start with '-'); and the strength
    # line through it at its steepest switch
    d2 = _cli_json(capsys, base + ["--A-logits=" + ",".join(map(str, np.log(A_EX).ravel()))])
    assert d2["omega_global_switch"] == pytest.approx(lib.omega_global_switch, abs=1e-9)
    w0 = repr(lib.omega_steepest_switch)
    d3 = _cli_json(
        capsys, base + ["--A", "0.95,0.05,0.3,0.7", "--along", "strength", "--omega", w0]
    )
    assert d3["s_steepest_switch"] == pytest.approx(1.0, abs=1e-9)
    # the family shortcut is unchanged
    d4 = _cli_json(capsys, base + ["--a", "0.85"])
    assert d4["omega_global_switch"] == pytest.approx(PRE_GENERALISATION[0.85][1], abs=1e-9)


def test_cli_phase_diagram_strength_axis(capsys, tmp_path):
    out = tmp_path / "pd.json"
    argv = ["sgd", "phase-diagram", "--A", "0.95,0.05,0.3,0.7", "--grid", "5"]
    d = _cli_json(
        capsys,
        argv + ["--s-range", "0.5:1.5", "--omega-range", "0.5:1", "--out", str(out), "--json"],
    )
    full = json.loads(out.read_text())
    assert d["s_range"] == [0.5, 1.5] and full["s"] == [0.5, 0.75, 1.0, 1.25, 1.5]
    ref = ssi.pd_booleans(omega=1.0, A=A_EX)  # s = 1, omega = 1
    assert full["region"][2][4] == int(ref.region)


@pytest.mark.parametrize(
    "extra",
    [
        ["--A", "0.5,0.6,0.3,0.7"],  # not row-stochastic
        ["--A", "0.5,0.5,0.3"],  # wrong shape
        ["--A", "0.5,0.5,0.3,0.7", "--G", "1,2,2,1"],  # Gram not PSD
        ["--A", "0.5,0.5,0.3,0.7", "--G", "1,0.5,0.5,1"],  # rank 2
        ["--A", "0.5,0.5,0.3,0.7", "--L", "3"],
        ["--a", "1", "--reduction", "trace"],
        ["--a", "1", "--A", "0.5,0.5,0.3,0.7"],
        ["--a", "1", "--along", "strength"],  # no --omega
        [],  # no teacher
    ],
)
def test_cli_bad_teacher_exits_2_one_line(capsys, extra):
    from theory.cli import main

    assert main(["sgd", "boundaries", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]


# --------------------------------------------------------------------------- numerical fallback


@pytest.mark.slow
def test_numerical_classification_agrees_with_exact_at_L2():
    # the fallback (constrained minimisation of the 4-D Gauss-Hermite risk, 12^4 nodes) against
    # the exact criteria, at omegas 0.05 or more from every flip of A_EX (0.656, 0.748, 0.830,
    # 0.898), so the quadrature error (~1e-4 in R) cannot move a point across a boundary
    for w in (0.8, 0.95):
        num = ssi.classify_numerical(w, A_EX, pe="opposite", n=12)
        exact = ssi.pd_booleans(omega=w, A=A_EX)
        assert num.exact is False and "numerical" in num.message
        assert num.region == int(exact.region), w


def test_numerical_classification_L3_semantic_teacher():
    # omega = 0: the teacher is the student at m = 1, so R = 0 there at every quadrature node
    # (1e-10 allows the rounding of the softmax); no other point of the ball reaches 0
    A3 = np.full((3, 3), 0.1) + 0.7 * np.eye(3)
    r = ssi.classify_numerical(0.0, A3, L=3, pe="orthonormal", n=2**10, n_starts=1)
    assert r.semantic_min and r.R_semantic == pytest.approx(0.0, abs=1e-10)
    assert r.region in (0, 1, 3, 4)  # the global minimum is semantic
    assert r.R_positional is None or r.R_positional > 1e-3


def test_cli_classify_exact_and_fallback(capsys):
    d = _cli_json(
        capsys, ["sgd", "classify", "--omega", "0.8", "--A", "0.95,0.05,0.3,0.7", "--json"]
    )
    assert d["exact"] is True and d["region"] == int(ssi.pd_booleans(omega=0.8, A=A_EX).region)
    # a rank-2 Gram matrix at L = 2: the fallback, which says so
    argv = ["sgd", "classify", "--omega", "0.0", "--A", "0.95,0.05,0.3,0.7", "--G", "1,0.3,0.3,1"]
    d = _cli_json(capsys, argv + ["--quad-nodes", "8", "--starts", "1", "--json"])
    assert d["exact"] is False and "numerical" in d["message"]
    assert d["semantic_min"] is True and d["R_semantic"] == pytest.approx(0.0, abs=1e-10)
