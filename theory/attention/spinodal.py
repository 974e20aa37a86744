"""Where a branch of the L = 2 state equations begins: its spinodal (docs/attention.md §7).

The semantic branch (θ ≠ 0) and the positional branch (m ≠ 0, A_11 = A_22) leave a fixed point
of the smaller invariant subspace -- the trivial point θ = m = 0 -- continuously.  θ → -θ is an
exact symmetry of the state equations (the teacher T is even in h*), and m → -m is one for
A_11 = A_22 (the ℓ_1 ↔ ℓ_2 swap), so at the trivial point the Jacobian of the state map is
block diagonal: the θ (or m) direction decouples and its eigenvalue is

    λ(α) = ∂F_θ/∂θ at θ = 0 = F_θ(θ = δ)/δ + O(δ²)     (F_θ is odd in θ).

The branch bifurcates where λ(α) = 1, a pitchfork by that symmetry (|θ| is reported, so one
branch leaves the trivial point).  :func:`spinodal` brackets that root on the cheap rule (the
trivial fixed point warm-started along α), then refines it on the requested rule by a bordered
Newton (:func:`_bordered`).  Where the pitchfork is supercritical (tested at ω = 0.3 by fitting
the normal form α = α_s + a θ² + b θ⁴, a > 0, to the branch) the branch exists exactly for
α > α_s; a subcritical pitchfork would extend the branch below α_s to a saddle-node, which this
module does not locate.

For A_11 ≠ A_22 (no m → -m symmetry) the positional branch's spinodal is not computed
(status "no_spinodal"); the semantic one is (m ≡ 0 holds for any A).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.params import ALPHA_SUPPORTED, ERMParams, as_params
from theory.attention.quadrature import Rule, coarse_rule, make_rule
from theory.attention.state_equations import overlaps_from_hats, state_map
from theory.results import Result
from theory.solve import bracket, extrapolate, find_root

__all__ = ["ALPHA_MAX", "check_alpha_max", "SpinodalResult", "bifurcation_eigenvalue", "spinodal"]

#: the largest α searched by default (spinodals and transitions)
ALPHA_MAX = 20.0
#: the smallest α searched
ALPHA_MIN = 1e-3
#: relative size of the finite difference δ of the eigenvalue (F is odd: error O(δ²) ~ 1e-6)
DELTA = 1e-3
#: iteration cap of a base point's solve (where the trivial point ceases to exist -- λ + σ²V̂
#: reaches 0, e.g. ω = 0.95, α ≈ 3 -- the iteration would otherwise wander for long)
BASE_MAX_ITER = 60
#: the direction in which each branch leaves its base point
DIRECTION = {"semantic": "theta", "positional": "m"}


@dataclass(frozen=True, kw_only=True)
class SpinodalResult(Result):
    """The spinodal ``alpha_spinodal`` of ``branch`` at ``omega``: the α where the branch leaves
    its base point (``base``: "trivial", or "positional" for the semantic branch when
    A_11 ≠ A_22); ``kind`` of the bifurcation ("pitchfork"); ``eigenvalue_slope`` = dλ/dα
    there.  ``status``: "converged", "no_spinodal" (λ < 1 up to ``alpha_max``: the branch does
    not exist for α ≤ ``alpha_max``; or no bifurcation, message says which), "max_iter"."""

    omega: float
    branch: str
    alpha_spinodal: float = math.nan
    kind: str = ""
    base: str = ""
    alpha_max: float = math.nan
    eigenvalue_slope: float = math.nan
    q: float = math.nan
    V: float = math.nan


def check_alpha_max(alpha_max) -> float:
    a = float(alpha_max)
    if not (math.isfinite(a) and ALPHA_MIN < a <= ALPHA_SUPPORTED):
        raise ValueError(
            f"alpha_max must lie in ({ALPHA_MIN:g}, {ALPHA_SUPPORTED:g}], got {alpha_max!r}"
        )
    return a


def _base_branch(p: ERMParams, branch: str) -> str | None:
    if branch == "semantic":  # m ≡ 0 on the semantic branch for any A
        return "trivial"
    return "trivial" if p.swap_symmetric else None


def bifurcation_eigenvalue(
    alpha: float, base, params: ERMParams | Mapping | None, branch: str, rule: Rule
) -> float:
    """λ: the eigenvalue of the state map's Jacobian in the direction in which ``branch``
    leaves the fixed point ``base`` (a result or dict with q, m, V at θ = 0), by the odd
    finite difference F_dir(δ)/δ."""
    p = as_params(params)
    get = (lambda k: base[k]) if isinstance(base, Mapping) else (lambda k: getattr(base, k))
    x = dict(q=get("q"), m=get("m"), theta=0.0, V=get("V"))
    d = DIRECTION[branch]
    delta = DELTA * math.sqrt((p.rho if d == "theta" else 1.0) * x["q"])
    new, *_ = state_map(alpha, dict(x, **{d: delta}), p, rule)
    if d == "m":  # the positional base is the trivial point (m = 0): F_m odd in m
        return new["m"] / delta
    return new["theta"] / delta


def _eigen_root(p, branch, base_branch, rule, a0, step, xtol, alpha_max, start=None):
    """Bracket + Brent on λ(α) - 1 with the rule ``rule``; the base points are warm-started
    from the nearest ones solved (``start``: a first warm start).  Returns (root, solved)."""
    from theory.attention.solver import fixed_point  # the solver reports spinodals

    solved: dict[float, object] = {}
    keys = ("q", "m", "theta", "V")

    def base_at(a):
        if a in solved:
            return solved[a]
        good = sorted((x for x, r in solved.items() if r.converged), key=lambda x: abs(x - a))
        init = None if start is None else {k: getattr(start, k) for k in keys}
        if good:
            near = sorted(good[:2])
            prev = [{k: getattr(solved[x], k) for k in keys} for x in near]
            init = extrapolate(prev, near, a, keys)
        kw = dict(rule=rule, when_absent="stop", max_iter=BASE_MAX_ITER)
        r = fixed_point(a, p, base_branch, init=init, **kw)
        if not r.converged and init is not None:
            r = fixed_point(a, p, base_branch, **kw)
        solved[a] = r
        return r

    def g(a):
        r = base_at(a)
        if not r.converged:
            return math.nan
        return bifurcation_eigenvalue(a, r, p, branch, rule) - 1.0

    grid = bracket(g, a0, sign_below=-1.0, step=step, lo=ALPHA_MIN, hi=alpha_max)
    rc = find_root(g, grid, xtol=1e-9, rtol=xtol)
    if rc.status == "converged":
        base_at(rc.root)
    return rc, solved


def spinodal(
    params: ERMParams | Mapping | None = None,
    branch: str = "semantic",
    *,
    alpha_max: float = ALPHA_MAX,
    hint: float | None = None,
    xtol: float = 1e-5,
    rule: Rule | None = None,
    method: str = "split",
    nodes: int | None = None,
) -> SpinodalResult:
    """The spinodal α_s of ``branch`` ("semantic" or "positional"): the root of λ(α) = 1 of
    :func:`bifurcation_eigenvalue` at the base fixed point, bracketed from ``hint`` (default 1)
    in [1e-3, ``alpha_max``] and refined by Brent to ``xtol`` (relative to α).  Each base point
    is warm-started from the nearest ones already solved."""
    p = as_params(params)
    if branch not in DIRECTION:
        raise ValueError(f"branch must be 'semantic' or 'positional', got {branch!r}")
    alpha_max = check_alpha_max(alpha_max)
    if rule is None:
        rule = make_rule(method, nodes)
    common = dict(omega=p.omega, branch=branch, alpha_max=alpha_max, params=p.to_dict())
    base_branch = _base_branch(p, branch)
    if base_branch is None:
        return SpinodalResult(
            status="no_spinodal",
            message="A_11 ≠ A_22: without the m → -m symmetry the positional branch's "
            "spinodal is not computed",
            **common,
        )
    # the coarse rule brackets and locates the root (~10 times cheaper), the requested rule
    # refines it from there (a bracket of ±1 %, typically 3-5 evaluations)
    cheap = coarse_rule()
    two = rule.method == "split" and rule.cost > 2 * cheap.cost
    a0 = min(max(float(hint) if hint else 1.0, ALPHA_MIN), alpha_max)
    rc, solved = _eigen_root(
        p, branch, base_branch, cheap if two else rule, a0, 1.25, xtol, alpha_max
    )
    coarse_root = rc.root
    meta = dict(rule.describe(), coarse_root=coarse_root)
    if two and rc.status == "converged":
        start = solved[rc.root]
        bordered = _bordered(p, branch, base_branch, start, rule, cheap, xtol)
        if bordered is not None:
            a_s, x, its = bordered
            return SpinodalResult(
                status="converged",
                alpha_spinodal=a_s,
                kind="pitchfork",
                base=base_branch,
                eigenvalue_slope=_slope(rc.values, coarse_root),
                q=x["q"],
                V=x["V"],
                message=_found(branch, base_branch, a_s),
                metadata=dict(meta, bordered_iterations=its),
                **common,
            )
        rc, solved = _eigen_root(
            p, branch, base_branch, rule, rc.root, 1.01, xtol, alpha_max, start
        )
    common["metadata"] = dict(meta, solved=len(solved), values=rc.values)
    vals = [(a, v) for a, v in rc.values if math.isfinite(v)]
    if rc.status != "converged":
        if vals and all(v < 0 for _, v in vals) and max(a for a, _ in vals) >= alpha_max:
            return SpinodalResult(
                status="no_spinodal",
                message=f"the {branch} branch does not leave the {base_branch} fixed point for "
                f"α ≤ alpha_max = {alpha_max:g} (the eigenvalue stays below 1)",
                **common,
            )
        if vals and all(v > 0 for _, v in vals) and min(a for a, _ in vals) <= ALPHA_MIN:
            return SpinodalResult(
                status="no_spinodal",
                message=f"the {branch} branch leaves the {base_branch} fixed point below "
                f"α = {ALPHA_MIN:g} (the eigenvalue is above 1 there)",
                **common,
            )
        return SpinodalResult(
            status="max_iter", message=f"no spinodal located: {rc.message}", **common
        )
    a_s = rc.root
    r = solved[a_s]
    slope = _slope(rc.values, a_s)
    return SpinodalResult(
        status="converged",
        alpha_spinodal=a_s,
        kind="pitchfork",
        base=base_branch,
        eigenvalue_slope=slope,
        q=r.q,
        V=r.V,
        message=_found(branch, base_branch, a_s),
        **common,
    )


def _slope(values, a_s):
    """dλ/dα along the base branch: the secant between the evaluations closest to the root on
    either side, at least 0.1 % away from it (closer ones are dominated by the rounding)."""
    vals = [(a, v) for a, v in values if math.isfinite(v) and abs(a - a_s) > 1e-3 * a_s]
    below = [av for av in vals if av[0] < a_s]
    above = [av for av in vals if av[0] > a_s]
    if not below or not above:
        return math.nan
    (a1, v1), (a2, v2) = max(below), min(above)
    return (v2 - v1) / (a2 - a1)


def _found(branch, base_branch, a_s):
    return (
        f"the {branch} branch leaves the {base_branch} fixed point at α_s = {a_s:.6g} "
        f"(pitchfork: the eigenvalue in the {DIRECTION[branch]} direction crosses 1)"
    )


def _reduced(p, branch, base_branch, x, rule):
    """The spinodal as a square system in the base point's overlaps ``x`` alone: the channel does
    not depend on α (the hats are α times it), so the V equation V = σ²/(λ + σ² α V̂_1) gives
    α in closed form (V̂ may be negative: the loss is not convex); the residuals are the other
    base equations (log q, log m) and λ - 1.  Returns (residuals, α, λ)."""
    d = DIRECTION[branch]
    delta = DELTA * math.sqrt((p.rho if d == "theta" else 1.0) * x["q"])
    pt = dict(q=x["q"], m=x.get("m", 0.0), theta=0.0, V=x["V"])
    _, _, h, _ = state_map(1.0, dict(pt, **{d: delta}), p, rule)
    alpha = (p.s2 / x["V"] - p.lam) / (p.s2 * h["Vhat"])
    if not alpha > 0:
        raise FloatingPointError("alpha <= 0 on the way to the spinodal")
    new = overlaps_from_hats(
        alpha * h["qhat"], alpha * h["mhat"], alpha * h["thetahat"], alpha * h["Vhat"], p
    )
    lam = new[d] / delta
    res = [math.log(new["q"] / x["q"])]
    if base_branch == "positional":  # m free on the base (A_11 ≠ A_22)
        res.append(math.log(abs(new["m"]) / abs(x["m"])))
    res.append(lam - 1.0)
    return np.array(res), alpha, lam


def _bordered(p, branch, base_branch, start, rule, cheap, xtol, max_iter=8):
    """Newton on :func:`_reduced` in log(q), log(V) (, log m) with the requested rule, from the
    coarse spinodal ``start``, its Jacobian by finite differences of the coarse rule and then
    Broyden updates: typically 2-4 evaluations of the requested rule.  None if it fails (the
    caller falls back to bracket + Brent)."""
    names = ["q", "V"] + (["m"] if base_branch == "positional" else [])
    y = np.array([math.log(abs(getattr(start, k))) for k in names])

    def at(yv):
        x = {k: math.exp(v) for k, v in zip(names, yv)}
        if base_branch == "positional":
            x["m"] = math.copysign(x["m"], start.m)
        return x

    try:
        r0, _, _ = _reduced(p, branch, base_branch, at(y), cheap)
        J = np.empty((len(names), len(names)))
        for i in range(len(names)):
            e = np.zeros(len(names))
            e[i] = 1e-4
            J[:, i] = (_reduced(p, branch, base_branch, at(y + e), cheap)[0] - r0) / 1e-4
        r, alpha, _ = _reduced(p, branch, base_branch, at(y), rule)
        for it in range(1, max_iter + 1):
            step = -np.linalg.solve(J, r)
            y_new = y + step
            r_new, alpha_new, _ = _reduced(p, branch, base_branch, at(y_new), rule)
            J += np.outer(r_new - r - J @ step, step) / (step @ step)
            y, r = y_new, r_new
            if abs(alpha_new - alpha) <= xtol * alpha_new and np.max(np.abs(r)) < 1e-6:
                return alpha_new, at(y), it
            alpha = alpha_new
    except (FloatingPointError, ValueError, np.linalg.LinAlgError):
        return None
    return None
