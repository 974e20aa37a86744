"""`theory sie`: JSON contract, human output, constant target, bad input -> exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from theory.cli import main

CONTRACT = (
    "sie",
    "leading_tensor",
    "tied_contraction",
    "op_norm",
    "gain_optimal",
    "gain_equal",
    "gain_optimal_published",
    "gain_equal_published",
    "tied_learnable",
    "even_sie",
    "exact",
)


def run_json(capsys, *argv):
    rc = main(["sie", *argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1  # exactly one JSON object on stdout
    return json.loads(lines[0])


def test_sum_he2_json(capsys):
    d = run_json(capsys, "He2(z1)+He2(z2)")
    for k in CONTRACT:
        assert k in d
    assert d["sie"] == 2 and d["leading_tensor"] == [[1.0, 0.0], [0.0, 1.0]]
    assert d["tied_contraction"] == 2.0 and d["op_norm"] == 1.0 and d["op_norm_exact"] is True
    # this package's prediction (= theory sgd gain) beside the published formula
    assert d["gain_optimal"] == pytest.approx(2.0) and d["gain_equal"] == pytest.approx(2.0)
    assert d["gain_optimal_published"] == pytest.approx(4.0)
    assert d["gain_equal_published"] == pytest.approx(2.0)
    assert d["tied_learnable"] is True and d["even_sie"] == 2 and d["exact"] is True
    assert d["L"] == 2


def test_L_option_and_stuck_target(capsys):
    d = run_json(capsys, "z1-z2", "--L", "3")
    assert d["L"] == 3 and d["sie"] == 1 and d["leading_tensor"] == [1.0, -1.0, 0.0]
    assert d["tied_learnable"] is False and d["gain_optimal"] == 0.0
    assert "stuck" in d["message"]


def test_numerical_target_reports_tolerance(capsys):
    d = run_json(capsys, "tanh(z1)", "--max-order", "3")
    assert d["exact"] is False and 0 < d["tolerance"] < 1e-8 and d["sie"] == 1


def test_constant_target(capsys):
    d = run_json(capsys, "5/2")
    assert d["sie"] is None and "constant" in d["message"]
    rc = main(["sie", "3"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "constant" in out


def test_text_output(capsys):
    assert main(["sie", "z1*z2"]) == 0
    out, _ = capsys.readouterr()
    assert "SIE: 2" in out and "gain" in out
    assert "this package" in out and "published formula" in out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["z1 +"], "cannot parse"),
        (["foo(z1)"], "unknown function"),
        (["z1*z4", "--L", "2"], "z4 but L = 2"),
        (["y*z1"], "unknown variable 'y'"),
        (["exp(z1**2)"], "not finite"),
        (["z1", "--max-order", "0"], "max_order must be >= 1"),
    ],
)
def test_bad_input_exit_2(capsys, argv, fragment):
    rc = main(["sie", *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert fragment in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_subprocess_module_entry():
    ok = subprocess.run(
        [sys.executable, "-m", "theory", "sie", "He2(z1)+He2(z2)", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["sie"] == 2
    bad = subprocess.run(
        [sys.executable, "-m", "theory", "sie", "z1 +* ("],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().startswith("theory sie: error:")


def test_help():
    with pytest.raises(SystemExit) as exc:
        main(["sie", "--help"])
    assert exc.value.code == 0


def test_large_leading_tensor_is_sent_sparse(capsys):
    """Setting 9 of the robustness sweep's SSI stream: an L = 7 target of SIE 6 wrote its
    7^6-entry C_6 in full (600 kB of JSON, which the sweep's 200 kB capture cut: no `status`).
    At L = 5 (5^6 = 15625 entries > 4096) the dense tensor is left out, with a message, and the
    one non-zero entry (up to permutation) is the closed form a_alpha alpha!/k!
    (C_k = E[g H_k]/k!, g = a He_alpha) = 0.646 * 2! 1! 3! / 6!."""
    d = run_json(capsys, "0.646*He3(z5)*He1(z4)*He2(z1)", "--L", "5")
    assert d["sie"] == 6 and d["status"] == "ok" and d["leading_tensor"] is None
    assert "leading_tensor_nonzero" in d["message"]
    (idx, value), *rest = d["leading_tensor_nonzero"]
    assert rest == [] and idx == [0, 0, 3, 4, 4, 4]
    assert value == pytest.approx(0.646 * 2 * 1 * 6 / 720, rel=1e-12)  # exact up to float


def test_small_leading_tensor_stays_dense_with_its_nonzero_entries(capsys):
    d = run_json(capsys, "He2(z1)+He2(z2)")
    assert d["leading_tensor"] == [[1.0, 0.0], [0.0, 1.0]]
    assert d["leading_tensor_nonzero"] == [[[0, 0], 1.0], [[1, 1], 1.0]]
