"""Full-batch gradient descent on the empirical risk of the positional-semantic model.

Spec: spec/positional-semantic.md §1 and §6.  Normalisations: see :mod:`theory.simulate.erm_data`.

    L(Q) = sum_mu |f_Q(X_mu) - y_mu|_F^2 / (2d) + (lam/2) |Q|^2,      n = round(alpha d)

Reported per run (same field names as the theory's result, so overlays are one call):

* ``eps_t = L(Q_final) / d`` (ridge term included);
* ``eps_g`` = mean of ``|f_Q(X) - y(X)|_F^2 / (2d)`` over ``n_test`` fresh samples (same
  teacher), with its standard error ``eps_g_err``;
* ``q = sigma^2 |Q|^2 / d``, ``m = |1^T Q| / d``, ``theta = sigma^2 |Q*^T Q| / d`` (the THEORY's
  normalisation of theta), ``theta_over_sigma2 = |Q*^T Q| / d`` and ``m_over_sigma2 = m/sigma^2``
  (the quantities spec §6 plots); absolute values because Q -> -Q is a symmetry.

The risk and its gradient are computed from the exact per-sample reduction of
:mod:`~theory.simulate.erm_data` (two BLAS matrix-vector products with the ``(2n, d)`` token
matrix per step); :func:`naive_risk` is the plain reference from the full softmax and tokens.

Initialisations (spec §6): ``"semantic"`` Q = Q*; ``"positional"`` Q = 1_d / sqrt(d) (the
positional direction; ``init_scale`` multiplies it); ``"random"`` Q = 0.1 N(0, I_d).
For a given ``seed`` the teacher, training set and test set are the same whatever ``init``,
so the inits of one seed can be compared (the empirical global minimiser, spec §6).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from theory.results import Result
from theory.simulate.erm_data import (
    ERMData,
    Teacher,
    check_params,
    make_teacher,
    naive_sample_losses,
    sample_data,
    sample_loss,
    sample_loss_grad,
)

INITS = ("semantic", "positional", "random")
TEST_CHUNK = 2000


@dataclass(frozen=True, kw_only=True)
class ERMSimResult(Result):
    """One finite-d run (gradient descent).  Fields: see the module docstring."""

    alpha: float
    omega: float
    d: int
    n: int
    seed: int
    init: str
    q: float
    m: float
    theta: float
    theta_over_sigma2: float
    m_over_sigma2: float
    eps_t: float
    eps_g: float
    eps_g_err: float
    grad_rms: float
    iterations: int
    method: str = "gd"


@dataclass(frozen=True)
class Problem:
    """Teacher, training data, test data of one seed (shared by all inits and algorithms)."""

    teacher: Teacher
    train: ERMData
    test_seed: np.random.SeedSequence
    n_test: int
    alpha: float
    seed: int

    @property
    def d(self) -> int:
        return self.teacher.d


def make_problem(alpha, omega, d, seed=0, *, sigma=0.5, A=None, n_test=10_000,
                 keep_targets=False) -> Problem:
    """Draw the teacher and ``n = round(alpha d)`` training samples from ``seed``.

    Independent streams (``SeedSequence(seed).spawn``): teacher, training set, test set, init.
    """
    sigma, _, A = check_params(alpha=alpha, omega=omega, d=d, sigma=sigma, A=A)
    d = int(d)
    n = max(1, int(round(alpha * d)))
    if int(n_test) < 2:
        raise ValueError(f"n_test must be >= 2 to estimate an error bar, got {n_test}")
    ss = np.random.SeedSequence(int(seed))
    s_teacher, s_train, s_test, _ = ss.spawn(4)
    teacher = make_teacher(d, omega, sigma=sigma, A=A, rng=np.random.default_rng(s_teacher))
    train = sample_data(teacher, n, np.random.default_rng(s_train), keep_targets=keep_targets)
    return Problem(teacher=teacher, train=train, test_seed=s_test, n_test=int(n_test),
                   alpha=float(alpha), seed=int(seed))


def init_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(4)[3])


def initial_weights(init: str, teacher: Teacher, seed: int, *, init_scale: float = 1.0):
    """Initial ``Q`` (shape ``(d,)``) for ``init`` in {"semantic", "positional", "random"}."""
    d = teacher.d
    if init == "semantic":
        return init_scale * teacher.qstar.copy()
    if init == "positional":
        return np.full(d, init_scale / np.sqrt(d))
    if init == "random":
        return 0.1 * init_scale * init_rng(seed).standard_normal(d)
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


def risk(Q, data: ERMData, lam: float, *, channel="exact", sigma=0.5):
    """``(L(Q), grad L(Q))``: empirical risk (ridge included) and its gradient, shape ``(d,)``."""
    h = data.fields(Q)
    ch = data.channel(channel, sigma)
    losses, gh = sample_loss_grad(h, *ch)
    return losses.sum() + 0.5 * lam * (Q @ Q), data.backproject(gh) + lam * Q


def naive_risk(Q, data: ERMData, lam: float) -> float:
    """Reference ``L(Q)`` from the full softmax and tokens (needs ``keep_targets=True`` data)."""
    return naive_sample_losses(Q, data).sum() + 0.5 * lam * (Q @ Q)


def overlaps(Q, teacher: Teacher) -> dict:
    d, s2 = teacher.d, teacher.sigma**2
    m = abs(Q.sum()) / d
    tq = abs(teacher.qstar @ Q) / d
    return dict(q=s2 * (Q @ Q) / d, m=m, theta=s2 * tq, theta_over_sigma2=tq,
                m_over_sigma2=m / s2)


def test_error(Q, problem: Problem, *, chunk: int = TEST_CHUNK) -> tuple[float, float]:
    """``eps_g`` and its standard error on ``problem.n_test`` fresh samples (drawn in chunks)."""
    rng = np.random.default_rng(problem.test_seed)
    tot, tot2, k = 0.0, 0.0, 0
    while k < problem.n_test:
        nb = min(chunk, problem.n_test - k)
        data = sample_data(problem.teacher, nb, rng)
        ls = sample_loss(data.fields(Q), data.kappa, data.astar, data.bstar, data.c)
        tot += ls.sum()
        tot2 += (ls**2).sum()
        k += nb
    mean = tot / k
    var = max(tot2 / k - mean**2, 0.0) * k / (k - 1)
    return mean, np.sqrt(var / k)


def gradient_descent(Q0, data: ERMData, lam: float, *, lr=0.15, steps=3000, tol=1e-6,
                     record_every=50):
    """Plain full-batch GD ``Q <- Q - lr grad L(Q)``.

    Stops when the RMS gradient ``|grad L| / sqrt(d)`` falls below ``tol``.  Returns
    ``(Q, status, iterations, grad_rms, trace)``; trace rows ``(iteration, L/d, grad_rms)``.
    """
    Q = np.array(Q0, dtype=float)
    d = Q.shape[0]
    trace = []
    status = "max_iter"
    it = 0
    L0 = None
    for it in range(int(steps) + 1):
        L, g = risk(Q, data, lam)
        grms = np.linalg.norm(g) / np.sqrt(d)
        if not np.isfinite(L) or not np.isfinite(grms):
            status = "nan"
            break
        if L0 is None:
            L0 = L
        elif L > 10 * L0 + 10 * d:
            status = "diverged"
            break
        if it % record_every == 0:
            trace.append((it, L / d, grms))
        if grms < tol:
            status = "converged"
            break
        if it == steps:
            break
        Q -= lr * g
    trace.append((it, L / d, grms))
    return Q, status, it, grms, np.array(trace)


def lbfgs(Q0, data: ERMData, lam: float, *, steps=3000, tol=1e-6):
    """L-BFGS (scipy) on the same risk; a faster route to the local minimum of the basin."""
    from scipy.optimize import minimize

    d = Q0.shape[0]
    res = minimize(lambda Q: risk(Q, data, lam), np.array(Q0, float), jac=True,
                   method="L-BFGS-B",
                   options=dict(maxiter=int(steps), gtol=tol, ftol=0.0, maxcor=20))
    L, g = risk(res.x, data, lam)
    grms = np.linalg.norm(g) / np.sqrt(d)
    status = "converged" if np.max(np.abs(g)) < tol or grms < tol else "max_iter"
    if not np.isfinite(L):
        status = "nan"
    return res.x, status, int(res.nit), grms, np.array([(res.nit, L / d, grms)])


def simulate_gd(alpha, omega, d, init="semantic", seed=0, *, sigma=0.5, lam=0.01, A=None,
                lr=0.15, steps=3000, n_test=10_000, tol=1e-6, init_scale=1.0, method="gd",
                problem: Problem | None = None, Q0=None) -> ERMSimResult:
    """Minimise the empirical risk from ``init`` at dimension ``d``; one seed.

    Parameters
    ----------
    alpha, omega, d : sample ratio (n = round(alpha d)), teacher mixing, token dimension.
    init : "semantic" (Q = Q*), "positional" (Q = init_scale 1_d/sqrt(d)), "random" (0.1 N(0,1)).
    seed : int; fixes teacher, data and test set (independent of ``init``).
    sigma, lam, A : noise level, ridge, 2x2 symmetric row-stochastic positional matrix.
    lr, steps, tol : GD learning rate, maximal number of steps, stop when the RMS gradient
        ``|grad L|/sqrt(d) < tol`` (status "converged", else "max_iter").
    n_test : fresh samples for ``eps_g``.
    method : "gd" (spec §6 protocol) or "lbfgs" (scipy L-BFGS, same risk, faster).
    problem, Q0 : reuse an existing :class:`Problem` / start from explicit weights.
    """
    if problem is None:
        problem = make_problem(alpha, omega, d, seed, sigma=sigma, A=A, n_test=n_test)
    sigma, lam, A = check_params(alpha=alpha, omega=omega, d=d, sigma=sigma, lam=lam, A=A)
    if lr <= 0 or not np.isfinite(lr):
        raise ValueError(f"the learning rate lr must be > 0, got {lr!r}")
    if Q0 is None:
        Q0 = initial_weights(init, problem.teacher, seed, init_scale=init_scale)
    t0 = time.perf_counter()
    if method == "gd":
        Q, status, its, grms, trace = gradient_descent(Q0, problem.train, lam, lr=lr,
                                                       steps=steps, tol=tol)
    elif method == "lbfgs":
        Q, status, its, grms, trace = lbfgs(Q0, problem.train, lam, steps=steps, tol=tol)
    else:
        raise ValueError(f"method must be 'gd' or 'lbfgs', got {method!r}")
    L, _ = risk(Q, problem.train, lam)
    eps_g, eps_g_err = test_error(Q, problem)
    ov = overlaps(Q, problem.teacher)
    wall = time.perf_counter() - t0
    d = problem.d
    msg = f"{method}: {status} after {its} steps, RMS gradient {grms:.2e}"
    return ERMSimResult(
        alpha=float(alpha), omega=float(omega), d=d, n=problem.train.n, seed=int(seed),
        init=init, eps_t=L / d, eps_g=eps_g, eps_g_err=eps_g_err, grad_rms=grms,
        iterations=its, method=method, status=status, message=msg,
        history=dict(columns=["iteration", "eps_t", "grad_rms"], rows=trace.tolist()),
        params=dict(alpha=float(alpha), omega=float(omega), d=d, sigma=sigma, lam=lam,
                    A=A.tolist(), lr=lr, steps=steps, tol=tol, n_test=problem.n_test,
                    init=init, seed=int(seed), init_scale=init_scale),
        metadata=dict(method=method, wall_time_s=wall, rho=problem.teacher.rho),
        **ov,
    )
