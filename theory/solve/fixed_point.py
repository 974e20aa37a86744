"""Damped fixed-point iteration x ← (1 - mixing) x + mixing F(x), judged on the undamped residual.

Generic: the state is a dict of named floats; ``F`` maps it to a dict with the same keys (it may
raise ``FloatingPointError`` or return non-finite values, which triggers a restore-and-damp).
Convergence: max over keys of |F(x)_k - x_k| / max(|F(x)_k|, atol) < tol (relative, per order
parameter, on the UNDAMPED map).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class FixedPointOutcome:
    x: dict
    Fx: dict
    status: str  # "converged" | "max_iter" | "nan" | "diverged"
    iterations: int
    residual: float
    message: str = ""
    history: list = field(default_factory=list)
    aux: object = None


def relative_residual(x: dict, fx: dict, atol: float) -> float:
    r = 0.0
    for k in x:
        d = abs(fx[k] - x[k]) / max(abs(fx[k]), atol)
        r = max(r, d)
    return r


def damped_iteration(
    F: Callable[[dict], tuple[dict, object]],
    x0: dict,
    *,
    mixing: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 500,
    atol: float = 1e-10,
    min_mixing: float = 1e-3,
    bound: float = 1e8,
    keep_history: bool = True,
) -> FixedPointOutcome:
    """Iterate ``x ← (1 - mixing) x + mixing F(x)``.

    ``F(x)`` returns ``(Fx, aux)``.  On a non-finite value (or an exception
    ``FloatingPointError``/``ZeroDivisionError``) the last good state is restored and the mixing
    halved (down to ``min_mixing``, then status "nan").  When the residual grows for 3 steps in a
    row the mixing is halved as well.  |x_k| > ``bound`` → "diverged".

    ``accelerate``: every few steps an Aitken/secant-style extrapolation per component
    (componentwise Δ² on the damped sequence) is tried and kept only if it lowers the residual.
    """
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    x = dict(x0)
    hist = []
    last_good = None
    grow = 0
    prev_res = math.inf
    Fx, aux = None, None
    res = math.inf
    it = 0
    message = ""
    while it < max_iter:
        it += 1
        try:
            Fx, aux = F(x)
            finite = all(math.isfinite(v) for v in Fx.values())
        except (FloatingPointError, ZeroDivisionError) as exc:
            finite = False
            message = f"map failed: {exc}"
        if not finite:
            if last_good is None or mixing / 2 < min_mixing:
                return FixedPointOutcome(x, Fx or {}, "nan", it, math.nan,
                                         message or "non-finite iterate", hist, aux)
            mixing /= 2
            x = dict(last_good)
            continue
        res = relative_residual(x, Fx, atol)
        if keep_history:
            hist.append(dict(x, residual=res, mixing=mixing))
        if res < tol:
            return FixedPointOutcome(x, Fx, "converged", it, res, message, hist, aux)
        if any(abs(v) > bound for v in Fx.values()):
            return FixedPointOutcome(x, Fx, "diverged", it, res, "order parameters diverged",
                                     hist, aux)
        grow = grow + 1 if res > prev_res else 0
        if grow >= 3 and mixing / 2 >= min_mixing:
            mixing /= 2
            grow = 0
        prev_res = res
        last_good = dict(x)
        x = {k: (1 - mixing) * x[k] + mixing * Fx[k] for k in x}
    return FixedPointOutcome(x, Fx, "max_iter", it, res,
                             message or f"no convergence in {max_iter} iterations", hist, aux)
