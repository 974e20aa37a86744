"""Theory-only figures of the ERM model (replica curves, phase diagram).

Overlays with simulations live in ``theory.attention.figures.simulation``.
``FIGURES`` exposes the headline
numbers for ``theory reproduce``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from theory._util import atomic_savefig, atomic_write_text
from theory.plotting import reproduces


def _title(p, extra=""):
    return (
        f"replica theory, σ={p.sigma:g}, λ={p.lam:g}, A=[[{p.A[0][0]:g},{p.A[0][1]:g}],"
        f"[{p.A[1][0]:g},{p.A[1][1]:g}]]" + (f", {extra}" if extra else "")
    )


def plot_curve(rows, p, path, *, alpha_c=None, alpha_l=None):
    """Three panels over α: Δε_t = ε_t(sem) - ε_t(pos); θ/σ² and m; ε_g of both branches, the
    global minimiser and the linear baseline."""
    from theory.plotting import use_agg

    use_agg()
    import matplotlib.pyplot as plt

    def series(kind, key):
        rs = sorted(
            (
                r
                for r in rows
                if r["kind"] == kind
                and r.get(key) is not None
                and r.get("status") in ("converged", "ok")
                and (kind in ("global", "baseline") or r.get("branch") == kind)
            ),
            key=lambda r: r["alpha"],
        )
        return np.array([r["alpha"] for r in rs]), np.array([r[key] for r in rs], dtype=float)

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    a_s, e_s = series("semantic", "eps_t")
    a_p, e_p = series("positional", "eps_t")
    common = sorted(set(a_s.tolist()) & set(a_p.tolist()))
    if common:
        ds = dict(zip(a_s.tolist(), e_s))
        dp = dict(zip(a_p.tolist(), e_p))
        ax[0].plot(common, [ds[a] - dp[a] for a in common], "k.-", label="theory")
    ax[0].axhline(0, color="grey", lw=0.8)
    ax[0].set_ylabel("Δε_t = ε_t(semantic) − ε_t(positional)")
    for kind, c in (("semantic", "C0"), ("positional", "C1")):
        a, th = series(kind, "theta_over_sigma2")
        ax[1].plot(a, th, ".-", color=c, label=f"θ/σ², {kind} (theory)")
        a, m = series(kind, "m")
        ax[1].plot(a, m, ".--", color=c, label=f"m, {kind} (theory)")
        a, eg = series(kind, "eps_g")
        ax[2].plot(a, eg, ".-", color=c, lw=1.0, alpha=0.6, label=f"ε_g, {kind} (theory)")
    a, eg = series("global", "eps_g")
    ax[2].plot(a, eg, "k-", lw=2, label="ε_g, global minimiser (theory)")
    a, eb = series("baseline", "eps_g")
    ax[2].plot(a, eb, "k:", label="ε_g, linear baseline (theory)")
    ax[1].set_ylabel("overlap (θ/σ², m)")
    ax[2].set_ylabel("test error ε_g (per d)")
    for x in ax:
        x.set_xlabel("sample ratio α = n/d")
        if alpha_c is not None and math.isfinite(alpha_c):
            x.axvline(alpha_c, color="r", lw=0.8, ls="--", label="α_c")
        if alpha_l is not None and math.isfinite(alpha_l):
            x.axvline(alpha_l, color="g", lw=0.8, ls="-.", label="α_l")
        x.legend(fontsize=7)
    fig.suptitle(_title(p, f"ω={p.omega:g}"))
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_phase_diagram(rows, p, path):
    from theory.plotting import use_agg

    use_agg()
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["omega"])
    w = np.array([r["omega"] for r in rows])
    ac = np.array([r["alpha_c"] if r["alpha_c"] is not None else np.nan for r in rows], float)
    al = np.array([r["alpha_l"] if r["alpha_l"] is not None else np.nan for r in rows], float)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(w, ac, "o-", color="C3", label="α_c(ω): ε_t(sem) = ε_t(pos) (theory)")
    ax.plot(w, al, "s--", color="C2", label="α_l(ω): ε_g = linear baseline (theory)")
    ax.set_xlabel("teacher mixing ω (0 semantic, 1 positional)")
    ax.set_ylabel("sample ratio α = n/d")
    ax.text(0.05, 0.92, "semantic global minimiser above α_c", transform=ax.transAxes, fontsize=8)
    ax.text(0.05, 0.05, "positional global minimiser below α_c", transform=ax.transAxes, fontsize=8)
    ax.legend(fontsize=8, loc="center left")
    ax.set_title(_title(p), fontsize=8)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


@reproduces(
    "cui2024",
    "Fig. 3 (theory lines)",
    "alpha_c(omega) and alpha_l(omega) from the replica fixed points, with eps_g^lin",
    ["erm-phase-diagram-theory.png", "erm-phase-diagram-theory.csv"],
    cost=790,
)
def _fig_phase(out_dir: Path, quick: bool):
    from theory import attention as A
    from theory.attention.figures.simulation import (
        PHASE_OMEGAS,
        THEORY_STORE,
        figure_rule,
        theory_phase_rows,
    )
    from theory.store import Store

    p = A.ERMParams()
    t0 = time.time()
    # quick: three ω on the cheap rule; full: the heat maps' eleven (0 to 0.5) on the default
    # rule (xtol 1e-4 in both: phase_diagram's default, which theory_phase_rows keeps)
    omegas = [0.1, 0.2, 0.3] if quick else list(PHASE_OMEGAS)
    rule, xtol = figure_rule(quick), 1e-4
    # adaptive bracket + Brent, continued in ω (each ω starts at the previous α_c), kept in the
    # folder's theory store: the same row as the heat maps' and the rank-2 map's lines (computed
    # once, by whichever piece claims it first), and a rerun (any code change) costs nothing
    out_dir = Path(out_dir)
    rows = theory_phase_rows(omegas, p, rule=rule, store=Store(out_dir / THEORY_STORE))
    files = [plot_phase_diagram(rows, p, out_dir / "erm-phase-diagram-theory.png")]
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    files.append(atomic_write_text(out_dir / "erm-phase-diagram-theory.csv", buf.getvalue()))
    how = (
        f"replica fixed points, split quadrature {rule.describe()}, adaptive bracket "
        f"continued in omega + Brent (xtol {xtol:g}); {time.time() - t0:.0f} s"
    )
    numbers = []
    for r in rows:
        numbers.append(dict(name=f"alpha_c(omega={r['omega']:.3g})", value=r["alpha_c"], how=how))
        numbers.append(dict(name=f"alpha_l(omega={r['omega']:.3g})", value=r["alpha_l"], how=how))
    numbers.append(
        dict(
            name="eps_g_lin(omega=0.3)",
            value=A.linear_baseline(p.replace(omega=0.3)),
            how="closed-form 2-D Gauss-Hermite (160^2 nodes) of Var softmax",
        )
    )
    return dict(files=[str(f) for f in files], numbers=numbers)


FIGURES = {"erm-phase-diagram-theory": _fig_phase}
