"""Speed of the online SGD simulators (issue 4).

    python benchmarks/bench_sgd.py [--quick]

Model: attention, L = 2, P_1 = -P_2, identity reduction, positional-semantic target
(omega = 0.5, a = 1), gamma = 0.05 -- the reference setting of the phase-diagram runs.

* full d-dimensional SGD (theory.simulate.sgd.simulate_sgd, numba) vs a per-sample
  PyTorch-style loop written with numpy (fresh X each step, forward, hand backward through the
  softmax, spherical renormalisation, overlaps) at d = 1000 and 10^4;
* the exact reduced chain (theory.simulate.reduced.simulate_reduced) at d = 10^3 and 10^6
  (steps per second, should not depend on d), same model, and the tied ReLU network.

Numba compilation is excluded (one warm-up call).  The baseline draws its Gaussians with numpy
(PCG64 + ziggurat); the numba simulator draws them in the kernel (xoshiro256** + ziggurat); the
"numba + numpy G" column feeds the same kernel with numpy-drawn chunks.  Both simulators must
draw L d fresh Gaussians per step, so the full simulator is bounded by Gaussian generation: the
speed-up over the loop is the removed Python/numpy call overhead, largest at small d.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import sympy as sp

from theory.simulate.reduced import simulate_reduced
from theory.simulate.sgd import SimSpec, ps_matrix, simulate_sgd

OMEGA, A, LR = 0.5, 1.0, 0.05


def baseline_loop(d, n_steps, seed=0):
    """Per-sample loop, numpy only (what one writes in PyTorch with batch size 1)."""
    rng = np.random.default_rng(seed)
    L = 2
    Q = np.linalg.qr(rng.standard_normal((d, 3)))[0]
    wstar = math.sqrt(d) * Q[:, 0]
    p = Q[:, 1]
    P = np.stack([p, -p])
    w = rng.standard_normal(d)
    w *= math.sqrt(d) / np.linalg.norm(w)
    Aa = ps_matrix(A)
    for _ in range(n_steps):
        X = rng.standard_normal((L, d)) / math.sqrt(d)
        zs = X @ wstar
        Ss = np.exp(np.outer(zs, zs))
        Ss /= Ss.sum(axis=1, keepdims=True)
        Y = (1 - OMEGA) * Ss + OMEGA * Aa
        Xp = X + P / math.sqrt(d)
        z = Xp @ w
        Am = np.outer(z, z)
        S = np.exp(Am - Am.max(axis=1, keepdims=True))
        S /= S.sum(axis=1, keepdims=True)
        D = -2.0 * (Y - S)
        GA = S * (D - (D * S).sum(axis=1, keepdims=True))
        delta = (GA + GA.T) @ z
        grad = Xp.T @ delta
        w = w - LR * grad
        w *= math.sqrt(d) / np.linalg.norm(w)
        _m = w @ wstar / d
        _e = P @ w / math.sqrt(d)
    return w


def rate(fn, n):
    t0 = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps (noisier numbers)")
    args = ap.parse_args(argv)
    scale = 0.2 if args.quick else 1.0
    spec = SimSpec(kind="attention", L=2, target=("ps", OMEGA, A), pe="opposite")
    # warm-up (compilation)
    simulate_sgd(spec, 50, LR, 0, steps=50, n_record=5)
    from theory.simulate import sgd as _s
    _s._FullState.kernel_rng = False
    simulate_sgd(spec, 50, LR, 0, steps=50, n_record=5)
    _s._FullState.kernel_rng = True
    simulate_reduced(spec, 50, LR, 0, steps=50, n_record=5)
    from theory.simulate import sgd as sgd_mod

    print("full d-dimensional SGD, attention L=2 (steps/s; measured, compile excluded)")
    print(f"{'d':>8} {'numpy loop':>12} {'numba':>12} {'speed-up':>9} "
          f"{'numba+numpy G':>14} {'speed-up':>9}")
    rows = []
    for d in (1000, 10_000):
        nb = int(20000 * scale * 1000 / d) + 200
        base = rate(lambda n, d=d: baseline_loop(d, n), nb)
        run = lambda n, d=d: simulate_sgd(spec, d, LR, 1, steps=n, n_record=20, start="origin")
        ours = rate(run, 4 * nb)
        sgd_mod._FullState.kernel_rng = False
        try:
            ours_np = rate(run, 4 * nb)
        finally:
            sgd_mod._FullState.kernel_rng = True
        rows.append((d, base, ours, ours_np))
        print(f"{d:>8} {base:>12.0f} {ours:>12.0f} {ours / base:>8.1f}x {ours_np:>14.0f} "
              f"{ours_np / base:>8.1f}x")
    print("\nreduced chain (steps/s; independent of d)")
    z1, z2 = sp.symbols("z1 z2", real=True)
    tied = SimSpec(kind="tied", L=2, target=("expr", sp.expand((z1**2 - 1 + z2**2 - 1)
                                                              / sp.sqrt(2))), activation="relu")
    simulate_reduced(tied, 50, LR, 0, steps=50, n_record=5)
    n = int(2_000_000 * scale)
    for name, sp_ in (("attention PS target", spec), ("tied ReLU, sum He2", tied)):
        for d in (1000, 10**6):
            r = rate(lambda k, s_=sp_, d=d: simulate_reduced(s_, d, LR, 2, steps=k, n_record=20,
                                                start="origin"), n)
            print(f"{name:>22}  d={d:>8}: {r:>12.3g} steps/s")
    return rows


if __name__ == "__main__":
    main()
