"""Fixed points of the general state equations on a branch (docs/attention.md §10,
docs/solver.md §2), with QMC error bars.

The expectations use frozen nodes (``n_rep`` scramblings of ``n`` Sobol points); the fixed point
is solved on all of them by the package's iteration loop (damped Anderson by default), and its
error bar is the standard error of the ``n_rep`` fixed points re-solved on each scrambling alone
(warm-started).  The prox minimisers of the previous map are extra Newton starts of the next.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory._util import check_positive
from theory.attention.general.params import GeneralParams, as_params
from theory.attention.general.quadrature import Nodes, make_nodes, replicate_errors
from theory.attention.general.state_equations import (
    channel,
    free_energy,
    guard_theta,
    hats_from_channel,
    overlaps_from_hats,
    pooled,
)
from theory.results import Result
from theory.rng import RNGLike
from theory.solve import Anderson, Damped, DecayStop, iterate

__all__ = [
    "BRANCHES",
    "KEYS",
    "GeneralERMResult",
    "default_init",
    "fixed_point",
    "label_branch",
]

BRANCHES = ("semantic", "positional", "free")
KEYS = ("q", "m", "theta", "V")
#: the errors a result carries (standard errors over the scramblings, ``<field>_err``)
ERR_FIELDS = ("q", "m", "theta", "V", "qhat", "mhat", "thetahat", "Vhat", "eps_t", "eps_g")


def default_init(branch: str, params: GeneralParams | Mapping | None) -> dict:
    """Cold starts (L = 2, r = 1: those of :data:`theory.attention.solver.DEFAULT_INIT`).

    semantic: q = 0.9 I, θ = 0.35 on the leading diagonal, m = 0, V = I;
    positional: q = 0.05 I, θ = 0, m = 0.3·√2·(leading eigenvector of G) in the first column
    (reference: m = (0.3, -0.3)), V = 10 I (from V = 1 the plain damped iteration at α = 2,
    ω = 0.3 falls into a near-trivial fixed point m ≈ 0.016 of higher ε_t);
    free: the semantic start plus the positional m/4.
    """
    p = as_params(params)
    L, r, rt = p.L, p.r, p.r_t
    lam, U = np.linalg.eigh(p.G_array)
    v = U[:, -1] * (1.0 if U[np.argmax(np.abs(U[:, -1])), -1] >= 0 else -1.0)
    mpos = np.zeros((L, r))
    mpos[:, 0] = 0.3 * math.sqrt(2.0) * v
    th = np.zeros((r, rt))
    for a in range(min(r, rt)):
        th[a, a] = 0.35
    if branch == "semantic":
        return dict(q=0.9 * np.eye(r), m=np.zeros((L, r)), theta=th, V=np.eye(r))
    if branch == "positional":
        return dict(q=0.05 * np.eye(r), m=mpos, theta=np.zeros((r, rt)), V=10 * np.eye(r))
    if branch == "free":
        return dict(q=0.9 * np.eye(r), m=0.25 * mpos, theta=th, V=np.eye(r))
    raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")


#: ||m|| or ||θ||/σ² below this is "zero" when labelling a fixed point
LABEL_TOL = 1e-6


def label_branch(m, theta, params: GeneralParams | Mapping | None) -> str:
    p = as_params(params)
    has_m = np.abs(m).max() > LABEL_TOL
    has_t = np.abs(theta).max() / p.s2 > LABEL_TOL
    return {
        (True, False): "semantic",
        (False, True): "positional",
        (False, False): "trivial",
        (True, True): "mixed",
    }[(has_t, has_m)]


@dataclass(frozen=True, kw_only=True)
class GeneralERMResult(Result):
    """A fixed point of the general state equations (matrices as numpy arrays).

    q (r, r), m (L, r), theta (r, r_t), V (r, r) and their hats; eps_t = -Φ, eps_g; ``init``
    the branch started on; ``<field>_err``: standard errors from the fixed points re-solved on
    each scrambling alone (None if n_rep < 2 or ``error=False``).  For r = r_t = 1 the scalar
    views ``q_s``, ``theta_s`` (= |θ|) and ``m_norm`` (= √(Σ_ℓ m_ℓ²/2), = |m| of the L = 2
    reference) are what the L = 2 code reports.
    """

    alpha: float
    omega: float
    q: np.ndarray = None
    m: np.ndarray = None
    theta: np.ndarray = None
    V: np.ndarray = None
    qhat: np.ndarray = None
    mhat: np.ndarray = None
    thetahat: np.ndarray = None
    Vhat: np.ndarray = None
    eps_t: float = math.nan
    eps_g: float = math.nan
    q_err: np.ndarray = None
    m_err: np.ndarray = None
    theta_err: np.ndarray = None
    V_err: np.ndarray = None
    qhat_err: np.ndarray = None
    mhat_err: np.ndarray = None
    thetahat_err: np.ndarray = None
    Vhat_err: np.ndarray = None
    eps_t_err: float | None = None
    eps_g_err: float | None = None
    branch: str = ""
    init: str = ""
    iterations: int = 0
    residual: float = math.nan

    @property
    def q_s(self) -> float:
        return float(np.trace(self.q)) / self.q.shape[0]

    @property
    def theta_s(self) -> float:
        return float(np.linalg.norm(self.theta))

    @property
    def m_norm(self) -> float:
        return float(np.sqrt((self.m**2).sum() / 2))

    def invariants(self) -> dict:
        """Rotation-invariant summaries (Q → Q O): eigenvalues of q, singular values of θ,
        eigenvalues of mᵀm (r×r); plus eps_t, eps_g."""
        return dict(
            q_eig=np.linalg.eigvalsh(self.q).tolist(),
            theta_sv=np.linalg.svd(self.theta, compute_uv=False).tolist(),
            mm_eig=np.linalg.eigvalsh(self.m.T @ self.m).tolist(),
            eps_t=self.eps_t,
            eps_g=self.eps_g,
        )


def _enforce(branch, o):
    if branch == "positional":
        o["theta"] = np.zeros_like(o["theta"])
    elif branch == "semantic":
        o["m"] = np.zeros_like(o["m"])
    return o


def _invariants(o):
    """Rotation invariants used by the r > 1 convergence test, one vector per order parameter."""
    return dict(
        q=np.linalg.eigvalsh(o["q"]),
        V=np.linalg.eigvalsh(o["V"]),
        theta=np.linalg.svd(o["theta"], compute_uv=False),
        m=np.linalg.eigvalsh(o["m"].T @ o["m"]),
    )


def _residual(x, Fx, keys, atol=1e-10):
    """Relative undamped residual per order parameter, max over them (Frobenius norms).  For
    r > 1 it is taken on the rotation invariants (:func:`_invariants`): the model is invariant
    under Q → Q O and with frozen QMC nodes the iterate can creep along that orbit without
    changing anything physical."""
    if x["q"].shape[0] > 1:
        x, Fx = _invariants(x), _invariants(Fx)
    return max(float(np.linalg.norm(Fx[k] - x[k]) / max(np.linalg.norm(Fx[k]), atol)) for k in keys)


def _pd(o):
    return all(np.linalg.eigvalsh(0.5 * (o[k] + o[k].T)).min() > 0 for k in ("q", "V"))


#: largest residual of a per-scrambling re-solve still used for the error bars (measured: the
#: single-scrambling map of 2^11 points in 6 dimensions, r = 2, stalls at ~3e-3; the spread
#: between scramblings it measures is larger)
ERR_RESIDUAL = 1e-2
#: Anderson steps that move an order parameter by more than this (relative) are rejected
MAX_STEP = 0.2
#: ||m||/√L (positional) or ||θ||/σ² (semantic) below this and decreasing for 15 iterations:
#: the branch collapsed onto the trivial one (status "diverged"; the L = 2 code's rule)
COLLAPSE = 2e-2


def _solve(
    alpha,
    p,
    branch,
    x0,
    nodes,
    *,
    mixing,
    tol,
    max_iter,
    warm=None,
    accel="anderson",
    keep_history=False,
    deadline=None,
):
    """The fixed point on ``nodes`` from ``x0`` (all four order parameters) by the iteration
    loop: damped Anderson (``accel="anderson"``: per-order-parameter scaling, steps that move an
    order parameter by more than ``MAX_STEP`` or leave q, V not positive definite are replaced
    by the damped step) or the plain damped iteration (``"none"``); ``deadline`` (a
    ``time.perf_counter()`` value) bounds it (status "max_time").  Returns the loop's result
    (its ``fx`` completed with the enforced zeros) and the last prox minimisers (warm starts)."""
    keys = [
        k
        for k in KEYS
        if not (branch == "positional" and k == "theta") and not (branch == "semantic" and k == "m")
    ]
    full = {k: np.array(v, float) for k, v in x0.items()}
    mem = dict(warm=warm, guard=0)

    def F(x):
        xg = dict(full, **x)
        xg["theta"], hit = guard_theta(xg["q"], xg["theta"], p.rho_array)
        mem["guard"] += hit
        ch = channel(xg, p, nodes, warm=mem["warm"])
        chp = pooled(ch)
        h = hats_from_channel(alpha, xg, chp, p)
        Fx = _enforce(branch, overlaps_from_hats(h, p))
        if not all(np.all(np.isfinite(v)) for v in Fx.values()):
            raise FloatingPointError("non-finite order parameters")
        mem["warm"] = ch["x"]
        return {k: Fx[k] for k in keys}, (h, chp)

    def collapse_value(fx):
        if branch == "positional":
            return float(np.linalg.norm(fx["m"])) / math.sqrt(p.L)
        return float(np.linalg.norm(fx["theta"])) / p.s2

    callbacks = []
    if branch in ("positional", "semantic"):
        label = f"the {branch} branch collapsed onto the trivial one"
        callbacks.append(DecayStop(collapse_value, COLLAPSE, label, aitken=False))
    if accel == "anderson":
        # the frozen-node map is rough (and, for r > 1, nearly flat along the O(r) orbit): keep
        # the memory through rejected candidates and residual spikes instead of restarting
        strategy = Anderson(
            mixing,
            max_step=MAX_STEP,
            keep_signs=False,
            floor=1e-3,
            valid=lambda c: _pd(dict(full, **c)),
            restart_from_best=False,
            clear_on_reject=False,
            forget_above_start=True,
            rcond=None,
        )
    else:
        strategy = Damped(mixing)
    out = iterate(
        F,
        {k: full[k] for k in keys},
        strategy=strategy,
        tol=tol,
        max_iter=max_iter,
        residual=lambda x, fx: _residual(dict(full, **x), dict(full, **fx), keys),
        callbacks=callbacks,
        keep_history=keep_history,
        max_time=None if deadline is None else max(deadline - time.perf_counter(), 0.0),
    )
    fx = dict(_enforce(branch, dict(full)), **out.fx) if out.fx else None
    return out, fx, mem


def _evaluate(alpha, p, o, nodes, warm):
    o = {k: np.array(v, float) for k, v in o.items()}
    o["theta"], _ = guard_theta(o["q"], o["theta"], p.rho_array)
    ch = pooled(channel(o, p, nodes, warm=warm))
    h = hats_from_channel(alpha, o, ch, p)
    phi = free_energy(alpha, o, h, float(ch["M"]), p)
    return o, -phi, float(ch["eps_g"]), h, ch


def fixed_point(
    alpha: float,
    params: GeneralParams | Mapping | None = None,
    branch: str = "semantic",
    init: dict | None = None,
    *,
    mixing: float = 0.2,
    tol: float = 1e-6,
    max_iter: int = 300,
    n: int = 2**13,
    n_rep: int = 4,
    method: str = "qmc",
    rng: RNGLike = 0,
    nodes: Nodes | None = None,
    error: bool = True,
    accel: str = "anderson",
    keep_history: bool = False,
    max_time: float | None = None,
) -> GeneralERMResult:
    """Solve the general state equations (docs/attention.md §10) on one branch.

    ``branch``: "semantic" (m ≡ 0, exact invariant), "positional" (θ ≡ 0, exact invariant) or
    "free" (nothing imposed); it also picks the cold start (:func:`default_init`), overridden by
    ``init`` = dict(q, m, theta, V) (arrays; scalars accepted for r = 1) or a previous result.
    For r > 1 the residual is measured on rotation invariants (eigenvalues of q, V, mᵀm,
    singular values of θ).  Iteration: ``mixing`` = weight of the new iterate (default 0.2: at
    α = 2, ω = 0.3 the L = 2 positional fixed point is unstable for the damped map with mixing
    0.5 -- an eigenvalue of the map's Jacobian below -3), ``accel`` = "anderson" (default) or
    "none" (plain damped iteration); convergence when the UNDAMPED map's relative change
    ||F(x)_k - x_k||_F / ||F(x)_k||_F < ``tol`` for every order parameter k.  Quadrature:
    ``n_rep`` scramblings of ``n`` Sobol points (``method="qmc"``, ``rng``) or MC, frozen during
    the iteration; with ``error`` (and n_rep >= 2) each scrambling's own fixed point is re-solved
    from the pooled one and their standard errors are reported in the ``<field>_err`` fields.
    ``keep_history``: per-iteration ``residual`` and ``mixing`` in ``history``.
    ``max_time``: wall-clock seconds for the whole call (None: unbounded); when spent the
    iteration stops with status "max_time" (message naming the bound) and the result holds the
    last iterate, evaluated; error re-solves cut short by it are dropped (metadata says so).
    """
    p = as_params(params)
    alpha = check_positive("alpha (the sample ratio n/d)", alpha)
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    if accel not in ("anderson", "none"):
        raise ValueError(f"accel must be 'anderson' or 'none', got {accel!r}")
    if nodes is None:
        nodes = make_nodes(p, n, n_rep, method, rng)
    x0 = default_init(branch, p)
    if init is not None:
        if isinstance(init, GeneralERMResult):
            init = dict(q=init.q, m=init.m, theta=init.theta, V=init.V)
        shapes = dict(q=(p.r, p.r), m=(p.L, p.r), theta=(p.r, p.r_t), V=(p.r, p.r))
        for k in KEYS:
            if k in init and init[k] is not None:
                v = np.asarray(init[k], float)
                if k == "m" and v.shape == (p.L,) and p.r == 1:
                    v = v[:, None]
                x0[k] = np.broadcast_to(v, shapes[k]).copy() if v.ndim == 0 else v.copy()
                if x0[k].shape != shapes[k]:
                    raise ValueError(f"init[{k!r}] must have shape {shapes[k]}, got {v.shape}")
    x0 = _enforce(branch, x0)
    for k in ("q", "V"):
        if np.linalg.eigvalsh(0.5 * (x0[k] + x0[k].T)).min() <= 0:
            raise ValueError(f"the initial {k} must be positive definite")
    if max_time is not None:
        max_time = check_positive("max_time (seconds)", max_time)
    deadline = None if max_time is None else time.perf_counter() + max_time
    kw = dict(mixing=mixing, tol=tol, max_iter=max_iter, accel=accel, deadline=deadline)
    out, Fx, mem = _solve(alpha, p, branch, x0, nodes, keep_history=keep_history, **kw)
    if out.status == "max_time":  # the loop was given what was left of the bound: name the bound
        msg = f"max_time = {max_time:g} s exceeded after {out.iterations} map evaluations"
        out = dataclasses.replace(out, message=msg)
    meta = dict(nodes.describe(), tol=tol, guard_hits=int(mem["guard"]), mixing=mixing)
    if max_time is not None:
        meta["max_time"] = max_time
    common = dict(
        alpha=alpha,
        omega=p.omega,
        init=branch,
        iterations=out.iterations,
        params=p.to_dict(),
        metadata=meta,
        history=out.history,
    )
    status = out.status
    if Fx is None:
        return GeneralERMResult(
            status=status if status != "converged" else "nan", message=out.message, **common
        )
    # everything evaluated at the final undamped iterate Fx (self-consistent to tol)
    warm = mem["warm"]
    try:
        fin, eps_t, eps_g, hh, chf = _evaluate(alpha, p, Fx, nodes, warm)
    except (FloatingPointError, np.linalg.LinAlgError) as exc:
        return GeneralERMResult(status="diverged", message=str(exc), **common)
    meta.update(newton_fail_fraction=float(chf["bad"]), phi=-eps_t)
    err = {}
    if error and nodes.n_rep >= 2 and status == "converged":
        err = _error_bars(alpha, p, branch, fin, nodes, warm, meta, **kw)
    return GeneralERMResult(
        q=fin["q"],
        m=fin["m"],
        theta=fin["theta"],
        V=fin["V"],
        qhat=hh["qhat"],
        mhat=hh["mhat"],
        thetahat=hh["thetahat"],
        Vhat=hh["Vhat"],
        eps_t=eps_t,
        eps_g=eps_g,
        branch=label_branch(fin["m"], fin["theta"], p),
        status=status,
        message=out.message,
        residual=out.residual,
        **err,
        **common,
    )


def _error_bars(
    alpha, p, branch, fin, nodes, warm, meta, *, mixing, tol, max_iter, accel, deadline
):
    """Standard errors over the scramblings: each one's fixed point re-solved alone from the
    pooled one (to max(tol, 1e-4), far below the QMC error they estimate).  For r > 1 the
    iterate can creep along the O(r) orbit, so a re-solve that stops at max_iter with a
    residual < ERR_RESIDUAL is kept (its residual is recorded in the metadata)."""
    reps = []
    for k in range(nodes.n_rep):
        if deadline is not None and time.perf_counter() >= deadline:
            meta["error_message"] = f"max_time spent before the re-solve of scrambling {k}"
            return {}
        sub = nodes.subset(k)
        kw = dict(tol=max(tol, 1e-4), max_iter=max_iter, deadline=deadline)
        o, Fk, mk = _solve(
            alpha, p, branch, fin, sub, mixing=mixing, warm=warm[k : k + 1], accel=accel, **kw
        )
        st, rk, wk = o.status, o.residual, mk["warm"]
        if st == "max_iter" and accel == "anderson":
            # Anderson can cycle on the rough single-scrambling map: finish damped
            x_last = dict(_enforce(branch, dict(fin)), **o.x)
            o2, Fk2, mk2 = _solve(
                alpha, p, branch, x_last, sub, mixing=mixing / 2, warm=wk, accel="none", **kw
            )
            st = o2.status
            if Fk2 is not None and o2.residual < rk:
                Fk, rk, wk = Fk2, o2.residual, mk2["warm"]
        meta.setdefault("error_resolve_residuals", []).append(float(rk))
        if Fk is None or not (st == "converged" or (st == "max_iter" and rk < ERR_RESIDUAL)):
            meta["error_message"] = f"scrambling {k} alone: {st}"
            return {}
        _, et, egk, hk, _ = _evaluate(alpha, p, Fk, sub, wk)
        reps.append(dict(Fk, eps_t=et, eps_g=egk, **hk))
    R = len(reps)
    err = replicate_errors(reps, ERR_FIELDS)
    meta["rep_eps_t"] = [r_["eps_t"] for r_ in reps]
    # rotation-invariant summaries per scrambling (r > 1: matrix entries drift along the O(r)
    # orbit, their spread is not an error bar; these are)
    inv = np.array(
        [
            np.concatenate(
                [
                    np.linalg.eigvalsh(r_["q"]),
                    np.linalg.svd(r_["theta"], compute_uv=False),
                    np.linalg.eigvalsh(r_["m"].T @ r_["m"]),
                ]
            )
            for r_ in reps
        ]
    )
    meta["invariants_err"] = (inv.std(axis=0, ddof=1) / math.sqrt(R)).tolist()
    meta["invariants_order"] = "q eigenvalues, theta singular values, eig(m^T m)"
    return err
