"""Speed of the online SGD simulators.

    python benchmarks/bench_sgd.py [--quick]

Model: attention, L = 2, P_1 = -P_2, identity reduction, positional-semantic target
(omega = 0.5, a = 1), gamma = 0.05 -- the reference setting of the phase-diagram runs.

* full d-dimensional SGD (theory.ssi.simulate_sgd, numba) vs a per-sample
  PyTorch-style loop written with numpy (fresh X each step, forward, hand backward through the
  softmax, spherical renormalisation, overlaps) at d = 1000 and 10^4;
* the exact reduced chain (theory.ssi.simulate_reduced) at d = 10^3 and 10^6
  (steps per second, should not depend on d), same model, and the tied ReLU network.

Numba compilation is excluded (one warm-up call); every rate is the best of 3 runs (the machine
is shared).  The baseline draws its Gaussians with numpy (PCG64 + ziggurat).  "numba" is the
default simulator: for d >= 32 (theory.ssi.sgd.full.FAST_MIN_D) the SIMD block generator
(theory.ssi.sgd._blocknormal: 64 xoshiro256** lanes + 2048-layer ziggurat) inside the fused
kernel ``full_chunk_fast``; "scalar
kernel" is the scalar kernel (scalar xoshiro256** + 128-layer ziggurat of theory.rng, one
draw at a time; used below FAST_MIN_D); "numba + numpy G" feeds the reference kernel with
numpy-drawn chunks.  Both simulators draw L d fresh Gaussians per step, so the floor is the
Gaussian generation: the first table measures it (ns per draw, per-step cost).  Single thread
throughout (a trajectory is sequential; seeds are spread over processes by simulate_seeds).
"""

from __future__ import annotations

import argparse
import math
import time

import numba
import numpy as np
import sympy as sp

from theory.rng import xoshiro_state
from theory.ssi import TiedNetwork, positional_matrix, ps_model, simulate_reduced, simulate_sgd
from theory.ssi.sgd import _blocknormal as _BN

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
    Aa = positional_matrix(A)
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


def rate(fn, n, repeat=3):
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        best = max(best, n / (time.perf_counter() - t0))
    return best


def tmin(fn, burst=0.003, n=40):
    """Best time of one call over ``n`` bursts of ~``burst`` seconds (robust to sharing)."""
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - t0
        if t > burst:
            break
        reps *= 2
    best = t / reps
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


@numba.njit
def _fill_many(S, s, buf, rb, rp, rv, m):
    for _ in range(m):
        _BN.fill_rows(S, s, buf, rb, rp, rv)


