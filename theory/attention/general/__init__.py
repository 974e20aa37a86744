"""The general attention model: any sequence length L, student rank r, teacher rank r_t, any
row-stochastic A and positional encodings (docs/attention.md §10).  Derived, not published:
validated against finite-d L-BFGS (``theory.attention.finite_d.general``).

Modules: ``params`` (GeneralParams), ``channel`` (the loss), ``proximal`` (its prox; numba
kernels in ``_kernels``), ``quadrature`` (QMC nodes), ``state_equations``, ``solver`` (fixed
points with QMC error bars), ``fixed_m`` (the RS profile at fixed m), ``stability`` (the
replicon quantity), ``baseline`` (the linear baseline), ``phases`` (α_c, α_l and the RS
restarts check).
"""

from theory.attention.general.baseline import LinearBaselineResult, linear_baseline
from theory.attention.general.fixed_m import FixedMResult, fixed_m_map, fixed_m_point
from theory.attention.general.params import GeneralParams, as_params, default_A, simplex_gram
from theory.attention.general.phases import (
    GeneralTransitionResult,
    RSCheckResult,
    rs_check,
    transition,
)
from theory.attention.general.proximal import ProxResult, prox, prox_jacobian, prox_reference
from theory.attention.general.quadrature import Nodes, make_nodes
from theory.attention.general.solver import (
    BRANCHES,
    GeneralERMResult,
    default_init,
    fixed_point,
    label_branch,
)
from theory.attention.general.stability import RepliconResult, replicon_smooth
from theory.attention.general.state_equations import (
    free_energy,
    hats_from_channel,
    overlaps_from_hats,
    pooled,
)

__all__ = [
    "BRANCHES",
    "FixedMResult",
    "GeneralERMResult",
    "GeneralParams",
    "GeneralTransitionResult",
    "LinearBaselineResult",
    "Nodes",
    "ProxResult",
    "RSCheckResult",
    "RepliconResult",
    "as_params",
    "default_A",
    "default_init",
    "fixed_m_map",
    "fixed_m_point",
    "fixed_point",
    "free_energy",
    "hats_from_channel",
    "label_branch",
    "linear_baseline",
    "make_nodes",
    "overlaps_from_hats",
    "pooled",
    "prox",
    "prox_jacobian",
    "prox_reference",
    "replicon_smooth",
    "rs_check",
    "simplex_gram",
    "transition",
]
