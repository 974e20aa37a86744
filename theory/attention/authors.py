"""The published ERM numbers recomputed with the authors' numerical protocol, to tell their
quadrature error from a disagreement (docs/published-vs-computed.md).

The authors' code (Cui et al., ``theory/theory.ipynb`` of their public repository) integrates
the state equations with the product of two degree-7 2-D cubature rules (12 × 12 = 144 nodes:
``quadpy.e2r2.get_good_scheme(7)``), and the free energy Φ, ε_g and the linear baseline with
degree-11 rules (28 points per 2-D factor); the prox is a local BFGS descent from x = 0.  This
module runs this package's solver with those rules
(:func:`~theory.attention.quadrature.cubature_rule`) and the global prox; at these nodes the
local prox from 0 gives α_c(0.3) within 1e-6 of the global one (measured,
docs/published-vs-computed.md).  Nothing here is a better estimate than
the default rule: it only reproduces numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from theory.attention.params import ERMParams, as_params, check_alpha
from theory.attention.quadrature import cubature_2d, cubature_rule
from theory.attention.solver import ERMResult, fixed_point
from theory.attention.state_equations import channel, free_energy, hats_from_channel
from theory.results import Result

__all__ = [
    "AuthorsTransition",
    "authors_alpha_c",
    "authors_alpha_l",
    "authors_eps_g",
    "authors_fixed_point",
    "authors_linear_baseline",
]

#: cubature degrees of the authors' code: state equations, then Φ / ε_g / linear baseline
STATE_DEGREE = 7
PHI_DEGREE = 11


def authors_fixed_point(
    alpha: float,
    params: ERMParams | Mapping | None = None,
    branch: str = "semantic",
    init: dict | ERMResult | None = None,
) -> ERMResult:
    """The fixed point on ``branch`` with the degree-7 product rule; ``eps_t`` = −Φ with the prox
    minimum integrated by the degree-11 product rule and the conjugates of the degree-7 solve,
    and ``eps_g`` by the degree-11 product rule, as the authors' code evaluates them.
    ``metadata["eps_t_state_rule"]``: −Φ with the degree-7 rule throughout."""
    p = as_params(params)
    alpha = check_alpha(alpha)
    r7 = cubature_rule(STATE_DEGREE)
    r = fixed_point(alpha, p, branch, init=init, rule=r7)
    if not r.converged:
        return r
    x = dict(q=r.q, m=r.m, theta=r.theta, V=r.V)
    ch7 = channel(r.q, r.m, r.theta, r.V, p, r7)
    h = hats_from_channel(alpha, r.q, r.m, r.theta, r.V, ch7, p)
    ch11 = channel(r.q, r.m, r.theta, r.V, p, cubature_rule(PHI_DEGREE))
    meta = dict(r.metadata, phi_degree=PHI_DEGREE, eps_t_state_rule=r.eps_t)
    return dataclasses.replace(
        r,
        eps_t=-free_energy(alpha, x, h, ch11["M"], p),
        eps_g=authors_eps_g(r.q, r.m, r.theta, p),
        metadata=meta,
    )


@dataclass(frozen=True, kw_only=True)
class AuthorsTransition(Result):
    """``alpha_c``: root of ε_t(semantic) − ε_t(positional), or ``alpha_l``: where the global
    minimiser's ε_g crosses the authors' ε_g^lin, under the authors' protocol."""

    omega: float
    alpha_c: float = float("nan")
    alpha_l: float = float("nan")


def _root(params, bracket, xtol, which) -> AuthorsTransition:
    p = as_params(params)
    warm: dict[str, ERMResult] = {}
    lin = authors_linear_baseline(p) if which == "alpha_l" else 0.0

    def delta(a):
        e = {}
        for b in ("semantic", "positional"):
            r = authors_fixed_point(a, p, b, init=warm.get(b))
            if not (r.converged and r.branch == b):
                raise ValueError(f"the {b} branch is lost at alpha = {a:g} ({r.status})")
            warm[b] = r
            e[b] = r
        if which == "alpha_c":
            return e["semantic"].eps_t - e["positional"].eps_t
        best = min(e.values(), key=lambda r: r.eps_t)
        return best.eps_g - lin

    lo, hi = (float(v) for v in bracket)
    common = dict(omega=p.omega, params=dict(p.to_dict(), bracket=[lo, hi], xtol=xtol))
    try:
        d_lo, d_hi = delta(lo), delta(hi)
        if not d_lo * d_hi < 0:
            return AuthorsTransition(
                status="max_iter", message=f"no sign change for {which} on {bracket}", **common
            )
        root = brentq(delta, lo, hi, xtol=xtol)
    except ValueError as exc:
        return AuthorsTransition(status="max_iter", message=str(exc), **common)
    return AuthorsTransition(status="converged", **{which: float(root)}, **common)


