"""Figures of the SGD theory (docs/ssi.md sections 6 and 8).

* :func:`plot_phase_diagram` - the six regions of the (a, omega) diagram, the exact boundaries
  of :func:`theory.ssi.boundaries` overlaid.
* :func:`plot_landscape` - R(e, m) on the disk for the positional-semantic model with optional
  trajectories (ODE results, SGD results or dicts with ``e`` and ``m``).
* :func:`plot_flatness` - R along e near the origin with and without positional encoding.

``FIGURES`` (the reproduction hook): "sgd-phase-diagram", "sgd-landscape", "sgd-flatness".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from theory import ssi
from theory._util import atomic_savefig
from theory.plotting import reproduces, use_agg
from theory.results import Result
from theory.ssi.flatness import FlatnessResult

REGION_COLORS = ("#4c72b0", "#8fb3e0", "#c44e52", "#55a868", "#dd8452", "#8c2d04")


def _plt():
    use_agg()
    import matplotlib.pyplot as plt

    return plt


def plot_phase_diagram(pdg, path=None, ax=None, *, boundaries=True, n_boundary=25):
    """Draw the region map of a :func:`theory.ssi.phase_diagram` result ``pdg``; overlay the
    flip lines from :func:`theory.ssi.boundaries` on ``n_boundary`` values of a."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    plt = _plt()
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7.2, 5.4))
    a, om, reg = pdg.a, pdg.omega, pdg.region
    cmap = ListedColormap(REGION_COLORS)
    ax.pcolormesh(
        a,
        om,
        np.ma.masked_less(reg, 0).T,
        cmap=cmap,
        vmin=-0.5,
        vmax=5.5,
        shading="nearest",
        rasterized=True,
    )
    handles = [Patch(color=REGION_COLORS[i], label=name) for i, name in enumerate(ssi.REGIONS)]
    if np.any(reg < 0):
        handles.append(
            Patch(
                facecolor="white", edgecolor="0.6", label="neither candidate is a boundary minimum"
            )
        )
    if pdg.global_check is not None and not np.all(pdg.global_check):
        bad = (~np.asarray(pdg.global_check)).astype(float).T
        ax.contourf(a, om, bad, levels=[0.5, 1.5], colors="none", hatches=["xxxx"])
        handles.append(
            Patch(
                facecolor="none",
                edgecolor="k",
                hatch="xxxx",
                label="another boundary minimum is lower (disk scan)",
            )
        )
    if boundaries:
        ab = np.linspace(a.min(), a.max(), n_boundary)
        rows = [ssi.boundaries(x, n=pdg.nodes) for x in ab]
        styles = {
            "omega_steepest_switch": ("k", "--", "steepest direction switches"),
            "omega_global_switch": ("k", "-", "global minimum switches"),
            "omega_positional_min_appears": ("w", ":", "positional minimum appears"),
            "omega_semantic_min_disappears": ("w", "-.", "semantic minimum disappears"),
        }
        from matplotlib.lines import Line2D

        for key, (c, ls, lab) in styles.items():
            y = np.array([np.nan if getattr(r, key) is None else getattr(r, key) for r in rows])
            ax.plot(ab, y, color=c, ls=ls, lw=1.6)
            handles.append(
                Line2D(
                    [],
                    [],
                    color=c if c != "w" else "0.5",
                    ls=ls,
                    label=f"theory (Brent root): {lab}",
                )
            )
    ax.set_xlim(a.min(), a.max())
    ax.set_ylim(om.min(), om.max())
    ax.set_xlabel("positional strength a")
    ax.set_ylabel(r"positional weight $\omega$")
    ax.set_title(
        f"SGD phase diagram, attention L=2, $P_1=-P_2$, identity reduction "
        f"({len(a)}x{len(om)} grid, theory)",
        fontsize=9,
    )
    ax.legend(handles=handles, fontsize=6.5, loc="lower left", framealpha=0.85)
    if own:
        fig.tight_layout()
        if path is not None:
            atomic_savefig(fig, path, dpi=150)
        plt.close(fig)
    return ax


