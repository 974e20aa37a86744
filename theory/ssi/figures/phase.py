"""Figures of the SGD theory (docs/ssi.md sections 6 and 8).

* :func:`plot_phase_diagram` - the six regions of the (a, omega) diagram, the exact boundaries
  of :func:`theory.ssi.boundaries` overlaid.
* :func:`plot_landscape` - R(e, m) on the disk for the positional-semantic model with optional
  trajectories (ODE results, SGD results or dicts with ``e`` and ``m``).
* :func:`disk_landscape`, :func:`plot_trace_landscapes` - R(e, m) - R(0, 0) on the disk of an
  L = 2 trace-reduced attention model (Tr and Tr/sqrt(L)) without and with P_1 = -P_2, the
  Hessian at 0 printed and the steepest-descent direction drawn (paper Figs. 1 and 2).

``FIGURES`` (the reproduction hook): "sgd-phase-diagram", "sgd-landscape",
"sgd-fig1-landscapes", "sgd-flatness".
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
        if pdg.B is None:
            rows = [ssi.boundaries(x, n=pdg.nodes) for x in ab]
        else:  # the (s, omega) diagram of A(s) = softmax_row(s B), encoding direction b
            pe = np.outer(pdg.b, pdg.b)
            As = ssi.strength_matrix(ab, pdg.B)
            rows = [ssi.boundaries(A=Ax, n=pdg.nodes, pe=pe) for Ax in As]
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
    enc = "$P_1=-P_2$" if tuple(pdg.b) == (1.0, -1.0) else "$P_1=P_2$"
    if pdg.B is None:
        ax.set_xlabel("positional strength a of $A_a$")
        teacher = ""
    else:
        ax.set_xlabel("strength s of A(s) = softmax_row(s B)")
        teacher = f", B = {np.round(np.asarray(pdg.B), 3).tolist()}"
    ax.set_ylabel(r"positional weight $\omega$")
    ax.set_title(
        f"SGD phase diagram, attention L=2, {enc}, identity reduction{teacher}\n"
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


def _steepest_arrows(ax, v, lw: float) -> None:
    """Two black arrows from the origin along +-v (the steepest-descent direction)."""
    for sgn in (1, -1):
        ax.annotate(
            "",
            xy=(sgn * v[0], sgn * v[1]),
            xytext=(0, 0),
            arrowprops=dict(arrowstyle="-|>", color="k", lw=lw),
        )


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
    from matplotlib.ticker import MaxNLocator

    land = ssi.landscape(a, omega, n_grid=n_grid)
    eg, mg, R = land.e, land.m, land.risk
    lv = MaxNLocator(nbins=24).tick_values(np.nanmin(R), np.nanmax(R))
    cs = ax.contourf(eg, mg, R, levels=lv, cmap="viridis")
    cb = plt.colorbar(cs, ax=ax, label=r"population risk $R(e, m)$", shrink=0.7)
    cb.locator = MaxNLocator(nbins=6)
    cb.update_ticks()
    th = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(th), np.sin(th), color="k", lw=0.8)
    ax.plot([0, 0], [1, -1], "w*", ms=12, mec="k", ls="none", label="semantic (0, ±1)")
    ax.plot([1, -1], [0, 0], "r*", ms=12, mec="k", ls="none", label="positional (±1, 0)")
    # steepest descent at the origin: R is even in e and in m there, so the Hessian is
    # diagonal (docs/ssi.md eq. 34) and the direction is an axis
    cr = ssi.pd_criteria(a, omega)
    ree, rmm = float(cr.Ree00), float(cr.Rmm00)
    if min(ree, rmm) < 0:
        _steepest_arrows(ax, (0.45, 0.0) if ree < rmm else (0.0, 0.45), lw=2.0)
        ax.plot(
            [],
            [],
            color="k",
            lw=2,
            label=f"steepest descent at 0 (∂²R: e {ree:.3f}, m {rmm:.3f})",
        )
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
            how = "exact reduced chain" if "reduced" in str(meta.get("method", "")) else "full d"
            lab = None if n_sgd else f"SGD trajectories ({how})"
        else:
            lab = None if n_ode else "ODE (theory)"
        first = n_sgd + n_ode == 0
        n_sgd += int(is_sgd)
        if is_sgd:
            col = "orange"
            ax.plot(e, m, color=col, lw=0.7, alpha=0.6, label=lab)
        else:
            col = ode_colors[n_ode % len(ode_colors)]
            ax.plot(e, m, color=col, lw=1.8, label=lab)
            n_ode += 1
        ax.plot(e[0], m[0], "o", ms=5, mfc="none", mec=col, label="start" if first else None)
        ax.plot(e[-1], m[-1], "s", ms=5, mfc=col, mec="k", label="end" if first else None)
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
            atomic_savefig(fig, path, dpi=150, bbox_inches="tight")
        plt.close(fig)
    return ax


FLAT_TARGET = "4/3 + He4(z1) + 2*He4(z2)"
HE2_TARGET = "He2(z1) + He2(z2)"
TRACE_NORMS = {"sum": "Tr", "sqrtL": "Tr/√L"}
PE_LABELS = {"none": "no PE", "opposite": "$P_1=-P_2$"}


@dataclass(frozen=True, kw_only=True)
class DiskLandscape(Result):
    """R(e, m) - R(0, 0) of one L = 2 trace-reduced attention model on a polar grid of the disk
    e^2 + m^2 <= 1 (``e``, ``m``, ``dR``: (n_r, n_theta) arrays), its flatness at the origin
    (``flat``) and its Hessian there in the published order [[H_mm, H_me], [H_em, H_ee]]
    (``hessian_pub``; without encoding R does not depend on e and H_ee = H_me = 0)."""

    e: np.ndarray = field(default=None, repr=False)
    m: np.ndarray = field(default=None, repr=False)
    dR: np.ndarray = field(default=None, repr=False)
    flat: FlatnessResult | None = None
    hessian_pub: np.ndarray = field(default=None, repr=False)


def disk_landscape(
    target: str,
    pe: str,
    trace_norm: str,
    n_r: int = 31,
    n_theta: int = 97,
    radius: float = 1.0,
) -> DiskLandscape:
    """R(e, m) - R(0, 0) of AttentionModel(target, L=2, pe, reduction="trace", trace_norm) on
    the polar grid r in [0, radius] (n_r), theta in [0, 2 pi] (n_theta) (model.risk at every node;
    without encoding R is a function of m only), and its flatness
    (:func:`theory.ssi.flatness`)."""
    model = ssi.AttentionModel(target, 2, pe=pe, reduction="trace", trace_norm=trace_norm)
    if not 0 < radius <= 1:
        raise ValueError(f"radius must lie in (0, 1], got {radius}")
    r = np.linspace(0.0, radius, n_r)
    th = np.linspace(0.0, 2 * np.pi, n_theta)
    E = np.outer(r, np.cos(th))
    M = np.outer(r, np.sin(th))
    if model.r == 0:
        r0 = model.risk(None, 0.0)
        R = np.array([model.risk(None, v) for v in M.ravel()]) - r0
    else:
        r0 = model.risk(0.0, 0.0)
        R = np.array([model.risk(e, m) for e, m in zip(E.ravel(), M.ravel())]) - r0
    fl = ssi.flatness(model)
    H = np.asarray(fl.hessian, float)
    if model.r == 0:
        Hp = np.array([[H[0, 0], 0.0], [0.0, 0.0]])
    else:  # flatness coordinates (e, m) -> published order (m, e)
        Hp = H[::-1, ::-1].copy()
    return DiskLandscape(
        e=E,
        m=M,
        dR=R.reshape(E.shape),
        flat=fl,
        hessian_pub=Hp,
        params=dict(
            target=target, pe=pe, trace_norm=trace_norm, n_r=n_r, n_theta=n_theta, radius=radius
        ),
    )


def _fmt_h(x: float) -> str:
    return "0" if abs(x) < 5e-5 else f"{x:.3g}"


def plot_disk_landscape(land: DiskLandscape, ax, *, symlog: float | None = None) -> None:
    """One panel: R - R(0, 0) on the disk (diverging colours, white at 0; colour bar with round
    ticks; ``symlog``: symmetric logarithmic levels +-10^k down to this threshold, which shows
    how flat R is near 0), the Hessian at 0 printed as [[H_mm, H_me], [H_em, H_ee]], kappa, and
    the steepest-descent direction at 0 (eigenvector of the most negative Hessian eigenvalue)."""
    plt = _plt()
    from matplotlib.colors import BoundaryNorm, TwoSlopeNorm
    from matplotlib.ticker import MaxNLocator

    R = land.dR
    lo, hi = float(np.nanmin(R)), float(np.nanmax(R))
    if symlog:
        top = math.ceil(math.log10(max(abs(lo), abs(hi), symlog)))
        dec = 10.0 ** np.arange(math.floor(math.log10(symlog)), top + 1)
        levels = np.concatenate([-dec[::-1], [0.0], dec])
        norm = BoundaryNorm(levels, 256)
        cs = ax.contourf(land.e, land.m, R, levels=levels, cmap="RdBu_r", norm=norm, extend="both")
        cb = plt.colorbar(cs, ax=ax, shrink=0.8, ticks=levels[::2])
        cb.ax.set_yticklabels([f"{v:g}" for v in levels[::2]], fontsize=7)
    else:
        levels = MaxNLocator(nbins=14).tick_values(lo, hi)
        tiny = 1e-9 * max(abs(lo), abs(hi), 1e-300)
        norm = TwoSlopeNorm(0.0, min(lo, -tiny), max(hi, tiny))  # white at R = R(0, 0)
        cs = ax.contourf(land.e, land.m, R, levels=levels, cmap="RdBu_r", norm=norm)
        cb = plt.colorbar(cs, ax=ax, shrink=0.8)
        cb.locator = MaxNLocator(nbins=5)
        cb.update_ticks()
    if lo < 0 < hi:
        ax.contour(land.e, land.m, R, levels=[0.0], colors="k", linewidths=0.6)
    cb.set_label("R(e, m) − R(0, 0)", fontsize=8)
    rad = land.params["radius"]
    th = np.linspace(0, 2 * np.pi, 300)
    ax.plot(rad * np.cos(th), rad * np.sin(th), color="k", lw=0.8)
    Hp = land.hessian_pub
    # steepest descent at 0 in (e, m) coordinates
    He = np.array([[Hp[1, 1], Hp[1, 0]], [Hp[0, 1], Hp[0, 0]]])
    lam, V = np.linalg.eigh(He)
    if lam[0] < -1e-9:
        _steepest_arrows(ax, V[:, 0] * 0.55 * rad, lw=1.6)
        arrow = "arrows: steepest descent at 0"
    else:
        arrow = "no negative curvature at 0"
    ax.plot([0], [0], "ko", ms=3)
    k = land.flat.kappa
    txt = (
        f"H(0) = [[{_fmt_h(Hp[0, 0])}, {_fmt_h(Hp[0, 1])}],\n"
        f"          [{_fmt_h(Hp[1, 0])}, {_fmt_h(Hp[1, 1])}]]\n"
        f"κ = {k}; {arrow}"
    )
    ax.text(
        0.0,
        -1.12 * rad,
        txt,
        ha="center",
        va="top",
        fontsize=7,
        family="monospace",
        bbox=dict(facecolor="white", edgecolor="0.6", alpha=0.9),
    )
    ax.set_aspect("equal")
    ax.set_xlim(-1.05 * rad, 1.05 * rad)
    ax.set_ylim(-1.55 * rad, 1.05 * rad)
    ax.set_xlabel("positional overlap e", fontsize=8)
    ax.set_ylabel("semantic overlap m", fontsize=8)
    p = land.params
    ax.set_title(f"{TRACE_NORMS[p['trace_norm']]}, {PE_LABELS[p['pe']]}", fontsize=9)


def trace_landscapes(target: str, n_r: int, n_theta: int, radius: float = 1.0) -> dict:
    """{(trace_norm, pe): DiskLandscape} for both trace normalisations, with and without
    P_1 = -P_2."""
    return {
        (tn, pe): disk_landscape(target, pe, tn, n_r, n_theta, radius)
        for tn in TRACE_NORMS
        for pe in PE_LABELS
    }


def plot_trace_landscapes(
    lands: dict, target_label: str, path, *, symlog: float | None = None
) -> None:
    """2 x 2 panels: rows Tr and Tr/sqrt(L), columns without / with P_1 = -P_2."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(9.6, 10.4))
    for i, tn in enumerate(TRACE_NORMS):
        for j, pe in enumerate(PE_LABELS):
            plot_disk_landscape(lands[(tn, pe)], axes[i, j], symlog=symlog)
    fig.suptitle(
        f"population risk of tied attention (theory), g = {target_label}, L = 2, trace "
        "reduction\nexact Hermite coefficients x Gauss-Hermite student moments; H(0) in the "
        "published order [[H_mm, H_me], [H_em, H_ee]]",
        fontsize=9,
    )
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=130)
    plt.close(fig)


