"""Fixed points of the L = 2 state equations on a branch (docs/attention.md §6, docs/solver.md §3).

:func:`fixed_point` solves the state map of :mod:`theory.attention.state_equations` with the
two-fidelity solver of :mod:`theory.solve`: the cheap split rule ``SPLIT_COARSE`` supplies the
start and the Jacobian, the requested rule polishes in a few evaluations.  A branch is an
initialisation plus an exact invariant subspace (positional θ ≡ 0, semantic m ≡ 0, trivial
both); the label of the result is read from the converged order
parameters.  A branch that collapses onto the trivial one is stopped early (status "diverged",
``metadata["collapsed"]``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.params import ERMParams, as_params, check_alpha
from theory.attention.quadrature import Rule, coarse_rule, make_rule
from theory.attention.state_equations import (
    channel,
    free_energy,
    guard_theta,
    hats_from_channel,
    state_map,
    zero_point,
)
from theory.results import Result
from theory.rng import RNGLike
from theory.solve import DecayStop, solve_two_fidelity
from theory.store import point_key

__all__ = [
    "BRANCHES",
    "COLLAPSE",
    "DEFAULT_INIT",
    "LABEL_TOL",
    "WARM_EXTRAS",
    "ERMResult",
    "fixed_point",
    "label_branch",
]

BRANCHES = ("semantic", "positional", "trivial")

#: cold-start initialisations (docs/attention.md §6).  The positional V is divided by √α (the
#: positional V at the reference parameters is ≈ 16/√α for α in [0.5, 4]), the trivial one by
#: √(1 + α/5) (V = 1 makes λ + σ²V̂ negative at α ≳ 3); from there the
#: quasi-Newton solve converges where the damped iteration, whose map has an eigenvalue ≈ -5
#: in the m direction, needs many steps.
DEFAULT_INIT = {
    "semantic": dict(q=0.9, m=0.0, theta=0.35, V=1.0),
    "positional": dict(q=0.05, m=0.25, theta=0.0, V=16.0),
    "trivial": dict(q=0.05, m=0.0, theta=0.0, V=30.0),
}

#: what a converged result passes on to a warm-started neighbour (in ``metadata``): the
#: accurate-minus-cheap shift and the cheap stage's Jacobian
WARM_EXTRAS = ("cheap_shift", "jac_cheap")
#: a warm start whose accurate-map residual is below WARM_DIRECT_RESIDUAL is polished by
#: quasi-Newton on the accurate rule directly (at most WARM_DIRECT_MAPS maps)
WARM_DIRECT_RESIDUAL = 5e-2
WARM_DIRECT_MAPS = 6

#: |m| or |θ|/σ² below this is "zero" when labelling a fixed point
LABEL_TOL = 1e-6
#: during the iteration, θ/σ² (semantic) or |m| (positional) below this and still decreasing
#: means the branch collapsed onto the trivial one (status "diverged", message says so)
COLLAPSE = 2e-2
#: the trivial solve: q/ρ below this and decreasing (DecayStop) → the Q = 0 point is checked
Q_ZERO = 1e-7
Q_ZERO_LABEL = "q decays to 0 on the trivial subspace"
#: a cold semantic start's Anderson stage on the cheap rule hands over to quasi-Newton after
#: this many maps (solve_two_fidelity's ``newton_after``): at α ≲ 0.4 and random σ, λ, A it
#: neither converged nor collapsed in 116 maps (BENCHMARKS.md "Robustness sweep"); at the
#: reference it needs ~10.  Off (None) until the handover is measured on those settings: it is
#: tested on a toy map only, and what it does on the real map at small α is not known yet
NEWTON_AFTER = None
#: how many halvings of the default start's V :func:`start_point` tries
START_SCAN = 8
#: the teacher norm ρ = σ² the overlaps of DEFAULT_INIT are tuned to (σ = 0.5)
RHO_DEFAULT = 0.25
#: what :func:`fixed_point` does when its start decays onto the trivial point
WHEN_ABSENT = ("flow", "stop", "off")


def label_branch(m: float, theta: float, params: ERMParams | Mapping | None) -> str:
    """ "semantic" (θ ≠ 0 = m), "positional" (m ≠ 0 = θ), "trivial" or "mixed"."""
    p = as_params(params)
    has_m = abs(m) > LABEL_TOL
    has_t = abs(theta) / p.s2 > LABEL_TOL
    if has_t and not has_m:
        return "semantic"
    if has_m and not has_t:
        return "positional"
    if not has_m and not has_t:
        return "trivial"
    return "mixed"


@dataclass(frozen=True, kw_only=True)
class ERMResult(Result):
    """A replica-symmetric fixed point of the L = 2 state equations.

    Order parameters ``q, m, theta, V`` (|m|, |θ|: Q → -Q is a symmetry), their conjugates,
    ``eps_t`` = -Φ, ``eps_g``; ``theta_over_sigma2`` = θ/σ² and ``m_over_sigma2`` = m/σ² (the
    plotted quantities, as in the finite-d results); ``branch`` read from the order parameters
    (θ = 0 → positional, m = 0 → semantic, both → trivial, neither → mixed); ``init`` the branch
    the solve was started on; ``iterations`` = map evaluations (cheap-rule stages included).
    """

    alpha: float
    omega: float
    q: float = math.nan
    m: float = math.nan
    theta: float = math.nan
    V: float = math.nan
    qhat: float = math.nan
    mhat: float = math.nan
    thetahat: float = math.nan
    Vhat: float = math.nan
    eps_t: float = math.nan
    eps_g: float = math.nan
    theta_over_sigma2: float = math.nan
    m_over_sigma2: float = math.nan
    branch: str = ""
    init: str = ""
    iterations: int = 0
    residual: float = math.nan


def _enforce(branch, params, d):
    if branch == "positional" or branch == "trivial":
        d["theta"] = 0.0
    if branch == "trivial" or branch == "semantic":  # m ≡ 0 is invariant for any A
        d["m"] = 0.0
    return d


def _full(x: dict) -> dict:
    return dict(q=x["q"], V=x["V"], m=x.get("m", 0.0), theta=x.get("theta", 0.0))


def _jac_for(saved, keys):
    """A Jacobian saved in a result's metadata, usable for the solver variables ``keys``."""
    if not saved or list(saved.get("keys", ())) != list(keys):
        return None
    return np.asarray(saved["J"], dtype=float), np.asarray(saved["scale"], dtype=float)


