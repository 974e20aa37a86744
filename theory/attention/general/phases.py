"""The first-order transition of the general model (docs/attention.md §10.1): α_c between two
named branches, α_l against the general linear baseline, and a replica-symmetry check of each
branch's fixed point at α_c.

The structure is that of the L = 2 :func:`theory.attention.phases.transition`: Δε_t(α) =
ε_t(above) - ε_t(below) is bracketed by a geometric walk and its root refined by Brent
(:func:`theory.solve.bracket`, :func:`theory.solve.find_root`), every fixed point warm-started
from its branch's nearest solved neighbours (:func:`theory.solve.extrapolate`).  All fixed points
share ONE set of frozen QMC nodes, so Δε_t(α) is a smooth function of α for Brent; the QMC error
of α_c comes from the spread of Δε_t over the scramblings at α_c (ε_t = -Φ is stationary in the
order parameters, so each scrambling's ε_t evaluated at the pooled fixed point is its own fixed
point's ε_t to second order) divided by the slope of Δε_t.

RS check (``rs_check="restarts"``): the replicon of the general model is not available in a form
that discriminates (``replicon_smooth`` omits the prox's basin-jump term and is unconverged on
every θ = 0 point, docs/findings.md §3), so RS is tested at finite d: several L-BFGS restarts on
ONE data set at dimension ``rs_d``, restricted to the branch's sector at the fixed point's
overlaps ({PQ/√d = m, Q*ᵀQ = 0} for the positional branch; {PQ = 0} started around θ for the
semantic one; :func:`theory.attention.finite_d.general.simulate_fixed_m`).  RS is trusted when
the minima found coincide: mean |q_ab| / mean q_aa ≥ 1 - RS_TOL/√d.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from theory._util import check_positive
from theory.attention.general.baseline import linear_baseline
from theory.attention.general.params import GeneralParams, as_params
from theory.attention.general.quadrature import make_nodes
from theory.attention.general.solver import BRANCHES, KEYS, GeneralERMResult, _evaluate, fixed_point
from theory.results import Result
from theory.rng import RNGLike
from theory.solve import bracket, extrapolate, find_root

__all__ = ["RS_TOL", "GeneralTransitionResult", "RSCheckResult", "rs_check", "transition"]

#: RS is trusted when 1 - q_ab/q ≤ RS_TOL/√d.  Calibration (docs/findings.md §3, BENCHMARKS.md):
#: restarts at the L = 2 positional fixed point end in one minimum (1 - q_ab/q < 1e-9), the
#: glassy L = 3 θ = 0 sector has 1 - q_ab/q = 0.08-0.93 at d = 400-1600; 1/√d is the scale of
#: the sample-to-sample differences of two minima that RS counts as one
RS_TOL = 1.0


@dataclass(frozen=True, kw_only=True)
class RSCheckResult(Result):
    """Finite-d restarts test of replica symmetry at one fixed point: ``rs_stable`` (None when
    not applicable), ``overlap_ratio`` = mean |q_ab| / mean q_aa of the minima found,
    ``tolerance`` = RS_TOL/√d, ``eps_t`` of each restart."""

    alpha: float
    branch: str
    rs_stable: bool | None = None
    overlap_ratio: float = math.nan
    tolerance: float = math.nan
    d: int = 0
    eps_t: list = field(default_factory=list)


def rs_check(
    alpha: float,
    fp: GeneralERMResult | Mapping,
    params: GeneralParams | Mapping | None = None,
    branch: str | None = None,
    *,
    d: int = 400,
    restarts: int = 3,
    seed: int = 0,
) -> RSCheckResult:
    """Replica-symmetry check of a fixed point ``fp`` (its m and θ) by ``restarts`` L-BFGS
    restarts on one data set of dimension ``d`` (``seed``), restricted to the branch's sector:
    positional (θ ≡ 0) at m = fp.m, semantic (m ≡ 0) started at overlap θ = fp.theta with the
    teacher.  Rank r = 1 only; other cases return ``rs_stable`` None (status "ok", message
    says why)."""
    from theory.attention.finite_d.general import simulate_fixed_m

    p = as_params(params)
    get = (lambda k: fp[k]) if isinstance(fp, Mapping) else (lambda k: getattr(fp, k))
    branch = branch or get("branch")
    common = dict(alpha=float(alpha), branch=branch, params=p.to_dict())
    why = None
    if p.r != 1:
        why = f"the restarts check is implemented for student rank r = 1 (got r = {p.r})"
    elif branch not in ("semantic", "positional"):
        why = f"no restarts check for a {branch!r} fixed point (only semantic or positional)"
    if why:
        return RSCheckResult(status="ok", message=why, **common)
    m = np.asarray(get("m"), float).reshape(-1)
    if branch == "semantic":
        th = np.asarray(get("theta"), float).reshape(-1)
        s = simulate_fixed_m(
            alpha, np.zeros(p.L), p, d=d, seed=seed, restarts=restarts, theta_free=True, theta0=th
        )
    else:
        s = simulate_fixed_m(alpha, m, p, d=d, seed=seed, restarts=restarts)
    ratio = s.mutual_ratio
    tol = RS_TOL / math.sqrt(d)
    stable = bool(1.0 - ratio <= tol)
    msg = (
        f"{restarts} L-BFGS restarts at d = {d} in the {branch} sector: "
        f"mean |q_ab|/q_aa = {ratio:.4g} (RS needs ≥ {1 - tol:.4g})"
    )
    if not s.converged:
        msg += f"; L-BFGS: {s.status} ({s.message})"
    return RSCheckResult(
        rs_stable=stable,
        overlap_ratio=ratio,
        tolerance=tol,
        d=int(d),
        eps_t=list(s.eps_t),
        status="ok" if s.converged else s.status,
        message=msg,
        metadata=dict(overlap=np.asarray(s.overlap).tolist(), seed=int(seed)),
        **common,
    )


@dataclass(frozen=True, kw_only=True)
class GeneralTransitionResult(Result):
    """α_c (ε_t(above) = ε_t(below); ``branches`` = (above, below): the second is the global
    minimiser below α_c) with its QMC standard error ``alpha_c_err``; α_l where the global
    minimiser's ε_g crosses ``eps_g_lin`` (``alpha_l_branch``: "below", "jump" or "above" as in
    the L = 2 code, named by branch); ``eps_t_at_alpha_c``; ``fixed_points`` {branch: overlaps,
    eps_t, eps_g at α_c}; the RS check of each (``rs_check``, ``rs_stable``,
    ``rs_overlap_ratio``, ``rs_tolerance``); ``alpha_max`` and ``max_time`` bound the search;
    ``alpha_c_bracket`` = (lo, hi) with Δε_t(lo) > 0 > Δε_t(hi), the tightest found (empty
    when none was), the answer so far when ``max_time`` stops the search."""

    omega: float
    branches: tuple = ()
    alpha_c: float = math.nan
    alpha_c_err: float | None = None
    alpha_c_bracket: tuple = ()
    alpha_l: float = math.nan
    alpha_l_branch: str = ""
    eps_g_lin: float = math.nan
    eps_g_lin_err: float = math.nan
    eps_t_at_alpha_c: float = math.nan
    fixed_points: dict = field(default_factory=dict)
    rs_check: str = ""
    rs_stable: dict = field(default_factory=dict)
    rs_overlap_ratio: dict = field(default_factory=dict)
    rs_tolerance: float = math.nan
    alpha_max: float = math.nan
    max_time: float = math.nan


class _OutOfTime(Exception):
    pass


def _point(r: GeneralERMResult) -> dict:
    return dict(
        {k: np.asarray(getattr(r, k)).tolist() for k in KEYS},
        eps_t=r.eps_t,
        eps_g=r.eps_g,
        branch=r.branch,
        status=r.status,
    )


def transition(
    params: GeneralParams | Mapping | None = None,
    branches: Sequence[str] = ("semantic", "positional"),
    *,
    inits: Mapping | None = None,
    hint: float | None = None,
    step: float = 1.25,
    xtol: float = 1e-3,
    alpha_max: float = 20.0,
    max_time: float = 3600.0,
    n: int = 2**11,
    n_rep: int = 4,
    rng: RNGLike = 0,
    rs: bool = True,
    rs_d: int = 400,
    rs_restarts: int = 3,
    rs_seed: int = 0,
    baseline_n: int = 2**14,
    progress: bool = False,
    **fp_kwargs,
) -> GeneralTransitionResult:
    """α_c and α_l of the general model (docs/attention.md §10.1).

    ``branches`` = (above, below): Δε_t = ε_t(above) - ε_t(below) is positive below α_c (default
    semantic over positional, the L = 2 convention); each is a branch of
    :func:`~theory.attention.general.fixed_point` ("semantic", "positional", "free"), started
    from its default cold start or from ``inits[branch]`` = dict(q, m, theta, V) (or a result).
    The bracket walks from ``hint`` (default 1) in geometric steps of ``step`` within
    [0.02, ``alpha_max``]; Brent refines to ``xtol`` (default 1e-3, below the QMC error of α_c
    at the default 2^11 × 4 nodes).  Status "no_transition" when Δε_t > 0 up to ``alpha_max``;
    "max_iter" when no bracket is found otherwise; "max_time" when ``max_time`` wall-clock
    seconds are spent: every fixed point gets the time left (its iteration stops at the bound,
    overrunning by at most one map evaluation), and the result keeps what was found
    (``alpha_c_bracket``, α_c if Brent had finished, the message says what is missing).  The RS
    check runs only while time is left (its L-BFGS is bounded by its own step count).  α_l: the
    global minimiser's ε_g = ε_g^lin (:func:`~theory.attention.general.linear_baseline`), on the
    "below" branch under α_c, in the jump, or on the "above" branch over it.  ``rs``: the
    restarts check (:func:`rs_check`, at ``rs_d`` with ``rs_restarts`` restarts) on both fixed
    points at α_c; a failure is reported in ``rs_stable`` and the message ("RS not trusted
    ...").  ``fp_kwargs`` (mixing, tol, max_iter, accel) go to every fixed point.
    """
    p = as_params(params)
    branches = tuple(branches)
    if len(branches) != 2 or branches[0] == branches[1]:
        raise ValueError(f"branches must be two different branch names, got {branches!r}")
    for b in branches:
        if b not in BRANCHES:
            raise ValueError(f"each branch must be one of {BRANCHES}, got {b!r}")
    inits = dict(inits or {})
    for b in inits:
        if b not in branches:
            raise ValueError(f"inits names a branch {b!r} that is not in branches {branches}")
    alpha_max = check_positive("alpha_max", alpha_max)
    max_time = check_positive("max_time (seconds)", max_time)
    if hint is not None:
        hint = check_positive("hint", hint, hi=alpha_max)
    if not step > 1:
        raise ValueError(f"step must be > 1 (a geometric factor), got {step}")
    if int(rs_d) != rs_d or rs_d <= p.L + 1:
        raise ValueError(f"rs_d must be an integer dimension > L + 1, got {rs_d}")
    above, below = branches
    t0, c0 = time.perf_counter(), time.process_time()
    deadline = t0 + max_time

    def left():
        return deadline - time.perf_counter()

    nodes = make_nodes(p, n, n_rep, "qmc", rng)
    fp_kwargs.update(nodes=nodes, error=False)
    solved: dict[str, dict[float, GeneralERMResult]] = {b: {} for b in branches}
    collapsed: list[float] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=f"erm general-transition L={p.L} ω={p.omega:g}", unit="fixed point")

    def ok(r, b):
        if r is None or not r.converged:
            return False
        # the θ = 0 sector's RS state may be the trivial point (L = 3: the positional branch
        # collapses onto m = 0, docs/findings.md §3); it stands for the positional side
        return b == "free" or r.branch == b or (b == "positional" and r.branch == "trivial")

    def warm(a, b):
        # warm starts from the branch itself (not from a trivial point standing in for it)
        good = [x for x, r in solved[b].items() if ok(r, b) and r.branch != "trivial"]
        good = sorted(good, key=lambda x: abs(x - a))
        if not good:
            return inits.get(b)
        if len(good) < 2:
            return solved[b][good[0]]
        near = [{k: getattr(solved[b][x], k) for k in KEYS} for x in (good[1], good[0])]
        out = extrapolate(near, [good[1], good[0]], a, KEYS)
        if any(np.linalg.eigvalsh(0.5 * (out[k] + out[k].T)).min() <= 0 for k in ("q", "V")):
            return solved[b][good[0]]  # extrapolated past positive definiteness: nearest one
        return out

    def bounded(a, b, init):
        """One fixed point in the time left; _OutOfTime when the bound stops it."""
        if left() <= 0:
            raise _OutOfTime
        r = fixed_point(a, p, b, init=init, max_time=left(), **fp_kwargs)
        if r.status == "max_time":
            raise _OutOfTime
        return r

    def trivial_at(a, b):
        """The trivial point at a, warm-started from the nearest solved one (m = 0 exactly)."""
        near = [x for x, r in solved[b].items() if ok(r, b) and r.branch == "trivial"]
        init = dict(m=np.zeros((p.L, p.r)))
        if near:
            r0 = solved[b][min(near, key=lambda x: abs(x - a))]
            init.update(q=r0.q, V=r0.V)
        return bounded(a, b, init)

    def solve_at(a, b):
        a = float(a)
        if a in solved[b]:
            return solved[b][a]
        if b == "positional" and any(x >= a for x in collapsed):
            # the positional branch collapsed at some α' >= a: it ends at a spinodal below
            # which only the trivial point is left, so solve that directly (the collapse from a
            # positional start costs a full decay of m: ~550 s of the first L = 3 run)
            r = trivial_at(a, b)
            if ok(r, b):
                collapsed.append(a)
                solved[b][a] = r
                if bar is not None:
                    bar.update(1)
                return r
        start = warm(a, b)
        r = bounded(a, b, start)
        gone = "collapsed" in r.message  # the branch ended: a cold start would end there too
        if not ok(r, b) and not gone and start is not None and b not in inits:
            r2 = bounded(a, b, None)  # the warm start may have jumped: cold
            if ok(r2, b):
                r = r2
        if b == "positional" and "collapsed" in r.message:
            # the positional branch ends on the trivial point: solve that point (m = 0 exactly
            # is invariant, so the collapse stop cannot fire) as the θ = 0 sector's state
            triv = trivial_at(a, b)
            if ok(triv, b):
                r = triv
                collapsed.append(a)
        solved[b][a] = r
        if bar is not None:
            bar.update(1)
        return r

    signs: dict[float, float] = {}  # every finite Δε_t computed (the bracket so far)

    def dE(a):
        ra, rb = solve_at(a, above), solve_at(a, below)
        v = ra.eps_t - rb.eps_t if ok(ra, above) and ok(rb, below) else math.nan
        if math.isfinite(v):
            signs[float(a)] = v
        return v

    def eps_g_minus(b, lin):
        return lambda a: (solve_at(a, b).eps_g - lin) if ok(solve_at(a, b), b) else math.nan

    base = linear_baseline(p, n=baseline_n, rng=rng)
    lin = base.eps_g_lin
    out = dict(
        omega=p.omega,
        branches=branches,
        eps_g_lin=lin,
        eps_g_lin_err=base.eps_g_lin_err,
        alpha_max=alpha_max,
        max_time=max_time,
    )
    msgs, status = [], "max_iter"
    grid, rc = [], None
    try:
        a0 = min(float(hint) if hint else 1.0, alpha_max)
        grid = bracket(dE, a0, sign_below=+1.0, step=step, hi=alpha_max)
        rc = find_root(dE, grid, xtol=xtol)
        if rc.status == "converged":
            status = _at_alpha_c(rc, above, below, solve_at, nodes, p, out, msgs)
        else:
            vals = [v for _, v in rc.values]
            if (
                vals
                and all(math.isfinite(v) and v > 0 for v in vals[-2:])
                and max(grid) >= alpha_max
            ):
                status = "no_transition"
                msgs.append(
                    f"{below} is the global minimiser for all α ≤ α_max = {alpha_max:g} "
                    f"(ε_t({above}) > ε_t({below}) up to there)"
                )
            else:
                msgs.append(f"alpha_c: {rc.message or rc.status}")
        if math.isfinite(out.get("alpha_c", math.nan)):
            status = _alpha_l(out, above, below, solve_at, eps_g_minus, lin, xtol, step, msgs)
    except _OutOfTime:
        status = "max_time"
        out["alpha_c_bracket"] = _tightest_bracket(signs)
        msgs.append(_out_of_time_message(max_time, out, signs))
    if bar is not None:
        bar.close()
    if collapsed:
        msgs.append(
            f"the positional branch collapsed onto the trivial point (m = 0, θ = 0) at "
            f"α = {', '.join(f'{a:.4g}' for a in sorted(collapsed))}: that point stands for the "
            "θ = 0 sector there"
        )
    if rs and out.get("fixed_points"):
        if left() > 0:
            _rs_fields(out, p, rs_d, rs_restarts, rs_seed, msgs)
        else:
            msgs.append("RS not checked: max_time spent before the restarts check")
    if not out.get("alpha_c_bracket"):
        out["alpha_c_bracket"] = _tightest_bracket(signs)
    return GeneralTransitionResult(
        status=status,
        message="; ".join(msgs),
        params=p.to_dict(),
        metadata=dict(
            nodes.describe(),
            grid=[float(x) for x in grid],
            dE_evaluations=rc.values if rc is not None else [],
            solved=sum(len(v) for v in solved.values()),
            wall_time_s=time.perf_counter() - t0,
            cpu_time_s=time.process_time() - c0,
            xtol=xtol,
        ),
        **out,
    )


def _tightest_bracket(signs: Mapping[float, float]) -> tuple:
    """(lo, hi) with Δε_t(lo) > 0 > Δε_t(hi), adjacent among the α computed; () if none."""
    pts = sorted(signs.items())
    for (a, va), (b, vb) in zip(pts, pts[1:]):
        if va > 0 > vb:
            return (a, b)
    return ()


def _out_of_time_message(max_time, out, signs) -> str:
    msg = f"max_time = {max_time:g} s exceeded"
    if math.isfinite(out.get("alpha_c", math.nan)):
        return f"{msg} after α_c was found (α_l not found)"
    br = out.get("alpha_c_bracket")
    if br:
        return f"{msg} before Brent converged: α_c in [{br[0]:.6g}, {br[1]:.6g}]"
    if signs:
        seen = ", ".join(f"Δε_t({a:.4g}) = {v:.3g}" for a, v in sorted(signs.items()))
        return f"{msg} before a bracket of α_c was found ({seen})"
    return f"{msg} before Δε_t was computed at any α"


def _at_alpha_c(rc, above, below, solve_at, nodes, p, out, msgs) -> str:
    """α_c, its QMC error, the fixed points there; returns the status so far."""
    a = rc.root
    ra, rb = solve_at(a, above), solve_at(a, below)
    # per-scrambling Δε_t at the pooled fixed points (Φ stationary: second-order exact)
    dk = []
    for k in range(nodes.n_rep):
        sub = nodes.subset(k)
        ea = _evaluate(a, p, {k_: getattr(ra, k_) for k_ in KEYS}, sub, None)[1]
        eb = _evaluate(a, p, {k_: getattr(rb, k_) for k_ in KEYS}, sub, None)[1]
        dk.append(ea - eb)
    pts = sorted(
        ((x, v) for x, v in rc.values if math.isfinite(v) and abs(x - a) > 1e-12),
        key=lambda xv: abs(xv[0] - a),
    )
    err = None
    if len(dk) >= 2 and pts:
        x1, v1 = pts[0]
        slope = v1 / (x1 - a)  # Δε_t(α_c) = 0
        if slope != 0:
            err = float(np.std(dk, ddof=1) / math.sqrt(len(dk)) / abs(slope))
    out.update(
        alpha_c=a,
        alpha_c_err=err,
        eps_t_at_alpha_c=0.5 * (ra.eps_t + rb.eps_t),
        fixed_points={above: _point(ra), below: _point(rb)},
    )
    return "converged"


def _alpha_l(out, above, below, solve_at, eps_g_minus, lin, xtol, step, msgs) -> str:
    a_c = out["alpha_c"]
    fb, fa = out["fixed_points"][below], out["fixed_points"][above]
    if fb["eps_g"] < lin:  # the "below" minimiser already beats the baseline: α_l < α_c
        f, where = eps_g_minus(below, lin), below
        g = bracket(f, a_c, sign_below=+1.0, start_value=fb["eps_g"] - lin, step=step)
    elif fa["eps_g"] < lin:
        out.update(alpha_l=a_c, alpha_l_branch="jump")
        return "converged"
    else:
        f, where = eps_g_minus(above, lin), above
        g = bracket(
            f, a_c, sign_below=+1.0, start_value=fa["eps_g"] - lin, step=step, hi=out["alpha_max"]
        )
    rl = find_root(f, g, xtol=xtol)
    if rl.status != "converged":
        msgs.append(f"alpha_l: {rl.message or rl.status} ({where} branch)")
        return "max_iter"
    out.update(alpha_l=rl.root, alpha_l_branch=where)
    return "converged"


def _rs_fields(out, p, d, restarts, seed, msgs) -> None:
    stable, ratio, bad = {}, {}, []
    for b, fp in out["fixed_points"].items():
        label = fp["branch"] if b == "free" else b
        c = rs_check(out["alpha_c"], fp, p, label, d=d, restarts=restarts, seed=seed)
        stable[b], ratio[b] = c.rs_stable, c.overlap_ratio
        if c.rs_stable is False:
            bad.append(f"RS not trusted on the {b} branch at α_c ({c.message})")
        elif c.rs_stable is None:
            msgs.append(f"RS not checked on the {b} branch: {c.message}")
    out.update(
        rs_check="restarts",
        rs_stable=stable,
        rs_overlap_ratio=ratio,
        rs_tolerance=RS_TOL / math.sqrt(d),
    )
    msgs[:0] = bad
