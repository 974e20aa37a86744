"""Small ω against the replica theory (docs/attention.md §7): does the finite-d minimiser of each
initialisation approach its replica fixed point as d grows, and is the θ = 0 sector replica
symmetric?

``FIGURES`` (the ``theory reproduce`` hook): ``"erm-small-omega"``.

At α = 1.005, ω = 0.14 -- a point of the published heat maps where a single seed at d = 1000
seemed to disagree with the theory -- for the reference A and for A = [[0.3, 0.7], [0.8, 0.2]]:

* simulation: :func:`~theory.attention.figures.simulation.run_sims` (L-BFGS from Q = Q* and
  Q = 1_d/√d, ε_g on 4000 fresh samples) on a scan in d, kept in ``erm-sims.jsonl``;
* theory: the semantic and positional fixed points
  (:func:`~theory.attention.figures.simulation.branch_fixed_points`; for the other A the
  positional start collapses onto the trivial point), kept in ``erm-theory.jsonl``;
* replica-symmetry check: :func:`theory.attention.general.rs_check` -- L-BFGS restarts on one data
  set, restricted to the positional sector (θ ≡ 0) at the general model's positional fixed point
  (its m from a cheap QMC rule: the check only needs the sector), RS trusted when the restarts'
  mutual overlap q_ab/q_aa >= 1 - 1/√d.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from theory.attention.figures import finish_figure
from theory.attention.figures.simulation import (
    INIT_PAIR,
    PARAMS,
    SIM_STORE,
    THEORY_STORE,
    branch_fixed_points,
    figure_rule,
    run_sims,
)
from theory.plotting import reproduces, use_agg
from theory.store import Store

ALPHA, OMEGA = 1.005, 0.14
#: the two A matrices: the reference one and the published alternative
CASES = (("reference A", PARAMS.A), ("A = [[0.3, 0.7], [0.8, 0.2]]", ((0.3, 0.7), (0.8, 0.2))))
#: full mode: d and seeds per d (~7 CPU-min for both A: the d = 4000 runs dominate)
FULL_SEEDS = {250: 16, 500: 16, 1000: 8, 2000: 8, 4000: 4}
QUICK_SEEDS = {100: 4, 200: 4, 400: 2}
FIELDS = (
    ("m", r"$|m|$"),
    ("theta_over_sigma2", r"$|\theta|/\sigma^2$"),
    ("eps_t", r"$\varepsilon_t$"),
    ("eps_g", r"$\varepsilon_g$"),
)
#: RS-check dimensions (full, quick) and QMC nodes of the general fixed point giving the sector
RS_D = {False: (400, 800), True: (400,)}
RS_NODES = dict(n=2**10, n_rep=2)


def rs_rows(params, ds, *, store: Store) -> list[dict]:
    """:func:`theory.attention.general.rs_check` of the positional sector at each d (rows, kept
    in ``store``)."""
    from theory.attention import general as pg

    gp = pg.GeneralParams(omega=params.omega, A=params.A, sigma=params.sigma, lam=params.lam)
    rows, fp = [], None
    for d in ds:
        key = dict(kind="rs_check", alpha=ALPHA, omega=params.omega, d=int(d), sector="positional")
        key.update(A=[list(map(float, r)) for r in params.A], sigma=params.sigma, lam=params.lam)
        key.update(RS_NODES)
        row = store.get(key)
        if row is None:
            if fp is None:  # the sector's fixed point does not depend on d: solved once
                fp = pg.fixed_point(ALPHA, gp, branch="positional", **RS_NODES)
            c = pg.rs_check(ALPHA, fp, gp, "positional", d=int(d))
            row = store.put(
                key,
                dict(
                    d=int(d),
                    m=float(np.ravel(fp.m)[0]),
                    fp_branch=fp.branch,
                    rs_stable=c.rs_stable,
                    overlap_ratio=c.overlap_ratio,
                    tolerance=c.tolerance,
                    eps_t=list(c.eps_t),
                    message=c.message,
                ),
            )
        rows.append(row)
    return rows


@reproduces(
    "beyond",
    "App. (other A) / Fig. 3 at small omega",
    "alpha = 1.005, omega = 0.14, both A: the L-BFGS minimisers of both inits on a scan in d "
    "against the semantic, positional and trivial fixed points, and the replica-symmetry check "
    "of the theta = 0 sector (restarts on one data set)",
    ["erm-small-omega.png"],
    cost=225,
)
def fig_small_omega(out_dir: Path, quick: bool) -> dict:
    from theory.attention.figures.heatmap import legend_below

    use_agg()
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    seeds = QUICK_SEEDS if quick else FULL_SEEDS
    ds = sorted(seeds)
    rule = figure_rule(quick)
    th_store = Store(out_dir / THEORY_STORE)
    fig, axes = plt.subplots(len(CASES), len(FIELDS), figsize=(17, 8.4), squeeze=False)
    colours = dict(semantic="C1", positional="C2")
    numbers = []
    for row_axes, (label, A) in zip(axes, CASES):
        params = PARAMS.replace(omega=OMEGA, A=A)
        pts = [(ALPHA, OMEGA, d, s, i) for d in ds for s in range(seeds[d]) for i in INIT_PAIR]
        runs = run_sims(pts, params, store=Store(out_dir / SIM_STORE), desc="erm-small-omega")
        runs = [r for r in runs if r["status"] == "converged"]
        th = branch_fixed_points(ALPHA, params, rule=rule, store=th_store, strict=False)
        rs = rs_rows(params, RS_D[quick], store=th_store)
        # the fixed point each start reaches (the positional start of the other A: trivial)
        lines = {
            "semantic": (th["semantic"], "semantic branch"),
            "positional": (
                th["positional"],
                "positional branch"
                if th["positional"]["branch"] == "positional"
                else "trivial point (no positional branch)",
            ),
        }
        for ax, (key, name) in zip(row_axes, FIELDS):
            for init, c in colours.items():
                xs = np.array(ds, float)
                vals = [[r[key] for r in runs if r["init"] == init and r["d"] == d] for d in ds]
                mu = np.array([np.mean(v) for v in vals])
                se = np.array([np.std(v, ddof=1) / math.sqrt(len(v)) for v in vals])
                ax.errorbar(
                    xs,
                    mu,
                    yerr=se,
                    fmt="o-",
                    ms=4,
                    lw=1,
                    capsize=3,
                    color=c,
                    label=f"{init} init: mean ± SE",
                )
                r, what = lines[init]
                ax.axhline(r[key], color=c, ls="--", lw=1.2, label=f"theory: {what}")
            ax.set_xscale("log")
            ax.set_xticks(ds, [str(d) for d in ds])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("d")
            ax.set_ylabel(name)
            ax.set_title(label, fontsize=9)
        legend_below(row_axes[0])
        rs_text = ", ".join(f"d={r['d']}: {r['overlap_ratio']:.3f}" for r in rs)
        row_axes[0].set_title(f"{label}\nRS check of theta = 0, q_ab/q_aa: {rs_text}", fontsize=8)
        big = max(ds)
        for init in INIT_PAIR:
            sub = [r for r in runs if r["init"] == init and r["d"] == big]
            r_th, what = lines[init]
            for key in ("m", "theta_over_sigma2", "eps_t", "eps_g"):
                v = np.array([r[key] for r in sub])
                numbers.append(
                    dict(
                        name=f"{key}, {init} init, d={big} ({label})",
                        value=float(v.mean()),
                        how=f"+- {v.std(ddof=1) / math.sqrt(v.size):.2g} (SE, {v.size} seeds), "
                        f"L-BFGS, alpha={ALPHA}, omega={OMEGA}; theory ({what}) {r_th[key]:.6g}",
                    )
                )
        for r in rs:
            numbers.append(
                dict(
                    name=f"RS check q_ab/q_aa, theta = 0 sector, d={r['d']} ({label})",
                    value=r["overlap_ratio"],
                    how=f"{r['message']}; sector m = {r['m']:.4g} (general model, QMC "
                    f"{RS_NODES['n']} x {RS_NODES['n_rep']}); RS trusted: {r['rs_stable']}",
                )
            )
    path = finish_figure(
        fig,
        out_dir / "erm-small-omega.png",
        rf"$\alpha$={ALPHA}, $\omega$={OMEGA}: L-BFGS minimisers from Q=Q* (semantic) and "
        rf"Q=1/$\sqrt{{d}}$ (positional) vs d ({', '.join(f'{d}: {seeds[d]}' for d in ds)} "
        "seeds), eps_g on 4000 samples; dashed: replica fixed points",
    )
    numbers.insert(
        0, dict(name="erm_small_omega_wall_s", value=time.perf_counter() - t0, how="wall")
    )
    return dict(files=[str(path)], numbers=numbers)


FIGURES = {"erm-small-omega": fig_small_omega}