def authors_alpha_c(
    params: ERMParams | Mapping | None = None,
    bracket: tuple[float, float] = (1.0, 1.5),
    *,
    xtol: float = 1e-5,
) -> AuthorsTransition:
    """α_c(ω) under the authors' protocol (:func:`authors_fixed_point`), by Brent on ``bracket``
    (each branch warm-started from its previous point).  ``status`` "max_iter" (alpha_c nan)
    when Δε_t does not change sign on the bracket or a branch is lost."""
    return _root(params, bracket, xtol, "alpha_c")


def authors_alpha_l(
    params: ERMParams | Mapping | None = None,
    bracket: tuple[float, float] = (1.0, 2.0),
    *,
    xtol: float = 1e-5,
) -> AuthorsTransition:
    """α_l(ω) under the authors' protocol: where ε_g of the branch with the lower ε_t crosses
    :func:`authors_linear_baseline` (Brent on ``bracket``; at α_c itself when the drop happens
    in the jump).  ``status`` as :func:`authors_alpha_c`."""
    return _root(params, bracket, xtol, "alpha_l")


def _softmax2(h: np.ndarray) -> np.ndarray:
    M = h[:, :, None] * h[:, None, :]
    E = np.exp(M - M.max(axis=2, keepdims=True))
    return E / E.sum(axis=2, keepdims=True)


def authors_eps_g(
    q: float, m: float, theta: float, params: ERMParams | Mapping | None = None
) -> float:
    """ε_g = mse/2 as the authors' code computes it: mse = E tr(TΣTᵀ) (teacher alone,
    h* ~ N(0, ρ I)) + E tr(SΣSᵀ) (student alone) − 2 E tr(TΣSᵀ) (both), each by the degree-11
    rule (the last one by its tensor product), Σ = σ² I.  Exactly integrated, the three terms
    give the ``eps_g`` of :func:`~theory.attention.state_equations.channel`."""
    p = as_params(params)
    x, w = cubature_2d(PHI_DEGREE)
    T0 = (1 - p.omega) * _softmax2(x * np.sqrt(p.rho)) + p.omega * p.A_array
    sq = np.sqrt(q)
    S = _softmax2(np.column_stack([sq * x[:, 0] + m, sq * x[:, 1] - m]))
    a, c = theta / sq, np.sqrt(max(p.rho - theta * theta / q, 0.0))
    y = (a * x[:, None, :] + c * x[None, :, :]).reshape(-1, 2)  # (student node i, teacher j)
    T = ((1 - p.omega) * _softmax2(y) + p.omega * p.A_array).reshape(w.size, w.size, 2, 2)
    t1 = w @ np.einsum("nij,nij->n", T0, T0)
    t2 = w @ np.einsum("nij,nij->n", S, S)
    t3 = np.einsum("i,j,ijkl,ikl->", w, w, T, S)
    return float(p.s2 * (t1 + t2 - 2 * t3) / 2)


def authors_linear_baseline(params: ERMParams | Mapping | None = None) -> float:
    """ε_g^lin as the authors' code computes it: B* = ωA + (1 − ω)E[S] with the degree-7 rule,
    then mse = E tr(TΣTᵀ) − 2 E tr(B*ΣTᵀ) + tr(B*ΣB*ᵀ) with the degree-11 rule (Σ = σ² I), and
    ε_g^lin = mse/2.  Exact integration gives :func:`~theory.attention.baseline.linear_baseline`."""
    p = as_params(params)
    A = p.A_array

    def teacher(h):
        return (1 - p.omega) * _softmax2(h) + p.omega * A

    x7, w7 = cubature_2d(STATE_DEGREE)
    B = p.omega * A + (1 - p.omega) * np.tensordot(w7, _softmax2(x7 * np.sqrt(p.rho)), axes=1)
    x11, w11 = cubature_2d(PHI_DEGREE)
    T = teacher(x11 * np.sqrt(p.rho))
    t1 = w11 @ np.einsum("nij,nij->n", T, T)
    t2 = w11 @ np.einsum("ij,nij->n", B, T)
    mse = p.s2 * (t1 - 2 * t2 + np.sum(B * B))
    return float(mse / 2)
