"""Finite-d data of the attention model (docs/attention.md §1-2).

Normalisations (stated once for all of ``theory.attention.finite_d``)
------------------------------------------------------------------------------------------------
* Sequence length L = 2.  Tokens ``x_l = p_l + z_l`` with ``z_l ~ N(0, sigma^2 I_d)`` and the
  positional encodings ``p_1 = +1_d/sqrt(d)``, ``p_2 = -1_d/sqrt(d)`` (signs ``s = (+1, -1)``).
  A sample is stored as ``X[mu]`` of shape ``(2, d)`` (rows = tokens).
* Student weights ``Q`` (shape ``(d,)``, r = 1) of norm ~ sqrt(d).  Local fields
  ``h_l = x_l . Q / sqrt(d)`` (shape ``(n, 2)``), so that ``X Q (X Q)^T / d = h h^T`` and
  ``f_Q(X) = softmax_row(h h^T) X``.  Since ``z_l . Q / sqrt(d) ~ N(0, sigma^2 |Q|^2/d)`` and
  ``p_l . Q / sqrt(d) = s_l 1^T Q / d``, the local field is ``h_l = sqrt(q) xi_l + s_l m`` with
  exactly the theory's order parameters
  ``q = sigma^2 |Q|^2 / d``, ``m = 1^T Q / d``, ``theta = sigma^2 Q*^T Q / d`` (= covariance of
  the centred student field with the teacher field ``h*_l = z_l . Q* / sqrt(d)``, whose variance
  is ``rho = sigma^2 |Q*|^2 / d``).
* Teacher weights ``Q*`` ~ N(0, I_d) rescaled to ``|Q*|^2 = d rho / sigma^2`` (the theory's
  teacher norm exactly, see :func:`make_teacher`).
* Teacher ``y(X) = T X_z`` with ``T = (1 - omega) softmax_row(h* h*^T) + omega A`` acting on the
  token part ``Z`` only.  Per-sample loss ``l_mu = |f_Q(X_mu) - y_mu|_F^2 / (2d)``.

Exact reduction of the per-sample loss (L = 2)
-----------------------------------------------
Row-stochasticity makes the student's attention matrix a function of two numbers,
``S = [[a, 1 - a], [1 - b, b]]`` with ``a = sigmoid(h_1 (h_1 - h_2))`` and
``b = sigmoid(h_2 (h_2 - h_1))``.  Writing ``delta = x_1 - x_2`` the residual rows are
``x_2 - y_1 + a delta`` and ``x_1 - y_2 - b delta``, hence EXACTLY (any d)

    l_mu(h) = kappa_mu [ (a - a*_mu)^2 + (b - b*_mu)^2 ] + c_mu,
    kappa_mu = |delta|^2 / (2d),
    a*_mu = delta.(y_1 - x_2)/|delta|^2,  b*_mu = delta.(x_1 - y_2)/|delta|^2,

with ``c_mu >= 0`` the part of the residual orthogonal to ``delta`` (docs/attention.md eq. 6).
As d -> infinity, ``kappa -> sigma^2``, ``a* -> T_11(h*)``, ``b* -> T_22(h*)``, ``c = O(1/d)``,
which is the effective loss of the theory ``sigma^2[(a - T_11)^2 + (b - T_22)^2]``.  So every
sample is summarised by ``(kappa, a*, b*, c)`` ("exact" channel) or by
``(sigma^2, T_11(h*), T_22(h*), 0)`` ("effective" channel): the risk, its gradient and the GAMP
prox only need these four numbers and the local fields; the loss family is
:mod:`theory.attention.channel`, its prox :mod:`theory.attention.proximal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.channel import softmax_rows, teacher_matrix
from theory.attention.params import SIGNS, ERMParams, as_params
from theory.rng import RNGLike, as_rng

__all__ = [
    "CHANNELS",
    "ERMData",
    "Teacher",
    "check_dimension",
    "make_teacher",
    "naive_sample_losses",
    "positional_encodings",
    "sample_data",
]

CHANNELS = ("exact", "effective")


def check_dimension(d) -> int:
    if int(d) != d or d < 2:
        raise ValueError(f"the dimension d must be an integer >= 2, got {d!r}")
    return int(d)


@dataclass(frozen=True)
class Teacher:
    """Teacher: ``qstar`` (shape ``(d,)``) and the model's ``params`` (ω, A, σ)."""

    qstar: np.ndarray
    params: ERMParams

    @property
    def d(self) -> int:
        return self.qstar.shape[0]

    @property
    def sigma(self) -> float:
        return self.params.sigma

    @property
    def omega(self) -> float:
        return self.params.omega

    @property
    def rho(self) -> float:
        """Finite-d teacher norm ``sigma^2 |Q*|^2 / d`` (= params.rho when normalised)."""
        return float(self.params.s2 * self.qstar @ self.qstar / self.d)

    def targets_matrix(self, hstar: np.ndarray) -> np.ndarray:
        """``T = (1 - omega) softmax(h* h*^T) + omega A``, shape ``(n, 2, 2)``."""
        return teacher_matrix(hstar[:, :, None], self.params.omega, self.params.A_array)


