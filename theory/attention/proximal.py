"""The prox of the L = 2 per-sample loss (docs/attention.md §3): one implementation for every
channel of the form ℓ(x; κ, t) = κ[(a(x) - t_1)² + (b(x) - t_2)²] -- the effective channel of
the replica theory and the exact finite-d channel of GAMP alike.

    x̂(w) = argmin_x |x - w|²/(2V) + ℓ(x; κ, t),        g = (x̂ - w)/V.

The minimisation is 2-dimensional and non-convex; :func:`prox_rows` solves it per row by the
multi-start safeguarded Newton kernel of ``theory.attention._kernels`` (global minimum), or,
with ``x_start``, by a local Newton solve from there (the minimiser of that basin).
:func:`prox` is the effective channel's prox with the teacher fields h*.  Two references for
the tests: :func:`prox_reference` (scipy BFGS from many starts) and :func:`prox_newton_reference`
(a vectorised numpy Newton from w, the zero-loss points and a grid over the disk that contains
every minimiser).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from theory._util import check_positive
from theory.attention import _kernels as _K
from theory.attention.channel import (
    _rows,
    effective_channel,
    sample_loss,
    sample_loss_hess,
    teacher_diag_jac,
)
from theory.attention.params import ERMParams, as_params

__all__ = ["ProxResult", "prox", "prox_newton_reference", "prox_reference", "prox_rows"]


@dataclass(frozen=True)
class ProxResult:
    """Prox of every row: ``x`` (N, 2); ``jac`` = d x̂/d w (N, 2, 2); ``value`` (N,) = the minimum
    (the Moreau envelope, without the constant c of the loss); ``jac_t`` = d x̂/d t and, for
    :func:`prox`, ``jac_h`` = d x̂/d h* (N, 2, 2); ``ok`` (N,) = Newton converged from the
    winning start."""

    x: np.ndarray
    jac: np.ndarray
    value: np.ndarray
    jac_t: np.ndarray = field(repr=False, default=None)
    jac_h: np.ndarray = field(repr=False, default=None)
    ok: np.ndarray = field(repr=False, default=None)


def _per_row(v, n, name):
    v = np.asarray(v, dtype=float)
    if v.ndim == 0:
        return np.full(n, float(v))
    if v.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got {v.shape}")
    return np.ascontiguousarray(v)


def prox_rows(
    w: ArrayLike,
    V: float | ArrayLike,
    kappa: ArrayLike,
    t1: ArrayLike,
    t2: ArrayLike,
    *,
    x_start=None,
    jac: bool = True,
) -> ProxResult:
    """Prox of |x - w|²/(2V) + κ[(a(x) - t_1)² + (b(x) - t_2)²] per row.

    ``w`` (N, 2); ``V``, ``kappa``, ``t1``, ``t2`` scalars or (N,).  Global minimum by default;
    with ``x_start`` (N, 2) the local minimum of the basin of x_start ("warm" prox).  ``jac``:
    also d x̂/d w and d x̂/d t (implicit-function theorem at the minimiser)."""
    w = _rows(w, "w")
    n = w.shape[0]
    V = _per_row(V, n, "V")
    if not np.all(V > 0):
        raise ValueError("V must be > 0")
    kappa = _per_row(kappa, n, "kappa")
    t = np.ascontiguousarray(np.stack([_per_row(t1, n, "t1"), _per_row(t2, n, "t2")], axis=1))
    x0 = w if x_start is None else _rows(x_start, "x_start")
    if x0.shape != w.shape:
        raise ValueError(f"x_start {x0.shape} and w {w.shape} must have the same shape")
    x, val, jw, jt, ok = _K.prox_rows(w, t, kappa, V, x0, x_start is not None, bool(jac))
    return ProxResult(x=x, jac=jw, value=val, jac_t=jt, ok=ok)


def prox(
    w_local: ArrayLike,
    h_star: ArrayLike,
    V: float,
    params: ERMParams | Mapping | None,
    *,
    jac: bool = True,
) -> ProxResult:
    """Global prox of the effective per-sample loss (σ²/2)||S(x) - T(h*)||_F² per row.

    ``w_local`` (N, 2) student fields ω_ℓ, ``h_star`` (N, 2) teacher fields h*_ℓ, ``V`` > 0,
    ``params`` an :class:`~theory.attention.params.ERMParams`.  ``jac``: also d x̂/d w and
    d x̂/d h* (``jac_h``)."""
    p = as_params(params)
    V = check_positive("V", V)
    w = _rows(w_local, "w_local")
    h = _rows(h_star, "h_star")
    if w.shape != h.shape:
        raise ValueError(f"w_local {w.shape} and h_star {h.shape} must have the same shape")
    kappa, t1, t2 = effective_channel(h, p)
    r = prox_rows(w, V, kappa, t1, t2, jac=jac)
    jac_h = None
    if jac:
        # d x̂/d h* = d x̂/d t · dt/dh*, with t_ℓ = (1 - ω) sigmoid(h*_ℓ(h*_ℓ - h*_ℓ')) + ω A_ℓℓ
        jac_h = np.einsum("nij,njk->nik", r.jac_t, teacher_diag_jac(h, p.omega))
    return ProxResult(x=r.x, jac=r.jac, value=r.value, jac_t=r.jac_t, jac_h=jac_h, ok=r.ok)


# --------------------------------------------------------------------------- references


def prox_reference(
    w_local: ArrayLike,
    h_star: ArrayLike,
    V: float,
    params: ERMParams | Mapping | None,
    *,
    starts=None,
) -> tuple[np.ndarray, np.ndarray]:
    """scipy reference of :func:`prox` (effective channel): BFGS from the kernel's start set
    plus a ring of 16 starts on the disk that contains every minimiser; lowest value wins.
    Returns ``(x (N, 2), value (N,))``.  Slow (a Python loop over rows)."""
    from scipy.optimize import minimize

    p = as_params(params)
    w = _rows(w_local, "w_local")
    _, t1, t2 = effective_channel(_rows(h_star, "h_star"), p)
    xs = np.empty_like(w)
    vals = np.empty(w.shape[0])
    for i in range(w.shape[0]):
        wi, ti = w[i], (t1[i], t2[i])

        def f(x, wi=wi, ti=ti):
            a = 1.0 / (1.0 + math.exp(-x[0] * (x[0] - x[1])))
            b = 1.0 / (1.0 + math.exp(-x[1] * (x[1] - x[0])))
            return ((x - wi) ** 2).sum() / (2 * V) + p.s2 * ((a - ti[0]) ** 2 + (b - ti[1]) ** 2)

        z = np.array(_K.zero_loss_point(ti[0], ti[1]))
        R = math.sqrt(2 * V * f(wi) + 1e-300)
        cands = [
            wi,
            z,
            -z,
            (z + wi) / 2,
            (wi - z) / 2,
            wi / 2,
            np.array([0.0, wi[1]]),
            np.array([wi[0], 0.0]),
            np.full(2, wi.mean()),
        ]
        cands += [
            wi + r * np.array([math.cos(a), math.sin(a)])
            for r in (R, R / 2)
            for a in np.linspace(0, 2 * math.pi, 8, endpoint=False)
        ]
        if starts is not None:
            cands = list(starts)
        best = None
        for c in cands:
            r = minimize(f, c, method="BFGS", options=dict(gtol=1e-11))
            if best is None or r.fun < best.fun:
                best = r
        xs[i] = best.x
        vals[i] = best.fun
    return xs, vals


def _zero_loss_points(t1, t2):
    """Points x with a(x) = t_1, b(x) = t_2 (two, ±), or NaN where none exists."""
    eps = 1e-12
    u1 = np.log(np.clip(t1, eps, 1 - eps)) - np.log1p(-np.clip(t1, eps, 1 - eps))
    u2 = np.log(np.clip(t2, eps, 1 - eps)) - np.log1p(-np.clip(t2, eps, 1 - eps))
    s = u1 + u2  # = (x1 - x2)^2
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.where(s > 1e-10, np.sqrt(np.maximum(s, 0)), np.nan)
        return np.stack([u1 / delta, -u2 / delta], axis=-1)


def _objective(x, w, V, kappa, t1, t2):
    return ((x - w) ** 2).sum(-1) / (2 * V) + sample_loss(x, kappa, t1, t2)


def _newton_reference(x, w, V, kappa, t1, t2, *, max_iter=100, gtol=1e-13):
    """Vectorised safeguarded Newton on the prox objective for every row of ``x`` (N, 2):
    eigenvalue-shifted Hessian (smallest eigenvalue >= 1e-3/V), Armijo backtracking; only the
    rows not yet converged are processed."""
    x = x.copy()
    idx = np.arange(x.shape[0])
    steps = 0.5 ** np.arange(0, 40)
    for _ in range(max_iter):
        xa, wa, Va = x[idx], w[idx], V[idx]
        ka, aa, ba = kappa[idx], t1[idx], t2[idx]
        g, H = sample_loss_hess(xa, ka, aa, ba)
        g += (xa - wa) / Va[:, None]
        H[:, 0, 0] += 1 / Va
        H[:, 1, 1] += 1 / Va
        gn = np.sqrt((g**2).sum(-1))
        active = gn > gtol * (1 + np.abs(xa).sum(-1)) / Va
        if not active.all():
            idx, xa, wa, Va, ka, aa, ba, g, H = (
                v[active] for v in (idx, xa, wa, Va, ka, aa, ba, g, H)
            )
        if idx.size == 0:
            break
        tr = H[:, 0, 0] + H[:, 1, 1]
        det = H[:, 0, 0] * H[:, 1, 1] - H[:, 0, 1] ** 2
        lmin = 0.5 * tr - np.sqrt(np.maximum(0.25 * tr**2 - det, 0))
        shift = np.where(lmin < 1e-3 / Va, 1e-3 / Va - lmin, 0.0)
        H[:, 0, 0] += shift
        H[:, 1, 1] += shift
        det = H[:, 0, 0] * H[:, 1, 1] - H[:, 0, 1] ** 2
        p = np.empty_like(g)
        p[:, 0] = -(H[:, 1, 1] * g[:, 0] - H[:, 0, 1] * g[:, 1]) / det
        p[:, 1] = -(-H[:, 0, 1] * g[:, 0] + H[:, 0, 0] * g[:, 1]) / det
        f0 = _objective(xa, wa, Va, ka, aa, ba)
        slope = (g * p).sum(-1)  # < 0
        slack = 1e-14 * np.abs(f0)  # lets pure Newton steps through once rounding hides descent
        t = np.ones(idx.size)
        f1 = _objective(xa + p, wa, Va, ka, aa, ba)
        bad = ~(f1 <= f0 + 1e-4 * slope + slack)
        if bad.any():  # Armijo backtracking for the rows where the full step fails
            xb, pb, wb, Vb = xa[bad], p[bad], wa[bad], Va[bad]
            xs = xb[None] + steps[1:, None, None] * pb[None]
            fs = _objective(xs, wb[None], Vb[None], ka[bad][None], aa[bad][None], ba[bad][None])
            ok = fs <= (f0[bad] + slack[bad])[None] + 1e-4 * steps[1:, None] * slope[bad][None]
            first = np.argmax(ok, axis=0)
            t[bad] = np.where(ok.any(axis=0), steps[1:][first], np.where(shift[bad] == 0, 1.0, 0.0))
        x[idx] = xa + t[:, None] * p
    return x


def prox_newton_reference(
    w: ArrayLike, V: float | ArrayLike, kappa: ArrayLike, t1: ArrayLike, t2: ArrayLike, *, n_grid=11
) -> ProxResult:
    """Numpy reference of :func:`prox_rows` (global minimum): vectorised safeguarded Newton
    from w, the two zero-loss points and the two best points of an ``n_grid``² grid over the
    disk |x - w| <= sqrt(2 V ℓ(w)) that contains every global minimiser; lowest value wins."""
    w = _rows(w, "w")
    n = w.shape[0]
    V, kappa, t1, t2 = (
        _per_row(v, n, k) for v, k in ((V, "V"), (kappa, "kappa"), (t1, "t1"), (t2, "t2"))
    )
    R = np.sqrt(2 * V * sample_loss(w, kappa, t1, t2))
    u = np.linspace(-1, 1, n_grid)
    grid = np.stack(np.meshgrid(u, u, indexing="ij"), -1).reshape(-1, 2)
    grid = grid[(grid**2).sum(-1) <= 1 + 1e-9]
    pts = w[:, None, :] + R[:, None, None] * grid[None]  # (n, G, 2)
    fg = _objective(pts, w[:, None], V[:, None], kappa[:, None], t1[:, None], t2[:, None])
    best2 = np.argsort(fg, axis=1)[:, :2]
    zl = _zero_loss_points(t1, t2)
    zl = np.where(np.isfinite(zl), zl, w)
    starts = np.stack(
        [
            w,
            zl,
            -zl,
            np.take_along_axis(pts, best2[:, 0, None, None], 1)[:, 0],
            np.take_along_axis(pts, best2[:, 1, None, None], 1)[:, 0],
        ],
        axis=1,
    )
    S = starts.shape[1]
    rep = lambda v: np.repeat(v, S, axis=0)
    xs = _newton_reference(
        starts.reshape(n * S, 2), rep(w), rep(V), rep(kappa), rep(t1), rep(t2)
    ).reshape(n, S, 2)
    fs = _objective(xs, w[:, None], V[:, None], kappa[:, None], t1[:, None], t2[:, None])
    x = xs[np.arange(n), np.argmin(fs, axis=1)]
    _, H = sample_loss_hess(x, kappa, t1, t2)
    M = V[:, None, None] * H
    M[:, 0, 0] += 1
    M[:, 1, 1] += 1
    return ProxResult(x=x, jac=np.linalg.inv(M), value=_objective(x, w, V, kappa, t1, t2))