def fixed_point(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    branch: str = "semantic",
    init: dict | ERMResult | None = None,
    *,
    mixing: float = 0.5,
    tol: float = 1e-6,
    max_iter: int = 300,
    nodes: int | None = None,
    method: str = "split",
    rng: RNGLike = 0,
    rule: Rule | None = None,
    accel: str = "newton",
    coarse: bool = True,
    keep_history: bool = False,
    diagnostics: bool = False,
    when_absent: str = "flow",
) -> ERMResult:
    """Solve the state equations (docs/attention.md §4) on one branch.

    ``branch`` picks the initialisation (``DEFAULT_INIT``) and the exact invariant subspace:
    positional → θ ≡ 0 (exact: T is even in h*), semantic → m ≡ 0 (exact for any A: at m = 0
    the loss is even under (ξ, η) → -(ξ, η), so E[Σ s_ℓ g_ℓ] = 0; tested for A_11 ≠ A_22 --
    imposing it keeps a non-symmetric A's semantic solve at three unknowns),
    trivial → θ ≡ m ≡ 0.  ``init`` overrides (q, m, theta, V) (warm start); a result (or a dict
    with the keys of ``WARM_EXTRAS``) also passes on its accurate-minus-cheap shift and cheap
    Jacobian.

    Iteration (``accel``, docs/solver.md §3): ``"newton"`` (default) is the two-fidelity
    quasi-Newton solve -- the cheap rule ``SPLIT_COARSE`` finds the way (positional and warm
    starts by quasi-Newton, a cold semantic start by damped Anderson), the requested rule
    polishes (typically 2-4 accurate maps), damped Anderson if that stalls; a warm start close
    to the fixed point goes to the accurate polish directly.  ``"anderson"``: the damped
    Anderson iteration, first to 1e-5 on the cheap rule, then on the requested one;
    ``"none"``: the plain damped iteration.  ``mixing`` = weight of the new iterate of the
    damped iterations.  Convergence: the UNDAMPED map's relative change per order parameter
    < ``tol`` (default 1e-6, below the default rule's quadrature error of ~4e-5; ε_t, being
    stationary, is then exact to ~1e-12 relative).  ``coarse=False``: the requested rule
    throughout.  Quadrature: ``method`` ("split" default, "gh", "qmc", "mc") and ``nodes``
    (see :func:`~theory.attention.quadrature.make_rule`; ``rng`` for "qmc"/"mc"), or a
    prebuilt ``rule``.  ``diagnostics``: re-evaluate the channel at the final point with the
    prox Jacobians and put the derivative forms ``Vhat_jac``, ``thetahat_jac`` (docs/attention.md
    eq. 12) in ``metadata`` (one more map evaluation).

    Branch existence (``when_absent``, docs/attention.md §6): a semantic or positional start
    whose order parameter decays towards 0 is stopped early; then with ``"flow"`` (default) its
    spinodal α_s is computed (:func:`~theory.attention.spinodal.spinodal`): below α_s the branch
    does not exist and the result is the fixed point the iteration flows to (the trivial one:
    status "converged", ``branch`` "trivial", ``init`` the requested branch, the message gives
    α_s); above α_s the decay was the branch's small order parameter near its spinodal and the
    branch is solved without the early stop.  ``"stop"``: return the stopped iteration (status
    "diverged", ``metadata["collapsed"]``; what continuation uses).  ``"off"``: no early stop.
    """
    p = as_params(params)
    alpha = check_alpha(alpha)
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    if accel not in ("newton", "anderson", "none"):
        raise ValueError(f"accel must be 'newton', 'anderson' or 'none', got {accel!r}")
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    if when_absent not in WHEN_ABSENT:
        raise ValueError(f"when_absent must be one of {WHEN_ABSENT}, got {when_absent!r}")
    if rule is None:
        rule = make_rule(method, nodes, rng)
    x0 = dict(DEFAULT_INIT[branch])
    if branch == "positional":
        x0["V"] /= math.sqrt(alpha)
    elif branch == "trivial":  # the trivial V is ≈ 30 at α ≲ 1, 24 at 3, 13 at 10 (ω = 0.6)
        x0["V"] /= math.sqrt(1.0 + alpha / 5.0)
    shift = jac_prev = None
    if init is not None:
        extra = (init.metadata or {}) if isinstance(init, Result) else init
        shift, jac_prev = extra.get("cheap_shift"), extra.get("jac_cheap")
        if isinstance(init, Result):
            init = init.to_dict()
        for k in ("q", "m", "theta", "V"):
            if k in init and init[k] is not None and np.isfinite(init[k]):
                if k == "q" and init[k] <= 0:  # a Q = 0 point (zero_point) or an extrapolation
                    continue  # from one: outside the map's domain q > 0, the default q is kept
                x0[k] = float(init[k])
    x0 = _enforce(branch, p, x0)
    x0["m"], x0["theta"] = abs(x0["m"]), abs(x0["theta"])
    if not (x0["q"] > 0 and x0["V"] > 0):
        raise ValueError(f"the initial q and V must be > 0, got {x0}")
    keys = (
        ["q", "V"]
        + (["m"] if x0["m"] != 0 or branch == "positional" else [])
        + (["theta"] if x0["theta"] != 0 or branch == "semantic" else [])
    )
    guard_hits = [0]

    def make_F(rl):
        def F(x):
            new, ch, h, clipped = state_map(alpha, _full(x), p, rl)
            guard_hits[0] += clipped
            new = _enforce(branch, p, new)
            return {k: new[k] for k in keys}, (ch, h)

        return F

    cheap = rule
    if coarse and rule.method == "split":
        c = coarse_rule()
        if rule.cost > 2 * c.cost:
            cheap = c
    collapse = DecayStop(
        (lambda fx: abs(fx.get("theta", 1.0)) / p.s2)
        if branch == "semantic"
        else (lambda fx: abs(fx.get("m", 1.0))),
        COLLAPSE,
        f"the {branch} branch collapsed onto the trivial one",
    )
    callbacks = (collapse,) if branch != "trivial" and when_absent != "off" else ()
    if branch == "trivial":  # q decaying to 0: the Q = 0 point (zero_point), not reached at q > 0
        callbacks = (DecayStop(lambda fx: fx["q"] / p.rho, Q_ZERO, Q_ZERO_LABEL, window=8),)

    def solve(start):
        return solve_two_fidelity(
            make_F(rule),
            {k: start[k] for k in keys},
            cheap=make_F(cheap) if cheap is not rule else None,
            accel=accel,
            warm=init is not None,
            newton_first=branch == "positional",
            shift=shift,
            jacobian0=_jac_for(jac_prev, keys),
            admissible=lambda x: all(v > 0 for k, v in x.items() if k in ("q", "V")),
            tol=tol,
            mixing=mixing,
            max_iter=max_iter,
            callbacks=callbacks,
            keep_history=keep_history,
            newton_after=NEWTON_AFTER if branch == "semantic" and init is None else None,
        )

    out = solve(x0)
    start_note = ""
    if init is None and out.status == "nan" and "map failed at the start" in (out.message or ""):
        # the default start (tuned to σ = 0.5) makes λ + σ²V̂ < 0: its V is replaced by one
        # derived at these parameters (start_point)
        x1, how = start_point(alpha, p, branch, x0, make_F(cheap), rule)
        if x1 is not None:
            x0 = x1
            out = solve(x0)
            start_note = (
                f"start q = {x0['q']:.3g}, V = {x0['V']:.3g} ({how}; the default start's ridge "
                "step was unstable)"
            )
            out = dataclasses.replace(out, iterations=out.iterations + 1)  # the failed map
    if branch == "trivial" and out.status == "diverged" and Q_ZERO_LABEL in (out.message or ""):
        z = zero_point(alpha, p, rule)
        if z["exists"] and z["mu"] < 1:
            return _zero_result(alpha, p, z, out, rule, tol, start_note)
    res = _result_from(alpha, p, branch, out, rule, tol, guard_hits[0], diagnostics)
    if start_note:
        res = dataclasses.replace(res, message="; ".join(x for x in (start_note, res.message) if x))
    # quasi-Newton, taking over from a stalled cold start, can land on the trivial point itself
    # (θ ≡ 0 is invariant): a collapse too, not yet told whether the branch exists here
    landed = (
        branch != "trivial"
        and res.converged
        and res.branch == "trivial"
        and "newton_after" in out.metadata
    )
    if landed or (out.status == "diverged" and "collapsed onto the trivial" in (out.message or "")):
        res.metadata["collapsed"] = True
        if when_absent == "flow":
            kw = dict(mixing=mixing, tol=tol, max_iter=max_iter, rule=rule, accel=accel)
            flow = dict(q=res.q, m=0.0, theta=0.0, V=res.V) if landed else _flow_point(out)
            return _absent(alpha, p, branch, kw, flow, coarse=coarse, diagnostics=diagnostics)
    meta = out.metadata
    if res.converged and "cheap_jacobian" in meta:
        J, scale = meta["cheap_jacobian"]
        res.metadata["jac_cheap"] = dict(keys=list(keys), J=J.tolist(), scale=scale.tolist())
    if res.converged and "cheap_fixed_point" in meta:
        cheap_x = {k: float(v) for k, v in meta["cheap_fixed_point"].items()}
        res.metadata["cheap_shift"] = {
            k: float(getattr(res, k) * (1 if cheap_x[k] >= 0 else -1) - cheap_x[k]) for k in cheap_x
        }
    return res


