"""Paper 2 (Arnaboldi, Loureiro, Stephan, Krzakala, Zdeborova): online SGD in sequence
single-index (SSI) models and single-layer tied attention.  The mathematics: docs/ssi.md.

The public surface (each name lives in one module, imported on first use, so that ``theory sie``
does not pay for numba and the risk engines):

* the target language -- ``parse_target``, ``as_target``, ``Target``,
  ``PositionalSemanticTarget``, ``positional_matrix`` (``theory.ssi.targets``);
* Hermite expansion and SIE -- ``analyze``, ``sie``, ``hermite_tensors``, ``op_norm``,
  ``gains``, ``SIEReport`` (``theory.ssi.hermite``);
* the problem objects and their risk engines -- ``AttentionModel``, ``TiedNetwork``,
  ``UntiedNetwork``, ``ps_model`` (``theory.ssi.risk``; tables in ``theory.ssi.tables``);
* the ODE -- ``integrate_ode``, ``rhs``, ``ODEResult`` (``theory.ssi.ode``);
* flatness -- ``flatness`` (``theory.ssi.flatness``);
* the phase diagram -- ``boundaries``, ``phase_diagram``, ``landscape``, ``pd_criteria``,
  ``pd_booleans``, ``pd_direction``, ``teacher_matrix``, ``strength_matrix``, ``REGIONS``
  (``theory.ssi.phase_diagram``);
* escape times and gains -- ``gain_curve``, ``predicted_escape``, ``drift_constants``
  (``theory.ssi.gain``);
* finite-d SGD -- ``simulate_sgd`` (``theory.ssi.sgd.full``), ``simulate_reduced``
  (``theory.ssi.sgd.reduced``), ``simulate_seeds``, ``load_results``, ``seeds_from``
  (``theory.ssi.sgd.seeds``), ``SGDResult``.

>>> from theory.ssi import analyze, TiedNetwork, integrate_ode, simulate_seeds  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import sys
import types

_HOME = {
    "targets": (
        "SequenceTarget",
        "Target",
        "PositionalSemanticTarget",
        "parse_target",
        "as_target",
        "positional_matrix",
        "positional_weight",
    ),
    "hermite": ("SIEReport", "analyze", "sie", "hermite_tensors", "op_norm", "gains"),
    "risk": ("SSIModel", "AttentionModel", "TiedNetwork", "UntiedNetwork", "ps_model"),
    "tables": ("ps_tables",),
    "trajectory": ("Trajectory", "classify_minimum"),
    "ode": ("ODEResult", "rhs", "integrate_ode"),
    "flatness": ("FlatnessResult", "flatness"),
    "phase_diagram": (
        "REGIONS",
        "boundaries",
        "phase_diagram",
        "landscape",
        "pd_criteria",
        "pd_booleans",
        "pd_direction",
        "teacher_matrix",
        "strength_matrix",
        "teacher_logits",
        "classify_numerical",
    ),
    "gain": ("gain_curve", "predicted_escape", "drift_constants"),
    "sgd.driver": ("SGDResult",),
    "sgd.full": ("simulate_sgd",),
    "sgd.reduced": ("simulate_reduced",),
    "sgd.seeds": ("simulate_seeds", "load_results", "seeds_from"),
}
_WHERE = {name: mod for mod, names in _HOME.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'theory.ssi' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"theory.ssi.{mod}"), name)
    setattr(sys.modules[__name__], name, value)
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Two modules share their name with the function they define (``flatness``,
    ``phase_diagram``).  Importing such a module binds the module as an attribute of the package;
    this keeps the public name pointing at the function (``theory.ssi.flatness`` is the function,
    ``from theory.ssi.flatness import FlatnessResult`` still reads the module)."""

    def __setattr__(self, name, value):
        if name in _WHERE and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
