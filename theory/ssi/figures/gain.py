"""The paper's Fig. 3 (tied vs untied gain vs L) under its own step-size protocol.

The published gains (≈ 0.4 L^2) come from fixed step sizes gamma_tied = 2e-4 sqrt(L),
gamma_untied = 2e-4, far below either network's optimum, from the fixed start m0 = 1/sqrt(d) to
the threshold eta = 2/sqrt(d), with the untied W renormalised as one vector of R^{L d}.  This
piece runs that protocol (exact reduced SGD chain, both untied normalisations), the package's ODE
(fixed start and random-start average) and its closed form, and the same networks at their
optimal step sizes; all numbers come from :func:`theory.ssi.gain.gain_curve`
(docs/findings.md §6).
"""

from __future__ import annotations

import math

import numpy as np

from theory import ssi
from theory.plotting import reproduces
from theory.published import published_values as _published_values
from theory.ssi.figures.sgd import _fig, _gain_series, _loglog_slope, _save, _store, _workers

__all__ = ["FIGURES", "PUBLISHED_FIG3_GAINS", "published_lr_tied"]


#: The gains read off the paper's Fig. 3 for L = 1..7 (from :mod:`theory.published`, where their
#: source is recorded).
def _by_L(record) -> int:
    return int(record.params["L"])


PUBLISHED_FIG3_GAINS = tuple(
    r.value for r in sorted(_published_values("arnaboldi2025", "gain/fig3/"), key=_by_L)
)
PUBLISHED_FIG3_QUADRATIC = 0.4  # the figure's "best quadratic fit" ≈ 0.4 L^2
PUBLISHED_LR_UNTIED = 2e-4
PUBLISHED_T = 25_000_000  # steps per run
PUBLISHED_SEEDS = (0, 1, 3, 4, 5)
PUBLISHED_D = 1000


def published_lr_tied(L: int) -> float:
    """gamma_tied of the published Fig. 3 protocol: 2e-4 sqrt(L)."""
    return PUBLISHED_LR_UNTIED * math.sqrt(L)


def _setup(quick):
    if quick:
        # same protocol shape, 5x larger steps and d = 200: still the small-step regime
        # (gamma K / 2A ~ 1e-3) and every run is ~1e5 steps (the per-run spread of the escape
        # step grows like sqrt(gamma), not with 1/d)
        return dict(
            d=200,
            Ls=[1, 2, 4],
            lr_scale=5.0,
            seeds=dict(flat=(0, 1, 3, 4, 5), rows=(0, 1, 3, 4, 5)),
            cap=4_000_000,
            T=PUBLISHED_T // 25,
            opt_seeds=8,
            workers=1,
        )
    return dict(
        d=PUBLISHED_D,
        Ls=list(range(1, 11)),
        lr_scale=1.0,
        seeds=dict(flat=PUBLISHED_SEEDS, rows=PUBLISHED_SEEDS),
        # the published horizon T = 2.5e7 would censor the untied runs at L >= 9 (the ODE
        # escape is ~2.8e7 and 3.1e7 steps): run to 4e7 and count the runs that needed > T
        cap=40_000_000,
        T=PUBLISHED_T,
        opt_seeds=32,
        workers=_workers(quick),
    )


def _finish_axes(ax, title):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("gain ν_untied / ν_tied")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6.5, loc="upper left")


def _per_L(numbers, name, Ls, g, e, note):
    """One number per L: the simulated gain, its SE and ``note(i)`` in the "how"."""
    for i, L in enumerate(Ls):
        numbers.append(
            dict(name=f"{name}_L{L}", value=float(g[i]), how=f"± {e[i]:.3g} (SE); {note(i)}")
        )


def _after_T(row, kind, T):
    """Runs of ``kind`` ("tied", "untied", "untied_flat") escaping after step T (or never)."""
    nus = row[f"scan_{kind}"][0]["nus"]
    return sum(1 for v in nus if v is None or v > T), len(nus)


