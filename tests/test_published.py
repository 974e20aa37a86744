"""The published numbers (theory.published), the explanations of docs/published-vs-computed.md
that can be computed, and the doc against the code (no drift)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from theory.published import PUBLISHED, published, published_values

DOC = Path(__file__).resolve().parents[1] / "docs" / "published-vs-computed.md"


# --------------------------------------------------------------------------- the table itself


def test_records_are_immutable_and_keys_unique():
    r = published("cui2024/alpha_c/omega=0.3")
    with pytest.raises((AttributeError, TypeError)):
        r.value = 1.0
    with pytest.raises(TypeError):
        r.params["omega"] = 0.5
    assert len({p.key for p in PUBLISHED}) == len(PUBLISHED)
    assert all(p.key.startswith(p.paper + "/") for p in PUBLISHED)


def test_lookup_errors_name_close_keys():
    with pytest.raises(ValueError, match="did you mean"):
        published("cui2024/alpha_c/omega=0.31")
    with pytest.raises(ValueError, match="paper must be"):
        published_values("cui")
    assert len(published_values("cui2024", "alpha_l/")) == 12


# --------------------------------------------------------------------------- doc <-> code

_ROW = re.compile(r"^\| `([^`]+)` \|")


def _doc_rows():
    rows = []
    for line in DOC.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((m.group(1), [c.strip() for c in line.strip().strip("|").split("|")]))
    return rows


def _num(cell: str) -> float | None:
    m = re.match(r"^-?[0-9.]+(e[+-]?[0-9]+)?", cell.replace("−", "-"))
    return float(m.group(0)) if m else None


def test_every_doc_row_is_a_published_key_with_its_value_and_a_computed_difference():
    rows = _doc_rows()
    keys = [k for k, _ in rows]
    assert len(set(keys)) == len(keys), "a key appears twice in the table"
    missing = [r.key for r in PUBLISHED if r.key not in set(keys)]
    assert not missing, f"published numbers with no row in the table: {missing}"
    for key, cells in rows:
        rec = published(key)  # ValueError if the doc names a key the code does not have
        # columns: key | quantity | published | source | ours | rel. difference | reason
        pub = _num(cells[2])
        # printed to 4 significant digits at least
        assert pub == pytest.approx(rec.value, rel=5e-4), key
        assert cells[3] == rec.ref, key
        ours, rel = _num(cells[4]), cells[5]
        if ours is None:
            assert rel == "—", key
            continue
        # the relative difference is computed from the two printed numbers, to its last digit
        expected = 100 * (ours - rec.value) / rec.value
        got = float(rel.replace("−", "-").replace("%", "").replace("+", ""))
        assert got == pytest.approx(expected, abs=0.051 + 1e-3 * abs(expected)), key


# ------------------------------------------------------------ ERM: the authors' rules


def _gauss_moment(k: int) -> float:
    return 0.0 if k % 2 else float(math.prod(range(k - 1, 0, -2)))


@pytest.mark.parametrize("degree", [7, 11])
def test_cubature_2d_is_exact_to_its_degree_and_not_beyond(degree):
    from theory.attention.quadrature import cubature_2d

    x, w = cubature_2d(degree)
    assert w.sum() == pytest.approx(1.0, abs=1e-14)
    # independent reference: E[x^i y^j] for x, y ~ N(0, 1) independent = (i-1)!! (j-1)!!
    for i in range(degree + 1):
        for j in range(degree + 1 - i):
            got = float(w @ (x[:, 0] ** i * x[:, 1] ** j))
            # the tabulated nodes carry 16 digits: round-off ~1e-15 of the moment (945 at x^10)
            ref = _gauss_moment(i) * _gauss_moment(j)
            assert got == pytest.approx(ref, rel=1e-12, abs=1e-12), (i, j)
    # the next even degree is not integrated exactly (the rule is not a finer one in disguise)
    k = degree + 1
    errs = [
        abs(
            float(w @ (x[:, 0] ** i * x[:, 1] ** (k - i))) - _gauss_moment(i) * _gauss_moment(k - i)
        )
        for i in range(k + 1)
    ]
    assert max(errs) > 1e-3


def test_cubature_rule_is_the_tensor_product():
    from theory.attention.quadrature import cubature_2d, cubature_rule

    r = cubature_rule(7)
    x, w = cubature_2d(7)
    assert r.n_points == 144 and r.weights.sum() == pytest.approx(1.0)
    # E[ξ1² η2²] = 1 and E[ξ1⁴ η1⁴] = 9 under the product rule (degree 7 per factor)
    assert r.weights @ (r.nodes[:, 0] ** 2 * r.nodes[:, 3] ** 2) == pytest.approx(1.0)
    assert r.weights @ (r.nodes[:, 0] ** 4 * r.nodes[:, 2] ** 4) == pytest.approx(9.0)
    with pytest.raises(ValueError, match="cubature degree"):
        cubature_2d(9)


def test_authors_linear_baseline_is_their_quadrature():
    from theory.attention import linear_baseline
    from theory.attention.authors import authors_linear_baseline

    pub = published("cui2024/eps_g_lin/omega=0.3").value
    # the authors' code printed mse = 0.00398091773693432: same rules, same arithmetic up to
    # round-off (1e-12 relative)
    assert authors_linear_baseline({"omega": 0.3}) == pytest.approx(pub, rel=1e-12)
    # the converged value differs by ~1 %, 1e10 times the reproduction error
    assert abs(linear_baseline({"omega": 0.3}) / pub - 1) > 5e-3


# the authors' iteration stopped when an undamped step changed q, m, θ by < 1e-4 (absolute,
# damping 0.8); their own log at α = 2 shows V still moving by ~3e-3 per step: 0.3 % on the
# overlaps and 0.1 % on ε_t (stationary) bound what their stopping leaves
FP_TOL = {"q": 3e-3, "m": 3e-3, "theta": 3e-3, "V": 3e-3, "eps_t": 1e-3}


@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_authors_protocol_lands_on_their_fixed_points(branch):
    from theory.attention.authors import authors_fixed_point

    r = authors_fixed_point(2.0, {"omega": 0.3}, branch)
    assert r.converged and r.branch == branch
    for rec in published_values("cui2024", f"fp/{branch}/"):
        if rec.quantity == "eps_g":
            continue  # not reproduced to this precision: docs/published-vs-computed.md §2
        got = getattr(r, rec.quantity)
        assert got == pytest.approx(rec.value, rel=FP_TOL[rec.quantity]), rec.key


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_converged_fixed_points_differ_from_theirs_by_more_than_the_protocol(branch):
    from theory.attention import fixed_point

    r = fixed_point(2.0, {"omega": 0.3}, branch)
    # the converged V (semantic) and q (positional) are > 2 % away: 7x the protocol tolerance
    key = "V" if branch == "semantic" else "q"
    rec = published(f"cui2024/fp/{branch}/{key}")
    assert abs(getattr(r, key) / rec.value - 1) > 7 * FP_TOL[key]


@pytest.mark.slow
def test_authors_protocol_alpha_c_is_their_stored_crossing_not_their_list():
    from theory.attention.authors import authors_alpha_c, authors_fixed_point

    # the stored Φ of both branches at α = 1.25 (their CSVs): reproduced to 5e-4 relative
    stored = {"semantic": 2.72028e-3, "positional": 2.70974e-3}
    for b, v in stored.items():
        assert authors_fixed_point(1.25, {"omega": 0.3}, b).eps_t == pytest.approx(v, rel=5e-4)
    r = authors_alpha_c({"omega": 0.3}, (1.2, 1.3))
    assert r.converged
    # near their stored-Φ crossing (≈ 1.262 by linear interpolation over α = 1.25 … 1.57;
    # the interpolation alone is uncertain by ~0.005) ...
    assert r.alpha_c == pytest.approx(
        published("cui2024/alpha_c_stored_phi/omega=0.3").value, abs=5e-3
    )
    # ... but not on the hard-coded list: 1.9 % off, more than the converged value's 0.85 %
    assert r.alpha_c / published("cui2024/alpha_c/omega=0.3").value - 1 > 0.015


@pytest.mark.slow
def test_authors_protocol_alpha_l_lands_on_their_list():
    from theory.attention.authors import authors_alpha_l

    pub = published("cui2024/alpha_l/omega=0.3").value
    r = authors_alpha_l({"omega": 0.3}, (1.35, 1.55))
    assert r.converged
    # within 0.5 % (their stopping, FP_TOL, moves ε_g by ~0.3 % and α_l by its ratio to the
    # slope of ε_g); the converged α_l = 1.4923 is 2.9 % away (docs/published-vs-computed.md)
    assert r.alpha_l == pytest.approx(pub, rel=5e-3)


# --------------------------------------------------------------------------- SGD


def test_published_unique_semantic_boundary_is_the_first_order_criterion_alone():
    from scipy.optimize import brentq

    from theory import ssi

    pub = published("arnaboldi2025/boundary/a=1/unique_semantic").value
    # where the risk starts to decrease outward at the positional point (e, m) = (1, 0), the
    # first half of the boundary-minimum criterion (docs/ssi.md eq. 33); affine in ω
    Re10 = lambda om: float(ssi.pd_criteria(1.0, om).Re10)
    first_order = brentq(Re10, 0.3, 0.6, xtol=1e-10)
    # read off Fig. 4 at a resolution of ~0.01
    assert first_order == pytest.approx(pub, abs=0.01)
    full = ssi.boundaries(1.0).omega_positional_min_appears
    assert abs(full - pub) > 0.03  # the full criterion (with convexity along the circle)
    assert np.isclose(full, 0.5082142, atol=1e-6)


@pytest.mark.slow
def test_authors_protocol_alpha_c_lands_on_their_list_at_omega_04():
    from theory.attention.authors import authors_alpha_c

    pub = published("cui2024/alpha_c/omega=0.4").value
    r = authors_alpha_c({"omega": 0.4}, (1.6, 1.9))
    assert r.converged
    # within 0.7 % (the stopping of their iteration, FP_TOL, moves ε_t by ~1e-3 relative, and
    # α_c by that over the relative slope of Δε_t); the converged α_c(0.4) = 1.7715 is 1.2 % away
    assert r.alpha_c == pytest.approx(pub, rel=7e-3)


# ------------------------------------------------------------ SGD: the Fig. 10 crossing times


@pytest.mark.parametrize(
    "net, L", [("attention", 3), ("square", 3), ("attention", 9), ("square", 9)]
)
def test_fig10_crossing_times_are_the_ode_at_threshold_02(net, L):
    # docs/published-vs-computed.md §4: the four published Fig. 10 crossing times are the package
    # ODE's at the threshold m = 0.2 (from m0 = 1/sqrt(d)), not at the package's 0.5, where both
    # networks come out ~1.56-1.60x slower. Tolerance 3 %: the times are read off a log axis
    # (measured: -0.2 % to +2.4 %); at eta = 0.5 they are 55-60 % above.
    from theory import ssi

    d, lr = 1000, 5e-4
    tg = "(" + " + ".join(f"He2(z{i + 1})" for i in range(L)) + f")/sqrt(2*{L})"
    model = (
        ssi.AttentionModel(tg, L, pe="none", reduction="trace", trace_norm="sqrtL")
        if net == "attention"
        else ssi.UntiedNetwork(tg, L, activation="square")
    )
    pub = published(f"arnaboldi2025/crossing/fig10/{net}/L={L}").value
    at = {
        eta: ssi.integrate_ode(model, lr, d, m0=d**-0.5, eta=eta).steps_escape for eta in (0.2, 0.5)
    }
    assert at[0.2] == pytest.approx(pub, rel=0.03)
    assert at[0.5] > 1.5 * pub


# ------------------------------------------------------------ ERM: the authors' GD table

_GD_SIMS = Path(__file__).resolve().parents[1] / "figures" / "full" / "erm-sims.jsonl"
_LBFGS = re.compile(
    r"our L-BFGS at d = 1000 from the same init: ([0-9.e−-]+) ± ([0-9.e−-]+) .*?= ([+−-][0-9.]+) SE"
)


def _gd_table_rows():
    return [(k, c) for k, c in _doc_rows() if k.startswith("cui2024/gd_table/")]


def _f(s: str) -> float:
    return float(s.replace("−", "-"))


def test_gd_table_lbfgs_means_are_the_committed_runs():
    # docs/published-vs-computed.md §1.7: every quoted L-BFGS mean ± SE recomputed from the
    # committed erm-omega03 runs (d = 1000, seeds 0-7, 4000 test samples), and the "finite d" rows
    # within 3 SE of the difference (ours scaled to 24 runs for the authors'); 2 of 40 are not
    import json

    runs = [json.loads(line) for line in _GD_SIMS.read_text().splitlines()]
    rows = _gd_table_rows()
    assert len(rows) == 40
    within = 0
    for key, cells in rows:
        rec = published(key)
        a, init, q = rec.params["alpha"], rec.params["init"], rec.quantity
        v = np.array(
            [
                abs(r[q])
                for r in runs
                if r.get("d") == 1000
                and math.isclose(r["omega"], 0.3)
                and math.isclose(r["sigma"], 0.5)
                and math.isclose(r["lam"], 0.01)
                and r["status"] == "converged"
                and abs(r["alpha"] - a) < 1e-3
                and r["init"] == init
                and r.get("n_test") == 4000
                and r["seed"] < 8
            ]
        )
        assert len(v) == 8, key
        mu, se = v.mean(), v.std(ddof=1) / math.sqrt(len(v))
        m = _LBFGS.search(cells[6])
        assert m, key
        assert _f(m.group(1)) == pytest.approx(mu, rel=6e-4), key  # printed to 4 digits
        assert _f(m.group(2)) == pytest.approx(se, rel=0.06), key  # printed to 2 digits
        z = (rec.value - mu) / (se * math.sqrt(1 + 8 / 24))
        assert _f(m.group(3)) == pytest.approx(z, abs=0.051), key
        within += abs(z) <= 3
        if "finite d" in cells[6]:
            assert abs(z) <= 3, key
    assert within == 38
