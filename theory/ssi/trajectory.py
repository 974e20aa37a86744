"""The result of a trajectory of (e, m), shared by the ODE and both SGD simulators.

Theory (:func:`theory.ssi.integrate_ode`) and simulation (:func:`theory.ssi.simulate_sgd`,
``simulate_reduced``, ``simulate_seeds``) return subclasses of :class:`Trajectory` with the same
field names, so a theory curve overlays simulation points in one call
(:func:`theory.plotting.overlay`).  Time is t = gamma nu / d, nu the SGD step count
(docs/ssi.md eq. 17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from theory._util import to_jsonable
from theory.results import Result

__all__ = ["Trajectory", "classify_minimum", "default_eta", "start_past_threshold"]

MAX_LR = 1e6  # step size gamma of the ODE and of SGD (the optimum grows with d: ~1e3 at d = 1e12)


@dataclass(frozen=True, kw_only=True)
class Trajectory(Result):
    """(e, m) along a trajectory.

    ``t`` (T,) time gamma nu / d; ``steps`` (T,) SGD steps nu = t d / gamma; ``m`` (T,) the
    overlap (untied network: m_untied = ||(m_1..m_L)|| / sqrt(L)); ``m_rows`` (T, L) the row
    overlaps of the untied network (None otherwise); ``e`` the encoding overlap in reduced
    coordinates (T,) for an encoding of rank <= 1 (zeros without encoding), else (T, r);
    ``risk`` (T,): the population risk (ODE) or the mean sample loss since the previous record
    (SGD, NaN at step 0).  ``t_escape`` / ``steps_escape``: weak recovery, the first time
    ||(e, m)|| >= eta (untied: m_untied >= eta), None if never.  ``final_e``, ``final_m``: the
    last point; ``minimum``: :func:`classify_minimum` of it.  ``lr``, ``d``, ``eta``: the step
    size, dimension and recovery threshold.
    """

    t: np.ndarray = field(default=None, repr=False)
    steps: np.ndarray = field(default=None, repr=False)
    e: np.ndarray = field(default=None, repr=False)
    m: np.ndarray = field(default=None, repr=False)
    m_rows: np.ndarray | None = field(default=None, repr=False)
    risk: np.ndarray | None = field(default=None, repr=False)
    t_escape: float | None = None
    steps_escape: float | None = None
    final_e: Any = None
    final_m: float | None = None
    minimum: str = "other"
    lr: float = 0.0
    d: float = 0.0
    eta: float = 0.0

    def points(self) -> list[dict]:
        """The whole trajectory as table rows, one per recorded time, with the field names the
        ODE and both simulators share (``theory sgd ode --out`` and ``theory sgd simulate
        --out`` write these): ``t``, ``steps``, ``m``, ``e`` (``e_1..e_r`` for an encoding of
        rank r > 1), ``m_1..m_L`` (untied network), ``risk``, then ``lr``, ``d``, ``eta`` and
        ``seed`` (simulations)."""
        T = len(self.t)
        cols: dict[str, Any] = dict(t=self.t, steps=self.steps, m=self.m)
        e = np.asarray(self.e, dtype=float)
        if e.ndim == 2:
            cols.update({f"e_{j + 1}": e[:, j] for j in range(e.shape[1])})
        else:
            cols["e"] = e
        if self.m_rows is not None:
            rows = np.asarray(self.m_rows, dtype=float)
            cols.update({f"m_{j + 1}": rows[:, j] for j in range(rows.shape[1])})
        cols["risk"] = np.full(T, np.nan) if self.risk is None else self.risk
        const = dict(lr=self.lr, d=self.d, eta=self.eta)
        if hasattr(self, "seed"):
            const["seed"] = self.seed
        return [to_jsonable({**{k: v[i] for k, v in cols.items()}, **const}) for i in range(T)]


def classify_minimum(e: float | np.ndarray, m: float) -> str:
    """Which minimum a final point (e, m) sits in: "semantic" within 15 degrees of the m axis,
    "positional" within 15 degrees of the e axis (each with ||(e, m)|| >= 0.5), else "other"
    (also for a non-finite point)."""
    en = float(np.linalg.norm(np.atleast_1d(np.asarray(e, dtype=float))))
    mm = abs(float(m))
    if not np.isfinite(en + mm) or math.hypot(en, mm) < 0.5:
        return "other"
    ang = math.degrees(math.atan2(en, mm))
    return "semantic" if ang < 15 else ("positional" if ang > 75 else "other")


def default_eta(model, d: float) -> float:
    """The default weak-recovery threshold (docs/ssi.md eq. 17): twice the norm of the default
    start, eta = 2 sqrt(n / d) with n = 1 + r order parameters (m and the r reduced encoding
    coordinates; n = 1 for the untied network, whose m_untied is a root mean square).  The default
    ODE start puts every coordinate at 1/sqrt(d) (norm sqrt(n / d)), the root-mean-square norm
    of a uniformly random start, so neither starts past the threshold, for any L, encoding or
    student."""
    n = 1 if model.untied else 1 + model.B.shape[1]
    return 2.0 * math.sqrt(n / d)


def start_past_threshold(
    norm0: float, eta: float, *, eta_given: bool, explicit_start: bool
) -> bool:
    """Whether a start of norm ``norm0`` already lies at or past ``eta`` (then there is no
    weak-recovery time).  A start given explicitly together with an explicit ``eta`` it already
    reaches is a contradiction: ValueError saying what to change."""
    past = norm0 >= eta
    if past and eta_given and explicit_start:
        raise ValueError(
            f"the start ||(e, m)|| = {norm0:.4g} already lies at or past the weak-recovery "
            f"threshold eta = {eta:.4g}; give a smaller start (m0, e0) or a larger eta"
        )
    return past


PAST_NOTE = (
    "the start lies at or past the weak-recovery threshold eta = {eta:.4g}: no escape time "
    "(give eta above the start to measure one)"
)
