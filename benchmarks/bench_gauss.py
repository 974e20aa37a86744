"""Benchmark of theory.gauss on the 4-D integrand of the L = 2 softmax attention loss.

Integrand (docs/ssi.md §1-2: the SSI attention risk at L = 2, P_1 = -P_2, Pi = identity):
    loss(z*, z) = || softmax_row(z z^T) - softmax_row(z* z*^T) ||_F^2,
    z*_l = xi_l,  z_l = e_l + m xi_l + sqrt(1 - m^2) eta_l,  e = (e, -e),
i.e. a Gaussian in (z*_1, z*_2, z_1, z_2) with mean (0, 0, e, -e) and covariance
[[I, m I], [m I, I]].
For a 2 x 2 row softmax, entry (i, 1) = sigmoid(z_i (z_1 - z_2)) and the row sums to 1, so
    loss = 2 sum_i (sigmoid(z_i (z_1 - z_2)) - sigmoid(z*_i (z*_1 - z*_2)))^2.

Prints (1) accuracy vs number of integrand evaluations for Gauss-Hermite / scrambled Sobol /
numba Monte Carlo against a converged Gauss-Hermite reference, (2) throughput of the numba MC
kernel against the vectorised numpy estimator (same estimator, same sample count).

    python benchmarks/bench_gauss.py            # full
    python benchmarks/bench_gauss.py --quick    # smaller reference and sizes
"""

from __future__ import annotations

import argparse
import math
import time

import numba
import numpy as np

from theory.gauss import expect, expect_mc_numpy_reference


def moments(e: float, m: float):
    mean = np.array([0.0, 0.0, e, -e])
    cov = np.block([[np.eye(2), m * np.eye(2)], [m * np.eye(2), np.eye(2)]])
    return mean, cov


def loss_vec(z: np.ndarray) -> np.ndarray:
    """Vectorised numpy integrand, z of shape (N, 4) = (z*_1, z*_2, z_1, z_2)."""
    ds = z[:, 0] - z[:, 1]
    d = z[:, 2] - z[:, 3]
    a1 = 1.0 / (1.0 + np.exp(-z[:, 2] * d)) - 1.0 / (1.0 + np.exp(-z[:, 0] * ds))
    a2 = 1.0 / (1.0 + np.exp(-z[:, 3] * d)) - 1.0 / (1.0 + np.exp(-z[:, 1] * ds))
    return 2.0 * (a1 * a1 + a2 * a2)


@numba.njit(cache=True)
def _sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    t = math.exp(x)
    return t / (1.0 + t)


@numba.njit(cache=True)
def loss_jit(z):
    """Scalar numba integrand, z of shape (4,)."""
    ds = z[0] - z[1]
    d = z[2] - z[3]
    a1 = _sigmoid(z[2] * d) - _sigmoid(z[0] * ds)
    a2 = _sigmoid(z[3] * d) - _sigmoid(z[1] * ds)
    return 2.0 * (a1 * a1 + a2 * a2)


def best_time(fn, repeat):
    """Best wall time and best CPU time (all threads of this process) over ``repeat`` runs."""
    best = np.inf
    best_cpu = np.inf
    out = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--e", type=float, default=0.3, help="positional overlap e (default 0.3)")
    ap.add_argument("--m", type=float, default=0.5, help="semantic overlap m (default 0.5)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--repeat", type=int, default=3, help="timing repetitions (best of)")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="also time the parallel numba kernel (compiles ~10 s)",
    )
    args = ap.parse_args(argv)
    mean, cov = moments(args.e, args.m)
    print(
        f"integrand: L=2 softmax attention loss, (e, m) = ({args.e}, {args.m}), dim 4, "
        f"numba {numba.__version__}, threads {numba.get_num_threads()}"
    )

    # ---------------------------------------------------------------- reference
    n_ref, n_chk = (28, 24) if args.quick else (40, 32)
    ref = expect(loss_vec, mean, cov, method="gh", n=n_ref).value
    chk = expect(loss_vec, mean, cov, method="gh", n=n_chk).value
    print(
        f"reference: GH {n_ref}^4 nodes = {ref:.15f}; GH {n_chk}^4 differs by {abs(ref - chk):.1e}"
    )

    # ---------------------------------------------------------------- accuracy
    print("\n| method | evaluations | value | abs error vs reference | reported error |")
    print("|---|---|---|---|---|")
    gh_ns = (4, 6, 8, 10, 12, 16, 20) if args.quick else (4, 6, 8, 10, 12, 16, 20, 24)
    for n in gh_ns:
        e = expect(loss_vec, mean, cov, method="gh", n=n)
        print(
            f"| gh {n}/dim | {n**4} | {e.value:.10f} | {abs(e.value - ref):.1e} | {e.error:.1e} |"
        )
    q_ns = (2**8, 2**10, 2**12) if args.quick else (2**8, 2**10, 2**12, 2**14, 2**16)
    for n in q_ns:
        e = expect(loss_vec, mean, cov, method="qmc", n=n, rng=1, n_rep=8)
        print(
            f"| qmc 8 x 2^{int(math.log2(n))} | {8 * n} | {e.value:.10f} | "
            f"{abs(e.value - ref):.1e} | {e.error:.1e} |"
        )
    expect(loss_jit, mean, cov, method="mc", n=100, rng=0)  # compile
    mc_ns = (10**3, 10**4, 10**5, 10**6) if args.quick else (10**3, 10**4, 10**5, 10**6, 10**7)
    for n in mc_ns:
        e = expect(loss_jit, mean, cov, method="mc", n=n, rng=2)
        print(f"| mc (numba) | {n} | {e.value:.10f} | {abs(e.value - ref):.1e} | {e.error:.1e} |")

    # ---------------------------------------------------------------- throughput
    n = 10**6
    t_nb, c_nb, e_nb = best_time(
        lambda: expect(loss_jit, mean, cov, method="mc", n=n, rng=3), args.repeat
    )
    t_np, c_np, e_np = best_time(
        lambda: expect_mc_numpy_reference(loss_vec, mean, cov, n=n, rng=3), args.repeat
    )
    print(f"\nthroughput at n = {n:.0e} samples (best of {args.repeat}):")
    print(
        f"  numba MC kernel (serial): wall {t_nb:.3f} s ({n / t_nb / 1e6:.2f} M samples/s), "
        f"cpu {c_nb:.3f} s, value {e_nb.value:.6f} +- {e_nb.error:.1e}"
    )
    print(
        f"  numpy vectorised MC     : wall {t_np:.3f} s ({n / t_np / 1e6:.2f} M samples/s), "
        f"cpu {c_np:.3f} s, value {e_np.value:.6f} +- {e_np.error:.1e}"
    )
    print(
        f"  speed-up numba / numpy  : {t_np / t_nb:.2f}x wall, {c_np / c_nb:.2f}x cpu "
        "(target >= 3x)"
    )
    if args.parallel:
        expect(loss_jit, mean, cov, method="mc", n=100, rng=0, parallel=True)  # compile
        t_par, _, _ = best_time(
            lambda: expect(loss_jit, mean, cov, method="mc", n=n, rng=3, parallel=True), args.repeat
        )
        print(
            f"  numba MC kernel (parallel, {numba.get_num_threads()} threads): {t_par:.3f} s "
            f"= {t_np / t_par:.2f}x numpy"
        )


if __name__ == "__main__":
    main()
