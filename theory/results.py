"""Result objects shared by theory and simulation.

Every solver returns a frozen dataclass that subclasses :class:`Result`: the named order
parameters as fields, plus ``status`` ("converged", "max_iter", "nan", "diverged", or "ok" for a
direct computation), ``message``, ``history``, ``params`` (the inputs) and ``metadata`` (method,
nodes, tolerance, package version).  Theory and simulation of the same model use the same field
names so overlaying them is one call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from theory import __version__
from theory._util import to_jsonable

STATUSES = ("converged", "max_iter", "nan", "diverged", "ok")


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
        if "version" not in self.metadata:
            # frozen: mutate the dict in place (it is ours, created per instance or passed in)
            try:
                self.metadata["version"] = __version__
            except TypeError:
                pass

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
