r"""The d -> infinity ODE of one-pass spherical SGD for the order parameters (e, m):
the right-hand side :func:`rhs` (docs/ssi.md eqs. 18-20) and its integration
:func:`integrate_ode`.

With t = gamma nu / d (nu the SGD step count), K = E sum_l (dl/dz_l)^2 (the squared-gradient
noise term, eq. 19) and reduced encoding coordinates c (e = B c):

    dm/dt = -dR/dm + m (m dR/dm + c . grad_c R) - (gamma/2) K m,
    dc/dt = -grad_c R + c (m dR/dm + c . grad_c R) - (gamma/2) K c,

and, for the untied network with each row on its own sphere,

    dm_l/dt = -(1 - m_l^2) dR/dm_l - (gamma/2) K_l m_l,   K_l = E (dl/dz_l)^2.

The published text prints the drift with the opposite sign and the noise term with gamma instead
of gamma/2 (docs/ssi.md section 10); the form above is derived in docs/ssi.md section 4 and
checked against SGD in the tests (closed-form stationary overlap m* = 1/(2 gamma - 1) of the
linear network).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory._util import check_positive
from theory.solve.ode import integrate_log_time
from theory.ssi.risk import SSIModel, UntiedNetwork
from theory.ssi.trajectory import (
    MAX_LR,
    PAST_NOTE,
    Trajectory,
    classify_minimum,
    default_eta,
    start_past_threshold,
)

__all__ = ["ODEResult", "rhs", "integrate_ode", "project_state"]

MAX_D = 1e12  # dimension (sets the start 1/sqrt(d) and the threshold)
MAX_T = 1e9  # ODE horizon t_max


@dataclass(frozen=True, kw_only=True)
class ODEResult(Trajectory):
    """(e, m) trajectory of the d -> infinity ODE on log-spaced times (fields: see
    :class:`theory.ssi.trajectory.Trajectory`; ``risk`` is the population risk).
    ``metadata``: the engine, the number of right-hand-side evaluations ``n_rhs`` and the final
    time ``t_final``."""


def project_state(model: SSIModel, y: np.ndarray) -> np.ndarray:
    """The state y mapped onto the set the exact flow leaves invariant: the unit ball
    |(c, m)| <= 1 (radially; e = B c, m the overlaps of one unit-norm student), for the untied
    network each m_l in [-1, 1].  Identity inside.

    Why it is needed: on the boundary d|y|^2/dt = -gamma K |y|^2 <= 0 (tied; untied:
    dm_l/dt = -(gamma/2) K_l at m_l = 1), so the ball is invariant, but where K vanishes there
    (a realisable target learnt to m = 1) the flow is tangent to it and the integrator's O(rtol)
    error steps out; with the overlaps clipped in the risk the outside was then frozen
    (final_m = 1.0000000013 for the untied linear network)."""
    y = np.asarray(y, dtype=float)
    if model.untied:
        return np.clip(y, -1.0, 1.0)
    n = float(np.linalg.norm(y))
    return y / n if n > 1.0 else y


def rhs(model: SSIModel, y: np.ndarray, lr: float) -> np.ndarray:
    """The right-hand side dy/dt of the ODE (docs/ssi.md eqs. 18-20) at the state y = (c_1..c_r,
    m) (untied network: y = (m_1..m_L)), step size ``lr``.  The overlaps are clipped to [-1, 1]
    where the risk reads them; the state itself is not projected here: a projected state
    seeded an inward drift of 5e-4 on the sphere the γ = 0 flow leaves invariant (the
    unprojected error is 1e-6).  Reported states are projected (:func:`project_state`)."""
    r = model.r
    y = np.asarray(y, dtype=float)
    c = y[:r]
    if model.untied:
        mv = np.clip(y, -1.0, 1.0)
        q = model._raw(np.zeros(model.L), mv)
        return -(1 - mv**2) * q["dRdm"] - 0.5 * lr * q["K"] * mv
    m = float(np.clip(y[r], -1.0, 1.0))
    mv = np.full(model.L, m)
    q = model._raw(model.e_raw(c, mv), mv)
    gc = model.B.T @ q["dRde"]
    gm = model.dRdm_total(q)
    K = float(np.sum(q["K"]))
    common = m * gm + float(c @ gc)
    dc = -gc + c * common - 0.5 * lr * K * c
    dm = -gm + m * common - 0.5 * lr * K * m
    return np.concatenate([dc, [dm]])


def integrate_ode(
    model: SSIModel,
    lr: float,
    d: float,
    m0: float | np.ndarray | None = None,
    e0: float | np.ndarray | None = None,
    eta: float | None = None,
    t_max: float | None = None,
    n_out: int = 200,
    rtol: float = 1e-8,
    atol: float = 1e-14,
) -> ODEResult:
    """Integrate the (e, m) ODE (:func:`rhs`, docs/ssi.md eq. 18) from (e0, m0).

    Defaults: m0 = 1/sqrt(d) (every row for the untied network), e0 = 1/sqrt(d) in every reduced
    coordinate, eta = twice the norm of that start (:func:`theory.ssi.trajectory.default_eta`:
    2 sqrt((1 + r)/d), 2/sqrt(d) without encoding), so the default start never lies past the
    threshold.  An explicit start at or past an explicit eta raises ValueError; past the default
    eta, ``t_escape`` is None (the message says why).  ``t_max=None`` integrates until
    stationary (|dy/dt| t below 1e-9 after escape, or the state collapsed to 1e-3 of its start,
    or exactly no drift).
    Times are reported as t and as SGD steps nu = t d / lr.
    """
    if isinstance(model, UntiedNetwork) and model.normalisation == "flat":
        raise ValueError(
            "the flattened untied network has no ODE in this package (its rows' norms are extra "
            "order parameters); use UntiedNetwork(..., normalisation='rows'), whose ODE it "
            "shares near m = 0 (docs/findings.md §6)"
        )
    lr = check_positive("lr", lr, strict=False, hi=MAX_LR)
    d = check_positive("d", d, hi=MAX_D)
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d:g}")
    explicit_start = m0 is not None or e0 is not None
    for name, v in (("m0", m0), ("e0", e0)):
        if v is not None and not np.all(np.abs(np.asarray(v, dtype=float)) <= 1):
            raise ValueError(f"{name} must lie in [-1, 1] (an overlap), got {v!r}")
    if e0 is not None and (model.untied or not model.r):
        raise ValueError("e0 is the start of the positional encoding; this model has none: drop e0")
    m0 = 1 / math.sqrt(d) if m0 is None else m0
    eta_given = eta is not None
    eta = default_eta(model, d) if eta is None else check_positive("eta", eta, hi=1.0)
    if t_max is not None:
        t_max = check_positive("t_max", t_max, hi=MAX_T)
    L = model.L
    if model.untied:
        y0 = np.atleast_1d(np.asarray(m0, dtype=float)).ravel()
        if y0.size == 1:
            y0 = np.full(L, float(y0[0]))
        if y0.size != L:
            raise ValueError(f"m0 must be a scalar or have L = {L} entries")
        norm = lambda y: float(np.linalg.norm(y)) / math.sqrt(L)
    else:
        if model.r:
            c0 = np.atleast_1d(np.asarray(1 / math.sqrt(d) if e0 is None else e0, float)).ravel()
            if c0.size == 1:
                c0 = np.full(model.r, float(c0[0]))
        else:
            c0 = np.zeros(0)
        y0 = np.concatenate([c0, [float(m0)]])
        norm = lambda y: float(np.linalg.norm(y))
    if not np.all(np.isfinite(y0)):
        raise ValueError("the start (m0, e0) must be finite numbers")
    if norm(y0) > 1 + 1e-12:
        raise ValueError("the initial point must satisfy ||(e, m)|| <= 1")
    n0 = norm(y0)
    past = start_past_threshold(n0, eta, eta_given=eta_given, explicit_start=explicit_start)

    def fun(t, y):
        return rhs(model, y, lr)

    def stop(t, y, dy, escaped):
        ny = norm(y)
        speed = float(np.linalg.norm(dy))
        if speed == 0.0:
            return True
        if escaped:
            return speed * t <= 1e-9 * max(ny, 1e-300)
        return ny <= 1e-3 * n0

    sol = integrate_log_time(
        fun,
        y0,
        t_first=max(lr, 1e-12) / d,
        t_max=t_max,
        event=lambda y: norm(y) - eta,
        stop=stop,
        n_out=n_out,
        rtol=rtol,
        atol=atol,
        project=lambda y: project_state(model, y),
    )
    Y = sol.y
    if model.untied:
        m_rows = Y
        m = np.linalg.norm(Y, axis=1) / math.sqrt(L)
        e = np.zeros(len(Y))
        final_e, final_m = 0.0, float(np.linalg.norm(sol.y_final) / math.sqrt(L))
        risk = np.array([model.risk(None, np.clip(row, -1, 1)) for row in Y])
        minimum = "semantic" if final_m > 0.5 else "other"
    else:
        m_rows = None
        m = Y[:, -1]
        e = Y[:, 0] if model.r == 1 else (Y[:, :-1] if model.r > 1 else np.zeros(len(Y)))
        fe = sol.y_final[:-1]
        final_e = float(fe[0]) if model.r == 1 else (fe.tolist() if model.r > 1 else 0.0)
        final_m = float(sol.y_final[-1])
        risk = np.array(
            [model.risk(row[:-1] if model.r else None, np.clip(row[-1], -1, 1)) for row in Y]
        )
        minimum = classify_minimum(fe, final_m)
    if sol.status != "converged":
        minimum = "other" if sol.status == "nan" else minimum
    te = None if past else sol.t_event
    message = sol.message + ("; " + PAST_NOTE.format(eta=eta) if past else "")
    return ODEResult(
        t=sol.t,
        steps=sol.t * d / lr if lr > 0 else np.full_like(sol.t, np.inf),
        e=e,
        m=m,
        m_rows=m_rows,
        risk=risk,
        t_escape=te,
        steps_escape=(te * d / lr if (te is not None and lr > 0) else None),
        final_e=final_e,
        final_m=final_m,
        minimum=minimum,
        lr=lr,
        d=d,
        eta=eta,
        status=sol.status,
        message=message,
        params=dict(model=model.key(), lr=lr, d=d, m0=m0, e0=e0, eta=eta),
        metadata=dict(engine=model.engine, n_rhs=sol.n_rhs, t_final=sol.t_final),
    )
