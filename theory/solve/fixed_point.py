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
    jacobian: object = None  # (J of the scaled G, scale) at the end (newton_iteration only)


def _relative_residual_array(fx, x, atol: float) -> float:
    """max_k |fx_k - x_k| / max(|fx_k|, atol) for numpy arrays (the array solvers)."""
    import numpy as np

    return float(np.max(np.abs(fx - x) / np.maximum(np.abs(fx), atol)))


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
    stop: Callable[[dict, int], str | None] | None = None,
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
                return FixedPointOutcome(
                    x, Fx or {}, "nan", it, math.nan, message or "non-finite iterate", hist, aux
                )
            mixing /= 2
            x = dict(last_good)
            continue
        res = relative_residual(x, Fx, atol)
        if keep_history:
            hist.append(dict(x, residual=res, mixing=mixing))
        if res < tol:
            return FixedPointOutcome(x, Fx, "converged", it, res, message, hist, aux)
        if any(abs(v) > bound for v in Fx.values()):
            return FixedPointOutcome(
                x, Fx, "diverged", it, res, "order parameters diverged", hist, aux
            )
        why = stop(Fx, it) if stop is not None else None
        if why:
            return FixedPointOutcome(x, Fx, "diverged", it, res, why, hist, aux)
        grow = grow + 1 if res > prev_res else 0
        if grow >= 3 and mixing / 2 >= min_mixing:
            mixing /= 2
            grow = 0
        prev_res = res
        last_good = dict(x)
        x = {k: (1 - mixing) * x[k] + mixing * Fx[k] for k in x}
    return FixedPointOutcome(
        x, Fx, "max_iter", it, res, message or f"no convergence in {max_iter} iterations", hist, aux
    )


def anderson_iteration(
    F: Callable[[dict], tuple[dict, object]],
    x0: dict,
    *,
    mixing: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 200,
    atol: float = 1e-10,
    depth: int = 4,
    bound: float = 1e8,
    keep_history: bool = True,
    start_below: float = 0.05,
    max_step: float = 0.5,
    stop: Callable[[dict, int], str | None] | None = None,
) -> FixedPointOutcome:
    """Anderson-accelerated damped iteration (type II, ``depth`` previous residuals).

    Same contract as :func:`damped_iteration` (``mixing`` = weight on the new iterate, status
    from the undamped relative residual).  Variables are scaled by max(|x|, atol) so that the
    least-squares step is well conditioned; when an accelerated step increases the residual
    tenfold over the best one seen, the history is cleared and the iteration restarts from the
    best point with a plain damped step.  Non-finite maps (or a ``ValueError`` from the map, e.g.
    an iterate outside the domain) restore the best point and halve the mixing.  Acceleration
    starts once the residual is below ``start_below``; an accelerated step that flips a sign or
    moves a variable by more than ``max_step`` (relative) is replaced by the damped step.
    """
    import numpy as np

    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    keys = list(x0)
    x = np.array([float(x0[k]) for k in keys])
    X, R = [], []
    hist = []
    best = None  # (res, x, Fx, aux)
    Fx, aux = None, None
    res = math.inf
    message = ""
    it = 0
    beta = mixing
    scale = None
    while it < max_iter:
        it += 1
        xd = dict(zip(keys, x))
        try:
            Fd, aux = F(xd)
            fx = np.array([float(Fd[k]) for k in keys])
            finite = bool(np.all(np.isfinite(fx)))
        except (FloatingPointError, ZeroDivisionError, ValueError) as exc:
            finite = False
            message = f"map failed: {exc}"
        if not finite:
            if best is None or beta / 2 < 1e-3:
                return FixedPointOutcome(
                    xd, {}, "nan", it, math.nan, message or "non-finite iterate", hist, aux
                )
            beta /= 2
            X.clear()
            R.clear()
            x = best[1] + beta * (best[2] - best[1])
            continue
        Fx = Fd
        if scale is None:  # fixed scaling for the whole run (keeps the differences consistent)
            scale = np.maximum(np.maximum(np.abs(fx), np.abs(x)), atol)
        r = (fx - x) / scale
        res = _relative_residual_array(fx, x, atol)
        if keep_history:
            hist.append(dict(xd, residual=res, mixing=beta))
        if best is None or res < best[0]:
            best = (res, x.copy(), fx.copy(), aux)
        if res < tol:
            return FixedPointOutcome(xd, Fd, "converged", it, res, message, hist, aux)
        if np.any(np.abs(fx) > bound):
            return FixedPointOutcome(
                xd, Fd, "diverged", it, res, "order parameters diverged", hist, aux
            )
        why = stop(Fd, it) if stop is not None else None
        if why:
            return FixedPointOutcome(xd, Fd, "diverged", it, res, why, hist, aux)
        if res > 10 * best[0] and len(X) > 0:
            X.clear()
            R.clear()
            x = best[1] + beta * (best[2] - best[1])
            continue
        X.append(x / scale)
        R.append(r.copy())
        if len(X) > depth + 1:
            X.pop(0)
            R.pop(0)
        xs = x / scale
        damped = x + beta * (fx - x)
        if len(X) >= 2 and res < start_below:
            dX = np.array([X[i + 1] - X[i] for i in range(len(X) - 1)]).T
            dR = np.array([R[i + 1] - R[i] for i in range(len(R) - 1)]).T
            gamma, *_ = np.linalg.lstsq(dR, r, rcond=1e-10)
            x_new = (xs + beta * r - (dX + beta * dR) @ gamma) * scale
            # safeguard: keep the sign of every variable and move at most max_step (relative)
            bad = np.any(np.sign(x_new) != np.sign(damped)) or np.any(
                np.abs(x_new - x) > max_step * np.maximum(np.abs(x), atol)
            )
            if bad:
                X.clear()
                R.clear()
                x_new = damped
        else:
            x_new = damped
        x = x_new
    return FixedPointOutcome(
        dict(zip(keys, x)),
        Fx or {},
        "max_iter",
        it,
        res,
        message or f"no convergence in {max_iter} iterations",
        hist,
        aux,
    )