def floor_row(d, L=2):
    """ns per Gaussian of each generator and the per-step costs at dimension d."""
    from theory.ssi.sgd import _blocknormal as BN
    from theory.ssi.sgd import _kernels as K

    n = L * d
    g = np.random.default_rng(0)
    buf = np.empty(n)
    t_np = tmin(lambda: g.standard_normal(out=buf))
    st = xoshiro_state(1)
    K.fill_normals(st, buf)
    t_sc = tmin(lambda: K.fill_normals(st, buf))
    S, s = BN.seed_block_state(2)
    dp = BN.padded_width(d)
    gb = np.empty((L, dp))
    rb = np.empty(BN.NB, np.uint64)
    rp = np.empty(L * dp, np.int64)
    rv = np.empty(L * dp, np.uint64)
    mf = max(1, 200_000 // n)  # fills per call (no Python dispatch per fill)
    _fill_many(S, s, gb, rb, rp, rv, 1)
    t_bl = tmin(lambda: _fill_many(S, s, gb, rb, rp, rv, mf)) / mf
    # one kernel call = m steps of the reference model (PS target, P_1 = -P_2)
    rng = np.random.default_rng(3)
    M = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    us, Qp = np.ascontiguousarray(M[:, 0]), np.ascontiguousarray(M[:, 1:].T)
    B = np.array([[1.0], [-1.0]])
    W = rng.standard_normal((1, d))
    W *= math.sqrt(d) / np.linalg.norm(W)
    C = np.array([[W[0] @ us, W[0] @ Qp[0]]]) / math.sqrt(d)
    # steps per kernel call: ~1 ms calls (short enough to run unpreempted on a loaded machine,
    # long enough to amortise the kernel's scratch allocation)
    m = max(50, 2_000_000 // (L * d))
    zs = rng.standard_normal((m, L))
    Y = np.tile(positional_matrix(A).ravel(), (m, 1))
    Rm = np.zeros((L, L))

    def fast():
        K.full_chunk_fast(W, us, Qp, B, S, s, zs, Y, LR, 0, Rm, *K.act_args(0), False, np.inf, C)

    st2 = xoshiro_state(4)

    def old():
        K.full_chunk_rng(W, us, Qp, B, st2, zs, Y, LR, 0, Rm, *K.act_args(0), False, np.inf, C)

    fast()
    old()
    t_fast = tmin(fast) / m
    t_old = tmin(old) / m
    return dict(
        d=d,
        numpy_ns=t_np / n * 1e9,
        scalar_ns=t_sc / n * 1e9,
        block_ns=t_bl / n * 1e9,
        numpy_step_us=t_np * 1e6,
        block_step_us=t_bl * 1e6,
        arith_us=(t_fast - t_bl) * 1e6,
        fast_step_us=t_fast * 1e6,
        old_step_us=t_old * 1e6,
    )


def floor_table():
    print("floor: Gaussian generation and arithmetic per step, L = 2 (best of 40 bursts)")
    print(
        f"{'d':>6} {'numpy ns/draw':>14} {'scalar zig':>11} {'block zig':>10} "
        f"{'numpy us/step':>14} {'block us/step':>14} {'arith us/step':>14} "
        f"{'fast step us':>13} {'scalar-kernel step us':>22}"
    )
    out = []
    for d in (1000, 10_000):
        row = floor_row(d)
        out.append(row)
        print(
            f"{d:>6} {row['numpy_ns']:>14.2f} {row['scalar_ns']:>11.2f} {row['block_ns']:>10.2f} "
            f"{row['numpy_step_us']:>14.2f} {row['block_step_us']:>14.2f} "
            f"{row['arith_us']:>14.2f} {row['fast_step_us']:>13.2f} {row['old_step_us']:>22.2f}"
        )
    print(
        "(block zig: per useful draw, rows padded to a multiple of 128; arith = fast step - "
        "block fill; all single-threaded)\n"
    )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps (noisier numbers)")
    args = ap.parse_args(argv)
    scale = 0.2 if args.quick else 1.0
    from theory.ssi.sgd import full as sgd_mod

    model = ps_model(A, OMEGA)
    # warm-up (compilation) of the three kernels
    simulate_sgd(model, 200, LR, 0, steps=50, n_record=5)
    sgd_mod.FAST_MIN_D, fast_min = 10**12, sgd_mod.FAST_MIN_D
    simulate_sgd(model, 200, LR, 0, steps=50, n_record=5)
    sgd_mod.FAST_MIN_D = fast_min
    sgd_mod._FullState.kernel_rng = False
    simulate_sgd(model, 200, LR, 0, steps=50, n_record=5)
    sgd_mod._FullState.kernel_rng = True
    simulate_reduced(model, 50, LR, 0, steps=50, n_record=5)

    floor_table()
    print("full d-dimensional SGD, attention L=2 (steps/s; measured, compile excluded, best of 3)")
    print(
        f"{'d':>8} {'numpy loop':>12} {'numba':>12} {'speed-up':>9} {'scalar kernel':>14} "
        f"{'speed-up':>9} {'numba+numpy G':>14} {'speed-up':>9}"
    )
    rows = []
    for d in (1000, 10_000):
        nb = int(20000 * scale * 1000 / d) + 200
        base = rate(lambda n, d=d: baseline_loop(d, n), nb)
        run = lambda n, d=d: simulate_sgd(
            model,
            d,
            LR,
            1,
            steps=n,
            n_record=20,
            start="origin",
        )
        ours = rate(run, 10 * nb)
        sgd_mod.FAST_MIN_D = 10**12
        try:
            ours_old = rate(run, 4 * nb)
        finally:
            sgd_mod.FAST_MIN_D = fast_min
        sgd_mod._FullState.kernel_rng = False
        try:
            ours_np = rate(run, 2 * nb)
        finally:
            sgd_mod._FullState.kernel_rng = True
        rows.append((d, base, ours, ours_old, ours_np))
        print(
            f"{d:>8} {base:>12.0f} {ours:>12.0f} {ours / base:>8.1f}x {ours_old:>14.0f} "
            f"{ours_old / base:>8.1f}x {ours_np:>14.0f} {ours_np / base:>8.1f}x"
        )
    print("\nreduced chain (steps/s; independent of d)")
    z1, z2 = sp.symbols("z1 z2", real=True)
    tied = TiedNetwork(sp.expand((z1**2 - 1 + z2**2 - 1) / sp.sqrt(2)), L=2, activation="relu")
    simulate_reduced(tied, 50, LR, 0, steps=50, n_record=5)
    n = int(2_000_000 * scale)
    for name, sp_ in (("attention PS target", model), ("tied ReLU, sum He2", tied)):
        for d in (1000, 10**6):
            r = rate(
                lambda k, s_=sp_, d=d: simulate_reduced(
                    s_, d, LR, 2, steps=k, n_record=20, start="origin"
                ),
                n,
                repeat=1,
            )
            print(f"{name:>22}  d={d:>8}: {r:>12.3g} steps/s")
    return rows


if __name__ == "__main__":
    main()
