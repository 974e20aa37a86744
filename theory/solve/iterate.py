"""The iteration core: one loop for every fixed point and message-passing algorithm.

:func:`iterate` solves ``F(x) = x`` (or runs an algorithm for a fixed number of steps) for a
state ``x`` that is a dict of named order parameters -- floats or numpy arrays.  The loop is the
same for the replica state equations (``theory.attention.solver``, ``theory.attention.general``)
and for GAMP and its state evolution (``theory.attention.finite_d``); what differs is a
*strategy* that proposes the next point:

* :class:`Damped` -- ``x <- x + mixing (F(x) - x)`` (``mixing`` = weight of the new iterate);
* :class:`Anderson` -- the damped step accelerated by Anderson mixing (type II);
* :class:`QuasiNewton` -- Broyden's method on ``G(x) = F(x) - x`` with a finite-difference
  Jacobian, possibly taken from a cheaper map with the same fixed point.

The loop owns what every strategy shares (docs/solver.md §1): map failures (an exception or a
non-finite value) restore the last good state (``Damped`` / ``Anderson`` halve ``mixing``;
``QuasiNewton`` halves its step); convergence is judged on the UNDAMPED relative residual per
order parameter, ``max_k ||F(x)_k - x_k|| / max(||F(x)_k||, atol)`` (``keys`` restricts the order
parameters judged; ``residual`` replaces the measure); a value above ``bound`` is "diverged";
callbacks see every accepted point and may stop the loop; ``history`` has the one shape of
:class:`theory.results.Result`.  ``iterations`` counts evaluations of ``F`` (finite-difference
Jacobians included when they are taken from ``F``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from theory.results import Result

__all__ = [
    "MAP_FAILURES",
    "Anderson",
    "DecayStop",
    "Damped",
    "IterationResult",
    "Packing",
    "QuasiNewton",
    "Step",
    "damp",
    "iterate",
    "relative_residual",
]

#: exceptions of a map that count as a failed evaluation (not a bug): the loop restores
MAP_FAILURES = (FloatingPointError, ZeroDivisionError, ValueError, np.linalg.LinAlgError)


# --------------------------------------------------------------------------- the state


@dataclass(frozen=True)
class Packing:
    """How a state dict maps to one flat float vector (the strategies' working space).

    ``keys`` in order, each with its ``shape`` (``()`` for a float).  Scalars come back as
    Python floats, arrays as arrays of their shape.
    """

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, state: Mapping) -> Packing:
        keys = tuple(state)
        if not keys:
            raise ValueError("the state of an iteration needs at least one order parameter")
        return cls(keys, tuple(np.shape(state[k]) for k in keys))

    @property
    def slices(self) -> tuple[slice, ...]:
        out, i = [], 0
        for s in self.shapes:
            n = math.prod(s)
            out.append(slice(i, i + n))
            i += n
        return tuple(out)

    @property
    def size(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def pack(self, state: Mapping) -> np.ndarray:
        parts = []
        for k, s in zip(self.keys, self.shapes):
            v = np.asarray(state[k], dtype=float)
            if v.shape != s:
                raise ValueError(f"state entry {k!r} has shape {v.shape}, expected {s}")
            parts.append(v.ravel())
        return np.concatenate(parts)

    def unpack(self, v: np.ndarray) -> dict:
        out = {}
        for k, s, sl in zip(self.keys, self.shapes, self.slices):
            out[k] = float(v[sl][0]) if s == () else v[sl].reshape(s).copy()
        return out


def damp(x: np.ndarray, fx: np.ndarray, mixing: float) -> np.ndarray:
    """The damped step ``x + mixing (F(x) - x)``: the one damping formula of the package."""
    return x + mixing * (fx - x)


def _key_norms(v: np.ndarray, packing: Packing) -> np.ndarray:
    """Per order parameter: |v| for a scalar, the Euclidean (Frobenius) norm for an array."""
    return np.array(
        [
            abs(v[sl][0]) if s == () else float(np.linalg.norm(v[sl]))
            for s, sl in zip(packing.shapes, packing.slices)
        ]
    )


def relative_residual(
    x: np.ndarray,
    fx: np.ndarray,
    packing: Packing,
    atol: float = 1e-10,
    keys: Sequence[str] | None = None,
) -> float:
    """``max_k ||fx_k - x_k|| / max(||fx_k||, atol)`` over the order parameters ``keys``
    (default all): the undamped relative residual (docs/solver.md §1)."""
    dn = _key_norms(fx - x, packing)
    fn = _key_norms(fx, packing)
    r = dn / np.maximum(fn, atol)
    if keys is not None:
        r = r[[packing.keys.index(k) for k in keys]]
    return float(np.max(r))


@dataclass
class Step:
    """What a callback sees at every accepted point that has not converged."""

    iteration: int  # evaluations of F so far
    x: dict
    fx: dict
    residual: float
    aux: Any
    mixing: float | None
    packing: Packing = field(repr=False)

    def damped(self) -> dict:
        """The damped step from this point with the current mixing (as a state dict)."""
        p = self.packing
        return p.unpack(damp(p.pack(self.x), p.pack(self.fx), self.mixing))


@dataclass(frozen=True, kw_only=True)
class IterationResult(Result):
    """Outcome of :func:`iterate`: the last accepted point ``x``, its image ``fx`` (undamped),
    the ``residual`` there, ``iterations`` (evaluations of F), ``aux`` (what F returned beside
    the image, at ``x``), the final ``mixing`` and, for a converged quasi-Newton solve,
    ``jacobian`` = (J of the scaled G, scale)."""

    x: dict = field(default_factory=dict)
    fx: dict = field(default_factory=dict)
    iterations: int = 0
    residual: float = math.nan
    mixing: float | None = None
    aux: Any = field(default=None, repr=False, compare=False)
    jacobian: Any = field(default=None, repr=False, compare=False)

    def damped(self) -> dict:
        """The damped step from ``x`` with the final mixing (the next iterate of a damped run)."""
        p = Packing.of(self.x)
        return p.unpack(damp(p.pack(self.x), p.pack(self.fx), self.mixing))

    def to_dict(self, *, history: bool = False) -> dict:
        d = super().to_dict(history=history)
        d.pop("aux", None)
        d.pop("jacobian", None)
        return d


# --------------------------------------------------------------------------- the loop


class _Context:
    """The loop's bookkeeping, shared with the strategy: the map, the packing, the evaluation
    count, the tolerance and the last accepted point."""

    def __init__(self, F, packing, tol, atol):
        self.F, self.packing, self.tol, self.atol = F, packing, tol, atol
        self.evaluations = 0
        self.x = self.fx = self.aux = self.fd = None
        self.residual = math.inf
        self.message = ""

    def call(self, fn, v: np.ndarray, *, count: bool):
        """``fn`` at the packed point ``v``: (image vector, image dict, aux, error message);
        the image is None when the map failed.  ``count``: an evaluation of F."""
        if count:
            self.evaluations += 1
        try:
            fd, aux = fn(self.packing.unpack(v))
            fv = self.packing.pack(fd)
        except MAP_FAILURES as exc:
            return None, None, None, str(exc) or type(exc).__name__
        if not np.all(np.isfinite(fv)):
            return None, None, None, "non-finite map value"
        return fv, fd, aux, ""


class _GiveUp(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status, self.message = status, message


#: a strategy's answer after a rejected trial that reset it at the current point: the loop
#: re-examines that point (callbacks, budget) before asking for the next proposal
REVISIT = object()
#: a strategy's answer to a failed evaluation that it treats as a rejected trial
REJECTED = object()


class Strategy:
    """Base class of the proposal rules (docs/solver.md §2).

    ``start(ctx, x)`` once; ``observe(ctx, x, fx, res)`` after each finite evaluation (return
    False for a rejected trial); ``propose(ctx)`` after an accepted, unconverged point;
    ``retry(ctx)`` after a rejected trial (the next point, or :data:`REVISIT`);
    ``failed(ctx, x, error)`` after a map failure (the next point, or :data:`REJECTED`).  A
    strategy that cannot go on raises ``_GiveUp(status, message)``.
    """

    mixing: float | None = None

    def start(self, ctx, x):
        pass

    def observe(self, ctx, x, fx, res) -> bool:
        return True

    def propose(self, ctx) -> np.ndarray:
        raise NotImplementedError

    def retry(self, ctx):
        raise _GiveUp("nan", "rejected trial without a retry rule")

    def failed(self, ctx, x, error) -> np.ndarray:
        raise _GiveUp("nan", f"map failed: {error}")

    def jacobian(self):
        return None


#: an accepted point met this many times ends the loop (status "max_iter"): Anderson at a map
#: that is rough at its rounding level can lock into an exact cycle (a period-3 cycle for 250
#: evaluations at sigma = 0.7, docs/attention.md §6)
CYCLE_VISITS = 3


def iterate(
    F: Callable[[dict], tuple[dict, Any]],
    x0: Mapping,
    *,
    strategy: Strategy | None = None,
    tol: float = 1e-8,
    max_iter: int = 500,
    atol: float = 1e-10,
    keys: Sequence[str] | None = None,
    residual: Callable[[dict, dict], float] | None = None,
    bound: float | None = 1e8,
    callbacks: Sequence[Callable[[Step], Any]] = (),
    keep_history: bool = False,
    max_start_residual: float | None = None,
    max_time: float | None = None,
) -> IterationResult:
    """Iterate ``F`` from ``x0`` with ``strategy`` (default :class:`Damped`).

    Parameters
    ----------
    F : ``F(x) -> (F(x), aux)`` on state dicts with the keys and shapes of ``x0``; it may
        raise one of :data:`MAP_FAILURES` or return non-finite values (a failed evaluation).
    tol : convergence when the undamped relative residual (module docstring) is below it;
        ``tol = 0`` runs exactly ``max_iter`` evaluations (an algorithm, not a solve).
    max_iter : evaluations of ``F`` allowed (status "max_iter" when spent).
    keys, residual : the order parameters judged by the default residual, or another
        measure ``residual(x, fx) -> float`` (e.g. on rotation invariants).
    bound : ``|F(x)| > bound`` anywhere is "diverged" (None: no bound).
    callbacks : ``cb(step: Step)`` at every accepted, unconverged point; a non-empty string
        returned stops the loop with status "diverged" and that message, a tuple
        ``(status, message)`` with that status.
    keep_history : record ``iteration, <state>, residual, mixing`` at every accepted point.
    max_start_residual : give up at once (status "max_iter", one evaluation) when the start's
        residual exceeds it -- for a caller that has a more robust route for far starts.
    max_time : wall-clock seconds (``time.perf_counter``) from the call: once spent, the loop
        stops at the next point it examines with status "max_time", the message naming the
        bound, and the last accepted point kept in ``x``/``fx`` (None: no bound; a map
        evaluation under way is finished, so the overrun is at most one evaluation).
    """
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    if max_time is not None and not max_time >= 0:
        raise ValueError(f"max_time must be >= 0 seconds (or None), got {max_time!r}")
    deadline = None if max_time is None else time.perf_counter() + max_time
    packing = Packing.of(x0)
    strategy = Damped() if strategy is None else strategy
    ctx = _Context(F, packing, tol, atol)
    x = packing.pack(x0)
    strategy.start(ctx, x)
    hist = []
    visits: dict[bytes, int] = {}
    status, message = "max_iter", ""

    def measure(xv, fv):
        if residual is not None:
            return float(residual(packing.unpack(xv), packing.unpack(fv)))
        return relative_residual(xv, fv, packing, atol, keys)

    def spent():
        """(status, message) when the evaluation or time budget is spent, else None."""
        if ctx.evaluations >= max_iter:
            return "max_iter", f"no convergence in {max_iter} map evaluations"
        if deadline is not None and time.perf_counter() >= deadline:
            return "max_time", (
                f"max_time = {max_time:.4g} s exceeded after {ctx.evaluations} map evaluations"
            )
        return None

    def examine():
        """Checks at the accepted point in ctx: (status, message) to stop, or None."""
        step = Step(
            ctx.evaluations,
            packing.unpack(ctx.x),
            ctx.fd,
            ctx.residual,
            ctx.aux,
            strategy.mixing,
            packing,
        )
        for cb in callbacks:
            why = cb(step)
            if why:
                return why if isinstance(why, tuple) else ("diverged", str(why))
        return spent()

    try:
        while True:
            fv, fd, aux, err = ctx.call(F, x, count=True)
            if fv is None:
                nxt = strategy.failed(ctx, x, err)
                accepted = False
                if nxt is not REJECTED:
                    stop = spent()
                    if stop:
                        status, message = stop
                        if status == "max_iter":
                            message = ctx.message or f"map failed: {err}"
                        break
                    x = nxt
                    continue
            else:
                res = measure(x, fv)
                accepted = strategy.observe(ctx, x, fv, res)
            if not accepted:  # a rejected (or failed) trial of a line search
                stop = spent()
                if stop:
                    status, message = stop
                    break
                nxt = strategy.retry(ctx)
                if nxt is REVISIT:
                    stop = examine()
                    if stop:
                        status, message = stop
                        break
                    nxt = strategy.propose(ctx)
                x = nxt
                continue
            first = ctx.x is None
            ctx.x, ctx.fx, ctx.fd, ctx.aux, ctx.residual = x, fv, fd, aux, res
            if first and max_start_residual is not None and res > max_start_residual:
                status = "max_iter"
                message = (
                    f"the start is too far from a fixed point (residual {res:.1e} > "
                    f"{max_start_residual:g})"
                )
                break
            if keep_history:
                row = dict(packing.unpack(x), iteration=ctx.evaluations, residual=res)
                row["mixing"] = math.nan if strategy.mixing is None else strategy.mixing
                hist.append(row)
            if res < tol:
                status, message = "converged", ctx.message
                break
            visits[x.tobytes()] = n = visits.get(x.tobytes(), 0) + 1
            if n >= CYCLE_VISITS and tol > 0:  # a solve going round a cycle (an algorithm,
                # tol = 0, runs its max_iter steps even at its fixed point)
                status = "max_iter"
                message = (
                    f"the iteration cycles: it accepted the same point {n} times (residual "
                    f"{res:.1e}) in {ctx.evaluations} map evaluations"
                )
                break
            if bound is not None and np.any(np.abs(fv) > bound):
                status, message = "diverged", "order parameters diverged"
                break
            stop = examine()
            if stop:
                status, message = stop
                break
            x = strategy.propose(ctx)
    except _GiveUp as g:
        status, message = g.status, g.message
    if status == "max_iter" and ctx.message and ctx.message not in message:
        message = f"{message}; {ctx.message}" if message else ctx.message
    have = ctx.x is not None
    return IterationResult(
        status=status,
        message=message,
        x=packing.unpack(ctx.x if have else x),
        fx=ctx.fd if have else {},
        iterations=ctx.evaluations,
        residual=ctx.residual if have else math.nan,
        mixing=strategy.mixing,
        aux=ctx.aux,
        jacobian=strategy.jacobian() if status == "converged" else None,
        history=hist if keep_history else None,
        metadata=dict(strategy=type(strategy).__name__),
    )


# --------------------------------------------------------------------------- strategies


def _check_mixing(mixing):
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    return float(mixing)


class Damped(Strategy):
    """``x <- x + mixing (F(x) - x)``.

    ``adapt``: when the residual grows at 3 evaluations in a row, halve ``mixing``.  A failed
    evaluation restores the last good point and takes the damped step from it with half the
    mixing; below ``min_mixing`` the loop stops with status "nan" (``min_mixing = mixing``:
    no restore, e.g. for an algorithm whose map has memory).
    """

    def __init__(self, mixing: float = 0.5, *, adapt: bool = True, min_mixing: float = 1e-3):
        self.mixing = _check_mixing(mixing)
        self.adapt, self.min_mixing = adapt, float(min_mixing)

    def start(self, ctx, x):
        self.grow, self.prev = 0, math.inf
        self.good = None

    def propose(self, ctx):
        if self.adapt:
            self.grow = self.grow + 1 if ctx.residual > self.prev else 0
            if self.grow >= 3 and self.mixing / 2 >= self.min_mixing:
                self.mixing /= 2
                self.grow = 0
            self.prev = ctx.residual
        self.good = (ctx.x, ctx.fx)
        return damp(ctx.x, ctx.fx, self.mixing)

    def failed(self, ctx, x, error):
        if self.good is None:
            raise _GiveUp("nan", f"map failed at the start: {error}")
        if self.mixing / 2 < self.min_mixing:
            raise _GiveUp("nan", f"map failed: {error}")
        self.mixing /= 2
        return damp(*self.good, self.mixing)


class Anderson(Strategy):
    """Anderson-accelerated damped iteration (type II, ``depth`` previous residuals).

    Variables are scaled by ``max(||x_k||, ||F(x)_k||, floor)`` per order parameter (fixed at
    the first evaluation, so that differences stay consistent).  Acceleration starts once the
    residual is below ``start_below`` (``forget_above_start``: the memory is also emptied at
    every point above it); a candidate that moves an order parameter by more than ``max_step``
    (relative), flips the sign of an entry (``keep_signs``) or fails ``valid`` (e.g. a
    covariance that is not positive definite) is replaced by the damped step
    (``clear_on_reject``: and the memory is emptied).  When a residual is ten times the best one
    seen, the memory is emptied and, with ``restart_from_best``, the iteration restarts from the
    best point with a damped step (otherwise it goes on from the current one); a failed
    evaluation restarts from the best point with half the mixing (status "nan" below 1e-3).
    ``rcond``: the cut-off of the least-squares solve.
    """

    def __init__(
        self,
        mixing: float = 0.5,
        *,
        depth: int = 4,
        start_below: float = 0.05,
        max_step: float = 0.5,
        keep_signs: bool = True,
        valid: Callable[[dict], bool] | None = None,
        floor: float = 1e-10,
        restart_from_best: bool = True,
        clear_on_reject: bool = True,
        forget_above_start: bool = False,
        rcond: float | None = 1e-10,
    ):
        self.mixing = _check_mixing(mixing)
        self.depth, self.start_below, self.max_step = int(depth), start_below, max_step
        self.keep_signs, self.valid, self.floor = keep_signs, valid, floor
        self.restart_from_best, self.clear_on_reject = restart_from_best, clear_on_reject
        self.forget_above_start, self.rcond = forget_above_start, rcond

    def start(self, ctx, x):
        self.X, self.R = [], []
        self.best = None  # (res, x, fx)
        self.scale = None

    def observe(self, ctx, x, fx, res):
        if self.scale is None:
            pk = ctx.packing
            s = np.maximum(np.maximum(_key_norms(fx, pk), _key_norms(x, pk)), self.floor)
            self.scale = np.concatenate([np.full(math.prod(sh), v) for sh, v in zip(pk.shapes, s)])
        if self.best is None or res < self.best[0]:
            self.best = (res, x.copy(), fx.copy())
        return True

    def _restart(self):
        self.X.clear()
        self.R.clear()
        return damp(self.best[1], self.best[2], self.mixing)

    def propose(self, ctx):
        x, fx, res = ctx.x, ctx.fx, ctx.residual
        if res > 10 * self.best[0] and len(self.X) > 0:
            if self.restart_from_best:
                return self._restart()
            self.X.clear()
            self.R.clear()
        elif self.forget_above_start and res >= self.start_below:
            self.X.clear()
            self.R.clear()
        r = (fx - x) / self.scale
        self.X.append(x / self.scale)
        self.R.append(r.copy())
        if len(self.X) > self.depth + 1:
            self.X.pop(0)
            self.R.pop(0)
        damped = damp(x, fx, self.mixing)
        if len(self.X) < 2 or res >= self.start_below:
            return damped
        xs = x / self.scale
        dX = np.array([self.X[i + 1] - self.X[i] for i in range(len(self.X) - 1)]).T
        dR = np.array([self.R[i + 1] - self.R[i] for i in range(len(self.R) - 1)]).T
        gamma, *_ = np.linalg.lstsq(dR, r, rcond=self.rcond)
        x_new = (xs + self.mixing * r - (dX + self.mixing * dR) @ gamma) * self.scale
        pk = ctx.packing
        bad = not np.all(np.isfinite(x_new))
        if not bad and self.keep_signs:
            bad = bool(np.any(np.sign(x_new) != np.sign(damped)))
        if not bad:
            moved = _key_norms(x_new - x, pk)
            bad = bool(np.any(moved > self.max_step * np.maximum(_key_norms(x, pk), self.floor)))
        if not bad and self.valid is not None:
            bad = not self.valid(pk.unpack(x_new))
        if bad:
            if self.clear_on_reject:
                self.X.clear()
                self.R.clear()
            return damped
        return x_new

    def failed(self, ctx, x, error):
        if self.best is None:
            raise _GiveUp("nan", f"map failed at the start: {error}")
        if self.mixing / 2 < 1e-3:
            raise _GiveUp("nan", f"map failed: {error}")
        self.mixing /= 2
        return self._restart()


class QuasiNewton(Strategy):
    """Solve ``G(x) = F(x) - x = 0`` by a safeguarded Broyden (quasi-Newton) method.

    Variables are scaled by ``|x0|`` (fixed for the run).  The Jacobian of G comes from forward
    differences (relative step ``fd_step``) of ``jacobian_map`` (default ``F``): a cheaper map
    with the same fixed-point structure -- the same equations on a coarser quadrature rule --
    is enough (the iteration then converges linearly at the rate ``||J_c^-1 (J - J_c)||``, and
    Broyden's update after every step improves on it; docs/solver.md §2).  A step that moves a
    variable by more than ``max_step`` (relative) is shortened; a step that does not lower
    ``||G||`` (or fails) is halved, up to 4 times, then the Jacobian is recomputed at the
    current point (from ``jacobian_map``, then from ``F``; no descent even then: "max_iter").
    ``jacobian0`` = the ``jacobian`` of an earlier result (same keys): start from it.
    ``jacobian_base`` = ``(x_b, jacobian_map(x_b))``, a point near the start where the cheap
    map is already known (e.g. its own fixed point): the first Jacobian is taken there.
    """

    def __init__(
        self,
        *,
        jacobian_map: Callable[[dict], tuple[dict, Any]] | None = None,
        fd_step: float = 1e-4,
        max_step: float = 0.3,
        atol: float = 1e-10,
        jacobian0: tuple | None = None,
        jacobian_base: tuple[Mapping, Mapping] | None = None,
    ):
        self.cheap = jacobian_map
        self.fd_step, self.max_step, self.atol = fd_step, max_step, atol
        self.jacobian0, self.jacobian_base = jacobian0, jacobian_base

    def start(self, ctx, x):
        self.scale = np.maximum(np.abs(x), self.atol)
        self.J = None
        if self.jacobian0 is not None:
            J0, s0 = (np.asarray(a, dtype=float) for a in self.jacobian0)
            self.J = J0 * s0[:, None] / s0[None, :] / self.scale[:, None] * self.scale[None, :]
        self.fresh = "cheap" if self.cheap is not None else "F"
        self.g = None

    # -- Jacobians -------------------------------------------------------------------------
    def _fd(self, ctx, fn, xv, g0):
        """Jacobian of the scaled G by forward differences of ``fn`` (None if it failed)."""
        count = fn is None
        fn = ctx.F if fn is None else fn
        if g0 is None:
            f0, *_ = ctx.call(fn, xv, count=count)
            if f0 is None:
                return None
            g0 = (f0 - xv) / self.scale
        k = xv.size
        J = np.empty((k, k))
        for j in range(k):
            h = self.fd_step * self.scale[j]
            xp = xv.copy()
            xp[j] += h
            fp, *_ = ctx.call(fn, xp, count=count)
            if fp is None:  # one-sided the other way (domain edge)
                xp[j] -= 2 * h
                h = -h
                fp, *_ = ctx.call(fn, xp, count=count)
                if fp is None:
                    return None
            J[:, j] = ((fp - xp) / self.scale - g0) / (h / self.scale[j])
        return J

    def jacobian(self):
        return None if self.J is None else (self.J.copy(), self.scale.copy())

    # -- the strategy ----------------------------------------------------------------------
    def observe(self, ctx, x, fx, res):
        gn = (fx - x) / self.scale
        if self.g is None:  # the start
            self.g = gn
            return True
        s = self.dx / self.scale
        self.J = self.J + np.outer(gn - self.g - self.J @ s, s) / float(s @ s)  # "good" Broyden
        if float(np.linalg.norm(gn)) < self.norm_g or res < ctx.tol:
            self.g = gn
            self.fresh = ""
            return True
        return False

    def propose(self, ctx):
        x = ctx.x
        if self.J is None and self.jacobian_base is not None and self.cheap is not None:
            pk = ctx.packing
            xb, fb = pk.pack(self.jacobian_base[0]), pk.pack(self.jacobian_base[1])
            self.J = self._fd(ctx, self.cheap, xb, (fb - xb) / self.scale)
            self.jacobian_base = None
        if self.J is None:
            self.J = self._fd(ctx, self.cheap, x, self.g if self.cheap is None else None)
            if self.J is None:
                raise _GiveUp("nan", "the Jacobian's map failed near the start")
        try:
            dy = -np.linalg.solve(self.J, self.g)
        except np.linalg.LinAlgError:
            dy = -np.linalg.lstsq(self.J, self.g, rcond=None)[0]
        dx = dy * self.scale
        over = float(np.max(np.abs(dx) / (self.max_step * np.maximum(np.abs(x), self.atol))))
        if over > 1.0:
            dx /= over
        self.dx, self.trials, self.norm_g = dx, 1, float(np.linalg.norm(self.g))
        return x + dx

    def retry(self, ctx):
        if self.trials < 5:
            self.trials += 1
            self.dx = self.dx / 2
            return ctx.x + self.dx
        # no descent along the quasi-Newton direction: recompute the Jacobian here, from the
        # cheap map first, then (if that was already tried at this point) from F itself
        use_F = not (self.fresh == "" and self.cheap is not None)
        Jn = self._fd(ctx, None if use_F else self.cheap, ctx.x, self.g if use_F else None)
        if use_F:
            ctx.message = "Jacobian recomputed from the accurate map"
        if Jn is None:
            raise _GiveUp("nan", "map failed while recomputing the Jacobian")
        if self.fresh == "F" and use_F:
            raise _GiveUp("max_iter", "no descent even with a fresh Jacobian of the map")
        self.J = Jn
        self.fresh = "F" if use_F else "cheap"
        return REVISIT

    def failed(self, ctx, x, error):
        if self.g is None:
            raise _GiveUp("nan", f"map failed at the start: {error}")
        return REJECTED


# --------------------------------------------------------------------------- stop rules


class DecayStop:
    """Stop rule: a monitored order parameter decays to zero (e.g. a branch collapsing onto the
    trivial one, docs/solver.md §1).

    ``value(fx) -> float`` at every accepted point; stop when it is below ``threshold`` and has
    decreased at each of the last ``window`` points, or (``aitken``) when it is below 3
    ``threshold``, has decreased at each of the last ``2 window`` points and the Aitken
    extrapolation of that decay ends below ``threshold / 2``.  The instance keeps its trace:
    pass the same one to successive stages of a solve.
    """

    def __init__(
        self,
        value: Callable[[dict], float],
        threshold: float,
        label: str,
        *,
        window: int = 15,
        aitken: bool = True,
        floor: float | None = None,
    ):
        self.value, self.threshold, self.label = value, threshold, label
        self.window, self.aitken = int(window), aitken
        #: below this the order parameter is zero to rounding: stop whether or not it still
        #: decreases (where the map's eigenvalue along it is below -1, it flips sign about 0 at
        #: the 1e-11 level and never decreases monotonically)
        self.floor = threshold * 1e-6 if floor is None else float(floor)
        self.trace: list[float] = []

    def __call__(self, step: Step) -> str | None:
        v = self.value(step.fx)
        self.trace.append(v)
        w, thr = self.window, self.threshold
        if v < self.floor:
            return f"{self.label} (order parameter {v:.2e}: zero to rounding, below {self.floor:g})"
        last = self.trace[-(w + 1) :]
        if len(last) == w + 1 and v < thr and all(b < a for a, b in zip(last, last[1:])):
            return (
                f"{self.label} (order parameter {v:.2e} < {thr:g}, decreasing for {w} iterations)"
            )
        if not self.aitken:
            return None
        last = self.trace[-(2 * w + 1) :]
        if len(last) == 2 * w + 1 and v < 3 * thr and all(b < a for a, b in zip(last, last[1:])):
            a0, a1, a2 = last[0], last[w], last[2 * w]
            den = a0 + a2 - 2 * a1
            limit = (a0 * a2 - a1 * a1) / den if den > 0 else math.inf
            if limit < thr / 2:
                return (
                    f"{self.label} (order parameter {v:.2e}, decreasing for {2 * w} "
                    f"iterations towards {max(limit, 0):.1e})"
                )
        return None
