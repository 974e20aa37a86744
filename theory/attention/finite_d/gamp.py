"""GAMP for the positional-semantic attention model at finite d (spec §5b), and its state evolution.

Normalisations: :mod:`theory.attention.finite_d.data` (fields ``h = X Q / sqrt(d)``,
``q = sigma^2|Q|^2/d``, ``m = 1^T Q / d``, ``theta = sigma^2 Q*^T Q / d``).

Algorithm (r = 1, L = 2; one iteration t, all samples at once; ``mixing`` = mu)::

    w_t     = X Qhat_{t-1} / sqrt(d) - O_{t-1}                       (O_0 = 0)
    xhat_mu = argmin_x |x - w_mu|^2/(2V) + l_mu(x),  g_t = (xhat - w_t)/V   (V = V_{t-1})
    Vhat    = -(1/d) sum_mu tr(d g_mu / d w_mu),  d g/d w = ((I + V hess l_mu(xhat))^{-1} - I)/V
    D       = lam + sigma^2 Vhat,  Qnew = (X^T g_t / sqrt(d) + sigma^2 Vhat Qhat_{t-1}) / D
    Qhat_t  = mu Qnew + (1 - mu) Qhat_{t-1},  O_t = mu (sigma^2/D) g_t + (1 - mu) O_{t-1},
    V_t     = mu sigma^2/D + (1 - mu) V_{t-1}

Why the damping acts on the Onsager term O and not on the messages g.  The undamped map is
unstable at the reference parameters (semantic branch, alpha = 2: the m-direction of the state
evolution has multiplier ~ -2, the (q, theta, V) oscillation ~ -0.96), so damping is needed.
``Qhat_t`` is a combination of all earlier ``Qnew``; every ``Qnew_s`` needs its own Onsager
correction ``(sigma^2/D_s) g_s`` in the field, and ``O_t`` is exactly that combination.  The
result is an AMP iteration with memory whose state evolution is known (:func:`state_evolution`)
and whose fixed points are those of the undamped GAMP.  The state evolution of damped GAMP is
NOT the damped map of the overlaps: ``q_t = sigma^2|mu Qnew + (1-mu) Qhat_{t-1}|^2/d`` involves
the cross-overlap ``Qnew . Qhat_{t-1}``, hence the correlations ``E[g_t . g_s]`` of messages at
different times (a two-time state evolution).  The previous version damped g and compared
with the damped one-time map: they agreed for two undamped iterations only.

The channel ``l_mu``.  With finite-d data the per-sample loss is EXACTLY a function of the two
local fields, ``l_mu(h) = kappa_mu[(a(h) - a*_mu)^2 + (b(h) - b*_mu)^2] + c_mu`` with
``(kappa, a*, b*, c)`` computed from the sample
(:mod:`~theory.attention.finite_d.data`).  The default
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

:func:`state_evolution` is the two-time state evolution of damped GAMP (population Monte
Carlo; it reduces to the replica map of spec §3 for mixing = 1 and shares its fixed points);
:func:`state_evolution_onetime` is the damped one-time map of the overlaps built from E1's
public ``channel`` / ``hats_from_channel`` / ``overlaps_from_hats``; :func:`tracking` runs GAMP
and its state evolution from the matching initialisation.  Measured tracking and its d-scaling:
BENCHMARKS.md, "ERM (finite-d simulation)".

Divergence and the jumps of the prox.  The per-sample Jacobian misses the jump part of the
divergence of g where the global prox minimiser jumps between basins: 0.5 % of Vhat in size on
the semantic branch, -7.6 % on the positional branch (alpha = 2, omega = 0.3).
``divergence="fd"`` (:func:`fd_divergence`) estimates the full divergence from the data only,
by a central difference of the global prox map; ``"stein"`` is an oracle (teacher fields) kept
as a check; ``"jacobian"`` (the default, see :func:`run_gamp` for why) is the per-sample
Jacobian.  Bias, noise and the choice of the step: :func:`fd_divergence`, BENCHMARKS.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory.attention import model as ps
from theory.attention.finite_d.data import (
    CHANNELS,
    attention2,
    check_params,
    sample_loss_hess,
    sigmoid,
)
from theory.attention.finite_d.gd import FiniteDResult, evaluate, initial_weights, make_problem
from theory.gauss import cov_root
from theory.results import Result
from theory.rng import as_rng

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
            idx, xa, wa, Va, ka, aa, ba, g, H = (
                v[active] for v in (idx, xa, wa, Va, ka, aa, ba, g, H)
            )
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
                xs, ka[bad][None], aa[bad][None], ba[bad][None]
            )
            ok = fs <= (f0[bad] + slack[bad])[None] + 1e-4 * steps[1:, None] * slope[bad][None]
            first = np.argmax(ok, axis=0)
            tb = np.where(ok.any(axis=0), steps[1:][first], np.where(shift[bad] == 0, 1.0, 0.0))
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
    kappa, astar, bstar = (
        np.broadcast_to(np.asarray(v, float), (n,)) for v in (kappa, astar, bstar)
    )
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
        pts, kappa[:, None], astar[:, None], bstar[:, None]
    )
    best2 = np.argsort(fg, axis=1)[:, :2]
    zl = _zero_loss_points(astar, bstar)
    zl = np.where(np.isfinite(zl), zl, w)
    starts = np.stack(
        [
            w,
            zl,
            -zl,
            np.take_along_axis(pts, best2[:, 0, None, None], 1)[:, 0],
            np.take_along_axis(pts, best2[:, 1, None, None], 1)[:, 0],
        ],
        axis=1,
    )
    S = starts.shape[1]
    rep = lambda v: np.repeat(v, S, axis=0)
    xs = _newton(
        starts.reshape(n * S, 2), rep(w), rep(V), rep(kappa), rep(astar), rep(bstar)
    ).reshape(n, S, 2)
    fs = ((xs - w[:, None]) ** 2).sum(-1) / (2 * V[:, None]) + _phi(
        xs, kappa[:, None], astar[:, None], bstar[:, None]
    )
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


def fd_divergence(w, V, kappa, astar, bstar, delta, *, px=None):
    """Per-sample divergence ``tr(d g / d w)`` of ``g = (prox(w) - w)/V`` INCLUDING the jumps of
    the global prox minimiser, from the data only (no teacher fields): the central difference
    of the GLOBAL ``g`` along both axes,
    ``div_mu = sum_l [g(w_mu + delta e_l) - g(w_mu - delta e_l)]_l / (2 delta)``.
    Returns ``(div (n,), fraction of samples whose global minimiser switches basin within
    delta)``.

    Why.  Where a sample's global minimiser stays in one basin ``g`` is smooth and its
    divergence is the per-sample Jacobian ``(tr((I + V hess)^{-1}) - 2)/V``.  Where it jumps to
    another basin across a curve of the plane of ``w``, the distributional divergence has a
    singular part ``[g] . n delta_curve`` (jump ``[g]``, normal ``n``) that the per-sample
    Jacobian misses; averaged over samples it is -7.6 % of ``Vhat`` on the positional branch
    (alpha = 2, omega = 0.3; 0.5 % in size on the semantic branch).  The central difference sees it:
    for samples at signed distance ``t`` from the switching curve with density ``p(t)``, the
    mean of the difference quotient is ``(1/2 delta) int_-delta^delta [g](t) p(t) dt =
    [g](0) p(0) (1 + O(delta^2))`` (first-order terms cancel), and on the smooth part the
    error is ``O(delta^2)`` too.  (Keeping the exact Jacobian for the samples whose shifted
    minimisers follow the linearisation was tried: it misses the small jumps near the cusps
    where two basins merge and was biased by -5 % of the jump part at delta >= 0.08.)

    Bias-variance choice of ``delta``.  Bias ``b delta^2`` (curvature of ``p``, of the jump, of
    the switching curve, third derivative of the smooth part).  The jump term is carried by
    the ~``2 delta p n`` samples within ``delta`` of the curve, each contributing
    ``O([g]/delta)``: variance ``c / (n delta)`` on top of the ``O(1/n)`` spread of the smooth
    part.  The mean square error ``b^2 delta^4 + c/(n delta)`` is smallest at
    ``delta* = (c / (4 b^2 n))^(1/5)``, i.e. ``delta ~ n^{-1/5}``.  Measured on the positional
    branch: :func:`default_fd_delta` and BENCHMARKS.md.

    Inside GAMP (global prox) the estimate is a discontinuous function of the fields: it jumps
    by ``~[g]/(2 delta n)`` whenever a sample crosses the edge of its window, and GAMP's Vhat
    then jitters by +-3 % between iterations near the fixed point (d = 250, alpha = 2, mixing
    0.25: 3 seeds in 6 do not converge with "fd", all 6 do with "jacobian"; the "stein" oracle
    does not converge either on seed 0). A continuous variant (exact crossing by bisection, tent
    kernel, followed-basin difference for the smooth part) was tried: same accuracy on the
    population test (+1.0 / -1.0 / +0.1 % at n = 40000) but Vhat still jittered by +-2.5 % and
    GAMP still did not converge. Measured (d = 250, seed 0): with "fd" 1-21 samples' global
    minimisers flip basin at every iteration near the end, with "jacobian" none; the flips and
    the jitter of Vhat feed each other (the larger V of the full divergence, 12.5 vs 11.3, also
    enlarges each sample's O(d^{-1/2}) self-feedback).

    ``kappa, astar, bstar`` as in :func:`prox`; ``px`` the global :func:`prox` at ``w`` if
    already computed (only used to count the switches).  Cost: four global prox calls.
    """
    w = np.asarray(w, float)
    n = w.shape[0]
    if not delta > 0:
        raise ValueError(f"the finite-difference step delta must be > 0, got {delta!r}")
    if px is None:
        px = prox(w, V, kappa, astar, bstar)
    Vv = np.broadcast_to(np.asarray(V, float), (n,))
    div = np.zeros(n)
    switched = np.zeros(n, bool)
    for ell in range(2):
        xg = {}
        for sign in (1.0, -1.0):
            ws = w.copy()
            ws[:, ell] += sign * delta
            xg[sign] = prox(ws, V, kappa, astar, bstar).x
            # far from the linearisation: another basin (0.5 delta: a jump is O(1))
            lin = px.x + sign * delta * px.jac[:, :, ell]
            switched |= np.abs(xg[sign] - lin).max(-1) > 0.5 * delta
        div += ((xg[1.0] - xg[-1.0])[:, ell] / (2 * delta) - 1) / Vv
    return div, float(switched.mean())


# --------------------------------------------------------------------------- GAMP

POSITIONAL_M0 = 0.2
SIGNS = np.array([1.0, -1.0])  # s_l of the positional encodings
DIVERGENCES = ("fd", "jacobian", "stein")


def default_fd_delta(n: int) -> float:
    """Default finite-difference step of :func:`fd_divergence` for ``n`` samples (fields in
    the units of ``w``): ``FD_DELTA_4000 (n / 4000)^(-1/5)``, the bias-variance optimum's
    scaling (see :func:`fd_divergence`; constant measured on the positional branch)."""
    return FD_DELTA_4000 * (n / 4000.0) ** -0.2


FD_DELTA_4000 = 0.2


def stein_hats(wc, hstar, g, q, theta, rho, alpha, vhat_jac):
    """``(Vhat, thetahat)`` from Stein's lemma in distribution form (jumps of g included).

    ``wc`` centred student fields, ``hstar`` teacher fields, ``g`` messages, all ``(N, 2)``
    with ``(wc_l, h*_l)`` Gaussian of covariance ``Sigma = [[q, theta], [theta, rho]]``:
    ``E[Y g] = Sigma E[grad g]`` gives ``(-Vhat, thetahat) = alpha Sigma^-1 E[sum_l Y_l g_l]``.
    When the two fields are (nearly) collinear, ``1 - theta^2/(q rho) < 1e-6`` (e.g. Q = Q*),
    Stein only fixes ``q Vhat - theta thetahat``: ``Vhat`` is then the per-sample Jacobian
    value ``vhat_jac`` and ``thetahat`` follows from the combination.
    """
    e_w = np.mean((wc * g).sum(-1))
    if 1.0 - theta * theta / (q * rho) < 1e-6:
        return vhat_jac, (alpha * e_w + q * vhat_jac) / theta
    S = np.array([[q, theta], [theta, rho]])
    beta = alpha * np.linalg.solve(S, [e_w, np.mean((hstar * g).sum(-1))])
    return -beta[0], beta[1]


@dataclass(frozen=True, kw_only=True)
class GAMPResult(FiniteDResult):
    """GAMP at finite d.  ``history`` = dict of per-iteration arrays (q, m, theta, V, ...);
    ``m`` and ``theta`` in the history are signed (the result fields are absolute values)."""

    V: float
    Vhat: float
    stability: float
    channel: str = "exact"


def initial_gamp_weights(init, problem, seed, init_scale=None):
    """GAMP's ``Qhat_0``: as :func:`~theory.attention.finite_d.gd.initial_weights`, except that
    "positional" without ``init_scale`` is ``0.2 1_d`` (m = 0.2, the spec §4 start)."""
    if init == "positional" and init_scale is None:
        return np.full(problem.d, POSITIONAL_M0)
    return initial_weights(
        init, problem.teacher, seed, init_scale=1.0 if init_scale is None else init_scale
    )


def _effective_prox(w, V, hstar, params):
    """Global prox of the large-d channel (E1's numba kernel), as a :class:`Prox`."""
    r = ps.prox(w, hstar, V, params)
    return Prox(x=r.x, jac=r.jac, value=r.value)


def run_gamp(
    alpha,
    omega,
    d,
    init="semantic",
    seed=0,
    *,
    sigma=0.5,
    lam=0.01,
    A=None,
    max_iter=400,
    mixing=0.2,
    tol=1e-6,
    V0=10.0,
    channel="exact",
    n_test=10_000,
    init_scale=None,
    problem=None,
    Q0=None,
    return_weights=False,
    prox_mode="auto",
    n_global=30,
    divergence="jacobian",
    fd_delta=None,
    restarts=2,
    stall_window=20,
    stall_factor=0.7,
):
    """Run GAMP on one seed's data (same teacher/data as :func:`simulate_gd` with that seed).

    Damping (``mixing`` = weight of the new iterate): ``Qhat``, ``V`` and the Onsager term
    ``O`` are damped, ``O_t = mixing V_new g_t + (1 - mixing) O_{t-1}``, so that the field
    ``w_t = X Qhat_{t-1}/sqrt(d) - O_{t-1}`` carries the Onsager correction of every earlier
    ``Qhat`` that the damped ``Qhat_{t-1}`` is a combination of; the messages ``g`` are not
    damped.  This is an AMP iteration with memory whose state evolution is
    :func:`state_evolution` (exact, two-time), and whose fixed points are those of the undamped
    GAMP.  Convergence when the undamped relative change of Qhat and of V are both < ``tol``.
    Default ``mixing = 0.2``: on the positional branch the map has an oscillatory mode with
    undamped multiplier ~ -5.6 (alpha = 2, omega = 0.3; measured from the decay of the state
    evolution's m-oscillation), stable only for mixing < 2/6.6 = 0.30; with 0.5 GAMP started on
    the positional side ends on the semantic point (d = 400, alpha = 2: both seeds tried), with
    0.3 at alpha = 3.  On the semantic branch the m-mode (~ -2) needs mixing < 0.67.

    Reported: overlaps of Qhat (absolute values of m, theta), V, Vhat, ``eps_t = L(Qhat)/d``
    (the empirical risk at the GAMP estimate), ``eps_g`` on fresh samples,
    ``grad_rms = |grad L(Qhat)|/sqrt(d)``.  With ``return_weights=True`` returns
    ``(result, Qhat)``.

    ``channel``: "exact" (finite-d per-sample loss; fixed points are exactly stationary points
    of L) or "effective" (the large-d channel of spec §3, the one the state evolution follows).
    ``prox_mode``: "global" (global minimiser of every sample's prox, as in the state
    evolution), "warm" (Newton from the previous iterate's prox: the local minimiser, which
    keeps the map continuous), "auto" (global for the first ``n_global`` iterations, then warm).

    ``divergence``: how Vhat (the divergence of g, which sets the Onsager terms) is estimated.
    Where a sample's global prox minimiser jumps between basins g is discontinuous and the mean
    of the per-sample Jacobians misses the jump part of the divergence (-7.6 % of Vhat on the
    positional branch at alpha = 2, omega = 0.3; 0.5 % in size on the semantic branch): the Onsager
    terms are then off by that much and GAMP leaves its state evolution (its fixed points are
    unchanged).  "fd" (data and labels only): :func:`fd_divergence`, the central difference
    of the global prox map with step ``fd_delta`` (default :func:`default_fd_delta`), which
    includes the jumps; used in the iterations with the GLOBAL prox only: the warm prox
    follows each sample's basin, its map has no jumps and its per-sample Jacobian is its exact
    divergence.  "jacobian" (default): the mean per-sample Jacobian.  Why "fd" is not the
    default: it is the better estimator of the full divergence (population test: -1 % vs
    +7.6 %), but inside GAMP with the global prox it makes Vhat jitter between iterations and
    GAMP then does not settle where "jacobian" does (see :func:`fd_divergence`), and its
    deviation from its state evolution is not smaller (BENCHMARKS.md).
    "stein" (an oracle that uses the teacher fields h*, which the simulator knows): Stein's
    lemma in distribution form, ``(-Vhat, thetahat) = alpha Sigma^{-1} mean_mu[sum_l (w_c,
    h*)_l g_l]`` with ``Sigma = [[q, theta], [theta, rho]]`` and ``w_c = w - s m``.  "fd" and
    "stein" are the GAMP whose state evolution is :func:`state_evolution` (its "stein" Vhat).

    Stalls and restarts.  At finite d a sample held by the warm prox in a metastable basin near
    its fold (``I + V hess`` nearly singular) has a per-sample ``V dg/dw`` eigenvalue >> 1: alone
    it can push the stability index ``V^2 sum_mu |dg_mu/dw|^2/d`` above 1 (alpha = 2, d = 400,
    seed 0: one sample with eigenvalue +16.2 carries 0.65 of the index 1.23) and the iteration
    cycles with a constant residual; halving the mixing from there does not help (measured:
    still stuck after 4 halvings), but the same run started again with a smaller mixing does
    not enter that configuration.  So when the best residual of the last ``stall_window``
    iterations is not below ``stall_factor`` x the best of the window before, GAMP restarts
    from its initial state with half the mixing and twice the iterations (at most
    ``restarts`` times; 0 disables); ``metadata["restarts"]`` lists ``(iteration, mixing)``,
    ``history["mixing"]`` the mixing per iteration, ``metadata["stability_max*"]`` the sample
    that dominates the final stability index.

    Initialisations: "semantic" Qhat = Q* (theta = sigma^2, m ~ 0), "positional" Qhat = 0.2 1_d
    (m = 0.2, theta ~ 0; spec §4) unless ``init_scale`` is given (then init_scale 1_d/sqrt(d)
    as for gradient descent), "random" 0.1 N(0, 1); ``V0`` the initial V.  Where the local
    curvature is negative (Vhat < 0, early iterations) the update uses max(Vhat, 0) in b and in
    lam + sigma^2 Vhat (any value used consistently keeps the fixed-point property).
    """
    sigma, lam, A = check_params(alpha=alpha, omega=omega, d=d, sigma=sigma, lam=lam, A=A)
    if not (0 < mixing <= 1):
        raise ValueError(f"mixing must lie in (0, 1], got {mixing!r}")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {CHANNELS}, got {channel!r}")
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
    if prox_mode not in ("global", "warm", "auto"):
        raise ValueError(f"prox_mode must be 'global', 'warm' or 'auto', got {prox_mode!r}")
    if problem is None:
        problem = make_problem(alpha, omega, d, seed, sigma=sigma, A=A, n_test=n_test)
    data, teacher = problem.train, problem.teacher
    d = problem.d
    s2 = sigma**2
    ch = data.channel(channel, sigma)
    params = (
        ps.ERMParams(sigma=sigma, lam=lam, omega=omega, A=A) if channel == "effective" else None
    )
    Q = (
        np.array(Q0, float)
        if Q0 is not None
        else initial_gamp_weights(init, problem, seed, init_scale)
    )
    Q_init = Q.copy()
    V = float(V0)
    O = np.zeros((data.n, 2))  # damped Onsager term
    x_prev = data.fields(Q)
    hist = {
        k: []
        for k in (
            "q",
            "m",
            "theta",
            "V",
            "Vhat",
            "residual",
            "stability",
            "stability_max",
            "fd_flagged",
            "mixing",
        )
    }
    mixing0, backoffs, start, global_until, budget = mixing, [], 0, n_global, int(max_iter)
    status, it, Vhat, stab, n_clipped = "max_iter", 0, np.nan, np.nan, 0
    delta = default_fd_delta(data.n) if fd_delta is None else float(fd_delta)

    def record(Q, V, Vhat, res, stab=np.nan, stab_max=np.nan, flagged=np.nan):
        hist["stability_max"].append(stab_max)
        hist["fd_flagged"].append(flagged)
        hist["mixing"].append(mixing)
        hist["q"].append(s2 * (Q @ Q) / d)
        hist["m"].append(Q.sum() / d)
        hist["theta"].append(s2 * (teacher.qstar @ Q) / d)
        hist["V"].append(V)
        hist["Vhat"].append(Vhat)
        hist["residual"].append(res)
        hist["stability"].append(stab)

    record(Q, V, np.nan, np.nan)
    it = 0
    while it < budget:
        it += 1
        w = data.fields(Q) - O
        warm = prox_mode == "warm" or (prox_mode == "auto" and it > global_until)
        fd = divergence == "fd" and not warm
        if params is not None and not warm and not fd:
            px = _effective_prox(w, V, data.hstar, params)
        else:
            px = prox(w, V, *ch[:3], x_start=x_prev if warm else None)
        x_prev = px.x
        g = (px.x - w) / V
        Vhat = -(np.trace(px.jac, axis1=1, axis2=2) - 2).sum() / (V * d)
        flagged = np.nan
        if fd:
            div, flagged = fd_divergence(w, V, *ch[:3], delta, px=px)
            Vhat = -div.sum() / d
        if divergence == "stein":
            q, m, th = hist["q"][-1], hist["m"][-1], hist["theta"][-1]
            Vhat, _ = stein_hats(w - SIGNS * m, data.hstar, g, q, th, teacher.rho, data.n / d, Vhat)
        if not np.isfinite(Vhat):
            status = "nan"
            break
        n_clipped += Vhat < 0
        Vh = max(Vhat, 0.0)
        D = lam + s2 * Vh
        Q_new = (data.backproject(g) + s2 * Vh * Q) / D
        V_new = s2 / D
        # replicon (AT-type) stability of the fixed point: GAMP converges only if < 1
        dg = (px.jac - np.eye(2)) / V  # d g / d w, (n, 2, 2)
        per_sample = V_new**2 * (dg**2).sum(axis=(1, 2)) / d
        stab = per_sample.sum()
        res = max(np.linalg.norm(Q_new - Q) / max(np.linalg.norm(Q), 1e-300), abs(V_new - V) / V)
        Q = mixing * Q_new + (1 - mixing) * Q
        O = mixing * V_new * g + (1 - mixing) * O
        V = mixing * V_new + (1 - mixing) * V
        record(Q, V, Vhat, res, stab, per_sample.max(), flagged)
        if not np.all(np.isfinite(Q)):
            status = "nan"
            break
        if res < tol:
            status = "converged"
            break
        # stalled (best residual of the last window not below stall_factor x the best of the
        # window before, after the global phase): restart from the initial state with half
        # the mixing and twice the iterations (see the docstring: why not just back off)
        W = int(stall_window)
        if len(backoffs) < restarts and it - start >= max(2 * W, n_global + W):
            r_hist = hist["residual"]
            if min(r_hist[-W:]) > stall_factor * min(r_hist[-2 * W : -W]):
                mixing /= 2
                backoffs.append((it, mixing))
                start, global_until = it, it + n_global
                budget = it + int(max_iter * mixing0 / mixing)
                Q, V, O = Q_init.copy(), float(V0), np.zeros((data.n, 2))
                x_prev = data.fields(Q)
    worst = {}
    if it > 0 and np.isfinite(stab):
        # the sample that dominates the stability index: eigenvalues of V d g / d w (> 0 only
        # for a non-convex basin; large near a fold of the basin, where I + V hess -> singular)
        i = int(np.argmax(per_sample))
        worst = dict(
            stability_max=float(per_sample[i]),
            stability_max_sample=i,
            stability_max_eigs=np.linalg.eigvalsh(V * dg[i]).tolist(),
        )
    fields = evaluate(Q, problem, lam, seed=seed, init=init)
    out = GAMPResult(
        V=V,
        Vhat=float(Vhat),
        iterations=it,
        channel=channel,
        stability=float(stab),
        status=status,
        message=f"GAMP ({channel} channel): {status} after {it} iterations",
        history={k: np.array(v) for k, v in hist.items()},
        params=dict(
            alpha=float(alpha),
            omega=float(omega),
            d=d,
            sigma=sigma,
            lam=lam,
            A=A.tolist(),
            init=init,
            seed=int(seed),
            mixing=mixing0,
            tol=tol,
            V0=V0,
            max_iter=max_iter,
            channel=channel,
            prox_mode=prox_mode,
            n_global=n_global,
            divergence=divergence,
            fd_delta=delta if divergence == "fd" else None,
            restarts=restarts,
            stall_window=stall_window,
            stall_factor=stall_factor,
        ),
        metadata=dict(
            method="gamp",
            n_vhat_clipped=int(n_clipped),
            restarts=[[int(i), float(mu)] for i, mu in backoffs],
            mixing_final=float(mixing),
            **worst,
        ),
        **fields,
    )
    return (out, Q) if return_weights else out


# --------------------------------------------------------------------------- state evolution


def instance_gram(problem, Q0) -> np.ndarray:
    """Gram matrix ``G[i, j] = e_i . e_j / d`` of the basis ``(1_d, Q*, Q0)`` of one instance:
    the exact initial overlaps for :func:`state_evolution` (the "matching initialisation")."""
    E = np.stack([np.ones(problem.d), problem.teacher.qstar, np.asarray(Q0, float)])
    return E @ E.T / problem.d


def large_d_gram(init: str, *, sigma=0.5, rho=None, m0=POSITIONAL_M0) -> np.ndarray:
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
    """State evolution of damped GAMP: ``history`` = per-iteration arrays ``q, m, theta, V``
    (index 0 = the initialisation, as in :class:`GAMPResult`) and ``Vhat, Vhat_stein, mhat,
    thetahat, qhat`` (index t = the t-th iteration's hats)."""

    n_pop: int
    mixing: float


def state_evolution(
    alpha,
    omega,
    n_iter,
    *,
    gram,
    V0=10.0,
    mixing=0.3,
    sigma=0.5,
    lam=0.01,
    A=None,
    n_pop=100_000,
    rng=0,
    divergence="stein",
) -> SEResult:
    """State evolution of :func:`run_gamp` (effective channel, global prox), ANY ``mixing``.

    Why two-time: damping mixes vectors, ``Qhat_t = mixing Qnew_t + (1 - mixing) Qhat_{t-1}``,
    so ``q_t = sigma^2 |Qhat_t|^2/d`` contains the cross-overlap ``Qnew_t . Qhat_{t-1}``: the
    damped one-time map ``q <- mixing q_new + (1 - mixing) q`` (:func:`state_evolution_onetime`)
    is right only for ``mixing = 1`` or at a fixed point.  The cross-overlaps need the
    correlations ``Chat_ts = alpha E[g_t . g_s]`` of the messages at different times, i.e. the
    joint law of the fields of all iterations.

    Large-d picture (AMP with memory).  Every vector is a combination of the basis
    ``(1_d, Q*, Q0)`` (Gram ``gram``, e.g. :func:`instance_gram` or :func:`large_d_gram`) and of
    Gaussian noise vectors ``zeta_1, zeta_2, ...`` orthogonal to it with
    ``zeta_t . zeta_s / d = sigma^2 Chat_ts``.  Iteration t::

        b_t = mhat_t 1 + sigma^2 thetahat_t Q* + zeta_t + sigma^2 (Vhat_t - Vhat_t^true) Qhat_{t-1}
        Qhat_t = mixing b_t / D_t + (1 - mixing) Qhat_{t-1},   D_t = lam + sigma^2 Vhat_t,
        V_t = mixing sigma^2 / D_t + (1 - mixing) V_{t-1}

    where ``Vhat_t`` is what GAMP uses (``divergence``: "stein" = Vhat^true, also for GAMP's
    "fd", which estimates the same full divergence from the data; "jacobian" = the mean
    per-sample Jacobian; clipped at 0) and
    ``Vhat^true, thetahat`` are the coefficients of the backprojection's reaction along
    ``Qhat_{t-1}`` and ``Q*`` (Stein's lemma in distribution form: they include the jumps of the
    global prox, which the per-sample Jacobian misses).  The centred fields of a token
    ``(h*, w_1, w_2, ...)`` are jointly Gaussian with covariance ``sigma^2 u.v/d`` of the
    generating vectors, plus the means ``s_l m``.

    The expectations are Monte Carlo over a population of ``n_pop`` samples (two tokens each)
    whose Gaussian coordinates are extended every iteration by exact conditional sampling
    (incremental QR of the message matrix: the new coordinate's covariance with all earlier
    ones is exactly the empirical ``Chat``).  Statistical error ~ 1/sqrt(n_pop) relative.
    """
    sigma, lam, A = check_params(alpha=alpha, omega=omega, sigma=sigma, lam=lam, A=A)
    if not (0 < mixing <= 1):
        raise ValueError(f"mixing must lie in (0, 1], got {mixing!r}")
    if divergence == "fd":  # GAMP's "fd" estimates the full divergence: Stein's Vhat^true
        divergence = "stein"
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
    G = np.asarray(gram, float)
    if G.shape != (3, 3):
        raise ValueError(f"gram must be the 3x3 Gram matrix of (1, Q*, Q0), got {G.shape}")
    s2 = sigma**2
    rho = s2 * G[1, 1]
    params = ps.ERMParams(sigma=sigma, lam=lam, omega=omega, A=A, rho=rho)
    rng = as_rng(rng)
    N, T = int(n_pop), int(n_iter)
    sgn = SIGNS
    # Gaussian coordinates of the basis for every (sample, token): cov sigma^2 G
    Yb = rng.standard_normal((N, 2, 3)) @ cov_root(s2 * G).T
    hstar = Yb[:, :, 1]
    # noise coordinates: Yz[:, :, r] = sum_k Lz[r, k] eps[:, :, k], Lz lower triangular
    eps = np.empty((N, 2, T))
    Yz = np.empty((N, 2, T))
    Lz = np.zeros((T, T))
    Qb = np.empty((2 * N, T))  # orthonormal basis of the message vectors g_1..g_t
    # the damped iterate Qhat = u . (1, Q*, Q0) + k . zeta
    u, k = np.array([0.0, 0.0, 1.0]), np.zeros(T)
    V = float(V0)
    hist = {
        key: []
        for key in ("q", "m", "theta", "V", "Vhat", "Vhat_stein", "mhat", "thetahat", "qhat")
    }
    Cz = np.zeros((T, T))  # sigma^2 Chat (Gram of the zeta's)

    def overl(u, k, t):
        Gu = G @ u
        return dict(q=s2 * (u @ Gu + k[:t] @ Cz[:t, :t] @ k[:t]), m=Gu[0], theta=s2 * Gu[1])

    def record(u, k, t, V, **hats):
        o = overl(u, k, t)
        for key in ("q", "m", "theta"):
            hist[key].append(o[key])
        hist["V"].append(V)
        for key in ("Vhat", "Vhat_stein", "mhat", "thetahat", "qhat"):
            hist[key].append(hats.get(key, np.nan))

    record(u, k, 0, V)
    status = "ok"
    for t in range(T):
        o = overl(u, k, t)
        wc = Yb @ u + (Yz[:, :, :t] @ k[:t] if t else 0.0)  # centred fields (N, 2)
        w = wc + sgn * o["m"]
        px = ps.prox(w, hstar, V, params)
        g = (px.x - w) / V
        if not np.all(np.isfinite(g)):
            status = "nan"
            break
        mhat = alpha * np.mean((g * sgn).sum(-1))
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
        Vh = max(Vhat, 0.0)
        D = lam + s2 * Vh
        # b_t = mhat 1 + sigma^2 thetahat Q* + zeta_t + sigma^2 (Vh - Vhat_true) Qhat_{t-1}
        ub = np.array([mhat, s2 * thetahat, 0.0]) + s2 * (Vh - Vhat_true) * u
        kb = s2 * (Vh - Vhat_true) * k
        kb[t] += 1.0
        u = mixing * ub / D + (1 - mixing) * u
        k = mixing * kb / D + (1 - mixing) * k
        V = mixing * s2 / D + (1 - mixing) * V
        record(
            u,
            k,
            t + 1,
            V,
            Vhat=Vhat,
            Vhat_stein=Vhat_true,
            mhat=mhat,
            thetahat=thetahat,
            qhat=alpha * np.mean((g * g).sum(-1)),
        )
    return SEResult(
        n_pop=N,
        mixing=float(mixing),
        status=status,
        message=f"two-time state evolution, {len(hist['q']) - 1} iterations, population {N}",
        history={key: np.array(v) for key, v in hist.items()},
        params=dict(
            alpha=float(alpha),
            omega=float(omega),
            sigma=sigma,
            lam=lam,
            A=A.tolist(),
            V0=V0,
            mixing=mixing,
            gram=G.tolist(),
            n_iter=T,
            divergence=divergence,
        ),
        metadata=dict(method="population Monte Carlo, incremental QR"),
    )


def tracking(
    alpha,
    omega,
    d,
    seed=0,
    init="semantic",
    *,
    n_iter=30,
    mixing=0.3,
    V0=10.0,
    divergence="jacobian",
    n_pop=50_000,
    sigma=0.5,
    lam=0.01,
    A=None,
    problem=None,
) -> dict:
    """GAMP (effective channel, global prox) on one instance and its two-time state evolution
    from the matching initialisation (the instance's Gram of ``(1, Q*, Q0)``).

    Returns ``dict(gamp=history, se=history, dev=dict(q=.., m=.., theta=.., V=..))`` with
    ``dev[k]`` = max over iterations 1..n_iter of |GAMP - SE| (V relative).
    """
    if problem is None:
        problem = make_problem(alpha, omega, d, seed, sigma=sigma, A=A, n_test=2)
    r = run_gamp(
        alpha,
        omega,
        d,
        init,
        seed,
        sigma=sigma,
        lam=lam,
        A=A,
        problem=problem,
        mixing=mixing,
        max_iter=n_iter,
        tol=0.0,
        V0=V0,
        channel="effective",
        prox_mode="global",
        divergence=divergence,
        restarts=0,
    )
    G = instance_gram(problem, initial_gamp_weights(init, problem, seed))
    se = state_evolution(
        alpha,
        omega,
        n_iter,
        gram=G,
        V0=V0,
        mixing=mixing,
        sigma=sigma,
        lam=lam,
        A=A,
        n_pop=n_pop,
        rng=np.random.SeedSequence([seed, d, 7]),
        divergence=divergence,
    )
    hg, hs = r.history, se.history
    t = min(len(hg["q"]), len(hs["q"]))
    dev = {k: float(np.max(np.abs(hg[k][1:t] - hs[k][1:t]))) for k in ("q", "m", "theta")}
    dev["V"] = float(np.max(np.abs(hg["V"][1:t] / hs["V"][1:t] - 1)))
    return dict(gamp=hg, se=hs, dev=dev, status=(r.status, se.status))


def state_evolution_onetime(
    state0: dict,
    alpha,
    omega,
    n_iter,
    *,
    mixing=1.0,
    sigma=0.5,
    lam=0.01,
    A=None,
    rho=None,
    rule=None,
) -> dict:
    """The damped one-time iteration of the state equations in the overlaps,
    ``(q, m, theta, V) <- mixing F(q, m, theta, V) + (1 - mixing) (q, m, theta, V)``, with E1's
    public ``channel`` / ``hats_from_channel`` / ``overlaps_from_hats`` (split quadrature).

    This is the state evolution of GAMP only for ``mixing = 1`` (or at a fixed point): damped
    GAMP mixes vectors and its q picks up cross-overlaps (see :func:`state_evolution`).
    Returns per-iteration arrays (index 0 = ``state0``).
    """
    sigma, lam, A = check_params(alpha=alpha, omega=omega, sigma=sigma, lam=lam, A=A)
    p = ps.ERMParams(sigma=sigma, lam=lam, omega=omega, A=A, rho=rho)
    rule = ps.make_rule("split") if rule is None else rule
    x = {key: float(state0[key]) for key in ("q", "m", "theta", "V")}
    out = {key: [x[key]] for key in x}
    for _ in range(int(n_iter)):
        th = min(x["theta"], np.sqrt(p.rho * x["q"]) * (1 - 1e-9))  # keep rho - theta^2/q > 0
        ch = ps.channel(x["q"], x["m"], th, x["V"], p, rule, symmetry=False)
        h = ps.hats_from_channel(alpha, x["q"], x["m"], th, x["V"], ch, p)
        new = ps.overlaps_from_hats(h["qhat"], h["mhat"], h["thetahat"], max(h["Vhat"], 0.0), p)
        x = {key: mixing * new[key] + (1 - mixing) * x[key] for key in x}
        for key in x:
            out[key].append(x[key])
    return {key: np.array(v) for key, v in out.items()}


__all__ = [
    "prox",
    "Prox",
    "run_gamp",
    "GAMPResult",
    "state_evolution",
    "SEResult",
    "state_evolution_onetime",
    "instance_gram",
    "tracking",
    "large_d_gram",
    "sigmoid",
]