def start_point(alpha, p, branch, x0, F_cheap, rule) -> tuple[dict | None, str]:
    """A start at which the first map is defined (λ + σ²V̂ > 0), derived at the parameters:
    the trivial branch's Q = 0 point in closed form (:func:`zero_point`) where it exists;
    otherwise the default's (q, m, θ) scaled to the teacher norm ρ (DEFAULT_INIT is for
    ρ = 1/4) and the V equation V = σ²/(λ + σ²V̂(V)) solved approximately there on the cheap
    rule: V scanned down from the default by factors of 2 (V̂ tends to its small-V limit
    α E[tr ∇²ℓ(ω)]), the V whose image is closest to itself (in log) kept.
    Returns (start, how) or (None, reason)."""
    if branch == "trivial":
        z = zero_point(alpha, p, rule)
        if z["exists"]:
            return dict(x0, V=z["V"]), "the Q = 0 point's V in closed form"
    # the overlaps of DEFAULT_INIT are for ρ = σ² = 1/4: q and θ scale like ρ, m like √ρ
    r = max(1.0, p.rho / RHO_DEFAULT)
    x1 = dict(x0, q=x0["q"] * r, theta=x0["theta"] * r, m=x0["m"] * math.sqrt(r))
    best = None
    for k in range(1, START_SCAN + 1):
        V = x0["V"] * 2.0**-k
        try:
            fx, _ = F_cheap(dict(x1, V=V))
        except (FloatingPointError, ValueError):
            continue
        gap = math.log(fx["V"] / V)
        if best is None or abs(gap) < abs(best[1]):
            best = (V, gap)
        if gap > 0:  # the image is above V: further down it only grows (V̂ → its small-V limit)
            break
    if best is None:
        return None, f"no V in [V0/2^{START_SCAN}, V0/2] makes the ridge step stable"
    how = f"q, m, θ scaled by ρ/ρ_default = {r:.3g}, " if r > 1 else ""
    how += f"the V equation solved at the start's q, m, θ (image/V = {math.exp(best[1]):.3g})"
    return dict(x1, V=best[0]), how


