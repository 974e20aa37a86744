"""The per-sample loss of the attention model (docs/attention.md §2): the one home of the
softmax attention, the teacher's matrix, the loss, its gradient and Hessian.

For L = 2 the row softmax of x xᵀ is fixed by its diagonal, a = S_11 = sigmoid(x_1(x_1 - x_2)),
b = S_22 = sigmoid(x_2(x_2 - x_1)) (docs/attention.md eq. 4), and every per-sample loss the
package meets is of the form

    ℓ(h; κ, t) = κ [(a(h) - t_1)² + (b(h) - t_2)²] + c                (docs/attention.md eq. 5)

with per-sample (κ, t_1, t_2, c): the *effective* (large-d) channel of the replica theory has
κ = σ², t = diag T(h*), c = 0; the *exact* finite-d channel has the κ, t = (a*, b*), c of the
sample (``theory.attention.finite_d.data``).  Shapes: fields ``h`` / ``x`` are ``(..., 2)``;
``(..., L, r)`` for the general-L helpers :func:`attention` and :func:`teacher_matrix`.
The numba kernels (``theory.attention._kernels``) implement the same functions per node;
these are their numpy references.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from theory.attention.params import ERMParams, as_params

__all__ = [
    "attention",
    "attention_matrix",
    "effective_channel",
    "loss",
    "loss_full",
    "loss_grad",
    "sample_loss",
    "sample_loss_grad",
    "sample_loss_hess",
    "sigmoid",
    "softmax_diag",
    "softmax_rows",
    "teacher_diag",
    "teacher_diag_jac",
    "teacher_matrix",
]

#: the logistic function, overflow-free (scipy's ``expit``)
sigmoid = expit


def _rows(a, name) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a, dtype=float))
    if a.ndim == 1 and a.shape[0] == 2:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"{name} must have shape (N, 2), got {np.shape(a)}")
    return a


# --------------------------------------------------------------------------- attention


def softmax_rows(M: np.ndarray) -> np.ndarray:
    """Row softmax of ``M`` (..., L, L), numerically stable."""
    M = M - M.max(axis=-1, keepdims=True)
    E = np.exp(M)
    return E / E.sum(axis=-1, keepdims=True)


def attention(x: np.ndarray) -> np.ndarray:
    """S(x) = softmax_row(x xᵀ) for fields x of shape (..., L, r) → (..., L, L)."""
    x = np.asarray(x, dtype=float)
    return softmax_rows(np.einsum("...ia,...ka->...ik", x, x))


def attention_matrix(x: ArrayLike) -> np.ndarray:
    """Full S(x) for L = 2 rows x (N, 2) → (N, 2, 2) (reference of :func:`softmax_diag`)."""
    return attention(_rows(x, "x")[:, :, None])


def softmax_diag(h: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal (a, b) = (S_11, S_22) of softmax_row(h hᵀ) for L = 2 fields h (..., 2)."""
    h = np.asarray(h, dtype=float)
    h1, h2 = h[..., 0], h[..., 1]
    return sigmoid(h1 * (h1 - h2)), sigmoid(h2 * (h2 - h1))


def teacher_matrix(h_star: ArrayLike, omega: float, A: ArrayLike) -> np.ndarray:
    """T(h*) = (1 - ω) softmax_row(h* h*ᵀ) + ω A for teacher fields (..., L, r_t) → (..., L, L)."""
    return (1.0 - omega) * attention(h_star) + omega * np.asarray(A, dtype=float)


def teacher_diag(h_star: ArrayLike, params: ERMParams | Mapping | None) -> np.ndarray:
    """Diagonal (t_1, t_2) of T(h*) for L = 2 teacher fields (N, 2) → (N, 2)."""
    p = as_params(params)
    a, b = softmax_diag(_rows(h_star, "h_star"))
    A = p.A_array
    return np.stack(
        [(1 - p.omega) * a + p.omega * A[0, 0], (1 - p.omega) * b + p.omega * A[1, 1]], axis=1
    )


def teacher_diag_jac(h_star: ArrayLike, omega: float) -> np.ndarray:
    """d(t_1, t_2)/d(h*_1, h*_2) of the teacher's diagonal, (N, 2) → (N, 2, 2)."""
    h = _rows(h_star, "h_star")
    a, b = softmax_diag(h)
    e1, e2 = (1 - omega) * a * (1 - a), (1 - omega) * b * (1 - b)
    h1, h2 = h[:, 0], h[:, 1]
    J = np.empty((h.shape[0], 2, 2))
    J[:, 0, 0], J[:, 0, 1] = e1 * (2 * h1 - h2), -e1 * h1
    J[:, 1, 0], J[:, 1, 1] = -e2 * h2, e2 * (2 * h2 - h1)
    return J


