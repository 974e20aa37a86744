"""Roots and transitions along a control parameter: continuation, bracketing, Brent.

A transition between two solution branches is the root of a difference of branch functions,
``f(a) = E_1(a) - E_2(a)``, each value of which is a solve (docs/solver.md §4):

* :func:`follow` / :func:`sweep` -- natural-parameter continuation: solve along a grid, each
  solve warm-started from the previous solutions (:func:`extrapolate`), so a branch can be
  followed past the point where a cold start would jump to another branch;
* :func:`bracket` -- a geometric walk from a hint towards the sign change of ``f``, with
  widening steps, stepping back where a branch ends (``f`` not finite);
* :func:`find_root` -- the first (or last) sign change of ``f`` on a grid, refined by Brent.

``f`` may return ``nan`` where a branch does not exist; such points never form a bracket.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from theory.results import Result

__all__ = ["RootResult", "bracket", "extrapolate", "find_root", "follow", "sweep"]


# --------------------------------------------------------------------------- continuation


def extrapolate(
    prev: Sequence[Mapping], xs: Sequence[float], x_new: float, keys: Sequence[str]
) -> dict | None:
    """Warm start at ``x_new`` from solutions ``prev`` at ``xs`` (increasing index = most
    recent): Lagrange extrapolation through the last three (quadratic) or two (linear) points;
    a value that would cross zero or change sign falls back to the last one (entry by entry for
    array values)."""
    if not prev:
        return None
    last = prev[-1]
    if len(prev) < 2:
        return {k: last[k] for k in keys}
    a, b = prev[-2], prev[-1]
    xa, xb = xs[-2], xs[-1]
    if xb == xa:
        return {k: b[k] for k in keys}
    if len(prev) >= 3 and len({xs[-3], xa, xb}) == 3:
        pts = xs[-3:]
        wts = [
            math.prod((x_new - pts[j]) / (pts[i] - pts[j]) for j in range(3) if j != i)
            for i in range(3)
        ]
        use = prev[-3:]
    else:
        t = (x_new - xb) / (xb - xa)
        wts, use = [-t, 1 + t], [a, b]
    out = {}
    for k in keys:
        v = sum(w * u[k] for w, u in zip(wts, use))
        if np.ndim(v) == 0:
            out[k] = v if (v > 0) == (b[k] > 0) and v != 0 else b[k]
        else:  # arrays (matrix order parameters): the same rule entry by entry
            bk = np.asarray(b[k], dtype=float)
            out[k] = np.where(((v > 0) == (bk > 0)) & (v != 0), v, bk)
    return out


def follow(
    solve: Callable[[float, dict | None], object],
    grid: Sequence[float],
    init: dict | None = None,
    *,
    keys: Sequence[str] = ("q", "m", "theta", "V"),
    accept: Callable[[object], bool] | None = None,
    extrapolate_starts: bool = True,
    progress=None,
) -> list:
    """Solve along ``grid`` in the given order with warm starts.

    ``solve(x, init)`` returns a result with the attributes named in ``keys``;
    ``accept(result)`` (default ``result.converged``) decides whether a solution may seed the
    next one (a rejected one is kept in the output, the next solve restarts from the last
    accepted one).  ``progress``: an object with ``update(1)`` (e.g. a tqdm bar).
    """
    accept = accept or (lambda r: bool(getattr(r, "converged", True)))
    out, good, good_x = [], [], []
    for x in grid:
        if not good:
            guess = init
        elif extrapolate_starts:
            guess = extrapolate(good, good_x, x, keys)
        else:
            guess = {k: good[-1][k] for k in keys}
        r = solve(float(x), guess)
        out.append(r)
        if accept(r):
            good.append({k: float(getattr(r, k)) for k in keys})
            good_x.append(float(x))
        if progress is not None:
            progress.update(1)
    return out


def sweep(
    solve,
    grid,
    init=None,
    *,
    keys=("q", "m", "theta", "V"),
    accept=None,
    directions=("forward", "backward"),
    progress=None,
) -> dict:
    """Forward (increasing) and/or backward (decreasing) continuation; returns
    ``{direction: [results in increasing grid order]}``."""
    grid = np.sort(np.asarray(grid, dtype=float))
    res = {}
    for d in directions:
        if d not in ("forward", "backward"):
            raise ValueError(f"direction must be 'forward' or 'backward', got {d!r}")
        g = grid if d == "forward" else grid[::-1]
        rs = follow(solve, g, init, keys=keys, accept=accept, progress=progress)
        res[d] = rs if d == "forward" else rs[::-1]
    return res


# --------------------------------------------------------------------------- brackets, roots


def bracket(
    f: Callable[[float], float],
    a0: float,
    *,
    sign_below: float,
    start_value: float | None = None,
    step: float = 1.25,
    lo: float = 0.02,
    hi: float = 50.0,
) -> list[float]:
    """Points of a geometric walk from ``a0`` towards the sign change of ``f`` (``f`` has the
    sign ``sign_below`` below the root), ending with the first pair that brackets it (or at
    the edge of [lo, hi], or where ``f`` stops being finite).  The factor starts at ``step``
    and its excess over 1 doubles at every step (a good hint gives a tight bracket, a poor one
    is still found in a few steps); where ``f`` stops being finite (a branch ends between two
    points) the walk steps back to the geometric midpoint, up to four times.  Where ``f(a0)``
    is not finite, both sides are probed first.  Returned sorted (for :func:`find_root`)."""
    fa = f(a0) if start_value is None else start_value
    pts = [a0]
    if not math.isfinite(fa):
        for k in range(1, 8):
            for a in (a0 * step**k, a0 / step**k):
                if lo <= a <= hi:
                    v = f(a)
                    pts.append(a)
                    if math.isfinite(v):
                        a0, fa = a, v
                        break
            if math.isfinite(fa):
                break
        if not math.isfinite(fa):
            return sorted(pts)
    up = fa * sign_below > 0  # still below the root: walk up
    a = a0
    fac = step
    while True:
        prev = a
        a = a * fac if up else a / fac
        fac = min(1.0 + 2.0 * (fac - 1.0), 2.0)
        edge = not lo < a < hi
        a = min(max(a, lo), hi)  # the interval's edge is evaluated once
        if a in pts:
            break
        v = f(a)
        pts.append(a)
        for _ in range(4):
            if math.isfinite(v):
                break
            a = math.sqrt(prev * a)
            v = f(a)
            pts.append(a)
            fac = step
        if edge or not math.isfinite(v) or v * fa <= 0:
            break
    return sorted(pts)


@dataclass(frozen=True, kw_only=True)
class RootResult(Result):
    """A root of ``f``: ``root``, the ``bracket`` it was refined in, every evaluation
    ``values`` = [(x, f(x)), ...].  Status "max_iter" with ``root`` nan when no sign change was
    found (message says so) or Brent did not converge."""

    root: float = math.nan
    bracket: tuple = ()
    values: list = field(default_factory=list, repr=False)


def find_root(
    f: Callable[[float], float],
    grid: Sequence[float],
    *,
    xtol: float = 1e-6,
    rtol: float = 1e-8,
    maxiter: int = 60,
    which: str = "first",
) -> RootResult:
    """First (or ``which="last"``) sign change of ``f`` on ``grid``, refined by Brent
    (``scipy.optimize.brentq``)."""
    from scipy.optimize import brentq

    if which not in ("first", "last"):
        raise ValueError(f"which must be 'first' or 'last', got {which!r}")
    grid = np.sort(np.asarray(grid, dtype=float))
    vals = [(float(x), float(f(float(x)))) for x in grid]
    brackets = [
        (xa, xb, fa, fb)
        for (xa, fa), (xb, fb) in zip(vals[:-1], vals[1:])
        if math.isfinite(fa) and math.isfinite(fb) and fa * fb <= 0 and not (fa == 0 == fb)
    ]
    if not brackets:
        return RootResult(
            status="max_iter", message="no sign change on the grid; widen the range", values=vals
        )
    xa, xb, fa, fb = brackets[0] if which == "first" else brackets[-1]
    if fa == 0 or fb == 0:
        return RootResult(
            status="converged", root=xa if fa == 0 else xb, bracket=(xa, xb), values=vals
        )

    def g(x):
        v = float(f(x))
        vals.append((float(x), v))
        if not math.isfinite(v):
            raise FloatingPointError(f"the function is not finite at {x}")
        return v

    try:
        root, info = brentq(g, xa, xb, xtol=xtol, rtol=rtol, maxiter=maxiter, full_output=True)
    except (FloatingPointError, RuntimeError) as exc:
        return RootResult(status="max_iter", message=str(exc), bracket=(xa, xb), values=vals)
    msg = (
        "" if len(brackets) == 1 else f"{len(brackets)} sign changes on the grid; used the {which}"
    )
    return RootResult(
        status="converged" if info.converged else "max_iter",
        message=msg,
        root=float(root),
        bracket=(xa, xb),
        values=vals,
    )
