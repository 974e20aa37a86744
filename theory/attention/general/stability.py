"""Local stability of a replica-symmetric solution of the general model (docs/attention.md
§10): the smooth part of the de Almeida-Thouless (replicon) quantity.  What it does and does not
tell on the positional side: docs/findings.md §3."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.general.params import GeneralParams, as_params
from theory.attention.general.proximal import prox, prox_jacobian
from theory.attention.general.quadrature import make_nodes
from theory.attention.general.state_equations import fields
from theory.results import Result
from theory.rng import RNGLike

__all__ = ["RepliconResult", "replicon_smooth"]


@dataclass(frozen=True, kw_only=True)
class RepliconResult(Result):
    """The smooth replicon quantity λ_AT (``value``) and its Monte Carlo standard error."""

    value: float
    value_err: float


def replicon_smooth(
    alpha: float,
    o: dict,
    params: GeneralParams | Mapping | None = None,
    *,
    n: int = 2**14,
    rng: RNGLike = 0,
) -> RepliconResult:
    """Smooth part of the de Almeida-Thouless (replicon) quantity of the RS solution, r = 1:

        λ_AT = α E[ ||∂x̂/∂ω - I||_F² ] = α V² E[ Σ_ℓℓ' (∂g_ℓ/∂ω_ℓ')² ],

    (output replicon α E||∂g/∂ω||² times the ridge prior's V²; the L fields of a sample share
    Q and have independent noise, hence the Frobenius norm).  RS is locally stable only if
    λ_AT < 1.  The basin jumps of the non-convex prox add a further positive (at zero
    temperature divergent) contribution that is NOT included: λ_AT > 1 is therefore a
    sufficient sign of replica-symmetry breaking, λ_AT < 1 a necessary condition for RS.
    ``o`` = dict(q, m, theta, V) (a fixed point or any overlaps).  Plain MC over ``n`` Gaussian
    nodes.  Returns a :class:`RepliconResult` (``value`` and its standard error ``value_err``).
    """
    p = as_params(params)
    if p.r != 1:
        raise ValueError(f"replicon_smooth needs student rank r = 1, got r = {p.r}")
    o = {k: np.atleast_2d(np.asarray(v, float)) for k, v in o.items()}
    if o["m"].shape == (1, p.L):
        o["m"] = o["m"].T
    nodes = make_nodes(p, n, 1, "mc", rng)
    w, hs, _, _ = fields(o, p, nodes)
    x = prox(w[0], hs[0], o["V"], p).x
    J = prox_jacobian(x, hs[0], o["V"], p) - np.eye(p.L)[None]
    v = alpha * (J**2).sum(axis=(1, 2))
    return RepliconResult(
        value=float(v.mean()),
        value_err=float(v.std(ddof=1) / math.sqrt(v.size)),
        params=dict(p.to_dict(), alpha=float(alpha)),
        metadata=dict(method="mc", n=int(n)),
    )
