"""The parameters of the attention model (docs/attention.md §1): one object, accepted by the
replica theory and by the finite-d side (data, gradient descent, GAMP) alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory._util import check_positive, check_row_stochastic, check_unit_interval

__all__ = ["ALPHA_SUPPORTED", "A_REFERENCE", "SIGNS", "ERMParams", "as_params", "check_alpha"]

#: the reference teacher positional matrix
A_REFERENCE = ((0.6, 0.4), (0.4, 0.6))
#: signs s_ℓ of the reference positional encodings p_1 = +1_d/√d, p_2 = -1_d/√d
SIGNS = np.array([1.0, -1.0])


@dataclass(frozen=True)
class ERMParams:
    """Token noise ``sigma`` (σ), ridge ``lam`` (λ), teacher mixing ``omega`` (ω ∈ [0, 1]: 0
    semantic, 1 positional), teacher positional matrix ``A`` (2×2 row-stochastic, not
    necessarily symmetric), teacher norm ``rho`` = σ²|Q*|²/d (default σ²).

    Reference values: σ = 0.5, λ = 0.01, ω = 0.3, A = [[0.6, 0.4], [0.4, 0.6]].
    """

    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: tuple = A_REFERENCE
    rho: float | None = None

    def __post_init__(self):
        check_positive("sigma", self.sigma)
        check_positive("lam (the ridge strength)", self.lam, strict=False)
        check_unit_interval("omega", self.omega)
        A = check_row_stochastic("A", self.A)
        if A.shape != (2, 2):
            raise ValueError(f"A must be a 2x2 matrix (sequence length L = 2), got shape {A.shape}")
        object.__setattr__(self, "sigma", float(self.sigma))
        object.__setattr__(self, "lam", float(self.lam))
        object.__setattr__(self, "omega", float(self.omega))
        object.__setattr__(self, "A", tuple(tuple(float(v) for v in row) for row in A))
        rho = self.sigma**2 if self.rho is None else check_positive("rho", self.rho)
        object.__setattr__(self, "rho", float(rho))

    @property
    def s2(self) -> float:
        """σ²."""
        return self.sigma**2

    @property
    def A_array(self) -> np.ndarray:
        return np.array(self.A, dtype=float)

    @property
    def swap_symmetric(self) -> bool:
        """A_11 = A_22: the ℓ_1 ↔ ℓ_2 swap (m → -m) is a symmetry (m = 0 is invariant for
        any A)."""
        return abs(self.A[0][0] - self.A[1][1]) <= 1e-14

    def replace(self, **kw) -> ERMParams:
        """A copy with some fields changed (changing ``sigma`` alone resets ``rho`` to σ²)."""
        d = dict(sigma=self.sigma, lam=self.lam, omega=self.omega, A=self.A, rho=self.rho)
        d.update(kw)
        if "sigma" in kw and "rho" not in kw:
            d["rho"] = None
        return ERMParams(**d)

    def to_dict(self) -> dict:
        return dict(
            sigma=self.sigma,
            lam=self.lam,
            omega=self.omega,
            A=[list(r) for r in self.A],
            rho=self.rho,
        )


def as_params(params: ERMParams | Mapping | None = None, **overrides) -> ERMParams:
    """``params`` as an :class:`ERMParams` (None: the reference values; a dict: its fields),
    with ``overrides`` applied."""
    if params is None:
        return ERMParams(**overrides)
    if isinstance(params, dict):
        return ERMParams(**{**params, **overrides})
    if not isinstance(params, ERMParams):
        raise ValueError(
            f"params must be an ERMParams or a dict of its fields, got {type(params).__name__} "
            "(write ERMParams(omega=...) for the teacher mixing)"
        )
    return params.replace(**overrides) if overrides else params


#: the largest sample ratio α the replica solver accepts (beyond, α·E[...] overflows the
#: conjugates long before the fixed point is reached; the fixed points are smooth in log α and
#: α = 1e4 is far into the regime where ε_g ~ 1/α)
ALPHA_SUPPORTED = 1e4


def check_alpha(alpha) -> float:
    a = check_positive("alpha (the sample ratio n/d)", alpha)
    if a > ALPHA_SUPPORTED:
        raise ValueError(
            f"alpha (the sample ratio n/d) must be at most {ALPHA_SUPPORTED:g} (the supported "
            f"range of the replica solver), got {alpha!r}"
        )
    return a
