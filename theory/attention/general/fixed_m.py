"""The RS training loss at a FIXED positional overlap m (θ ≡ 0, r = 1; docs/attention.md §10).

With m held fixed the state equations close on (q, V), and m̂ becomes the Lagrange multiplier
G⁺ m (λ + σ² V̂) instead of α E[g]; ε_t(m) = -Φ is the RS training loss of the minimiser of the
empirical risk restricted to {PQ/√d = m, Q*ᵀQ = 0}.  Its stationary points in m are the fixed
points of the positional (θ ≡ 0) branch, so its profile tells whether such a point exists where
the damped iteration does not go (the L = 3 study: docs/findings.md §3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory._util import check_positive
from theory.attention.general.params import GeneralParams, as_params
from theory.attention.general.quadrature import Nodes, make_nodes, replicate_errors
from theory.attention.general.state_equations import (
    channel,
    free_energy,
    hats_from_channel,
    pooled,
)
from theory.results import Result
from theory.rng import RNGLike
from theory.solve import QuasiNewton, iterate

__all__ = ["FixedMResult", "fixed_m_map", "fixed_m_point"]


@dataclass(frozen=True, kw_only=True)
class FixedMResult(Result):
    """RS energy profile point at a fixed positional overlap m (θ ≡ 0), r = 1.

    ``q``, ``V`` solve the state equations with m held fixed; ``eps_t`` = -Φ, ``eps_g``;
    ``grad_m`` (L,) = dε_t/dm projected on the range of G (zero at a fixed point of the full
    θ = 0 equations); ``<field>_err``: standard errors over the scramblings when n_rep >= 2;
    ``metadata["rep_eps_t"]``: ε_t of each scrambling (paired differences between profile
    points on the same nodes are far more precise than ``eps_t_err`` suggests).
    """

    alpha: float
    omega: float
    m: np.ndarray = None
    q: float = math.nan
    V: float = math.nan
    eps_t: float = math.nan
    eps_g: float = math.nan
    grad_m: np.ndarray = None
    q_err: float | None = None
    V_err: float | None = None
    eps_t_err: float | None = None
    eps_g_err: float | None = None
    grad_m_err: np.ndarray = None
    iterations: int = 0
    residual: float = math.nan


def fixed_m_map(alpha: float, p: GeneralParams, m: np.ndarray, q: float, V: float, nodes: Nodes):
    """One application of the fixed-m map at (q, V), m (L, 1): returns (q', V', hats with the
    multiplier m̂, pooled channel, grad_m = dε_t/dm)."""
    o = dict(q=np.array([[q]]), m=m, theta=np.zeros((1, p.r_t)), V=np.array([[V]]))
    ch = pooled(channel(o, p, nodes))
    h = hats_from_channel(alpha, o, ch, p)
    D = p.lam + p.s2 * h["Vhat"][0, 0]
    if D <= 0:
        raise FloatingPointError("lambda + sigma^2 Vhat <= 0: the ridge step is unstable")
    G = p.G_array
    Gp = np.linalg.pinv(G)
    mhat_c = Gp @ m * D
    # dΦ/dm = α E[g] - m̂ (Φ stationary in everything else); ε_t = -Φ
    grad = -(G @ Gp) @ (h["mhat"] - mhat_c)
    hc = dict(h, mhat=mhat_c)
    B = p.s2 * h["qhat"][0, 0] + float((mhat_c.T @ G @ mhat_c)[0, 0])
    return p.s2 * B / D**2, p.s2 / D, hc, ch, grad[:, 0]


def fixed_m_point(
    alpha: float,
    m,
    params: GeneralParams | Mapping | None = None,
    *,
    q0: float = 0.1,
    V0: float = 10.0,
    tol: float = 1e-8,
    max_iter: int = 60,
    n: int = 2**12,
    n_rep: int = 2,
    method: str = "qmc",
    rng: RNGLike = 0,
    nodes: Nodes | None = None,
    error: bool = True,
) -> FixedMResult:
    """RS training loss ε_t(m) of the minimiser restricted to a fixed positional overlap m
    (θ = 0; r = 1), on frozen QMC nodes (``n_rep`` scramblings of ``n`` points).

    (q, V) is solved by quasi-Newton in the package's iteration loop (finite-difference
    Jacobian of the map, ``max_iter`` map evaluations; convergence when the relative residual
    of q and V < ``tol``).  With ``error`` each scrambling is re-solved alone (warm start) and
    the standard errors of (q, V, eps_t, eps_g, grad_m) are reported.  ``m`` (L,) must lie in
    the range of G (for simplex encodings: Σ_ℓ m_ℓ = 0).
    """
    p = as_params(params)
    alpha = check_positive("alpha (the sample ratio n/d)", alpha)
    if p.r != 1:
        raise ValueError(f"fixed_m_point needs student rank r = 1, got r = {p.r}")
    m = np.asarray(m, float).reshape(-1)
    if m.shape != (p.L,):
        raise ValueError(f"m must have L = {p.L} entries, got {m.size}")
    G = p.G_array
    if np.linalg.norm(G @ np.linalg.pinv(G) @ m - m) > 1e-10 * (1 + np.linalg.norm(m)):
        raise ValueError(
            "m must lie in the range of the encodings' Gram matrix G (for simplex "
            "encodings: entries summing to zero)"
        )
    check_positive("q0", q0)
    check_positive("V0", V0)
    if nodes is None:
        nodes = make_nodes(p, n, n_rep, method, rng)
    m2 = m[:, None]

    def solve(nd, x0):
        def F(x):
            qn, Vn, hc, ch, grad = fixed_m_map(alpha, p, m2, x["q"], x["V"], nd)
            return dict(q=qn, V=Vn), (hc, ch, grad)

        return iterate(F, x0, strategy=QuasiNewton(), tol=tol, max_iter=max_iter)

    def evaluate(out):
        hc, ch, grad = out.aux
        qn, Vn = out.fx["q"], out.fx["V"]
        o = dict(q=np.array([[qn]]), m=m2, theta=np.zeros((1, p.r_t)), V=np.array([[Vn]]))
        return dict(
            q=qn,
            V=Vn,
            eps_t=-free_energy(alpha, o, hc, float(ch["M"]), p),
            eps_g=float(ch["eps_g"]),
            grad_m=grad,
        )

    common = dict(
        alpha=alpha,
        omega=p.omega,
        m=m,
        params=p.to_dict(),
        metadata=dict(nodes.describe(), tol=tol, method_solve="quasi-Newton in (q, V)"),
    )
    out = solve(nodes, dict(q=float(q0), V=float(V0)))
    if out.aux is None:
        return FixedMResult(status="nan", message=out.message, **common)
    vals = evaluate(out)
    err = {}
    if error and out.converged and nodes.n_rep >= 2:
        reps = []
        for k in range(nodes.n_rep):
            ok = solve(nodes.subset(k), out.x)
            if ok.aux is None or not ok.residual < max(tol, 1e-6):
                reps = None
                break
            reps.append(evaluate(ok))
        if reps:
            err = replicate_errors(reps, reps[0])
            # per-scrambling values: profiles on the same nodes can be compared pairwise
            common["metadata"]["rep_eps_t"] = [float(r_["eps_t"]) for r_ in reps]
    return FixedMResult(
        status=out.status,
        message=out.message,
        iterations=out.iterations,
        residual=out.residual,
        **vals,
        **err,
        **common,
    )
