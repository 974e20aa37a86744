"""Figures: theory lines over simulation points.

Shared pieces live here; each area has its own module (``theory.attention.figures.simulation``,
``theory.ssi.figures.sgd``, ``theory.histogram.figures``).  The one-call overlay for users:

>>> from theory.plotting import overlay
>>> overlay(ax, theory_rows, sim_rows, x="alpha", y="eps_g")   # doctest: +SKIP

``theory_rows`` / ``sim_rows`` are result objects (anything with ``row()``/``to_dict()``) or
dicts with the same field names; simulation rows may carry ``<y>_err`` (error bar) or several
seeds per x (mean and standard error are then computed).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from theory.published import PAPERS as _PUBLISHED_PAPERS

THEORY_STYLE = dict(lw=1.8)

#: Where a reproduced figure comes from: one of the two papers (:data:`theory.published.PAPERS`)
#: or ``beyond`` them (this package's own checks and extensions).
PAPERS = {
    **_PUBLISHED_PAPERS,
    "beyond": "not in either paper: a check or extension of this package",
}


@dataclass(frozen=True)
class Reproduces:
    """What a ``theory reproduce`` piece reproduces: ``paper`` (a key of :data:`PAPERS`), the
    figure ``ref`` in it (``"Fig. 3"``, ``"App. finite-size"``), one line on ``what`` it shows,
    the ``files`` it writes (names relative to the output folder), and ``cut``: what its full
    mode runs less of than the published protocol (seeds; d, grids and step counts are kept)
    and what the published count would cost ("" when nothing is cut); ``cost``: what its full
    mode costs in a whole full run from nothing, in seconds of one worker of ``--workers 2`` on
    a 2-core machine, as measured (BENCHMARKS.md, "Full run from nothing"; a product that
    several pieces share, such as the histogram models or the α_c lines, counts in the pieces
    that made it in that run), None: not said.  A pool starts the pieces that have no recorded
    run in the output folder longest first by it, and the full SUMMARY.md's compute budget
    counts at least it for each piece."""

    paper: str
    ref: str
    what: str
    files: tuple[str, ...]
    cut: str = ""
    cost: float | None = None


def reproduces(paper: str, ref: str, what: str, files, *, cut: str = "", cost=None):
    """Decorator for a figure function: record what it reproduces (see :class:`Reproduces`;
    ``cut``: what full mode runs less of than the published protocol, and its full cost;
    ``cost``: the full mode's rough cost from nothing in seconds).

    >>> @reproduces("arnaboldi2025", "Fig. 4", "the (a, omega) phase diagram", ["pd.png"])
    ... def fig(out_dir, quick): ...
    >>> fig.reproduces.ref
    'Fig. 4'
    """
    if paper not in PAPERS:
        raise ValueError(f"paper must be one of {sorted(PAPERS)}, got {paper!r}")
    if not ref or not what:
        raise ValueError("a reproduced figure needs a non-empty ref and what")
    files = (files,) if isinstance(files, str) else tuple(files)
    if not files:
        raise ValueError("a reproduced figure needs at least one file name")
    if cost is not None and not (math.isfinite(float(cost)) and float(cost) >= 0):
        raise ValueError(f"cost must be a number of seconds >= 0 or None, got {cost!r}")
    meta = Reproduces(
        paper,
        str(ref),
        str(what),
        tuple(str(f) for f in files),
        str(cut),
        None if cost is None else float(cost),
    )

    def mark(fn):
        fn.reproduces = meta
        return fn

    return mark


SIM_STYLE = dict(fmt="o", ms=4, capsize=2.5, lw=1.0)


def use_agg():
    """Select a non-interactive backend when no display is available (idempotent)."""
    import os

    import matplotlib

    if not os.environ.get("DISPLAY") and matplotlib.get_backend().lower() not in ("agg", "pdf"):
        try:
            matplotlib.use("Agg")
        except Exception:  # pragma: no cover - backend already fixed by the user
            pass


def _as_rows(items) -> list[dict]:
    rows = []
    for it in items:
        if isinstance(it, dict):
            rows.append(it)
        elif hasattr(it, "row"):
            rows.append(it.row())
        elif hasattr(it, "to_dict"):
            rows.append(it.to_dict())
        else:
            raise ValueError(f"cannot read a table row from {type(it).__name__}")
    return rows


def mean_and_sem(rows: list[dict], x: str, y: str):
    """Group ``rows`` by ``x``; return xs, means, standard errors (or the given ``<y>_err``)."""
    groups = defaultdict(list)
    errs = defaultdict(list)
    for r in rows:
        if r.get(y) is None:
            continue
        groups[float(r[x])].append(float(r[y]))
        if r.get(f"{y}_err") is not None:
            errs[float(r[x])].append(float(r[f"{y}_err"]))
    xs = np.array(sorted(groups))
    means = np.array([np.mean(groups[k]) for k in xs])
    sem = []
    for k in xs:
        v = groups[k]
        if k in errs and len(v) == 1:
            sem.append(errs[k][0])
        else:
            sem.append(np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0)
    return xs, means, np.array(sem)


#: Axis labels in words for the result fields (one home: every overlay and ``theory overlay``).
#: ``m_<l>`` / ``e_<j>`` (row and encoding components) and ``<field>_err`` are derived
#: (:func:`field_label`).
FIELD_LABELS = {
    # the SGD trajectory (theory.ssi.trajectory.Trajectory)
    "t": "time t = γν/d",
    "steps": "SGD steps ν",
    "m": "overlap m with the teacher",
    "e": "overlap e with the positional encoding",
    "risk": "risk (population: ODE; mean sample loss: SGD)",
    "final_m": "final overlap m",
    "final_e": "final positional overlap e",
    "t_escape": "weak-recovery time t",
    "steps_escape": "weak-recovery steps ν",
    "lr": "step size γ",
    "d": "dimension d",
    "eta": "weak-recovery threshold η",
    "L": "sequence length L",
    # the ERM theory and simulations (theory.attention)
    "alpha": "sample ratio α = n/d",
    "omega": "positional weight ω",
    "sigma": "token noise σ",
    "lam": "ridge λ",
    "q": "self-overlap q",
    "theta": "semantic overlap θ",
    "theta_over_sigma2": "semantic overlap θ/σ²",
    "V": "variance V",
    "eps_t": "training loss ε_t",
    "eps_g": "test error ε_g",
    "alpha_c": "transition α_c",
    "alpha_l": "linear-baseline crossing α_l",
    # the tied/untied gain (theory.ssi.gain)
    "gain_equal": "gain ν_untied/ν_tied (equal step)",
    "gain_optimal": "gain ν_untied/ν_tied (optimal steps)",
    "gain_sim": "simulated gain ν_untied/ν_tied",
}


def field_label(name: str) -> str:
    """The axis label of a result field (:data:`FIELD_LABELS`; ``m_2`` -> "overlap m of row 2",
    ``e_1`` -> "positional overlap e component 1", ``x_err`` -> "error of <x>"); an unknown name
    is its own label."""
    if name in FIELD_LABELS:
        return FIELD_LABELS[name]
    base, _, idx = name.rpartition("_")
    if base in ("m", "e") and idx.isdigit():
        return f"{FIELD_LABELS[base]}, {'row' if base == 'm' else 'component'} {idx}"
    if name.endswith("_err"):
        return f"standard error of {field_label(name[:-4])}"
    return name


def is_known_field(name: str) -> bool:
    """Whether ``name`` is a result field of :data:`FIELD_LABELS` (or derived from one)."""
    return field_label(name) != name


def overlay(
    ax,
    theory=(),
    simulation=(),
    *,
    x: str,
    y: str,
    label: str | None = None,
    color=None,
    theory_label="theory",
    sim_label="simulation",
):
    """Draw theory as a line and simulation as points with error bars on ``ax``."""
    label = f"{label}: " if label else ""
    line = None
    th = _as_rows(theory)
    if th:
        th = sorted((r for r in th if r.get(y) is not None), key=lambda r: r[x])
        (line,) = ax.plot(
            [r[x] for r in th],
            [r[y] for r in th],
            color=color,
            label=f"{label}{theory_label}",
            **THEORY_STYLE,
        )
        color = line.get_color()
    sim = _as_rows(simulation)
    if sim:
        xs, mu, se = mean_and_sem(sim, x, y)
        ax.errorbar(xs, mu, yerr=se, color=color, label=f"{label}{sim_label}", **SIM_STYLE)
    ax.set_xlabel(field_label(x))
    ax.set_ylabel(field_label(y))
    return ax