def _zero_result(alpha, p, z, out, rule, tol, note="") -> ERMResult:
    """The Q = 0 fixed point (z from :func:`zero_point`) as a converged trivial result."""
    meta = dict(rule.describe(), tol=tol, q_multiplier=z["mu"], zero_point=True, guard_hits=0)
    msg = (
        f"the trivial point is Q = 0 (q → 0 at rate μ = {z['mu']:.4g} per map, reached at "
        f"q = {out.fx.get('q', math.nan):.2e}; V in closed form, docs/attention.md §6)"
    )
    return ERMResult(
        q=0.0,
        m=0.0,
        theta=0.0,
        V=z["V"],
        qhat=0.0,
        mhat=0.0,
        thetahat=0.0,
        Vhat=z["Vhat"],
        eps_t=z["eps_t"],
        eps_g=z["eps_g"],
        theta_over_sigma2=0.0,
        m_over_sigma2=0.0,
        branch="trivial",
        init="trivial",
        iterations=out.iterations,
        residual=0.0,
        status="converged",
        message="; ".join(x for x in (note, msg) if x),
        alpha=alpha,
        omega=p.omega,
        params=p.to_dict(),
        metadata=meta,
        history=out.history,
    )


def _flow_point(out) -> dict | None:
    """Where a stopped (collapsed) iteration had got to: its last accepted point's q and V (the
    decaying order parameter dropped), or None when they are not usable as a start."""
    x = out.x or {}
    q, V = x.get("q", math.nan), x.get("V", math.nan)
    if not (np.isfinite(q) and np.isfinite(V) and q > 0 and V > 0):
        return None
    return dict(q=float(q), m=0.0, theta=0.0, V=float(V))


