"""Overheads of theory.sweep (and the cost of its crash-safe table).

    python benchmarks/bench_sweep.py [--points 200] [--work 0.2]

Prints:
1. table appends per second: one fsync'd O_APPEND line per point (theory.sweep.ResultTable)
   against the baseline a script would write (csv.writer on one open file, no fsync, lost on a
   crash);
2. per-point overhead of run_sweep on a trivial function: in process (workers=1), local process
   pool (workers=2), Dask LocalCluster (threads, 1 worker), against a plain list comprehension;
3. wall time for CPU-bound points (--reps eigvalsh of a 300x300 matrix each)
   with workers=1 and workers=2 (the speed-up a 2-core machine can give).
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from theory.sweep import ResultTable, demo_point, run_sweep


def busy(i: int, reps: int = 100) -> dict:
    """A fixed amount of CPU work: ``reps`` eigen-decompositions of a 300x300 matrix."""
    rng = np.random.default_rng(i)
    a = rng.standard_normal((300, 300))
    a = a + a.T
    top = 0.0
    for _ in range(reps):
        top = float(np.linalg.eigvalsh(a)[-1])
    return {"top": top}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--reps", type=int, default=100, help="eigvalsh calls per CPU-bound point")
    args = ap.parse_args()
    n = args.points
    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep_"))

    # 1. table appends
    rows = [{"x": float(i), "f": float(np.sin(i)), "status": "ok"} for i in range(n)]
    t = ResultTable(tmp / "t.csv")
    t0 = time.perf_counter()
    for r in rows:
        t.append(r)
    dt_safe = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open(tmp / "plain.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow(r)
    dt_plain = time.perf_counter() - t0
    print(
        f"[table] {n} appends: fsync'd lines {n / dt_safe:9.0f} rows/s "
        f"({1e3 * dt_safe / n:.3f} ms/row); plain csv.writer {n / dt_plain:9.0f} rows/s"
    )

    # 2. per-point overhead
    grid = {"x": [float(i) for i in range(n)]}
    t0 = time.perf_counter()
    _ = [demo_point(x=x) for x in grid["x"]]
    base = (time.perf_counter() - t0) / n
    print(f"[overhead] plain loop                : {1e6 * base:9.1f} us/point")
    for label, kw in [
        ("run_sweep workers=1", dict(workers=1)),
        ("run_sweep workers=2", dict(workers=2)),
    ]:
        out = tmp / f"o{label[-1]}.jsonl"
        t0 = time.perf_counter()
        run_sweep(demo_point, grid, out=out, progress=False, **kw)
        dt = (time.perf_counter() - t0) / n
        print(f"[overhead] {label:26s}: {1e6 * dt:9.1f} us/point (incl. fsync'd append)")
    try:
        from distributed import LocalCluster

        with LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster:
            t0 = time.perf_counter()
            run_sweep(
                demo_point,
                grid,
                out=tmp / "dask.jsonl",
                progress=False,
                scheduler=cluster.scheduler_address,
            )
            dt = (time.perf_counter() - t0) / n
        print(
            f"[overhead] {'run_sweep dask LocalCluster':26s}: {1e6 * dt:9.1f} us/point "
            "(incl. client connect)"
        )
    except ImportError:
        print("[overhead] dask not installed: skipped")

    # 3. CPU-bound points
    m = 2 * (os.cpu_count() or 1) * 2
    g = {"i": list(range(m)), "reps": [args.reps]}
    res = {}
    for w in (1, 2):
        t0 = time.perf_counter()
        rr = run_sweep(busy, g, progress=False, workers=w)
        res[w] = (time.perf_counter() - t0, [r["top"] for r in rr])
    assert res[1][1] == res[2][1], "same values whatever the executor"
    print(
        f"[cpu] {m} points x {args.reps} eigvalsh(300x300): workers=1 {res[1][0]:.2f} s, "
        f"workers=2 {res[2][0]:.2f} s (speed-up {res[1][0] / res[2][0]:.2f}x; OMP threads "
        f"{os.environ.get('OMP_NUM_THREADS', 'default')})"
    )


if __name__ == "__main__":
    main()
