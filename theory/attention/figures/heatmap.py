"""(α, ω) heat maps of the ERM model with the theory lines over them.

:func:`draw_heatmap` is the one drawing routine (the ``theory reproduce`` piece
``erm-phase-diagram`` and ``theory erm phase-diagram --heatmap --plot FIG`` both use it): cells
on their grid, cropped to it, a diverging colour scale symmetric about 0 with round ticks (the
values shown in units of a power of ten), cells without data hatched grey (distinct from 0).
:func:`draw_threshold_lines` draws the theory's α_c(ω), α_l(ω) (rows of
:func:`theory.attention.phase_diagram`), clipped to the frame.

Heat map of the CLI: Δε_t = ε_t(semantic init) − ε_t(positional init) per (α, ω), mean over
seeds, from :func:`~theory.attention.figures.simulation.simulated_delta_eps_t` (negative: the
semantic minimiser has the lower training loss).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from theory._util import atomic_savefig
from theory.plotting import use_agg

#: the mantissas of a "round" colour-scale limit
_NICE = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_limit(v: float) -> tuple[float, int]:
    """``(limit, k)``: the smallest round number ``m 10^k >= |v|`` (m in 1, 1.5, 2, 2.5, 3, 4,
    5, 6, 8) and the power ``k`` (values are shown in units of ``10^k``); ``(1, 0)`` for 0 or a
    non-finite ``v``."""
    v = abs(float(v))
    if not math.isfinite(v) or v == 0:
        return 1.0, 0
    k = math.floor(math.log10(v))
    for m in _NICE:
        if m * 10.0**k >= v * (1 - 1e-12):
            lim = m * 10.0**k
            break
    if lim >= 10.0 ** (k + 1) * (1 - 1e-12):
        k += 1
    return lim, k


def cell_edges(centres) -> np.ndarray:
    """Cell edges of a grid of (not necessarily uniform) cell centres: midpoints, and half a
    cell beyond the first and the last centre."""
    c = np.asarray(centres, float)
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5]) if c[0] == 0 else c[0] * np.array([0.5, 1.5])
    mid = 0.5 * (c[1:] + c[:-1])
    return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])


def draw_heatmap(fig, ax, alphas, omegas, values, *, label: str, cmap="RdBu_r", sequential=False):
    """Draw ``values`` (shape ``(len(omegas), len(alphas))``, NaN = no data) on ``ax``; return
    the colour bar.  The frame is the grid (no margin); NaN cells show a grey hatch.  0 is
    the colour map's centre; with both signs present each side has its own round limit.
    ``sequential``: values ≥ 0 on [0, a round limit] of ``cmap`` (e.g. "Reds")."""
    from matplotlib.colors import Normalize, TwoSlopeNorm
    from matplotlib.patches import Patch, Rectangle

    values = np.asarray(values, float)
    xe, ye = cell_edges(alphas), cell_edges(omegas)
    fin = values[np.isfinite(values)]
    lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 0.0)
    if lo < 0 < hi:  # each side of 0 on its own round scale (the colour of 0 is fixed),
        # neither under a fifth of the other (a tiny side would be stretched to full colour)
        big = max(-lo, hi)
        lim_lo, lim_hi = nice_limit(max(-lo, big / 5))[0], nice_limit(max(hi, big / 5))[0]
    else:
        lim_lo = lim_hi = nice_limit(max(abs(lo), abs(hi)))[0]
    k = nice_limit(max(lim_lo, lim_hi))[1]
    scale = 10.0**k
    ax.add_patch(
        Rectangle(
            (xe[0], ye[0]),
            xe[-1] - xe[0],
            ye[-1] - ye[0],
            facecolor="0.88",
            edgecolor="0.55",
            hatch="///",
            lw=0,
            zorder=0,
        )
    )
    if sequential:
        norm = Normalize(0.0, lim_hi / scale)
        ticks = np.linspace(0.0, lim_hi, 5)
    else:
        norm = TwoSlopeNorm(0.0, -lim_lo / scale, lim_hi / scale)
        ticks = np.array([-lim_lo, -lim_lo / 2, 0.0, lim_hi / 2, lim_hi])
    pc = ax.pcolormesh(xe, ye, values / scale, cmap=cmap, norm=norm, zorder=1)
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(ye[0], ye[-1])
    cb = fig.colorbar(pc, ax=ax, pad=0.02)
    cb.set_ticks(ticks / scale)
    cb.ax.yaxis.set_major_formatter("{x:.3g}")
    cb.set_label(label + (rf"  [$\times 10^{{{k}}}$]" if k else ""))
    if np.isnan(values).any():
        cb.ax.legend(
            handles=[Patch(facecolor="0.88", edgecolor="0.55", hatch="///", label="no data")],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.01),
            fontsize=7,
            frameon=False,
            handlelength=1.2,
        )
    return cb


def draw_threshold_lines(ax, rows, *, keys=("alpha_c", "alpha_l"), published=None):
    """The theory's α_c(ω) / α_l(ω) from ``rows`` (dicts with ``omega`` and ``keys``; NaN and
    None skipped) as lines, clipped to the frame; ``published``: ``{key: ((ω, α), ...)}``
    drawn as open markers."""
    styles = {
        "alpha_c": dict(color="k", ls="-", marker="o", label=r"$\alpha_c(\omega)$, theory"),
        "alpha_l": dict(color="k", ls="--", marker="s", label=r"$\alpha_l(\omega)$, theory"),
    }
    pub_style = {
        "alpha_c": dict(marker="x", label=r"$\alpha_c$, authors' list"),
        "alpha_l": dict(marker="+", label=r"$\alpha_l$, authors' list"),
    }
    rows = sorted(rows, key=lambda r: r["omega"])
    for key in keys:
        pts = [
            (r[key], r["omega"]) for r in rows if r.get(key) is not None and math.isfinite(r[key])
        ]
        if pts:
            ax.plot(*zip(*pts), ms=3.5, lw=1.5, clip_on=True, **styles[key])
        if published and key in published:
            w, a = zip(*published[key])
            ax.plot(a, w, ls="none", color="0.2", ms=6, mew=1.2, **pub_style[key])


def legend_below(ax, ncol=2):
    """The legend under the axes (it covers no cell of a heat map); none without labels."""
    if not ax.get_legend_handles_labels()[0]:
        return
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=ncol, frameon=False)


def plot_phase_heatmap(rows, heat: dict, p, path) -> Path:
    """Write the figure; ``heat`` = dict(alphas, omegas, delta_eps_t (n_omega, n_alpha), d,
    seeds, method); ``rows`` = theory rows (omega, alpha_c, alpha_l); ``p`` = ERMParams."""
    use_agg()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    draw_heatmap(
        fig,
        ax,
        heat["alphas"],
        heat["omegas"],
        heat["delta_eps_t"],
        label=rf"simulated $\Delta\varepsilon_t$ (d={heat['d']}, {heat['seeds']} seed(s), "
        f"{heat['method']})",
    )
    draw_threshold_lines(ax, rows)
    ax.set_xlabel(r"sample ratio $\alpha = n/d$")
    ax.set_ylabel(r"teacher mixing $\omega$ (0 semantic, 1 positional)")
    legend_below(ax)
    ax.set_title(
        rf"$\sigma$={p.sigma:g}, $\lambda$={p.lam:g}: $\Delta\varepsilon_t = \varepsilon_t$(sem)"
        r" $-$ $\varepsilon_t$(pos); blue = semantic minimiser lower",
        fontsize=8,
    )
    fig.tight_layout()
    out = atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return Path(out)
