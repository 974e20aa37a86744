"""Benchmark of the general replica equations (docs/attention.md §10, theory.attention.general).

    python benchmarks/bench_ps_general.py            # kernel + channel timings (~1-2 min)
    python benchmarks/bench_ps_general.py --solve    # + one L = 2 reduction fixed point and
                                                     #   one L = 3 fixed point (several minutes)
    python benchmarks/bench_ps_general.py --fixed-m  # + the fixed-m RS profile point (Newton)
                                                     #   against the plain damped iteration of
                                                     #   the same map, and restricted L-BFGS

Prints: the multi-start numba prox per node against the plain scipy baseline (BFGS from the
same deterministic starts, no random ones), for (L, r, r_t) = (2,1,1), (3,1,1), (2,2,1); the
cost of one channel evaluation (all expectations) per QMC node; with --solve, wall times of
fixed points.  Numba threads: whatever numba.get_num_threads() says (2 on the project machine).
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from theory.attention import general as pg
from theory.attention.general import state_equations as gs


def _fields(p, N, rng, scale=0.5):
    w = scale * rng.standard_normal((N, p.L, p.r))
    hs = 0.5 * rng.standard_normal((N, p.L, p.r_t))
    return w, hs


def bench_prox(p, V=3.0, N=4096, N_ref=40):
    rng = np.random.default_rng(0)
    w, hs = _fields(p, N, rng)
    Vm = V * np.eye(p.r)
    pg.prox(w[:8], hs[:8], Vm, p)  # compile
    t = time.perf_counter()
    a = pg.prox(w, hs, Vm, p)
    t_nb = (time.perf_counter() - t) / N
    t = time.perf_counter()
    _, vals = pg.prox_reference(w[:N_ref], hs[:N_ref], Vm, p, n_random=0)
    t_ref = (time.perf_counter() - t) / N_ref
    dv = float(np.max(a.value[:N_ref] - vals))
    return t_nb, t_ref, dv


def bench_channel(p, n=2**12, n_rep=2):
    nodes = pg.make_nodes(p, n, n_rep, rng=0)
    o = pg.default_init("semantic", p)
    o["V"] = 5.0 * np.eye(p.r)
    o["q"] = 0.2 * np.eye(p.r)
    o["theta"] = 0.15 * o["theta"] / 0.35
    gs.channel(o, p, pg.make_nodes(p, 8, 1, rng=1))
    t = time.perf_counter()
    ch = gs.channel(o, p, nodes)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    gs.channel(o, p, nodes, warm=ch["x"])
    t2 = time.perf_counter() - t
    return t1 / (n * n_rep), t2 / (n * n_rep)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solve", action="store_true", help="also time full fixed points")
    ap.add_argument(
        "--fixed-m",
        action="store_true",
        help="also time the fixed-m profile (Newton vs damped map) and restricted "
        "L-BFGS at L = 3, alpha = 1, |m| = 0.35",
    )
    args = ap.parse_args()
    print(f"numba threads: {numba.get_num_threads()}")
    cases = [(2, 1, 1), (3, 1, 1), (2, 2, 1)]
    print("\nprox (multi-start Newton, numba, parallel) vs scipy BFGS baseline (same starts)")
    print(
        f"{'L,r,r_t':>8} {'numba us/node':>14} {'scipy us/node':>14} {'ratio':>7} "
        f"{'max(v_nb - v_scipy)':>20}"
    )
    for L, r, rt in cases:
        p = pg.GeneralParams(L=L, r=r, r_t=rt)
        tn, tr, dv = bench_prox(p)
        print(f"{f'{L},{r},{rt}':>8} {tn * 1e6:14.1f} {tr * 1e6:14.0f} {tr / tn:7.0f} {dv:20.1e}")
    print("\nchannel (fields, prox, all expectations) per QMC node, 2^12 x 2 nodes")
    print(f"{'L,r,r_t':>8} {'cold us/node':>13} {'warm us/node':>13}")
    for L, r, rt in cases:
        p = pg.GeneralParams(L=L, r=r, r_t=rt)
        c, w = bench_channel(p)
        print(f"{f'{L},{r},{rt}':>8} {c * 1e6:13.1f} {w * 1e6:13.1f}")
    if args.solve:
        print("\nfixed points (QMC 2^12 x 4, tol 1e-6, with the per-scrambling error re-solves)")
        for L, alpha, br in ((2, 2.0, "semantic"), (2, 2.0, "positional"), (3, 1.0, "semantic")):
            p = pg.GeneralParams(L=L)
            t = time.perf_counter()
            res = pg.fixed_point(alpha, p, br, n=2**12, n_rep=4)
            dt = time.perf_counter() - t
            print(
                f"L={L} alpha={alpha} {br:10s} {res.status:9s} it={res.iterations:3d} "
                f"q={res.q[0, 0]:.5f}±{res.q_err[0, 0]:.1e} eps_t={res.eps_t:.6f} "
                f"wall={dt:.0f}s"
            )

    if args.fixed_m:
        bench_fixed_m()


def bench_fixed_m(mixing=0.5, tol=1e-8):
    """L = 3, α = 1, m = 0.35 (1, 1, -2)/√6, QMC 2^12 x 2: fixed_m_point (quasi-Newton in
    (q, V)) against the plain damped iteration of the same map (the same loop, strategy
    ``Damped``) to the same tolerance, then simulate_fixed_m at d = 400 and 800 (2 restarts)."""
    from theory.attention.finite_d import general as eg
    from theory.solve import Damped, iterate

    p = pg.GeneralParams(L=3)
    m = 0.35 * np.array([1.0, 1.0, -2.0]) / np.sqrt(6)
    nodes = pg.make_nodes(p, 2**12, 2, rng=1)
    pg.fixed_m_point(1.0, m, p, nodes=pg.make_nodes(p, 64, 2, rng=1), error=False)  # compile
    t = time.perf_counter()
    r = pg.fixed_m_point(1.0, m, p, q0=0.1, V0=10.0, nodes=nodes, tol=tol, error=False)
    t_newton = time.perf_counter() - t
    t = time.perf_counter()

    def F(x):
        qn, Vn, *_ = pg.fixed_m_map(1.0, p, m[:, None], x["q"], x["V"], nodes)
        return dict(q=qn, V=Vn), None

    damped = iterate(F, dict(q=0.1, V=10.0), strategy=Damped(mixing), tol=tol, max_iter=2000)
    q, V, its = damped.x["q"], damped.x["V"], damped.iterations
    t_damped = time.perf_counter() - t
    print(f"\nfixed-m profile point (L=3, alpha=1, |m|=0.35, 2^12 x 2, tol {tol:g}):")
    print(
        f"  quasi-Newton {r.status:9s} {r.iterations} maps q={r.q:.6f} V={r.V:.4f} "
        f"eps_t={r.eps_t:.7f} wall={t_newton:.1f}s"
    )
    print(
        f"  damped (mixing {mixing}) {its} maps q={q:.6f} V={V:.4f} wall={t_damped:.1f}s "
        f"ratio {t_damped / t_newton:.1f}"
    )
    for d in (400, 800):
        t = time.perf_counter()
        s = eg.simulate_fixed_m(1.0, m, p, d=d, seed=0, restarts=2)
        print(
            f"  restricted L-BFGS d={d}: {s.status} eps_t={np.round(s.eps_t, 6).tolist()} "
            f"overlap ratio {s.mutual_ratio:.3f} wall={time.perf_counter() - t:.1f}s"
        )


if __name__ == "__main__":
    main()
