r"""Escape times and the tied/untied gain nu_untied / nu_tied as a function of the sequence length
L: the prediction from the leading Hermite tensor (:func:`theory.ssi.hermite.gains`), the
linearised ODE in closed form, the full ODE minimised over the step size, and the finite-d SGD
measurement (docs/ssi.md section 7).

The published formula for the gain at optimal step sizes assumes that an untied row carries the
SGD noise of the whole tied network; in the ODE of this package it carries 1/L of it, so the
package predicts ``gain_optimal`` = L for sum_l He_2(z_l) where the paper writes L^2 (kept beside
it as ``gain_optimal_published``).  The derivation and the measurements: docs/findings.md §6.

Targets may depend on L: pass a family name, a callable ``L -> expression``, or one expression
(then every L must contain its variables).  Families:

* ``"sum_he2"``: sum_l He_2(z_l) / sqrt(2)   (the paper's SIE-2 example)
* ``"sum_z"``:   sum_l z_l / sqrt(L)          (SIE 1)
* ``"sum_he3"``: sum_l He_3(z_l) / sqrt(6)   (SIE 3)

Networks (docs/ssi.md eqs. 5-6): tied f = sigma(sum_l x_l.w / sqrt(L)); untied f = sigma(sum_l
x_l.w_l / sqrt(L)) with each row on its own sqrt(d)-sphere (``untied_norms=("rows",)``) or the
whole W renormalised as ONE vector of R^{L d} (``"flat"``, the authors' code).
nu = weak-recovery step: tied |m| >= eta; untied m_untied = ||W w*/d|| / sqrt(L) >= eta.

Step-size rules of :func:`gain_curve`: ``"equal"`` (both networks at ``lr``), ``"optimal"``
(each at its own best step size) and ``"protocol"`` (fixed step sizes of each network, possibly
depending on L: ``lr_tied``, ``lr_untied``; the paper's Fig. 3 uses 2e-4 sqrt(L) and 2e-4, far
below both optima, where the gain is L (gamma_tied / gamma_untied) = L^(3/2) for sum_l He_2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import sympy as sp
from scipy.optimize import minimize_scalar
from scipy.special import digamma

from theory._util import check_positive
from theory.results import Result
from theory.rng import as_rng
from theory.ssi.hermite import analyze
from theory.ssi.ode import integrate_ode
from theory.ssi.risk import SSIModel, TiedNetwork, UntiedNetwork
from theory.ssi.sgd.seeds import simulate_seeds
from theory.ssi.targets import parse_target
from theory.store import Store

__all__ = [
    "StepOptimum",
    "DriftConstants",
    "ClosedFormGains",
    "ODEGains",
    "ProtocolGains",
    "GainCurveResult",
    "EscapePrediction",
    "gain_curve",
    "family_target",
    "drift_constants",
    "linear_escape_steps",
    "linear_optimal",
    "closed_form_gains",
    "ode_escape_steps",
    "ode_optimal",
    "ode_gains",
    "protocol_gains",
    "typical_start",
    "predicted_escape",
    "F_STAR",
    "X_STAR",
]

FAMILIES = ("sum_he2", "sum_z", "sum_he3")
UNTIED_NORMS = ("rows", "flat")
STEP_RULES = ("equal", "optimal", "protocol")

# min_x -ln(1-x)/x^2 on (0, 1): the SIE-1 optimal-step constant (root of x/(1-x) = -2 ln(1-x))
X_STAR = 0.7153318629591615
F_STAR = -math.log1p(-X_STAR) / X_STAR**2


def family_target(target: str | sp.Expr | Callable[[int], str | sp.Expr], L: int) -> sp.Expr:
    """The sympy expression of ``target`` for sequence length ``L`` (see the module docstring)."""
    L = int(L)
    zs = [sp.Symbol(f"z{i + 1}", real=True) for i in range(L)]
    if isinstance(target, str) and target in FAMILIES:
        if target == "sum_he2":
            return sp.expand(sum(z**2 - 1 for z in zs) / sp.sqrt(2))
        if target == "sum_z":
            return sum(zs) / sp.sqrt(L)
        return sp.expand(sum(z**3 - 3 * z for z in zs) / sp.sqrt(6))
    if callable(target) and not isinstance(target, sp.Basic):
        target = target(L)
    return parse_target(target, L).expr


# =========================================================================== results


def _as_dict(res: Result, skip=("status", "message", "history", "params", "metadata")) -> dict:
    return {f.name: getattr(res, f.name) for f in fields(res) if f.name not in skip}


@dataclass(frozen=True, kw_only=True)
class StepOptimum(Result):
    """The step size ``lr`` minimising an escape step count, the minimum ``nu`` (inf and NaN when
    stuck at every step size tried) and the number of evaluations ``n_evals``."""

    nu: float = math.inf
    lr: float = math.nan
    n_evals: int = 0


@dataclass(frozen=True, kw_only=True)
class DriftConstants(Result):
    """Constants of the linearised escape ODE near m = 0 (m-coordinates; docs/ssi.md eqs.
    26-27): ``mu_k`` = E[sigma(u) He_k(u)], ``A_tied`` (signed) and ``A_untied`` (>= 0, best
    direction) the drifts, ``K_tied`` = K(0) of the tied network and ``K_row`` = K_l(0) of one
    untied row (``theory.ssi.risk``'s noise term), ``tied_escapes`` (False when the tied drift
    vanishes or, for even SIE, points inwards), and the four gains of
    :func:`theory.ssi.hermite.gains`."""

    sie: int | None = None
    L: int = 1
    activation: str = "relu"
    tied_contraction: float | None = None
    op_norm: float | None = None
    K_tied: float = math.nan
    K_row: float = math.nan
    mu_k: float | None = None
    A_tied: float = 0.0
    A_untied: float = 0.0
    tied_escapes: bool = False
    gain_equal: float | None = None
    gain_optimal: float | None = None
    gain_equal_published: float | None = None
    gain_optimal_published: float | None = None


@dataclass(frozen=True, kw_only=True)
class ClosedFormGains(DriftConstants):
    """The linearised ODE solved in closed form (:func:`closed_form_gains`): escape steps and
    optimal step sizes of each network, ``gain_equal_closed`` (both at ``lr``) and
    ``gain_optimal_closed`` (each at its optimal step size; equal to ``gain_optimal``)."""

    d: float = 0.0
    eta: float = 0.0
    lr: float = 0.0
    nu_equal_tied_closed: float | None = None
    nu_equal_untied_closed: float | None = None
    nu_opt_tied_closed: float | None = None
    nu_opt_untied_closed: float | None = None
    lr_opt_tied_closed: float | None = None
    lr_opt_untied_closed: float | None = None
    gain_equal_closed: float | None = None
    gain_optimal_closed: float | None = None


@dataclass(frozen=True, kw_only=True)
class ODEGains(Result):
    """Gains of the full ODE (:func:`ode_gains`): at equal step size ``lr`` and at each
    network's ODE-optimal step size, from the start ``ode_start``."""

    ode_start: str = "fixed"
    m0_tied: float = 0.0
    m0_untied_row: float = 0.0
    nu_equal_tied_ode: float = math.inf
    nu_equal_untied_ode: float = math.inf
    gain_equal_ode: float | None = None
    nu_opt_tied_ode: float = math.inf
    nu_opt_untied_ode: float = math.inf
    lr_opt_tied_ode: float = math.nan
    lr_opt_untied_ode: float = math.nan
    gain_optimal_ode: float | None = None


