"""Parameters of the general attention model (docs/attention.md §10): any sequence length L,
student rank r, teacher rank r_t, row-stochastic A and positional encodings (through their Gram
matrix G); accepted by the theory and by the finite-d simulator alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory._util import check_positive, check_row_stochastic, check_unit_interval

__all__ = ["GeneralParams", "as_params", "default_A", "simplex_gram"]


def default_A(L: int) -> np.ndarray:
    """0.6 on the diagonal, 0.4/(L-1) elsewhere (L = 2: the reference [[0.6, 0.4], [0.4, 0.6]])."""
    A = np.full((L, L), 0.4 / (L - 1))
    np.fill_diagonal(A, 0.6)
    return A


def simplex_gram(L: int) -> np.ndarray:
    """Gram matrix of L unit encodings at the vertices of a regular simplex (Σ p_ℓ = 0):
    G = L/(L-1) (I - 11ᵀ/L).  L = 2: [[1, -1], [-1, 1]] (the reference p = ±1_d/√d)."""
    return L / (L - 1) * (np.eye(L) - np.full((L, L), 1.0 / L))


def _as_matrix(name, v, shape):
    a = np.asarray(v, dtype=float)
    if a.ndim == 0:
        a = float(a) * np.eye(shape[0])
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


@dataclass(frozen=True)
class GeneralParams:
    """Parameters of the general model (docs/attention.md §10).

    L (tokens, >= 2), r (student rank), r_t (teacher rank), sigma, lam (ridge), omega (teacher
    mixing), A (L×L row-stochastic; default :func:`default_A`), G (L×L symmetric PSD Gram matrix
    of the encodings, G[ℓ,ℓ'] = p_ℓ·p_ℓ'; default :func:`simplex_gram`), rho (teacher norm
    σ² Q*ᵀQ*/d, r_t×r_t or a scalar times I; default σ² I).
    """

    L: int = 2
    r: int = 1
    r_t: int = 1
    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: tuple | None = None
    G: tuple | None = None
    rho: tuple | float | None = None

    def __post_init__(self):
        for name in ("L", "r", "r_t"):
            v = getattr(self, name)
            if int(v) != v or v < (2 if name == "L" else 1):
                raise ValueError(
                    f"{name} must be an integer >= {2 if name == 'L' else 1}, got {v!r}"
                )
            object.__setattr__(self, name, int(v))
        L = self.L
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(
            self, "lam", check_positive("lam (the ridge strength)", self.lam, strict=False)
        )
        object.__setattr__(self, "omega", check_unit_interval("omega", self.omega))
        A = default_A(L) if self.A is None else check_row_stochastic("A", self.A)
        if A.shape != (L, L):
            raise ValueError(f"A must be an {L}x{L} matrix (L = {L}), got shape {A.shape}")
        G = simplex_gram(L) if self.G is None else _as_matrix("G", self.G, (L, L))
        if not np.allclose(G, G.T, atol=1e-12):
            raise ValueError("G (the Gram matrix of the encodings) must be symmetric")
        if np.linalg.eigvalsh(G).min() < -1e-10:
            raise ValueError(
                "G (the Gram matrix of the encodings) must be positive "
                "semi-definite: give G[l, l'] = p_l . p_l' for actual encodings"
            )
        rho = (
            self.sigma**2 * np.eye(self.r_t)
            if self.rho is None
            else _as_matrix("rho", self.rho, (self.r_t, self.r_t))
        )
        if not np.allclose(rho, rho.T, atol=1e-12) or np.linalg.eigvalsh(rho).min() <= 0:
            raise ValueError("rho (the teacher norm matrix) must be symmetric positive definite")
        tup = lambda M: tuple(tuple(float(x) for x in row) for row in M)
        object.__setattr__(self, "A", tup(A))
        object.__setattr__(self, "G", tup(G))
        object.__setattr__(self, "rho", tup(rho))

    @property
    def s2(self) -> float:
        return self.sigma**2

    @property
    def A_array(self) -> np.ndarray:
        return np.array(self.A, dtype=float)

    @property
    def G_array(self) -> np.ndarray:
        return np.array(self.G, dtype=float)

    @property
    def rho_array(self) -> np.ndarray:
        return np.array(self.rho, dtype=float)

    @property
    def dim(self) -> int:
        """Dimension of the Gaussian expectations, L (r + r_t)."""
        return self.L * (self.r + self.r_t)

    def replace(self, **kw) -> GeneralParams:
        d = self.to_dict()
        d.update(kw)
        if "sigma" in kw and "rho" not in kw:
            d["rho"] = None
        return GeneralParams(**d)

    def to_dict(self) -> dict:
        return dict(
            L=self.L,
            r=self.r,
            r_t=self.r_t,
            sigma=self.sigma,
            lam=self.lam,
            omega=self.omega,
            A=[list(x) for x in self.A],
            G=[list(x) for x in self.G],
            rho=[list(x) for x in self.rho],
        )


def as_params(params: GeneralParams | Mapping | None = None, **overrides) -> GeneralParams:
    if params is None:
        return GeneralParams(**overrides)
    if isinstance(params, dict):
        d = dict(params)
        d.update(overrides)
        return GeneralParams(**d)
    if not isinstance(params, GeneralParams):
        raise ValueError(f"params must be a GeneralParams or a dict, got {type(params).__name__}")
    return params.replace(**overrides) if overrides else params
