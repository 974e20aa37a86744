"""Locate where a difference of two branch functions changes sign: bracket on a grid, then Brent.

``find_root(f, grid)`` evaluates ``f`` on ``grid`` (increasing), takes the first sign change
(skipping non-finite values) and refines it with ``scipy.optimize.brentq``.  ``f`` may return
``nan`` where a branch does not exist; such points never form a bracket.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class RootOutcome:
    root: float
    bracket: tuple
    status: str  # "converged" | "no_bracket" | "max_iter"
    values: list = field(default_factory=list)  # (x, f(x)) on the grid and during Brent
    message: str = ""


def find_root(
    f: Callable[[float], float],
    grid: Sequence[float],
    *,
    xtol: float = 1e-6,
    rtol: float = 1e-8,
    maxiter: int = 60,
    which: str = "first",
) -> RootOutcome:
    """First (or ``which="last"``) sign change of ``f`` on ``grid``, refined by Brent."""
    from scipy.optimize import brentq

    grid = np.sort(np.asarray(grid, dtype=float))
    vals = []
    for x in grid:
        v = float(f(float(x)))
        vals.append((float(x), v))
    brackets = []
    for (xa, fa), (xb, fb) in zip(vals[:-1], vals[1:]):
        if math.isfinite(fa) and math.isfinite(fb) and fa * fb <= 0 and not (fa == 0 == fb):
            brackets.append((xa, xb, fa, fb))
    if not brackets:
        return RootOutcome(
            math.nan, (), "no_bracket", vals, "no sign change on the grid; widen the range"
        )
    xa, xb, fa, fb = brackets[0] if which == "first" else brackets[-1]
    if fa == 0:
        return RootOutcome(xa, (xa, xb), "converged", vals)
    if fb == 0:
        return RootOutcome(xb, (xa, xb), "converged", vals)

    def g(x):
        v = float(f(x))
        vals.append((float(x), v))
        if not math.isfinite(v):
            raise FloatingPointError(f"the function is not finite at {x}")
        return v

    try:
        root, info = brentq(g, xa, xb, xtol=xtol, rtol=rtol, maxiter=maxiter, full_output=True)
    except (FloatingPointError, RuntimeError) as exc:
        return RootOutcome(math.nan, (xa, xb), "max_iter", vals, str(exc))
    status = "converged" if info.converged else "max_iter"
    msg = (
        ""
        if len(brackets) == 1
        else (f"{len(brackets)} sign changes on the grid; used the {which}")
    )
    return RootOutcome(float(root), (xa, xb), status, vals, msg)
