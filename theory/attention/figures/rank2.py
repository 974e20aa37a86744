"""The rank-2 student (Cui et al., appendix): a student Q ∈ R^{d×2} against the rank-1 teacher
(L = 2, σ = 0.5, λ = 0.01, A = [[0.6, 0.4], [0.4, 0.6]]), trained from the random
initialisation Q = 0.1 N(0, 1).

``FIGURES`` (the ``theory reproduce`` hook): ``"erm-rank2"``.

* Panel A: ε_g vs α at ω = 0.3 (mean ± SE over seeds) with the authors' 10-run values
  (:mod:`theory.published`), the rank-1 theory branches (:func:`~theory.attention.figures.
  simulation.theory_curve`) and the fixed points of the r = 2 state equations
  (:func:`theory.attention.general.fixed_point`): the semantic (m ≡ 0) and positional
  (θ ≡ 0) sectors and the "mixed" fixed point, started with θ in one column and m in the other.
* Panel B: ε_g^lin − ε_g of the random-init minimiser on the (α, ω) grid, with the rank-1
  theory's α_c(ω), α_l(ω) (:func:`~theory.attention.figures.simulation.theory_phase_rows`).
* Panel C: the minimiser's rotation invariants per α at ω = 0.3: |m|, |θ|/σ² and both
  eigenvalues of q (a rank-1 minimiser has one eigenvalue 0).

Simulation: :func:`theory.attention.finite_d.general.simulate` (L-BFGS on the exact empirical
risk of the general model, the risk the authors' gradient descent minimises); every run is kept
in ``erm-rank2-sims.jsonl`` and every r = 2 fixed point in ``erm-rank2-theory.jsonl`` in the
output folder, so an interrupted run resumes.  The authors' protocol itself (plain GD, lr 0.15,
5000 steps) is run on a few instances next to L-BFGS (:func:`gd_protocol`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from theory.attention.baseline import linear_baseline
from theory.attention.figures import finish_figure
from theory.attention.figures.simulation import (
    PARAMS,
    PHASE_OMEGAS,
    THEORY_STORE,
    figure_rule,
    theory_curve,
    theory_phase_rows,
)
from theory.attention.finite_d.general import (
    initial_weights,
    make_problem,
    overlaps,
    risk,
    simulate,
    test_error,
)
from theory.attention.general import GeneralParams, fixed_point
from theory.plotting import mean_and_sem, reproduces, use_agg
from theory.published import published_values
from theory.store import Store

#: the rank-2 student against the reference rank-1 teacher (L = 2, σ, λ, A of :data:`PARAMS`)
PARAMS2 = GeneralParams(L=2, r=2, r_t=1, sigma=PARAMS.sigma, lam=PARAMS.lam, omega=0.3, A=PARAMS.A)
SIM_STORE2 = "erm-rank2-sims.jsonl"
THEORY_STORE2 = "erm-rank2-theory.jsonl"
#: the r = 2 fixed points drawn: the two sectors of the rank-1 model and the mixed one
SECTORS = ("semantic", "positional", "mixed")
#: the rotation invariants reported per alpha (:func:`invariants`)
INVARIANTS = ("m_norm", "theta_over_sigma2", "q_min", "q_max")
#: measured CPU s of one L-BFGS run at d = 1000 at one BLAS thread (median over the 693 runs
#: of a full run from nothing, 2026-12-06; 1.2-1.6 s at alpha = 1 ... 4), used when a call runs
#: nothing at d = 1000
RUN_CPU_S = 1.0


def published_rank2() -> tuple[tuple[float, float], ...]:
    """The authors' rank-2 ε_g at ω = 0.3 (random init, GD, 10 runs): ((α, ε_g), ...)."""
    recs = published_values("cui2024", "rank2/")
    return tuple(sorted((float(r.params["alpha"]), r.value) for r in recs))


