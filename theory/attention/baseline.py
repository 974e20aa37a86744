"""The linear positional baseline f_B(X) = B X (input-independent attention; docs/attention.md
eq. 17): as d → ∞ it reaches B* = ω A + (1 - ω) E[softmax(h hᵀ)], h ~ N(0, ρ I_2), for any
α > 0, with test error ε_g^lin = (σ²/2)(1 - ω)² Σ_ij Var[softmax(h hᵀ)_ij]."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from theory.attention.channel import sigmoid
from theory.attention.params import ERMParams, as_params

__all__ = ["linear_baseline", "linear_baseline_B"]


def _softmax_moments(rho: float, n: int = 160) -> tuple[float, float]:
    """E[S_11] and E[S_11²] for S = softmax_row(h hᵀ), h ~ N(0, ρ I_2).

    With d = h1 - h2 and s = h1 + h2 (independent, variance 2ρ), u = h1(h1 - h2) = d(d + s)/2,
    so given d, u ~ N(d²/2, ρ d²/2): a 2-D Gaussian integral with an analytic integrand,
    evaluated by a 2-D Gauss-Hermite product rule with ``n`` nodes per dimension (converged to
    machine precision for n >= 100 at ρ <= 4; the tests compare with scipy's adaptive dblquad).
    """
    from theory.gauss import gh_rule

    x, w = gh_rule(n)
    d = math.sqrt(2 * rho) * x[:, None]
    z = x[None, :]
    u = 0.5 * d**2 + np.abs(d) * math.sqrt(rho / 2) * z
    S = sigmoid(u)
    W = w[:, None] * w[None, :]
    return float((W * S).sum()), float((W * S**2).sum())


def linear_baseline(params: ERMParams | Mapping | None = None, *, n: int = 160) -> float:
    """ε_g of the linear positional baseline, d → ∞ (docs/attention.md eq. 17):
    ε_g^lin = (σ²/2)(1 - ω)² Σ_ij Var[softmax(h hᵀ)_ij] = 2 σ² (1 - ω)² Var[S_11], h ~ N(0, ρ I)
    (Var S_12 = Var S_11 and, by the h1 ↔ h2 symmetry, the second row equals the first)."""
    p = as_params(params)
    m1, m2 = _softmax_moments(p.rho, n)
    return 2.0 * p.s2 * (1.0 - p.omega) ** 2 * (m2 - m1 * m1)


def linear_baseline_B(params: ERMParams | Mapping | None = None, *, n: int = 160) -> np.ndarray:
    """The baseline's limiting B* = ω A + (1 - ω) E[softmax(h hᵀ)], shape (2, 2)."""
    p = as_params(params)
    m1, _ = _softmax_moments(p.rho, n)
    ES = np.array([[m1, 1 - m1], [1 - m1, m1]])
    return p.omega * p.A_array + (1 - p.omega) * ES
