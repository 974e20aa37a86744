"""theory.sweep: grids, the append-only table, resume after a kill, local processes and Dask."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from theory.sweep import (
    KEY_COLUMN,
    ResultTable,
    demo_point,
    expand_grid,
    point_key,
    read_table,
    run_sweep,
)

CALLS: list[dict] = []


def counted(x, y=1.0):
    """Records its calls (in-process runs only, workers=1)."""
    CALLS.append({"x": x, "y": y})
    return {"f": x * 10 + y}


def flaky(x, marker):
    if x == 2 and Path(marker).exists():
        raise ValueError("point x=2 refuses while the marker file exists")
    return {"sq": x * x}


def shapeshift(x):
    # the result fields depend on the point: the CSV header has to widen
    return {"a": x} if x < 2 else {"a": x, "b": -x}


def expected_demo(x, y):
    return math.sin(x) * y, x**2 + y


# ---------------------------------------------------------------------------------------------
def test_expand_grid_product_and_list():
    pts = expand_grid({"a": [1, 2], "b": [10, 20, 30]})
    assert len(pts) == 6
    assert pts[0] == {"a": 1, "b": 10} and pts[1] == {"a": 1, "b": 20}  # last key fastest
    assert pts[-1] == {"a": 2, "b": 30}
    assert expand_grid({"a": 3, "b": [1, 2]}) == [{"a": 3, "b": 1}, {"a": 3, "b": 2}]
    assert expand_grid([{"u": 1}, {"u": 2, "v": "s"}]) == [{"u": 1}, {"u": 2, "v": "s"}]
    with pytest.raises(ValueError, match="empty"):
        expand_grid({"a": []})
    with pytest.raises(ValueError, match="dicts"):
        expand_grid([1, 2])
    # keys are canonical: parameter order does not matter, numpy scalars are plain numbers
    import numpy as np

    assert point_key({"a": 1, "b": 2.5}) == point_key({"b": np.float64(2.5), "a": np.int64(1)})
    assert point_key({"a": 1, "b": 2}, key=["a"]) == point_key({"a": 1, "b": 3}, key=["a"])
    # grids written differently name the same points (round-off in the last digits)
    assert 0.1 + 0.2 != 0.3 and point_key({"a": 0.1 + 0.2}) == point_key({"a": 0.3})
    assert point_key({"a": 0.2}) != point_key({"a": 0.2000001})


def test_repeated_points_rejected():
    with pytest.raises(ValueError, match="repeated"):
        run_sweep(counted, [{"x": 1}, {"x": 1}], workers=1, progress=False)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_serial_sweep_writes_and_resumes(tmp_path, suffix):
    out = tmp_path / f"t{suffix}"
    CALLS.clear()
    rows = run_sweep(counted, {"x": [1, 2, 3], "y": [0.5, 1.5]}, out=out, workers=1, progress=False)
    assert [r["f"] for r in rows] == [x * 10 + y for x in (1, 2, 3) for y in (0.5, 1.5)]
    assert len(CALLS) == 6
    table = read_table(out)
    assert len(table) == 6 and all(KEY_COLUMN not in r for r in table)
    assert sorted((r["x"], r["y"], r["f"]) for r in table) == sorted(
        (r["x"], r["y"], r["f"]) for r in rows
    )

    # a larger grid: only the new points are computed, rows come back in grid order
    CALLS.clear()
    rows2 = run_sweep(
        counted, {"x": [1, 2, 3, 4], "y": [0.5, 1.5]}, out=out, workers=1, progress=False
    )
    assert CALLS == [{"x": 4, "y": 0.5}, {"x": 4, "y": 1.5}]
    assert rows2[:6] == rows
    assert [(r["x"], r["y"]) for r in rows2] == [(x, y) for x in (1, 2, 3, 4) for y in (0.5, 1.5)]
    assert len(read_table(out)) == 8

    # nothing left to do: no call at all
    CALLS.clear()
    run_sweep(counted, {"x": [1, 2, 3, 4], "y": [0.5, 1.5]}, out=out, workers=1, progress=False)
    assert CALLS == []


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_partial_trailing_line_is_dropped(tmp_path, suffix):
    out = tmp_path / f"t{suffix}"
    run_sweep(counted, {"x": [1, 2]}, out=out, workers=1, progress=False)
    with open(out, "ab") as fh:  # what a writer killed in the middle of a line leaves
        fh.write(b'3,1.0,31.0,"{""x' if suffix == ".csv" else b'{"x":3,"y":1.0,"f"')
    assert len(ResultTable(out).read()) == 2
    CALLS.clear()
    rows = run_sweep(counted, {"x": [1, 2, 3]}, out=out, workers=1, progress=False)
    assert CALLS == [{"x": 3, "y": 1.0}]
    assert [r["f"] for r in rows] == [11.0, 21.0, 31.0]
    text = out.read_text()
    assert text.endswith("\n")
    table = read_table(out)
    assert sorted(r["x"] for r in table) == [1, 2, 3]


def test_csv_header_widens(tmp_path):
    out = tmp_path / "w.csv"
    rows = run_sweep(shapeshift, {"x": [0, 1, 2, 3]}, out=out, workers=1, progress=False)
    assert rows[3] == {"x": 3, "a": 3, "b": -3}
    table = read_table(out)
    assert table[0]["b"] is None and table[3]["b"] == -3
    assert out.read_text().splitlines()[0] == f"x,a,b,{KEY_COLUMN}"


def test_failure_keeps_finished_points_and_resumes(tmp_path):
    out = tmp_path / "f.jsonl"
    marker = tmp_path / "marker"
    marker.write_text("")
    grid = {"x": [0, 1, 2, 3], "marker": [str(marker)]}
    with pytest.raises(ValueError, match="refuses") as info:
        run_sweep(flaky, grid, out=out, workers=1, progress=False, key=["x"])
    assert "saved" in " ".join(getattr(info.value, "__notes__", [""]))
    # the serial executor runs in order: 0 and 1 are saved, 3 was cancelled
    assert sorted(r["x"] for r in read_table(out)) == [0, 1]
    marker.unlink()
    rows = run_sweep(flaky, grid, out=out, workers=1, progress=False, key=["x"])
    assert [r["sq"] for r in rows] == [0, 1, 4, 9]
    assert sorted(r["x"] for r in read_table(out)) == [0, 1, 2, 3]


def test_process_pool_matches_direct(tmp_path):
    out = tmp_path / "p.csv"
    grid = {"x": [0.1 * i for i in range(6)], "y": [1.0, -2.0]}
    rows = run_sweep(demo_point, grid, out=out, workers=2, progress=False)
    for r in rows:
        f, g = expected_demo(r["x"], r["y"])
        assert r["f"] == f and r["g"] == g  # same float operations: exact
    table = {(r["x"], r["y"]): r for r in read_table(out)}
    assert len(table) == 12
    for r in rows:  # CSV cells are written with repr: the values round-trip exactly
        assert table[(r["x"], r["y"])]["f"] == r["f"]


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from theory.sweep import demo_point, run_sweep
    run_sweep(demo_point, {{"x": list(range({n})), "y": [1.0], "delay": [{delay}]}},
              out=sys.argv[1], workers={workers}, progress=False)
""")


