"""The loop shared by the finite-d SGD simulators: start, chunks between record points, weak
recovery, the :class:`SGDResult`.

Normalisation (docs/ssi.md section 1, stated once): token rows x_l ~ N(0, I_d / d), teacher
||w*||^2 = d, student rows ||w||^2 = d, positional rows P_l of unit norm orthogonal to w*,
z* = X w* ~ N(0, I_L), y = g(z*), loss l = ||y - f||^2 (no 1/2), one fresh sample per step and

    w <- sqrt(d) (w - gamma grad_w l) / ||w - gamma grad_w l||        (docs/ssi.md eq. 16;
                                                                        untied: per row).

Order parameters: m = w . w* / d, e_l = P_l . w / sqrt(d).  With the frame (w*/sqrt(d), an
orthonormal basis q_j of span(P)) each student row has frame coordinates c = (m, q_j . w /
sqrt(d)); the reduced encoding coordinate e of ``theory.ssi.risk`` is c[1:].  Time t = gamma nu /
d (nu = step count).  Weak recovery: nu_eta = first step with ||c|| >= eta (|m| without
encoding), or, for the untied network, m_untied = ||W w* / d|| / sqrt(L) >= eta.  Default
eta = 2 sqrt((1 + r) / d) (``theory.ssi.trajectory.default_eta``: twice the root-mean-square
norm of a random start).  A random start at or past eta escapes at step 0 (rare with the default
eta); a given start past the default eta has no escape step (None).

A simulator is a *state* (``theory.ssi.sgd.full`` keeps the d-dimensional weights,
``theory.ssi.sgd.reduced`` the exact d-independent chain of the frame coordinates) that advances
n steps in place (``run``) and reports its frame coordinates (``coords``); :func:`run` drives it.
The student, the target and the encoding come from ONE model object of ``theory.ssi.risk``
(:class:`AttentionModel`, :class:`TiedNetwork`, :class:`UntiedNetwork`), the same object the
theory takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from theory._util import check_int, check_positive, to_jsonable
from theory.rng import as_rng
from theory.ssi import trajectory as tr
from theory.ssi._kernels import activation_code
from theory.ssi.risk import AttentionModel, SSIModel, TiedNetwork, UntiedNetwork
from theory.ssi.sgd import _kernels as K
from theory.ssi.trajectory import Trajectory, classify_minimum

__all__ = ["SGDResult", "kernel_head", "run"]


@dataclass(frozen=True, kw_only=True)
class SGDResult(Trajectory):
    """A finite-d SGD trajectory: the fields of :class:`theory.ssi.trajectory.Trajectory`
    (``risk`` is the mean sample loss over the steps since the previous record, NaN at step 0;
    ``steps_escape`` an int), ``seed`` (the int seed of the run, None if it was given a
    Generator) and ``history`` = dict(c=(n_rec, R, 1 + r) frame coordinates of every row)."""

    seed: Any = None

    def row(self) -> dict:
        out = dict(self.params)
        out.update(
            status=self.status,
            steps_escape=self.steps_escape,
            t_escape=self.t_escape,
            final_e=self.final_e,
            final_m=self.final_m,
            minimum=self.minimum,
            seed=self.seed,
        )
        return to_jsonable(out)


def kernel_head(model: SSIModel) -> tuple[int, np.ndarray, int]:
    """(head code, reduction matrix Rm (L, L), activation code) of the numba kernels for a model
    (``theory.ssi.sgd._kernels``)."""
    L = model.L
    if isinstance(model, TiedNetwork):  # tied and untied networks
        return K.HEAD_NETWORK, np.zeros((L, L)), activation_code(model.activation)
    if not isinstance(model, AttentionModel):
        raise ValueError(
            f"cannot simulate a {type(model).__name__}: pass an AttentionModel, TiedNetwork or "
            "UntiedNetwork"
        )
    if model.reduction == "identity":
        return K.HEAD_MATRIX, np.zeros((L, L)), 0
    if model.reduction == "trace":
        scale = 1.0 if model.trace_norm == "sum" else 1.0 / math.sqrt(L)
        return K.HEAD_FUNCTIONAL, scale * np.eye(L), 0
    a, b = model.proj
    return K.HEAD_FUNCTIONAL, np.outer(a, b), 0


def is_flat(model: SSIModel) -> bool:
    return isinstance(model, UntiedNetwork) and model.normalisation == "flat"


def _record_grid(horizon: int, n_record: int) -> np.ndarray:
    horizon = max(int(horizon), 1)
    n = max(int(n_record), int(20 * math.log10(horizon + 1)) + 2)
    g = np.unique(np.round(np.geomspace(1, horizon, n)).astype(np.int64))
    return np.concatenate([[0], g])


MAX_D = 10**8  # dimension of a simulation (the full simulator keeps L x d weights)
MAX_STEPS = 10**12  # SGD steps


def check_run(model, d, lr, *, eta=None, m0=None, start="random", steps=None, max_steps=1, **_):
    """The arguments of a simulation, checked (ValueError saying what to change) -> (d, lr, eta,
    steps, max_steps) with the defaults filled in.  ``simulate_seeds`` calls it before starting
    any run."""
    d = check_int("d", d, hi=MAX_D)
    kernel_head(model)  # a model the kernels cannot run (e.g. a written activation of no kernel)
    if d < model.B.shape[1] + 3:
        raise ValueError(
            f"d = {d} is too small: need d >= {model.B.shape[1] + 3} (teacher, encoding "
            "directions and the student must fit)"
        )
    lr = check_positive("lr", lr, hi=tr.MAX_LR)
    if start not in ("random", "origin"):
        raise ValueError(f"start must be 'random' or 'origin', got {start!r}")
    eta = tr.default_eta(model, d) if eta is None else check_positive("eta", eta, hi=1.0)
    if m0 is not None and not (-1.0 <= float(m0) <= 1.0):
        raise ValueError(f"m0 must lie in [-1, 1], got {m0}")
    if steps is not None:
        steps = check_int("steps", steps, lo=0, hi=MAX_STEPS)
    max_steps = check_int("max_steps", max_steps, lo=1, hi=MAX_STEPS)
    return d, lr, eta, steps, max_steps


def _init_coords(model, d, rng, m0, e0, start):
    """Initial frame coordinates C (R, 1 + r) and rest norms rr (R,)."""
    k = model.B.shape[1]
    R = model.n_rows
    C = np.zeros((R, 1 + k))
    if m0 is not None or e0 is not None:
        C[:, 0] = 0.0 if m0 is None else float(m0)
        if e0 is not None:
            e0 = np.atleast_1d(np.asarray(e0, dtype=float))
            if e0.shape != (k,):
                raise ValueError(f"e0 must have {k} component(s) (one per encoding direction)")
            C[:, 1:] = e0
    elif start == "random":
        if is_flat(model):  # uniform on the sphere of R^{L d}: c_l = m_l / sqrt(L)
            g = rng.standard_normal(R)
            C[:, 0] = math.sqrt(R) * g / math.sqrt(g @ g + rng.chisquare(R * d - R))
        else:
            for r in range(R):
                g = rng.standard_normal(1 + k)
                C[r] = g / math.sqrt(g @ g + rng.chisquare(d - 1 - k))
    if is_flat(model):  # one sphere: |c|^2 = mean_l m_l^2 <= 1; no per-row rest norms
        if float((C[:, 0] ** 2).mean()) > 1 + 1e-12:
            raise ValueError("initial overlaps must satisfy mean_l m_l^2 <= 1")
        return C, np.zeros(R)
    rr2 = 1.0 - (C**2).sum(axis=1)
    if np.any(rr2 < -1e-12):
        raise ValueError("initial overlaps must satisfy m0^2 + ||e0||^2 <= 1")
    return C, np.sqrt(np.maximum(rr2, 0.0))


def _recovery_q(model, C):
    if model.untied:
        return float((C[:, 0] ** 2).mean())
    return float((C[0] ** 2).sum())


def run(
    model: SSIModel,
    d,
    lr,
    rng,
    state_cls,
    *,
    steps,
    m0,
    e0,
    start,
    eta,
    n_record,
    max_steps,
    margin,
    t_margin,
    backend: str,
) -> SGDResult:
    """Drive ``state_cls(model, d, rng, C0, rr0)`` from the start to the end rule (see
    ``theory.ssi.sgd.full.simulate_sgd`` for the arguments)."""
    k = model.B.shape[1]
    eta_given = eta is not None
    d, lr, eta, steps, max_steps = check_run(
        model, d, lr, eta=eta, m0=m0, start=start, steps=steps, max_steps=max_steps
    )
    head, Rm, act = kernel_head(model)
    tfn = model.target.values
    seed = int(rng) if isinstance(rng, (int, np.integer)) else None
    rng = as_rng(rng)
    C0, rr0 = _init_coords(model, d, rng, m0, e0, start)
    state = state_cls(model, d, rng, C0, rr0)
    if steps is not None:
        horizon = end = steps
    else:
        horizon = end = int(max_steps)
    grid = _record_grid(horizon, n_record)
    eta2 = eta * eta
    rec_steps, rec_c, rec_loss = [0], [state.coords()], [np.nan]
    explicit = m0 is not None or e0 is not None
    past = tr.start_past_threshold(
        math.sqrt(_recovery_q(model, C0)), eta, eta_given=eta_given, explicit_start=explicit
    )
    # a random start past eta escapes at step 0 (first passage); a given start past the default
    # eta has no escape step to report (a trajectory from there)
    unmeasured = past and explicit
    esc = 0 if past else None
    if esc is not None and steps is None:
        end = min(int(max_steps), int(math.ceil(t_margin * d / lr)))
    pos, gi, loss_acc, loss_n = 0, 1, 0.0, 0
    status = "ok"
    cmax = state.chunk_max()
    while pos < end:
        while gi < len(grid) and grid[gi] <= pos:
            gi += 1
        target = min(end, pos + cmax, int(grid[gi]) if gi < len(grid) else end)
        n = target - pos
        hit, ls = state.run(n, rng, tfn, lr, head, Rm, act, eta2 if esc is None else np.inf)
        loss_acc += ls
        loss_n += n
        if esc is None and hit >= 0:
            esc = pos + int(hit) + 1
            if steps is None:
                end = min(int(max_steps), esc + int(math.ceil(margin * esc + t_margin * d / lr)))
        pos = target
        C = state.coords()
        if not np.all(np.isfinite(C)):
            status = "nan"
            rec_steps.append(pos)
            rec_c.append(C)
            rec_loss.append(np.nan)
            break
        if (gi < len(grid) and pos == grid[gi]) or pos == end:
            rec_steps.append(pos)
            rec_c.append(C)
            rec_loss.append(loss_acc / max(loss_n, 1))
            loss_acc, loss_n = 0.0, 0
    if status != "nan":
        if steps is None:
            status = "converged" if esc is not None else "max_iter"
            status = "ok" if unmeasured else status
    c = np.array(rec_c)  # (n_rec, R, 1 + k)
    st = np.array(rec_steps, dtype=np.int64)
    if model.untied:
        m_rows = c[:, :, 0]
        m = np.sqrt((m_rows**2).mean(axis=1))
        e = np.zeros(len(st))
    else:
        m_rows = None
        m = c[:, 0, 0]
        if k == 0:
            e = np.zeros(len(st))
        elif k == 1:
            e = c[:, 0, 1]
        else:
            e = c[:, 0, 1:]
    final_e = e[-1] if np.ndim(e[-1]) == 0 else np.asarray(e[-1])
    final_e_frame = c[-1, 0, 1:] if not model.untied else np.zeros(0)
    minimum = classify_minimum(final_e_frame, m[-1])
    msg = {
        "ok": f"ran {int(st[-1])} steps",
        "converged": f"weak recovery at step {esc}; ran {int(st[-1])} steps",
        "max_iter": f"no weak recovery (eta = {eta:.3g}) within max_steps = {max_steps}",
        "nan": "the trajectory produced NaN (learning rate too large?)",
    }[status]
    if unmeasured:
        esc = None
        msg += "; " + tr.PAST_NOTE.format(eta=eta)
    params = dict(
        d=d,
        lr=lr,
        eta=eta,
        start=start,
        m0=m0,
        backend=backend,
        model=model.key(),
        steps=steps,
        max_steps=int(max_steps),
    )
    return SGDResult(
        status=status,
        message=msg,
        params=params,
        metadata=dict(method=f"online spherical SGD ({backend})"),
        history=dict(c=c),
        t=st * lr / d,
        steps=st,
        e=e,
        m=m,
        m_rows=m_rows,
        risk=np.array(rec_loss),
        steps_escape=esc,
        t_escape=None if esc is None else esc * lr / d,
        final_e=final_e if np.ndim(final_e) == 0 else final_e.tolist(),
        final_m=float(m[-1]),
        minimum=minimum,
        lr=lr,
        d=d,
        eta=eta,
        seed=seed,
    )


DOC_COMMON = """
    model: an ``AttentionModel`` / ``TiedNetwork`` / ``UntiedNetwork`` (``theory.ssi``), the
    object the theory takes.  d: dimension; lr: gamma; rng: an int seed (recorded as ``seed``)
    or a Generator.  steps: number of SGD steps; None runs until weak recovery, then
    ``margin * nu_eta + t_margin * d / lr`` more steps (or ``max_steps``).  m0, e0: initial
    overlaps (the rest of the student is a uniformly random direction orthogonal to the frame);
    otherwise ``start`` = "random" (uniform on the sphere) or "origin" (w orthogonal to w* and
    to P).  eta: weak recovery threshold (default 2 sqrt((1 + r) / d), r the rank of the
    encoding); an explicit start at or past an explicit eta raises ValueError, a given start past
    the default eta has steps_escape None, a random start past eta escapes at step 0.
    n_record: log-spaced record points (at least 20 per decade).  Returns an :class:`SGDResult`.
"""
