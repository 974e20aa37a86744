"""One finite-d instance of the attention model and what every finite-d run reports.

A :class:`Problem` is the teacher, the ``n = round(alpha d)`` training samples and the seed of
the test set, all drawn from one ``seed`` (independent ``SeedSequence`` streams: teacher,
training set, test set, initialisation), so that the runs of one seed (gradient descent,
GAMP, every initialisation) see the same data.  Normalisations:
:mod:`theory.attention.finite_d.data`.

    L(Q) = sum_mu |f_Q(X_mu) - y_mu|_F^2 / (2d) + (lam/2) |Q|^2          (docs/attention.md eq. 3)

Reported per run (:func:`evaluate`; the field names of the theory's result, so overlays are one
call): ``eps_t = L(Q)/d`` (ridge term included); ``eps_g`` = mean of ``|f_Q(X) - y(X)|^2/(2d)``
over ``n_test`` fresh samples with its standard error ``eps_g_err``; ``q = sigma^2|Q|^2/d``,
``m = |1^T Q|/d``, ``theta = sigma^2 |Q*^T Q|/d``, ``theta_over_sigma2 = |Q*^T Q|/d``,
``m_over_sigma2 = m/sigma^2`` (absolute values: Q -> -Q is a symmetry); ``grad_rms`` =
``|grad L|/sqrt(d)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention._kernels import risk_grad
from theory.attention.channel import sample_loss, sample_loss_grad
from theory.attention.finite_d.data import (
    ERMData,
    Teacher,
    check_dimension,
    make_teacher,
    naive_sample_losses,
    sample_data,
)
from theory.attention.params import ERMParams, as_params, check_alpha
from theory.results import Result

__all__ = [
    "INITS",
    "FiniteDResult",
    "Problem",
    "evaluate",
    "initial_weights",
    "make_problem",
    "naive_risk",
    "overlaps",
    "risk",
    "test_error",
]

INITS = ("semantic", "positional", "random")
TEST_CHUNK = 2000


@dataclass(frozen=True, kw_only=True)
class FiniteDResult(Result):
    """Fields shared by every finite-d run (GD, L-BFGS, GAMP): see the module docstring."""

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


@dataclass(frozen=True)
class Problem:
    """Teacher, training data, test data of one seed (shared by all inits and algorithms)."""

    params: ERMParams
    teacher: Teacher
    train: ERMData
    test_seed: np.random.SeedSequence
    n_test: int
    alpha: float
    seed: int

    @property
    def d(self) -> int:
        return self.teacher.d


def make_problem(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    d: int = 400,
    seed: int = 0,
    *,
    n_test: int = 10_000,
    keep_targets: bool = False,
) -> Problem:
    """Draw the teacher and ``n = round(alpha d)`` training samples from ``seed``."""
    p = as_params(params)
    alpha = check_alpha(alpha)
    d = check_dimension(d)
    n = max(1, int(round(alpha * d)))
    if int(n_test) < 2:
        raise ValueError(f"n_test must be >= 2 to estimate an error bar, got {n_test}")
    s_teacher, s_train, s_test, _ = np.random.SeedSequence(int(seed)).spawn(4)
    teacher = make_teacher(d, p, rng=np.random.default_rng(s_teacher))
    train = sample_data(teacher, n, np.random.default_rng(s_train), keep_targets=keep_targets)
    return Problem(
        params=p,
        teacher=teacher,
        train=train,
        test_seed=s_test,
        n_test=int(n_test),
        alpha=float(alpha),
        seed=int(seed),
    )


def init_rng(seed: int) -> np.random.Generator:
    """The initialisation stream of ``seed`` (the fourth of :func:`make_problem`'s streams)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(4)[3])


def initial_weights(
    init: str, teacher: Teacher, seed: int, *, init_scale: float = 1.0
) -> np.ndarray:
    """Initial ``Q`` (shape ``(d,)``): "semantic" Q = Q*, "positional" Q = 1_d/sqrt(d),
    "random" 0.1 N(0, I_d) (each times ``init_scale``; docs/attention.md §8)."""
    d = teacher.d
    if init == "semantic":
        return init_scale * teacher.qstar.copy()
    if init == "positional":
        return np.full(d, init_scale / np.sqrt(d))
    if init == "random":
        return 0.1 * init_scale * init_rng(seed).standard_normal(d)
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


def risk(
    Q: np.ndarray, data: ERMData, lam: float, *, channel: str = "exact", sigma: float = 0.5
) -> tuple[float, np.ndarray]:
    """``(L(Q), grad L(Q))``: empirical risk (ridge included) and its gradient, shape ``(d,)``
    (one numba pass over the tokens, :func:`theory.attention._kernels.risk_grad`; its numpy
    reference is :func:`risk_reference`)."""
    n = data.n
    kappa, t1, t2, c = (
        np.ascontiguousarray(np.broadcast_to(np.asarray(v, dtype=float), (n,)))
        for v in data.channel(channel, sigma)
    )
    X = np.ascontiguousarray(data.X, dtype=float)
    return risk_grad(X, np.ascontiguousarray(Q, dtype=float), kappa, t1, t2, c, float(lam))


def risk_reference(
    Q: np.ndarray, data: ERMData, lam: float, *, channel: str = "exact", sigma: float = 0.5
) -> tuple[float, np.ndarray]:
    """Numpy reference of :func:`risk`: the fields and the back-projection as two BLAS
    matrix-vector products with the (2n, d) token matrix, the loss gradient in between."""
    h = data.fields(Q)
    losses, gh = sample_loss_grad(h, *data.channel(channel, sigma))
    return losses.sum() + 0.5 * lam * (Q @ Q), data.backproject(gh) + lam * Q


def naive_risk(Q: np.ndarray, data: ERMData, lam: float) -> float:
    """Reference ``L(Q)`` from the full softmax and tokens (needs ``keep_targets=True`` data)."""
    return naive_sample_losses(Q, data).sum() + 0.5 * lam * (Q @ Q)


def overlaps(Q: np.ndarray, teacher: Teacher) -> dict:
    """``q, m, theta, theta_over_sigma2, m_over_sigma2`` of weights ``Q`` (module docstring)."""
    d, s2 = teacher.d, teacher.sigma**2
    m = abs(Q.sum()) / d
    tq = abs(teacher.qstar @ Q) / d
    return dict(q=s2 * (Q @ Q) / d, m=m, theta=s2 * tq, theta_over_sigma2=tq, m_over_sigma2=m / s2)


def test_error(Q: np.ndarray, problem: Problem, *, chunk: int = TEST_CHUNK) -> tuple[float, float]:
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


def evaluate(Q: np.ndarray, problem: Problem, *, init: str) -> dict:
    """The reported fields of a finite-d run at weights ``Q`` (module docstring) and the
    identifiers ``alpha, omega, d, n, seed, init``."""
    d = problem.d
    L, g = risk(Q, problem.train, problem.params.lam)
    eps_g, eps_g_err = test_error(Q, problem)
    return dict(
        alpha=problem.alpha,
        omega=problem.params.omega,
        d=d,
        n=problem.train.n,
        seed=problem.seed,
        init=init,
        eps_t=L / d,
        eps_g=eps_g,
        eps_g_err=eps_g_err,
        grad_rms=float(np.linalg.norm(g) / np.sqrt(d)),
        **overlaps(Q, problem.teacher),
    )
