"""Phase diagram of the ERM model with the simulated Δε_t heat map under the theory lines
(``theory erm phase-diagram --heatmap --plot FIG``).

Heat map: Δε_t = ε_t(semantic init) − ε_t(positional init) per (α, ω), mean over seeds, from
:func:`~theory.attention.figures.simulation.simulated_delta_eps_t`
(negative: the semantic minimiser has the lower training loss).  Lines: the theory's α_c(ω)
(ε_t(sem) = ε_t(pos)) and α_l(ω) (ε_g of the global minimiser = linear baseline), the rows of
:func:`theory.attention.phase_diagram`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from theory._util import atomic_savefig
from theory.plotting import use_agg


def plot_phase_heatmap(rows, heat: dict, p, path) -> Path:
    """Write the figure; ``heat`` = dict(alphas, omegas, delta_eps_t (n_omega, n_alpha), d,
    seeds, method); ``rows`` = theory rows (omega, alpha_c, alpha_l); ``p`` = ERMParams."""
    use_agg()
    import matplotlib.pyplot as plt

    alphas, omegas = np.asarray(heat["alphas"], float), np.asarray(heat["omegas"], float)
    mean = np.asarray(heat["delta_eps_t"], float)
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    vmax = np.nanmax(np.abs(mean)) if np.isfinite(mean).any() else 1.0
    A, W = np.meshgrid(alphas, omegas)
    pc = ax.pcolormesh(A, W, mean, cmap="RdBu_r", vmin=-vmax, vmax=vmax, shading="nearest")
    fig.colorbar(
        pc,
        ax=ax,
        label=rf"simulated $\Delta\varepsilon_t$ = $\varepsilon_t$(sem) − "
        rf"$\varepsilon_t$(pos) (d={heat['d']}, {heat['seeds']} "
        f"seed(s), {heat['method']})",
    )
    rows = sorted(rows, key=lambda r: r["omega"])
    for key, style, name in (
        ("alpha_c", "k-o", r"$\alpha_c(\omega)$ theory"),
        ("alpha_l", "k--s", r"$\alpha_l(\omega)$ theory"),
    ):
        pts = [
            (r[key], r["omega"]) for r in rows if r.get(key) is not None and math.isfinite(r[key])
        ]
        if pts:
            ax.plot(*zip(*pts), style, ms=4, lw=1.5, label=name)
    ax.set_xlim(min(alphas.min(), ax.get_xlim()[0]), max(alphas.max(), ax.get_xlim()[1]))
    ax.set_xlabel(r"sample ratio $\alpha = n/d$")
    ax.set_ylabel(r"teacher mixing $\omega$ (0 semantic, 1 positional)")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(
        rf"$\sigma$={p.sigma:g}, $\lambda$={p.lam:g}: blue = semantic minimiser lower "
        "(simulation), lines = theory",
        fontsize=8,
    )
    fig.tight_layout()
    out = atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return Path(out)