#: the existence of an absent-looking branch is decided on the cheap rule's spinodal when α
#: lies more than this (relative) away from it -- ten times the rules' largest measured
#: difference in α_s (0.9 % at ω = 0.3, 0.25 % at a non-symmetric A, ω = 0.58)
SPINODAL_MARGIN = 0.1


#: the cheap-rule spinodal searches of `_absent`, kept for the process: α_s does not depend on
#: α, so a curve along which a branch is absent at every α (the positional branch at σ = 0.7,
#: docs/attention.md §6) searches once, not once per α.  Keyed by the parameters, the branch and
#: which side of the default hint the bracket grew from (the two can close on different roots)
_CHEAP_SPINODALS: dict = {}
_CHEAP_SPINODALS_MAX = 256


def _cheap_spinodal(p, branch, alpha, locate):
    from theory.attention.spinodal import DEFAULT_HINT

    above = alpha >= DEFAULT_HINT[branch]
    key = (point_key(p.to_dict()), branch, above)
    s = _CHEAP_SPINODALS.get(key)
    if s is None:
        first = (alpha, None) if above else (None, alpha)
        s = locate(coarse_rule(), first, xtol=1e-3)
        if len(_CHEAP_SPINODALS) >= _CHEAP_SPINODALS_MAX:
            _CHEAP_SPINODALS.clear()
        _CHEAP_SPINODALS[key] = s
    return s


