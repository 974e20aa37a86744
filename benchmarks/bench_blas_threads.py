"""CPU and wall time of the finite-d ERM L-BFGS runs at one and two OpenBLAS threads.

    python benchmarks/bench_blas_threads.py            # alone
    python benchmarks/bench_blas_threads.py & python benchmarks/bench_blas_threads.py   # as a
                                                       # --workers 2 pool loads the machine

Why ``theory reproduce`` runs every piece with one BLAS thread (``theory.reproduce._run_piece``):
the risk and gradient of an L-BFGS run are matrix-vector products over the (nL x d) data matrix,
memory-bound: a second thread costs about twice the CPU and gains little or no wall time, and
in a --workers 2 pool the second core is busy anyway.  Runs: the rank-2 student from the
random init (erm-rank2's runs, d = 1000, seed 1) at α = 1, 2, 3, 4, and the rank-1 model from both
inits (erm-omega03's runs, ω = 0.3, d = 1000, seed 5) at α = 0.5, 1, 2.

Measured 2026-12-06 (CPU s / wall s).  Alone: rank-2 1.09-1.53 / the same at one thread,
3.19-4.31 / 1.60-2.17 at two; rank-1 pair 0.62-0.80 / the same at one thread, 1.39-1.72 /
0.70-0.87 at two.  Two one-thread copies side by side: rank-2 1.15-1.62 / the same.
"""

from __future__ import annotations

import time


def _timed(fn):
    c, w = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - w


def main() -> None:
    from theory._util import blas_threads
    from theory.attention.figures.rank2 import PARAMS2
    from theory.attention.figures.simulation import PARAMS, run_sims
    from theory.attention.finite_d.general import simulate

    for threads in (1, 2):
        with blas_threads(threads):
            for a in (1.0, 2.0, 3.0, 4.0):
                cpu, wall = _timed(
                    lambda a=a: simulate(a, PARAMS2, d=1000, init="random", seed=1, n_test=4000)
                )
                print(f"threads {threads}  rank-2  alpha {a:g}: {cpu:.2f} CPU-s, {wall:.2f} s")
            for a in (0.5, 1.0, 2.0):
                pts = [(a, 0.3, 1000, 5, "positional"), (a, 0.3, 1000, 5, "semantic")]
                cpu, wall = _timed(lambda pts=pts: run_sims(pts, PARAMS, progress=False))
                print(f"threads {threads}  rank-1 pair alpha {a:g}: {cpu:.2f} CPU-s, {wall:.2f} s")


if __name__ == "__main__":
    main()
