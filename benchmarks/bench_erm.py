"""Speed of the ERM replica solver (theory side).

    python benchmarks/bench_erm.py            # prox ratio + one fixed point per branch
    python benchmarks/bench_erm.py --curve    # + a 20-point curve of both branches
    python benchmarks/bench_erm.py --alpha-c  # + alpha_c(omega) for 9 omegas
    python benchmarks/bench_erm.py --convergence  # + fixed points under finer rules
    python benchmarks/bench_erm.py --solver   # + why warm starts skip the cheap fixed point

1. Ratio on the same state-equation map evaluation (ω = 0.3, α = 2, positional fixed point,
   the same tensor Gauss-Hermite nodes): the straightforward baseline a researcher would write —
   a Python loop over the quadrature nodes with ``scipy.optimize.minimize`` (BFGS) from the same
   nine starts as the kernel (the non-convex prox needs them), then the hats — against the numba
   kernel ``channel_sums``.  The baseline runs on a random subset of nodes and is extrapolated per
   node (printed).
2. Wall (and process CPU) time of converged fixed points from a cold start (default split
   rule), a 20-point curve of both branches (continuation) and α_c(ω), α_l(ω) for 9 ω.
3. ``--convergence``: the fixed points at α = 2 and 1.25 under the default rule, a finer
   trapezoid rule, the finest one, and the old Gauss-Hermite default (relative differences).
4. ``--solver``: the cheap rule's fixed point against the accurate one along the positional
   branch (its error oscillates with α), the contraction factor ||J_c^-1 (J - J_c)|| of
   quasi-Newton on the accurate map with the cheap map's Jacobian (both by finite differences)
   at α = 2, and the cheap / accurate map counts of the 20-point curve.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np


def baseline_map(nodes, weights, q, m, theta, V, p, alpha):
    """Hats by scipy.optimize.minimize per node (Python loop)."""
    from scipy.optimize import minimize

    from theory.attention import _kernels as K

    sq = math.sqrt(q)
    a = theta / sq
    c = math.sqrt(p.rho - theta**2 / q)
    A = p.A_array
    acc = np.zeros(4)
    for (x1, x2, e1, e2), wt in zip(nodes, weights):
        w = np.array([sq * x1 + m, sq * x2 - m])
        h = np.array([a * x1 + c * e1, a * x2 + c * e2])
        t = (
            (1 - p.omega) / (1 + math.exp(-h[0] * (h[0] - h[1]))) + p.omega * A[0, 0],
            (1 - p.omega) / (1 + math.exp(-h[1] * (h[1] - h[0]))) + p.omega * A[1, 1],
        )

        def f(x, w=w, t=t):
            aa = 1 / (1 + math.exp(-x[0] * (x[0] - x[1])))
            bb = 1 / (1 + math.exp(-x[1] * (x[1] - x[0])))
            return ((x - w) ** 2).sum() / (2 * V) + p.s2 * ((aa - t[0]) ** 2 + (bb - t[1]) ** 2)

        z = np.array(K.zero_loss_point(*t))
        best = None
        for k in range(K.N_STARTS):
            s = np.array(K.start_point(k, w[0], w[1], z[0], z[1]))
            r = minimize(f, s, method="BFGS")
            if best is None or r.fun < best.fun:
                best = r
        g = (best.x - w) / V
        acc += wt * np.array([g @ g, g[0] - g[1], g @ np.array([e1, e2]), g @ np.array([x1, x2])])
    return alpha * acc[0], alpha * acc[1], -(alpha / sq) * acc[3]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curve", action="store_true")
    ap.add_argument("--alpha-c", action="store_true")
    ap.add_argument("--convergence", action="store_true")
    ap.add_argument("--solver", action="store_true")
    ap.add_argument("--subset", type=int, default=400, help="baseline nodes (default 400)")
    args = ap.parse_args()
    from theory import attention as A
    from theory.attention import _kernels as K
    from theory.attention import quadrature as Qd
    from theory.attention import state_equations as SE

    p = A.ERMParams(omega=0.3)
    print(f"# load average at start: {os.getloadavg()}")
    q, m, V, alpha = 0.0511, 0.2582, 11.37, 2.0  # positional fixed point at α = 2 (split rule)
    rule = A.make_rule("gh", 10)
    SE.channel(q, m, 0.0, V, p, A.make_rule("gh", 2))  # compile
    t0 = time.perf_counter()
    reps = 3
    for _ in range(reps):
        ch = SE.channel(q, m, 0.0, V, p, rule)
    t_nb = (time.perf_counter() - t0) / reps
    n = rule.n_points
    rng = np.random.default_rng(0)
    idx = rng.choice(n, size=min(args.subset, n), replace=False)
    t0 = time.perf_counter()
    baseline_map(rule.nodes[idx], rule.weights[idx], q, m, 0.0, V, p, alpha)
    t_bl = (time.perf_counter() - t0) / len(idx) * n
    print(f"map evaluation, gh 10^4 = {n} nodes, 9 starts per node:")
    print(f"  numba channel_sums : {t_nb:.4f} s")
    print(f"  scipy per node     : {t_bl:.1f} s (extrapolated from {len(idx)} nodes)")
    print(f"  ratio              : {t_bl / t_nb:.0f}x")
    # sanity: the two give the same hats on the subset (same starts, same global minimum)
    sub = Qd.Rule(
        "gh",
        0,
        np.ascontiguousarray(rule.nodes[idx[:50]]),
        np.ascontiguousarray(rule.weights[idx[:50]]),
    )
    chs = SE.channel(q, m, 0.0, V, p, sub)
    blq, blm, blV = baseline_map(sub.nodes, sub.weights, q, m, 0.0, V, p, alpha)
    w = sub.weights.sum()
    print(f"  check on 50 nodes: qhat numba {alpha * chs['g2']:.10f} scipy {blq / w:.10f}")
    _ = ch, K

    def timed(fn):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        return out, time.perf_counter() - t0, time.process_time() - c0

    for b in ("positional", "semantic"):
        r, dt, cpu = timed(lambda b=b: A.fixed_point(2.0, p, b))
        print(
            f"fixed point {b:10s} α=2 ω=0.3 (split {Qd.SPLIT_DEFAULT}): {dt:.2f} s wall "
            f"({cpu:.2f} s cpu), {r.iterations} map evaluations, status {r.status}, "
            f"q={r.q:.7f} m={r.m:.7f} θ={r.theta:.7f} V={r.V:.6f} ε_t={r.eps_t:.8f} "
            f"ε_g={r.eps_g:.8f}"
        )
    if args.curve:
        res, dt, cpu = timed(
            lambda: A.curve(np.linspace(0.5, 4.0, 20), p, ("semantic", "positional"))
        )
        ok = sum(r.converged for r in res)
        print(
            f"20-point curve (α 0.5..4), both branches: {dt:.1f} s wall ({cpu:.1f} s cpu), "
            f"{ok}/{len(res)} converged (the semantic branch does not exist at the smallest α)"
        )
    if args.alpha_c:
        res, dt, cpu = timed(lambda: A.phase_diagram(np.linspace(0.1, 0.5, 9), p))
        rows = res.rows()
        print(f"alpha_c(omega), alpha_l(omega) for 9 omegas: {dt:.1f} s wall ({cpu:.1f} s cpu)")
        for r in rows:
            print(
                f"  ω={r['omega']:.2f} α_c={r['alpha_c']:.5f} α_l={r['alpha_l']:.5f} "
                f"({r['alpha_l_branch']}) {r['status']}"
            )
    if args.convergence:
        rules = [
            ("default", A.make_rule()),
            ("trap h=0.45, 20/24/4", A.make_rule("split", h=0.45, n_r=20, n_phi=24)),
            ("trap h=0.35, 24/32/6", A.make_rule("split", h=0.35, n_r=24, n_phi=32, n_arc=6)),
            ("old default: GH 10, 16/24/4", A.make_rule("split", 10, n_r=16, n_phi=24)),
        ]
        keys = ("q", "m", "theta", "V", "eps_t", "eps_g")
        for a in (2.0, 1.25):
            for b in ("positional", "semantic"):
                res = {name: A.fixed_point(a, p, b, rule=rl, tol=1e-8) for name, rl in rules}
                ref = res["trap h=0.35, 24/32/6"]
                print(
                    f"α={a} {b}: reference (finest) "
                    + " ".join(f"{k}={getattr(ref, k):.8g}" for k in keys)
                )
                for name, r in res.items():
                    rel = [
                        abs(getattr(r, k) - getattr(ref, k)) / max(abs(getattr(ref, k)), 1e-30)
                        for k in keys
                        if getattr(ref, k) != 0
                    ]
                    print(
                        f"   {name:28s} max rel. diff {max(rel):.1e}  "
                        + " ".join(f"{k}={getattr(r, k):.8g}" for k in keys)
                    )
    if args.solver:
        solver_study(p)
    print(f"# load average at end: {os.getloadavg()}")


def _fd_jacobian(p, rule, keys, x0, alpha=2.0, h=1e-4):
    """Jacobian of G(x) = (F(x) - x) / x0 (the state-equation map at α on ``rule``, variables
    ``keys``) by forward differences with relative step h."""

    from theory.attention import state_equations as SE

    def G(x):
        o = dict(dict(m=0.0, theta=0.0), q=x[0], V=x[1], **{keys[2]: x[2]})
        new = SE.state_map(alpha, o, p, rule)[0]
        return (np.array([abs(new[k]) for k in keys]) - x) / x0

    g0 = G(x0)
    cols = []
    for j in range(len(x0)):
        x = x0.copy()
        x[j] *= 1 + h
        cols.append((G(x) - g0) / h)
    return np.array(cols).T


def solver_study(p):
    """Item 4 of the module docstring."""
    from theory import attention as A
    from theory.attention import quadrature as Qd
    from theory.attention import state_equations as SE

    acc, cheap = A.make_rule(), Qd.coarse_rule()
    print("cheap-rule fixed point minus accurate one, relative (positional branch, tol 1e-8):")
    for a in np.linspace(1.6, 2.4, 5):
        ra, rc = (
            A.fixed_point(a, p, "positional", rule=rl, coarse=False, tol=1e-8)
            for rl in (acc, cheap)
        )
        print(
            f"  α={a:.1f}: q {rc.q / ra.q - 1:+.1e}  m {rc.m / ra.m - 1:+.1e}  "
            f"V {rc.V / ra.V - 1:+.1e}"
        )
    for b, keys in (("positional", ("q", "V", "m")), ("semantic", ("q", "V", "theta"))):
        r = A.fixed_point(2.0, p, b, tol=1e-8)
        x0 = np.array([getattr(r, k) for k in keys])
        Ja, Jc = (_fd_jacobian(p, rl, keys, x0) for rl in (acc, cheap))
        kappa = max(abs(np.linalg.eigvals(np.linalg.solve(Jc, Ja - Jc))))
        print(f"contraction factor at the {b} fixed point, α = 2: {kappa:.4f}")
    # every channel evaluation goes through quadrature.integrate_channel: count them by rule
    counts = {}
    orig = SE.integrate_channel

    def counting(rule, *args, **kw):
        key = "accurate" if rule.n_points == acc.n_points else "cheap"
        counts[key] = counts.get(key, 0) + 1
        return orig(rule, *args, **kw)

    SE.integrate_channel = counting
    try:
        A.curve(np.linspace(0.5, 4.0, 20), p)
    finally:
        SE.integrate_channel = orig
    print(f"20-point curve map evaluations: {counts}")


if __name__ == "__main__":
    main()
