"""The finite-d side of the attention model: data (``data``), the instance and its risk
(``problem``), full-batch minimisation (``gd``), GAMP (``gamp``) and its state evolution
(``state_evolution``), the general-L simulator (``general``).  Every function takes the model's
:class:`~theory.attention.params.ERMParams` (``GeneralParams`` for ``general``)."""

from theory.attention.finite_d.gamp import GAMPResult, run_gamp
from theory.attention.finite_d.gd import ERMSimResult, simulate_gd
from theory.attention.finite_d.problem import FiniteDResult, Problem, make_problem
from theory.attention.finite_d.state_evolution import (
    SEResult,
    TrackingResult,
    state_evolution,
    state_evolution_onetime,
    tracking,
)

__all__ = [
    "ERMSimResult",
    "FiniteDResult",
    "GAMPResult",
    "Problem",
    "SEResult",
    "TrackingResult",
    "make_problem",
    "run_gamp",
    "simulate_gd",
    "state_evolution",
    "state_evolution_onetime",
    "tracking",
]
