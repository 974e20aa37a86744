"""GAMP for the attention model at finite d (docs/attention.md §9).

Normalisations: :mod:`theory.attention.finite_d.data` (fields ``h = X Q / sqrt(d)``,
``q = sigma^2|Q|^2/d``, ``m = 1^T Q / d``, ``theta = sigma^2 Q*^T Q / d``).

One GAMP iteration (r = 1, L = 2, all samples at once) is a map of the state
``(Qhat, V, O)`` (O = the Onsager term of every sample, (n, 2))::

    w       = X Qhat / sqrt(d) - O
    xhat_mu = argmin_x |x - w_mu|^2/(2V) + l_mu(x),   g = (xhat - w)/V
    Vhat    = -(1/d) sum_mu tr(d g_mu / d w_mu)
    D       = lam + sigma^2 Vhat,   Qnew = (X^T g / sqrt(d) + sigma^2 Vhat Qhat) / D,
    Vnew    = sigma^2 / D,          Onew = Vnew g

run by the package's iteration loop (:func:`theory.solve.iterate`) with the damping
``x <- x + mixing (F(x) - x)`` on the whole state -- Qhat, V AND the Onsager term, so that the
field carries the Onsager correction of every earlier Qnew that the damped Qhat is a
combination of: an AMP with memory whose state evolution is
:func:`theory.attention.finite_d.state_evolution.state_evolution` and whose fixed points are
those of the undamped GAMP (why not damp the messages instead: docs/findings.md §1).
Convergence: the undamped relative change of Qhat and of V below ``tol``.

The channel ``l_mu``: "exact" (the finite-d per-sample loss ``kappa[(a - a*)^2 + (b - b*)^2]
+ c``: a GAMP fixed point is EXACTLY a stationary point of the empirical risk, what gradient
descent converges to) or "effective" (the large-d loss of the theory, with the teacher fields;
stationary for the risk up to O(1/d) per sample).  The prox is the one prox of the model,
:func:`theory.attention.proximal.prox_rows` (per-sample kappa and targets).

``divergence`` (how Vhat is estimated, docs/attention.md §9): "jacobian" (default: the mean
per-sample Jacobian, which misses the jump part of the divergence where the global prox
minimiser jumps between basins), "fd" (:func:`fd_divergence`, a central difference of the global
prox map that includes the jumps, from the data only), "stein" (an oracle with the teacher
fields: Stein's lemma in distribution form, :func:`stein_hats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from theory.attention.finite_d.data import CHANNELS
from theory.attention.finite_d.problem import (
    FiniteDResult,
    Problem,
    evaluate,
    initial_weights,
    make_problem,
)
from theory.attention.params import SIGNS, ERMParams, as_params
from theory.attention.proximal import prox_rows
from theory.solve import Damped, iterate

__all__ = [
    "DIVERGENCES",
    "GAMPResult",
    "default_fd_delta",
    "fd_divergence",
    "initial_gamp_weights",
    "run_gamp",
    "stein_hats",
]

#: GAMP's positional start Qhat_0 = POSITIONAL_M0 1_d (m = 0.2, docs/attention.md §6)
POSITIONAL_M0 = 0.2
DIVERGENCES = ("fd", "jacobian", "stein")
#: fd_divergence's step at n = 4000 samples (measured on the positional branch)
FD_DELTA_4000 = 0.2


def default_fd_delta(n: int) -> float:
    """Default finite-difference step of :func:`fd_divergence` for ``n`` samples (fields in the
    units of ``w``): ``FD_DELTA_4000 (n / 4000)^(-1/5)``, the scaling of the bias-variance
    optimum (docs/attention.md §9)."""
    return FD_DELTA_4000 * (n / 4000.0) ** -0.2


def fd_divergence(
    w: ArrayLike,
    V: float | ArrayLike,
    kappa: ArrayLike,
    t1: ArrayLike,
    t2: ArrayLike,
    delta,
    *,
    px=None,
) -> tuple[np.ndarray, float]:
    """Per-sample divergence ``tr(d g / d w)`` of ``g = (prox(w) - w)/V`` INCLUDING the jumps of
    the global prox minimiser, from the data only: the central difference of the GLOBAL ``g``
    along both axes, ``div_mu = sum_l [g(w_mu + delta e_l) - g(w_mu - delta e_l)]_l / (2 delta)``.

    Where the minimiser jumps across a curve of the plane of ``w``, the distributional
    divergence has a singular part that the per-sample Jacobian misses; the central difference
    sees it with an O(delta^2) bias and a variance ~ 1/(n delta) (docs/attention.md §9;
    measurements: docs/findings.md §2).  ``kappa, t1, t2`` as in
    :func:`~theory.attention.proximal.prox_rows`; ``px`` the global prox at ``w`` if already
    computed (only used to count the switches).  Returns ``(div (n,), fraction of samples whose
    global minimiser switches basin within delta)``.  Cost: four global prox calls.
    """
    w = np.asarray(w, float)
    n = w.shape[0]
    if not delta > 0:
        raise ValueError(f"the finite-difference step delta must be > 0, got {delta!r}")
    if px is None:
        px = prox_rows(w, V, kappa, t1, t2)
    Vv = np.broadcast_to(np.asarray(V, float), (n,))
    div = np.zeros(n)
    switched = np.zeros(n, bool)
    for ell in range(2):
        xg = {}
        for sign in (1.0, -1.0):
            ws = w.copy()
            ws[:, ell] += sign * delta
            xg[sign] = prox_rows(ws, V, kappa, t1, t2, jac=False).x
            # far from the linearisation: another basin (0.5 delta: a jump is O(1))
            lin = px.x + sign * delta * px.jac[:, :, ell]
            switched |= np.abs(xg[sign] - lin).max(-1) > 0.5 * delta
        div += ((xg[1.0] - xg[-1.0])[:, ell] / (2 * delta) - 1) / Vv
    return div, float(switched.mean())


def stein_hats(wc, hstar, g, q, theta, rho, alpha, vhat_jac) -> tuple[float, float]:
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
    """GAMP at finite d.  ``history``: per-iteration ``q, m, theta, V`` of the damped iterate
    (index 0 = the initialisation; ``m``, ``theta`` signed), ``Vhat``, ``residual``,
    ``stability`` (the replicon index V² Σ_mu |dg_mu/dw|²/d), ``stability_max`` (its largest
    sample), ``fd_flagged`` (fraction of samples switching basin, ``divergence="fd"``),
    ``mixing``."""

    V: float
    Vhat: float
    stability: float
    channel: str = "exact"


HISTORY_KEYS = (
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


def initial_gamp_weights(
    init: str, problem: Problem, init_scale: float | None = None
) -> np.ndarray:
    """GAMP's ``Qhat_0``: as :func:`~theory.attention.finite_d.problem.initial_weights`, except
    that "positional" without ``init_scale`` is ``POSITIONAL_M0 1_d`` (m = 0.2)."""
    if init == "positional" and init_scale is None:
        return np.full(problem.d, POSITIONAL_M0)
    return initial_weights(
        init, problem.teacher, problem.seed, init_scale=1.0 if init_scale is None else init_scale
    )


def run_gamp(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    d: int = 400,
    init: str = "semantic",
    seed: int = 0,
    *,
    max_iter: int = 400,
    mixing: float = 0.2,
    tol: float = 1e-6,
    V0: float = 10.0,
    channel: str = "exact",
    n_test: int = 10_000,
    init_scale: float | None = None,
    problem: Problem | None = None,
    Q0: np.ndarray | None = None,
    return_weights: bool = False,
    prox_mode: str = "auto",
    n_global: int = 30,
    divergence: str = "jacobian",
    fd_delta: float | None = None,
    restarts: int = 2,
    stall_window: int = 20,
    stall_factor: float = 0.7,
) -> GAMPResult | tuple[GAMPResult, np.ndarray]:
    """Run GAMP on one seed's data (the teacher and data of :func:`simulate_gd` with that seed).

    ``params``: the model's :class:`~theory.attention.params.ERMParams`.  ``mixing`` = weight
    of the new iterate (default 0.2: the positional branch's oscillatory mode needs < 0.3,
    docs/attention.md §9).  ``channel``: "exact" or "effective" (module docstring).
    ``prox_mode``: "global" (global minimiser of every sample's prox, as in the state
    evolution), "warm" (Newton from the previous iterate's prox: the local minimiser, which
    keeps the map continuous), "auto" (global for the first ``n_global`` iterations, then
    warm).  ``divergence``: "jacobian" (default), "fd" (with the global prox only; step
    ``fd_delta``, default :func:`default_fd_delta`) or "stein" (module docstring).

    Stalls (docs/attention.md §9): when the best residual of the last ``stall_window``
    iterations is not below ``stall_factor`` x the best of the window before, GAMP restarts
    from its initial state with half the mixing and a budget scaled accordingly (at most
    ``restarts`` times; 0 disables); ``metadata["restarts"]`` lists ``(iteration, mixing)``,
    ``metadata["stability_max*"]`` the sample that dominates the final stability index.

    Initialisations: "semantic" Qhat = Q*, "positional" Qhat = 0.2 1_d unless ``init_scale``
    is given (then ``init_scale`` 1_d/sqrt(d) as for gradient descent), "random" 0.1 N(0, 1);
    ``V0`` the initial V.  Where Vhat < 0 (early iterations) the update uses max(Vhat, 0)
    (any value used consistently keeps the fixed-point property).  Reported: the overlaps of
    Qhat, V, Vhat, ``eps_t = L(Qhat)/d``, ``eps_g``, ``grad_rms``.  ``return_weights=True``:
    returns ``(result, Qhat)``.
    """
    if not (0 < mixing <= 1):
        raise ValueError(f"mixing must lie in (0, 1], got {mixing!r}")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {CHANNELS}, got {channel!r}")
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
    if prox_mode not in ("global", "warm", "auto"):
        raise ValueError(f"prox_mode must be 'global', 'warm' or 'auto', got {prox_mode!r}")
    if problem is None:
        problem = make_problem(alpha, as_params(params), d, seed, n_test=n_test)
    p, data, teacher = problem.params, problem.train, problem.teacher
    d, n, s2 = problem.d, problem.train.n, problem.params.s2
    kappa, t1, t2, _ = data.channel(channel, p.sigma)
    Q = np.array(Q0, float) if Q0 is not None else initial_gamp_weights(init, problem, init_scale)
    state0 = dict(Q=Q, V=float(V0), O=np.zeros((n, 2)))
    delta = default_fd_delta(n) if fd_delta is None else float(fd_delta)
    mem = dict(it=0, x_prev=data.fields(Q), global_until=n_global, n_clipped=0)

    def F(x):
        Q, V, O = x["Q"], x["V"], x["O"]
        it = mem["it"] + 1
        w = data.fields(Q) - O
        warm = prox_mode == "warm" or (prox_mode == "auto" and it > mem["global_until"])
        fd = divergence == "fd" and not warm
        px = prox_rows(w, V, kappa, t1, t2, x_start=mem["x_prev"] if warm else None)
        g = (px.x - w) / V
        Vhat = -(np.trace(px.jac, axis1=1, axis2=2) - 2).sum() / (V * d)
        flagged = np.nan
        if fd:
            div, flagged = fd_divergence(w, V, kappa, t1, t2, delta, px=px)
            Vhat = -div.sum() / d
        if divergence == "stein":
            q, m, th = s2 * (Q @ Q) / d, Q.sum() / d, s2 * (teacher.qstar @ Q) / d
            Vhat, _ = stein_hats(w - SIGNS * m, data.hstar, g, q, th, teacher.rho, n / d, Vhat)
        if not np.isfinite(Vhat):
            raise FloatingPointError("non-finite Vhat")
        mem["it"], mem["x_prev"] = it, px.x
        mem["n_clipped"] += Vhat < 0
        Vh = max(Vhat, 0.0)
        D = p.lam + s2 * Vh
        V_new = s2 / D
        dg = (px.jac - np.eye(2)) / V  # d g / d w, (n, 2, 2)
        per_sample = V_new**2 * (dg**2).sum(axis=(1, 2)) / d  # replicon-type stability index
        aux = dict(Vhat=Vhat, flagged=flagged, per_sample=per_sample, dg=dg, V=V)
        return dict(Q=(data.backproject(g) + s2 * Vh * Q) / D, V=V_new, O=V_new * g), aux

    hist = {k: [] for k in HISTORY_KEYS}

    def record(x, Vhat, res, aux=None, mixing_now=mixing):
        Q = x["Q"]
        per = aux["per_sample"] if aux is not None else None
        hist["q"].append(s2 * (Q @ Q) / d)
        hist["m"].append(Q.sum() / d)
        hist["theta"].append(s2 * (teacher.qstar @ Q) / d)
        hist["V"].append(x["V"])
        hist["Vhat"].append(Vhat)
        hist["residual"].append(res)
        hist["stability"].append(np.nan if per is None else per.sum())
        hist["stability_max"].append(np.nan if per is None else per.max())
        hist["fd_flagged"].append(np.nan if aux is None else aux["flagged"])
        hist["mixing"].append(mixing_now)

    record(state0, np.nan, np.nan)
    W = int(stall_window)

    def stalled(step):
        r = attempt_res
        r.append(step.residual)
        if step.iteration >= max(2 * W, n_global + W) and min(r[-W:]) > stall_factor * min(
            r[-2 * W : -W]
        ):
            return ("max_iter", "stalled")
        return None

    def on_step(step):
        record(step.damped(), step.aux["Vhat"], step.residual, step.aux, step.mixing)

    mix, backoffs, budget, total = mixing, [], int(max_iter), 0
    while True:
        attempt_res: list[float] = []
        cbs = [on_step] + ([stalled] if len(backoffs) < restarts else [])
        out = iterate(
            F,
            state0,
            strategy=Damped(mix, adapt=False),
            tol=tol,
            max_iter=budget,
            keys=("Q", "V"),
            bound=None,
            callbacks=cbs,
        )
        total += out.iterations
        if out.message != "stalled":
            break
        mix /= 2  # restart from the initial state with half the mixing, scaled budget
        backoffs.append((total, mix))
        mem["global_until"], mem["x_prev"] = mem["it"] + n_global, data.fields(Q)
        budget = int(max_iter * mixing / mix)
    status = out.status
    final = out.damped() if status in ("converged", "max_iter") else out.x
    if status == "converged":
        record(final, out.aux["Vhat"], out.residual, out.aux, out.mixing)
    aux = out.aux or {}
    worst = {}
    if "per_sample" in aux:
        i = int(np.argmax(aux["per_sample"]))
        worst = dict(
            stability_max=float(aux["per_sample"][i]),
            stability_max_sample=i,
            stability_max_eigs=np.linalg.eigvalsh(aux["V"] * aux["dg"][i]).tolist(),
        )
    Qf = final["Q"]
    fields = evaluate(Qf, problem, init=init)
    result = GAMPResult(
        V=float(final["V"]),
        Vhat=float(aux.get("Vhat", np.nan)),
        iterations=total,
        channel=channel,
        stability=float(aux["per_sample"].sum()) if "per_sample" in aux else np.nan,
        status=status,
        message=f"GAMP ({channel} channel): {status} after {total} iterations"
        + (f" ({out.message})" if status == "nan" else ""),
        history={k: np.array(v) for k, v in hist.items()},
        params=dict(
            p.to_dict(),
            alpha=problem.alpha,
            d=d,
            init=init,
            seed=problem.seed,
            mixing=mixing,
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
            n_vhat_clipped=int(mem["n_clipped"]),
            restarts=[[int(i), float(m)] for i, m in backoffs],
            mixing_final=float(out.mixing),
            **worst,
        ),
        **fields,
    )
    return (result, Qf) if return_weights else result
