"""Figures of the attention model: theory lines over finite-d simulation points.

``FIGURES`` (the ``theory reproduce`` hook): ``"erm-omega03"``, ``"erm-phase-diagram"``,
``"erm-d-scaling"``; each ``fn(out_dir, quick) -> dict(files=[...], numbers=[...])``.

Simulations: :func:`theory.attention.simulate_gd` (L-BFGS on the same empirical risk as
gradient descent: it reaches the minimiser of the basin of the initialisation in ~50
iterations instead of several thousand GD steps).  The empirical global minimiser of a seed is
the initialisation (semantic Q = Q* or positional Q = 1_d/sqrt(d)) that ends with the lower
training loss (:func:`theory.attention.global_minimiser` with ``by`` = the seed's point).
Theory: the model's own :func:`~theory.attention.curve`, :func:`~theory.attention.transition`,
:func:`~theory.attention.phase_diagram`, :func:`~theory.attention.linear_baseline`; a theory
failure raises.  Every finished run and theory point is kept in a
:class:`theory.store.Store` in the output folder (``erm-sims.jsonl``, ``erm-theory.jsonl``), so
an interrupted full-size run resumes.  Quantities plotted in the theory's normalisation:
theta/sigma^2 = |Q*^T Q|/d, m/sigma^2.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from theory.attention.baseline import linear_baseline
from theory.attention.figures import finish_figure
from theory.attention.figures.linear import fig_linear_baseline
from theory.attention.finite_d.gd import simulate_gd
from theory.attention.finite_d.problem import make_problem
from theory.attention.params import ERMParams
from theory.attention.phases import (
    curve,
    global_minimiser,
    is_candidate,
    phase_diagram,
    transition,
)
from theory.attention.quadrature import coarse_rule, make_rule
from theory.attention.solver import fixed_point
from theory.plotting import mean_and_sem, reproduces, use_agg
from theory.solve import find_root
from theory.store import Store, each_once, point_digest

#: the figures' model (σ = 0.5, λ = 0.01, A = [[0.6, 0.4], [0.4, 0.6]])
PARAMS = ERMParams()
SIM_STORE = "erm-sims.jsonl"
INIT_PAIR = ("semantic", "positional")
THEORY_STORE = "erm-theory.jsonl"


# --------------------------------------------------------------------------- simulations


def run_sims(
    points,
    params: ERMParams = PARAMS,
    *,
    method: str = "lbfgs",
    store: Store | None = None,
    n_test: int = 4000,
    steps: int = 5000,
    progress: bool = True,
    desc: str = "ERM simulations",
) -> list[dict]:
    """``simulate_gd`` at every ``(alpha, omega, d, seed, init)`` of ``points`` (the other
    parameters from ``params``); one row (the result's fields) per point, kept in ``store``.
    ``steps``: the iteration cap (5000: the authors' GD protocol; L-BFGS stops far earlier, at
    RMS gradient 1e-7)."""
    from tqdm import tqdm

    store = Store(None) if store is None else store
    points = list(points)
    rows, problems = [], {}
    for alpha, omega, d, seed, init in tqdm(
        points, desc=desc, leave=False, **({} if progress else {"disable": True})
    ):
        p = params.replace(omega=float(omega))
        key = dict(
            alpha=alpha,
            omega=omega,
            d=d,
            seed=seed,
            init=init,
            method=method,
            sigma=p.sigma,
            lam=p.lam,
        )
        if method != "lbfgs":
            key["steps"] = int(steps)
        if p.A != PARAMS.A:
            key["A"] = [list(map(float, r)) for r in p.A]
        row = store.get(key)
        if row is not None and row.get("n_test", n_test) != n_test:
            # the run of another figure with another test set (erm-omega03's 4000 samples where
            # the heat map draws 1000): eps_g carries its test set's fluctuation, which one
            # figure must share across its cells (else a row of the heat map stands out)
            key = dict(key, n_test=int(n_test))
            row = store.get(key)
        if row is None:
            pk = (alpha, omega, d, seed)
            if pk not in problems:
                problems.clear()  # keep one data set in memory
                problems[pk] = make_problem(alpha, p, d, seed, n_test=n_test)
            r = simulate_gd(
                alpha,
                init=init,
                method=method,
                problem=problems[pk],
                tol=1e-7 if method == "lbfgs" else 1e-6,
                steps=steps,
            )
            row = store.put(key, dict(r.row(), method=method))
        rows.append(row)
    return rows


def delta_eps_t_rows(rows: list[dict]) -> list[dict]:
    """Per (alpha, omega, d, seed) with both inits: the global minimiser's row with
    ``delta_eps_t`` = eps_t(semantic init) - eps_t(positional init) and ``winner``."""
    by = ("alpha", "omega", "d", "seed")
    pair = {}
    for r in rows:
        pair.setdefault(tuple(r[k] for k in by), {})[r["init"]] = r
    out = []
    for best in global_minimiser(rows, by=by):
        g = pair[tuple(best[k] for k in by)]
        if "semantic" in g and "positional" in g:
            out.append(
                dict(
                    best,
                    delta_eps_t=g["semantic"]["eps_t"] - g["positional"]["eps_t"],
                    winner=best["init"],
                )
            )
    return out


def simulated_grid(
    alphas,
    omegas,
    d,
    seeds,
    *,
    params: ERMParams = PARAMS,
    method: str = "lbfgs",
    store_path=None,
    n_test: int = 1000,
    progress: bool = True,
) -> dict:
    """Both inits at every (ω, α) of the grid and every seed; per cell the seed mean and its
    standard error (sem = 0 for one seed; NaN where no seed has both inits converged).

    Returns arrays of shape ``(len(omegas), len(alphas))``: ``delta_eps_t`` (ε_t(semantic
    init) − ε_t(positional init); negative = the semantic minimiser has the lower training
    loss) and ``eps_g`` (the empirical global minimiser's), each with ``<name>_err``; and
    ``n_failed``, the runs that did not converge (left out).  ``store_path``: a ``.jsonl``
    :class:`~theory.store.Store` of the runs (resumable)."""
    seeds = list(range(int(seeds))) if np.isscalar(seeds) else list(seeds)
    pts = [
        (float(a), float(w), int(d), s, init)
        for w in omegas
        for a in alphas
        for s in seeds
        for init in ("positional", "semantic")
    ]
    rows = run_sims(
        pts,
        params,
        method=method,
        store=Store(store_path),
        n_test=n_test,
        progress=progress,
        desc="(alpha, omega) grid",
    )
    ok = [r for r in rows if r["status"] == "converged"]
    gm = delta_eps_t_rows(ok)
    shape = (len(omegas), len(alphas))
    out = dict(n_failed=len(rows) - len(ok))
    for name in ("delta_eps_t", "eps_g"):
        mean, sem = np.full(shape, np.nan), np.zeros(shape)
        for i, w in enumerate(omegas):
            for j, a in enumerate(alphas):
                v = [
                    r[name]
                    for r in gm
                    if math.isclose(r["omega"], w) and math.isclose(r["alpha"], a)
                ]
                if v:
                    mean[i, j] = np.mean(v)
                    sem[i, j] = np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
        out[name], out[f"{name}_err"] = mean, sem
    return out


def simulated_delta_eps_t(alphas, omegas, d, seeds, **kw) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, sem)`` of the simulated Δε_t on the (omega, alpha) grid (:func:`simulated_grid`,
    same keywords): the heat map of the phase diagram."""
    g = simulated_grid(alphas, omegas, d, seeds, **kw)
    return g["delta_eps_t"], g["delta_eps_t_err"]


# --------------------------------------------------------------------------- theory


def figure_rule(quick: bool):
    """The quadrature rule of a figure's theory: the cheap rule in quick mode (its ε_g and
    overlaps within ~1e-3 relative of the default rule's, docs/numerics.md), the default rule
    in full mode."""
    return coarse_rule() if quick else make_rule()


def _theory_tag(params: ERMParams, rule) -> dict:
    tag = dict(omega=params.omega, sigma=params.sigma, lam=params.lam, rule=rule.describe())
    if params.A != PARAMS.A:
        tag["A"] = [list(map(float, r)) for r in params.A]
    return tag


def theory_curve(alphas, params: ERMParams, *, rule=None, store: Store | None = None) -> dict:
    """The semantic, positional and trivial fixed points along ``alphas``
    (:func:`~theory.attention.curve`, one row per point), their global minimiser (``global_``)
    and the linear baseline (``eps_g_lin``); the curves are kept in ``store``.

    The trivial point (m = θ = 0) exists at every α, so the global minimiser is defined where
    neither branch exists (below the positional branch's onset, or where a start flows to it)."""
    store = Store(None) if store is None else store
    rule = make_rule() if rule is None else rule
    alphas = [float(a) for a in alphas]
    rows = []
    for kind, branches in (("curve", ("semantic", "positional")), ("curve_trivial", ("trivial",))):
        key = dict(_theory_tag(params, rule), kind=kind, alphas=alphas)
        got = store.get(key)
        if got is None:
            got = store.put(key, dict(rows=curve(alphas, params, branches, rule=rule).rows()))
        rows += got["rows"]
    glob = global_minimiser([r for r in rows if is_candidate(r)])
    return dict(rows=rows, global_=glob, eps_g_lin=linear_baseline(params))


def theory_lines(alphas, params: ERMParams, *, rule=None, store: Store | None = None) -> dict:
    """:func:`theory_curve` and α_c, α_l (:func:`~theory.attention.transition`, kept in
    ``store``)."""
    store = Store(None) if store is None else store
    rule = make_rule() if rule is None else rule
    out = theory_curve(alphas, params, rule=rule, store=store)
    tkey = dict(_theory_tag(params, rule), kind="transition")
    tr = store.get(tkey)
    if tr is None:
        tr = store.put(tkey, transition(params, rule=rule).row())
    return dict(out, alpha_c=tr["alpha_c"], alpha_l=tr["alpha_l"], transition=tr)


def _delta(rows):
    """Δε_t = ε_t(semantic) - ε_t(positional) of the theory where both branches exist."""
    by = {}
    for r in rows:
        if r["init"] in ("semantic", "positional") and _on_branch(r):
            by.setdefault(r["alpha"], {})[r["init"]] = r["eps_t"]
    common = sorted(a for a, g in by.items() if len(g) == 2)
    return common, [by[a]["semantic"] - by[a]["positional"] for a in common]


def _interpolated_root(xs, ys, which="first"):
    """Zero (the first or the last) of the piecewise-linear interpolation of (xs, ys) over its
    finite points (None without a sign change)."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ok = np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    if len(xs) < 2:
        return None
    r = find_root(lambda a: float(np.interp(a, xs, ys)), xs, xtol=1e-12, which=which)
    return r.root if r.converged else None


# --------------------------------------------------------------------------- figures


def _sim_stats(rows, x, y):
    if not rows:
        return np.array([]), np.array([]), np.array([])
    return mean_and_sem(rows, x, y)


def _vlines(ax, th):
    for key, ls, name in (("alpha_c", "--", r"$\alpha_c$"), ("alpha_l", ":", r"$\alpha_l$")):
        if th.get(key) is not None:
            ax.axvline(th[key], color="k", ls=ls, lw=1, label=f"{name} = {th[key]:.3f} (theory)")


def semantic_branch_end(rows) -> float | None:
    """The lowest α of the theory rows (:func:`theory_lines`) at which the semantic fixed
    point converged on its branch (None if nowhere): where the computed semantic branch stops,
    to the resolution of the α grid."""
    ok = [r["alpha"] for r in rows if r["init"] == "semantic" and _on_branch(r)]
    return min(ok) if ok else None


def _on_branch(r) -> bool:
    return r["status"] == "converged" and r["branch"] == r["init"]


def gd_check(alpha, omega, d, seed, *, params: ERMParams = PARAMS, store=None) -> list[dict]:
    """The authors' protocol (plain GD, lr 0.15, 5000 steps) next to L-BFGS on the same
    instance, both inits: rows ``init, <field>_gd, <field>_lbfgs`` for eps_g, eps_t,
    theta_over_sigma2, m and the GD run's final RMS gradient."""
    from theory.attention.figures.published import GD_PROTOCOL

    out = []
    for init in ("positional", "semantic"):
        pt = [(float(alpha), float(omega), int(d), int(seed), init)]
        gd = run_sims(
            pt, params, method="gd", steps=GD_PROTOCOL["steps"], store=store, progress=False
        )[0]
        lb = run_sims(pt, params, store=store, progress=False)[0]
        row = dict(init=init, grad_rms_gd=gd["grad_rms"])
        for k in ("eps_g", "eps_t", "theta_over_sigma2", "m"):
            row[f"{k}_gd"], row[f"{k}_lbfgs"] = gd[k], lb[k]
        out.append(row)
    return out


@reproduces(
    "cui2024",
    "Fig. 2",
    "Delta eps_t, overlaps and eps_g vs alpha at omega = 0.3 on the published alpha range "
    "(0.01 to 2, d = 1000): replica theory over the minimisers of gradient descent",
    ["erm-omega03.png"],
    cost=780,
)
def fig_omega03(out_dir: Path, quick: bool, *, omega=0.3) -> dict:
    from theory.attention.figures import published as pub
    from theory.attention.figures.heatmap import legend_below

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    a0, a1, na = pub.HEATMAP_ALPHAS
    if quick:
        d, seeds, alphas_sim = 200, [0, 1], list(np.linspace(a0, a1, 9))
        alphas_th = np.linspace(0.25, 2.0, 8)
    else:  # the published alphas, d and run count: 24 seeds (1200 L-BFGS runs at d = 1000,
        # ~0.35 CPU-s each at one BLAS thread), as the authors average 24 GD runs
        d, seeds, alphas_sim = 1000, list(range(24)), list(np.linspace(a0, a1, na))
        alphas_th = np.linspace(0.05, 2.0, 40)
    params = PARAMS.replace(omega=omega)
    sim_store, th_store = Store(out_dir / SIM_STORE), Store(out_dir / THEORY_STORE)
    th = theory_lines(alphas_th, params, rule=figure_rule(quick), store=th_store)
    pts = [
        (float(a), omega, d, s, init)
        for a in alphas_sim
        for s in seeds
        for init in ("positional", "semantic")
    ]
    rows = [
        r
        for r in run_sims(pts, params, store=sim_store, desc="erm-omega03")
        if r["status"] == "converged"
    ]
    gm = delta_eps_t_rows(rows)
    a_end = semantic_branch_end(th["rows"])
    check = gd_check(1.0, omega, d, 0, params=params, store=sim_store)
    gd_pub = {
        init: [r for r in pub.GD_OMEGA03 if r[1] == init] for init in ("positional", "semantic")
    }

    fig, axes = plt.subplots(1, 3, figsize=(15.5, 6.2))
    ms = dict(fmt="o", capsize=2, ms=4.5, elinewidth=1)

    def end_marker(ax):
        if a_end is not None:
            ax.axvspan(0, a_end, color="0.9", zorder=0, lw=0)
            ax.axvline(a_end, color="0.45", lw=1, ls="-.")

    ax = axes[0]
    da, dd = _delta(th["rows"])
    if da:
        ax.plot(da, dd, "C0-", lw=1.8, label="theory")
    xs, mu, se = _sim_stats(gm, "alpha", "delta_eps_t")
    ax.errorbar(xs, mu, yerr=se, color="C0", label=f"simulation (d={d}, {len(seeds)} seeds)", **ms)
    ax.axhline(0, color="gray", lw=0.8)
    _vlines(ax, th)
    end_marker(ax)
    ax.set_ylabel(r"$\Delta\varepsilon_t = \varepsilon_t^{sem} - \varepsilon_t^{pos}$")
    legend_below(ax)

    ax = axes[1]
    for branch, key, c, name in (
        ("semantic", "theta_over_sigma2", "C1", r"$\theta/\sigma^2$"),
        ("positional", "m", "C2", r"$m$"),
    ):
        ok = [r for r in th["rows"] if r["init"] == branch and _on_branch(r)]
        ax.plot(
            [r["alpha"] for r in ok],
            [r[key] for r in ok],
            "-",
            color=c,
            lw=1.5,
            label=f"{name}, {branch} branch (theory)",
        )
        sub = [r for r in rows if r["init"] == branch]
        xs, mu, se = _sim_stats(sub, "alpha", key)
        ax.errorbar(xs, mu, yerr=se, color=c, label=f"|{name}|, {branch} init (simulation)", **ms)
        ax.plot(
            [r[0] for r in gd_pub[branch]],
            [r[5] if key == "theta_over_sigma2" else r[4] for r in gd_pub[branch]],
            "D",
            mfc="none",
            color=c,
            ms=7,
            label=f"{name}, authors' GD (d=1000)",
        )
    _vlines(ax, th)
    end_marker(ax)
    ax.set_ylabel(r"overlap ($\theta/\sigma^2$ semantic, $m$ positional)")
    legend_below(ax)

    ax = axes[2]
    for branch, c in (("positional", "C2"), ("semantic", "C1")):
        ok = [r for r in th["rows"] if r["init"] == branch and _on_branch(r)]
        ax.plot(
            [r["alpha"] for r in ok],
            [r["eps_g"] for r in ok],
            "-",
            color=c,
            lw=1.2,
            alpha=0.7,
            label=f"{branch} branch (theory)",
        )
        ax.plot(
            [r[0] for r in gd_pub[branch]],
            [r[2] for r in gd_pub[branch]],
            "D",
            mfc="none",
            color=c,
            ms=7,
            label=f"{branch} init, authors' GD (d=1000)",
        )
    _draw_global(ax, th, "C3", "global minimiser (theory)", lw=2.2)
    ax.axhline(th["eps_g_lin"], color="C4", lw=1.5, label="linear baseline (theory)")
    xs, mu, se = _sim_stats(gm, "alpha", "eps_g")
    ax.errorbar(xs, mu, yerr=se, color="C3", label=f"global minimiser (simulation, d={d})", **ms)
    _vlines(ax, th)
    end_marker(ax)
    ax.set_ylabel(r"$\varepsilon_g = E\|f(X)-y(X)\|_F^2/(2d)$")
    legend_below(ax)
    for ax in axes:
        ax.set_xlim(0, alphas_sim[-1] * 1.02)
        ax.set_xlabel(r"$\alpha = n/d$")
    if a_end is not None:
        axes[0].annotate(
            "semantic branch (theory)\nnot found below\n" + rf"$\alpha$ = {a_end:.3g}",
            xy=(a_end, 0.97),
            xycoords=("data", "axes fraction"),
            xytext=(-4, 0),
            textcoords="offset points",
            ha="right",
            va="top",
            fontsize=7,
            color="0.3",
        )
    path = finish_figure(
        fig,
        out_dir / "erm-omega03.png",
        rf"positional vs semantic ERM, $\omega$={omega}, $\sigma$={params.sigma}, "
        rf"$\lambda$={params.lam}, A=[[.6,.4],[.4,.6]]; simulation: L-BFGS minimisers of L(Q) "
        rf"from Q=Q* and Q=1/$\sqrt{{d}}$, d={d}, {len(seeds)} seeds (bars: SE); "
        "diamonds: the authors' GD",
    )
    how = (
        f"L-BFGS (RMS gradient < 1e-7) on the empirical risk from Q=Q* and Q=1_d/sqrt(d), "
        f"d={d}, {len(seeds)} seeds, alpha = linspace({alphas_sim[0]:g}, {alphas_sim[-1]:g}, "
        f"{len(alphas_sim)})"
    )
    numbers = [
        dict(name="erm_omega03_wall_s", value=time.perf_counter() - t0, how="wall time"),
        dict(
            name="alpha_c(omega=0.3)",
            value=th["alpha_c"],
            how="theory: root of eps_t(sem)-eps_t(pos) by bracket + Brent (xtol 1e-4)",
        ),
        dict(
            name="alpha_l(omega=0.3)",
            value=th["alpha_l"],
            how="theory: global minimiser's eps_g crossing the baseline (root)",
        ),
        dict(
            name="semantic branch: lowest converged alpha (omega=0.3)",
            value=a_end if a_end is not None else math.nan,
            how=f"theory.attention.curve on alpha = linspace({alphas_th[0]:g}, "
            f"{alphas_th[-1]:g}, {len(alphas_th)}), semantic branch followed backward",
        ),
    ]
    for r in check:
        for k in ("eps_g", "theta_over_sigma2", "m", "eps_t"):
            numbers.append(
                dict(
                    name=f"GD - L-BFGS, {k}, {r['init']} init (alpha=1, d={d})",
                    value=r[f"{k}_gd"] - r[f"{k}_lbfgs"],
                    how="the authors' protocol (plain GD, lr 0.15, 5000 steps; final RMS "
                    f"gradient {r['grad_rms_gd']:.1e}) minus L-BFGS on the same instance "
                    f"(seed 0); L-BFGS value {r[f'{k}_lbfgs']:.6g}",
                )
            )
    sim_ac = _interpolated_root(*_sim_stats(gm, "alpha", "delta_eps_t")[:2], which="last")
    if sim_ac is not None:
        numbers.append(
            dict(
                name="alpha_c(omega=0.3) simulated",
                value=sim_ac,
                how="last zero of the seed-averaged simulated Delta eps_t, " + how,
            )
        )
    for a_pub in (1.005, 2.0):
        j = int(np.argmin(np.abs(xs - a_pub))) if len(xs) else None
        if j is not None and abs(xs[j] - a_pub) < 0.05:
            numbers.append(
                dict(
                    name=f"eps_g global minimiser (alpha={xs[j]:.4g}, omega=0.3) simulated",
                    value=mu[j],
                    how=f"+- {se[j]:.2g} (SE); " + how,
                )
            )
    return dict(files=[str(path)], numbers=numbers)


#: the ω of the replica α_c(ω) / α_l(ω) lines in full mode, one list for every figure that draws
#: them (the theory piece, the heat maps, the rank-2 map): one computation (~11 × 75 CPU-s) and
#: one row of the folder's theory store, shared through :func:`theory_phase_rows`
PHASE_OMEGAS = tuple(float(w) for w in np.round(np.arange(0.0, 0.501, 0.05), 3))


def theory_phase_rows(omegas, params: ERMParams = PARAMS, *, rule=None, store: Store | None = None):
    """Rows (omega, alpha_c, alpha_l, ...) of :func:`~theory.attention.phase_diagram` over
    ``omegas`` (continued in ω, default rule), kept in ``store``; a row whose α is not finite
    (no transition found) is kept with NaN.

    Processes sharing ``store``'s file (the pieces of a ``reproduce --workers`` pool) compute
    the lines once: the first to claim them does (:func:`theory.store.each_once`), the others
    wait for its row and read it."""
    store = Store(None) if store is None else store
    rule = make_rule() if rule is None else rule
    key = dict(
        kind="phase_diagram",
        rule=rule.describe(),
        omegas=[float(w) for w in omegas],
        sigma=params.sigma,
        lam=params.lam,
        A=[list(map(float, r)) for r in params.A],
    )
    got = store.get(key)
    if got is None:

        def compute(_):
            nonlocal got
            if store.path is not None:  # another process may have written the row meanwhile
                got = Store(store.path).get(key)
            if got is None:
                rows = phase_diagram([float(w) for w in omegas], params, rule=rule).rows()
                got = store.put(key, dict(rows=rows))

        if store.path is None:
            compute(None)
        else:
            lock = store.path.with_name(f"{store.path.stem}-phase-{point_digest(key)}")
            each_once([key], lambda _: lock, compute)
    return [
        {k: (math.nan if v is None and k.startswith("alpha") else v) for k, v in r.items()}
        for r in got["rows"]
    ]


@reproduces(
    "cui2024",
    "Fig. 3",
    "(alpha, omega) heat maps at d = 1000 on the published grid: Delta eps_t (GD minimisers) "
    "with alpha_c(omega), and eps_g^lin - eps_g with alpha_l(omega)",
    ["erm-phase-diagram.png"],
    cost=220,
)
def fig_phase_diagram(out_dir: Path, quick: bool) -> dict:
    from theory.attention.figures import published as pub

    omegas_th = [0.1, 0.3] if quick else list(PHASE_OMEGAS)
    return _phase_heatmaps(
        out_dir,
        quick,
        PARAMS,
        "erm-phase-diagram",
        omegas_th,
        dict(alpha_c=pub.ALPHA_C, alpha_l=pub.ALPHA_L),
    )


@reproduces(
    "cui2024",
    "App. (other A)",
    "the (alpha, omega) heat maps for A = [[0.3, 0.7], [0.8, 0.2]] at d = 1000 on the published "
    "grid, theory lines at a few omega (full mode only: the asymmetric-A theory is slow)",
    ["erm-phase-diagram-otherA.png"],
    cost=1740,
)
def fig_phase_diagram_other_a(out_dir: Path, quick: bool) -> dict:
    from theory.attention.figures import published as pub

    p = PARAMS.replace(A=((0.3, 0.7), (0.8, 0.2)))
    # the theory at the two ω of the authors' stored crossings (each transition searches the
    # semantic branch's fold, there being no positional branch: docs/attention.md §7)
    omegas_th = [] if quick else [0.14, 0.15]
    pubs = dict(alpha_c=pub.ALPHA_C_OTHER_A)
    return _phase_heatmaps(out_dir, quick, p, "erm-phase-diagram-otherA", omegas_th, pubs)


def _phase_heatmaps(out_dir, quick, params, stem, omegas_th, published) -> dict:
    """The two (α, ω) heat maps of ``params`` (A, σ, λ) with the theory lines at
    ``omegas_th`` and the ``published`` threshold lists ({"alpha_c": ((ω, α), ...), ...})."""
    from theory.attention.figures import published as pub
    from theory.attention.figures.heatmap import draw_heatmap, draw_threshold_lines, legend_below

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    a0, a1, na = pub.HEATMAP_ALPHAS
    if quick:  # same code path, a coarser grid at small d
        d, seeds = 100, [0]
        alphas = list(np.linspace(a0, a1, 9))
        omegas = [0.1, 0.2, 0.3, 0.4, 0.5]
    else:  # the published grid and d; one seed (1250 L-BFGS runs at d = 1000, ~4 CPU-min)
        d, seeds = 1000, [0]
        alphas, omegas = list(np.linspace(a0, a1, na)), list(pub.HEATMAP_OMEGAS)
    grid = simulated_grid(alphas, omegas, d, seeds, params=params, store_path=out_dir / SIM_STORE)
    t_th = time.perf_counter()
    rows_th = (
        theory_phase_rows(
            omegas_th, params, rule=figure_rule(quick), store=Store(out_dir / THEORY_STORE)
        )
        if omegas_th
        else []
    )
    theory_wall = time.perf_counter() - t_th
    eps_lin = np.array([linear_baseline(params.replace(omega=float(w))) for w in omegas])
    gain = eps_lin[:, None] - grid["eps_g"]

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.9))
    sims = f"d={d}, {len(seeds)} seed(s), L-BFGS minimisers from Q=Q* and Q=1/sqrt(d)"
    draw_heatmap(
        fig,
        axes[0],
        alphas,
        omegas,
        grid["delta_eps_t"],
        label=r"$\Delta\varepsilon_t = \varepsilon_t^{sem} - \varepsilon_t^{pos}$",
    )
    draw_threshold_lines(axes[0], rows_th, keys=("alpha_c",), published=published)
    axes[0].set_title(
        r"$\Delta\varepsilon_t$ (blue: semantic minimiser has the lower training loss)",
        fontsize=9,
    )
    draw_heatmap(
        fig,
        axes[1],
        alphas,
        omegas,
        gain,
        label=r"$\varepsilon_g^{lin} - \varepsilon_g$ (global minimiser)",
        cmap="PuOr_r",
    )
    draw_threshold_lines(axes[1], rows_th, keys=("alpha_l",), published=published)
    axes[1].set_title(
        r"$\varepsilon_g^{lin}$ (closed form, $d\to\infty$) $-$ $\varepsilon_g$ "
        "(orange: attention beats the linear baseline)",
        fontsize=9,
    )
    for ax in axes:
        ax.set_xlabel(r"sample ratio $\alpha = n/d$")
        ax.set_ylabel(r"teacher mixing $\omega$")
        legend_below(ax)
    path = finish_figure(
        fig,
        out_dir / f"{stem}.png",
        rf"ERM phase diagram, $\sigma$={params.sigma}, $\lambda$={params.lam}, "
        f"A={[list(r) for r in params.A]}\nsimulation: {sims}; lines: replica theory"
        + (f" at omega = {omegas_th}" if 0 < len(omegas_th) < 5 else "")
        + ("" if omegas_th else " (none in quick mode: the asymmetric-A theory is slow)"),
    )
    how = f"simulated on the grid alpha {alphas[0]:g}..{alphas[-1]:g} ({len(alphas)}), {sims}"
    numbers = [
        dict(name=f"{stem}_wall_s", value=time.perf_counter() - t0, how="wall time"),
        dict(
            name=f"{stem}_theory_wall_s",
            value=theory_wall,
            how=f"theory lines at {len(omegas_th)} omegas (0 when cached)",
        ),
        dict(name=f"{stem}_failed_runs", value=grid["n_failed"], how=how),
    ]
    for w_show in (0.1, 0.2, 0.3, 0.4):
        i = int(np.argmin(np.abs(np.asarray(omegas) - w_show)))
        if not math.isclose(omegas[i], w_show):
            continue
        for nm, vals in (("alpha_c", grid["delta_eps_t"][i]), ("alpha_l", gain[i])):
            root = _interpolated_root(alphas, vals, which="last")
            if root is not None and root > alphas[1]:  # not the noise about 0 at alpha -> 0
                numbers.append(
                    dict(
                        name=f"{nm}(omega={w_show:.2f}) simulated",
                        value=root,
                        how="last zero on the alpha grid (linear interpolation) of "
                        + ("Delta eps_t; " if nm == "alpha_c" else "eps_g^lin - eps_g; ")
                        + how,
                    )
                )
    for r in rows_th:
        for nm in ("alpha_c", "alpha_l"):
            if math.isfinite(r[nm]):
                numbers.append(
                    dict(
                        name=f"{nm}(omega={r['omega']:.2f}) theory",
                        value=r[nm],
                        how="theory.attention.phase_diagram (bracket + Brent, default rule)",
                    )
                )
    return dict(files=[str(path)], numbers=numbers)