def _landscape_numbers(lands: dict, fig: str, with_kappa: bool) -> list:
    how = (
        "theory.ssi.flatness: exact Hermite coefficients x 2-D Gauss-Hermite student moments "
        "(64^2 nodes); L = 2, trace reduction, Hessian in the reduced coordinate e of P_1 = -P_2"
    )
    out = []
    for (tn, pe), land in lands.items():
        Hp = land.hessian_pub
        tag = f"{fig} {TRACE_NORMS[tn]}, {'no PE' if pe == 'none' else 'P1=-P2'}"
        out.append(dict(name=f"{tag}: H_mm(0)", value=float(Hp[0, 0]), how=how))
        if pe != "none":
            out.append(dict(name=f"{tag}: H_ee(0)", value=float(Hp[1, 1]), how=how))
        if with_kappa:
            out.append(dict(name=f"{tag}: kappa", value=land.flat.kappa, how=how))
    return out


# --------------------------------------------------------------------------- reproduction hook


@reproduces(
    "arnaboldi2025",
    "Fig. 4",
    "the (a, omega) phase diagram of the SGD fixed points, with its exact boundaries",
    ["sgd-phase-diagram.png"],
    cost=6,
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
    cost=5,
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
    "Fig. 1",
    "R(e, m) of He2(z1) + He2(z2) on the disk without and with P1 = -P2, Hessian at 0 printed, "
    "for Tr and Tr/sqrt(L)",
    ["sgd-fig1-landscapes.png"],
    cost=20,
)
def _fig_landscapes_he2(out_dir: Path, quick: bool):
    lands = trace_landscapes(HE2_TARGET, *((21, 73) if quick else (51, 181)))
    path = Path(out_dir) / "sgd-fig1-landscapes.png"
    plot_trace_landscapes(lands, "He2(z1) + He2(z2)", path)
    nums = _landscape_numbers(lands, "Fig. 1", with_kappa=False)
    for n in nums:
        n["how"] += "; published (Tr): H_mm = -2.2, H_ee = 0 (no PE) / 2.7 (P1 = -P2)"
    return dict(files=[str(path)], numbers=nums)


