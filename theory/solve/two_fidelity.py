"""Two-fidelity fixed-point solve: a cheap map finds the way, the accurate map polishes.

The replica state equations are expensive to evaluate accurately (a quadrature over a
non-convex prox) and cheap to evaluate roughly (a coarser rule).  The two maps have the same
fixed-point structure, so the cheap one supplies the start and the Jacobian and the accurate one
is evaluated only a few times (docs/solver.md §3):

1. warm start (``warm=True``): quasi-Newton on the accurate map directly, its Jacobian from
   finite differences of the cheap map -- if the start's accurate residual is below
   ``warm_residual`` (at most ``warm_maps`` accurate maps);
2. otherwise quasi-Newton on the cheap map (``newton_first`` or warm; from ``jacobian0``, an
   earlier cheap Jacobian, when given), or, when that fails or is not tried, the damped Anderson
   iteration on the cheap map down to 1e-3;
3. quasi-Newton on the accurate map from the cheap fixed point (plus the defect correction
   ``shift``, the accurate-minus-cheap difference carried along a branch), its first Jacobian
   taken on the cheap map at the cheap fixed point;
4. if that stalls, the damped Anderson iteration on the accurate map (said in ``message``).

``accel="anderson"`` / ``"none"``: the damped Anderson / plain damped iteration, first on the
cheap map to 1e-5, then on the accurate one (an Anderson run that ends at ``max_iter`` is
finished by the plain damped iteration with half the mixing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from theory.solve.iterate import Anderson, Damped, IterationResult, QuasiNewton, iterate

__all__ = ["ACCELERATIONS", "solve_two_fidelity"]

ACCELERATIONS = ("newton", "anderson", "none")


def _with(result: IterationResult, **changes) -> IterationResult:
    return dataclasses.replace(result, **changes)


def _newton_then_anderson(Fc, stalled, tol, mixing, left, common) -> IterationResult:
    """``newton_after`` (see :func:`solve_two_fidelity`): quasi-Newton on ``Fc`` from where
    the stalled Anderson run got to, then Anderson for what is ``left`` of the budget.  The
    result's ``iterations`` counts these two stages only."""
    qn = iterate(
        Fc,
        dict(stalled.x),
        strategy=QuasiNewton(),
        tol=max(tol, 1e-3),
        max_iter=min(16, left),
        **common,
    )
    if qn.status in ("converged", "diverged") or qn.iterations >= left:
        note = f"Anderson stalled ({stalled.iterations} maps), quasi-Newton took over"
        return _with(qn, message=f"{qn.message}; {note}" if qn.message else note)
    worse = not (qn.residual < stalled.residual)  # nan compares False: keep Anderson's point
    nxt = dict(stalled.x if worse else qn.x)
    out = iterate(
        Fc,
        nxt,
        strategy=Anderson(mixing),
        tol=max(tol, 1e-3),
        max_iter=left - qn.iterations,
        **common,
    )
    return _with(out, iterations=out.iterations + qn.iterations)


def _damped_finish(F, last, mixing, tol, max_iter, common):
    """The plain damped iteration at half the mixing from ``last``'s point, for ``max_iter``
    maps (at least one): the way out when Anderson locks into a cycle where the map is rough."""
    return iterate(
        F, dict(last.x), strategy=Damped(mixing / 2), tol=tol, max_iter=max(max_iter, 1), **common
    )


