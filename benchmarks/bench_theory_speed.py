"""CPU of the two replica-theory hot spots of the full reproduction, before/after routes.

    NUMBA_NUM_THREADS=1 python benchmarks/bench_theory_speed.py

1. the rank-2 channel (erm-rank2: 4 x 2^11 QMC nodes at the mixed start), prox Newton with the
   analytic Hessian (``prox_batch``) against the central-difference one (``prox_batch_fd``);
2. the L = 2 split-rule channel (erm-phase-diagram-otherA: A = [[0.3, 0.7], [0.8, 0.2]],
   ω = 0.14, default rule) at a semantic point (m = 0), with and without the η → -η symmetry.

CPU seconds (time.process_time) per channel evaluation, and the largest difference of the sums.
Measured 2026-12-06, 1 thread: (1) 1.31 s -> 0.60 s (2.2x; 1.60 -> 0.73 s from a cold start),
sums equal to 1e-12; (2) 2.07 s -> 1.22 s (1.7x; 2.24 -> 1.14 s in another run), sums within
4e-9 relative.
"""

from __future__ import annotations

import time

import numpy as np


def rank2_channel():
    from theory.attention.figures.rank2 import PARAMS2, mixed_init
    from theory.attention.general import _kernels as K
    from theory.attention.general import state_equations as gs
    from theory.attention.general.quadrature import make_nodes

    nodes = make_nodes(PARAMS2, 2**11, 4, "qmc", 0)
    o = mixed_init()
    o["theta"] = np.array([[0.06], [0.0]])
    out = {}
    kern = gs._K
    try:
        for name in ("prox_batch_fd", "prox_batch"):
            gs._K = type("K", (), {"prox_batch": getattr(K, name)})
            ch = gs.channel(o, PARAMS2, nodes)  # compile, and the warm start
            c = time.process_time()
            ch = gs.channel(o, PARAMS2, nodes, warm=ch["x"])
            out[name] = (time.process_time() - c, ch)
    finally:
        gs._K = kern
    (ta, a), (tb, b) = out["prox_batch_fd"], out["prox_batch"]
    d = max(float(np.abs(a[k] - b[k]).max()) for k in ("gg", "g", "geta", "gxi", "M", "eps_g"))
    print(
        f"rank-2 channel: central differences {ta:.2f} s, analytic Hessian {tb:.2f} s; "
        f"max diff {d:.1e}"
    )


def other_a_channel():
    from theory.attention import state_equations as se
    from theory.attention.figures.simulation import PARAMS
    from theory.attention.quadrature import make_rule

    p = PARAMS.replace(A=((0.3, 0.7), (0.8, 0.2)), omega=0.14)
    rule = make_rule()
    pt = (0.1148, 0.0, 0.1582, 12.67)
    se.channel(*pt, p, rule)
    out = {}
    for sym in (False, True):
        c = time.process_time()
        ch = se.channel(*pt, p, rule, symmetry=sym)
        out[sym] = (time.process_time() - c, ch)
    keys = ("g2", "geta", "gxi", "M", "eps_g")
    d = max(abs(out[True][1][k] / out[False][1][k] - 1) for k in keys)
    print(
        f"other-A semantic channel: full η grid {out[False][0]:.2f} s, "
        f"η -> -η {out[True][0]:.2f} s; max rel diff {d:.1e}"
    )


if __name__ == "__main__":
    rank2_channel()
    other_a_channel()