@dataclass(frozen=True, kw_only=True)
class ProtocolGains(Result):
    """Gains at fixed step sizes of each network (:func:`protocol_gains`): the full ODE from the
    start ``ode_start`` (``gain_protocol_ode``) and its linearisation in closed form
    (``gain_protocol_closed``, from m0 = 1/sqrt(d)), with the escape steps of each network."""

    ode_start: str = "fixed"
    lr_tied: float = math.nan
    lr_untied: float = math.nan
    nu_protocol_tied_ode: float = math.inf
    nu_protocol_untied_ode: float = math.inf
    gain_protocol_ode: float | None = None
    nu_protocol_tied_closed: float = math.inf
    nu_protocol_untied_closed: float = math.inf
    gain_protocol_closed: float | None = None


@dataclass(frozen=True, kw_only=True)
class GainCurveResult(Result):
    """The gain vs L (:func:`gain_curve`): one row (a dict) per L in ``rows``;
    :meth:`column` gives one field across the rows as an array (None -> NaN)."""

    target: str = ""
    step_rule: str = "equal"
    d: float = 0.0
    lr: float = 0.0
    eta: float = 0.0
    activation: str = "relu"
    ode_start: str = "typical"
    rows: list = field(default_factory=list, repr=False)

    def column(self, name: str) -> np.ndarray:
        return np.array([np.nan if r.get(name) is None else r[name] for r in self.rows], float)


@dataclass(frozen=True, kw_only=True)
class EscapePrediction(Result):
    """Escape-time scaling law and gains of a target (:func:`predicted_escape`)."""

    sie: int | None = None
    even_sie: int | None = None
    alpha_tied: float | None = None
    alpha_untied: float | None = None
    gain_optimal: float | None = None
    gain_equal: float | None = None
    gain_optimal_published: float | None = None
    gain_equal_published: float | None = None
    tied_learnable: bool | None = None
    exact: bool = True
    scaling: str | None = None
    scaling_constant_lr: str | None = None
    exponent: int | None = None
    log_power: int | None = None
    steps_order: float | None = None
    steps_escape_tied: float | None = None
    steps_escape_untied: float | None = None
    gain_ode: float | None = None


# =========================================================================== closed form