def invariants(q, m, theta, s2: float) -> dict:
    """Rotation invariants of a rank-r state: ``m_norm`` = ||m||_F/√L (the rank-1 |m| at L = 2),
    ``theta_over_sigma2`` = ||θ||/σ², ``q_min``, ``q_max`` (eigenvalues of q) and
    ``cos_m_theta`` (the angle between the positional row m_1 and θ: 0 when the two are carried
    by orthogonal directions of Q; NaN when either vanishes)."""
    q, m, th = (np.asarray(v, float) for v in (q, m, theta))
    r = q.shape[0]
    m, th = m.reshape(-1, r), th.reshape(r, -1)
    ev = np.linalg.eigvalsh(0.5 * (q + q.T))
    m1, t1 = m[0], th[:, 0]
    nm, nt = float(np.linalg.norm(m1)), float(np.linalg.norm(t1))
    cos = float(m1 @ t1 / (nm * nt)) if nm > 1e-12 and nt > 1e-12 else math.nan
    return dict(
        m_norm=float(np.linalg.norm(m) / math.sqrt(m.shape[0])),
        theta_over_sigma2=float(np.linalg.norm(th) / s2),
        q_min=float(ev[0]),
        q_max=float(ev[-1]),
        cos_m_theta=cos,
    )


def _summary(r, s2: float, c0: float, **extra) -> dict:
    """The stored row of a simulation or fixed-point result ``r``: status, ε_t, ε_g, ε_g_err,
    the CPU seconds since ``c0``, ``extra`` and the :func:`invariants` (when ``r`` has a state)."""
    row = dict(status=r.status, eps_t=r.eps_t, eps_g=r.eps_g, eps_g_err=r.eps_g_err, **extra)
    row["cpu_s"] = time.process_time() - c0
    if r.q is not None:
        row.update(invariants(r.q, r.m, r.theta, s2))
    return row


def run_rank2(points, *, store: Store | None = None, n_test=4000, progress=True) -> list[dict]:
    """L-BFGS from the random init at every ``(alpha, omega, d, seed)`` of ``points`` (rank-2
    student, :data:`PARAMS2` otherwise); one row per point (ε_t, ε_g, ε_g_err, status, the
    :func:`invariants`, ``cpu_s``), kept in ``store``."""
    from tqdm import tqdm

    store = Store(None) if store is None else store
    rows = []
    # disable only when asked: an explicit disable=False would override TQDM_DISABLE, which
    # `theory reproduce --no-progress` sets for the bars inside the pieces
    for alpha, omega, d, seed in tqdm(
        list(points), desc="erm-rank2", leave=False, **({} if progress else {"disable": True})
    ):
        key = dict(kind="rank2-lbfgs", alpha=float(alpha), omega=float(omega), d=int(d))
        key.update(seed=int(seed), n_test=int(n_test), sigma=PARAMS2.sigma, lam=PARAMS2.lam)
        row = store.get(key)
        if row is None:
            c0 = time.process_time()
            r = simulate(
                alpha,
                PARAMS2,
                d=int(d),
                init="random",
                seed=int(seed),
                n_test=int(n_test),
                tol=1e-7,
                omega=float(omega),
            )
            row = store.put(key, _summary(r, PARAMS2.s2, c0, iterations=r.iterations))
        rows.append(row)
    return rows


def gd_protocol(alpha, d, seed, *, omega=0.3, store=None) -> dict:
    """The authors' protocol on one instance: plain full-batch GD ``Q <- Q - lr ∇L`` from the
    random init, their lr and step count (:data:`~theory.attention.figures.published.
    GD_PROTOCOL`: 0.15, 5000), reported as ε_g, ε_g_err, ε_t, the final RMS gradient and the
    :func:`invariants` (kept in ``store``)."""
    from theory.attention.figures.published import GD_PROTOCOL

    lr, steps = GD_PROTOCOL["lr"], GD_PROTOCOL["steps"]
    store = Store(None) if store is None else store
    key = dict(kind="rank2-gd", alpha=float(alpha), omega=float(omega), d=int(d), seed=int(seed))
    key.update(steps=int(steps), lr=float(lr))
    row = store.get(key)
    if row is not None:
        return row
    prob = make_problem(alpha, PARAMS2, d, seed, omega=float(omega))
    Q = initial_weights("random", prob)
    c0 = time.process_time()
    for _ in range(int(steps)):
        _, g = risk(Q, prob.train, PARAMS2.lam)
        Q -= lr * g
    L_, g = risk(Q, prob.train, PARAMS2.lam)
    eg, ege = test_error(Q, prob)
    ov = overlaps(Q, prob)
    out = dict(
        eps_g=eg,
        eps_g_err=ege,
        eps_t=L_ / prob.d,
        grad_rms=float(np.linalg.norm(g) / math.sqrt(prob.d)),
        cpu_s=time.process_time() - c0,
        **invariants(ov["q"], ov["m"], ov["theta"], PARAMS2.s2),
    )
    return store.put(key, out)


