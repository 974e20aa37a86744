"""Speed and convergence of the SGD theory (theory.ssi: phase diagram, tables, ODE).

    python benchmarks/bench_sgd_theory.py           # full (includes slow baselines, ~2-4 min)
    python benchmarks/bench_sgd_theory.py --quick   # no baselines

Prints:
1. the 200 x 200 phase diagram of the positional-semantic model (exact 2-D criteria + Brent
   boundaries on 31 values of a) against the baseline of classifying each grid point with
   direct 4-D Gauss-Hermite derivatives (n = 28 per axis, which is still ~1e-3 off, see the
   convergence table), timed on one point and extrapolated to the grid;
2. the node convergence of the exact criteria at (a, omega) = (1, 0.67);
3. ODE trajectories to convergence (hermite engine: tied network; attention with PE; the
   positional-semantic "ps" engine) against the same ODE driven by the direct 4-D quadrature
   engine (scrambled Sobol 2^16 points for the relu network, tensor GH 16^4 for attention).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from theory import ssi
from theory.ssi.phase_diagram import _blocks


def _t(fn, *a, **k):
    t0 = time.perf_counter()
    out = fn(*a, **k)
    return time.perf_counter() - t0, out


def bench_phase(quick: bool):
    print("## 1. phase diagram 200 x 200 (a in [0.7, 1], omega in [0.4, 1])")
    _blocks.cache_clear()
    ag, wg = np.linspace(0.7, 1.0, 200), np.linspace(0.4, 1.0, 200)
    tb, _ = _t(_blocks)
    tg, pdg = _t(ssi.phase_diagram, ag, wg)
    tbd, _ = _t(lambda: [ssi.boundaries(a) for a in np.linspace(0.7, 1.0, 31)])
    print(
        f"building blocks (2-D GH 200^2): {tb:.2f} s; grid classification: {tg:.3f} s; "
        f"boundaries on 31 a-values (Brent): {tbd:.2f} s; total {tb + tg + tbd:.2f} s"
    )
    counts = {n: int(np.sum(pdg.region == i)) for i, n in enumerate(ssi.REGIONS)}
    print("region counts:", counts)
    if not quick:
        model = ssi.ps_model(1.0, 0.67, engine="quad", n=28)
        t1, _ = _t(
            lambda: (
                model.hessian(0.0, 0.0),
                model.grad(1.0, 0.0),
                model.grad(0.0, 1.0),
                model.risk(1.0, 0.0),
                model.risk(0.0, 1.0),
            )
        )
        # + the m-curvature at (1,0) and e-curvature at (0,1): 4 more gradients
        t2, _ = _t(
            lambda: [
                model.grad(1.0, 1e-4),
                model.grad(1.0, -1e-4),
                model.grad(1e-4, 1.0),
                model.grad(-1e-4, 1.0),
            ]
        )
        per_point = t1 + t2
        print(
            f"baseline: direct 4-D GH (28^4 nodes) criteria at one point {per_point:.1f} s -> "
            f"x 40000 points = {per_point * 40000 / 3600:.0f} h (extrapolated); speed-up "
            f"{per_point * 40000 / (tb + tg):.0f}x"
        )


def bench_convergence():
    print("\n## 2. node convergence of the exact criteria at (a, omega) = (1, 0.67)")
    keys = ("Ree00", "Rmm00", "Rm01", "Ree01", "Re10", "Rmm10", "dR_pos_minus_sem")
    print("| nodes/axis | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for n in (50, 100, 150, 200, 300):
        c = ssi.pd_criteria(1.0, 0.67, n)
        print(f"| {n} | " + " | ".join(f"{float(getattr(c, k)):.10f}" for k in keys) + " |")
    b = ssi.boundaries(1.0).row()
    print("boundaries at a = 1:", {k: round(v, 10) for k, v in b.items() if k.startswith("omega")})


def bench_tables():
    ssi.ps_tables.cache_clear()
    t_build, _ = _t(ssi.ps_tables)
    ssi.ps_tables.cache_clear()
    t_load, _ = _t(ssi.ps_tables)
    print(
        f"\npositional-semantic Mehler/Chebyshev tables: build {t_build:.1f} s, load from the "
        f"disk cache {t_load:.2f} s"
    )


def bench_ode(quick: bool):
    print("\n## 3. ODE trajectory to convergence (d = 1000, log-spaced output, 200 points)")
    cases = [
        (
            "tied relu, He2(z1)+He2(z2), lr 0.05",
            lambda: ssi.TiedNetwork("He2(z1)+He2(z2)", 2, "relu"),
            0.05,
            None,
        ),
        # smooth activation for the baseline: with relu the quadrature right-hand side is
        # piecewise constant in m (nodes crossing the kink) and the stiff solver crawls
        (
            "tied he2, He2(z1)+He2(z2), lr 0.01",
            lambda: ssi.TiedNetwork("He2(z1)+He2(z2)", 2, "he2"),
            0.01,
            lambda: ssi.TiedNetwork(
                "He2(z1)+He2(z2)", 2, "he2", engine="quad", method="qmc", n=2**16
            ),
        ),
        (
            "untied relu, L=4, sum He2/sqrt2, lr 0.05",
            lambda: ssi.UntiedNetwork("(He2(z1)+He2(z2)+He2(z3)+He2(z4))/sqrt(2)", 4, "relu"),
            0.05,
            None,
        ),
        (
            "attention Tr/sqrtL, P1=-P2, 4/3+He4(z1)+2He4(z2), lr 0.01",
            lambda: ssi.AttentionModel(
                "4/3 + He4(z1) + 2*He4(z2)", 2, pe="opposite", reduction="trace", trace_norm="sqrtL"
            ),
            0.01,
            None,
        ),
        (
            "positional-semantic attention a=1 omega=0.67, lr 0.05",
            lambda: ssi.ps_model(1.0, 0.67),
            0.05,
            lambda: ssi.ps_model(1.0, 0.67, engine="quad", n=16),
        ),
    ]
    print(
        "| case | engine | build s | ODE s | rhs calls | steps_escape | final (e, m) | "
        "baseline: direct 4-D quadrature (QMC 2^16 / GH 16^4) s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, mk, lr, base in cases:
        tb, model = _t(mk)
        t_first, res = _t(ssi.integrate_ode, model, lr=lr, d=1000)
        t_second, res = _t(ssi.integrate_ode, model, lr=lr, d=1000)
        bl = ""
        if base is not None and not quick:
            bm = base()
            tbl, rb = _t(ssi.integrate_ode, bm, lr=lr, d=1000)
            bl = f"{tbl:.1f} (steps_escape {rb.steps_escape})"
        fe = res.final_e if np.ndim(res.final_e) == 0 else res.final_e
        print(
            f"| {name} | {model.engine} | {tb:.2f} | {t_first:.2f} (first), {t_second:.2f} | "
            f"{res.metadata['n_rhs']} | {res.steps_escape} | "
            f"({fe:.4f}, {res.final_m:.4f}) {res.minimum} | {bl} |"
        )


def main():
    import os
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="skip the slow baselines")
    args = p.parse_args()
    # measure the table builds honestly: a fresh, empty disk cache
    os.environ["THEORY_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_sgd_theory_")
    bench_phase(args.quick)
    bench_convergence()
    bench_tables()
    bench_ode(args.quick)


if __name__ == "__main__":
    main()