def drift_constants(expr: str | sp.Expr, L: int, activation: str = "relu") -> DriftConstants:
    """Constants of the linearised escape ODE near m = 0 (see :class:`DriftConstants`)."""
    L = int(L)
    rep = analyze(expr, L)
    k = rep.sie
    tn = TiedNetwork(expr, L=L, activation=activation)
    un = UntiedNetwork(expr, L=L, activation=activation)
    K_t = float(tn.noise_K(None, 0.0))
    K_row = float(np.asarray(un.noise_K(None, np.zeros(L)))[0])
    common = dict(
        sie=k,
        L=L,
        activation=activation,
        tied_contraction=rep.tied_contraction,
        op_norm=rep.op_norm,
        K_tied=K_t,
        K_row=K_row,
        gain_equal=rep.gain_equal,
        gain_optimal=rep.gain_optimal,
        gain_equal_published=rep.gain_equal_published,
        gain_optimal_published=rep.gain_optimal_published,
        params=dict(expr=str(rep.expr), L=L, activation=activation),
    )
    if k is None:
        return DriftConstants(
            mu_k=None, A_tied=0.0, A_untied=0.0, tied_escapes=False, message=rep.message, **common
        )
    mu = float(tn._ridge_moments(k)[0][k])
    if abs(mu) < 1e-12:  # quadrature zero (e.g. relu has no odd Hermite coefficient >= 3)
        mu = 0.0
    A_t = 2 * k * mu * L ** (-k / 2) * float(rep.tied_contraction)
    A_u = 2 * k * abs(mu) * L ** (-k / 2) * float(rep.op_norm)
    esc = A_t != 0 and (k % 2 == 1 or A_t > 0)
    msg = "" if esc else "the tied drift vanishes or points inwards: the tied network is stuck"
    return DriftConstants(
        mu_k=mu, A_tied=A_t, A_untied=A_u, tied_escapes=bool(esc), message=msg, **common
    )


def linear_escape_steps(
    A: float, K: float, k: int, lr: float, d: float, m0: float, eta: float
) -> float:
    """SGD steps nu = t d / lr for dm/dt = A m^(k-1) - (lr K / 2) m from m0 to eta (inf if the
    noise term stops it first).  Odd k uses |A| (the sign of m follows the drift)."""
    A = abs(A) if k % 2 == 1 else A
    if A <= 0 or lr <= 0:
        return math.inf
    c = 0.5 * lr * K
    if k == 1:
        if A - c * eta <= 0:
            return math.inf
        t = (eta - m0) / A if c == 0 else -math.log((A - c * eta) / (A - c * m0)) / c
    elif k == 2:
        if A - c <= 0:
            return math.inf
        t = math.log(eta / m0) / (A - c)
    else:
        q0, q1 = c / (A * m0 ** (k - 2)), c / (A * eta ** (k - 2))
        if q0 >= 1:
            return math.inf
        if c == 0:
            t = (m0 ** (2 - k) - eta ** (2 - k)) / ((k - 2) * A)
        else:
            t = (math.log1p(-q1) - math.log1p(-q0)) / ((k - 2) * c)
    return t * d / lr


def linear_optimal(A: float, K: float, k: int, d: float, m0: float, eta: float) -> StepOptimum:
    """The step size minimising :func:`linear_escape_steps`: explicit for k = 2 (lr* = A/K,
    nu* = 2 d K ln(eta/m0) / A^2), a bounded 1-D minimisation over the admissible range
    (0, lr_max) otherwise (lr_max: where the noise term cancels the drift at the start)."""
    A = abs(A) if k % 2 == 1 else A
    if A <= 0:
        return StepOptimum(nu=math.inf, lr=math.nan, message="no positive drift: stuck")
    if k == 2:
        return StepOptimum(nu=2 * d * K * math.log(eta / m0) / A**2, lr=A / K, n_evals=0)
    lr_max = 2 * A / (K * eta) if k == 1 else 2 * A * m0 ** (k - 2) / K
    f = lambda y: math.log(linear_escape_steps(A, K, k, y * lr_max, d, m0, eta))
    r = minimize_scalar(f, bounds=(1e-6, 1 - 1e-9), method="bounded", options=dict(xatol=1e-10))
    return StepOptimum(nu=math.exp(r.fun), lr=float(r.x) * lr_max, n_evals=int(r.nfev))


def _ratio(a, b):
    if not math.isfinite(b):
        return 0.0 if math.isfinite(a) else None
    return a / b if math.isfinite(a) else math.inf


def closed_form_gains(
    expr: str | sp.Expr,
    L: int,
    d: float,
    eta: float,
    lr: float,
    activation: str = "relu",
    m0: float | None = None,
) -> ClosedFormGains:
    """Closed-form (linearised ODE) gains: ``gain_equal_closed`` (both at ``lr``) and
    ``gain_optimal_closed`` (each at its own optimal lr), with nu and lr of each network.
    Tied: from m0 (default 1/sqrt(d)) to eta; untied (m-coordinates, best direction): from
    sqrt(L) m0 to sqrt(L) eta, i.e. the same m_untied.  gain = 0 when the tied network cannot
    escape."""
    c = drift_constants(expr, L, activation)
    m0 = 1 / math.sqrt(d) if m0 is None else m0
    k = c.sie
    base = dict(_as_dict(c), d=d, eta=eta, lr=lr)
    if k is None:
        return ClosedFormGains(**base, message=c.message, params=c.params)
    s = math.sqrt(L)
    A_t, A_u, K_t, K_r = c.A_tied, c.A_untied, c.K_tied, c.K_row
    nt_eq = linear_escape_steps(A_t, K_t, k, lr, d, m0, eta) if c.tied_escapes else math.inf
    nu_eq = linear_escape_steps(A_u, K_r, k, lr, d, s * m0, s * eta)
    ot = linear_optimal(A_t, K_t, k, d, m0, eta) if c.tied_escapes else StepOptimum()
    ou = linear_optimal(A_u, K_r, k, d, s * m0, s * eta)
    return ClosedFormGains(
        **base,
        nu_equal_tied_closed=nt_eq,
        nu_equal_untied_closed=nu_eq,
        nu_opt_tied_closed=ot.nu,
        nu_opt_untied_closed=ou.nu,
        lr_opt_tied_closed=ot.lr,
        lr_opt_untied_closed=ou.lr,
        gain_equal_closed=_ratio(nu_eq, nt_eq),
        gain_optimal_closed=_ratio(ou.nu, ot.nu),
        message=c.message,
        params=dict(c.params, d=d, eta=eta, lr=lr, m0=m0),
    )


