"""Phases of the L = 2 model (docs/attention.md §7): branches along α, the global minimiser,
the first-order transition α_c(ω), the threshold α_l(ω) where the global minimiser beats the
linear baseline, and the (α, ω) phase diagram.

* :func:`curve` follows each branch along α by continuation (:func:`theory.solve.sweep`);
* :func:`global_minimiser` keeps, per α, the converged fixed point with the lowest ε_t;
* :func:`transition` brackets Δε_t = ε_t(semantic) - ε_t(positional) and refines its root by
  Brent (:func:`theory.solve.bracket`, :func:`theory.solve.find_root`), then α_l likewise;
* :func:`phase_diagram` does it for several ω, continued from one ω to the next;
* :func:`regions` draws the theory regions of the (α, ω) plane: where each branch exists
  (its spinodals, :mod:`theory.attention.spinodal`) and which one is global (α_c).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from theory.attention.baseline import linear_baseline
from theory.attention.params import ERMParams, as_params, check_alpha
from theory.attention.quadrature import coarse_rule, make_rule
from theory.attention.solver import BRANCHES, WARM_EXTRAS, ERMResult, fixed_point
from theory.attention.spinodal import ALPHA_MAX, check_alpha_max, spinodal
from theory.results import Result
from theory.solve import bracket, extrapolate, find_root, sweep

__all__ = [
    "CurveResult",
    "PhaseDiagramResult",
    "REGIONS",
    "RegionsResult",
    "TransitionResult",
    "classify",
    "curve",
    "global_minimiser",
    "is_candidate",
    "phase_diagram",
    "point_row",
    "regions",
    "transition",
]

#: the fields of a curve's tidy rows
CURVE_FIELDS = (
    "alpha",
    "omega",
    "init",
    "branch",
    "sweep",
    "q",
    "m",
    "theta",
    "theta_over_sigma2",
    "m_over_sigma2",
    "V",
    "eps_t",
    "eps_g",
    "status",
    "iterations",
)


def point_row(r: ERMResult) -> dict:
    """One tidy row (the ``CURVE_FIELDS``) of a fixed point along a curve."""
    return {
        k: (r.metadata.get("sweep", "") if k == "sweep" else getattr(r, k)) for k in CURVE_FIELDS
    }


def _with_rule(fp_kwargs: dict) -> dict:
    # continuation handles a branch's end itself: a decaying start is stopped, not followed
    fp_kwargs.setdefault("when_absent", "stop")
    if "rule" not in fp_kwargs:
        fp_kwargs["rule"] = make_rule(
            fp_kwargs.pop("method", "split"), fp_kwargs.pop("nodes", None)
        )
    return fp_kwargs


def _field(r, k):
    return r[k] if isinstance(r, Mapping) else getattr(r, k)


def is_candidate(r) -> bool:
    """Whether the fixed point ``r`` (a result or its row) competes for the global minimiser:
    converged on the branch it was started on, or at the trivial point (m = θ = 0) a start
    flowed to -- the trivial point is a fixed point at every α, and the global minimiser
    wherever neither branch exists (docs/attention.md §7)."""
    return _field(r, "status") in ("converged", "ok") and _field(r, "branch") in (
        _field(r, "init"),
        "trivial",
    )


def global_minimiser(results: Sequence, *, by: Sequence[str] = ("alpha",)) -> list:
    """The global minimiser (docs/attention.md §7): among the converged candidates with a finite
    ε_t that share the fields ``by`` (default: the same α), the one with the lowest ε_t; sorted
    by ``by``.  ``results``: theory results (:class:`~theory.attention.solver.ERMResult`),
    finite-d results or their rows -- they share the field names, so the empirical global
    minimiser of a seed is ``global_minimiser(runs, by=("alpha", "omega", "d", "seed"))``."""
    best = {}
    for r in results:
        eps_t = _field(r, "eps_t")
        if _field(r, "status") not in ("converged", "ok") or eps_t is None:
            continue
        if not math.isfinite(eps_t):
            continue
        k = tuple(round(v, 12) if isinstance(v, float) else v for v in (_field(r, f) for f in by))
        if k not in best or eps_t < _field(best[k], "eps_t"):
            best[k] = r
    return [best[k] for k in sorted(best)]


@dataclass(frozen=True, kw_only=True)
class CurveResult(Result):
    """Fixed points along α, branch by branch and sweep by sweep, each in increasing α
    (``points``; iterating over the result iterates over them).  ``rows()``: one tidy row
    per point; ``branch(name)``: the points started on that branch; ``global_minimiser()``:
    per α the converged point with the lowest ε_t, on the branch it was started on or at the
    trivial point a start flowed to."""

    omega: float
    points: tuple = ()

    def __iter__(self):
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)

    def __getitem__(self, i):
        return self.points[i]

    def branch(self, name: str) -> list[ERMResult]:
        return [r for r in self.points if r.init == name]

    def global_minimiser(self) -> list[ERMResult]:
        return global_minimiser([r for r in self.points if is_candidate(r)])

    def rows(self) -> list[dict]:
        return [
            {
                k: (r.metadata.get("sweep", "") if k == "sweep" else getattr(r, k))
                for k in CURVE_FIELDS
            }
            for r in self.points
        ]


def curve(
    alphas: ArrayLike,
    params: ERMParams | Mapping | None = None,
    branches: Sequence[str] = ("semantic", "positional"),
    *,
    sweeps: Sequence[str] | None = None,
    progress: bool = False,
    **fp_kwargs,
) -> CurveResult:
    """Fixed points along ``alphas`` for each branch by continuation (warm starts).

    ``sweeps``: "forward" (increasing α) and/or "backward" (decreasing α); each point carries
    ``metadata["sweep"]``.  Default (None): each branch is followed from where it surely exists
    -- the semantic branch backward from the largest α (it disappears at small α), the
    positional and trivial ones forward.  Once a followed branch collapses onto the trivial one
    (its end), the remaining α of that sweep are returned unsolved (status "diverged",
    ``metadata["not_continued"]``).  ``fp_kwargs`` go to
    :func:`~theory.attention.solver.fixed_point` (mixing, tol, nodes, method, rule, ...).
    """
    p = as_params(params)
    alphas = np.asarray(alphas, dtype=float)
    for a in alphas:
        check_alpha(a)
    for b in branches:
        if b not in BRANCHES:
            raise ValueError(f"branch must be one of {BRANCHES}, got {b!r}")
    fp_kwargs = _with_rule(fp_kwargs)

    def sweeps_of(b):
        if sweeps is not None:
            return tuple(sweeps)
        return ("backward",) if b == "semantic" else ("forward",)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(alphas) * sum(len(sweeps_of(b)) for b in branches), desc="erm curve")
    out = []
    for b in branches:
        last, lost = [], {}

        def solve(a, init, b=b, last=last, lost=lost):
            d = "forward" if not last or a > last[-1].alpha else "backward"
            if d in lost:
                # natural continuation cannot pass the end (fold) of a branch: once the branch,
                # followed this way, collapsed onto the trivial one, it is not solved further
                return ERMResult(
                    alpha=a,
                    omega=p.omega,
                    status="diverged",
                    init=b,
                    params=p.to_dict(),
                    metadata=dict(not_continued=True),
                    message=f"not continued: the {b} branch, followed {d}, "
                    f"collapsed at α = {lost[d]:.6g}",
                )
            if init is not None and last:
                # carry the accurate-minus-cheap shift along the branch (defect correction)
                init = dict(init, **{k: last[-1].metadata.get(k) for k in WARM_EXTRAS})
            r = fixed_point(a, p, b, init=init, **fp_kwargs)
            if r.converged and r.branch == b:
                last.append(r)
            elif last and r.metadata.get("collapsed"):
                lost[d] = a
            return r

        res = sweep(
            solve,
            alphas,
            None,
            directions=sweeps_of(b),
            progress=bar,
            accept=lambda r, b=b: r.converged and r.branch == b,
        )
        for d in sweeps_of(b):
            for r in res[d]:
                r.metadata["sweep"] = d
                out.append(r)
    if bar is not None:
        bar.close()
    ok = sum(r.converged and r.branch == r.init for r in out)
    return CurveResult(
        omega=p.omega,
        points=tuple(out),
        message=f"{ok}/{len(out)} points converged on the branch they were started on",
        params=p.to_dict(),
        metadata=dict(fp_kwargs["rule"].describe(), branches=list(branches)),
    )


@dataclass(frozen=True, kw_only=True)
class TransitionResult(Result):
    """α_c (ε_t(semantic) = ε_t(positional)) and α_l (the global minimiser's ε_g = ε_g^lin),
    the baseline's ``eps_g_lin``, both branches' ε_g at α_c and their common ε_t there;
    ``alpha_l_branch``: where α_l lies ("positional" below α_c -- or "trivial" where the
    positional start collapses onto the trivial point --, "jump" at α_c, "semantic" above);
    ``alpha_spinodal_semantic`` / ``_positional``: where each branch begins
    (:func:`~theory.attention.spinodal.spinodal`); ``alpha_max``: the end of the search
    (status "no_transition" when positional wins up to there)."""

    omega: float
    alpha_c: float = math.nan
    alpha_l: float = math.nan
    eps_g_lin: float = math.nan
    eps_g_sem_at_alpha_c: float = math.nan
    eps_g_pos_at_alpha_c: float = math.nan
    eps_t_at_alpha_c: float = math.nan
    alpha_l_branch: str = ""
    alpha_max: float = math.nan
    alpha_spinodal_semantic: float = math.nan
    alpha_spinodal_positional: float = math.nan


#: map-evaluation cap of the cheap-rule check of the semantic branch at alpha_max (per stage)
TOP_MAX_ITER = 30
#: θ/σ² below this at the end of that check, unconverged, is a semantic start that decayed
#: (at ω = 0.95, α = 20 θ/σ² falls geometrically from 0.28 to 2.4e-3 in the 90 capped cheap
#: maps while q, V wander; a semantic branch well above its spinodal has θ/σ² ~ 0.1-1)
DECAYED = 1e-2


def _semantic_at_alpha_max(p, alpha_max, fp_kwargs) -> TransitionResult | None:
    """The semantic branch exists above its spinodal: a semantic start that decays onto the
    trivial point at ``alpha_max`` means it exists nowhere below, and positional wins up to
    there (status "no_transition").  One cold solve on the cheap rule, capped (bounded time);
    None when the semantic fixed point is found there or the solve is undecided (the bracket
    search, bounded by ``alpha_max``, goes on)."""
    rule = fp_kwargs["rule"]
    cheap = coarse_rule() if rule.method == "split" else rule
    kw = dict(fp_kwargs, rule=cheap, coarse=False, max_iter=TOP_MAX_ITER, when_absent="stop")
    top = fixed_point(alpha_max, p, "semantic", **kw)
    th = top.theta_over_sigma2
    decayed = top.metadata.get("collapsed") or (
        not (top.converged and top.branch == "semantic") and math.isfinite(th) and th < DECAYED
    )
    if not decayed:
        return None  # found, or neither found nor seen to decay: the bracket search decides
    return TransitionResult(
        status="no_transition",
        message=f"positional is the global minimiser for all α ≤ α_max = {alpha_max:g}: "
        "the semantic branch does not exist there (a semantic start decays to θ = 0)",
        omega=p.omega,
        alpha_max=alpha_max,
        eps_g_lin=linear_baseline(p),
        params=p.to_dict(),
        metadata=dict(rule.describe(), semantic_at_alpha_max=top.status),
    )


def _eps_g_minus(r, eps_lin):
    """ε_g - ε_g^lin of the candidate ``r`` (None: nan)."""
    return math.nan if r is None else r.eps_g - eps_lin


def transition(
    params: ERMParams | Mapping | None = None,
    *,
    alphas: ArrayLike = None,
    xtol: float = 1e-4,
    progress: bool = False,
    hint: float | None = None,
    hint_l: float | None = None,
    starts: dict | None = None,
    step: float = 1.25,
    alpha_max: float = ALPHA_MAX,
    spinodals: bool = True,
    **fp_kwargs,
) -> TransitionResult:
    """α_c(ω) and α_l(ω) (docs/attention.md eq. 16-18).

    Δε_t(α) = ε_t(semantic) - ε_t(positional) (> 0 below α_c) is bracketed, then its root is
    refined by Brent to ``xtol``.  Bracketing: on the grid ``alphas`` when given (first sign
    change), otherwise adaptively -- from ``hint`` (default 1) in geometric steps of ``step``
    towards the sign change (α in [0.02, ``alpha_max``]).  Every fixed point is warm-started
    from the nearest ones already solved on its branch (linear extrapolation in α), or from
    ``starts`` ({branch: dict(q, m, theta, V)}) for the first one -- how
    :func:`phase_diagram` carries the solution from one ω to the next.  α_l: where the global
    minimiser's ε_g crosses ε_g^lin -- inside the positional branch below α_c, at α_c itself
    when the drop happens in the jump, or inside the semantic branch above α_c (``hint_l``: a
    guess; same bracket + Brent).
    ``status``: "converged", or "max_iter" when a bracket is missing (the message says which,
    and the field is nan).  ``metadata["solved"]`` counts the fixed points computed.

    Bounded search: first one capped cold semantic solve at ``alpha_max`` (default 20) on the
    cheap rule -- if it decays to θ = 0 the semantic branch exists nowhere below (it begins
    at its spinodal and exists above) and the answer is status "no_transition" ("positional
    is the global minimiser for all α ≤ α_max"); then the semantic spinodal α_s, and the
    adaptive bracket from max(hint, 1.25 α_s) up to ``alpha_max``; Δε_t still positive there
    is "no_transition" too.
    ``spinodals``: also compute the positional branch's spinodal (reported, not needed).
    """
    p = as_params(params)
    alpha_max = check_alpha_max(alpha_max)
    fp_kwargs = _with_rule(fp_kwargs)
    rule = fp_kwargs["rule"]
    if alphas is None:
        early = _semantic_at_alpha_max(p, alpha_max, fp_kwargs)
        if early is not None:
            return early
    spin = {"semantic": spinodal(p, "semantic", alpha_max=alpha_max, hint=hint, rule=rule)}
    if spinodals:
        # from low α: the positional eigenvalue may be back below 1 by α = 1 (ω = 0)
        spin["positional"] = spinodal(p, "positional", alpha_max=alpha_max, rule=rule)
    spin_fields = {f"alpha_spinodal_{b}": s.alpha_spinodal for b, s in spin.items() if s.converged}
    spin_meta = {f"spinodal_{b}": s.message for b, s in spin.items()}
    solved: dict[str, dict[float, ERMResult]] = {"semantic": {}, "positional": {}, "trivial": {}}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=f"erm transition ω={p.omega:g}", unit="fixed point")

    def ok(r, b):
        return r is not None and r.converged and r.branch == b

    def warm(a, b):
        good = sorted((x for x, r in solved[b].items() if ok(r, b)), key=lambda x: abs(x - a))
        if not good:
            return (starts or {}).get(b)
        r1 = solved[b][good[0]]
        if len(good) < 2 or abs(good[0] - a) < 1e-12:
            return r1
        keys = ("q", "m", "theta", "V")
        near = [{k: getattr(solved[b][x], k) for k in keys} for x in (good[1], good[0])]
        out = extrapolate(near, [good[1], good[0]], a, keys)
        out.update({k: r1.metadata.get(k) for k in WARM_EXTRAS})
        return out

    def solve_at(a, b):
        a = float(a)
        # the same α reached by two routes can differ in the last bit (measured: the bracket's
        # 0.43614156477756927 and Brent's 0.4361415647775693): one solve
        a = next((x for x in solved[b] if abs(x - a) <= 1e-14 * abs(a)), a)
        if a in solved[b]:
            return solved[b][a]
        r = fixed_point(a, p, b, init=warm(a, b), **fp_kwargs)
        if not ok(r, b) and warm(a, b) is not None:
            r2 = fixed_point(a, p, b, **fp_kwargs)  # the warm start may have jumped: cold start
            if ok(r2, b):
                r = r2
        solved[b][a] = r
        if bar is not None:
            bar.update(1)
        return r

    def rival(a):
        # the semantic branch's rival for the global minimiser: the positional branch, or the
        # trivial point where the positional start collapses onto it (the branch does not exist
        # there; a non-symmetric A can have none at all) -- a converged result, or None
        rp = solve_at(a, "positional")
        if ok(rp, "positional"):
            return rp
        if ok(rp, "trivial") or (rp is not None and rp.metadata.get("collapsed")):
            rt = solve_at(a, "trivial")
            return rt if is_candidate(rt) else None
        return None

    def semantic(a):
        rs = solve_at(a, "semantic")
        return rs if ok(rs, "semantic") else None

    def dE(a):
        rs, rp = semantic(a), rival(a)
        return math.nan if rs is None or rp is None else rs.eps_t - rp.eps_t

    msgs = []
    if alphas is not None:
        grid = np.sort(np.asarray(alphas, dtype=float))
        for a in grid:
            check_alpha(a)
    else:
        a0 = float(hint) if hint else 1.0
        if spin["semantic"].converged:  # start where the semantic branch surely exists
            a0 = max(a0, 1.25 * spin["semantic"].alpha_spinodal)
        grid = bracket(dE, min(a0, alpha_max), sign_below=+1.0, step=step, hi=alpha_max)
    rc = find_root(dE, grid, xtol=xtol)
    alpha_c = rc.root
    eps_lin = linear_baseline(p)
    out = dict(omega=p.omega, eps_g_lin=eps_lin, alpha_max=alpha_max, **spin_fields)
    values = [v for _, v in rc.values]
    no_transition = (
        rc.status != "converged"
        and values
        and all(math.isfinite(v) and v > 0 for v in values[-2:])
        and max(grid) >= alpha_max
    )

    def onset():
        # no sign change: with no positional branch, a semantic branch below the trivial point
        # wherever it was solved took over at its spinodal -- (α_c, note), or None
        sp = spin["semantic"]
        finite = [(a, v) for a, v in rc.values if math.isfinite(v)]
        if not (sp.converged and finite and solved["trivial"]) or any(v >= 0 for _, v in finite):
            return None
        if any(r.converged and r.branch == "positional" for r in solved["positional"].values()):
            return None
        a_s, a_min = sp.alpha_spinodal, min(a for a, _ in finite)
        if sp.kind != "saddle-node":
            return a_s, "continuous: the semantic branch leaves the trivial point at its spinodal"
        a1 = a_s * (1 + 1e-3)
        v1 = dE(a1) if a1 < a_min else math.nan
        if math.isfinite(v1) and v1 > 0:
            r = find_root(dE, [a1, a_min], xtol=xtol)
            if r.status == "converged":
                return r.root, "first order between the semantic branch and the trivial point"
        return a_s, (
            "the semantic branch (a fold at α_s) lies below the trivial point wherever solved, "
            f"from α = {min(a_min, a1):.6g}: α_c is taken at α_s"
        )

    took_over = None if rc.status == "converged" else onset()
    if rc.status == "converged":
        rs, rp = solve_at(alpha_c, "semantic"), rival(alpha_c)
        out.update(
            alpha_c=alpha_c,
            eps_g_sem_at_alpha_c=rs.eps_g,
            eps_g_pos_at_alpha_c=rp.eps_g,
            eps_t_at_alpha_c=0.5 * (rs.eps_t + rp.eps_t),
        )
    elif took_over is not None:
        alpha_c, note = took_over
        rt = solve_at(alpha_c, "trivial")
        rs = solve_at(alpha_c, "semantic")
        rs = rs if ok(rs, "semantic") else rt
        out.update(
            alpha_c=alpha_c,
            eps_g_sem_at_alpha_c=rs.eps_g,
            eps_g_pos_at_alpha_c=rt.eps_g,
            eps_t_at_alpha_c=0.5 * (rs.eps_t + rt.eps_t),
        )
        msgs.append(f"alpha_c: no positional branch; {note}")
    else:
        msgs.append(f"alpha_c: {rc.message or rc.status}")
    alpha_l, l_branch = math.nan, ""
    if math.isfinite(alpha_c):
        rl: object = None
        if out["eps_g_pos_at_alpha_c"] < eps_lin:
            # the positional minimiser is already below the baseline: α_l lies below α_c
            f = lambda a: _eps_g_minus(rival(a), eps_lin)
            g = bracket(f, alpha_c, sign_below=+1.0, start_value=f(alpha_c))
            rl, l_branch = find_root(f, g, xtol=xtol), rival(alpha_c).branch
        elif out["eps_g_sem_at_alpha_c"] < eps_lin:
            l_branch, alpha_l = "jump", alpha_c
        else:
            f = lambda a: _eps_g_minus(semantic(a), eps_lin)
            if hint_l and hint_l > alpha_c:
                g = bracket(f, float(hint_l), sign_below=+1.0, step=step, lo=alpha_c)
            else:
                g = bracket(f, alpha_c, sign_below=+1.0, start_value=f(alpha_c))
            rl, l_branch = find_root(f, g, xtol=xtol), "semantic"
        if rl is not None:
            if rl.status == "converged":
                alpha_l = rl.root
            else:
                msgs.append(f"alpha_l: {rl.message or rl.status} ({l_branch} branch)")
                l_branch = ""
    if bar is not None:
        bar.close()
    status = "converged" if math.isfinite(alpha_c) and math.isfinite(alpha_l) else "max_iter"
    if no_transition and alphas is None:
        status, msgs = (
            "no_transition",
            [
                f"positional is the global minimiser for all α ≤ α_max = {alpha_max:g} "
                "(ε_t(semantic) > ε_t(positional) up to there)"
            ],
        )
    starts_out = (
        {
            b: {k: getattr(solve_at(alpha_c, b), k) for k in ("q", "m", "theta", "V")}
            for b in ("semantic", "positional")
        }
        if math.isfinite(alpha_c)
        else None
    )
    return TransitionResult(
        alpha_l=alpha_l,
        alpha_l_branch=l_branch,
        status=status,
        message="; ".join(msgs),
        params=p.to_dict(),
        metadata=dict(
            fp_kwargs["rule"].describe(),
            grid=[float(x) for x in grid],
            dE_evaluations=rc.values,
            solved=sum(len(v) for v in solved.values()),
            starts_at_alpha_c=starts_out,
            **spin_meta,
        ),
        **out,
    )


#: the fields of a phase diagram's rows
PHASE_FIELDS = ("omega", "alpha_c", "alpha_l", "eps_g_lin", "alpha_l_branch", "status", "message")


@dataclass(frozen=True, kw_only=True)
class PhaseDiagramResult(Result):
    """α_c(ω) and α_l(ω): one :class:`TransitionResult` per ω (``transitions``); ``rows()``
    gives one tidy row per ω (``omega, alpha_c, alpha_l, eps_g_lin, alpha_l_branch, status,
    message``)."""

    omegas: tuple = ()
    transitions: tuple = ()

    def rows(self) -> list[dict]:
        return _phase_rows(self.transitions)


def _phase_rows(transitions) -> list[dict]:
    return [{k: getattr(t, k) for k in PHASE_FIELDS} for t in transitions]


def phase_diagram(
    omegas: ArrayLike,
    params: ERMParams | Mapping | None = None,
    *,
    progress: bool = False,
    on_row: Callable[[list[dict]], None] | None = None,
    **kw,
) -> PhaseDiagramResult:
    """α_c(ω) and α_l(ω) for each ω of ``omegas`` (other parameters from ``params``).

    Without an explicit ``alphas`` grid each ω starts its bracket where the previous ones
    point (log α_c, log α_l extrapolated linearly in ω from the last two) with the previous
    fixed points as warm starts (continuation in ω).  ``on_row(rows)`` is called after every ω
    with the rows done so far (e.g. to write them).  ``kw`` go to :func:`transition`."""
    p = as_params(params)
    it = omegas
    if progress:
        from tqdm import tqdm

        it = tqdm(omegas, desc="phase diagram")
    hint, starts = kw.pop("hint", None), kw.pop("starts", None)
    done = []  # (ω, α_c, α_l) of the converged ω so far
    trs = []
    for w in it:
        hint_l, step = None, 1.25
        if len(done) >= 2:
            (w1, c1, l1), (w2, c2, l2) = done[-2], done[-1]
            t_ = (float(w) - w2) / (w2 - w1) if w2 != w1 else 0.0
            hint = math.exp(math.log(c2) + t_ * (math.log(c2) - math.log(c1)))
            if math.isfinite(l1) and math.isfinite(l2):
                hint_l = math.exp(math.log(l2) + t_ * (math.log(l2) - math.log(l1)))
            step = 1.04
        kw.setdefault("spinodals", False)
        t = transition(
            p.replace(omega=float(w)), hint=hint, hint_l=hint_l, starts=starts, step=step, **kw
        )
        trs.append(t)
        if math.isfinite(t.alpha_c):
            done.append((float(w), t.alpha_c, t.alpha_l))
            hint, starts = t.alpha_c, t.metadata.get("starts_at_alpha_c")
        if on_row is not None:
            on_row(_phase_rows(trs))
    bad = [t.omega for t in trs if not t.converged]
    return PhaseDiagramResult(
        omegas=tuple(float(w) for w in omegas),
        transitions=tuple(trs),
        status="converged" if not bad else "max_iter",
        message="" if not bad else f"no transition found at omega = {bad}",
        params=p.to_dict(),
    )


#: the regions of the (α, ω) plane (docs/attention.md §7), in the order of their codes
REGIONS = (
    "neither",
    "only positional",
    "both, positional global",
    "both, semantic global",
    "only semantic",
    "both, global undetermined",
)
#: the boundaries of one ω (fields of :class:`RegionsResult`, one value per ω)
BOUNDARIES = (
    "alpha_semantic",
    "alpha_positional",
    "alpha_positional_end",
    "alpha_positional_fold",
    "alpha_c",
)


def classify(alpha: float, b: Mapping) -> str:
    """The region (:data:`REGIONS`) of ``alpha`` given one ω's boundaries ``b``
    (:data:`BOUNDARIES`).  The semantic branch exists for α > alpha_semantic; the positional
    one for α > alpha_positional except in the gap alpha_positional_end < α <
    alpha_positional_fold (nan end: no gap; nan fold: absent above the end); where both exist
    the semantic one is global above alpha_c (inf: positional global everywhere, nan:
    undetermined)."""

    def above(key):
        v = b[key]
        return v is not None and math.isfinite(v) and alpha > v

    sem = above("alpha_semantic")
    end, fold = b["alpha_positional_end"], b["alpha_positional_fold"]
    gap = end is not None and math.isfinite(end) and alpha > end
    if gap and fold is not None and math.isfinite(fold):
        gap = alpha < fold
    pos = (b["alpha_positional"] is not None and alpha > b["alpha_positional"]) and not gap
    if sem and pos:
        ac = b["alpha_c"]
        if ac is None or math.isnan(ac):
            return REGIONS[5]
        return REGIONS[3] if alpha > ac else REGIONS[2]
    return REGIONS[4] if sem else REGIONS[1] if pos else REGIONS[0]


@dataclass(frozen=True, kw_only=True)
class RegionsResult(Result):
    """The theory regions of the (α, ω) plane: per ω of ``omegas`` the boundaries
    ``alpha_semantic`` (the semantic branch's spinodal: its pitchfork or, subcritical, its
    fold), ``alpha_positional`` (the positional branch's lower spinodal; 0 when the
    eigenvalue is above 1 down to α = 1e-3), ``alpha_positional_end`` (where the positional
    branch returns to the trivial point in a supercritical pitchfork; nan: it does not
    below ``alpha_max``), ``alpha_positional_fold`` (where the positional branch found at
    ``alpha_max`` begins, a saddle-node; nan: no gap; inf: none at ``alpha_max``),
    ``alpha_c`` (:func:`transition`; inf: "no_transition", nan: not found).
    ``region(alpha, omega)`` classifies (ω one of ``omegas``; :func:`classify`);
    ``grid(alphas)``: the codes (indices of :data:`REGIONS`), shape (len(omegas),
    len(alphas)); ``rows()``: one row of boundaries per ω."""

    omegas: tuple = ()
    alpha_semantic: tuple = ()
    alpha_positional: tuple = ()
    alpha_positional_end: tuple = ()
    alpha_positional_fold: tuple = ()
    alpha_c: tuple = ()
    alpha_max: float = math.nan

    def rows(self) -> list[dict]:
        return [
            dict(omega=w, **{k: getattr(self, k)[i] for k in BOUNDARIES})
            for i, w in enumerate(self.omegas)
        ]

    def region(self, alpha: float, omega: float) -> str:
        i = [j for j, w in enumerate(self.omegas) if math.isclose(w, omega, abs_tol=1e-12)]
        if not i:
            raise ValueError(f"omega must be one of the computed {list(self.omegas)}")
        return classify(alpha, self.rows()[i[0]])

    def grid(self, alphas: ArrayLike) -> np.ndarray:
        rows = self.rows()
        return np.array([[REGIONS.index(classify(a, r)) for a in alphas] for r in rows])


def _omega_boundaries(p: ERMParams, alpha_max: float, rule) -> tuple[dict, list[str]]:
    """One ω's :data:`BOUNDARIES` and the notes on them (see :class:`RegionsResult`)."""
    from theory.attention.spinodal import saddle_node

    notes = []
    t = transition(p, alpha_max=alpha_max, spinodals=False, rule=rule)
    b = dict(
        alpha_c=math.inf if t.status == "no_transition" else t.alpha_c,
        alpha_semantic=t.alpha_spinodal_semantic,
    )
    if t.status not in ("converged", "no_transition"):
        notes.append(f"alpha_c: {t.message}")
    if not math.isfinite(b["alpha_semantic"]):
        s = spinodal(p, "semantic", alpha_max=alpha_max, rule=rule)
        b["alpha_semantic"] = s.alpha_spinodal if s.converged else math.inf
        if not s.converged and s.status != "no_spinodal":
            notes.append(f"semantic spinodal: {s.message}")
    # the walk starts low: the positional eigenvalue may be back below 1 by α = 1 (ω = 0)
    lo = spinodal(p, "positional", alpha_max=alpha_max, rule=rule)
    b["alpha_positional"] = lo.alpha_spinodal if lo.converged else 0.0
    if not lo.converged:
        notes.append(f"positional spinodal: {lo.message}")
    hint = max(1.0, 1.25 * b["alpha_positional"])
    up = spinodal(p, "positional", alpha_max=alpha_max, rule=rule, side="upper", hint=hint)
    end = math.nan
    if up.converged and (up.kind == "saddle-node" or up.normal_form_a < 0):
        end = up.alpha_spinodal  # the branch from below ends there
    b["alpha_positional_end"], b["alpha_positional_fold"] = end, math.nan
    if math.isfinite(end):
        top = fixed_point(alpha_max, p, "positional", rule=rule, when_absent="stop")
        if not (top.converged and top.branch == "positional"):
            b["alpha_positional_fold"] = math.inf
        else:
            sn = saddle_node(p, "positional", top, rule=rule)
            if sn.converged and sn.alpha_spinodal > end:
                b["alpha_positional_fold"] = float(sn.alpha_spinodal)
            elif not sn.converged:
                notes.append(f"positional saddle-node: {sn.message}")
    return b, notes


def regions(
    omegas: ArrayLike,
    params: ERMParams | Mapping | None = None,
    *,
    alpha_max: float = ALPHA_MAX,
    rule=None,
    method: str = "split",
    nodes: int | None = None,
    progress: bool = False,
    on_row: Callable[[list[dict]], None] | None = None,
) -> RegionsResult:
    """The theory regions of the (α, ω) plane (:data:`REGIONS`) on the grid ``omegas``: per ω
    the semantic spinodal and α_c (:func:`transition`), the positional branch's lower spinodal,
    its upper one (``side="upper"``) and, where it returns to the trivial point there, the
    saddle-node of the positional branch found at ``alpha_max``
    (:func:`~theory.attention.spinodal.saddle_node`).  Assumes one α_c per ω (the semantic
    branch global above it wherever both exist).  ``on_row(rows)`` after every ω."""
    p = as_params(params)
    alpha_max = check_alpha_max(alpha_max)
    if rule is None:
        rule = make_rule(method, nodes)
    ws = [float(w) for w in np.atleast_1d(np.asarray(omegas, float))]
    it = ws
    if progress:
        from tqdm import tqdm

        it = tqdm(ws, desc="erm regions")
    cols: dict[str, list] = {k: [] for k in BOUNDARIES}
    notes, rows = [], []
    for w in it:
        b, nb = _omega_boundaries(p.replace(omega=w), alpha_max, rule)
        for k in BOUNDARIES:
            cols[k].append(float(b[k]))
        notes += [f"omega={w:g}: {n}" for n in nb]
        rows.append(dict(omega=w, **b))
        if on_row is not None:
            on_row(rows)
    return RegionsResult(
        status="converged" if not notes else "max_iter",
        message="; ".join(notes),
        omegas=tuple(ws),
        alpha_max=alpha_max,
        params=p.to_dict(),
        metadata=rule.describe(),
        **{k: tuple(v) for k, v in cols.items()},
    )