#: the appendix slices: (panel title, parameter name, values); the others at PARAMS, ω = 0.3
SLICES = (
    ("omega", (0.2, 0.3, 0.7)),
    ("sigma", (0.3, 0.5, 0.7)),
    ("lam", (0.1, 0.01, 0.001)),
)
_SYMBOL = dict(omega=r"\omega", sigma=r"\sigma", lam=r"\lambda")


def _draw_global(ax, th, color, label, scale=1.0, lw=1.6):
    """The theory's global-minimiser ε_g along α: one segment per run of consecutive α on one
    branch (ε_g jumps at α_c; the trivial point's segment joins the positional branch's at
    its continuous onset)."""
    runs = []
    for r in th["global_"]:
        if runs and runs[-1][-1]["branch"] == r["branch"]:
            runs[-1].append(r)
        else:
            runs.append([r])
    for i, seg in enumerate(runs):
        ax.plot(
            [r["alpha"] for r in seg],
            [r["eps_g"] / scale for r in seg],
            "-",
            color=color,
            lw=lw,
            label=label if i == 0 else None,
        )


@reproduces(
    "cui2024",
    "App. (eps_g slices)",
    "eps_g of the global minimiser vs alpha at omega in {0.2, 0.3, 0.7}, sigma in "
    "{0.3, 0.5, 0.7}, lambda in {0.1, 0.01, 0.001}: replica theory over GD minimisers",
    ["erm-slices.png"],
    cut="1 seed (no published count): the second seed's 450 L-BFGS runs at d = 1000 cost "
    "~160 CPU-s; with one seed the bars are the test-set error, not the spread over seeds",
    cost=1450,
)
def fig_slices(out_dir: Path, quick: bool) -> dict:
    from theory.attention.figures import published as pub
    from theory.attention.figures.heatmap import legend_below

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    a0, a1, na = pub.HEATMAP_ALPHAS
    if quick:
        d, seeds, alphas_sim = 100, [0], list(np.linspace(a0, a1, 6))
        alphas_th = [0.5, 1.25, 2.0]
    else:  # the published alphas and d; 1 seed (450 L-BFGS runs at d = 1000): the cut
        d, seeds, alphas_sim = 1000, [0], list(np.linspace(a0, a1, na))
        alphas_th = list(np.linspace(0.2, 2.0, 10))  # 9 curves: ~2.5 CPU-min each
    sim_store, th_store = Store(out_dir / SIM_STORE), Store(out_dir / THEORY_STORE)
    # one seed: the bar is the run's test-set error (n_test samples), not a spread over seeds
    bars = "SE over seeds" if len(seeds) > 1 else "test-set error of the one run"
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.6))
    numbers = []
    ms = dict(fmt="o", capsize=2, ms=4, elinewidth=1)
    for ax, (name, values) in zip(axes, SLICES):
        for c, v in zip(("C0", "C3", "C2"), values):
            p = PARAMS.replace(**{"omega": 0.3, name: v})
            th = theory_curve(alphas_th, p, rule=figure_rule(quick), store=th_store)
            scale = p.s2 if name == "sigma" else 1.0
            lab = rf"${_SYMBOL[name]}$ = {v:g}"
            _draw_global(ax, th, c, f"{lab}: theory", scale)
            ax.axhline(th["eps_g_lin"] / scale, color=c, lw=0.9, ls=":")
            pts = [
                (float(a), p.omega, d, s, init)
                for a in alphas_sim
                for s in seeds
                for init in ("positional", "semantic")
            ]
            rows = [
                r
                for r in run_sims(pts, p, store=sim_store, desc=f"erm-slices {name}={v:g}")
                if r["status"] == "converged"
            ]
            gm = [
                dict(r, eps_g=r["eps_g"] / scale, eps_g_err=r["eps_g_err"] / scale)
                for r in delta_eps_t_rows(rows)
            ]
            xs, mu, se = _sim_stats(gm, "alpha", "eps_g")
            ax.errorbar(xs, mu, yerr=se, color=c, label=f"{lab}: simulation", **ms)
            j = int(np.argmin(np.abs(xs - 2.0))) if len(xs) else None
            g2 = [r for r in th["global_"] if math.isclose(r["alpha"], alphas_th[-1])]
            if j is not None and g2:
                numbers.append(
                    dict(
                        name=f"eps_g global minimiser ({name}={v:g}, alpha={xs[j]:.3g}) "
                        "simulated / theory",
                        value=mu[j] / (g2[0]["eps_g"] / scale),
                        how=f"simulation {mu[j] * scale:.4g} +- {se[j] * scale:.2g} ({bars}; "
                        f"L-BFGS, d={d}, {len(seeds)} seed(s), both inits, lower eps_t), "
                        f"theory {g2[0]['eps_g']:.4g} (alpha={alphas_th[-1]:g})",
                    )
                )
        ax.set_xlim(0, alphas_sim[-1] * 1.02)
        ax.set_xlabel(r"$\alpha = n/d$")
        ax.set_ylabel(r"$\varepsilon_g/\sigma^2$" if name == "sigma" else r"$\varepsilon_g$")
        if name == "lam":
            ax.set_yscale("log")
        legend_below(ax)
        fixed = dict(omega="ω = 0.3" if name != "omega" else "", sigma="σ = 0.5", lam="λ = 0.01")
        rest = ", ".join(t for k, t in fixed.items() if k != name and t)
        ax.set_title(rf"${_SYMBOL[name]}$ varied ({rest}); dotted: linear baseline", fontsize=9)
    path = finish_figure(
        fig,
        out_dir / "erm-slices.png",
        rf"$\varepsilon_g$ of the global minimiser, A=[[.6,.4],[.4,.6]]: replica theory (lines) "
        rf"vs L-BFGS minimisers of L(Q) from Q=Q* and Q=1/$\sqrt{{d}}$, d={d}, {len(seeds)} "
        f"seed(s), the lower training loss of the two (bars: {bars})",
    )
    numbers.insert(0, dict(name="erm_slices_wall_s", value=time.perf_counter() - t0, how="wall"))
    return dict(files=[str(path)], numbers=numbers)