# =========================================================================== numerical ODE


def typical_start(d: float, rows: int) -> float:
    """Per-row m0 whose ODE escape matches a uniformly random start on average: the geometric
    mean of |m_vec| for m_l ~ N(0, 1/d) i.i.d. (|m_vec|^2 d ~ chi^2_rows), divided by
    sqrt(rows): exp((psi(rows/2) + ln 2) / 2) / sqrt(rows d).  (The SIE-2 escape time is linear
    in ln(1/m0), so the mean escape time of random starts is the one from this m0.)"""
    return math.exp(0.5 * (float(digamma(rows / 2)) + math.log(2))) / math.sqrt(rows * d)


def ode_escape_steps(
    model: SSIModel, lr: float, d: float, eta: float, m0: float | None = None
) -> float:
    """Weak-recovery steps nu of the package's ODE (:func:`theory.ssi.integrate_ode`) for one
    step size (inf when stuck).  m0: per-row start (default 1/sqrt(d))."""
    res = integrate_ode(model, lr, d, m0=m0, eta=eta)
    return math.inf if res.steps_escape is None else float(res.steps_escape)


def ode_optimal(
    model: SSIModel,
    d: float,
    eta: float,
    lr_guess: float,
    m0: float | None = None,
    *,
    xatol: float = 0.005,
    span: float = 40.0,
) -> StepOptimum:
    """The step size minimising the ODE's escape steps, by bounded Brent minimisation of ln nu
    over ln lr in [lr_guess / span, 1.9 lr_guess] (stuck step sizes count as a large penalty).
    ``lr_guess``: the closed-form optimum (the admissible range ends near 2 lr_guess for SIE 2,
    ~1.4 lr_guess for SIE 1).  xatol: tolerance in ln lr (nu is flat at the optimum: 0.005 in
    ln lr is ~1e-5 relative in nu)."""
    cache = {}

    def f(x):
        if x not in cache:
            nu = ode_escape_steps(model, math.exp(x), d, eta, m0)
            cache[x] = math.log(nu) if math.isfinite(nu) else 1e3 - x
        return cache[x]

    lo, hi = math.log(lr_guess / span), math.log(1.9 * lr_guess)
    minimize_scalar(f, bounds=(lo, hi), method="bounded", options=dict(xatol=xatol))
    best = min(cache, key=cache.get)
    if cache[best] >= 1e3 - hi:  # stuck at every step size tried
        return StepOptimum(
            nu=math.inf, lr=math.nan, n_evals=len(cache), message="stuck at every step size"
        )
    return StepOptimum(nu=math.exp(cache[best]), lr=math.exp(best), n_evals=len(cache))


def ode_gains(
    expr: str | sp.Expr,
    L: int,
    d: float,
    eta: float,
    lr: float,
    activation: str = "relu",
    start: str = "fixed",
    m0: float | None = None,
) -> ODEGains:
    """Gains of the full ODE: ``gain_equal_ode`` (both at ``lr``) and ``gain_optimal_ode``
    (each network at its ODE-optimal step size, :func:`ode_optimal`).  start: "fixed" (every row
    at m0, default 1/sqrt(d)) or "typical" (:func:`typical_start`, matching random starts)."""
    m0t, m0u = _ode_starts(start, d, L, m0)
    c = closed_form_gains(expr, L, d, eta, lr, activation, m0=m0)
    tn = TiedNetwork(expr, L=L, activation=activation)
    un = UntiedNetwork(expr, L=L, activation=activation)
    nt = ode_escape_steps(tn, lr, d, eta, m0t) if c.tied_escapes else math.inf
    nu = ode_escape_steps(un, lr, d, eta, m0u)
    ok = lambda x: x is not None and math.isfinite(x) and x > 0
    if c.tied_escapes and ok(c.lr_opt_tied_closed):
        ot = ode_optimal(tn, d, eta, c.lr_opt_tied_closed, m0t)
    else:
        ot = StepOptimum()
    ou = (
        ode_optimal(un, d, eta, c.lr_opt_untied_closed, m0u)
        if ok(c.lr_opt_untied_closed)
        else (StepOptimum())
    )
    g_eq = (nu / nt) if math.isfinite(nt) else (0.0 if math.isfinite(nu) else None)
    g_opt = (ou.nu / ot.nu) if math.isfinite(ot.nu) else (0.0 if math.isfinite(ou.nu) else None)
    fin = lambda g: None if g is None or not math.isfinite(g) else g  # untied stuck too
    return ODEGains(
        ode_start=start,
        m0_tied=m0t,
        m0_untied_row=m0u,
        nu_equal_tied_ode=nt,
        nu_equal_untied_ode=nu,
        gain_equal_ode=fin(g_eq),
        nu_opt_tied_ode=ot.nu,
        nu_opt_untied_ode=ou.nu,
        lr_opt_tied_ode=ot.lr,
        lr_opt_untied_ode=ou.lr,
        gain_optimal_ode=fin(g_opt),
        params=dict(expr=str(expr), L=L, d=d, eta=eta, lr=lr, activation=activation),
    )


