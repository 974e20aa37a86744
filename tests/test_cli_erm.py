"""The ``theory erm`` command: JSON contract, CSV output, errors."""

import csv
import json

import pytest

from theory.cli import main
from theory.models import positional_semantic as ps

FP_KEYS = {"q", "m", "theta", "V", "eps_t", "eps_g", "branch", "status", "iterations"}


def run_json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out  # exactly one JSON object on stdout
    return code, json.loads(lines[0])


def test_fixed_point_json_contract_and_agreement_with_the_api(capsys):
    argv = ["erm", "fixed-point", "--alpha", "1.5", "--omega", "0.3", "--branch", "semantic",
            "--method", "gh", "--nodes", "6", "--json"]
    code, d = run_json(capsys, argv)
    assert code == 0
    assert FP_KEYS <= set(d)
    assert d["status"] == "converged" and d["branch"] == "semantic" and d["m"] == 0.0
    r = ps.fixed_point(1.5, ps.ERMParams(omega=0.3), "semantic", method="gh", nodes=6)
    for k in ("q", "theta", "V", "eps_t", "eps_g"):
        assert d[k] == pytest.approx(getattr(r, k), rel=1e-12)


@pytest.mark.parametrize("argv, needle", [
    (["--alpha", "0", "--omega", "0.3"], "alpha"),
    (["--alpha", "1", "--omega", "1.5"], "omega"),
    (["--alpha", "1", "--omega", "0.3", "--sigma", "-1"], "sigma"),
    (["--alpha", "1", "--omega", "0.3", "--lam", "-0.5"], "lam"),
    (["--alpha", "1", "--omega", "0.3", "--A", "0.6,0.6,0.4,0.6"], "row-stochastic"),
    (["--alpha", "1", "--omega", "0.3", "--A", "1,0"], "four numbers"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    code = main(["erm", "fixed-point", *argv, "--json"])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_curve_writes_csv_with_both_branches_global_and_baseline(tmp_path, capsys):
    out = tmp_path / "c.csv"
    # a deliberately tiny split rule (contract test, not accuracy)
    code, d = run_json(capsys, ["erm", "curve", "--omega", "0.3", "--alphas", "2",
                                "--nodes", "4", "--n-r", "8", "--n-phi", "16", "--tol", "1e-5",
                                "--out", str(out), "--json"])
    assert code in (0, None)
    rows = list(csv.DictReader(out.open()))
    kinds = {r["kind"] for r in rows}
    assert {"semantic", "positional", "global", "baseline"} <= kinds
    base = [r for r in rows if r["kind"] == "baseline"]
    assert float(base[0]["eps_g"]) == pytest.approx(ps.linear_baseline(ps.ERMParams()), rel=1e-12)
    assert d["eps_g_lin"] == pytest.approx(float(base[0]["eps_g"]), rel=1e-12)
    # the global minimiser is the lower-ε_t branch among the converged, correctly labelled ones
    for a in ("2.0",):
        valid = [float(r["eps_t"]) for r in rows if r["alpha"] == a
                 and r["kind"] in ("semantic", "positional") and r["branch"] == r["kind"]
                 and r["status"] == "converged"]
        glob = [float(r["eps_t"]) for r in rows if r["alpha"] == a and r["kind"] == "global"]
        if valid:
            assert glob == [pytest.approx(min(valid))]


def test_help_texts():
    for sub in ("fixed-point", "curve", "transition", "phase-diagram", "simulate", "gamp"):
        with pytest.raises(SystemExit) as e:
            main(["erm", sub, "--help"])
        assert e.value.code == 0


@pytest.mark.slow
def test_transition_json_contract(capsys):
    code, d = run_json(capsys, ["erm", "transition", "--omega", "0.3", "--alphas", "1,1.25,1.5",
                                "--nodes", "6", "--n-r", "12", "--n-phi", "24", "--json",
                                "--no-progress"])
    for k in ("alpha_c", "alpha_l", "eps_g_lin", "eps_g_sem_at_alpha_c", "eps_g_pos_at_alpha_c"):
        assert k in d
    # measured with this rule: alpha_c = 1.2471, alpha_l = 1.4922 (see BENCHMARKS.md)
    assert 1.0 < d["alpha_c"] < 1.5 and d["alpha_c"] <= d["alpha_l"]
    # the first-order jump: at alpha_c the semantic minimiser generalises better
    assert d["eps_g_sem_at_alpha_c"] < d["eps_g_pos_at_alpha_c"]