def branch_fixed_points(
    alpha, params: ERMParams, *, rule=None, store: Store | None = None, strict: bool = True
) -> dict:
    """The theory's semantic and positional fixed points at ``alpha`` (rows, by the branch each
    start asks for), kept in ``store``.

    A point that does not converge raises. So does one that converges on another branch, unless
    ``strict=False``: then the row of the point the start reached is returned (its ``branch``
    and ``message`` say where it went, e.g. the trivial point where the positional branch does
    not exist).
    """
    store = Store(None) if store is None else store
    rule = make_rule() if rule is None else rule
    out = {}
    for branch in ("semantic", "positional"):
        key = dict(_theory_tag(params, rule), kind="fixed_point", alpha=alpha, branch=branch)
        row = store.get(key)
        if row is None:
            row = store.put(key, fixed_point(alpha, params, branch, rule=rule).row())
        if row["status"] != "converged" or (strict and row["branch"] != branch):
            raise RuntimeError(
                f"the {branch} fixed point at alpha = {alpha} did not converge "
                f"on its branch: {row['status']} {row['branch']} {row['message']}"
            )
        out[branch] = row
    return out


@reproduces(
    "cui2024",
    "App. finite-size",
    "concentration at alpha = 1.5, omega = 0.3: theta, m and eps_g of every run vs d = 10..500 "
    "from both inits, their spread across runs and its fitted d-scaling, theory lines",
    ["erm-d-scaling.png"],
    cut="60 runs per (d, init), where the authors take up to 70: the other 10 per (d, init) "
    "would cost ~1/6 more (~100 CPU-s)",
    cost=115,
)
def fig_d_scaling(out_dir: Path, quick: bool, *, omega=0.3, alpha=1.5) -> dict:
    from theory.attention.figures.heatmap import legend_below
    from theory.attention.figures.stats import power_law_fit, spread

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    ds_pub = [10, 15, 23, 36, 56, 87, 135, 209, 323, 500]  # the authors' d
    if quick:
        ds, seeds = [10, 23, 56, 135, 323], list(range(12))
    else:  # the published d and 60 runs per (d, init) (the authors: up to 70)
        ds, seeds = ds_pub + [1000], list(range(60))
    params = PARAMS.replace(omega=omega)
    pts = [(alpha, omega, d, s, init) for d in ds for s in seeds for init in INIT_PAIR]
    rows = [
        r
        for r in run_sims(pts, params, store=Store(out_dir / SIM_STORE), desc="erm-d-scaling")
        if r["status"] == "converged"
    ]
    th = branch_fixed_points(
        alpha, params, rule=figure_rule(quick), store=Store(out_dir / THEORY_STORE)
    )
    fields = (
        ("theta_over_sigma2", r"$|\theta|/\sigma^2$"),
        ("m", r"$|m|$"),
        ("eps_g", r"$\varepsilon_g$"),
    )
    fig, axes = plt.subplots(1, 4, figsize=(18, 5.6))
    rng = np.random.default_rng(0)  # horizontal jitter of the run markers only
    numbers = []
    colours = dict(semantic="C1", positional="C2")
    for ax, (key, name) in zip(axes[:3], fields):
        for init, c in colours.items():
            sub = [r for r in rows if r["init"] == init]
            x = np.array([r["d"] for r in sub], float)
            ax.scatter(
                x * np.exp(0.06 * rng.standard_normal(x.size)),
                [r[key] for r in sub],
                s=8,
                color=c,
                alpha=0.35,
                lw=0,
                label=f"{init} init: runs",
            )
            xs, mu, _ = _sim_stats(sub, "d", key)
            sd = np.array([spread([r[key] for r in sub if r["d"] == d])[0] for d in xs])
            ax.errorbar(
                xs,
                mu,
                yerr=sd,
                fmt="o-",
                ms=4,
                lw=1,
                capsize=3,
                color=c,
                label=f"{init} init: mean ± std",
            )
            ax.axhline(th[init][key], color=c, ls="--", lw=1.2, label=f"{init} branch, theory")
        ax.set_xscale("log")
        ax.set_xlabel("d")
        ax.set_ylabel(name)
        legend_below(ax)
    ax = axes[3]
    for init, c in colours.items():
        for key, mk in (("eps_g", "o"), ("theta_over_sigma2", "s"), ("m", "^")):
            sub = [r for r in rows if r["init"] == init]
            xs = np.array(sorted({r["d"] for r in sub}), float)
            sp = np.array([spread([r[key] for r in sub if r["d"] == d]) for d in xs])
            ref = abs(th[init][key])
            rel = sp / ref if ref > 1e-9 else sp  # absolute where the theory's value is 0
            ax.errorbar(
                xs,
                rel[:, 0],
                yerr=rel[:, 1],
                fmt=mk,
                ms=4,
                capsize=2,
                color=c,
                mfc="none" if key != "eps_g" else c,
                label=f"{dict(fields)[key]}, {init} init",
            )
            big = xs >= 30
            if big.sum() >= 3 and np.all((rel[big, 0] > 0) & np.isfinite(rel[big, 0])):
                f = power_law_fit(xs[big], rel[big, 0], rel[big, 1])
                xx = np.array([xs[big][0], xs[big][-1]])
                ax.plot(xx, f["c"] * xx ** f["b"], "-", color=c, lw=0.8)
                numbers.append(
                    dict(
                        name=f"spread exponent of {key}, {init} init (alpha={alpha})",
                        value=f["b"],
                        how=f"+- {f['b_err']:.2g}: std across {len(seeds)} runs ~ c d^b, "
                        f"weighted log-log fit over d = {[int(v) for v in xs[big]]} "
                        f"(chi2/dof {f['chi2_dof']:.2g}); 1/sqrt(d) concentration is b = -0.5",
                    )
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("d")
    ax.set_ylabel("std across runs / |theory| (absolute where theory = 0)")
    legend_below(ax)
    for init in INIT_PAIR:
        sub = [r for r in rows if r["init"] == init and r["d"] == max(ds)]
        for key in ("eps_g", "theta_over_sigma2", "m"):
            v = [r[key] for r in sub]
            numbers.append(
                dict(
                    name=f"{key} {init} init, d={max(ds)} (alpha={alpha})",
                    value=float(np.mean(v)),
                    how=f"mean of {len(v)} L-BFGS runs, std {np.std(v, ddof=1):.2g}; "
                    f"theory {th[init][key]:.4g}",
                )
            )
    path = finish_figure(
        fig,
        out_dir / "erm-d-scaling.png",
        rf"finite-size concentration at $\alpha$={alpha}, $\omega$={omega}, "
        rf"$\sigma$={params.sigma}, $\lambda$={params.lam}: L-BFGS minimisers from Q=Q* "
        rf"(semantic) and Q=1/$\sqrt{{d}}$ (positional), {len(seeds)} runs per d; dashed: "
        "replica fixed points; right: spread across runs with fits c d^b (d >= 30)",
    )
    numbers.insert(0, dict(name="erm_d_scaling_wall_s", value=time.perf_counter() - t0, how="wall"))
    return dict(files=[str(path)], numbers=numbers)


@reproduces(
    "cui2024",
    "App. (initialisations)",
    "(m/sigma^2, theta/sigma^2) of the minimisers reached from positional, semantic and random "
    "inits at alpha = 2, omega = 0.3 (GD at d = 1000, Adam from random init at d = 100), "
    "with the two theory fixed points",
    ["erm-inits.png"],
    cost=130,
)
def fig_inits(out_dir: Path, quick: bool, *, alpha=2.0, omega=0.3) -> dict:
    from theory.attention.figures.adam import simulate_adam
    from theory.attention.figures.heatmap import legend_below
    from theory.attention.figures.published import ADAM_PROTOCOL

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    if quick:
        d, seeds, d_adam, n_adam = 200, list(range(5)), 100, 20
    else:  # GD minimisers at d = 1000, 20 seeds per init; Adam at d = 100, 140 runs
        d, seeds, d_adam, n_adam = 1000, list(range(20)), 100, 140
    params = PARAMS.replace(omega=omega)
    s2 = params.s2
    pts = [(alpha, omega, d, s, init) for s in seeds for init in (*INIT_PAIR, "random")]
    rows = run_sims(pts, params, store=Store(out_dir / SIM_STORE), desc="erm-inits")
    astore = Store(out_dir / "erm-adam.jsonl")
    arows = []
    for s in range(n_adam):
        key = dict(kind="adam", alpha=alpha, omega=omega, d=d_adam, seed=s, **ADAM_PROTOCOL)
        row = astore.get(key)
        if row is None:
            pr = make_problem(alpha, params, d_adam, s, n_test=2000)
            row = astore.put(key, simulate_adam(pr, **ADAM_PROTOCOL))
        arows.append(row)
    th = branch_fixed_points(
        alpha, params, rule=figure_rule(quick), store=Store(out_dir / THEORY_STORE)
    )
    fig, ax = plt.subplots(figsize=(7.5, 6.4))
    styles = dict(
        positional=("C2", "s", f"positional init Q=1/sqrt(d), L-BFGS, d={d}"),
        semantic=("C1", "o", f"semantic init Q=Q*, L-BFGS, d={d}"),
        random=("C0", "^", f"random init 0.1 N(0,1), L-BFGS, d={d}"),
    )
    for init, (c, mk, lab) in styles.items():
        sub = [r for r in rows if r["init"] == init]
        ax.scatter(
            [r["m"] / s2 for r in sub],
            [r["theta_over_sigma2"] for r in sub],
            color=c,
            marker=mk,
            s=28,
            alpha=0.7,
            label=f"{lab} ({len(sub)})",
        )
    ax.scatter(
        [r["m"] / s2 for r in arows],
        [r["theta_over_sigma2"] for r in arows],
        facecolors="none",
        edgecolors="k",
        marker="o",
        s=18,
        lw=0.7,
        alpha=0.6,
        label=f"random init, Adam (lr 0.01, 2500 steps), d={d_adam} ({len(arows)})",
    )
    for b, mk in (("semantic", "*"), ("positional", "P")):
        ax.plot(
            th[b]["m"] / s2,
            th[b]["theta_over_sigma2"],
            mk,
            color="r",
            ms=16,
            mec="k",
            label=f"{b} fixed point (theory), eps_t = {th[b]['eps_t']:.4g}",
        )
    ax.set_xlabel(r"$|m|/\sigma^2$")
    ax.set_ylabel(r"$|\theta|/\sigma^2$")
    legend_below(ax, ncol=1)
    numbers = [dict(name="erm_inits_wall_s", value=time.perf_counter() - t0, how="wall")]
    for name, sub in (
        (f"random init L-BFGS d={d}", [r for r in rows if r["init"] == "random"]),
        (f"random init Adam d={d_adam}", arows),
    ):
        sem = [r for r in sub if r["theta_over_sigma2"] > r["m"] / s2]
        numbers.append(
            dict(
                name=f"fraction semantic, {name} (alpha={alpha}, omega={omega})",
                value=len(sem) / max(len(sub), 1),
                how=f"runs ending with theta/sigma^2 > m/sigma^2, of {len(sub)}; the L-BFGS "
                "runs are not the authors' GD: from a random init the two paths may end in "
                "different basins (in quick mode, d = 200, 3 of 5 L-BFGS runs ended in other "
                "local minima with higher eps_t)",
            )
        )
    path = finish_figure(
        fig,
        out_dir / "erm-inits.png",
        rf"where the minimisers land: $\alpha$={alpha}, $\omega$={omega}, "
        rf"$\sigma$={params.sigma}, $\lambda$={params.lam}",
        fontsize=10,
    )
    return dict(files=[str(path)], numbers=numbers)


FIGURES = {
    "erm-omega03": fig_omega03,
    "erm-phase-diagram": fig_phase_diagram,
    "erm-phase-diagram-otherA": fig_phase_diagram_other_a,
    "erm-slices": fig_slices,
    "erm-linear-baseline": fig_linear_baseline,
    "erm-inits": fig_inits,
    "erm-d-scaling": fig_d_scaling,
}