@functools.lru_cache(maxsize=512)
def _ode_gains_memo(expr, L, d, eta, lr, activation, start, m0) -> ODEGains:
    """:func:`ode_gains`, once per process for each setting: the equal- and the optimal-step
    curves of one figure (two :func:`gain_curve` calls) need the same ODE optima, ~25 ODE
    integrations per network and L."""
    return ode_gains(expr, L, d, eta, lr, activation, start=start, m0=m0)


def _ode_starts(start: str, d: float, L: int, m0: float | None) -> tuple[float, float]:
    """Per-row ODE starts (tied, untied) for ``start`` "fixed" (m0, default 1/sqrt(d)) or
    "typical" (:func:`typical_start`)."""
    if start not in ("fixed", "typical"):
        raise ValueError(f"start must be 'fixed' or 'typical', got {start!r}")
    if start == "typical":
        return typical_start(d, 1), typical_start(d, L)
    m0 = 1 / math.sqrt(d) if m0 is None else float(m0)
    return m0, m0


def protocol_gains(
    expr: str | sp.Expr,
    L: int,
    d: float,
    eta: float,
    lr_tied: float,
    lr_untied: float,
    activation: str = "relu",
    start: str = "fixed",
    m0: float | None = None,
    ode: bool = True,
) -> ProtocolGains:
    """Gain nu_untied / nu_tied with the tied network at ``lr_tied`` and the untied one at
    ``lr_untied``: the full ODE from ``start`` ("fixed": every row at m0, default 1/sqrt(d);
    "typical": :func:`typical_start`) and the closed form of the linearised ODE (from the fixed
    start; SIE-2 small-step limit: gain = (A_tied lr_tied) / (A_untied lr_untied), i.e.
    L^(3/2) for sum_l He_2 at the paper's Fig. 3 protocol lr_tied = sqrt(L) lr_untied).
    ode=False: the closed form only (the ODE fields stay inf / None)."""
    check_positive("lr_tied", lr_tied)
    check_positive("lr_untied", lr_untied)
    m0t, m0u = _ode_starts(start, d, L, m0)
    c = drift_constants(expr, L, activation)
    tn = TiedNetwork(expr, L=L, activation=activation)
    un = UntiedNetwork(expr, L=L, activation=activation)
    nt = ode_escape_steps(tn, lr_tied, d, eta, m0t) if ode and c.tied_escapes else math.inf
    nu = ode_escape_steps(un, lr_untied, d, eta, m0u) if ode else math.inf
    mc, s, k = (1 / math.sqrt(d) if m0 is None else float(m0)), math.sqrt(L), c.sie
    if k is None:
        ntc = nuc = math.inf
    else:
        ntc = (
            linear_escape_steps(c.A_tied, c.K_tied, k, lr_tied, d, mc, eta)
            if c.tied_escapes
            else math.inf
        )
        nuc = linear_escape_steps(c.A_untied, c.K_row, k, lr_untied, d, s * mc, s * eta)
    fin = lambda g: None if g is None or not math.isfinite(g) else g
    return ProtocolGains(
        ode_start=start,
        lr_tied=float(lr_tied),
        lr_untied=float(lr_untied),
        nu_protocol_tied_ode=nt,
        nu_protocol_untied_ode=nu,
        gain_protocol_ode=fin(_ratio(nu, nt)),
        nu_protocol_tied_closed=ntc,
        nu_protocol_untied_closed=nuc,
        gain_protocol_closed=fin(_ratio(nuc, ntc)),
        message=c.message,
        params=dict(expr=str(expr), L=L, d=d, eta=eta, activation=activation, start=start, m0=m0),
    )


# =========================================================================== simulation + rows


def _summarise(nu_list, max_steps):
    """(mean, SE, number censored) of escape steps, censored runs (None) counted at
    max_steps."""
    nu = np.array([np.nan if v is None else v for v in nu_list], float)
    stuck = int(np.isnan(nu).sum())
    if stuck == len(nu):
        return math.inf, math.nan, stuck
    # censored runs count at max_steps (a lower bound on their escape step)
    nu = np.where(np.isnan(nu), float(max_steps), nu)
    se = float(nu.std(ddof=1) / math.sqrt(len(nu))) if len(nu) > 1 else 0.0
    return float(nu.mean()), se, stuck


def _scan(run, cand, step_rule):
    """Run ``run(lr, cap)`` -> (mean, se, stuck, escape steps of each run) over the candidate
    step sizes (ordered from the centre outwards); return the best (mean, se, stuck, lr) and
    all stats (``nus``: each run's escape step, None when censored at ``cap``)."""
    stats = []
    nus = {}
    cap = None
    for g in cand:
        mean, se, stuck, nus[float(g)] = run(float(g), cap)
        stats.append((mean if stuck == 0 else math.inf, mean, se, stuck, float(g)))
        if step_rule == "optimal" and stuck == 0:
            # a step size whose runs take 3x longer than the best so far cannot be the
            # optimum: censor there (bounds the cost of stuck / slow runs)
            cap = int(3 * min(s[0] for s in stats)) + 1
    ok = [s for s in stats if np.isfinite(s[0])] or stats
    best = min(ok, key=lambda s: s[1])
    return best[1:], [dict(lr=s[4], nu=s[1], nu_err=s[2], stuck=s[3], nus=nus[s[4]]) for s in stats]