def make_teacher(
    d: int, params: ERMParams | Mapping | None = None, *, rng: RNGLike = 0, normalize: bool = True
) -> Teacher:
    """Teacher with ``Q*`` drawn N(0, I_d); with ``normalize`` (default) rescaled to
    ``|Q*|^2 = d rho / sigma^2`` so that ``sigma^2 |Q*|^2/d = rho`` exactly, as in the theory.

    The raw i.i.d. draw has ``rho (1 + O(sqrt(2/d)))`` (4.5 % standard deviation at d = 1000),
    a seed-to-seed fluctuation of the TEACHER that moves eps_g by several % and dominates the
    spread of the finite-d runs; the direction of Q* is uniform either way.
    """
    p = as_params(params)
    d = check_dimension(d)
    qstar = as_rng(rng).standard_normal(d)
    if normalize:
        qstar *= np.sqrt(d * (p.rho / p.s2) / (qstar @ qstar))
    return Teacher(qstar=qstar, params=p)


def positional_encodings(d: int) -> np.ndarray:
    """``P`` of shape ``(2, d)``: rows ``+1_d/sqrt(d)`` and ``-1_d/sqrt(d)``."""
    return SIGNS[:, None] * np.full((1, int(d)), 1.0 / np.sqrt(d))


@dataclass(frozen=True)
class ERMData:
    """``n`` samples: tokens ``X`` (shape ``(n, 2, d)``) and the per-sample loss summary.

    ``kappa, astar, bstar, c`` (shape ``(n,)``) define the exact loss
    ``l_mu(h) = kappa [(a - a*)^2 + (b - b*)^2] + c`` (module docstring); ``hstar`` (shape
    ``(n, 2)``) are the teacher fields ``z_l . Q*/sqrt(d)`` and ``T`` (``(n, 2, 2)``) the teacher's
    attention matrices, used by the "effective" channel.  ``Y`` (targets, ``(n, 2, d)``) is kept
    only when requested (tests).
    """

    X: np.ndarray
    kappa: np.ndarray
    astar: np.ndarray
    bstar: np.ndarray
    c: np.ndarray
    hstar: np.ndarray
    T: np.ndarray
    Y: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[2]

    def channel(self, kind: str, sigma: float):
        """``(kappa, a*, b*, c)`` of the "exact" finite-d loss or of the "effective" large-d one."""
        if kind == "exact":
            return self.kappa, self.astar, self.bstar, self.c
        if kind == "effective":
            z = np.zeros(self.n)
            return np.full(self.n, sigma**2), self.T[:, 0, 0], self.T[:, 1, 1], z
        raise ValueError(f"channel must be one of {CHANNELS}, got {kind!r}")

    def fields(self, Q: np.ndarray) -> np.ndarray:
        """Local fields ``h = X Q / sqrt(d)``, shape ``(n, 2)`` (one BLAS gemv)."""
        n, L, d = self.X.shape
        return (self.X.reshape(n * L, d) @ Q).reshape(n, L) / np.sqrt(d)

    def backproject(self, G: np.ndarray) -> np.ndarray:
        """``sum_mu X_mu^T G_mu / sqrt(d)`` for ``G`` of shape ``(n, 2)`` -> shape ``(d,)``."""
        n, L, d = self.X.shape
        return (G.reshape(n * L) @ self.X.reshape(n * L, d)) / np.sqrt(d)