@reproduces(
    "arnaboldi2025",
    "Fig. 2",
    "flatness at 0 of 4/3 + He4(z1) + 2 He4(z2) as 2-D landscapes R(e, m) without and with "
    "P1 = -P2, for Tr and Tr/sqrt(L)",
    ["sgd-flatness.png"],
    cost=26,
)
def _fig_flatness(out_dir: Path, quick: bool):
    # the disk of radius 0.6 around the start, symmetric-log levels: the flatness is visible
    lands = trace_landscapes(FLAT_TARGET, *((21, 73) if quick else (51, 181)), radius=0.6)
    path = Path(out_dir) / "sgd-flatness.png"
    plot_trace_landscapes(lands, "4/3 + He4(z1) + 2 He4(z2)", path, symlog=1e-4)
    nums = _landscape_numbers(lands, "Fig. 2", with_kappa=True)
    for n in nums:
        n["how"] += "; published: H = 0 (no PE), H_ee = -1.1 with P1 = -P2 (kappa 4 -> 2)"
    return dict(files=[str(path)], numbers=nums)


FIGURES = {
    "sgd-phase-diagram": _fig_phase,
    "sgd-landscape": _fig_landscape,
    "sgd-fig1-landscapes": _fig_landscapes_he2,
    "sgd-flatness": _fig_flatness,
}