@pytest.mark.parametrize("suffix,workers", [(".csv", 1), (".jsonl", 2)])
def test_killed_sweep_resumes_exactly_once(tmp_path, suffix, workers):
    n, k, delay = 12, 4, 0.15
    out = tmp_path / f"killed{suffix}"
    script = KILL_SCRIPT.format(n=n, delay=delay, workers=workers)
    proc = subprocess.Popen([sys.executable, "-c", script, str(out)], start_new_session=True)
    header = 1 if suffix == ".csv" else 0
    try:
        t0 = time.time()
        while time.time() - t0 < 60:
            if out.exists() and out.read_text().count("\n") - header >= k:
                break
            if proc.poll() is not None:
                pytest.fail("the sweep subprocess ended before it could be killed")
            time.sleep(0.01)
        else:
            pytest.fail("the sweep did not write k points within 60 s")
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: parent and its worker processes
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    landed = len(ResultTable(out).read())
    assert k <= landed < n, "the kill must land half-way for this test to mean something"

    rows = run_sweep(
        demo_point,
        {"x": list(range(n)), "y": [1.0], "delay": [delay]},
        out=out,
        workers=2,
        progress=False,
    )
    table = ResultTable(out).read()
    keys = [r[KEY_COLUMN] for r in table]
    assert len(keys) == n and len(set(keys)) == n  # every point, each exactly once
    assert sorted(r["x"] for r in table) == list(range(n))
    pids_before = {r["pid"] for r in table[:landed]}
    pids_after = {r["pid"] for r in table[landed:]}
    assert not pids_before & pids_after  # the landed points were not recomputed by the resume
    for r in rows:  # values equal to an uninterrupted run
        f, g = expected_demo(r["x"], 1.0)
        assert r["f"] == f and r["g"] == g


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
    )
    yield cluster
    cluster.close()


