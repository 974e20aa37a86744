"""The prox of the general per-sample loss (docs/attention.md §10): the global minimiser of
Σ_ℓ (x_ℓ - w_ℓ)ᵀV⁻¹(x_ℓ - w_ℓ)/2 + ℓ(x; h*) over fields x (L, r), per row (numba, parallel),
its scipy reference, and its Jacobian in the smooth part."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.general import _kernels as _K
from theory.attention.general.channel import loss_grad_reference, teacher_matrix
from theory.attention.general.params import GeneralParams, as_params
from theory.rng import RNGLike, as_rng

__all__ = ["ProxResult", "prox", "prox_jacobian", "prox_reference"]


def _check_V(V, r):
    V = np.atleast_2d(np.asarray(V, float))
    if V.shape != (r, r):
        raise ValueError(f"V must be an {r}x{r} matrix, got shape {V.shape}")
    if not np.allclose(V, V.T, atol=1e-12) or np.linalg.eigvalsh(V).min() <= 0:
        raise ValueError("V must be symmetric positive definite")
    return V


@dataclass(frozen=True)
class ProxResult:
    """x (N, L, r) global minimiser; value (N,) the Moreau envelope M; ok (N,) gradient < 1e-6."""

    x: np.ndarray
    value: np.ndarray
    ok: np.ndarray


def prox(w, hs, V, params: GeneralParams | Mapping | None, *, warm=None) -> ProxResult:
    """Global minimiser of Σ_ℓ (x_ℓ - w_ℓ)ᵀV⁻¹(x_ℓ - w_ℓ)/2 + ℓ(x; h*) per row (numba, parallel).

    w (N, L, r) student fields; hs (N, L, r_t) teacher fields; V (r×r, or a scalar for r = 1);
    warm (N, L, r) optional extra start per row.
    """
    p = as_params(params)
    w = np.ascontiguousarray(np.asarray(w, float))
    hs = np.ascontiguousarray(np.asarray(hs, float))
    if w.ndim != 3 or w.shape[1:] != (p.L, p.r):
        raise ValueError(f"w must have shape (N, {p.L}, {p.r}), got {w.shape}")
    if hs.shape != (w.shape[0], p.L, p.r_t):
        raise ValueError(f"hs must have shape ({w.shape[0]}, {p.L}, {p.r_t}), got {hs.shape}")
    Vinv = np.linalg.inv(_check_V(V, p.r))
    T = np.ascontiguousarray(teacher_matrix(hs, p))
    have = warm is not None
    warm = np.ascontiguousarray(warm if have else w, dtype=float)
    x, val, ok = _K.prox_batch(w, T, hs, np.ascontiguousarray(Vinv), p.s2, warm, have)
    return ProxResult(x=x, value=val, ok=ok)


def prox_reference(
    w, hs, V, params: GeneralParams | Mapping | None, *, n_random: int = 16, rng: RNGLike = 0
):
    """scipy BFGS reference of :func:`prox`: the same deterministic starts plus ``n_random``
    random ones (w + N(0, (1 + |w|²/n) I)); lowest value wins.  Slow (Python loop over rows)."""
    from scipy.optimize import minimize

    p = as_params(params)
    gen = as_rng(rng)
    w = np.asarray(w, float)
    hs = np.asarray(hs, float)
    Vinv = np.linalg.inv(_check_V(V, p.r))
    T = teacher_matrix(hs, p)
    N, L, r = w.shape
    xs = np.empty_like(w)
    vals = np.empty(N)
    for i in range(N):
        wi, Ti = w[i], T[i]

        def f(xf, wi=wi, Ti=Ti):
            x = xf.reshape(L, r)
            lv, lg = loss_grad_reference(x[None], Ti[None], p.s2)
            D = x - wi
            return (lv[0] + 0.5 * np.einsum("ia,ab,ib->", D, Vinv, D), (lg[0] + D @ Vinv).ravel())

        starts = []
        for k in range(1, _K.N_STARTS_FIXED + L):
            s = np.empty((L, r))
            _K.start(k, wi, np.ascontiguousarray(hs[i]), wi, False, s)
            starts.append(s.ravel())
        scale = math.sqrt(1.0 + (wi**2).sum() / (L * r))
        starts += [(wi + scale * gen.standard_normal((L, r))).ravel() for _ in range(n_random)]
        best = None
        for s in starts:
            res = minimize(f, s, jac=True, method="BFGS", options=dict(gtol=1e-10))
            if best is None or res.fun < best.fun:
                best = res
        xs[i] = best.x.reshape(L, r)
        vals[i] = best.fun
    return xs, vals


def prox_jacobian(x, hs, V, params: GeneralParams | Mapping | None) -> np.ndarray:
    """∂x̂/∂ω at a prox minimiser x̂ (r = 1, away from basin jumps): (I + V ∇²ℓ(x̂))⁻¹
    (implicit function theorem on x̂ - ω + V ∇ℓ(x̂) = 0), ∇²ℓ by central differences of the
    analytic gradient.  x (N, L, 1), hs (N, L, r_t) → (N, L, L)."""
    p = as_params(params)
    x = np.asarray(x, float)
    N, L, r = x.shape
    if r != 1:
        raise ValueError(f"prox_jacobian needs student rank r = 1, got r = {r}")
    T = teacher_matrix(np.asarray(hs, float), p)
    H = np.empty((N, L, L))
    for j in range(L):
        e = np.zeros((1, L, 1))
        e[0, j, 0] = 1e-5
        gp = loss_grad_reference(x + e, T, p.s2)[1][:, :, 0]
        gm = loss_grad_reference(x - e, T, p.s2)[1][:, :, 0]
        H[:, :, j] = (gp - gm) / 2e-5
    H = 0.5 * (H + np.swapaxes(H, 1, 2))
    return np.linalg.inv(np.eye(L)[None] + float(np.asarray(V).ravel()[0]) * H)