def _ratio_err(mu, su, mt, st):
    gain = mu / mt if mt > 0 and math.isfinite(mt) else math.nan
    err = (
        gain * math.hypot(st / mt, su / mu)
        if mt > 0 and mu > 0 and math.isfinite(mu * mt)
        else math.nan
    )
    return gain, err


_CLOSED_KEYS = (
    "A_tied",
    "A_untied",
    "K_tied",
    "K_row",
    "mu_k",
    "tied_escapes",
    "gain_equal_closed",
    "gain_optimal_closed",
    "lr_opt_tied_closed",
    "lr_opt_untied_closed",
    "nu_opt_tied_closed",
    "nu_opt_untied_closed",
    "nu_equal_tied_closed",
    "nu_equal_untied_closed",
)


def gain_curve(
    target: str | sp.Expr | Callable[[int], str | sp.Expr],
    Ls: Sequence[int] | int,
    *,
    simulate: bool = False,
    d: int = 1000,
    lr: float = 0.05,
    seeds: int | Sequence[int] = 16,
    step_rule: str = "equal",
    activation: str = "relu",
    eta: float = 0.5,
    lrs: Sequence[float] | None = None,
    lr_factors: Sequence[float] = (0.5, 0.71, 1.0, 1.41),
    max_steps: int | None = None,
    workers: int | None = None,
    progress: bool = False,
    rng: int | np.random.Generator = 0,
    ode: bool = True,
    ode_start: str = "typical",
    untied_norms: Sequence[str] = ("rows",),
    store: Store | str | Path | None = None,
    lr_tied: float | Callable[[int], float] | None = None,
    lr_untied: float | Callable[[int], float] | None = None,
    m0: float | None = None,
) -> GainCurveResult:
    """The gain vs L, predicted and (optionally) simulated: one row per L.

    Row fields: L, target, sie, tied_contraction, op_norm; the gains of the leading Hermite
    tensor (:func:`theory.ssi.hermite.gains`): ``gain_equal``, ``gain_optimal`` (this package)
    and ``gain_equal_published``, ``gain_optimal_published`` (the paper's formulas);
    ``gain_predicted`` (the package's gain of ``step_rule``); the closed form of the linearised
    ODE at this d, eta, lr (:func:`closed_form_gains`): gain_optimal_closed, gain_equal_closed,
    A_tied, A_untied, K_tied, K_row, lr_opt_*_closed, nu_*_closed; with ``ode=True`` the full
    ODE: gain_optimal_ode, gain_equal_ode, lr_opt_tied_ode, lr_opt_untied_ode, nu_opt_*_ode,
    nu_equal_*_ode (start ``ode_start``: "typical" matches the random starts of the simulation,
    "fixed" is m0 = 1/sqrt(d)), gain_predicted_ode.  With ``simulate=True`` (exact reduced SGD
    chain): gain_sim, gain_sim_err, nu_tied, nu_tied_err, nu_untied, nu_untied_err, lr_tied,
    lr_untied, n_seeds, stuck_tied, stuck_untied (runs without recovery within ``max_steps``,
    counted at max_steps), scan_tied / scan_untied (every step size tried), and for ``"flat"``
    in ``untied_norms`` the same with suffix ``_flat`` (flattened untied normalisation).  Step
    sizes for ``step_rule="optimal"``: ``lrs`` if given (shared by both networks), else each
    network's ODE-optimal step size times ``lr_factors`` (closed-form optimum if
    ``ode=False``).  seeds: a count (drawn from ``rng``) or a list of ints.  store: a
    :class:`theory.store.Store` or its path; every finished SGD run is kept there and not run
    again, so an interrupted curve resumes.

    ``step_rule="protocol"``: the tied network at ``lr_tied`` and the untied one at
    ``lr_untied`` (each a number or a function of L; the paper's Fig. 3: ``lambda L: 2e-4 *
    sqrt(L)`` and 2e-4); its columns: lr_tied_protocol, lr_untied_protocol, gain_protocol_closed
    (= gain_predicted) and, with ``ode=True``, gain_protocol_ode, nu_protocol_*_ode
    (:func:`protocol_gains`).  m0: per-row fixed start of the simulations and of the ODE's
    "fixed" start (None: simulations from uniformly random starts, ODE fixed start 1/sqrt(d)).
    Each scan entry lists every run's escape step (``nus``, None when censored).
    """
    if step_rule not in STEP_RULES:
        raise ValueError(f"step_rule must be one of {STEP_RULES}, got {step_rule!r}")
    if step_rule == "protocol" and (lr_tied is None or lr_untied is None):
        raise ValueError("step_rule='protocol' needs lr_tied and lr_untied (numbers or L -> lr)")
    if m0 is not None and not 0 < float(m0) < 1:
        raise ValueError(f"m0 must lie in (0, 1) (or be None for random starts), got {m0}")
    bad = [u for u in untied_norms if u not in UNTIED_NORMS]
    if bad or not untied_norms:
        raise ValueError(
            f"untied_norms must be a non-empty subset of {UNTIED_NORMS}, got {untied_norms!r}"
        )
    Ls = [int(L) for L in np.atleast_1d(Ls)]
    if not Ls or min(Ls) < 1:
        raise ValueError("Ls must be positive integers")
    check_positive("d", d)
    check_positive("lr", lr)
    check_positive("eta", eta)
    if isinstance(seeds, (int, np.integer)):
        base = as_rng(rng).integers(0, 2**62, size=int(seeds))
        seed_list = [int(s) for s in base]
    else:
        seed_list = [int(s) for s in seeds]
    if store is not None and not isinstance(store, Store):
        store = Store(store)
    rows = []
    for L in Ls:
        expr = family_target(target, L)
        cf = closed_form_gains(expr, L, d, eta, lr, activation, m0=m0)
        row = dict(
            L=L,
            target=str(expr),
            sie=cf.sie,
            tied_contraction=cf.tied_contraction,
            op_norm=cf.op_norm,
            gain_optimal=cf.gain_optimal,
            gain_equal=cf.gain_equal,
            gain_optimal_published=cf.gain_optimal_published,
            gain_equal_published=cf.gain_equal_published,
            step_rule=step_rule,
            gain_predicted=cf.gain_optimal if step_rule == "optimal" else cf.gain_equal,
            d=d,
            eta=eta,
            lr=lr,
            activation=activation,
        )
        for key in _CLOSED_KEYS:
            row[key] = getattr(cf, key)
        lr_centre = dict(tied=cf.lr_opt_tied_closed, untied=cf.lr_opt_untied_closed)
        if step_rule == "protocol":
            lr_centre = {
                k: float(v(L) if callable(v) else v)
                for k, v in (("tied", lr_tied), ("untied", lr_untied))
            }
            pg = protocol_gains(
                expr,
                L,
                d,
                eta,
                lr_centre["tied"],
                lr_centre["untied"],
                activation,
                start=ode_start,
                m0=m0,
                ode=ode,
            )
            row.update(
                lr_tied_protocol=lr_centre["tied"],
                lr_untied_protocol=lr_centre["untied"],
                gain_protocol_closed=pg.gain_protocol_closed,
                gain_predicted=pg.gain_protocol_closed,
                nu_protocol_tied_closed=pg.nu_protocol_tied_closed,
                nu_protocol_untied_closed=pg.nu_protocol_untied_closed,
            )
            if ode and cf.sie is not None:
                row.update(
                    ode_start=ode_start,
                    gain_protocol_ode=pg.gain_protocol_ode,
                    gain_predicted_ode=pg.gain_protocol_ode,
                    nu_protocol_tied_ode=pg.nu_protocol_tied_ode,
                    nu_protocol_untied_ode=pg.nu_protocol_untied_ode,
                )
        elif ode and cf.sie is not None:
            og = _ode_gains_memo(expr, L, d, eta, lr, activation, ode_start, m0)
            row.update(_as_dict(og))
            row["gain_predicted_ode"] = (
                og.gain_optimal_ode if step_rule == "optimal" else og.gain_equal_ode
            )
            lr_centre = dict(tied=og.lr_opt_tied_ode, untied=og.lr_opt_untied_ode)
        if simulate:
            sim = dict(
                d=d,
                lr=lr,
                eta=eta,
                activation=activation,
                step_rule=step_rule,
                lrs=lrs,
                lr_factors=lr_factors,
                max_steps=max_steps,
                untied_norms=untied_norms,
                workers=workers,
                progress=progress,
                m0=m0,
            )
            _simulate_row(row, expr, L, sim, lr_centre, seed_list, store)
        rows.append(row)
    return GainCurveResult(
        target=str(target),
        step_rule=step_rule,
        d=d,
        lr=lr,
        eta=eta,
        activation=activation,
        ode_start=ode_start,
        rows=rows,
        params=dict(
            Ls=Ls,
            simulate=simulate,
            seeds=len(seed_list),
            untied_norms=list(untied_norms),
            m0=m0,
        ),
    )


