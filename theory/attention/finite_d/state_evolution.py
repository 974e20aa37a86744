"""The state evolution of damped GAMP, the one-time map of the overlaps, and the tracking of
GAMP by its state evolution (docs/attention.md §9).

Damped GAMP mixes VECTORS, ``Qhat_t = Qhat_{t-1} + mixing (Qnew_t - Qhat_{t-1})``, so
``q_t = sigma^2 |Qhat_t|^2/d`` contains the cross-overlap ``Qnew_t . Qhat_{t-1}``: the damped
one-time map of the overlaps (:func:`state_evolution_onetime`) is GAMP's state evolution only
for ``mixing = 1`` or at a fixed point.  :func:`state_evolution` is the two-time state
evolution (message correlations at different times), run, like GAMP itself, by the package's
iteration loop with the same damping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from theory.attention.channel import effective_channel
from theory.attention.finite_d.gamp import (
    DIVERGENCES,
    POSITIONAL_M0,
    initial_gamp_weights,
    run_gamp,
    stein_hats,
)
from theory.attention.finite_d.problem import Problem, make_problem
from theory.attention.params import SIGNS, ERMParams, as_params
from theory.attention.proximal import prox_rows
from theory.attention.quadrature import Rule, make_rule
from theory.attention.state_equations import (
    channel,
    guard_theta,
    hats_from_channel,
    overlaps_from_hats,
)
from theory.gauss import cov_root
from theory.results import Result
from theory.rng import RNGLike, as_rng
from theory.solve import Damped, iterate

__all__ = [
    "SEResult",
    "TrackingResult",
    "instance_gram",
    "large_d_gram",
    "state_evolution",
    "state_evolution_onetime",
    "tracking",
]


def instance_gram(problem: Problem, Q0: np.ndarray | None) -> np.ndarray:
    """Gram matrix ``G[i, j] = e_i . e_j / d`` of the basis ``(1_d, Q*, Q0)`` of one instance:
    the exact initial overlaps for :func:`state_evolution` (the "matching initialisation")."""
    E = np.stack([np.ones(problem.d), problem.teacher.qstar, np.asarray(Q0, float)])
    return E @ E.T / problem.d


def large_d_gram(
    init: str, *, sigma: float = 0.5, rho: float | None = None, m0: float = POSITIONAL_M0
) -> np.ndarray:
    """Gram of ``(1_d, Q*, Q0)`` as d -> infinity for GAMP's initialisations (rho = sigma^2):
    semantic Q0 = Q*, positional Q0 = m0 1_d (default 0.2), random Q0 = 0.1 N(0, I)."""
    r = (sigma**2 if rho is None else rho) / sigma**2  # |Q*|^2/d
    if init == "semantic":
        return np.array([[1, 0, 0], [0, r, r], [0, r, r]], float)
    if init == "positional":
        return np.array([[1, 0, m0], [0, r, 0], [m0, 0, m0 * m0]], float)
    if init == "random":
        return np.diag([1.0, r, 0.01])
    raise ValueError(f"init must be 'semantic', 'positional' or 'random', got {init!r}")


@dataclass(frozen=True, kw_only=True)
class SEResult(Result):
    """A state evolution: ``history`` = per-iteration arrays ``q, m, theta, V`` (index 0 = the
    initialisation, as in :class:`~theory.attention.finite_d.gamp.GAMPResult`) and, for the
    two-time one, ``Vhat, Vhat_stein, mhat, thetahat, qhat`` (index t = the t-th iteration's
    hats).  ``n_pop``: population size (0 for the one-time map, which is a quadrature)."""

    mixing: float
    n_pop: int = 0


def state_evolution(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    n_iter: int = 30,
    *,
    gram: np.ndarray,
    V0: float = 10.0,
    mixing: float = 0.3,
    n_pop: int = 100_000,
    rng: RNGLike = 0,
    divergence: str = "stein",
) -> SEResult:
    """State evolution of :func:`~theory.attention.finite_d.gamp.run_gamp` (effective channel,
    global prox), ANY ``mixing`` (docs/attention.md eq. 21).

    Every vector is a combination of the basis ``(1_d, Q*, Q0)`` (Gram ``gram``, e.g.
    :func:`instance_gram` or :func:`large_d_gram`; its (1, 1) entry sets the teacher norm
    ρ = σ² G_11) and of Gaussian noise vectors ``zeta_1, zeta_2, ...`` orthogonal to it with
    ``zeta_t . zeta_s / d = sigma^2 Chat_ts``, ``Chat_ts = alpha E[g_t . g_s]``.  Iteration t::

        b_t = mhat_t 1 + sigma^2 thetahat_t Q* + zeta_t + sigma^2 (Vhat_t - Vhat_t^true) Qhat_{t-1}
        (Qhat, V) <- damped (b_t / D_t, sigma^2 / D_t),   D_t = lam + sigma^2 Vhat_t

    where ``Vhat_t`` is what GAMP uses (``divergence``: "stein" = Vhat^true, also for GAMP's
    "fd", which estimates the same full divergence from the data; "jacobian" = the mean
    per-sample Jacobian; clipped at 0) and ``Vhat^true, thetahat`` are the coefficients of
    the backprojection's reaction along ``Qhat_{t-1}`` and ``Q*`` (:func:`stein_hats`).  The
    expectations are Monte Carlo over a population of ``n_pop`` samples (two tokens each)
    whose Gaussian coordinates are extended every iteration by exact conditional sampling
    (incremental QR of the message matrix).  Statistical error ~ 1/sqrt(n_pop) relative.
    """
    if not (0 < mixing <= 1):
        raise ValueError(f"mixing must lie in (0, 1], got {mixing!r}")
    if divergence == "fd":  # GAMP's "fd" estimates the full divergence: Stein's Vhat^true
        divergence = "stein"
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
    G = np.asarray(gram, float)
    if G.shape != (3, 3):
        raise ValueError(f"gram must be the 3x3 Gram matrix of (1, Q*, Q0), got {G.shape}")
    p = as_params(params)
    s2 = p.s2
    rho = s2 * G[1, 1]
    p = p.replace(rho=rho)
    rng = as_rng(rng)
    N, T = int(n_pop), int(n_iter)
    # Gaussian coordinates of the basis for every (sample, token): cov sigma^2 G
    Yb = rng.standard_normal((N, 2, 3)) @ cov_root(s2 * G).T
    hstar = Yb[:, :, 1]
    kappa, t1, t2 = effective_channel(hstar, p)
    # noise coordinates: Yz[:, :, r] = sum_k Lz[r, k] eps[:, :, k], Lz lower triangular
    eps = np.empty((N, 2, T))
    Yz = np.empty((N, 2, T))
    Lz = np.zeros((T, T))
    Qb = np.empty((2 * N, T))  # orthonormal basis of the message vectors g_1..g_t
    Cz = np.zeros((T, T))  # sigma^2 Chat (Gram of the zeta's)
    mem = dict(t=0)
    hist = {
        k: [] for k in ("q", "m", "theta", "V", "Vhat", "Vhat_stein", "mhat", "thetahat", "qhat")
    }

    def overl(u, k, t):
        Gu = G @ u
        return dict(q=s2 * (u @ Gu + k[:t] @ Cz[:t, :t] @ k[:t]), m=Gu[0], theta=s2 * Gu[1])

    def record(x, hats):
        o = overl(x["u"], x["k"], mem["t"])
        for key in ("q", "m", "theta"):
            hist[key].append(o[key])
        hist["V"].append(x["V"])
        for key in ("Vhat", "Vhat_stein", "mhat", "thetahat", "qhat"):
            hist[key].append(hats.get(key, np.nan))

    def F(x):
        # the state: Qhat = u . (1, Q*, Q0) + k . zeta, and V
        u, k, V, t = x["u"], x["k"], x["V"], mem["t"]
        o = overl(u, k, t)
        wc = Yb @ u + (Yz[:, :, :t] @ k[:t] if t else 0.0)  # centred fields (N, 2)
        w = wc + SIGNS * o["m"]
        px = prox_rows(w, V, kappa, t1, t2)
        g = (px.x - w) / V
        if not np.all(np.isfinite(g)):
            raise FloatingPointError("non-finite messages")
        mhat = alpha * np.mean((g * SIGNS).sum(-1))
        Vhat = -(alpha / V) * np.mean(np.trace(px.jac, axis1=1, axis2=2) - 2)
        Vhat_true, thetahat = stein_hats(wc, hstar, g, o["q"], o["theta"], rho, alpha, Vhat)
        if divergence == "stein":
            Vhat = Vhat_true
        # messages: extend the orthonormal basis (two Gram-Schmidt passes), new row of Lz
        gv = g.reshape(-1)
        c = Qb[:, :t].T @ gv
        r = gv - Qb[:, :t] @ c
        c2 = Qb[:, :t].T @ r
        r -= Qb[:, :t] @ c2
        c += c2
        nr = np.linalg.norm(r)
        Qb[:, t] = r / nr if nr > 1e-13 * np.linalg.norm(gv) else 0.0
        scale = s2 * np.sqrt(alpha / N)  # zeta coordinates: cov sigma^4 Chat = sigma^4 a/N g.g
        Lz[t, :t] = scale * c
        Lz[t, t] = scale * nr
        eps[:, :, t] = rng.standard_normal((N, 2))
        Yz[:, :, t] = eps[:, :, : t + 1] @ Lz[t, : t + 1]
        Cz[: t + 1, t] = Cz[t, : t + 1] = (Lz[: t + 1, : t + 1] @ Lz[t, : t + 1]) / s2
        mem["t"] = t + 1
        Vh = max(Vhat, 0.0)
        D = p.lam + s2 * Vh
        ub = np.array([mhat, s2 * thetahat, 0.0]) + s2 * (Vh - Vhat_true) * u
        kb = s2 * (Vh - Vhat_true) * k
        kb[t] += 1.0
        hats = dict(
            Vhat=Vhat,
            Vhat_stein=Vhat_true,
            mhat=mhat,
            thetahat=thetahat,
            qhat=alpha * np.mean((g * g).sum(-1)),
        )
        return dict(u=ub / D, k=kb / D, V=s2 / D), hats

    x0 = dict(u=np.array([0.0, 0.0, 1.0]), k=np.zeros(T), V=float(V0))
    record(x0, {})
    out = (
        iterate(
            F,
            x0,
            strategy=Damped(mixing, adapt=False, min_mixing=mixing),
            tol=0.0,
            max_iter=max(T, 1),
            bound=None,
            callbacks=[lambda step: record(step.damped(), step.aux)],
        )
        if T > 0
        else None
    )
    status = "nan" if out is not None and out.status == "nan" else "ok"
    return SEResult(
        n_pop=N,
        mixing=float(mixing),
        status=status,
        message=f"two-time state evolution, {len(hist['q']) - 1} iterations, population {N}",
        history={key: np.array(v) for key, v in hist.items()},
        params=dict(
            p.to_dict(),
            alpha=float(alpha),
            V0=V0,
            mixing=mixing,
            gram=G.tolist(),
            n_iter=T,
            divergence=divergence,
        ),
        metadata=dict(method="population Monte Carlo, incremental QR"),
    )


def state_evolution_onetime(
    state0: dict,
    alpha: float,
    params: ERMParams | Mapping | None = None,
    n_iter: int = 10,
    *,
    mixing: float = 1.0,
    rule: Rule | None = None,
) -> SEResult:
    """The damped one-time iteration of the state equations in the overlaps,
    ``(q, m, theta, V) <- (q, m, theta, V) + mixing (F(q, m, theta, V) - (q, m, theta, V))``,
    with the replica map of :mod:`theory.attention.state_equations` (split quadrature, no
    symmetry imposed, V̂ clipped at 0 as in GAMP).  GAMP's state evolution only for
    ``mixing = 1`` (or at a fixed point).  ``history``: per-iteration q, m, theta, V (index 0 =
    ``state0``)."""
    p = as_params(params)
    rule = make_rule("split") if rule is None else rule
    x0 = {key: float(state0[key]) for key in ("q", "m", "theta", "V")}
    hist = {key: [x0[key]] for key in x0}

    def F(x):
        th, _ = guard_theta(x["q"], x["theta"], p.rho)
        ch = channel(x["q"], x["m"], th, x["V"], p, rule, symmetry=False)
        h = hats_from_channel(alpha, x["q"], x["m"], th, x["V"], ch, p)
        return overlaps_from_hats(h["qhat"], h["mhat"], h["thetahat"], max(h["Vhat"], 0.0), p), h

    def record(step):
        for key, v in step.damped().items():
            hist[key].append(v)

    out = iterate(
        F,
        x0,
        strategy=Damped(mixing, adapt=False, min_mixing=mixing),
        tol=0.0,
        max_iter=max(int(n_iter), 1),
        bound=None,
        callbacks=[record],
    )
    return SEResult(
        mixing=float(mixing),
        status="nan" if out.status == "nan" else "ok",
        message=f"one-time map of the overlaps, {len(hist['q']) - 1} iterations",
        history={key: np.array(v) for key, v in hist.items()},
        params=dict(p.to_dict(), alpha=float(alpha), mixing=mixing, n_iter=int(n_iter)),
        metadata=dict(method="state equations, " + str(rule.describe())),
    )


@dataclass(frozen=True, kw_only=True)
class TrackingResult(Result):
    """GAMP on one instance against its two-time state evolution from the matching
    initialisation: both histories (``gamp``, ``se``: per-iteration q, m, theta, V, ...) and
    ``dev`` = {q, m, theta, V: max over iterations 1..n_iter of |GAMP - SE| (V relative)}."""

    gamp: dict = field(default_factory=dict, repr=False)
    se: dict = field(default_factory=dict, repr=False)
    dev: dict = field(default_factory=dict)


def tracking(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    d: int = 400,
    seed: int = 0,
    init: str = "semantic",
    *,
    n_iter: int = 30,
    mixing: float = 0.3,
    V0: float = 10.0,
    divergence: str = "jacobian",
    n_pop: int = 50_000,
    problem: Problem | None = None,
) -> TrackingResult:
    """GAMP (effective channel, global prox, ``n_iter`` iterations) on the instance of ``seed``
    and its two-time state evolution from that instance's Gram of ``(1, Q*, Q0)``; the SE
    population stream is derived from (seed, d)."""
    if problem is None:
        problem = make_problem(alpha, as_params(params), d, seed, n_test=2)
    r = run_gamp(
        alpha,
        problem=problem,
        init=init,
        mixing=mixing,
        max_iter=n_iter,
        tol=0.0,
        V0=V0,
        channel="effective",
        prox_mode="global",
        divergence=divergence,
        restarts=0,
    )
    G = instance_gram(problem, initial_gamp_weights(init, problem))
    se = state_evolution(
        alpha,
        problem.params,
        n_iter,
        gram=G,
        V0=V0,
        mixing=mixing,
        n_pop=n_pop,
        rng=np.random.SeedSequence([problem.seed, problem.d, 7]),
        divergence=divergence,
    )
    hg, hs = r.history, se.history
    t = min(len(hg["q"]), len(hs["q"]))
    dev = {k: float(np.max(np.abs(hg[k][1:t] - hs[k][1:t]))) for k in ("q", "m", "theta")}
    dev["V"] = float(np.max(np.abs(hg["V"][1:t] / hs["V"][1:t] - 1)))
    ok = r.status != "nan" and se.status == "ok"
    return TrackingResult(
        gamp=hg,
        se=hs,
        dev=dev,
        status="ok" if ok else "nan",
        message=f"GAMP {r.status}, state evolution {se.status}",
        params=dict(
            problem.params.to_dict(),
            alpha=problem.alpha,
            d=problem.d,
            seed=problem.seed,
            init=init,
            n_iter=n_iter,
            mixing=mixing,
            V0=V0,
            divergence=divergence,
            n_pop=n_pop,
        ),
        metadata=dict(gamp_status=r.status, se_status=se.status),
    )