@reproduces(
    "arnaboldi2025",
    "Fig. 3",
    "tied vs untied gain vs L under the published step-size protocol (gamma_tied = 2e-4 sqrt(L), "
    "gamma_untied = 2e-4) and at optimal steps: SGD, ODE and the published points",
    ["sgd-gain-published-protocol.png"],
    cost=990,
)
def fig_gain_published_protocol(out_dir, quick):
    """Gain nu_untied / nu_tied vs L for Σ He2/√2 with ReLU: the published Fig. 3 protocol
    (SGD per-row and flattened, ODE from the fixed and from random starts, closed form) against
    the published points, and the same networks at their optimal step sizes."""
    cfg = _setup(quick)
    d, Ls, sc = cfg["d"], cfg["Ls"], cfg["lr_scale"]
    eta, m0 = 2 / math.sqrt(d), 1 / math.sqrt(d)
    lr_u = PUBLISHED_LR_UNTIED * sc
    lr_t = (lambda L: published_lr_tied(L) * sc) if sc != 1.0 else published_lr_tied
    store = _store(out_dir, "gain-protocol")
    common = dict(
        d=d,
        eta=eta,
        activation="relu",
        workers=cfg["workers"],
        store=store,
        progress=True,
        m0=m0,
    )
    proto = dict(common, step_rule="protocol", lr_tied=lr_t, lr_untied=lr_u, max_steps=cfg["cap"])
    curves = {
        norm: ssi.gain_curve(
            "sum_he2",
            Ls,
            simulate=True,
            seeds=list(cfg["seeds"][norm]),
            untied_norms=(norm,),
            ode=(norm == "flat"),
            ode_start="fixed",
            **proto,
        )
        for norm in ("flat", "rows")
    }
    typical = ssi.gain_curve(
        "sum_he2", Ls, simulate=False, ode_start="typical", **{**proto, "store": None}
    )
    opt = ssi.gain_curve(
        "sum_he2",
        Ls,
        simulate=True,
        seeds=cfg["opt_seeds"],
        rng=2026,
        step_rule="optimal",
        lr=0.1,
        ode=False,
        untied_norms=("rows", "flat"),
        lr_factors=(0.7, 1.0, 1.41),
        **common,
    )
    L_arr = np.array(Ls, float)
    numbers = []
    fig, axes = _fig(1, 2, figsize=(14, 5.4))

    # ------------------------------------------------------------------ published protocol
    ax = axes[0]
    flat = curves["flat"]
    Lp = np.arange(1, len(PUBLISHED_FIG3_GAINS) + 1, dtype=float)
    gp = np.array(PUBLISHED_FIG3_GAINS)
    sp_pub, se_pub = _loglog_slope(Lp, gp, np.full(len(gp), 0.05) * gp)
    ax.plot(Lp, gp, "*", ms=11, color="k", label=f"published (read off Fig. 3): slope {sp_pub:.2f}")
    ax.plot(
        L_arr, PUBLISHED_FIG3_QUADRATIC * L_arr**2, ":", color="k", label="published fit 0.4 L²"
    )
    odes = [
        (flat.column("gain_protocol_ode"), "-", "ODE, fixed start m0 = 1/√d", "fixed"),
        (typical.column("gain_protocol_ode"), "--", "ODE, random-start average", "typical"),
        (flat.column("gain_protocol_closed"), "-.", "linearised ODE (closed form)", "closed"),
    ]
    for g, ls, lab, tag in odes:
        s_ode, _ = _loglog_slope(L_arr, g, np.full(len(g), 0.01) * g)
        ax.plot(L_arr, g, ls, color="C3", lw=1.6, label=f"{lab}: slope {s_ode:.2f}")
        numbers.append(
            dict(
                name=f"gain_protocol_ode_{tag}_slope",
                value=s_ode,
                how=f"log-log slope over L={Ls[0]}..{Ls[-1]} of the {lab} gain "
                f"(theory.ssi.gain.protocol_gains), published protocol gamma_tied="
                f"{lr_u:.3g} sqrt(L), gamma_untied={lr_u:.3g}, d={d}, eta=2/sqrt(d)",
            )
        )
    T = cfg["T"]
    ode_fixed = flat.column("gain_protocol_ode")
    sim_series = [
        (flat, "untied_flat", "_flat", "C2", "^", "flattened W (authors' code)"),
        (curves["rows"], "untied", "", "C0", "o", "per-row spheres"),
    ]
    for curve, kind, sfx, col, mk, lab in sim_series:
        n = curve.rows[0]["n_seeds"]
        lab_n = f"SGD (exact reduced chain), {lab}, {n} seeds"
        g, e, slope, serr = _gain_series(ax, L_arr, curve, sfx, col, mk, lab_n, ms=6)
        k7 = L_arr <= 7
        s7, e7 = _loglog_slope(L_arr[k7], g[k7], e[k7])
        late = [_after_T(r, kind, T) for r in curve.rows]
        late_txt = ", ".join(f"L={L}: {a}/{b}" for L, (a, b) in zip(Ls, late) if a) or "none"
        how = (
            f"exact reduced SGD chain, Σ He2/√2, relu, d={d}, gamma_tied={lr_u:.3g} "
            f"sqrt(L), gamma_untied={lr_u:.3g}, eta=2/sqrt(d), fixed start m0=1/sqrt(d), "
            f"untied {lab}, seeds {list(cfg['seeds']['flat' if sfx else 'rows'])}, runs to "
            f"{cfg['cap']:.2g} steps; untied runs escaping after the published T={T:.2g}: "
            f"{late_txt}"
        )
        numbers.append(
            dict(
                name=f"gain_protocol_sgd{sfx or '_rows'}_slope",
                value=slope,
                how=f"weighted log-log slope (SE {serr:.3f}) over L={Ls[0]}..{Ls[-1]} "
                f"(over L<=7: {s7:.3f} ± {e7:.3f}) of the simulated gain; {how}",
            )
        )
        _per_L(
            numbers,
            f"gain_protocol_sgd{sfx or '_rows'}",
            Ls,
            g,
            e,
            lambda i, c=curve, s=sfx, h=how: (
                f"ODE fixed start {ode_fixed[i]:.3f}"
                + (f", published {gp[i]}" if i < len(gp) else "")
                + f"; nu_tied {c.rows[i]['nu_tied']:.4g}, nu_untied "
                f"{c.rows[i][f'nu_untied{s}']:.4g}; {h}"
            ),
        )
    numbers.append(
        dict(
            name="gain_published_fig3_slope",
            value=sp_pub,
            how=f"unweighted log-log slope (SE {se_pub:.3f}) of the published gains "
            "(read off Fig. 3) over L = 1..7",
        )
    )
    _finish_axes(
        ax,
        f"published protocol: γ_tied = {lr_u:.2g}·√L, γ_untied = {lr_u:.2g}, d = {d},\n"
        f"m0 = 1/√d → η = 2/√d, Σ He2/√2, ReLU"
        + ("" if sc == 1.0 else f" (quick: {sc:g}× the published γ)"),
    )

    # ------------------------------------------------------------------ optimal steps
    ax = axes[1]
    ax.plot(L_arr, L_arr**2, "--", color="C1", label="published formula, optimal γ: L²")
    gcl = opt.column("gain_optimal_closed")
    s_cl, _ = _loglog_slope(L_arr, gcl, np.full(len(gcl), 0.01) * gcl)
    ax.plot(L_arr, gcl, "-", color="C3", label=f"linearised ODE, optimal γ: slope {s_cl:.2f}")
    numbers.append(
        dict(
            name="gain_optimal_closed_slope",
            value=s_cl,
            how=f"log-log slope over L={Ls[0]}..{Ls[-1]} of the closed-form optimal-step gain "
            f"(theory.ssi.gain.closed_form_gains), d={d}, m0=1/sqrt(d), eta=2/sqrt(d)",
        )
    )
    for sfx, col, mk, lab in (("", "C0", "o", "per-row spheres"), ("_flat", "C2", "^", "flat W")):
        lab_n = f"SGD (exact reduced chain), {lab}"
        g, e, slope, serr = _gain_series(ax, L_arr, opt, sfx, col, mk, lab_n, ms=6)
        how = (
            f"exact reduced SGD chain, {cfg['opt_seeds']} seeds, d={d}, eta=2/sqrt(d), fixed "
            "start m0=1/sqrt(d), each network at the best of {0.7, 1, 1.41} x its closed-form "
            f"optimal gamma, untied {lab}"
        )
        numbers.append(
            dict(
                name=f"gain_optimal_sgd{sfx or '_rows'}_slope",
                value=slope,
                how=f"weighted log-log slope (SE {serr:.3f}) over L={Ls[0]}..{Ls[-1]}; {how}",
            )
        )
        _per_L(
            numbers,
            f"gain_optimal_sgd{sfx or '_rows'}",
            Ls,
            g,
            e,
            lambda i, s=sfx, h=how: (
                f"closed form {gcl[i]:.3f}; gamma tied {opt.rows[i]['lr_tied']:.3g}, untied "
                f"{opt.rows[i][f'lr_untied{s}']:.3g}; {h}"
            ),
        )
    _finish_axes(
        ax,
        f"each network at its optimal γ, d = {d}, m0 = 1/√d → η = 2/√d\n"
        f"{cfg['opt_seeds']} seeds per point",
    )
    return dict(files=[_save(fig, out_dir, "sgd-gain-published-protocol")], numbers=numbers)


FIGURES = {"sgd-gain-published-protocol": fig_gain_published_protocol}