def _simulate_row(row, expr, L, sim, lr_centre, seed_list, store):
    """The SGD columns of one gain-curve row (see :func:`gain_curve`; ``sim``: its simulation
    arguments)."""
    d, lr, eta, activation = sim["d"], sim["lr"], sim["eta"], sim["activation"]
    step_rule, lrs, lr_factors = sim["step_rule"], sim["lrs"], sim["lr_factors"]
    max_steps, untied_norms = sim["max_steps"], sim["untied_norms"]
    workers, progress = sim["workers"], sim["progress"]
    # a fixed start only when asked (the stored runs of random starts keep their keys)
    start_kw = {} if sim["m0"] is None else dict(m0=float(sim["m0"]))
    cap0 = int(max_steps) if max_steps is not None else None
    best = {}
    kinds = ["tied"] + [("untied" if u == "rows" else "untied_flat") for u in untied_norms]
    for kind in kinds:
        if step_rule == "equal":
            cand = [lr]
        elif step_rule == "protocol":
            cand = [lr_centre["tied" if kind == "tied" else "untied"]]
        elif lrs is not None:
            cand = sorted(lrs, key=lambda g: abs(math.log(g / lr)))
        else:
            c0 = lr_centre["tied" if kind == "tied" else "untied"]
            if c0 is None or not math.isfinite(c0):
                c0 = lr
            cand = sorted((c0 * f for f in lr_factors), key=lambda g: abs(math.log(g / c0)))
        if cap0 is None:
            keys = (
                "nu_opt_untied_ode",
                "nu_equal_untied_ode",
                "nu_opt_untied_closed",
                "nu_protocol_untied_closed",
            )
            ref = max(*(row.get(k) or 0.0 for k in keys), 1e4)
            base_cap = int(min(50 * ref if math.isfinite(ref) else 1e9, 200 * d / min(cand)))
        else:
            base_cap = cap0
        if kind == "tied":
            model = TiedNetwork(expr, L=L, activation=activation)
        else:
            norm = "rows" if kind == "untied" else "flat"
            model = UntiedNetwork(expr, L=L, activation=activation, normalisation=norm)

        def run(g, cap, _m=model, _b=base_cap):
            cap = _b if cap is None else min(cap, _b)
            res = simulate_seeds(
                _m,
                d,
                g,
                seed_list,
                reduced=True,
                workers=workers,
                progress=progress,
                store=store,
                eta=eta,
                max_steps=cap,
                margin=0.0,
                t_margin=0.0,
                n_record=2,
                **start_kw,
            )
            nus = [r.steps_escape for r in res]
            return (*_summarise(nus, cap), nus)

        best[kind], row[f"scan_{kind}"] = _scan(run, cand, step_rule)
    mt, st, kt, gt = best["tied"]
    row.update(nu_tied=mt, nu_tied_err=st, lr_tied=gt, stuck_tied=kt, n_seeds=len(seed_list))
    for kind in kinds[1:]:
        mu, su, ku, gu = best[kind]
        sfx = "" if kind == "untied" else "_flat"
        gain, err = _ratio_err(mu, su, mt, st)
        row.update(
            {
                f"gain_sim{sfx}": gain,
                f"gain_sim{sfx}_err": err,
                f"nu_untied{sfx}": mu,
                f"nu_untied{sfx}_err": su,
                f"lr_untied{sfx}": gu,
                f"stuck_untied{sfx}": ku,
            }
        )


