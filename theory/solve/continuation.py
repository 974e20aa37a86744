"""Natural-parameter continuation: follow a solution branch over a grid of a control parameter.

``follow(solve, grid, init)`` calls ``solve(x, init)`` at every grid point in order, warm-starting
each solve from the previous solution (extrapolated from the last two or three when available),
so a branch can be followed past the point where a cold start would jump to another branch.
``sweep(solve, grid, init)`` does it forward (increasing) and backward (decreasing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def _extrapolate(prev: list, xs: list, x_new: float, keys: Sequence[str]) -> dict | None:
    if not prev:
        return None
    last = prev[-1]
    if len(prev) < 2:
        return {k: last[k] for k in keys}
    a, b = prev[-2], prev[-1]
    xa, xb = xs[-2], xs[-1]
    if xb == xa:
        return {k: b[k] for k in keys}
    # Lagrange weights through the last two (linear) or three (quadratic) points
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
        # never extrapolate through zero or to a sign change: fall back to the last value
        out[k] = v if (v > 0) == (b[k] > 0) and v != 0 else b[k]
    return out


def follow(
    solve: Callable[[float, dict | None], object],
    grid: Sequence[float],
    init: dict | None = None,
    *,
    keys: Sequence[str] = ("q", "m", "theta", "V"),
    accept: Callable[[object], bool] | None = None,
    extrapolate: bool = True,
    progress=None,
) -> list:
    """Solve along ``grid`` in the given order with warm starts.

    ``solve(x, init)`` returns a result object with the attributes named in ``keys``.
    ``accept(result)`` (default: ``result.converged``) decides whether a solution may seed the
    next one; a rejected solution is kept in the output but the next solve restarts from the
    last accepted one.
    """
    accept = accept or (lambda r: bool(getattr(r, "converged", True)))
    out = []
    good, good_x = [], []
    for x in grid:
        guess = (
            init
            if not good
            else (
                _extrapolate(good, good_x, x, keys)
                if extrapolate
                else {k: good[-1][k] for k in keys}
            )
        )
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
