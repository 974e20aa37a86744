"""Paper 1 (Cui, Behrens, Krzakala, Zdeborová): positional vs semantic learning in a tied
low-rank dot-product attention layer, by empirical risk minimisation (docs/attention.md).

>>> from theory import attention as A
>>> p = A.ERMParams(omega=0.3)                                  # the one parameter object
>>> r = A.fixed_point(2.0, p, "semantic")                       # doctest: +SKIP
>>> A.transition(p).alpha_c                                     # doctest: +SKIP
>>> A.simulate_gd(2.0, p, d=400, init="semantic", seed=0).eps_g  # doctest: +SKIP

Modules, one role each: ``params`` (ERMParams), ``channel`` (the per-sample loss),
``proximal`` (its prox; numba kernels in ``_kernels``), ``quadrature`` (the rules; kernels in
``_quadrature_kernels``), ``state_equations`` (hats, ridge step, Φ), ``solver`` (fixed points
on a branch), ``spinodal`` (where a branch begins), ``phases`` (curves, transition, phase
diagram), ``baseline`` (the linear baseline), ``finite_d`` (data, gradient descent, GAMP
and its state evolution), ``general`` (any L, r, r_t), ``figures``.
"""

from theory.attention.baseline import linear_baseline, linear_baseline_B
from theory.attention.channel import loss, loss_grad, softmax_diag, teacher_diag
from theory.attention.finite_d import (
    ERMSimResult,
    GAMPResult,
    SEResult,
    TrackingResult,
    make_problem,
    run_gamp,
    simulate_gd,
    state_evolution,
    tracking,
)
from theory.attention.params import A_REFERENCE, ERMParams, as_params
from theory.attention.phases import (
    CurveResult,
    PhaseDiagramResult,
    TransitionResult,
    curve,
    global_minimiser,
    is_candidate,
    phase_diagram,
    transition,
)
from theory.attention.proximal import ProxResult, prox, prox_rows
from theory.attention.quadrature import Rule, make_rule
from theory.attention.solver import BRANCHES, ERMResult, fixed_point, label_branch
from theory.attention.spinodal import (
    SpinodalResult,
    amplitude,
    bifurcation_eigenvalue,
    saddle_node,
    spinodal,
)
from theory.attention.state_equations import (
    free_energy,
    hats_from_channel,
    overlaps_from_hats,
    state_map,
)

__all__ = [
    "A_REFERENCE",
    "BRANCHES",
    "CurveResult",
    "ERMParams",
    "ERMResult",
    "ERMSimResult",
    "GAMPResult",
    "PhaseDiagramResult",
    "ProxResult",
    "Rule",
    "SEResult",
    "SpinodalResult",
    "TrackingResult",
    "TransitionResult",
    "amplitude",
    "as_params",
    "bifurcation_eigenvalue",
    "curve",
    "fixed_point",
    "free_energy",
    "global_minimiser",
    "hats_from_channel",
    "is_candidate",
    "label_branch",
    "linear_baseline",
    "linear_baseline_B",
    "loss",
    "loss_grad",
    "make_problem",
    "make_rule",
    "overlaps_from_hats",
    "phase_diagram",
    "prox",
    "prox_rows",
    "run_gamp",
    "saddle_node",
    "simulate_gd",
    "softmax_diag",
    "state_evolution",
    "spinodal",
    "state_map",
    "teacher_diag",
    "tracking",
    "transition",
]