def newton_iteration(
    F: Callable[[dict], tuple[dict, object]],
    x0: dict,
    *,
    jacobian_map: Callable[[dict], tuple[dict, object]] | None = None,
    tol: float = 1e-8,
    max_iter: int = 30,
    atol: float = 1e-10,
    fd_step: float = 1e-4,
    max_step: float = 0.3,
    keep_history: bool = True,
    stop: Callable[[dict, int], str | None] | None = None,
    jacobian0: tuple | None = None,
    jacobian_base: tuple[dict, dict] | None = None,
    max_start_residual: float | None = None,
) -> FixedPointOutcome:
    """Solve F(x) = x by a safeguarded Broyden (quasi-Newton) method.

    G(x) = F(x) - x is solved for in variables scaled by |x0| (fixed for the run).  The Jacobian
    of G comes from forward differences (relative step ``fd_step``) of ``jacobian_map``
    (default ``F``).  A cheaper map with the same fixed-point structure — the same equations on a
    coarser quadrature rule — is enough: the iteration then converges linearly at the rate
    ||J_cheap^-1 (J - J_cheap)|| (small when the two rules agree to a few digits), and Broyden's
    update of the Jacobian after every step improves on it.  A step that moves a variable by more
    than ``max_step`` (relative) or flips a sign is shortened; a step that does not lower
    ||G|| is halved (up to 4 times); if that fails the Jacobian is recomputed at the current
    point (from ``jacobian_map``, then from ``F`` itself).

    Same contract as :func:`damped_iteration`: status from the UNDAMPED relative residual
    max_k |F(x)_k - x_k| / max(|F(x)_k|, atol) < ``tol``; ``iterations`` counts evaluations of
    ``F`` (including the finite differences when the Jacobian is taken from ``F``).  Map failures
    (non-finite values, ``FloatingPointError``, ``ZeroDivisionError``, ``ValueError``) count as
    a failed step.  ``jacobian0`` = the ``jacobian`` of an earlier outcome (same keys): start
    from it instead of finite differences.  ``jacobian_base`` = (x_b, jacobian_map(x_b)), a point
    near ``x0`` where ``jacobian_map`` is already known (e.g. its own fixed point): the first
    Jacobian is taken there, which saves the base evaluation of the finite differences.
    ``max_start_residual``: give up at once (status "max_iter", one evaluation spent) when the
    start's residual exceeds it — for a caller that has a more robust method for far starts.
    """
    import numpy as np

    keys = list(x0)
    k = len(keys)
    x = np.array([float(x0[key]) for key in keys])
    scale = np.maximum(np.abs(x), atol)
    hist = []
    it = 0

    def call(fn, xv):
        try:
            Fd, aux = fn(dict(zip(keys, xv)))
            fx = np.array([float(Fd[key]) for key in keys])
        except (FloatingPointError, ZeroDivisionError, ValueError) as exc:
            return None, None, None, str(exc)
        if not np.all(np.isfinite(fx)):
            return None, None, None, "non-finite map value"
        return Fd, fx, aux, ""

    def fd_jacobian(fn, xv, g0):
        """Jacobian of the scaled G by forward differences; returns (J, number of calls)."""
        n = 0
        if g0 is None:
            _, f0, _, _ = call(fn, xv)
            n += 1
            if f0 is None:
                return None, n
            g0 = (f0 - xv) / scale
        J = np.empty((k, k))
        for j in range(k):
            h = fd_step * scale[j]
            xp = xv.copy()
            xp[j] += h
            _, fp, _, _ = call(fn, xp)
            n += 1
            if fp is None:  # one-sided the other way (domain edge)
                xp[j] -= 2 * h
                h = -h
                _, fp, _, _ = call(fn, xp)
                n += 1
                if fp is None:
                    return None, n
            J[:, j] = ((fp - xp) / scale - g0) / (h / scale[j])
        return J, n

    Fd, fx, aux, err = call(F, x)
    it += 1
    if fx is None:
        return FixedPointOutcome(
            dict(zip(keys, x)),
            {},
            "nan",
            it,
            math.nan,
            f"map failed at the start: {err}",
            hist,
            None,
        )
    g = (fx - x) / scale
    res = _relative_residual_array(fx, x, atol)
    if max_start_residual is not None and res > max_start_residual:
        return FixedPointOutcome(
            dict(zip(keys, x)),
            Fd,
            "max_iter",
            it,
            res,
            f"the start is too far from a fixed point (residual {res:.1e} > "
            f"{max_start_residual:g})",
            hist,
            aux,
        )
    cheap = jacobian_map if jacobian_map is not None else F
    J = None  # computed only once a step is needed (a start already converged costs one map)
    if jacobian0 is not None:
        J0, s0 = jacobian0
        J = (
            np.asarray(J0)
            * np.asarray(s0)[:, None]
            / np.asarray(s0)[None, :]
            / scale[:, None]
            * scale[None, :]
        )
    fresh = "cheap" if cheap is not F else "F"  # where the current J was last recomputed
    message = ""
    while True:
        if keep_history:
            hist.append(dict(zip(keys, x), residual=res))
        if res < tol:
            return FixedPointOutcome(
                dict(zip(keys, x)),
                Fd,
                "converged",
                it,
                res,
                message,
                hist,
                aux,
                None if J is None else (J.copy(), scale.copy()),
            )
        why = stop(Fd, it) if stop is not None else None
        if why:
            return FixedPointOutcome(dict(zip(keys, x)), Fd, "diverged", it, res, why, hist, aux)
        if it >= max_iter:
            return FixedPointOutcome(
                dict(zip(keys, x)),
                Fd,
                "max_iter",
                it,
                res,
                message or f"no convergence in {max_iter} map evaluations",
                hist,
                aux,
            )
        if J is None and jacobian_base is not None and cheap is not F:
            xb = np.array([float(jacobian_base[0][key]) for key in keys])
            fb = np.array([float(jacobian_base[1][key]) for key in keys])
            J, _ = fd_jacobian(cheap, xb, (fb - xb) / scale)
            jacobian_base = None
        if J is None:
            J, n = fd_jacobian(cheap, x, g if cheap is F else None)
            if cheap is F:
                it += n
            if J is None:
                return FixedPointOutcome(
                    dict(zip(keys, x)),
                    Fd,
                    "nan",
                    it,
                    res,
                    "the Jacobian's map failed near the start",
                    hist,
                    aux,
                )
        try:
            dy = -np.linalg.solve(J, g)
        except np.linalg.LinAlgError:
            dy = -np.linalg.lstsq(J, g, rcond=None)[0]
        dx = dy * scale
        lim = max_step * np.maximum(np.abs(x), atol)
        over = float(np.max(np.abs(dx) / lim))
        if over > 1.0:
            dx /= over
        norm_g = float(np.linalg.norm(g))
        accepted = False
        for _ in range(5):
            xn = x + dx
            Fn, fn, auxn, err = call(F, xn)
            it += 1
            if fn is not None:
                gn = (fn - xn) / scale
                s = dx / scale
                J = J + np.outer(gn - g - J @ s, s) / float(s @ s)  # Broyden ("good") update
                rn = _relative_residual_array(fn, xn, atol)
                if float(np.linalg.norm(gn)) < norm_g or rn < tol:
                    x, Fd, fx, aux, g, res = xn, Fn, fn, auxn, gn, rn
                    accepted = True
                    break
            if it >= max_iter:
                break
            dx = dx / 2
        if accepted:
            fresh = ""
            continue
        if it >= max_iter:
            continue
        # no descent along the quasi-Newton direction: recompute the Jacobian here, from the
        # cheap map first, then (if that was already tried at this point) from F itself
        use = cheap if fresh == "" and cheap is not F else F
        Jn, n = fd_jacobian(use, x, g if use is F else None)
        if use is F:
            it += n
            message = "Jacobian recomputed from the accurate map"
        if Jn is None:
            return FixedPointOutcome(
                dict(zip(keys, x)),
                Fd,
                "nan",
                it,
                res,
                "map failed while recomputing the Jacobian",
                hist,
                aux,
            )
        if fresh == "F" and use is F:
            return FixedPointOutcome(
                dict(zip(keys, x)),
                Fd,
                "max_iter",
                it,
                res,
                "no descent even with a fresh Jacobian of the map",
                hist,
                aux,
            )
        J = Jn
        fresh = "cheap" if use is not F else "F"
