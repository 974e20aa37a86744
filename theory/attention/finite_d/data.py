"""Finite-d data of the positional-semantic attention model (spec/positional-semantic.md §1).

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
* Teacher weights ``Q*`` ~ N(0, I_d) rescaled to ``|Q*|^2 = d`` (``rho = sigma^2`` exactly,
  see :func:`make_teacher`).
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

with ``c_mu >= 0`` the part of the residual orthogonal to ``delta``.  As d -> infinity,
``kappa -> sigma^2``, ``a* -> T_11(h*)``, ``b* -> T_22(h*)``, ``c = O(1/d)``, which is the
spec's effective loss ``(sigma^2/2)|S(h) - T(h*)|_F^2 = sigma^2[(a - T_11)^2 + (b - T_22)^2]``.
So every sample is summarised by ``(kappa, a*, b*, c)`` ("exact" channel) or by
``(sigma^2, T_11(h*), T_22(h*), 0)`` ("effective" channel): the risk, its gradient and the GAMP
prox only need these four numbers and the local fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory._util import check_positive, check_row_stochastic, check_unit_interval
from theory.rng import as_rng

A_REF = np.array([[0.6, 0.4], [0.4, 0.6]])
CHANNELS = ("exact", "effective")


def sigmoid(u):
    return 0.5 * (1.0 + np.tanh(0.5 * u))  # overflow-free logistic


def attention2(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal ``(a, b)`` of ``softmax_row(h h^T)`` for fields ``h`` of shape ``(..., 2)``."""
    h1, h2 = h[..., 0], h[..., 1]
    return sigmoid(h1 * (h1 - h2)), sigmoid(h2 * (h2 - h1))


def softmax_rows(M: np.ndarray) -> np.ndarray:
    """Row softmax of ``M`` (shape ``(..., L, L)``), numerically stable (reference code)."""
    M = M - M.max(axis=-1, keepdims=True)
    E = np.exp(M)
    return E / E.sum(axis=-1, keepdims=True)


def check_params(alpha=None, omega=None, d=None, sigma=0.5, lam=0.01, A=None):
    """Validate the model parameters; return ``(sigma, lam, A)`` with ``A`` defaulted."""
    if alpha is not None:
        check_positive("alpha", alpha)
    if omega is not None:
        check_unit_interval("omega", omega)
    if d is not None and (int(d) != d or d < 2):
        raise ValueError(f"the dimension d must be an integer >= 2, got {d!r}")
    sigma = check_positive("sigma", sigma)
    lam = check_positive("lam", lam, strict=False)
    A = A_REF.copy() if A is None else check_row_stochastic("A", A, symmetric=True)
    if A.shape != (2, 2):
        raise ValueError(f"A must be a 2x2 matrix (sequence length L = 2), got shape {A.shape}")
    return sigma, lam, A


@dataclass(frozen=True)
class Teacher:
    """Teacher: ``qstar`` (shape ``(d,)``, i.i.d. N(0,1)), ``A``, ``omega``, ``sigma``."""

    qstar: np.ndarray
    A: np.ndarray
    omega: float
    sigma: float

    @property
    def d(self) -> int:
        return self.qstar.shape[0]

    @property
    def rho(self) -> float:
        """Finite-d teacher norm ``sigma^2 |Q*|^2 / d`` (-> sigma^2)."""
        return float(self.sigma**2 * self.qstar @ self.qstar / self.d)

    def targets_matrix(self, hstar: np.ndarray) -> np.ndarray:
        """``T = (1 - omega) softmax(h* h*^T) + omega A``, shape ``(n, 2, 2)``."""
        S = softmax_rows(hstar[:, :, None] * hstar[:, None, :])
        return (1.0 - self.omega) * S + self.omega * self.A


def make_teacher(
    d: int, omega: float, *, sigma: float = 0.5, A=None, rng=0, normalize: bool = True
) -> Teacher:
    """Teacher with ``Q*`` drawn N(0, I_d); with ``normalize`` (default) rescaled to
    ``|Q*|^2 = d`` so that ``rho = sigma^2 |Q*|^2/d = sigma^2`` exactly, as in the theory.

    The raw i.i.d. draw has ``rho = sigma^2 (1 + O(sqrt(2/d)))`` (4.5 % standard deviation at
    d = 1000), a seed-to-seed fluctuation of the TEACHER that moves eps_g by several % and
    dominates the spread of the finite-d runs; the direction of Q* is uniform either way.
    """
    sigma, _, A = check_params(omega=omega, d=d, sigma=sigma, A=A)
    qstar = as_rng(rng).standard_normal(int(d))
    if normalize:
        qstar *= np.sqrt(d / (qstar @ qstar))
    return Teacher(qstar=qstar, A=A, omega=float(omega), sigma=sigma)


def positional_encodings(d: int) -> np.ndarray:
    """``P`` of shape ``(2, d)``: rows ``+1_d/sqrt(d)`` and ``-1_d/sqrt(d)``."""
    p = np.full(int(d), 1.0 / np.sqrt(d))
    return np.stack([p, -p])


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


def sample_data(teacher: Teacher, n: int, rng, *, keep_targets: bool = False) -> ERMData:
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
    s = np.array([1.0, -1.0])
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


# --------------------------------------------------------------------------- per-sample loss


def sample_loss(h, kappa, astar, bstar, c):
    """Per-sample loss ``kappa[(a - a*)^2 + (b - b*)^2] + c`` at fields ``h`` (shape ``(n, 2)``)."""
    a, b = attention2(h)
    return kappa * ((a - astar) ** 2 + (b - bstar) ** 2) + c


def sample_loss_grad(h, kappa, astar, bstar, c):
    """Per-sample loss and its gradient in ``h``: returns ``(loss (n,), grad (n, 2))``."""
    h1, h2 = h[..., 0], h[..., 1]
    a, b = attention2(h)
    ea, eb = a - astar, b - bstar
    Fa = 2 * kappa * ea * a * (1 - a)  # d loss / d u1, u1 = h1 (h1 - h2)
    Fb = 2 * kappa * eb * b * (1 - b)  # d loss / d u2, u2 = h2 (h2 - h1)
    g = np.empty(h.shape)
    g[..., 0] = Fa * (2 * h1 - h2) - Fb * h2
    g[..., 1] = -Fa * h1 + Fb * (2 * h2 - h1)
    return kappa * (ea**2 + eb**2) + c, g


def sample_loss_hess(h, kappa, astar, bstar):
    """Gradient ``(n, 2)`` and Hessian ``(n, 2, 2)`` in ``h`` of the per-sample loss."""
    h1, h2 = h[..., 0], h[..., 1]
    a, b = attention2(h)
    ea, eb = a - astar, b - bstar
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