def plot_landscape(
    a: float, omega: float, trajectories=None, ax=None, *, n_grid: int = 161, path=None, labels=None
):
    """Contour plot of R(e, m) of the positional-semantic model on the disk e^2 + m^2 <= 1 with
    the candidate minima marked; ``trajectories``: iterable of objects/dicts with ``e`` and ``m``
    arrays (ODE or SGD results; SGD ones drawn thin and semi-transparent when their
    ``metadata['method']`` mentions SGD)."""
    plt = _plt()
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(6.0, 6.4))
    land = ssi.landscape(a, omega, n_grid=n_grid)
    eg, mg, R = land.e, land.m, land.risk
    lv = np.nanpercentile(R, np.linspace(0, 100, 30))
    cs = ax.contourf(eg, mg, R, levels=np.unique(lv), cmap="viridis")
    plt.colorbar(cs, ax=ax, label=r"population risk $R(e, m)$", shrink=0.7)
    th = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(th), np.sin(th), color="k", lw=0.8)
    ax.plot([0, 0], [1, -1], "w*", ms=12, mec="k", ls="none", label="semantic (0, ±1)")
    ax.plot([1, -1], [0, 0], "r*", ms=12, mec="k", ls="none", label="positional (±1, 0)")
    ode_colors = ("white", "cyan", "magenta", "yellow")
    n_ode = n_sgd = 0
    for i, tr in enumerate(trajectories or []):
        get = (
            (lambda k, tr=tr: tr[k]) if isinstance(tr, dict) else (lambda k, tr=tr: getattr(tr, k))
        )
        e = np.asarray(get("e"), float)
        if e.ndim > 1:
            e = e[:, 0]
        m = np.asarray(get("m"), float)
        meta = tr.get("metadata", {}) if isinstance(tr, dict) else getattr(tr, "metadata", {})
        is_sgd = "SGD" in str((meta or {}).get("method", ""))
        if labels is not None:
            lab = labels[i]
        elif is_sgd:
            lab = None if n_sgd else "SGD trajectories (simulation)"
        else:
            lab = None if n_ode else "ODE (theory)"
        n_sgd += int(is_sgd)
        if is_sgd:
            ax.plot(e, m, color="orange", lw=0.7, alpha=0.6, label=lab)
        else:
            ax.plot(e, m, color=ode_colors[n_ode % len(ode_colors)], lw=1.8, label=lab)
            n_ode += 1
    ax.set_aspect("equal")
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel(r"positional overlap $e = p\cdot w/\sqrt{d}$")
    ax.set_ylabel(r"semantic overlap $m = w^*\cdot w/d$")
    ax.set_title(f"R(e, m), a = {a}, omega = {omega} (theory)", fontsize=9)
    ax.legend(
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=2,
        facecolor="0.75",
        framealpha=1.0,
    )
    if own:
        fig.tight_layout()
        if path is not None:
            atomic_savefig(fig, path, dpi=150)
        plt.close(fig)
    return ax


FLAT_TARGET = "4/3 + He4(z1) + 2*He4(z2)"


@dataclass(frozen=True, kw_only=True)
class FlatnessCurves(Result):
    """R(e, 0) - R(0, 0) along e with the encoding (``R_e_pe``) and R(0, m) - R(0, 0) along m
    (``R_m``, the same with and without encoding) on the grid ``x``, and the flatness of both
    models (``flat_pe``, ``flat_nope``)."""

    x: np.ndarray = field(default=None, repr=False)
    R_e_pe: np.ndarray = field(default=None, repr=False)
    R_m: np.ndarray = field(default=None, repr=False)
    flat_pe: FlatnessResult | None = None
    flat_nope: FlatnessResult | None = None


def flatness_curves(e_max: float = 0.6, n: int = 61, trace_norm: str = "sqrtL") -> FlatnessCurves:
    """The curves of :class:`FlatnessCurves` for the target 4/3 + He4(z1) + 2 He4(z2), L = 2,
    trace reduction, P_1 = -P_2 (docs/ssi.md section 6)."""
    pe = ssi.AttentionModel(FLAT_TARGET, 2, pe="opposite", reduction="trace", trace_norm=trace_norm)
    nope = ssi.AttentionModel(FLAT_TARGET, 2, pe="none", reduction="trace", trace_norm=trace_norm)
    x = np.linspace(-e_max, e_max, n)
    r0 = pe.risk(0.0, 0.0)
    Re = np.array([pe.risk(v, 0.0) for v in x]) - r0
    Rm = np.array([nope.risk(None, v) for v in x]) - nope.risk(None, 0.0)
    return FlatnessCurves(
        x=x,
        R_e_pe=Re,
        R_m=Rm,
        flat_pe=ssi.flatness(pe),
        flat_nope=ssi.flatness(nope),
        params=dict(e_max=e_max, n=n, trace_norm=trace_norm),
    )


