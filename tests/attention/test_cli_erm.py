"""The ``theory erm`` command: JSON contract, CSV output, errors."""

import csv
import json

import pytest

from theory import attention as A
from theory.attention import phases
from theory.cli import main

FP_KEYS = {"q", "m", "theta", "V", "eps_t", "eps_g", "branch", "status", "iterations"}


def run_json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out  # exactly one JSON object on stdout
    return code, json.loads(lines[0])


def test_fixed_point_json_contract_and_agreement_with_the_api(capsys):
    argv = [
        "erm",
        "fixed-point",
        "--alpha",
        "1.5",
        "--omega",
        "0.3",
        "--branch",
        "semantic",
        "--method",
        "gh",
        "--nodes",
        "6",
        "--json",
    ]
    code, d = run_json(capsys, argv)
    assert code == 0
    assert FP_KEYS <= set(d)
    assert d["status"] == "converged" and d["branch"] == "semantic" and d["m"] == 0.0
    r = A.fixed_point(1.5, A.ERMParams(omega=0.3), "semantic", method="gh", nodes=6)
    for k in ("q", "theta", "V", "eps_t", "eps_g"):
        assert d[k] == pytest.approx(getattr(r, k), rel=1e-12)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--alpha", "0", "--omega", "0.3"], "alpha"),
        (["--alpha", "1", "--omega", "1.5"], "omega"),
        (["--alpha", "1", "--omega", "0.3", "--sigma", "-1"], "sigma"),
        (["--alpha", "1", "--omega", "0.3", "--lam", "-0.5"], "lam"),
        (["--alpha", "1", "--omega", "0.3", "--A", "0.6,0.6,0.4,0.6"], "row-stochastic"),
        (["--alpha", "1", "--omega", "0.3", "--A", "1,0"], "four numbers"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    code = main(["erm", "fixed-point", *argv, "--json"])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_curve_writes_csv_with_both_branches_global_and_baseline(tmp_path, capsys):
    out = tmp_path / "c.csv"
    # a deliberately tiny split rule (contract test, not accuracy)
    code, d = run_json(
        capsys,
        [
            "erm",
            "curve",
            "--omega",
            "0.3",
            "--alphas",
            "2",
            "--nodes",
            "4",
            "--n-r",
            "8",
            "--n-phi",
            "16",
            "--tol",
            "1e-5",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert code in (0, None)
    rows = list(csv.DictReader(out.open()))
    kinds = {r["kind"] for r in rows}
    assert {"semantic", "positional", "global", "baseline"} <= kinds
    base = [r for r in rows if r["kind"] == "baseline"]
    assert float(base[0]["eps_g"]) == pytest.approx(A.linear_baseline(A.ERMParams()), rel=1e-12)
    assert d["eps_g_lin"] == pytest.approx(float(base[0]["eps_g"]), rel=1e-12)
    # the global minimiser is the lower-ε_t branch among the converged, correctly labelled ones
    for a in ("2.0",):
        valid = [
            float(r["eps_t"])
            for r in rows
            if r["alpha"] == a
            and r["kind"] in ("semantic", "positional")
            and r["branch"] == r["kind"]
            and r["status"] == "converged"
        ]
        glob = [float(r["eps_t"]) for r in rows if r["alpha"] == a and r["kind"] == "global"]
        if valid:
            assert glob == [pytest.approx(min(valid))]


def test_help_texts():
    for sub in ("fixed-point", "curve", "transition", "phase-diagram", "simulate", "gamp"):
        with pytest.raises(SystemExit) as e:
            main(["erm", sub, "--help"])
        assert e.value.code == 0


def test_simulate_default_method_converges_and_matches_the_api(capsys):
    # the default minimiser (nesterov) must converge (RMS gradient < tol) and report the API's
    # numbers; the JSON fields are the contract
    argv = [
        "erm",
        "simulate",
        "--alpha",
        "2",
        "--omega",
        "0.3",
        "--d",
        "60",
        "--seeds",
        "2",
        "--json",
    ]
    code, d = run_json(capsys, argv)
    assert code in (0, None)
    for k in (
        "alpha",
        "omega",
        "d",
        "init",
        "seeds",
        "q",
        "m",
        "theta",
        "eps_t",
        "eps_g",
        "q_err",
        "eps_t_err",
        "runs",
    ):
        assert k in d
    for run in d["runs"]:
        assert run["status"] == "converged" and run["method"] == "nesterov"
        assert run["grad_rms"] < 1e-6
        r = A.simulate_gd(2.0, A.ERMParams(omega=0.3), 60, "semantic", run["seed"])
        for k in ("q", "m", "theta", "eps_t", "eps_g", "iterations"):
            assert run[k] == pytest.approx(getattr(r, k), rel=1e-12), k


def test_gamp_json_contract(capsys):
    code, d = run_json(
        capsys,
        [
            "erm",
            "gamp",
            "--alpha",
            "2",
            "--omega",
            "0.3",
            "--d",
            "60",
            "--seeds",
            "1",
            "--max-iter",
            "300",
            "--json",
        ],
    )
    assert {"q", "m", "theta", "eps_t", "eps_g", "runs"} <= set(d)
    assert {"V", "status", "iterations", "seed"} <= set(d["runs"][0])


def test_phase_diagram_heatmap_is_the_simulated_delta_eps_t(tmp_path, capsys, monkeypatch):
    # theory rows stubbed (the theory has its own tests; this checks the wiring): the heat map
    # must equal eps_t(semantic init) - eps_t(positional init) of independent simulate_gd runs
    rows = [
        dict(
            omega=0.3,
            alpha_c=1.25,
            alpha_l=1.5,
            eps_g_lin=0.002,
            alpha_l_branch="semantic",
            status="converged",
            message="",
        )
    ]

    class _Stub:  # what phase_diagram returns, as far as the CLI reads it
        def rows(self):
            return [dict(rows[0])]

    monkeypatch.setattr(phases, "phase_diagram", lambda omegas, p, **kw: _Stub())
    fig = tmp_path / "pd.png"
    code, d = run_json(
        capsys,
        [
            "erm",
            "phase-diagram",
            "--omegas",
            "0.3",
            "--heatmap",
            "--d",
            "20",
            "--seeds",
            "1",
            "--heatmap-alphas",
            "1,2",
            "--plot",
            str(fig),
            "--sim-cache",
            str(tmp_path / "c.jsonl"),
            "--json",
        ],
    )
    assert fig.exists() and fig.stat().st_size > 1000
    h = d["heatmap"]
    assert h["alphas"] == [1.0, 2.0] and h["omegas"] == [0.3] and h["d"] == 20
    for j, a in enumerate((1.0, 2.0)):
        e = {
            i: A.simulate_gd(
                a, A.ERMParams(omega=0.3), 20, i, 0, method="lbfgs", tol=1e-7, n_test=10
            ).eps_t
            for i in ("semantic", "positional")
        }
        assert h["delta_eps_t"][0][j] == pytest.approx(
            e["semantic"] - e["positional"], rel=1e-9, abs=1e-15
        )
    code = main(["erm", "phase-diagram", "--omegas", "0.3", "--heatmap", "--A", "0.7,0.3,0.3,0.7"])
    assert code == 2 and "reference A" in capsys.readouterr().err


@pytest.mark.slow
def test_transition_json_contract(capsys):
    code, d = run_json(
        capsys,
        [
            "erm",
            "transition",
            "--omega",
            "0.3",
            "--alphas",
            "1,1.25,1.5",
            "--nodes",
            "6",
            "--n-r",
            "12",
            "--n-phi",
            "24",
            "--json",
            "--no-progress",
        ],
    )
    for k in ("alpha_c", "alpha_l", "eps_g_lin", "eps_g_sem_at_alpha_c", "eps_g_pos_at_alpha_c"):
        assert k in d
    # measured with this rule: alpha_c = 1.2471, alpha_l = 1.4922 (see BENCHMARKS.md)
    assert 1.0 < d["alpha_c"] < 1.5 and d["alpha_c"] <= d["alpha_l"]
    # the first-order jump: at alpha_c the semantic minimiser generalises better
    assert d["eps_g_sem_at_alpha_c"] < d["eps_g_pos_at_alpha_c"]
