"""Full-batch minimisation of the empirical risk of the attention model at finite d.

Minimisers (``METHODS``): "nesterov" (default; accelerated gradient, backtracked Lipschitz
step, adaptive restart), "bb" (Barzilai-Borwein, non-monotone line search), "gd" (plain GD
with a fixed learning rate, the paper's protocol, slow: rate 1 - lr lam), "lbfgs" (scipy).
Every one reports "converged" only when the RMS gradient |grad L|/sqrt(d) is below ``tol``.
The instance, the risk and the reported fields: :mod:`theory.attention.finite_d.problem`.
Initialisations: "semantic" Q = Q*, "positional" Q = 1_d/sqrt(d) (``init_scale`` multiplies
it), "random" Q = 0.1 N(0, I_d); for a given ``seed`` the teacher, training set and test set are
the same whatever ``init``, so the inits of one seed can be compared (the empirical global
minimiser, docs/attention.md §8).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.finite_d.data import ERMData
from theory.attention.finite_d.problem import (
    FiniteDResult,
    Problem,
    evaluate,
    initial_weights,
    make_problem,
    risk,
)
from theory.attention.params import ERMParams, as_params

__all__ = [
    "METHODS",
    "ERMSimResult",
    "barzilai_borwein",
    "gradient_descent",
    "lbfgs",
    "nesterov",
    "simulate_gd",
]


@dataclass(frozen=True, kw_only=True)
class ERMSimResult(FiniteDResult):
    """One finite-d minimisation run (gradient descent and its accelerated variants, L-BFGS)."""

    method: str = "nesterov"


# --------------------------------------------------------------------------- minimisers
#
# Every minimiser: ``fn(Q0, data, lam, *, steps, tol, **kw) -> (Q, status, iterations,
# grad_rms, trace)``; status "converged" when the RMS gradient |grad L|/sqrt(d) < tol, else
# "max_iter" (or "nan" / "diverged"); trace rows (iteration, L/d, grad_rms), every
# ``record_every`` iterations and at the end.


class _Monitor:
    """Shared bookkeeping of the iterative minimisers: status, trace, divergence guard."""

    def __init__(self, d, tol, record_every, steps):
        self.d, self.tol, self.every, self.steps = d, tol, record_every, int(steps)
        self.trace, self.L0 = [], None
        self.status, self.grms = "max_iter", np.nan

    def stop(self, it, L, g) -> bool:
        """Record iterate ``it`` (risk ``L``, gradient ``g``); True when the loop must end."""
        self.grms = grms = float(np.linalg.norm(g) / np.sqrt(self.d))
        if not (np.isfinite(L) and np.isfinite(grms)):
            self.status = "nan"
        elif self.L0 is not None and L > 10 * self.L0 + 10 * self.d:
            self.status = "diverged"
        elif grms < self.tol:
            self.status = "converged"
        self.L0 = L if self.L0 is None else self.L0
        if it % self.every == 0 or self.status != "max_iter" or it == self.steps:
            self.trace.append((it, L / self.d, grms))
        return self.status != "max_iter" or it == self.steps

    def result(self, Q, it):
        return Q, self.status, it, self.grms, np.array(self.trace)


#: what every minimiser returns: (Q, status, iterations, RMS gradient, trace rows)
Minimisation = tuple[np.ndarray, str, int, float, np.ndarray]


def gradient_descent(
    Q0: np.ndarray | None,
    data: ERMData,
    lam: float,
    *,
    lr=0.15,
    steps=3000,
    tol=1e-6,
    record_every=50,
) -> Minimisation:
    """Plain full-batch GD ``Q <- Q - lr grad L(Q)`` (the paper's protocol).

    Its rate near a minimum is ``1 - lr mu`` with mu the smallest Hessian eigenvalue (>= lam
    = 0.01 at the reference values): thousands of steps at lr = 0.15.  Prefer "nesterov".
    """
    Q = np.array(Q0, dtype=float)
    mon = _Monitor(Q.shape[0], tol, record_every, steps)
    for it in range(int(steps) + 1):
        L, g = risk(Q, data, lam)
        if mon.stop(it, L, g):
            break
        Q -= lr * g
    return mon.result(Q, it)


def nesterov(
    Q0: np.ndarray | None,
    data: ERMData,
    lam: float,
    *,
    steps=3000,
    tol=1e-6,
    record_every=50,
    L0=1.0,
) -> Minimisation:
    """Nesterov's accelerated gradient with a backtracked Lipschitz estimate and adaptive restart.

    * step ``1/Lk`` at the extrapolated point ``y``; ``Lk`` is doubled until the sufficient
      decrease ``L(y - g/Lk) <= L(y) - |g|^2/(2 Lk)`` holds (the descent lemma, which any
      ``Lk`` >= the local Lipschitz constant of the gradient satisfies) and relaxed by 0.9 per
      iteration so it tracks the local curvature;
    * momentum ``(t_k - 1)/t_{k+1}`` (FISTA sequence), restarted (O'Donoghue & Candes 2015)
      when the step opposes the gradient, ``g(y).(x_new - x) > 0`` -- this keeps the method a
      descent-like method on the non-convex risk and gives the accelerated linear rate
      ~ ``1 - sqrt(mu/L)`` near a minimum instead of GD's ``1 - mu/L``.
    Each iteration costs one risk+gradient evaluation plus one per backtracking step.
    """
    x = np.array(Q0, dtype=float)
    d = x.shape[0]
    mon = _Monitor(d, tol, record_every, steps)
    y, t, Lk = x.copy(), 1.0, float(L0)
    Ly, gy = risk(y, data, lam)
    for it in range(int(steps) + 1):
        # convergence is judged at the extrapolated point, where the gradient is evaluated
        if mon.stop(it, Ly, gy):
            break
        g2 = gy @ gy
        while True:
            x_new = y - gy / Lk
            Lx, gx = risk(x_new, data, lam)
            if (np.isfinite(Lx) and Lx <= Ly - 0.5 * g2 / Lk * (1 - 1e-12)) or Lk > 1e12:
                break
            Lk *= 2.0
        if gy @ (x_new - x) > 0:  # adaptive restart
            t = 1.0
        t_new = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
        y = x_new + ((t - 1) / t_new) * (x_new - x)
        x, t = x_new, t_new
        Lk *= 0.9
        Ly, gy = risk(y, data, lam)
    if mon.status != "converged":  # report the last x (a descent point) if better than y
        Lx, gx = risk(x, data, lam)
        if np.linalg.norm(gx) < np.linalg.norm(gy):
            y, mon.grms = x, float(np.linalg.norm(gx) / np.sqrt(d))
    return mon.result(y, it)


def barzilai_borwein(
    Q0: np.ndarray | None,
    data: ERMData,
    lam: float,
    *,
    steps=3000,
    tol=1e-6,
    record_every=50,
    memory=10,
    lr0=0.1,
) -> Minimisation:
    """Barzilai-Borwein steps with the non-monotone line search of Grippo-Lampariello-Lucidi
    (Raydan 1997): step ``s.s / s.y`` (BB1, clipped to [1e-6, 1e6]); accept when
    ``L(Q - a g) <= max(last ``memory`` values) - 1e-4 a |g|^2``, else halve ``a``."""
    Q = np.array(Q0, dtype=float)
    mon = _Monitor(Q.shape[0], tol, record_every, steps)
    L, g = risk(Q, data, lam)
    hist = [L]
    a = float(lr0)
    for it in range(int(steps) + 1):
        if mon.stop(it, L, g):
            break
        ref, g2 = max(hist[-memory:]), g @ g
        while True:
            Qn = Q - a * g
            Ln, gn = risk(Qn, data, lam)
            if (np.isfinite(Ln) and Ln <= ref - 1e-4 * a * g2) or a < 1e-12:
                break
            a *= 0.5
        s, yv = Qn - Q, gn - g
        sy = s @ yv
        a = float(np.clip((s @ s) / sy, 1e-6, 1e6)) if sy > 0 else 1.0
        Q, L, g = Qn, Ln, gn
        hist.append(L)
    return mon.result(Q, it)


def lbfgs(
    Q0: np.ndarray | None, data: ERMData, lam: float, *, steps=3000, tol=1e-6, record_every=None
) -> Minimisation:
    """L-BFGS (scipy) on the same risk; a faster route to the local minimum of the basin."""
    from scipy.optimize import minimize

    d = Q0.shape[0]
    res = minimize(
        lambda Q: risk(Q, data, lam),
        np.array(Q0, float),
        jac=True,
        method="L-BFGS-B",
        options=dict(maxiter=int(steps), gtol=tol, ftol=0.0, maxcor=20),
    )
    L, g = risk(res.x, data, lam)
    grms = np.linalg.norm(g) / np.sqrt(d)
    status = "converged" if np.max(np.abs(g)) < tol or grms < tol else "max_iter"
    if not np.isfinite(L):
        status = "nan"
    return res.x, status, int(res.nit), grms, np.array([(res.nit, L / d, grms)])


#: ``method`` name -> minimiser; "nesterov" is the default (converges; see BENCHMARKS.md)
METHODS = {"nesterov": nesterov, "bb": barzilai_borwein, "gd": gradient_descent, "lbfgs": lbfgs}


def simulate_gd(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    d: int = 400,
    init: str = "semantic",
    seed: int = 0,
    *,
    lr: float = 0.15,
    steps: int = 3000,
    n_test: int = 10_000,
    tol: float = 1e-6,
    init_scale: float = 1.0,
    method: str = "nesterov",
    problem: Problem | None = None,
    Q0: np.ndarray | None = None,
) -> ERMSimResult:
    """Minimise the empirical risk from ``init`` at dimension ``d``; one seed.

    Parameters
    ----------
    alpha, params, d : sample ratio (n = round(alpha d)), the model's
        :class:`~theory.attention.params.ERMParams` (ω, σ, λ, A: the theory's object), token
        dimension.
    init : "semantic" (Q = Q*), "positional" (Q = init_scale 1_d/sqrt(d)), "random" (0.1 N(0,1)).
    seed : fixes teacher, data and test set (independent of ``init``); recorded in the result.
    steps, tol : maximal number of iterations; stop when the RMS gradient
        ``|grad L|/sqrt(d) < tol`` (status "converged", else "max_iter").
    lr : learning rate of plain GD (method "gd" only).
    n_test : fresh samples for ``eps_g``.
    method : "nesterov" (default), "bb", "gd", "lbfgs" (module docstring); all four minimise
        the same risk and land on the local minimiser of the basin of ``init``.
    problem, Q0 : reuse an existing :class:`~theory.attention.finite_d.problem.Problem` (its
        params and seed are used) / start from explicit weights.
    """
    if problem is None:
        problem = make_problem(alpha, as_params(params), d, seed, n_test=n_test)
    p, seed = problem.params, problem.seed
    if lr <= 0 or not np.isfinite(lr):
        raise ValueError(f"the learning rate lr must be > 0, got {lr!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {tuple(METHODS)}, got {method!r}")
    if Q0 is None:
        Q0 = initial_weights(init, problem.teacher, seed, init_scale=init_scale)
    t0 = time.perf_counter()
    kw = dict(lr=lr) if method == "gd" else {}
    Q, status, its, _, trace = METHODS[method](Q0, problem.train, p.lam, steps=steps, tol=tol, **kw)
    fields = evaluate(Q, problem, init=init)
    wall = time.perf_counter() - t0
    msg = f"{method}: {status} after {its} iterations, RMS gradient {fields['grad_rms']:.2e}"
    return ERMSimResult(
        iterations=its,
        method=method,
        status=status,
        message=msg,
        history=dict(
            zip(("iteration", "eps_t", "grad_rms"), np.asarray(trace, float).reshape(-1, 3).T)
        ),
        params=dict(
            p.to_dict(),
            alpha=problem.alpha,
            d=problem.d,
            lr=lr,
            steps=steps,
            tol=tol,
            n_test=problem.n_test,
            init=init,
            seed=seed,
            init_scale=init_scale,
        ),
        metadata=dict(method=method, wall_time_s=wall, rho=problem.teacher.rho),
        **fields,
    )