def plot_flatness(path=None, trace_norm: str = "sqrtL") -> FlatnessCurves:
    plt = _plt()
    c = flatness_curves(trace_norm=trace_norm)
    fig, ax = plt.subplots(figsize=(6.0, 4.3))
    k_pe, H_pe, k_no = c.flat_pe.kappa, c.flat_pe.hessian, c.flat_nope.kappa
    ax.plot(
        c.x,
        c.R_e_pe,
        lw=1.8,
        label=rf"theory, with PE: $R(e,0)-R(0,0)$ ($\kappa$={k_pe}, "
        rf"$\partial_e^2R$={H_pe[0, 0]:.4f})",
    )
    ax.plot(c.x, c.R_m, lw=1.8, ls="--", label=rf"theory, no PE: $R(m)-R(0)$ ($\kappa$={k_no})")
    x = c.x
    ax.plot(
        x,
        0.5 * H_pe[0, 0] * x**2,
        color="0.5",
        lw=0.8,
        ls=":",
        label=r"quadratic term $\frac{1}{2}\partial_e^2R\,e^2$",
    )
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("overlap (e with PE; m without)")
    ax.set_ylabel("R - R(origin)")
    norm = "Tr/sqrt(L)" if trace_norm == "sqrtL" else "Tr"
    ax.set_title(
        f"flatness: g = 4/3 + He4(z1) + 2He4(z2), L=2, {norm} reduction, "
        r"$P_1=-P_2$",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        atomic_savefig(fig, path, dpi=150)
    plt.close(fig)
    return c


# --------------------------------------------------------------------------- reproduction hook


@reproduces(
    "arnaboldi2025",
    "Fig. 4",
    "the (a, omega) phase diagram of the SGD fixed points, with its exact boundaries",
    ["sgd-phase-diagram.png"],
)
def _fig_phase(out_dir: Path, quick: bool):
    t0 = time.time()
    n = 60 if quick else 200
    pdg = ssi.phase_diagram(np.linspace(0.7, 1.0, n), np.linspace(0.4, 1.0, n), check_global=True)
    path = Path(out_dir) / "sgd-phase-diagram.png"
    plot_phase_diagram(pdg, path=path, n_boundary=13 if quick else 31)
    b = ssi.boundaries(1.0)
    how = (
        f"exact criteria (2-D Gauss-Hermite, {b.nodes}^2 nodes, converged to ~1e-9), "
        f"Brent root at a = 1; {n}x{n} grid, {time.time() - t0:.0f} s"
    )
    keys = (
        "omega_steepest_switch",
        "omega_global_switch",
        "omega_positional_min_appears",
        "omega_semantic_min_disappears",
    )
    nums = [dict(name=f"a=1: {k}", value=getattr(b, k), how=how) for k in keys]
    nums.append(
        dict(
            name="grid cells where a third boundary minimum is lower",
            value=int(np.sum(~pdg.global_check)),
            how=f"polar disk scan (41 radii x 164 angles) of the Mehler/Chebyshev "
            f"risk tables on the {n}x{n} grid",
        )
    )
    return dict(files=[str(path)], numbers=nums)


@reproduces(
    "arnaboldi2025",
    "Fig. 5 left",
    "the risk landscape R(e, m) at a = 1, omega = 0.67 with ODE trajectories",
    ["sgd-landscape-a1-omega067.png"],
)
def _fig_landscape(out_dir: Path, quick: bool):
    a, om = 1.0, 0.67
    model = ssi.ps_model(a, om)
    d = 1000
    trs = []
    labels = []
    starts = [(1.0, 1.0), (0.2, 1.0), (1.0, 0.2)]
    for e0, m0 in starts[: 2 if quick else 3]:
        r = ssi.integrate_ode(
            model, lr=0.05, d=d, e0=e0 / math.sqrt(d), m0=m0 / math.sqrt(d), n_out=120
        )
        trs.append(r)
        labels.append(f"ODE from (e0,m0)=({e0:g},{m0:g})/sqrt(d): {r.minimum}")
    path = Path(out_dir) / "sgd-landscape-a1-omega067.png"
    plot_landscape(a, om, trs, path=path, labels=labels, n_grid=101 if quick else 201)
    return dict(
        files=[str(path)],
        numbers=[
            dict(
                name="ODE end point from diagonal start (a=1, omega=0.67, lr=0.05, d=1000)",
                value=trs[0].minimum,
                how="ps engine: Mehler series in m (order 40; K to order 16) + Chebyshev "
                "tables in e",
            )
        ],
    )


@reproduces(
    "arnaboldi2025",
    "Fig. 2",
    "flatness at 0 of 4/3 + He4(z1) + 2 He4(z2) without and with a positional encoding",
    ["sgd-flatness.png"],
)
def _fig_flatness(out_dir: Path, quick: bool):
    path = Path(out_dir) / "sgd-flatness.png"
    c = plot_flatness(path=path)
    k_pe, H = c.flat_pe.kappa, c.flat_pe.hessian
    return dict(
        files=[str(path)],
        numbers=[
            dict(
                name="kappa without PE",
                value=c.flat_nope.kappa,
                how="exact Hermite coefficients x 2-D Gauss-Hermite student moments (64^2)",
            ),
            dict(name="kappa with PE P1=-P2", value=k_pe, how="same, Tr/sqrt(L) reduction"),
            dict(name="d2R/de2 at 0 with PE", value=float(H[0, 0]), how="same"),
        ],
    )


FIGURES = {
    "sgd-phase-diagram": _fig_phase,
    "sgd-landscape": _fig_landscape,
    "sgd-flatness": _fig_flatness,
}
