"""`theory sgd ode --out` / `theory sgd simulate --out`: the whole trajectory as a table, with the
same field names for theory and simulation."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from theory.cli import main
from theory.store import read_table, write_table

LR, D = 0.1, 100


def linear_m(t, lr=LR, d=D):
    """m(t) of the tied linear network learning y = z1, integrated here from its closed-form
    right-hand side: R = 2 - 2m, dR/dm = -2, K = E(dl/dz)^2 = 8 (1 - m), so (docs/ssi.md eq. 18)
    dm/dt = 2 (1 - m^2) - 4 lr m (1 - m), from m0 = 1/sqrt(d)."""
    sol = solve_ivp(
        lambda _, m: 2 * (1 - m**2) - 4 * lr * m * (1 - m),
        (0.0, float(np.max(t))),
        [1 / math.sqrt(d)],
        t_eval=np.sort(t),
        rtol=1e-12,
        atol=1e-14,
        method="DOP853",
    )
    return sol.y[0]


ODE_ARGS = ["sgd", "ode", "--target", "z1", "--model", "tied", "--activation", "linear"]
ODE_ARGS += ["--lr", str(LR), "--d", str(D)]


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_ode_out_is_the_whole_trajectory(tmp_path, capsys, ext):
    out = tmp_path / f"traj.{ext}"
    assert main([*ODE_ARGS, "--out", str(out), "--json"]) == 0
    rows = read_table(out)
    assert len(rows) > 50  # every recorded time, not a summary
    assert list(rows[0]) == ["t", "steps", "m", "e", "risk", "lr", "d", "eta"]
    t = np.array([r["t"] for r in rows])
    m = np.array([r["m"] for r in rows])
    # integrate_ode runs at rtol 1e-8 (relative error accumulates over ~10 decades of log time)
    assert np.allclose(m, linear_m(t), rtol=0, atol=1e-6)
    # risk = 2 - 2m for this pair (closed form, independent of the engine; the risk is evaluated
    # at m clipped to [-1, 1]); steps = t d / lr
    assert np.allclose([r["risk"] for r in rows], 2 - 2 * np.clip(m, -1, 1), atol=1e-9)
    assert np.allclose([r["steps"] for r in rows], t * D / LR, rtol=1e-12)


def test_simulate_out_has_the_ode_fields(tmp_path, capsys):
    ode, sim = tmp_path / "ode.csv", tmp_path / "sim.csv"
    assert main([*ODE_ARGS, "--out", str(ode), "--json"]) == 0
    argv = ["sgd", "simulate", *ODE_ARGS[2:], "--seeds", "2", "--reduced", "--steps", "500"]
    assert main([*argv, "--workers", "1", "--out", str(sim), "--json"]) == 0
    o, s = read_table(ode), read_table(sim)
    assert set(s[0]) == set(o[0]) | {"seed"}
    assert len({r["seed"] for r in s}) == 2
    # every seed starts at step 0 with t = steps lr / d
    assert sum(r["steps"] == 0 for r in s) == 2
    assert all(r["t"] == pytest.approx(r["steps"] * LR / D, rel=1e-12) for r in s)


def test_write_table_round_trip_and_bad_extension(tmp_path):
    rows = [dict(a=1, b=0.1), dict(a=2, c="x", b=None)]
    for ext in ("csv", "jsonl"):
        write_table(tmp_path / f"t.{ext}", rows)
        back = read_table(tmp_path / f"t.{ext}")
        assert back[0]["b"] == 0.1 and back[1]["c"] == "x" and back[1]["b"] is None
    with pytest.raises(ValueError, match="csv"):
        write_table(tmp_path / "t.xyz", rows)