def mixed_init() -> dict:
    """The start of the mixed r = 2 fixed point: θ in the first column, m in the second, near
    the α = 2 solution (the start of tests/attention/test_ps_general.py's mixed fixed point)."""
    return dict(
        q=np.diag([0.07, 0.02]),
        m=np.array([[0.0, 0.2], [0.0, -0.2]]),
        theta=np.array([[0.12], [0.0]]),
        V=np.diag([10.0, 10.0]),
    )


def rank2_theory(
    alpha, *, omega=0.3, sectors=SECTORS, n=2**11, n_rep=4, store: Store | None = None
) -> dict:
    """The r = 2 fixed points at ``alpha`` in ``sectors`` (:data:`SECTORS`: branch "semantic",
    "positional" from their cold starts; "mixed": branch "free" from :func:`mixed_init`),
    ``n_rep`` scramblings of ``n`` QMC points, with error bars (tol 1e-5); each kept in
    ``store``.  Rows: status, branch label, ε_t, ε_g (with ``_err``), :func:`invariants`."""
    store = Store(None) if store is None else store
    p = PARAMS2.replace(omega=float(omega))
    out = {}
    for sector in sectors:
        key = dict(kind="rank2-fp", sector=sector, alpha=float(alpha), omega=float(omega))
        key.update(n=int(n), n_rep=int(n_rep), tol=1e-5, sigma=p.sigma, lam=p.lam)
        row = store.get(key)
        if row is None:
            c0 = time.process_time()
            branch, init = (sector, None) if sector != "mixed" else ("free", mixed_init())
            r = fixed_point(
                float(alpha), p, branch=branch, init=init, n=int(n), n_rep=int(n_rep), tol=1e-5
            )
            row = store.put(
                key,
                _summary(r, p.s2, c0, message=r.message, label=r.branch, eps_t_err=r.eps_t_err),
            )
        out[sector] = row
    return out


def _finite_size_panel(ax, scan, alpha, d_scan, mixed) -> list[dict]:
    """ε_g of the random-init runs at ``alpha`` minus the r = 2 mixed fixed point's, seed mean ±
    SE per d (log-log), with the fitted power law; returns its numbers."""
    from matplotlib.ticker import NullFormatter

    from theory.attention.figures.heatmap import legend_below
    from theory.attention.figures.stats import power_law_fit

    ds = np.array(sorted(d_scan), float)
    vals = [np.array([r["eps_g"] for r in scan if r["d"] == dd]) for dd in ds]
    ex = np.array([v.mean() - mixed["eps_g"] for v in vals])
    th_err = mixed["eps_g_err"] or 0.0
    se = np.array([math.hypot(v.std(ddof=1) / math.sqrt(v.size), th_err) for v in vals])
    ax.errorbar(ds, ex, yerr=se, fmt="o", ms=5, capsize=3, color="k", label="rank-2 runs")
    how = (
        f"eps_g of L-BFGS from the random init (d: seeds {d_scan}) minus the r = 2 mixed fixed "
        f"point's {mixed['eps_g']:.6g} (alpha={alpha:g}, omega=0.3)"
    )
    out = [
        dict(
            name=f"eps_g rank 2 minus r = 2 mixed theory (alpha={alpha:g}, d={int(dd)})",
            value=float(e),
            how=f"+- {s:.2g}; {how}",
        )
        for dd, e, s in zip(ds, ex, se)
    ]
    if np.all(ex > 0) and ds.size >= 3:
        f = power_law_fit(ds, ex, se)
        xx = np.array([ds[0], ds[-1]])
        ax.plot(
            xx, f["c"] * xx ** f["b"], "-", color="C3", lw=1.2, label=f"fit c d^b, b = {f['b']:.2f}"
        )
        out.append(
            dict(
                name=f"finite-size exponent of the rank-2 excess (alpha={alpha:g})",
                value=f["b"],
                how=f"+- {f['b_err']:.2g} (chi2/dof {f['chi2_dof']:.2g}); weighted log-log "
                f"fit; {how}",
            )
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ds, [str(int(v)) for v in ds])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("d")
    ax.set_ylabel(r"$\varepsilon_g$ (simulation) $-$ $\varepsilon_g$ (r = 2 mixed fixed point)")
    ax.set_title(f"finite size at alpha = {alpha:g}: runs minus the r = 2 theory", fontsize=9)
    legend_below(ax, ncol=2)
    return out