def test_dask_scheduler_address(tmp_path, dask_cluster):
    out = tmp_path / "dask.jsonl"
    grid = {"x": [0.0, 0.5, 1.0, 1.5], "y": [2.0]}
    rows = run_sweep(
        demo_point, grid, out=out, scheduler=dask_cluster.scheduler_address, progress=False
    )
    for r in rows:
        assert (r["f"], r["g"]) == expected_demo(r["x"], r["y"])
    assert len(read_table(out)) == 4
    # resume through a Client object: only the new point is computed
    from distributed import Client

    with Client(dask_cluster) as client:
        rows2 = run_sweep(
            demo_point,
            {"x": [0.0, 0.5, 1.0, 1.5, 2.0], "y": [2.0]},
            out=out,
            scheduler=client,
            progress=False,
        )
    assert rows2[:4] == rows and len(read_table(out)) == 5
    assert (rows2[4]["f"], rows2[4]["g"]) == expected_demo(2.0, 2.0)


def test_cli_sweep_demo(tmp_path, capsys):
    from theory.cli import main

    out = tmp_path / "cli.csv"
    argv = [
        "sweep",
        "demo",
        "--xs",
        "0:1:3",
        "--ys",
        "1,2",
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
        "--json",
    ]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["n_points"] == 6 and payload["n_computed"] == 6
    for r in payload["rows"]:
        assert (r["f"], r["g"]) == expected_demo(r["x"], r["y"])
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["n_resumed"] == 6 and payload["n_computed"] == 0
    assert main(["sweep", "demo", "--xs", "1:2:x", "--no-progress"]) == 2
    assert "cannot read the range" in capsys.readouterr().err


