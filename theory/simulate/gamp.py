"""GAMP for the positional-semantic attention model at finite d (spec §5b), and its state evolution.

Normalisations: :mod:`theory.simulate.erm_data` (fields ``h = X Q / sqrt(d)``,
``q = sigma^2|Q|^2/d``, ``m = 1^T Q / d``, ``theta = sigma^2 Q*^T Q / d``).

Algorithm (r = 1, L = 2; one iteration t, all samples at once)::

    w_mu   = X_mu Qhat / sqrt(d) - V g_mu^{prev}            (Onsager term; g^{prev}=0 at t=0)
    xhat_mu = argmin_x |x - w_mu|^2/(2V) + l_mu(x),  g_mu = (xhat_mu - w_mu)/V
    Vhat   = -(1/d) sum_mu tr(d g_mu / d w_mu),  d g/d w = ((I + V hess l_mu(xhat))^{-1} - I)/V
    b      = (1/sqrt(d)) sum_mu X_mu^T g_mu + sigma^2 Vhat Qhat
    Qhat  <- b / (lam + sigma^2 Vhat),  V <- sigma^2 / (lam + sigma^2 Vhat)

Damping (``mixing`` = weight of the new iterate): applied to Qhat, V AND the messages g (without
damping g, the Onsager term locks the iteration into 2-cycles at the large V ~ 10 of this
model); a fixed point of the damped iteration is one of the undamped one.

The channel ``l_mu``.  With finite-d data the per-sample loss is EXACTLY a function of the two
local fields, ``l_mu(h) = kappa_mu[(a(h) - a*_mu)^2 + (b(h) - b*_mu)^2] + c_mu`` with
``(kappa, a*, b*, c)`` computed from the sample (:mod:`theory.simulate.erm_data`).  The default
``channel="exact"`` uses it: a GAMP fixed point then satisfies ``lam Qhat = -grad sum_mu
l_mu(X_mu Qhat/sqrt(d))``, i.e. it is EXACTLY a stationary point of the empirical risk L(Q)
(for any V): the fixed point reached is at finite d what gradient descent converges to.
``channel="effective"`` uses the spec's large-d loss
``sigma^2[(a - T_11(h*))^2 + (b - T_22(h*))^2]`` with the teacher field
``h*_mu = Z_mu Q*/sqrt(d)`` (known to the simulator); its fixed points are stationary points
of L only up to O(1/d) per sample.  The two agree as d -> infinity
(``kappa -> sigma^2``, ``a* -> T_11``, ``b* -> T_22``, ``c -> 0``).

The proximal step is a 2-D non-convex problem solved for all samples at once
(:func:`prox`): safeguarded Newton (eigenvalue-shifted Hessian, Armijo backtracking) from
several starts (w, the zero-loss points, the best points of a grid over the disk
``|x - w| <= sqrt(2 V l(w))`` that must contain every global minimiser), keeping the lowest value.

:func:`state_evolution` iterates the replica state equations of spec §3 (undamped, Monte Carlo
average over ``n_mc`` draws of (xi, eta), the same prox) from the same initial overlaps: GAMP's
overlaps per iteration should follow it within finite-d fluctuations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory._util import as_rng
from theory.results import Result
from theory.simulate.erm_data import attention2, check_params, sample_loss_hess, sigmoid
from theory.simulate.erm_gd import initial_weights, make_problem, overlaps, risk, test_error

# --------------------------------------------------------------------------- the prox


def _phi(x, kappa, astar, bstar):
    a, b = attention2(x)
    return kappa * ((a - astar) ** 2 + (b - bstar) ** 2)


def _zero_loss_points(astar, bstar):
    """Points x with a(x) = a*, b(x) = b* (two, +-), or NaN where none exists."""
    eps = 1e-12
    u1 = np.log(np.clip(astar, eps, 1 - eps)) - np.log1p(-np.clip(astar, eps, 1 - eps))
    u2 = np.log(np.clip(bstar, eps, 1 - eps)) - np.log1p(-np.clip(bstar, eps, 1 - eps))
    s = u1 + u2  # = (x1 - x2)^2
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.where(s > 1e-10, np.sqrt(np.maximum(s, 0)), np.nan)
        x = np.stack([u1 / delta, -u2 / delta], axis=-1)
    return x


def _newton(x, w, V, kappa, astar, bstar, *, max_iter=100, gtol=1e-13):
    """Safeguarded Newton on f(x) = |x - w|^2/(2V) + phi(x) for rows of ``x`` (shape (N, 2)).

    Eigenvalue-shifted Hessian (smallest eigenvalue >= 1e-3/V), Armijo backtracking; only the
    rows not yet converged are processed.
    """
    x = x.copy()
    idx = np.arange(x.shape[0])
    steps = 0.5 ** np.arange(0, 40)
    for _ in range(max_iter):
        xa, wa, Va = x[idx], w[idx], V[idx]
        ka, aa, ba = kappa[idx], astar[idx], bstar[idx]
        g, H = sample_loss_hess(xa, ka, aa, ba)
        g += (xa - wa) / Va[:, None]
        H[:, 0, 0] += 1 / Va
        H[:, 1, 1] += 1 / Va
        gn = np.sqrt((g**2).sum(-1))
        active = gn > gtol * (1 + np.abs(xa).sum(-1)) / Va
        if not active.all():
            idx, xa, wa, Va, ka, aa, ba, g, H = (v[active] for v in (idx, xa, wa, Va, ka, aa,
                                                                    ba, g, H))
        if idx.size == 0:
            break
        tr = H[:, 0, 0] + H[:, 1, 1]
        det = H[:, 0, 0] * H[:, 1, 1] - H[:, 0, 1] ** 2
        lmin = 0.5 * tr - np.sqrt(np.maximum(0.25 * tr**2 - det, 0))
        shift = np.where(lmin < 1e-3 / Va, 1e-3 / Va - lmin, 0.0)
        H[:, 0, 0] += shift
        H[:, 1, 1] += shift
        det = H[:, 0, 0] * H[:, 1, 1] - H[:, 0, 1] ** 2
        p = np.empty_like(g)
        p[:, 0] = -(H[:, 1, 1] * g[:, 0] - H[:, 0, 1] * g[:, 1]) / det
        p[:, 1] = -(-H[:, 0, 1] * g[:, 0] + H[:, 0, 0] * g[:, 1]) / det
        f0 = ((xa - wa) ** 2).sum(-1) / (2 * Va) + _phi(xa, ka, aa, ba)
        slope = (g * p).sum(-1)  # < 0
        # the slack lets pure Newton steps through once rounding hides the decrease
        slack = 1e-14 * np.abs(f0)
        t = np.ones(idx.size)
        x1 = xa + p
        f1 = ((x1 - wa) ** 2).sum(-1) / (2 * Va) + _phi(x1, ka, aa, ba)
        bad = ~(f1 <= f0 + 1e-4 * slope + slack)
        if bad.any():  # Armijo backtracking for the rows where the full step fails
            xb, pb, wb, Vb = xa[bad], p[bad], wa[bad], Va[bad]
            xs = xb[None] + steps[1:, None, None] * pb[None]
            fs = ((xs - wb[None]) ** 2).sum(-1) / (2 * Vb[None]) + _phi(
                xs, ka[bad][None], aa[bad][None], ba[bad][None])
            ok = fs <= (f0[bad] + slack[bad])[None] + 1e-4 * steps[1:, None] * slope[bad][None]
            first = np.argmax(ok, axis=0)
            tb = np.where(ok.any(axis=0), steps[1:][first],
                          np.where(shift[bad] == 0, 1.0, 0.0))
            t[bad] = tb
        x[idx] = xa + t[:, None] * p
    return x


@dataclass(frozen=True)
class Prox:
    """Prox of every sample: ``x`` (n, 2), ``jac`` = d x / d w (n, 2, 2), ``value`` (n,)."""

    x: np.ndarray
    jac: np.ndarray
    value: np.ndarray


def prox(w, V, kappa, astar, bstar, *, n_grid=11, x_start=None) -> Prox:
    """Global minimiser of ``|x - w|^2/(2V) + kappa[(a(x) - a*)^2 + (b(x) - b*)^2]`` per row.

    ``w`` shape ``(n, 2)``; ``V`` scalar or ``(n,)``; ``kappa, astar, bstar`` shape ``(n,)``.
    With ``x_start`` (shape ``(n, 2)``) only a local Newton solve from there is done (the
    local minimiser of the basin of ``x_start``: "warm" prox).
    """
    w = np.asarray(w, float)
    n = w.shape[0]
    V = np.broadcast_to(np.asarray(V, float), (n,)).copy()
    kappa, astar, bstar = (np.broadcast_to(np.asarray(v, float), (n,)) for v in (kappa, astar,
                                                                                  bstar))
    if x_start is not None:
        x = _newton(np.asarray(x_start, float), w, V, kappa, astar, bstar)
        return _finish(x, w, V, kappa, astar, bstar)
    # starts: w, the two zero-loss points, the two best grid points of the disk of minimisers
    R = np.sqrt(2 * V * _phi(w, kappa, astar, bstar))
    u = np.linspace(-1, 1, n_grid)
    grid = np.stack(np.meshgrid(u, u, indexing="ij"), -1).reshape(-1, 2)
    grid = grid[(grid**2).sum(-1) <= 1 + 1e-9]
    pts = w[:, None, :] + R[:, None, None] * grid[None]  # (n, G, 2)
    fg = ((pts - w[:, None]) ** 2).sum(-1) / (2 * V[:, None]) + _phi(
        pts, kappa[:, None], astar[:, None], bstar[:, None])
    best2 = np.argsort(fg, axis=1)[:, :2]
    zl = _zero_loss_points(astar, bstar)
    zl = np.where(np.isfinite(zl), zl, w)
    starts = np.stack([w, zl, -zl, np.take_along_axis(pts, best2[:, 0, None, None], 1)[:, 0],
                       np.take_along_axis(pts, best2[:, 1, None, None], 1)[:, 0]], axis=1)
    S = starts.shape[1]
    rep = lambda v: np.repeat(v, S, axis=0)
    xs = _newton(starts.reshape(n * S, 2), rep(w), rep(V), rep(kappa), rep(astar),
                 rep(bstar)).reshape(n, S, 2)
    fs = ((xs - w[:, None]) ** 2).sum(-1) / (2 * V[:, None]) + _phi(
        xs, kappa[:, None], astar[:, None], bstar[:, None])
    k = np.argmin(fs, axis=1)
    return _finish(xs[np.arange(n), k], w, V, kappa, astar, bstar)


def _finish(x, w, V, kappa, astar, bstar) -> Prox:
    _, H = sample_loss_hess(x, kappa, astar, bstar)
    M = V[:, None, None] * H
    M[:, 0, 0] += 1
    M[:, 1, 1] += 1
    jac = np.linalg.inv(M)  # d xhat / d w = (I + V hess)^{-1}
    value = ((x - w) ** 2).sum(-1) / (2 * V) + _phi(x, kappa, astar, bstar)
    return Prox(x=x, jac=jac, value=value)


# --------------------------------------------------------------------------- GAMP

POSITIONAL_M0 = 0.2


@dataclass(frozen=True, kw_only=True)
class GAMPResult(Result):
    """GAMP at finite d.  ``history`` = dict of per-iteration arrays (q, m, theta, V, ...)."""

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
    V: float
    Vhat: float
    eps_t: float
    eps_g: float
    eps_g_err: float
    grad_rms: float
    iterations: int
    stability: float
    channel: str = "exact"


def run_gamp(alpha, omega, d, init="semantic", seed=0, *, sigma=0.5, lam=0.01, A=None,
             max_iter=400, mixing=0.3, tol=1e-6, V0=10.0, channel="exact", n_test=10_000,
             init_scale=None, problem=None, Q0=None, return_weights=False, prox_mode="auto",
             n_global=30):
    """Run GAMP on one seed's data (same teacher/data as :func:`simulate_gd` with that seed).

    ``mixing`` = weight of the new (Qhat, V) in the damped update; convergence when the
    undamped relative change of Qhat and of V are both below ``tol``.  Reported: overlaps of
    Qhat (absolute values of m, theta), V, Vhat, ``eps_t = L(Qhat)/d`` (the empirical risk at
    the GAMP estimate), ``eps_g`` on fresh samples, ``grad_rms = |grad L(Qhat)|/sqrt(d)``.
    With ``return_weights=True`` returns ``(result, Qhat)``.

    ``prox_mode``: "global" (global minimiser of every sample's prox, as in the state
    evolution), "warm" (Newton from the previous iterate's prox: the local minimiser, which
    keeps the map continuous), "auto" (global for the first ``n_global`` iterations, then warm).
    Where a sample's global prox minimiser jumps between basins the global map is
    discontinuous and GAMP can lock into a cycle; the warm prox removes it.  Any of them has
    the same fixed-point property (a stationary point of L with the exact channel).

    Initialisations ("near each branch"): "semantic" Qhat = Q* (theta = sigma^2, m ~ 0),
    "positional" Qhat = 0.2 1_d (m = 0.2, theta ~ 0; spec §4) unless ``init_scale`` is given
    (then Qhat = init_scale 1_d/sqrt(d) as for gradient descent), "random" 0.1 N(0, 1);
    ``V0`` the initial V.  At Qhat ~ 0 the local curvature is negative (Vhat < -lam/sigma^2):
    the update then uses Vhat = 0 (see above).
    """
    sigma, lam, A = check_params(alpha=alpha, omega=omega, d=d, sigma=sigma, lam=lam, A=A)
    if not (0 < mixing <= 1):
        raise ValueError(f"mixing must lie in (0, 1], got {mixing!r}")
    if problem is None:
        problem = make_problem(alpha, omega, d, seed, sigma=sigma, A=A, n_test=n_test)
    data, teacher = problem.train, problem.teacher
    d = problem.d
    s2 = sigma**2
    ch = data.channel(channel, sigma)
    if Q0 is not None:
        Q = np.array(Q0, float)
    elif init == "positional" and init_scale is None:
        Q = np.full(d, POSITIONAL_M0)  # m = 0.2, the spec's natural positional start (§4)
    else:
        Q = initial_weights(init, teacher, seed,
                            init_scale=1.0 if init_scale is None else init_scale)
    V = float(V0)
    g_prev = np.zeros((data.n, 2))
    x_prev = data.fields(Q)
    hist = {k: [] for k in ("q", "m", "theta", "V", "Vhat", "residual", "stability")}
    status, it, Vhat, stab, n_clipped = "max_iter", 0, np.nan, np.nan, 0

    def record(Q, V, Vhat, res, stab=np.nan):
        ov = overlaps(Q, teacher)
        hist["q"].append(ov["q"])
        hist["m"].append(Q.sum() / d)
        hist["theta"].append(s2 * (teacher.qstar @ Q) / d)
        hist["V"].append(V)
        hist["Vhat"].append(Vhat)
        hist["residual"].append(res)
        hist["stability"].append(stab)

    record(Q, V, np.nan, np.nan)
    for it in range(1, int(max_iter) + 1):
        w = data.fields(Q) - V * g_prev
        warm = prox_mode == "warm" or (prox_mode == "auto" and it > n_global)
        px = prox(w, V, *ch[:3], x_start=x_prev if warm else None)
        x_prev = px.x
        g = (px.x - w) / V
        if it > 1:  # damp the output messages too: removes the Onsager-driven 2-cycles
            g = mixing * g + (1 - mixing) * g_prev
        Vhat = -(np.trace(px.jac, axis1=1, axis2=2) - 2).sum() / (V * d)
        dg = (px.jac - np.eye(2)) / V  # d g / d w, (n, 2, 2)
        if not np.isfinite(Vhat):
            status = "nan"
            break
        # Non-convex loss: Vhat can turn negative far from a fixed point.  The update uses
        # max(Vhat, 0) (V <= sigma^2/lam); any Vhat used consistently in b and in the
        # denominator keeps the fixed-point property lam Qhat = -grad sum_mu l_mu.
        if Vhat < 0:
            n_clipped += 1
        Vh = max(Vhat, 0.0)
        b = data.backproject(g) + s2 * Vh * Q
        Q_new = b / (lam + s2 * Vh)
        V_new = s2 / (lam + s2 * Vh)
        # replicon (AT-type) stability of the fixed point: GAMP converges only if < 1
        stab = V_new**2 * (dg**2).sum() / d
        res = max(np.linalg.norm(Q_new - Q) / max(np.linalg.norm(Q), 1e-300),
                  abs(V_new - V) / V)
        Q = mixing * Q_new + (1 - mixing) * Q
        V = mixing * V_new + (1 - mixing) * V
        g_prev = g
        record(Q, V, Vhat, res, stab)
        if not np.all(np.isfinite(Q)):
            status = "nan"
            break
        if res < tol:
            status = "converged"
            break
    L, grad = risk(Q, data, lam)
    eps_g, eps_g_err = test_error(Q, problem)
    ov = overlaps(Q, teacher)
    out = GAMPResult(
        alpha=float(alpha), omega=float(omega), d=d, n=data.n, seed=int(seed), init=init,
        V=V, Vhat=float(Vhat), eps_t=L / d, eps_g=eps_g, eps_g_err=eps_g_err,
        grad_rms=np.linalg.norm(grad) / np.sqrt(d), iterations=it, channel=channel,
        stability=float(stab),
        status=status, message=f"GAMP ({channel} channel): {status} after {it} iterations",
        history={k: np.array(v) for k, v in hist.items()},
        params=dict(alpha=float(alpha), omega=float(omega), d=d, sigma=sigma, lam=lam,
                    A=A.tolist(), init=init, seed=int(seed), mixing=mixing, tol=tol, V0=V0,
                    max_iter=max_iter, channel=channel, prox_mode=prox_mode, n_global=n_global),
        metadata=dict(method="gamp", n_vhat_clipped=n_clipped),
        **ov,
    )
    return (out, Q) if return_weights else out


# --------------------------------------------------------------------------- state evolution


@dataclass(frozen=True)
class SEState:
    q: float
    m: float
    theta: float
    V: float


def se_step(state: SEState, alpha, omega, *, sigma=0.5, lam=0.01, A=None, n_mc=100_000,
            rng=0, rho=None):
    """One undamped step of the spec §3 state equations, expectations by Monte Carlo.

    Returns ``(new_state, hats)``; ``hats = dict(qhat, mhat, thetahat, Vhat)`` (with standard
    errors ``*_err``).  ``rho`` defaults to sigma^2 (pass the finite-d ``sigma^2|Q*|^2/d`` to
    follow one GAMP instance).
    """
    sigma, lam, A = check_params(alpha=alpha, omega=omega, sigma=sigma, lam=lam, A=A)
    s2 = sigma**2
    rho = s2 if rho is None else float(rho)
    q, m, th, V = state.q, state.m, state.theta, state.V
    rng = as_rng(rng)
    # antithetic symmetrisation: (xi, eta), (xi, -eta) and the token swap of both, so that
    # thetahat = 0 exactly at theta = 0 (T is even in h*) and mhat = 0 exactly at m = 0
    k = max(1, int(n_mc) // 4)
    xi = rng.standard_normal((k, 2))
    eta = rng.standard_normal((k, 2))
    xi = np.concatenate([xi, xi, xi[:, ::-1], xi[:, ::-1]])
    eta = np.concatenate([eta, -eta, eta[:, ::-1], -eta[:, ::-1]])
    n_mc = 4 * k
    resid = rho - th**2 / q
    if resid < -1e-9 * rho:
        raise ValueError(f"rho - theta^2/q = {resid:.3g} must stay positive")
    # Q = Q* gives resid = 0; the antithetic pairs (eta, -eta) keep thetahat finite and
    # accurate as resid -> 0 (E[g eta] = O(sqrt(resid)))
    resid = max(resid, 1e-12 * rho)
    s = np.array([1.0, -1.0])
    w = np.sqrt(q) * xi + s * m
    hs = th / np.sqrt(q) * xi + np.sqrt(resid) * eta
    a_t, b_t = attention2(hs)
    t1 = (1 - omega) * a_t + omega * A[0, 0]
    t2 = (1 - omega) * b_t + omega * A[1, 1]
    px = prox(w, V, np.full(n_mc, s2), t1, t2)
    g = (px.x - w) / V

    def mean(v):  # standard error from the k independent groups of 4
        v = v.reshape(4, k).mean(0)
        return v.mean(), v.std(ddof=1) / np.sqrt(k)

    qhat = alpha * np.array(mean((g**2).sum(-1)))
    mhat = alpha * np.array(mean((s * g).sum(-1)))
    thhat = alpha * np.array(mean((g * eta).sum(-1))) / np.sqrt(resid)
    Vhat = -(alpha / np.sqrt(q)) * np.array(mean((g * xi).sum(-1)))
    Vhat[0] += th * thhat[0] / q
    D = lam + s2 * Vhat[0]
    new = SEState(q=s2 * (s2 * qhat[0] + mhat[0] ** 2 + s2 * rho * thhat[0] ** 2) / D**2,
                  m=mhat[0] / D, theta=s2 * rho * thhat[0] / D, V=s2 / D)
    hats = dict(qhat=qhat[0], mhat=mhat[0], thetahat=thhat[0], Vhat=Vhat[0],
                qhat_err=qhat[1], mhat_err=mhat[1], thetahat_err=thhat[1], Vhat_err=Vhat[1])
    return new, hats


def state_evolution(state0: SEState, alpha, omega, n_iter, **kw) -> dict:
    """``n_iter`` undamped steps of :func:`se_step`; returns per-iteration arrays."""
    out = {k: [getattr(state0, k)] for k in ("q", "m", "theta", "V")}
    st = state0
    seed = kw.pop("rng", 0)
    for t in range(int(n_iter)):
        st, _ = se_step(st, alpha, omega, rng=np.random.SeedSequence([int(seed), t]), **kw)
        for k in out:
            out[k].append(getattr(st, k))
    return {k: np.array(v) for k, v in out.items()}


__all__ = ["prox", "Prox", "run_gamp", "GAMPResult", "se_step", "state_evolution", "SEState",
           "sigmoid"]
