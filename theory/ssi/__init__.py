"""Paper 2 (Arnaboldi, Loureiro, Stephan, Krzakala, Zdeborova): online SGD in sequence
single-index (SSI) models and single-layer tied attention.  The mathematics: docs/ssi.md.

The public surface (each name lives in one module):

* the target language -- ``parse_target``, ``as_target``, ``Target``,
  ``PositionalSemanticTarget``, ``positional_matrix`` (``theory.ssi.targets``);
* Hermite expansion and SIE -- ``analyze``, ``sie``, ``hermite_tensors``, ``op_norm``,
  ``gains``, ``SIEReport`` (``theory.ssi.hermite``);
* the problem objects and their risk engines -- ``AttentionModel``, ``TiedNetwork``,
  ``UntiedNetwork``, ``ps_model`` (``theory.ssi.risk``; tables in ``theory.ssi.tables``);
* the ODE -- ``integrate_ode``, ``rhs``, ``ODEResult`` (``theory.ssi.ode``);
* flatness -- ``flatness`` (``theory.ssi.flatness``);
* the phase diagram -- ``boundaries``, ``phase_diagram``, ``landscape``, ``pd_criteria``,
  ``pd_booleans``, ``REGIONS`` (``theory.ssi.phase_diagram``);
* escape times and gains -- ``gain_curve``, ``predicted_escape``, ``drift_constants``
  (``theory.ssi.gain``);
* finite-d SGD -- ``simulate_sgd`` (``theory.ssi.sgd.full``), ``simulate_reduced``
  (``theory.ssi.sgd.reduced``), ``simulate_seeds``, ``load_results``, ``seeds_from``
  (``theory.ssi.sgd.seeds``), ``SGDResult``.

>>> from theory.ssi import analyze, TiedNetwork, integrate_ode, simulate_seeds  # doctest: +SKIP
"""

from __future__ import annotations

from theory.ssi.flatness import FlatnessResult, flatness
from theory.ssi.gain import drift_constants, gain_curve, predicted_escape
from theory.ssi.hermite import SIEReport, analyze, gains, hermite_tensors, op_norm, sie
from theory.ssi.ode import ODEResult, integrate_ode, rhs
from theory.ssi.phase_diagram import (
    REGIONS,
    boundaries,
    landscape,
    pd_booleans,
    pd_criteria,
    phase_diagram,
)
from theory.ssi.risk import AttentionModel, SSIModel, TiedNetwork, UntiedNetwork, ps_model
from theory.ssi.sgd.driver import SGDResult
from theory.ssi.sgd.full import simulate_sgd
from theory.ssi.sgd.reduced import simulate_reduced
from theory.ssi.sgd.seeds import load_results, seeds_from, simulate_seeds
from theory.ssi.tables import ps_tables
from theory.ssi.targets import (
    PositionalSemanticTarget,
    SequenceTarget,
    Target,
    as_target,
    parse_target,
    positional_matrix,
)
from theory.ssi.trajectory import Trajectory, classify_minimum

__all__ = [
    "SequenceTarget",
    "Target",
    "PositionalSemanticTarget",
    "parse_target",
    "as_target",
    "positional_matrix",
    "SIEReport",
    "analyze",
    "sie",
    "hermite_tensors",
    "op_norm",
    "gains",
    "SSIModel",
    "AttentionModel",
    "TiedNetwork",
    "UntiedNetwork",
    "ps_model",
    "ps_tables",
    "Trajectory",
    "classify_minimum",
    "ODEResult",
    "rhs",
    "integrate_ode",
    "FlatnessResult",
    "flatness",
    "REGIONS",
    "boundaries",
    "phase_diagram",
    "landscape",
    "pd_criteria",
    "pd_booleans",
    "SGDResult",
    "simulate_sgd",
    "simulate_reduced",
    "simulate_seeds",
    "load_results",
    "seeds_from",
    "gain_curve",
    "predicted_escape",
    "drift_constants",
]