def sample_data(teacher: Teacher, n: int, rng: RNGLike, *, keep_targets: bool = False) -> ERMData:
    """Draw ``n`` fresh samples of the model with ``teacher`` (see the module docstring)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"the number of samples must be >= 1, got {n}")
    rng = as_rng(rng)
    d = teacher.d
    Z = rng.standard_normal((n, 2, d))
    Z *= teacher.sigma
    hstar = (Z.reshape(2 * n, d) @ teacher.qstar).reshape(n, 2) / np.sqrt(d)
    T = teacher.targets_matrix(hstar)
    # y_l = sum_k T_lk z_k ; only the combinations below are needed for the loss summary.
    Y = np.einsum("nlk,nkd->nld", T, Z) if keep_targets else None
    # inner products of the token parts, taken before P is added in place (X = Z + P)
    zz = np.einsum("nld,nkd->nlk", Z, Z)  # (n, 2, 2) Gram of the token parts
    zs = Z.sum(axis=2) / np.sqrt(d)  # (n, 2): z_l . 1_d/sqrt(d)
    X = Z
    X += positional_encodings(d)[None, :, :]
    # Gram of x: x_l.x_k = z_l.z_k + s_l zs_k + s_k zs_l + s_l s_k (since p.p = +-1)
    s = SIGNS
    # teacher rows y_l = sum_k T_lk z_k  -> y_l . x_j = sum_k T_lk (z_k . z_j + s_j zs_k)
    # delta = x1 - x2 ; |delta|^2 ; delta.(y1 - x2) ; delta.(x1 - y2)
    xx = (
        zz
        + s[None, :, None] * zs[:, None, :]
        + s[None, None, :] * zs[:, :, None]
        + np.outer(s, s)[None]
    )
    zx = zz + s[None, None, :] * zs[:, :, None]  # zx[n, k, j] = z_k . x_j
    yx = np.einsum("nlk,nkj->nlj", T, zx)  # y_l . x_j
    yy = np.einsum("nlk,nkj,nmj->nlm", T, zz, T)  # y_l . y_m
    D = xx[:, 0, 0] + xx[:, 1, 1] - 2 * xx[:, 0, 1]
    dy1 = yx[:, 0, 0] - yx[:, 0, 1]  # delta . y1
    dy2 = yx[:, 1, 0] - yx[:, 1, 1]  # delta . y2
    dx1 = xx[:, 0, 0] - xx[:, 0, 1]  # delta . x1
    dx2 = xx[:, 1, 0] - xx[:, 1, 1]  # delta . x2
    astar = (dy1 - dx2) / D
    bstar = (dx1 - dy2) / D
    # |x2 - y1|^2 and |x1 - y2|^2
    n21 = xx[:, 1, 1] - 2 * yx[:, 0, 1] + yy[:, 0, 0]
    n12 = xx[:, 0, 0] - 2 * yx[:, 1, 0] + yy[:, 1, 1]
    c = (np.maximum(n21 - D * astar**2, 0.0) + np.maximum(n12 - D * bstar**2, 0.0)) / (2 * d)
    kappa = D / (2 * d)
    return ERMData(X=X, kappa=kappa, astar=astar, bstar=bstar, c=c, hstar=hstar, T=T, Y=Y)


def naive_sample_losses(Q: np.ndarray, data: ERMData) -> np.ndarray:
    """Reference: ``|softmax(XQ(XQ)^T/d) X - Y|_F^2/(2d)`` per sample from the full tokens.

    Needs ``data.Y`` (``sample_data(..., keep_targets=True)``).  Used to test the reduction.
    """
    if data.Y is None:
        raise ValueError("naive_sample_losses needs the targets: sample with keep_targets=True")
    d = data.d
    XQ = data.X @ Q  # (n, 2)
    S = softmax_rows(XQ[:, :, None] * XQ[:, None, :] / d)
    R = np.einsum("nlk,nkd->nld", S, data.X) - data.Y
    return (R**2).sum(axis=(1, 2)) / (2 * d)