def effective_channel(
    h_star: ArrayLike, params: ERMParams | Mapping | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample (κ, t_1, t_2) of the effective channel: κ = σ², t = diag T(h*)."""
    p = as_params(params)
    t = teacher_diag(h_star, p)
    return np.full(t.shape[0], p.s2), t[:, 0], t[:, 1]


# --------------------------------------------------------------------------- the loss


def sample_loss(
    h: ArrayLike, kappa: ArrayLike, t1: ArrayLike, t2: ArrayLike, c: ArrayLike = 0.0
) -> np.ndarray:
    """ℓ(h; κ, t) + c = κ[(a - t_1)² + (b - t_2)²] + c at fields h (n, 2) → (n,)."""
    a, b = softmax_diag(h)
    return kappa * ((a - t1) ** 2 + (b - t2) ** 2) + c


def sample_loss_grad(
    h: ArrayLike, kappa: ArrayLike, t1: ArrayLike, t2: ArrayLike, c: ArrayLike = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """The loss and its gradient in h: ``(loss (n,), grad (n, 2))``.

    With u_1 = h_1(h_1 - h_2), u_2 = h_2(h_2 - h_1): ∂ℓ/∂u_1 = 2κ(a - t_1) a(1 - a),
    ∇u_1 = (2h_1 - h_2, -h_1), ∇u_2 = (-h_2, 2h_2 - h_1)."""
    h = np.asarray(h, dtype=float)
    h1, h2 = h[..., 0], h[..., 1]
    a, b = softmax_diag(h)
    ea, eb = a - t1, b - t2
    Fa = 2 * kappa * ea * a * (1 - a)
    Fb = 2 * kappa * eb * b * (1 - b)
    g = np.empty(h.shape)
    g[..., 0] = Fa * (2 * h1 - h2) - Fb * h2
    g[..., 1] = -Fa * h1 + Fb * (2 * h2 - h1)
    return kappa * (ea**2 + eb**2) + c, g


def sample_loss_hess(
    h: ArrayLike, kappa: ArrayLike, t1: ArrayLike, t2: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient (n, 2) and Hessian (n, 2, 2) in h of the loss (∇²u_1 = [[2, -1], [-1, 0]],
    ∇²u_2 = [[0, -1], [-1, 2]])."""
    h = np.asarray(h, dtype=float)
    h1, h2 = h[..., 0], h[..., 1]
    a, b = softmax_diag(h)
    ea, eb = a - t1, b - t2
    pa, pb = a * (1 - a), b * (1 - b)
    Fa, Fb = 2 * kappa * ea * pa, 2 * kappa * eb * pb
    Faa = 2 * kappa * (pa**2 + ea * pa * (1 - 2 * a))
    Fbb = 2 * kappa * (pb**2 + eb * pb * (1 - 2 * b))
    du1 = np.stack([2 * h1 - h2, -h1], axis=-1)
    du2 = np.stack([-h2, 2 * h2 - h1], axis=-1)
    g = Fa[..., None] * du1 + Fb[..., None] * du2
    H = (
        Faa[..., None, None] * du1[..., :, None] * du1[..., None, :]
        + Fbb[..., None, None] * du2[..., :, None] * du2[..., None, :]
    )
    H[..., 0, 0] += 2 * Fa
    H[..., 0, 1] -= Fa + Fb
    H[..., 1, 0] -= Fa + Fb
    H[..., 1, 1] += 2 * Fb
    return g, H


def loss(x: ArrayLike, h_star: ArrayLike, params: ERMParams | Mapping | None) -> np.ndarray:
    """Effective per-sample loss ℓ(x; h*) = (σ²/2)||S(x) - T(h*)||_F², shape (N,)
    (docs/attention.md eq. 5)."""
    p = as_params(params)
    t = teacher_diag(h_star, p)
    return sample_loss(_rows(x, "x"), p.s2, t[:, 0], t[:, 1])


def loss_grad(x: ArrayLike, h_star: ArrayLike, params: ERMParams | Mapping | None) -> np.ndarray:
    """∇_x ℓ(x; h*) of the effective loss, shape (N, 2)."""
    p = as_params(params)
    t = teacher_diag(h_star, p)
    return sample_loss_grad(_rows(x, "x"), p.s2, t[:, 0], t[:, 1])[1]


def loss_full(x: ArrayLike, h_star: ArrayLike, params: ERMParams | Mapping | None) -> np.ndarray:
    """ℓ from the full 2×2 matrices (independent reference of :func:`loss`)."""
    p = as_params(params)
    S = attention_matrix(x)
    T = teacher_matrix(_rows(h_star, "h_star")[:, :, None], p.omega, p.A_array)
    return 0.5 * p.s2 * ((S - T) ** 2).sum(axis=(1, 2))
