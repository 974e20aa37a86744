"""The per-sample loss of the general model (docs/attention.md §10):
ℓ(x; h*) = (σ²/2)||S(x) - T(h*)||_F², S(x) = softmax_row(x xᵀ) for fields x (L, r),
T(h*) = (1 - ω) S(h*) + ω A.  The softmax and the teacher matrix are the L = 2 model's
(:mod:`theory.attention.channel`, written for any L).  Shapes: x (N, L, r), T (N, L, L)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from theory.attention.channel import attention
from theory.attention.channel import teacher_matrix as _teacher_matrix
from theory.attention.general import _kernels as _K
from theory.attention.general.params import GeneralParams, as_params

__all__ = ["loss", "loss_grad", "loss_grad_reference", "teacher_matrix"]


def teacher_matrix(hs: np.ndarray, params: GeneralParams | Mapping | None) -> np.ndarray:
    """T(h*) = (1-ω) softmax_row(h* h*ᵀ) + ω A for h* (..., L, r_t) → (..., L, L)."""
    p = as_params(params)
    return _teacher_matrix(hs, p.omega, p.A_array)


def loss(x, T, s2) -> np.ndarray:
    """ℓ = (σ²/2)||S(x) - T||_F² (numpy), x (N, L, r), T (N, L, L) → (N,)."""
    return 0.5 * s2 * ((attention(x) - T) ** 2).sum(axis=(-2, -1))


def loss_grad_reference(x, T, s2) -> tuple[np.ndarray, np.ndarray]:
    """Pure-numpy ℓ and ∇_x ℓ (N, L, r): Γ = σ²(S - T), W = S ∘ (Γ - rowsum(Γ∘S)),
    ∇ = (W + Wᵀ) x.  Reference of the numba kernel."""
    x = np.asarray(x, float)
    S = attention(x)
    Gam = s2 * (S - T)
    W = S * (Gam - (Gam * S).sum(axis=-1, keepdims=True))
    g = np.einsum("...ik,...ka->...ia", W + np.swapaxes(W, -1, -2), x)
    return 0.5 * s2 * ((S - T) ** 2).sum(axis=(-2, -1)), g


def loss_grad(x, T, s2) -> tuple[np.ndarray, np.ndarray]:
    """Numba ℓ and ∇_x ℓ, same contract as :func:`loss_grad_reference` (loops over rows)."""
    x = np.ascontiguousarray(np.asarray(x, float))
    T = np.ascontiguousarray(np.asarray(T, float))
    N, L, r = x.shape
    g = np.empty_like(x)
    v = np.empty(N)
    M, S, W = np.empty((L, L)), np.empty((L, L)), np.empty((L, L))
    for i in range(N):
        v[i] = _K.loss_grad_one(x[i], T[i], float(s2), g[i], M, S, W)
    return v, g