def _absent(alpha, p, branch, kw, flow=None, **more) -> ERMResult:
    """The start on ``branch`` decayed: where the branch exists (above its spinodal) solve it
    without the early stop, otherwise report the fixed point the iteration flows to -- the
    trivial one, solved from ``flow`` (where the stopped iteration had got to: close to it),
    and from the trivial branch's own cold start if that fails."""
    from theory.attention.spinodal import spinodal

    def locate(rule, hints, **opt):
        for hint in hints:  # a bracket grown from one start can miss a root the other finds
            s = spinodal(p, branch, hint=hint, rule=rule, **opt)
            if s.converged:
                break
        return s

    # the existence question first on the cheap rule (every stage of the spinodal on it: a
    # fraction of the cost, α_s within ~1 % of the requested rule's, docs/attention.md §6), to
    # 1e-3 (the decision needs 10 %), its bracket grown from the default start when α lies
    # below it (a decayed start far below the spinodal: fewer steps); the requested rule only
    # where α lies within SPINODAL_MARGIN of that estimate, its bracket from α
    s = _cheap_spinodal(p, branch, alpha, locate)
    rough = s.converged and abs(alpha / s.alpha_spinodal - 1.0) > SPINODAL_MARGIN
    if s.converged and not rough:
        s = locate(kw["rule"], (alpha, None))  # (a search the cheap rule did not close, the
        # requested rule's would only repeat: its bracket is the cheap rule's too)
    where = (
        f"its spinodal is α_s {'≈' if rough else '='} "
        + (f"{s.alpha_spinodal:.4g}" if rough else f"{s.alpha_spinodal:.6g}")
        + f" ({s.kind}: it exists for α > α_s"
        + ("; the cheap rule's value, `theory erm spinodal` refines it)" if rough else ")")
        if s.converged
        else s.message
    )
    if s.converged and alpha > s.alpha_spinodal:
        r = fixed_point(alpha, p, branch, when_absent="off", **kw, **more)
        if r.converged and r.branch == branch:
            r.metadata.update(alpha_spinodal=s.alpha_spinodal, alpha_spinodal_cheap_rule=rough)
            return r
        # above its onset yet not found: the branch may have ended again (the positional branch
        # at small ω returns to the trivial point at large α, docs/attention.md §6)
        e = spinodal(p, branch, hint=alpha, rule=kw["rule"], side="upper")
        if e.converged and s.alpha_spinodal < e.alpha_spinodal < alpha:
            where = (
                f"it exists for {s.alpha_spinodal:.6g} < α < {e.alpha_spinodal:.6g}, between "
                f"its onset ({s.kind}) and its end ({e.kind}); `theory erm regions` gives where "
                "it re-appears"
            )
    base = "trivial"
    r = None
    if flow is not None:
        r = fixed_point(alpha, p, base, init=flow, when_absent="stop", **kw, **more)
    if r is None or not r.converged:
        cold = fixed_point(alpha, p, base, when_absent="stop", **kw, **more)
        if r is None or cold.converged or r.status == "nan":
            r = cold
    if not r.converged:
        # never a bare "nan": the branch's absence is established, the trivial point is not
        return dataclasses.replace(
            r,
            status="diverged" if r.status == "nan" else r.status,
            init=branch,
            message=f"the {branch} branch does not exist at α = {alpha:g} ({where}); "
            f"the {base} fixed point it flows to was not found either ({r.status}: "
            f"{r.message})",
        )
    r.metadata.update(
        alpha_spinodal=s.alpha_spinodal, alpha_spinodal_cheap_rule=rough, requested_branch=branch
    )
    return dataclasses.replace(
        r,
        init=branch,
        message=f"the {branch} branch does not exist at α = {alpha:g}: {where}; the iteration "
        f"flows to the {r.branch} fixed point, reported here",
    )


