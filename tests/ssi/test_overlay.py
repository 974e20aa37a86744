"""`theory sgd ode --out` / `theory sgd simulate --out`: the whole trajectory as a table, with the
same field names for theory and simulation."""

import json
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


# --------------------------------------------------------------------------- theory overlay


def _sgd_sim(tmp_path, seeds=4):
    sim = tmp_path / "sim.csv"
    argv = ["sgd", "simulate", *ODE_ARGS[2:], "--seeds", str(seeds), "--reduced"]
    assert main([*argv, "--steps", "2000", "--workers", "1", "--out", str(sim), "--json"]) == 0
    return sim


def test_overlay_round_trip_sgd(tmp_path, capsys):
    """SGD seeds at d = 100 to CSV, the ODE to CSV, both overlaid: the theory drawn (written by
    --out) is the ODE integrated independently here, from the spec and from the ODE's table."""
    sim = _sgd_sim(tmp_path)
    ode = tmp_path / "ode.csv"
    assert main([*ODE_ARGS, "--out", str(ode), "--json"]) == 0
    capsys.readouterr()
    spec = "sgd ode --target z1 --model tied --activation linear"  # lr, d from the table
    for theory, name in ((spec, "a"), (str(ode), "b")):
        png, th = tmp_path / f"{name}.png", tmp_path / f"th_{name}.csv"
        argv = ["overlay", theory, "--sim", str(sim), "--plot", str(png), "--out", str(th)]
        assert main([*argv, "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert (payload["x"], payload["y"]) == ("t", "m")
        assert png.stat().st_size > 10_000  # a drawn figure
        rows = read_table(th)
        t = np.array([r["t"] for r in rows])
        m = np.array([r["m"] for r in rows])
        assert payload["theory_points"] == len(rows) > 50
        # integrate_ode runs at rtol 1e-8: 1e-6 absolute on m in [0, 1]
        assert np.allclose(m, linear_m(t), rtol=0, atol=1e-6)
        # the spec runs over the simulation's t range (2000 steps: t = 2000 lr / d = 2)
        if name == "a":
            assert t.max() == pytest.approx(2000 * LR / D, rel=1e-9)
    # the simulation points: each step recorded for all 4 seeds
    assert len(payload["sim_x"]) == len(read_table(sim)) // 4


def test_overlay_misnamed_column_exit_2(tmp_path, capsys):
    theory = tmp_path / "th.csv"
    write_table(theory, [dict(alpha=a, eps_g=1 / a) for a in (1.0, 2.0, 3.0)])
    sim = tmp_path / "sim.csv"
    write_table(sim, [dict(alpha=a, eps_gen=1 / a) for a in (1.0, 2.0)])
    argv = ["overlay", str(theory), "--sim", str(sim), "--x", "alpha", "--y", "eps_g"]
    assert main([*argv, "--plot", str(tmp_path / "o.png")]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1
    assert "no column 'eps_g'" in err[0] and "eps_gen" in err[0]  # what it has
    assert "alpha" in err[0] and "eps_t" in err[0] and "m_<l>" in err[0]  # the fields it knows
    assert not (tmp_path / "o.png").exists()


def test_overlay_seed_standard_error(tmp_path, capsys):
    """Repeated x values (seeds) are averaged with SE = std(ddof=1)/sqrt(n); a single row with
    a <y>_err column keeps that error."""
    rng = np.random.default_rng(3)
    xs = [0.5, 1.0, 2.0]
    ys = {x: rng.normal(x, 0.1, size=5 + i) for i, x in enumerate(xs)}
    rows = [dict(alpha=x, eps_g=float(v), seed=s) for x in xs for s, v in enumerate(ys[x])]
    rows.append(dict(alpha=3.0, eps_g=2.5, eps_g_err=0.125))
    sim, theory = tmp_path / "sim.jsonl", tmp_path / "th.jsonl"
    write_table(sim, rows)
    write_table(theory, [dict(alpha=a, eps_g=a) for a in np.linspace(0.5, 3, 6)])
    argv = ["overlay", str(theory), "--sim", str(sim), "--x", "alpha", "--y", "eps_g"]
    assert main([*argv, "--plot", str(tmp_path / "o.png"), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["sim_x"] == [*xs, 3.0]
    want = [np.std(ys[x], ddof=1) / np.sqrt(len(ys[x])) for x in xs] + [0.125]
    assert np.allclose(p["sim_err"], want, rtol=1e-12)
    assert np.allclose(p["sim_mean"], [np.mean(ys[x]) for x in xs] + [2.5], rtol=1e-12)


def test_overlay_reads_erm_simulate_out(tmp_path, capsys):
    """`theory erm simulate --out` writes one row per seed named as the theory's fields; the
    overlay's mean and SE over the seeds equal the simulate command's own summary."""
    sim = tmp_path / "erm.csv"
    argv = ["erm", "simulate", "--alpha", "1.5", "--omega", "0.3", "--d", "40", "--seeds", "3"]
    assert main([*argv, "--out", str(sim), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    theory = tmp_path / "th.csv"
    write_table(theory, [dict(alpha=a, eps_g=0.01) for a in (1.0, 2.0)])
    argv = ["overlay", str(theory), "--sim", str(sim), "--plot", str(tmp_path / "o.png")]
    assert main([*argv, "--x", "alpha", "--y", "eps_g", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["sim_x"] == [1.5]
    assert p["sim_mean"][0] == pytest.approx(summary["eps_g"], rel=1e-12)
    assert p["sim_err"][0] == pytest.approx(summary["eps_g_err"], rel=1e-12)


def test_overlay_theory_table_with_kinds(tmp_path, capsys):
    """A table of `erm curve --out` (columns kind, alpha, eps_g, ...): the default axes are
    alpha / eps_g and the default rows the global minimiser's; --kind picks another."""
    rows = [
        dict(kind=k, alpha=a, omega=0.3, eps_g=e + a)
        for k, e in (("semantic", 0.0), ("positional", 1.0), ("global", 2.0))
        for a in (1.0, 2.0, 3.0)
    ]
    theory, sim = tmp_path / "curve.csv", tmp_path / "sim.csv"
    write_table(theory, rows)
    write_table(sim, [dict(alpha=a, eps_g=a, seed=s) for a in (1.5, 2.5) for s in range(3)])
    for kind, shift in ((None, 2.0), ("positional", 1.0)):
        out = tmp_path / f"drawn_{kind}.csv"
        argv = ["overlay", str(theory), "--sim", str(sim), "--plot", str(tmp_path / "o.png")]
        argv += ["--out", str(out), "--json"] + (["--kind", kind] if kind else [])
        assert main(argv) == 0
        p = json.loads(capsys.readouterr().out)
        assert (p["x"], p["y"], p["theory_points"]) == ("alpha", "eps_g", 3)
        drawn = read_table(out)
        assert {r["kind"] for r in drawn} == {kind or "global"}
        assert [r["eps_g"] - r["alpha"] for r in drawn] == [shift] * 3
    argv = ["overlay", str(theory), "--sim", str(sim), "--plot", str(tmp_path / "o.png")]
    assert main([*argv, "--kind", "nope"]) == 2
    assert "semantic" in capsys.readouterr().err  # the kinds it has
