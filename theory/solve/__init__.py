"""Shared numerical solvers (docs/solver.md).

* :func:`iterate` -- the one iteration loop (fixed points of the state equations, GAMP and its
  state evolution) with the strategies :class:`Damped`, :class:`Anderson`,
  :class:`QuasiNewton` and the stop rule :class:`DecayStop`;
* :func:`solve_two_fidelity` -- a fixed point of an expensive map helped by a cheap one;
* :func:`follow`, :func:`sweep`, :func:`bracket`, :func:`find_root` -- continuation along a
  control parameter and the roots (transitions) between branches;
* :func:`integrate_log_time` -- ODE integration on log-spaced times (``theory.solve.ode``).
"""

from theory.solve.iterate import (
    MAP_FAILURES,
    Anderson,
    Damped,
    DecayStop,
    IterationResult,
    Packing,
    QuasiNewton,
    Step,
    damp,
    iterate,
    relative_residual,
)
from theory.solve.roots import RootResult, bracket, extrapolate, find_root, follow, sweep
from theory.solve.two_fidelity import ACCELERATIONS, solve_two_fidelity

__all__ = [
    "ACCELERATIONS",
    "MAP_FAILURES",
    "Anderson",
    "Damped",
    "DecayStop",
    "IterationResult",
    "Packing",
    "QuasiNewton",
    "RootResult",
    "Step",
    "bracket",
    "damp",
    "extrapolate",
    "find_root",
    "follow",
    "iterate",
    "relative_residual",
    "solve_two_fidelity",
    "sweep",
]
