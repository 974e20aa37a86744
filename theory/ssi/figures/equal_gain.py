"""The tied/untied gain at EQUAL step sizes (paper Figs. 7 and 8): nu_untied / nu_tied vs L at the
published gamma and d, simulated (exact reduced chain, random starts, weak recovery at eta) and
predicted by the package's ODE (``theory.ssi.gain.ode_escape_steps`` from the random-start
average ``typical_start``), with the published values read off the figures.

Pieces (``FIGURES``): "sgd-gain-equal-he2" (Fig. 7: sum_l He2(z_l)/sqrt(2), ReLU, gamma = 5e-3,
d = 3000, L = 1..20) and "sgd-gain-equal-z" (Fig. 8: sum_l z_l/sqrt(L), ReLU, gamma = 1.5e-2,
d = 1000, L = 1..32).  SGD runs are kept in ``<out_dir>/.sgd-runs/<piece>.jsonl``, so a killed
full run resumes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from theory import ssi
from theory.plotting import reproduces
from theory.ssi import gain as G
from theory.ssi.figures.sgd import _fig, _labels, _loglog_slope, _save, _store, _workers

__all__ = ["FIGURES"]

ETA = 0.5  # weak recovery of m (untied: m_untied) at 0.5, as in the package's gain figure


def _ode_steps(family: str, Ls, d: int, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """(nu_tied, nu_untied) of the package's ODE at one step size for each L, from the
    random-start average (theory.ssi.gain.typical_start) of each network."""
    out = []
    for L in Ls:
        ex = G.family_target(family, L)
        nt = G.ode_escape_steps(ssi.TiedNetwork(ex, L=L), lr, d, ETA, G.typical_start(d, 1))
        nu = G.ode_escape_steps(ssi.UntiedNetwork(ex, L=L), lr, d, ETA, G.typical_start(d, L))
        out.append((nt, nu))
    return np.array(out).T


def _equal_gain_piece(
    *, name, ref, family, label, d, lr, Ls_full, Ls_quick, seeds_full, seeds_quick, published, cost
):
    """The reproduce piece of one equal-step gain figure (published: {L: gain read off})."""

    @reproduces(
        "arnaboldi2025",
        ref,
        f"tied/untied gain at equal step size gamma = {lr:g} vs L, target {label}, d = {d}: "
        "SGD, the package's ODE and the published values",
        [f"{name}.png"],
        cost=cost,
    )
    def piece(out_dir: Path, quick: bool):
        from matplotlib.ticker import FormatStrFormatter, NullFormatter

        Ls = Ls_quick if quick else Ls_full
        n_seeds = seeds_quick if quick else seeds_full
        nu_t, nu_u = _ode_steps(family, Ls, d, lr)
        ode = nu_u / nu_t
        # a cap on the steps of a run: 5x the slowest ODE escape (runs stop at recovery)
        cap = int(5 * max(nu_u.max(), nu_t.max()))
        # relu (gain_curve's default activation); the ODE columns come from _ode_steps
        curve = ssi.gain_curve(
            family,
            Ls,
            step_rule="equal",
            simulate=True,
            ode=False,
            eta=ETA,
            d=d,
            lr=lr,
            seeds=n_seeds,
            max_steps=cap,
            workers=_workers(quick),
            store=_store(out_dir, name),
            progress=True,
        )
        L_arr = np.array(Ls, float)
        g, ge = curve.column("gain_sim"), curve.column("gain_sim_err")
        stuck = int(np.nansum(curve.column("stuck_tied")) + np.nansum(curve.column("stuck_untied")))
        slope, serr = _loglog_slope(L_arr, g, ge)
        s_ode, _ = _loglog_slope(L_arr, ode, np.full(len(L_arr), 0.01))
        fig, ax = _fig(figsize=(6.8, 5.0))
        ax.plot(
            L_arr,
            L_arr,
            ":",
            color="k",
            lw=1.5,
            label="closed form |r| L^(1-k/2) = L (package eq. 29 = published formula here)",
        )
        ax.plot(L_arr, ode, "-", color="C0", lw=1.8, label=f"package ODE (slope {s_ode:.2f})")
        ax.errorbar(
            L_arr,
            g,
            yerr=ge,
            fmt="o",
            ms=5,
            capsize=2,
            color="C0",
            mfc="none",
            label=f"SGD, exact reduced chain, {n_seeds} seeds: mean ratio ± SE "
            f"(slope {slope:.2f} ± {serr:.2f})",
        )
        pl = np.array([x for x in sorted(published) if x <= Ls[-1]], float)
        ax.plot(
            pl,
            [published[int(x)] for x in pl],
            "*",
            ms=10,
            color="C1",
            mec="k",
            label="published (read off the figure)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FormatStrFormatter("%g"))
            axis.set_minor_formatter(NullFormatter())
        ticks = [v for v in (1, 2, 5, 10, 20, 50) if v <= 1.5 * max(Ls[-1], np.nanmax(g))]
        ax.set_xticks([v for v in ticks if v <= Ls[-1]])
        ax.set_yticks(ticks)
        _labels(
            ax,
            "sequence length L",
            f"gain ν_untied / ν_tied (weak recovery, η = {ETA})",
            f"{ref}: equal γ = {lr:g}, target {label}, ReLU, d = {d}\n"
            "random starts on the sphere; ODE from the random-start average",
        )
        ax.legend(fontsize=7, loc="upper left")
        how = (
            f"exact reduced SGD chain, {n_seeds} seeds per network and L, random starts, "
            f"weak recovery at eta = {ETA}, gamma = {lr:g} for both networks, d = {d}, ReLU, "
            f"L = {Ls}; mean nu_untied / mean nu_tied, delta-method SE; {stuck} runs censored "
            f"at {cap:.3g} steps"
        )
        nums = [
            dict(
                name=f"{name}: gain at L = {Ls[-1]}",
                value=float(g[-1]),
                how=f"SE {ge[-1]:.3g}; ODE {ode[-1]:.3g}; published "
                f"{published.get(Ls[-1], 'not read at this L')}; {how}",
            ),
            dict(
                name=f"{name}: log-log slope of the gain",
                value=slope,
                how=f"weighted least squares over L = {Ls} (SE {serr:.3g}); ODE slope "
                f"{s_ode:.3f}; {how}",
            ),
        ]
        return dict(files=[_save(fig, out_dir, name)], numbers=nums)

    piece.__name__ = piece.__qualname__ = "fig_" + name.replace("-", "_")
    return piece


#: (ref, family, label, d, gamma, L full, L quick, seeds full / quick, published {L: gain}, full
#: cost in s);
#: Fig. 7 full mode: ~190 s of CPU per seed (the untied L = 20 run alone is ~4e7 steps): 8 seeds
#: (the published count is not stated; the compute budget)
_SETUPS = {
    "sgd-gain-equal-he2": (
        ("Fig. 7", "sum_he2", "Σ He2(z_l)/√2", 3000, 5e-3),
        ([1, 2, 5, 10, 15, 20], [1, 2, 5], 8, 4),
        {1: 1, 2: 1.9, 5: 5.3, 10: 8.3, 15: 11.5, 20: 14},
        1300,
    ),
    "sgd-gain-equal-z": (
        ("Fig. 8", "sum_z", "Σ z_l/√L", 1000, 1.5e-2),
        ([1, 2, 4, 8, 16, 32], [1, 2, 4, 8], 32, 8),
        {32: 33.8},
        200,
    ),
}


def _piece_of(name):
    (ref, family, label, d, lr), (Lf, Lq, sf, sq), pub, cost = _SETUPS[name]
    return _equal_gain_piece(
        name=name,
        ref=ref,
        family=family,
        label=label,
        d=d,
        lr=lr,
        Ls_full=Lf,
        Ls_quick=Lq,
        seeds_full=sf,
        seeds_quick=sq,
        published=pub,
        cost=cost,
    )


FIGURES = {name: _piece_of(name) for name in _SETUPS}
