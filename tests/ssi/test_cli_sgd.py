"""`theory sgd ...`: JSON contracts, agreement with the library, errors -> exit status 2."""

import json
import math

import pytest

from theory import ssi
from theory.cli import main


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr().out
    return code, out


def _json(capsys, argv):
    code, out = _run(capsys, argv)
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1  # exactly one JSON object
    return json.loads(lines[0])


def test_ode_json_fields_tied(capsys):
    d = _json(
        capsys,
        [
            "sgd",
            "ode",
            "--target",
            "He2(z1)+He2(z2)",
            "--model",
            "tied",
            "--lr",
            "0.05",
            "--d",
            "1000",
            "--json",
        ],
    )
    for key in ("t_escape", "steps_escape", "final_e", "final_m", "minimum"):
        assert key in d
    assert d["minimum"] == "semantic"
    assert d["steps_escape"] == pytest.approx(d["t_escape"] * 1000 / 0.05)
    # leading-order escape time log(eta/m0)/rate, rate = 4/sqrt(2 pi) - lr K(0)/2, K(0) = 10
    rate = 4 / math.sqrt(2 * math.pi) - 0.05 * 5
    assert d["t_escape"] == pytest.approx(math.log(2) / rate, rel=2e-2)


def test_flatness_json(capsys):
    base = [
        "sgd",
        "flatness",
        "--target",
        "4/3 + He4(z1) + 2*He4(z2)",
        "--L",
        "2",
        "--reduction",
        "trace",
        "--json",
    ]
    d = _json(capsys, base + ["--pe", "none"])
    assert d["kappa"] == 4 and d["hessian"] == [[0.0]]
    d = _json(capsys, base + ["--pe", "opposite", "--trace-norm", "sqrtL"])
    assert d["kappa"] == 2 and d["hessian"][0][0] < 0 and d["exact"] is True


def test_boundaries_json_matches_library(capsys):
    d = _json(capsys, ["sgd", "boundaries", "--a", "0.9", "--json"])
    ref = ssi.boundaries(0.9)
    for key in (
        "omega_steepest_switch",
        "omega_global_switch",
        "omega_positional_min_appears",
        "omega_semantic_min_disappears",
    ):
        assert d[key] == pytest.approx(getattr(ref, key), abs=1e-12)
    assert d["status"] == ref.status == "ok"  # the result contract: every answer has a status


def test_phase_diagram_files(capsys, tmp_path):
    out = tmp_path / "pd.json"
    d = _json(capsys, ["sgd", "phase-diagram", "--grid", "12", "--out", str(out), "--json"])
    assert sum(d["counts"].values()) <= 144
    full = json.loads(out.read_text())
    assert len(full["region"]) == 12 and len(full["region"][0]) == 12


def test_errors_exit_2(capsys):
    assert main(["sgd", "boundaries", "--a", "-1"]) == 2
    assert main(["sgd", "ode", "--omega", "0.5", "--lr", "0.1", "--d", "100"]) == 2
    assert main(["sgd", "flatness", "--target", "z1+", "--L", "2"]) == 2
    assert main(["sgd", "phase-diagram", "--a-range", "1:0.7"]) == 2
    err = capsys.readouterr().err
    assert "error" in err


TIED = ["--target", "z1", "--model", "tied", "--activation", "linear"]
#: one cheap call per SSI subcommand with --json (the robustness sweep found answers without a
#: `status`); a new subcommand without an entry here fails test_every_ssi_subcommand_is_listed
SSI_JSON_CALLS = {
    "sie": ["sie", "He2(z1)+z1*z2"],
    "sgd ode": ["sgd", "ode", *TIED, "--lr", "0.05", "--d", "100"],
    "sgd flatness": ["sgd", "flatness", "--target", "He2(z1)+He2(z2)", "--L", "2"],
    "sgd boundaries": ["sgd", "boundaries", "--a", "0.9"],
    "sgd phase-diagram": ["sgd", "phase-diagram", "--grid", "3"],
    "sgd classify": ["sgd", "classify", "--omega", "0.8", "--A", "0.95,0.05,0.3,0.7"],
    "sgd simulate": ["sgd", "simulate", *TIED, "--lr", "0.05", "--d", "100", "--seeds", "2"]
    + ["--reduced", "--steps", "200", "--workers", "1"],
    "sgd gain": ["sgd", "gain", "--target", "sum_he2", "--Ls", "3", "--no-ode"],
}


def test_every_ssi_subcommand_is_listed():
    import argparse

    from theory.cli import build_parser

    def leaves(p, pre):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from (
                        leaves(sp, [*pre, name])
                        if any(isinstance(x, argparse._SubParsersAction) for x in sp._actions)
                        else [" ".join([*pre, name])]
                    )

    ssi_commands = {c for c in leaves(build_parser(), []) if c == "sie" or c.startswith("sgd ")}
    assert ssi_commands == set(SSI_JSON_CALLS)


@pytest.mark.parametrize("name", sorted(SSI_JSON_CALLS))
def test_every_ssi_json_answer_has_status_and_message(capsys, name):
    d = _json(capsys, [*SSI_JSON_CALLS[name], "--json"])
    assert isinstance(d.get("status"), str) and d["status"], d.get("status")
    assert isinstance(d.get("message"), str)
