"""The linear positional baseline of the general model (docs/attention.md §10): f_B(X) = B X
with a trainable L×L matrix B, attention that does not depend on the input.

With y = T(h*) Z and X = Z + P (unit-norm encodings), ||(B - T) Z||_F²/d → σ² ||B - T||_F²
and ||B P||²/d → 0 as d → ∞, so for any α > 0 the baseline reaches B* = E[T] =
ω A + (1 - ω) E[softmax_row(h* h*ᵀ)] with test error

    ε_g^lin = (σ²/2)(1 - ω)² Σ_ij Var[softmax_row(h* h*ᵀ)_ij],   h*_ℓ ~ N(0, ρ) i.i.d. (r_t-dim),

independent of A and of the encodings.  For L = 2, r_t = 1 it is the closed form of
:func:`theory.attention.baseline.linear_baseline` (a 2-D Gauss-Hermite product); in general an
L·r_t-dimensional Gaussian expectation, done here by scrambled Sobol QMC with the spread of
independent scramblings as its error bar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.channel import attention
from theory.attention.general.params import GeneralParams, as_params
from theory.attention.general.quadrature import make_nodes
from theory.attention.general.state_equations import _sym_pow
from theory.results import Result
from theory.rng import RNGLike

__all__ = ["LinearBaselineResult", "linear_baseline"]


@dataclass(frozen=True, kw_only=True)
class LinearBaselineResult(Result):
    """ε_g^lin of the general model and its QMC standard error; ``B`` = B* (L×L)."""

    omega: float
    eps_g_lin: float
    eps_g_lin_err: float
    B: np.ndarray = None


def linear_baseline(
    params: GeneralParams | Mapping | None = None,
    *,
    n: int = 2**14,
    n_rep: int = 8,
    rng: RNGLike = 0,
) -> LinearBaselineResult:
    """ε_g^lin and B* of the general model's linear baseline (module docstring), by ``n_rep``
    scramblings of ``n`` Sobol points; the error is the standard error over the scramblings."""
    p = as_params(params)
    if int(n_rep) < 2:
        raise ValueError(f"n_rep must be >= 2 to give an error bar, got {n_rep}")
    nodes = make_nodes(p, n, n_rep, "qmc", rng)
    hs = np.einsum("ab,RNlb->RNla", _sym_pow(p.rho_array, 0.5), nodes.eta)
    S = attention(hs)  # (R, N, L, L)
    mean = S.mean(axis=1)
    var = (S**2).mean(axis=1) - mean**2  # per scrambling
    e = 0.5 * p.s2 * (1 - p.omega) ** 2 * var.sum(axis=(-2, -1))
    B = p.omega * p.A_array + (1 - p.omega) * mean.mean(axis=0)
    return LinearBaselineResult(
        omega=p.omega,
        eps_g_lin=float(e.mean()),
        eps_g_lin_err=float(e.std(ddof=1) / math.sqrt(e.size)),
        B=B,
        status="ok",
        params=p.to_dict(),
        metadata=dict(method="qmc", n=int(n), n_rep=int(n_rep)),
    )