def _result_from(alpha, p, branch, out, rule, tol, guard_hits, diagnostics=False) -> ERMResult:
    # converged: the channel of the last map evaluation (at out.x) is reused and the result is
    # reported at out.x -- the fixed point to within the tolerance, with hats and Φ consistent
    # with it (ε_t, being stationary, is exact to ~tol²); otherwise (or for the derivative-form
    # diagnostics) everything is evaluated at the final undamped image F(out.x)
    fx = _enforce(branch, p, _full(out.fx)) if out.fx else {}
    reuse = not diagnostics and out.status == "converged" and isinstance(out.aux, tuple)
    x = _full(out.x) if reuse or not fx else fx
    if reuse:  # the channel saw θ through the guard
        x = dict(x, theta=guard_theta(x["q"], x["theta"], p.rho)[0])
    meta = dict(rule.describe(), tol=tol, guard_hits=int(guard_hits))
    common = dict(
        alpha=alpha,
        omega=p.omega,
        init=branch,
        iterations=out.iterations,
        params=p.to_dict(),
        metadata=meta,
        history=out.history,
    )
    if out.aux is None or out.status == "nan":
        return ERMResult(status=out.status, message=out.message, **common)
    try:
        if reuse:
            ch, h = out.aux
        else:
            ch = channel(x["q"], x["m"], x["theta"], x["V"], p, rule, jac=diagnostics)
            h = hats_from_channel(alpha, x["q"], x["m"], x["theta"], x["V"], ch, p)
    except ValueError as exc:
        return ERMResult(status="diverged", message=str(exc), **common)
    phi = free_energy(alpha, x, h, ch["M"], p)
    meta.update(
        phi=phi,
        eps_t_energy=alpha * (ch["M"] - 0.5 * x["V"] * ch["g2"]) + p.lam * x["q"] / (2 * p.s2),
        newton_fail_weight=ch["bad"],
        jumps=ch.get("jumps"),
        unresolved_jumps=ch.get("unresolved"),
        mhat_signed=h["mhat"],
        thetahat_signed=h["thetahat"],
    )
    if diagnostics:
        meta.update(Vhat_jac=h["Vhat_jac"], thetahat_jac=h["thetahat_jac"])
    m, th = abs(x["m"]), abs(x["theta"])
    return ERMResult(
        q=x["q"],
        m=m,
        theta=th,
        V=x["V"],
        qhat=h["qhat"],
        mhat=abs(h["mhat"]),
        thetahat=abs(h["thetahat"]),
        Vhat=h["Vhat"],
        eps_t=-phi,
        eps_g=ch["eps_g"],
        theta_over_sigma2=th / p.s2,
        m_over_sigma2=m / p.s2,
        branch=label_branch(m, th, p),
        status=out.status,
        message=out.message,
        residual=out.residual,
        **common,
    )