def solve_two_fidelity(
    F: Callable[[dict], tuple[dict, Any]],
    x0: Mapping,
    *,
    cheap: Callable[[dict], tuple[dict, Any]] | None = None,
    accel: str = "newton",
    warm: bool = False,
    newton_first: bool = False,
    shift: Mapping | None = None,
    jacobian0: tuple | None = None,
    admissible: Callable[[dict], bool] | None = None,
    tol: float = 1e-6,
    mixing: float = 0.5,
    max_iter: int = 300,
    warm_residual: float = 5e-2,
    warm_maps: int = 6,
    callbacks: Sequence[Callable] = (),
    keep_history: bool = False,
    newton_after: int | None = None,
) -> IterationResult:
    """Solve ``F(x) = x`` from ``x0``, helped by the ``cheap`` map (None: ``F`` alone).

    ``iterations`` of the result counts the stages' map evaluations (of ``F`` and, in the cheap
    stages, of ``cheap``; not the cheap map's finite differences for a Jacobian).
    ``metadata``: ``cheap_fixed_point`` (the cheap stage's fixed point when the accurate stage
    started from it and converged) and ``cheap_jacobian`` (that stage's final quasi-Newton
    Jacobian): what a warm-started neighbour passes back as ``shift`` (the difference) and
    ``jacobian0``.  ``admissible(x)`` vets the defect-corrected start.
    ``callbacks`` are shared by every stage (a stop rule keeps its trace across them).
    ``newton_after``: the damped Anderson stage on the cheap map (stage 2, a cold start) that
    has spent this many evaluations without converging or being stopped is interrupted for
    quasi-Newton on the cheap map from where it got to (16 evaluations at most); if that does
    not converge either, Anderson goes on from the better of the two points for the rest of
    ``max_iter`` (None: Anderson alone; ``metadata["newton_after"]`` when it happened).  Where
    the map has an eigenvalue far from 1 (the damped step overshoots, and Anderson, which
    starts only at residuals below 5e-2, never engages) or one close to 1 (slow contraction),
    Anderson spends its whole budget; Newton does not.
    """
    if accel not in ACCELERATIONS:
        raise ValueError(f"accel must be one of {ACCELERATIONS}, got {accel!r}")
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    two = cheap is not None
    Fc = cheap if two else F
    common = dict(callbacks=callbacks, keep_history=keep_history)
    start = dict(x0)
    iters = 0
    pre = out = None
    meta: dict = {}
    if accel == "newton":
        if warm and two:
            direct = iterate(
                F,
                start,
                strategy=QuasiNewton(jacobian_map=cheap),
                tol=tol,
                max_iter=warm_maps,
                max_start_residual=warm_residual,
                **common,
            )
            iters += direct.iterations
            if direct.status in ("converged", "diverged"):
                out = direct
        if out is None and (warm or newton_first):
            pre = iterate(
                Fc,
                start,
                strategy=QuasiNewton(jacobian0=jacobian0),
                tol=max(tol, 1e-4) if two else tol,
                max_iter=16,
                **common,
            )
            iters += pre.iterations
        if out is None and (pre is None or pre.status != "converged"):
            budget = max_iter if newton_after is None else min(max_iter, int(newton_after))
            pre = iterate(
                Fc,
                start,
                strategy=Anderson(mixing),
                tol=max(tol, 1e-3),
                max_iter=budget,
                **common,
            )
            iters += pre.iterations
            if pre.status == "max_iter" and budget < max_iter:
                pre = _newton_then_anderson(Fc, pre, tol, mixing, max_iter - budget, common)
                iters += pre.iterations
                meta["newton_after"] = budget
        if out is not None:
            out = _with(out, iterations=iters)
        elif pre.status == "diverged" or (
            not two and pre.status == "converged" and pre.residual < tol
        ):
            out = _with(pre, iterations=iters)  # no cheap map: the cheap stage solved F
        else:
            ok = pre.status == "converged"
            begin = dict(pre.x) if ok else start
            if ok and shift and two:
                # defect correction: the accurate fixed point is the cheap one plus a shift that
                # varies slowly along a branch (given by the warm start's result)
                trial = {k: begin[k] + shift.get(k, 0.0) for k in begin}
                if admissible is None or admissible(trial):
                    begin = trial
            out = iterate(
                F,
                begin,
                strategy=QuasiNewton(
                    jacobian_map=cheap,
                    jacobian_base=(pre.x, pre.fx) if ok and pre.fx else None,
                ),
                tol=tol,
                max_iter=min(max_iter, 40),
                **common,
            )
            if out.status == "converged" and ok and two:
                meta["cheap_fixed_point"] = dict(pre.x)
            if out.status in ("converged", "diverged"):
                out = _with(out, iterations=out.iterations + iters)
            else:  # fall back to the damped Anderson iteration on the accurate map
                note = f"quasi-Newton stopped ({out.status}: {out.message})"
                iters += out.iterations
                nxt = dict(out.x) if out.status == "max_iter" else begin
                out = iterate(
                    F, nxt, strategy=Anderson(mixing), tol=tol, max_iter=max_iter, **common
                )
                if out.status == "max_iter" and "cycles" in out.message:
                    # Anderson locked into a cycle where the map is rough: the plain damped
                    # iteration, half the mixing, from there, for what is left of the budget
                    note = f"{note}; Anderson {out.message}, finished with the damped iteration"
                    iters += out.iterations
                    out = _damped_finish(F, out, mixing, tol, max_iter - iters, common)
                msg = f"{note}; {out.message}" if out.message else note
                out = _with(out, iterations=out.iterations + iters, message=msg)
        if out.status == "converged" and two and pre is not None and pre.jacobian is not None:
            meta["cheap_jacobian"] = pre.jacobian
    else:
        make = (lambda m: Anderson(m)) if accel == "anderson" else (lambda m: Damped(m))
        if two:
            pre = iterate(
                cheap, start, strategy=make(mixing), tol=max(tol, 1e-5), max_iter=max_iter, **common
            )
            iters += pre.iterations
            if pre.status == "converged":
                start = dict(pre.x)
        if iters and pre.status == "diverged":
            out = pre
        else:
            out = iterate(F, start, strategy=make(mixing), tol=tol, max_iter=max_iter, **common)
            out = _with(out, iterations=out.iterations + iters)
            if out.status == "max_iter" and accel == "anderson":
                # Anderson can lock into a cycle where the map is rough: finish with the plain
                # damped iteration, half the mixing, from the last point
                n0 = out.iterations
                out = _damped_finish(F, out, mixing, tol, max_iter, common)
                note = "Anderson did not converge, finished with the damped iteration"
                msg = f"{out.message}; {note}" if out.message else note
                out = _with(out, iterations=out.iterations + n0, message=msg)
    return _with(out, metadata=dict(out.metadata, accel=accel, **meta))