# =========================================================================== escape predictions


def predicted_escape(
    target: str | sp.Expr,
    L: int | None = None,
    d: float | None = None,
    lr: float | None = None,
    activation: str = "relu",
) -> EscapePrediction:
    """Escape-time scaling law and tied/untied gains from the Hermite data (docs/ssi.md eq. 28).

    ``scaling`` ("d", "d log^2 d", "d^(k-1)"), ``exponent`` and ``log_power`` (steps ~
    d^exponent log^log_power d at the best admissible step size), ``steps_order`` (that
    expression evaluated at ``d`` when given, no constant), ``alpha_tied`` = C_SIE x (1..1),
    ``alpha_untied`` = ||C_SIE||_op, the four gains of :func:`theory.ssi.hermite.gains`,
    ``tied_learnable``, ``even_sie``.  The scaling is at the optimal step size (constant-gamma
    SIE = 2: d log d, ``scaling_constant_lr``).  With both ``d`` and ``lr``: the ODE escape
    steps of the tied and the untied network with ``activation`` from m0 = 1/sqrt(d)
    (threshold eta = 2/sqrt(d) on m, resp. on m_untied): ``steps_escape_tied``,
    ``steps_escape_untied`` (None if stuck) and ``gain_ode`` (their ratio, untied / tied, at
    equal step size).
    """
    rep = analyze(target, L)
    k = rep.sie
    out = dict(
        sie=k,
        even_sie=rep.even_sie,
        alpha_tied=rep.tied_contraction,
        alpha_untied=rep.op_norm,
        gain_optimal=rep.gain_optimal,
        gain_equal=rep.gain_equal,
        gain_optimal_published=rep.gain_optimal_published,
        gain_equal_published=rep.gain_equal_published,
        tied_learnable=rep.tied_learnable,
        exact=rep.exact,
        message=rep.message,
        params=dict(expr=rep.expr, L=rep.L, d=d, lr=lr, activation=activation),
    )
    if k is None:
        return EscapePrediction(**out)
    if k == 1:
        sc, ex, lp = "d", 1, 0
    elif k == 2:
        sc, ex, lp = "d log^2 d", 1, 2
    else:
        sc, ex, lp = f"d^{k - 1}", k - 1, 0
    out.update(
        scaling=sc, exponent=ex, log_power=lp, scaling_constant_lr=("d log d" if k == 2 else sc)
    )
    if d is not None:
        d = check_positive("d", d)
        out["steps_order"] = d**ex * math.log(d) ** lp
        if lr is not None:
            t = parse_target(target, L)
            rt = integrate_ode(TiedNetwork(t, t.L, activation), lr, d)
            ru = integrate_ode(UntiedNetwork(t, t.L, activation), lr, d)
            st, su = rt.steps_escape, ru.steps_escape
            out.update(
                steps_escape_tied=st,
                steps_escape_untied=su,
                gain_ode=(su / st) if (st and su) else (0.0 if su else None),
            )
    return EscapePrediction(**out)
