"""Where a branch of the L = 2 state equations begins: its spinodal (docs/attention.md §6).

The semantic branch (θ ≠ 0) and the positional branch (m ≠ 0, A_11 = A_22) leave a fixed point
of the smaller invariant subspace -- the trivial point θ = m = 0 -- continuously.  θ → -θ is an
exact symmetry of the state equations (the teacher T is even in h*), and m → -m is one for
A_11 = A_22 (the ℓ_1 ↔ ℓ_2 swap), so at the trivial point the Jacobian of the state map is
block diagonal: the θ (or m) direction decouples and its eigenvalue is

    λ(α) = ∂F_θ/∂θ at θ = 0 = F_θ(θ = δ)/δ + O(δ²)     (F_θ is odd in θ).

The branch bifurcates where λ(α) = 1, a pitchfork by that symmetry (|θ| is reported, so one
branch leaves the trivial point).  :func:`spinodal` brackets that root on the cheap rule (the
trivial fixed point warm-started along α), then refines it on the requested rule by a bordered
Newton (:func:`_solve_reduced` at the amplitude δ → 0).

**Which kind.**  The branch itself, parametrised by its amplitude t (the cosine of Q with the
branch's direction: t = θ/√(ρ q) semantic, t = m σ/√q positional), is the same square system at
finite t: at given (q, V) the V equation gives α in closed form, so α(t) is a function and the
normal form α = α_s + a t² + b t⁴ is read off two points (t = 0.05, 0.15, cheap rule).  a > 0:
supercritical (``kind`` "pitchfork", the branch exists exactly for α > α_s).  a < 0: subcritical,
the branch bends back below α_s and turns at a fold, the minimum of α(t) -- a saddle-node
(``kind`` "saddle-node", ``alpha_spinodal`` the fold, ``alpha_pitchfork`` beside it); t is a
regular parameter through the fold, so the fold is found by minimising α(t) (Brent), and α at
the fold, being stationary in t, is then evaluated on the requested rule at the cheap rule's t.

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
from theory.attention.state_equations import (
    channel,
    hats_from_channel,
    overlaps_from_hats,
    state_map,
)
from theory.results import Result
from theory.solve import bracket, extrapolate, find_root

__all__ = [
    "ALPHA_MAX",
    "check_alpha_max",
    "SpinodalResult",
    "amplitude",
    "bifurcation_eigenvalue",
    "branch_alpha",
    "saddle_node",
    "spinodal",
]

#: the largest α searched by default (spinodals and transitions)
ALPHA_MAX = 20.0
#: the smallest α searched
ALPHA_MIN = 1e-3
#: relative size of the finite difference δ of the eigenvalue (F is odd: error O(δ²) ~ 1e-6)
DELTA = 1e-3
#: iteration cap of a base point's solve (where the trivial point ceases to exist -- λ + σ²V̂
#: reaches 0, e.g. ω = 0.95, α ≈ 3 -- the iteration would otherwise wander for long)
BASE_MAX_ITER = 60
#: where the bracket of each branch's lower spinodal starts by default (the positional branch
#: leaves the trivial point at small α: 0.0575 at ω = 0.3, 0.1095 at ω = 0)
DEFAULT_HINT = {"semantic": 1.0, "positional": 0.1}
#: the direction in which each branch leaves its base point
DIRECTION = {"semantic": "theta", "positional": "m"}
#: the amplitudes t at which the branch is solved to read off its normal form (cheap rule):
#: small enough for the t⁶ term to be negligible, large enough that α(t) - α_s (~a t²) stands
#: well above the Newton tolerance (at ω = 0.3, a ≈ 0.33: α(0.05) - α_s ≈ 8e-4)
NORMAL_FORM_T = (0.05, 0.15)
#: the largest amplitude searched for a fold
T_MAX = 0.95
#: the sign of λ - 1 below the spinodal: a lower end (the branch exists above) or an upper one
SIDES = {"lower": -1.0, "upper": 1.0}


@dataclass(frozen=True, kw_only=True)
class SpinodalResult(Result):
    """The spinodal ``alpha_spinodal`` of ``branch`` at ``omega``: the smallest α where the
    branch exists.  ``kind``: "pitchfork" (supercritical: the branch leaves its base point --
    ``base``: "trivial", or "positional" for the semantic branch when A_11 ≠ A_22 -- at
    ``alpha_pitchfork`` = ``alpha_spinodal`` and exists above) or "saddle-node" (subcritical:
    the branch leaving the base point at ``alpha_pitchfork`` bends back to a fold at
    ``alpha_spinodal`` < ``alpha_pitchfork``, at amplitude ``amplitude_fold``).
    ``normal_form_a``: the coefficient a of α = α_pitchfork + a t² + b t⁴ (t the branch's
    amplitude, module docstring; cheap rule), nan when not determined (``kind`` then
    "pitchfork" with the message saying the criticality is unchecked); ``eigenvalue_slope``
    = dλ/dα at the pitchfork.  ``status``: "converged", "no_spinodal" (λ < 1 up to
    ``alpha_max``: the branch does not exist for α ≤ ``alpha_max``; or no bifurcation, message
    says which), "max_iter".  ``side``: "lower" (where the branch begins: it exists above) or
    "upper" (where it ends: it exists below)."""

    omega: float
    branch: str
    alpha_spinodal: float = math.nan
    kind: str = ""
    side: str = "lower"
    base: str = ""
    alpha_pitchfork: float = math.nan
    normal_form_a: float = math.nan
    amplitude_fold: float = math.nan
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
    if not x["q"] > 0:  # the Q = 0 point (solver.zero_point): a branch leaves it along q and θ
        return math.nan  # together (θ² ≤ ρq), not by this one-direction difference
    d = DIRECTION[branch]
    delta = DELTA * math.sqrt((p.rho if d == "theta" else 1.0) * x["q"])
    new, *_ = state_map(alpha, dict(x, **{d: delta}), p, rule)
    if d == "m":  # the positional base is the trivial point (m = 0): F_m odd in m
        return new["m"] / delta
    return new["theta"] / delta


def _eigen_root(p, branch, base_branch, rule, a0, step, xtol, alpha_max, start=None, sign=-1.0):
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

    grid = bracket(g, a0, sign_below=sign, step=step, lo=ALPHA_MIN, hi=alpha_max)
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
    side: str = "lower",
) -> SpinodalResult:
    """The spinodal α_s of ``branch`` ("semantic" or "positional"): the root of λ(α) = 1 of
    :func:`bifurcation_eigenvalue` at the base fixed point, bracketed from ``hint`` (default
    :data:`DEFAULT_HINT` for the lower side: 1 semantic, 0.1 positional; 1 for the upper side)
    in [1e-3, ``alpha_max``] and refined by Brent to ``xtol`` (relative to α).  Each base point
    is warm-started from the nearest ones already solved.  Then its kind (module docstring):
    a subcritical pitchfork is followed to its fold, the saddle-node reported.

    ``side``: "lower" (default) -- where the branch begins, λ rising through 1 with α (it
    exists above); "upper" -- where it ends, λ falling back through 1 (the positional branch
    at small ω returns to the trivial point at large α; it exists below)."""
    p = as_params(params)
    if branch not in DIRECTION:
        raise ValueError(f"branch must be 'semantic' or 'positional', got {branch!r}")
    if side not in SIDES:
        raise ValueError(f"side must be 'lower' or 'upper', got {side!r}")
    sign = SIDES[side]
    alpha_max = check_alpha_max(alpha_max)
    if rule is None:
        rule = make_rule(method, nodes)
    common = dict(omega=p.omega, branch=branch, side=side, alpha_max=alpha_max, params=p.to_dict())
    base_branch = _base_branch(p, branch)
    if base_branch is None:
        return SpinodalResult(
            status="no_spinodal",
            message="A_11 ≠ A_22: without the m → -m symmetry the positional branch's "
            "spinodal is not computed (it would not be a pitchfork); a fold of the branch can "
            "be located by saddle_node(params, 'positional', start) from a converged "
            "positional fixed point (untested for A_11 ≠ A_22)",
            **common,
        )
    # the coarse rule brackets and locates the root (~10 times cheaper), the requested rule
    # refines it from there (a bracket of ±1 %, typically 3-5 evaluations)
    cheap = coarse_rule()
    two = rule.method == "split" and rule.cost > 2 * cheap.cost
    default = DEFAULT_HINT[branch] if side == "lower" else 1.0  # an upper end lies above onset
    a0 = min(max(float(hint) if hint else default, ALPHA_MIN), alpha_max)
    rc, solved = _eigen_root(
        p, branch, base_branch, cheap if two else rule, a0, 1.25, xtol, alpha_max, sign=sign
    )
    coarse_root = rc.root
    meta = dict(rule.describe(), coarse_root=coarse_root)
    if two and rc.status == "converged":
        start = solved[rc.root]
        bordered = _solve_reduced(p, branch, base_branch, _point(start), rule, cheap, DELTA, xtol)
        if bordered is not None:
            a_s, x, its = bordered[:3]
            kind = _kind(
                p, branch, base_branch, _point(start), coarse_root, cheap, rule, xtol, sign, x
            )
            return _located(
                base_branch,
                a_s,
                x,
                kind,
                eigenvalue_slope=_slope(rc.values, coarse_root),
                metadata=dict(meta, bordered_iterations=its),
                **common,
            )
        rc, solved = _eigen_root(
            p, branch, base_branch, rule, rc.root, 1.01, xtol, alpha_max, start, sign
        )
    common["metadata"] = dict(meta, solved=len(solved), values=rc.values)
    vals = [(a, v) for a, v in rc.values if math.isfinite(v)]
    if rc.status != "converged":
        if vals and all(sign * v > 0 for _, v in vals) and max(a for a, _ in vals) >= alpha_max:
            return SpinodalResult(
                status="no_spinodal",
                message=f"the {branch} branch does not "
                + ("leave" if side == "lower" else "return to")
                + f" the {base_branch} fixed point for α ≤ alpha_max = {alpha_max:g} (the "
                f"eigenvalue stays {'below' if side == 'lower' else 'above'} 1)",
                **common,
            )
        if vals and all(sign * v < 0 for _, v in vals) and min(a for a, _ in vals) <= ALPHA_MIN:
            return SpinodalResult(
                status="no_spinodal",
                message=f"the {branch} branch has no {side} end for α ≥ {ALPHA_MIN:g} (the "
                f"eigenvalue is {'above' if side == 'lower' else 'below'} 1 at every α tried "
                f"down to there)",
                **common,
            )
        return SpinodalResult(
            status="max_iter", message=f"no spinodal located: {rc.message}", **common
        )
    a_s = rc.root
    x = _point(solved[a_s])
    kind = _kind(p, branch, base_branch, x, a_s, rule, rule, xtol, sign)
    return _located(base_branch, a_s, x, kind, eigenvalue_slope=_slope(rc.values, a_s), **common)


def _point(r) -> dict:
    """The overlaps (q, m, V) of a base fixed point (a result)."""
    return dict(q=r.q, m=r.m, V=r.V)


def _located(base_branch, a_p, x, kind, **common) -> SpinodalResult:
    """The result at the pitchfork ``a_p`` (base point ``x``) and the outcome of :func:`_kind`."""
    common["metadata"] = dict(common.get("metadata", {}), **kind["metadata"])
    fold = kind.get("alpha_fold")
    lower, branch = common["side"] == "lower", common["branch"]
    msg = _found(branch, base_branch, a_p, lower)
    cmp, sub = (">", "<") if lower else ("<", ">")
    if kind["a"] is None:
        msg += f"; its criticality is unchecked ({kind['why']})"
    elif fold is None and kind["metadata"].get("subcritical"):
        msg += f"; {kind['why']}: the branch born there lies on the other side"
    elif fold is None:
        msg += f"; supercritical (a = {kind['a']:.3g}): the branch exists for α {cmp} α_s"
    else:
        msg = (
            f"the {branch} branch exists for α {cmp} α_s = {fold:.6g}, a saddle-node (fold at "
            f"amplitude t = {kind['t_fold']:.3g}); it meets the {base_branch} fixed point "
            f"subcritically (a = {kind['a']:.3g}) at the pitchfork α = {a_p:.6g} {sub} α_s"
        )
    return SpinodalResult(
        status="converged",
        alpha_spinodal=a_p if fold is None else fold,
        alpha_pitchfork=a_p,
        kind="pitchfork" if fold is None else "saddle-node",
        normal_form_a=math.nan if kind["a"] is None else kind["a"],
        amplitude_fold=math.nan if fold is None else kind["t_fold"],
        base=base_branch,
        q=x["q"],
        V=x["V"],
        message=msg,
        **common,
    )


def branch_alpha(params, branch, t, *, start, rule, jac_rule=None, xtol=1e-7):
    """The point of ``branch`` at amplitude ``t`` (module docstring: t = θ/√(ρq) semantic,
    m σ/√q positional) as the square system of :func:`_reduced`: returns (α, overlaps dict
    q, m, V of the base directions) or None if Newton fails.  ``start``: overlaps (q, m, V)
    near the answer (e.g. the pitchfork's base point); ``jac_rule``: the rule of the first
    Jacobian (default ``rule``)."""
    p = as_params(params)
    base_branch = _base_branch(p, branch)
    if base_branch is None:
        raise ValueError("the positional branch of a non-symmetric A has no base point")
    if not 0.0 < t < 1.0:
        raise ValueError(f"the amplitude t must lie in (0, 1), got {t!r}")
    got = _solve_reduced(p, branch, base_branch, start, rule, jac_rule or rule, t, xtol)
    return None if got is None else got[:2]


class _Amplitude:
    """The branch as α(t) on the cheap rule (:func:`_solve_reduced`), each amplitude t
    warm-started from the nearest one solved (``first``: the overlaps of the first start)."""

    def __init__(self, p, branch, base_branch, first, cheap):
        self.args, self.cheap, self.first = (p, branch, base_branch), cheap, first
        self.solved: dict[float, tuple] = {}
        self.jac: dict[float, np.ndarray] = {}

    def at(self, t, depth=0):
        """(α, overlaps) at amplitude ``t``, or None where Newton fails (also from halfway
        between ``t`` and the nearest amplitude solved, three times over)."""
        t = float(t)
        if t not in self.solved:
            near = min(self.solved, key=lambda s: abs(s - t)) if self.solved else None
            start = self.first if near is None else self.solved[near][1]
            jac = self.jac.get(near)  # Broyden from the neighbour's Jacobian: ~half the maps
            got = _solve_reduced(*self.args, start, self.cheap, self.cheap, t, 1e-7, jac=jac)
            if got is None and jac is not None:
                got = _solve_reduced(*self.args, start, self.cheap, self.cheap, t, 1e-7)
            if got is None:
                if near is None or depth >= 3 or self.at(0.5 * (t + near), depth + 1) is None:
                    return None
                return self.at(t, depth + 1)
            self.solved[t] = got[:2]
            self.jac[t] = got[3]
        return self.solved[t]

    def fold(self, t0, dt, sign, xatol=1e-3):
        """The fold: the extremum of α(t) (the minimum for ``sign`` -1, the maximum for +1).
        The amplitudes already solved up to ``t0`` (the pitchfork and the normal-form points)
        are looked at first -- a shallow fold lies between them (ω = 0.58, non-symmetric A:
        t ≈ 0.08) -- then t walks on from ``t0`` in steps ``dt`` until -sign α(t) turns up,
        and bounded Brent refines inside the last two intervals (``dt`` < 0 walks down from
        ``t0``).  Returns (t_fold, α_fold, why): t_fold None (with why) when the walk leaves
        (0, ``T_MAX``) or the branch is lost before a fold."""
        from scipy.optimize import minimize_scalar

        def f(t):
            g = self.at(t)
            return math.inf if g is None else -sign * g[0]

        behind = (lambda t: 0.0 < t <= t0) if dt > 0 else (lambda t: t >= t0)
        ts = sorted(filter(behind, self.solved), reverse=dt < 0) or [t0]  # in walking order
        k = 1
        while True:
            if k == len(ts):
                t = ts[-1] + dt
                if not 0.0 < t < T_MAX:
                    return None, None, f"no fold for t in (0, {T_MAX:g})"
                if self.at(t) is None:
                    return None, None, f"the branch was not solved at amplitude t = {t:.3g}"
                ts.append(t)
            if f(ts[k]) > f(ts[k - 1]):  # turned up: the extremum lies in (ts[k-2], ts[k])
                lo, hi = sorted((ts[max(k - 2, 0)], ts[k]))
                m = minimize_scalar(f, bounds=(lo, hi), method="bounded", options=dict(xatol=xatol))
                return float(m.x), self.at(m.x)[0], ""
            k += 1


def _normal_form(a_p, alphas) -> tuple[float, float]:
    """(a, b) of α(t) = a_p + a t² + b t⁴ through the ``alphas`` at :data:`NORMAL_FORM_T`."""
    (t1, t2), (y1, y2) = NORMAL_FORM_T, (alphas[0] - a_p, alphas[1] - a_p)
    b = (y2 / t2**2 - y1 / t1**2) / (t2**2 - t1**2)
    return y1 / t1**2 - b * t1**2, b


def _kind(p, branch, base_branch, x_p, a_p, cheap, rule, xtol, sign=-1.0, x_fine=None) -> dict:
    """Super- or subcritical, from the normal form α(t) = a_p + a t² + b t⁴ through two
    amplitudes (:data:`NORMAL_FORM_T`, rule ``cheap``; ``a_p``, ``x_p``: the pitchfork and its
    base point on that rule; with ``x_fine``, the pitchfork's base point on ``rule``, the
    pitchfork and both amplitudes are solved again on ``rule`` -- a is ~30 % larger on the
    cheap rule at ω = 0.3 -- and that normal form decides); supercritical: the branch lies on
    the side where it exists
    (a > 0 at a lower end, ``sign`` -1; a < 0 at an upper end, ``sign`` +1); subcritical: the
    fold = the extremum of α(t) (:meth:`_Amplitude.fold`), α there re-evaluated on ``rule``
    (stationary in t: the cheap rule's t suffices).  Returns dict(a, alpha_fold, t_fold,
    metadata, why)."""
    amp = _Amplitude(p, branch, base_branch, x_p, cheap)
    if x_fine is None:  # the pitchfork by the amplitudes' own route (Brent's root is only to
        # xtol, and α(t) - α_p at t = 0.05 is ~a/400)
        got = _solve_reduced(p, branch, base_branch, x_p, cheap, cheap, DELTA, 1e-7)
        if got is not None:
            a_p, x_p = got[:2]
            amp.jac[DELTA] = got[3]
    amp.solved[DELTA] = (a_p, x_p)  # the pitchfork itself (amplitude → 0)
    pts = [amp.at(t) for t in NORMAL_FORM_T]
    if any(g is None for g in pts):
        return dict(a=None, why="the branch near the pitchfork was not solved", metadata={})
    a, b = _normal_form(a_p, [g[0] for g in pts])
    meta = dict(normal_form_cheap=[a, b])
    if x_fine is not None:
        fine = [_solve_reduced(p, branch, base_branch, x_fine, rule, cheap, DELTA, 1e-9)]
        fine += [
            _solve_reduced(p, branch, base_branch, g[1], rule, cheap, t, 1e-9)
            for t, g in zip(NORMAL_FORM_T, pts)
        ]
        if all(f is not None for f in fine):
            pts = [f[:2] for f in fine[1:]]
            a, b = _normal_form(fine[0][0], [g[0] for g in pts])
        else:
            meta["normal_form_rule"] = "cheap (the requested rule's Newton failed)"
    meta.update(normal_form_b=b, normal_form_points=[[t, g[0]] for t, g in zip(NORMAL_FORM_T, pts)])
    if -sign * a > 0:
        return dict(a=a, metadata=meta)
    # Brent's tolerance in t: α is stationary there (error ~2|a| Δt²), 1e-3 at the default
    # xtol, 1e-2 for a rough spinodal (xtol 1e-3: fixed_point's existence question)
    t_fold, a_cheap, why = amp.fold(NORMAL_FORM_T[1], 0.05, sign, xatol=max(1e-3, 10 * xtol))
    fine = None
    if t_fold is not None and rule is cheap:  # the walk solved it on this rule already
        fine = amp.at(t_fold)
    elif t_fold is not None:
        fine = _solve_reduced(p, branch, base_branch, amp.at(t_fold)[1], rule, cheap, t_fold, xtol)
        why = "the fold was not solved on the requested rule"
    if fine is None:
        meta.update(subcritical=True, no_fold=why)
        return dict(a=a, why=f"subcritical (a = {a:.3g}) but {why}", metadata=meta)
    meta.update(alpha_fold_cheap=a_cheap, amplitudes_solved=len(amp.solved))
    return dict(a=a, alpha_fold=fine[0], t_fold=t_fold, metadata=meta)


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


def _found(branch, base_branch, a_s, lower=True):
    return (
        f"the {branch} branch {'leaves' if lower else 'returns to'} the {base_branch} fixed "
        f"point at α_s = {a_s:.6g} (pitchfork: the eigenvalue in the {DIRECTION[branch]} "
        f"direction crosses 1)"
    )


def _reduced(p, branch, base_branch, x, rule, amp=DELTA):
    """The branch at amplitude ``amp`` (module docstring; ``DELTA`` → the spinodal) as a square
    system in the base point's overlaps ``x`` alone: the channel does not depend on α (the hats
    are α times it), so the V equation V = σ²/(λ + σ² α V̂_1) gives α in closed form (V̂ may be
    negative: the loss is not convex); the residuals are the other base equations (log q,
    log m) and λ - 1 with λ = F_dir/dir.  Returns (residuals, α, λ)."""
    d = DIRECTION[branch]
    delta = amp * math.sqrt((p.rho if d == "theta" else 1.0 / p.s2) * x["q"])
    pt = dict(dict(q=x["q"], m=x.get("m", 0.0), theta=0.0, V=x["V"]), **{d: delta})
    args = (pt["q"], pt["m"], pt["theta"], pt["V"])
    h = hats_from_channel(1.0, *args, channel(*args, p, rule), p)  # α = 1: the hats per α
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


def _solve_reduced(p, branch, base_branch, start, rule, cheap, amp, xtol, max_iter=16, jac=None):
    """Newton on :func:`_reduced` at amplitude ``amp`` in log(q), log(V) (, log m) with
    ``rule``, from the overlaps ``start`` (q, m, V), its Jacobian by finite differences of the
    ``cheap`` rule: recomputed at every step when ``rule`` is the cheap one, otherwise once and
    then Broyden updates (typically 2-4 evaluations of ``rule``); ``jac``: a first Jacobian
    (a neighbouring solve's), then Broyden updates on any rule.  Returns (α, overlaps,
    iterations, Jacobian), or None if it fails (the spinodal then falls back to bracket +
    Brent)."""
    names = ["q", "V"] + (["m"] if base_branch == "positional" else [])
    y = np.array([math.log(abs(start[k])) for k in names])

    def at(yv):
        x = {k: math.exp(v) for k, v in zip(names, yv)}
        if base_branch == "positional":
            x["m"] = math.copysign(x["m"], start["m"])
        return x

    def red(yv, rl):
        return _reduced(p, branch, base_branch, at(yv), rl, amp)

    def jacobian(yv, r0):
        J = np.empty((len(names), len(names)))
        for i in range(len(names)):
            e = np.zeros(len(names))
            e[i] = 1e-4
            J[:, i] = (red(yv + e, cheap)[0] - r0) / 1e-4
        return J

    try:
        r0, alpha0, _ = red(y, cheap)
        J = jacobian(y, r0) if jac is None else np.array(jac, dtype=float)
        r, alpha = (r0, alpha0) if rule is cheap else red(y, rule)[:2]
        for it in range(1, max_iter + 1):
            step = -np.linalg.solve(J, r)
            if np.max(np.abs(step)) > 0.5:  # a wild step: stay near the start (log scale)
                step *= 0.5 / np.max(np.abs(step))
            y_new = y + step
            r_new, alpha_new, _ = red(y_new, rule)
            if rule is cheap and jac is None:
                J = jacobian(y_new, r_new)
            else:
                J += np.outer(r_new - r - J @ step, step) / (step @ step)
            small = np.max(np.abs(r_new)) < 1e-6
            # the rule's rounding floor: a small residual that stopped falling (α then jitters
            # by ~1e-6 relative on the cheap rule, and an xtol below that would never be met)
            floor = small and it > 1 and np.max(np.abs(r_new)) > 0.5 * np.max(np.abs(r))
            y, r = y_new, r_new
            if small and (abs(alpha_new - alpha) <= xtol * alpha_new or floor):
                return alpha_new, at(y), it, J
            alpha = alpha_new
    except (FloatingPointError, ValueError, ZeroDivisionError, SystemError, np.linalg.LinAlgError):
        return None
    return None


def amplitude(r, params: ERMParams | Mapping | None, branch: str) -> float:
    """The amplitude t of a fixed point ``r`` on ``branch`` (module docstring): θ/√(ρq) semantic,
    |m| σ/√q positional."""
    p = as_params(params)
    if branch == "semantic":
        return abs(r.theta) / math.sqrt(p.rho * r.q)
    return abs(r.m) * p.sigma / math.sqrt(r.q)


def saddle_node(
    params: ERMParams | Mapping | None,
    branch: str,
    start,
    *,
    xtol: float = 1e-5,
    rule: Rule | None = None,
    method: str = "split",
    nodes: int | None = None,
) -> SpinodalResult:
    """The saddle-node (fold) where ``branch`` ends when followed from the converged fixed point
    ``start`` (a result on that branch, e.g. at large α) towards smaller α: the branch as α(t)
    (module docstring) walked from the start's amplitude in the direction in which α falls,
    the minimum of α(t) by bounded Brent on the cheap rule, α there on ``rule``.  For a branch
    born off nothing -- not from a bifurcation of a smaller invariant subspace (``base`` "").
    ``status`` "no_spinodal" when α(t) has no minimum for t in (0, 0.95) along the way (the
    message says why)."""
    p = as_params(params)
    if branch not in DIRECTION:
        raise ValueError(f"branch must be 'semantic' or 'positional', got {branch!r}")
    if not (getattr(start, "converged", False) and start.branch == branch):
        raise ValueError(f"start must be a converged fixed point on the {branch} branch")
    if rule is None:
        rule = make_rule(method, nodes)
    cheap = coarse_rule() if rule.method == "split" else rule
    base_branch = _base_branch(p, branch) or "trivial"  # the unknowns besides the amplitude
    common = dict(omega=p.omega, branch=branch, alpha_max=start.alpha, params=p.to_dict())
    amp = _Amplitude(p, branch, base_branch, dict(q=start.q, m=start.m, V=start.V), cheap)
    t0 = amplitude(start, p, branch)
    step = 0.05 if t0 > 0.1 else 0.25 * t0
    first, lower = amp.at(t0), amp.at(t0 - step)
    if first is None or lower is None:
        return SpinodalResult(
            status="max_iter", message="the branch was not solved near the start", **common
        )
    dt = -step if lower[0] < first[0] else step
    t_fold, a_cheap, why = amp.fold(t0, dt, -1.0)
    fine = None
    if t_fold is not None:
        got = amp.at(t_fold)[1]
        fine = _solve_reduced(p, branch, base_branch, got, rule, cheap, t_fold, xtol)
        why = "the fold was not solved on the requested rule"
    meta = dict(rule.describe(), alpha_fold_cheap=a_cheap, amplitudes_solved=len(amp.solved))
    if fine is None:
        return SpinodalResult(
            status="no_spinodal",
            message=f"no saddle-node of the {branch} branch below α = {start.alpha:g}: {why}",
            metadata=meta,
            **common,
        )
    a_f, x = fine[:2]
    return SpinodalResult(
        status="converged",
        alpha_spinodal=a_f,
        kind="saddle-node",
        amplitude_fold=t_fold,
        q=x["q"],
        V=x["V"],
        message=f"the {branch} branch followed down from α = {start.alpha:g} ends at a "
        f"saddle-node at α_s = {a_f:.6g} (amplitude t = {t_fold:.3g}); it exists for α > α_s",
        metadata=meta,
        **common,
    )
