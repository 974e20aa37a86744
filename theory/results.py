"""The result contract shared by theory and simulation.

Every public computation returns a frozen dataclass that subclasses :class:`Result`:

* the named quantities it computed, as fields.  Theory and simulation of one model use the same
  names (``alpha, q, m, theta, eps_t, eps_g`` for the attention model; ``t, steps, e, m, risk``
  for SGD), and an estimate with an error bar carries it in ``<field>_err``, so overlaying a
  theory curve on simulation points is one call (:func:`theory.plotting.overlay`);
* ``status``: ``"converged"`` / ``"ok"`` (a direct computation), or why not: ``"max_iter"``,
  ``"max_time"`` (a time bound spent, the message names it), ``"nan"``, ``"diverged"``; or an
  answer that is not a number: ``"no_transition"``, ``"no_spinodal"`` (none in the range
  searched, message says which).  A computation that did not converge says so here and in
  ``message``; it never returns a silent number;
* ``history``: one shape everywhere -- a dict of numpy arrays that share their first axis (the
  iteration, epoch or record index), e.g. ``{"iteration": (n,), "q": (n,), "residual": (n,)}``;
  ``None`` when not kept.  :func:`as_history` builds it from rows or columns;
* ``params`` (the inputs) and ``metadata`` (method, nodes, tolerance, package ``version``).

``to_dict()`` gives JSON-ready values and ``row()`` one tidy table row (the scalar fields plus
the params).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from theory import __version__
from theory._util import to_jsonable

STATUSES = (
    "converged",
    "max_iter",
    "max_time",
    "nan",
    "diverged",
    "ok",
    "no_transition",
    "no_spinodal",
)

__all__ = ["STATUSES", "Result", "as_history"]


def as_history(history) -> dict[str, np.ndarray] | None:
    """The one history shape: a dict of arrays with a common first axis.

    Accepts ``None``, a dict of columns (lists or arrays; a ``None`` column is dropped), or a
    sequence of row dicts (a key missing from a row becomes NaN).
    """
    if history is None:
        return None
    if isinstance(history, Mapping):
        cols = {str(k): np.asarray(v) for k, v in history.items() if v is not None}
    else:
        rows = list(history)
        if not rows:
            return {}
        if not all(isinstance(r, Mapping) for r in rows):
            raise ValueError("a history is a dict of columns or a list of row dicts")
        names = list(dict.fromkeys(k for r in rows for k in r))
        cols = {str(k): np.asarray([r.get(k, math.nan) for r in rows]) for k in names}
    lengths = {v.shape[0] if v.ndim else None for v in cols.values()}
    if None in lengths or len(lengths) > 1:
        shapes = {k: v.shape for k, v in cols.items()}
        raise ValueError(f"history columns must share their first axis, got shapes {shapes}")
    return cols


@dataclass(frozen=True)
class Result:
    status: str = "ok"
    message: str = ""
    history: Any = field(default=None, repr=False, compare=False)
    params: dict = field(default_factory=dict, repr=False)
    metadata: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        object.__setattr__(self, "history", as_history(self.history))
        if "version" not in self.metadata:
            self.metadata["version"] = __version__

    @property
    def converged(self) -> bool:
        return self.status in ("converged", "ok")

    def to_dict(self, *, history: bool = False) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            if f.name == "history" and not history:
                continue
            out[f.name] = getattr(self, f.name)
        return to_jsonable(out)

    def row(self) -> dict:
        """One tidy table row: the scalar fields plus the params, no history/metadata."""
        out = dict(self.params)
        for f in dataclasses.fields(self):
            if f.name in ("history", "params", "metadata"):
                continue
            out[f.name] = getattr(self, f.name)
        return to_jsonable(out)