def _cell_means(rows, alphas, omegas) -> np.ndarray:
    """Seed mean of ε_g per (ω, α) cell of the converged ``rows`` (NaN: no converged run)."""
    v = np.full((len(omegas), len(alphas)), np.nan)
    for i, w in enumerate(omegas):
        for j, a in enumerate(alphas):
            got = [
                r["eps_g"]
                for r in rows
                if math.isclose(r["alpha"], a) and math.isclose(r["omega"], w)
            ]
            if got:
                v[i, j] = np.mean(got)
    return v


@reproduces(
    "cui2024",
    "App. (rank-2 student)",
    "the rank-2 student from the random initialisation: eps_g vs alpha at omega = 0.3 "
    "against the authors' 10 GD runs, the rank-1 theory branches and the r = 2 state "
    "equations' fixed points; the (alpha, omega) map of eps_g^lin - eps_g at d = 1000",
    ["erm-rank2.png"],
    cut="the (alpha, omega) map: one seed per cell (625 L-BFGS runs at d = 1000, ~11 CPU-min); "
    "10 seeds, the count of the published alpha line, would be ~1.8 CPU-h",
    cost=2430,
)
def fig_rank2(out_dir: Path, quick: bool) -> dict:
    from theory.attention.figures import published as pub
    from theory.attention.figures.heatmap import draw_heatmap, draw_threshold_lines, legend_below

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    a0, a1, na = pub.HEATMAP_ALPHAS
    alphas_pub = [a for a, _ in published_rank2()]
    if quick:  # same code path: d = 100, 2 seeds on the published alphas, a 5 x 3 map, the r = 2
        # theory at one alpha on few QMC nodes, the rank-1 lines as erm-omega03/-phase-diagram
        d, seeds, d_map, seeds_map = 100, [0, 1], 100, [0]
        alphas_map, omegas_map = list(np.linspace(a0, a1, 5)), [0.1, 0.3, 0.5]
        alphas_r2, nodes = [2.0], dict(n=2**9, n_rep=2)
        alphas_th, omegas_th = [np.linspace(0.25, 2.0, 8)], [0.1, 0.3]
        gd_points = [(2.0, 100, 0)]
        a_scan, d_scan = 2.0, {50: 2, 100: 2, 200: 2}
    else:  # the published alphas and 10 seeds (70 runs), the published map grid at d = 1000
        # with ONE seed (625 runs; 693 L-BFGS runs at d = 1000 took 662 CPU-s in all, so 10
        # seeds would be ~1.8 CPU-h), the GD protocol at 2 alphas (~90 CPU-s each), the r = 2
        # fixed points (7 solves, 1415 CPU-s in all): ~0.7 CPU-h with the rank-1 curves, run in
        # one process (a run from nothing of 2026-12-06, one BLAS thread: BENCHMARKS.md part E)
        d, seeds, d_map, seeds_map = 1000, list(range(10)), 1000, [0]
        alphas_map, omegas_map = list(np.linspace(a0, a1, na)), list(pub.HEATMAP_OMEGAS)
        alphas_r2, nodes = [0.5, 1.0, 2.0, 3.0, 4.0], dict(n=2**11, n_rep=4)
        # the rank-1 curve of erm-omega03 (shared through the store) and its continuation to 4
        alphas_th = [np.linspace(0.05, 2.0, 40), np.linspace(2.1, 4.0, 20)]
        omegas_th = list(PHASE_OMEGAS)  # the heat maps' lines (one store row)
        gd_points = [(2.0, 1000, 0), (4.0, 1000, 0)]
        # the finite-size scan against the r = 2 mixed fixed point at alpha = 4 (~1 CPU-min)
        a_scan, d_scan = 4.0, {250: 8, 500: 8, 1000: 10, 2000: 4}
    sim_store = Store(out_dir / SIM_STORE2)
    th_store, th2_store = Store(out_dir / THEORY_STORE), Store(out_dir / THEORY_STORE2)

    # ---- simulations
    c0 = time.process_time()
    pts = [(a, 0.3, d, s) for a in alphas_pub for s in seeds]
    pts += [
        (float(a), float(w), d_map, s) for w in omegas_map for a in alphas_map for s in seeds_map
    ]
    rows = run_rank2(pts, store=sim_store)
    ok = [r for r in rows if r["status"] == "converged"]
    line = [r for r in ok if r["d"] == d and math.isclose(r["omega"], 0.3) and r["seed"] in seeds]
    line = [r for r in line if any(math.isclose(r["alpha"], a) for a in alphas_pub)]
    heat_rows = [r for r in ok if r["d"] == d_map and r["seed"] in seeds_map]
    scan = [
        r
        for r in run_rank2(
            [(a_scan, 0.3, dd, s) for dd, n in d_scan.items() for s in range(n)], store=sim_store
        )
        if r["status"] == "converged"
    ]
    gd = [(a, dd, s, gd_protocol(a, dd, s, store=sim_store)) for a, dd, s in gd_points]
    sim_cpu = time.process_time() - c0
    cpu = [r["cpu_s"] for r in rows if r["d"] == 1000]
    per_run = float(np.median(cpu)) if cpu else RUN_CPU_S

    # ---- theory
    c0 = time.process_time()
    th1 = [theory_curve(a, PARAMS, rule=figure_rule(quick), store=th_store) for a in alphas_th]
    th1 = dict(rows=[r for t in th1 for r in t["rows"]], eps_g_lin=th1[0]["eps_g_lin"])
    fps = {  # every sector at alpha = 2 (which fixed points exist), the mixed one elsewhere
        a: rank2_theory(a, sectors=SECTORS if a == 2.0 else ("mixed",), store=th2_store, **nodes)
        for a in alphas_r2
    }
    lines = theory_phase_rows(omegas_th, PARAMS, rule=figure_rule(quick), store=th_store)
    th_cpu = time.process_time() - c0
    eps_lin = np.array([linear_baseline(PARAMS.replace(omega=float(w))) for w in omegas_map])
    gain = eps_lin[:, None] - _cell_means(heat_rows, alphas_map, omegas_map)

    # ---- figure
    fig, axes = plt.subplots(1, 4, figsize=(22, 5.6))
    ms = dict(fmt="o", capsize=2, ms=4.5, elinewidth=1)
    ax = axes[0]
    for branch, c in (("positional", "C2"), ("semantic", "C1")):
        on = [r for r in th1["rows"] if r["init"] == branch and r["branch"] == branch]
        on = [r for r in on if r["status"] == "converged"]
        ax.plot(
            [r["alpha"] for r in on],
            [r["eps_g"] for r in on],
            "-",
            color=c,
            lw=1.3,
            label=f"rank-1 {branch} branch (replica theory)",
        )
    ax.axhline(th1["eps_g_lin"], color="C4", lw=1.2, label=r"linear baseline $\varepsilon_g^{lin}$")
    for sector, mk, c in (("semantic", "^", "C1"), ("positional", "v", "C2"), ("mixed", "*", "C3")):
        got = [
            (a, f[sector])
            for a, f in fps.items()
            if sector in f and f[sector]["status"] == "converged"
        ]
        if got:
            ax.errorbar(
                [a for a, _ in got],
                [f["eps_g"] for _, f in got],
                yerr=[f["eps_g_err"] or 0.0 for _, f in got],
                fmt=mk,
                color=c,
                mfc="none",
                ms=9,
                capsize=2,
                label=f"r = 2 state equations, {sector} fixed point",
            )
    xs, mu, se = mean_and_sem(line, "alpha", "eps_g")
    ax.errorbar(
        xs,
        mu,
        yerr=se,
        color="k",
        label=f"rank-2, random init (L-BFGS, d={d}, {len(seeds)} seeds)",
        **ms,
    )
    pa, pv = zip(*published_rank2())
    ax.plot(pa, pv, "D", mfc="none", color="0.4", ms=7, label="authors' GD, rank 2 (10 runs)")
    for a, dd, _s, g in gd:
        if dd == d:
            ax.plot(a, g["eps_g"], "x", color="C0", ms=8, mew=1.5)
    if any(dd == d for _, dd, _, _ in gd):
        ax.plot(
            [],
            [],
            "x",
            color="C0",
            ms=8,
            mew=1.5,
            label="authors' protocol (GD lr 0.15, 5000 steps), seed 0",
        )
    ax.set_xlim(0, max(alphas_pub) * 1.03)
    ax.set_xlabel(r"$\alpha = n/d$")
    ax.set_ylabel(r"$\varepsilon_g$")
    ax.set_title(r"$\omega$ = 0.3: rank-2 student against rank-1 and r = 2 theory", fontsize=9)
    legend_below(ax, ncol=1)

    ax = axes[1]
    for key, c, name in (
        ("m_norm", "C2", r"$|m|$"),
        ("theta_over_sigma2", "C1", r"$|\theta|/\sigma^2$"),
        ("q_max", "C0", r"largest eigenvalue of $q$"),
        ("q_min", "C9", r"smallest eigenvalue of $q$"),
    ):
        xs_, mu_, se_ = mean_and_sem(line, "alpha", key)
        ax.errorbar(xs_, mu_, yerr=se_, color=c, label=f"{name} (simulation)", **ms)
        got = [(a, f["mixed"]) for a, f in fps.items() if f["mixed"].get(key) is not None]
        got = [(a, f) for a, f in got if f["status"] == "converged"]
        if got:
            ax.plot([a for a, _ in got], [f[key] for _, f in got], "*", color=c, mfc="none", ms=10)
    ax.plot([], [], "*", color="0.3", mfc="none", ms=10, label="r = 2 mixed fixed point (theory)")
    ax.set_xlim(0, max(alphas_pub) * 1.03)
    ax.set_xlabel(r"$\alpha = n/d$")
    ax.set_ylabel("rotation invariants of the minimiser")
    ax.set_title("what the rank-2 minimiser uses (both eigenvalues of q > 0: rank 2)", fontsize=9)
    legend_below(ax, ncol=2)

    ax = axes[2]
    draw_heatmap(
        fig,
        ax,
        alphas_map,
        omegas_map,
        gain,
        label=r"$\varepsilon_g^{lin} - \varepsilon_g$ (rank 2, random init)",
        cmap="PuOr_r",
    )
    draw_threshold_lines(ax, lines, keys=("alpha_c", "alpha_l"))
    for h in ax.get_lines():
        h.set_label(h.get_label().replace("theory", "rank-1 replica theory"))
    ax.set_xlabel(r"sample ratio $\alpha = n/d$")
    ax.set_ylabel(r"teacher mixing $\omega$")
    ax.set_title(
        rf"rank-2 student, d={d_map}, {len(seeds_map)} seed(s) (orange: beats the linear baseline)",
        fontsize=9,
    )
    legend_below(ax, ncol=2)
    excess = _finite_size_panel(axes[3], scan, a_scan, d_scan, fps[a_scan]["mixed"])
    path = finish_figure(
        fig,
        out_dir / "erm-rank2.png",
        rf"rank-2 student (r = 2, teacher r_t = 1, L = 2), $\sigma$={PARAMS.sigma}, "
        rf"$\lambda$={PARAMS.lam}, A=[[.6,.4],[.4,.6]]; simulation: L-BFGS on the empirical "
        "risk from Q = 0.1 N(0, 1) (bars: SE over seeds)",
    )

    # ---- numbers
    how = f"L-BFGS from the random init, rank-2 student, d={d}, {len(seeds)} seeds, omega=0.3"
    numbers = [
        dict(name="erm-rank2_wall_s", value=time.perf_counter() - t0, how="wall time"),
        dict(
            name="erm-rank2_sim_cpu_s",
            value=sim_cpu,
            how="CPU s of the simulations (0 when cached)",
        ),
        dict(
            name="erm-rank2_theory_cpu_s", value=th_cpu, how="CPU s of the theory (0 when cached)"
        ),
        dict(
            name="erm-rank2 CPU s per L-BFGS run (d=1000)",
            value=per_run,
            how="median over the runs at d = 1000 of this call (else the measured unloaded "
            f"{RUN_CPU_S} s); the full map (625 runs) x 10 seeds would be "
            f"{6250 * per_run / 3600:.1f} CPU-h: the map uses 1 seed",
        ),
        dict(
            name="erm-rank2_failed_runs",
            value=len(rows) - len(ok),
            how=f"{len(rows)} L-BFGS runs (RMS gradient not below 1e-6)",
        ),
    ]
    numbers += excess
    pub_eg = dict(published_rank2())
    inv = {k: mean_and_sem(line, "alpha", k)[1] for k in INVARIANTS}
    cos_max = [max(abs(r["cos_m_theta"]) for r in line if math.isclose(r["alpha"], a)) for a in xs]
    for j, a in enumerate(xs):
        pv_ = next((v for k, v in pub_eg.items() if math.isclose(k, a)), None)
        numbers.append(
            dict(
                name=f"eps_g rank 2 (alpha={a:g}, omega=0.3) simulated",
                value=float(mu[j]),
                how=f"+- {se[j]:.2g} (SE); {how}"
                + ("" if pv_ is None else f"; authors' GD (10 runs): {pv_:g}")
                + "; minimiser (seed means): "
                + ", ".join(f"{k} {inv[k][j]:.4f}" for k in INVARIANTS)
                + f", max |cos(m_1, theta)| {cos_max[j]:.3f}",
            )
        )
    for a, dd, s, g in gd:
        numbers.append(
            dict(
                name=f"eps_g rank 2, authors' GD protocol (alpha={a:g}, d={dd}, seed {s})",
                value=g["eps_g"],
                how=f"plain GD lr 0.15, 5000 steps from 0.1 N(0,1); final RMS gradient "
                f"{g['grad_rms']:.1e}, |m| {g['m_norm']:.3f}, |theta|/sigma^2 "
                f"{g['theta_over_sigma2']:.3f}",
            )
        )
    for a, f in fps.items():
        for sector, r in f.items():
            if r["status"] != "converged":
                continue
            numbers.append(
                dict(
                    name=f"eps_g r=2 {sector} fixed point (alpha={a:g}, omega=0.3) theory",
                    value=r["eps_g"],
                    how=f"+- {r['eps_g_err'] or 0:.2g} (QMC); eps_t {r['eps_t']:.6g}, label "
                    f"{r['label']}, |m| {r['m_norm']:.4f}, |theta|/sigma^2 "
                    f"{r['theta_over_sigma2']:.4f}, eig q ({r['q_min']:.4f}, {r['q_max']:.4f}); "
                    f"theory.attention.general.fixed_point, {nodes['n_rep']} x {nodes['n']} QMC",
                )
            )
    return dict(files=[str(path)], numbers=numbers)


FIGURES = {"erm-rank2": fig_rank2}