def test_dask_process_workers(tmp_path):
    """Real worker processes: the function and results cross a process boundary via pickle."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        rows = run_sweep(
            demo_point,
            {"x": [0.25, 0.75], "y": [3.0]},
            out=tmp_path / "dp.csv",
            scheduler=cluster.scheduler_address,
            progress=False,
        )
    assert [(r["f"], r["g"]) for r in rows] == [expected_demo(0.25, 3.0), expected_demo(0.75, 3.0)]
    assert all(r["pid"] != os.getpid() for r in rows)


def test_registry_entries_are_wired(tmp_path, capsys):
    """The registered sweeps call the areas' public functions (cheap ones only here)."""
    from theory.cli import main
    from theory.sweep import SWEEPABLE

    assert {"demo", "erm-fixed-point", "erm-transition", "sgd-ode", "sgd-boundaries", "sie"} <= set(
        SWEEPABLE
    )
    out = tmp_path / "sie.csv"
    assert (
        main(
            [
                "sweep",
                "sie",
                "--targets",
                "He2(z1)+He2(z2)+He2(z3);z1-z2",
                "--out",
                str(out),
                "--workers",
                "1",
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    # closed forms: C_2 = I_3 -> contraction 3, op norm 1, gain L (published L^2 = 9);
    # z1 - z2 -> tied stuck
    assert rows[0]["sie"] == 2 and rows[0]["gain_optimal_published"] == pytest.approx(9.0)
    assert rows[0]["gain_optimal"] == pytest.approx(3.0)
    assert rows[1]["sie"] == 1 and rows[1]["tied_learnable"] is False
    from theory import ssi

    rows = run_sweep(SWEEPABLE["sgd-boundaries"].fn, {"a": [1.0]}, workers=1, progress=False)
    direct = ssi.boundaries(1.0)
    for k, v in rows[0].items():
        if k.startswith("omega_"):
            assert v == getattr(direct, k)


def test_cli_scheduler(tmp_path, capsys, dask_cluster):
    from theory.cli import main

    out = tmp_path / "cli-dask.jsonl"
    assert (
        main(
            [
                "sweep",
                "demo",
                "--xs",
                "0,0.5",
                "--ys",
                "3",
                "--out",
                str(out),
                "--scheduler",
                dask_cluster.scheduler_address,
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["f"], r["g"]) for r in rows] == [expected_demo(0.0, 3.0), expected_demo(0.5, 3.0)]


def _worker_threads(_):
    import numba

    from theory._util import _openblas_handles, cpu_share

    blas = tuple(int(get()) for get, _ in _openblas_handles())
    return numba.get_num_threads(), blas, cpu_share()


def test_pool_workers_share_the_cores(monkeypatch):
    # N workers on C cores: each worker's BLAS and numba use C // N threads (at least 1), so
    # that two workers on a 2-core machine do not run 4 spinning threads
    import os

    from theory._util import local_pool, stop_pool

    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # as on the 2-core CI machine
    pool = local_pool(2)
    try:
        got = set(pool.map(_worker_threads, range(4)))
    finally:
        stop_pool(pool)
    numba_threads, blas, share = got.pop()
    assert got == set()  # every call saw the same
    assert numba_threads == 1 and blas and set(blas) == {1}  # the defaults: one per core
    # a pool the worker starts (an SGD piece's seeds) gets the worker's share: one process
    assert share == 1


def test_cpu_share_is_the_core_count_outside_a_pool(monkeypatch):
    import os

    from theory._util import CPU_SHARE_ENV, cpu_share
    from theory.ssi.figures.sgd import _workers

    monkeypatch.delenv(CPU_SHARE_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert cpu_share() == 8 and _workers(False) == 2
    monkeypatch.setenv(CPU_SHARE_ENV, "1")
    assert cpu_share() == 1 and _workers(False) == 1
    monkeypatch.setenv(CPU_SHARE_ENV, "junk")  # not a count: all the cores
    assert cpu_share() == 8


def test_a_signal_during_a_pool_wait_becomes_a_flag_and_an_interrupt_between_waits(monkeypatch):
    """interrupt_flag turns SIGINT into an event (also where it was ignored at start-up, as in a
    background job) and restores the handler after; inside a pool worker it replaces nothing;
    wait_first returns what finished and raises KeyboardInterrupt only once the event is set,
    never from inside the handler."""
    import concurrent.futures as cf

    from theory._util import CPU_SHARE_ENV, interrupt_flag, wait_first

    monkeypatch.delenv(CPU_SHARE_ENV, raising=False)

    before = signal.getsignal(signal.SIGINT)
    done = cf.Future()
    done.set_result(1)
    never = cf.Future()
    with interrupt_flag() as flag:
        assert signal.getsignal(signal.SIGINT) is not before
        got, left = wait_first({done, never}, flag, timeout=0.01)
        assert got == {done} and left == {never}
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt here: the handler sets flag
        time.sleep(0.05)
        assert flag.is_set()
        with pytest.raises(KeyboardInterrupt):
            wait_first({never}, flag, timeout=0.01)
    assert signal.getsignal(signal.SIGINT) is before
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupt_flag():  # ignored at start-up (a background job): still a flag
            assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        monkeypatch.setenv(CPU_SHARE_ENV, "1")  # inside a pool worker: left alone
        with interrupt_flag():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
