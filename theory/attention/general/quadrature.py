"""Gaussian nodes of the general model's expectations (docs/attention.md §10): scrambled
Sobol QMC (``n_rep`` independent scramblings, whose spread gives the error bars) or i.i.d.
normals, FROZEN during an iteration (the map is then deterministic)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.general.params import GeneralParams, as_params
from theory.rng import RNGLike, as_rng

__all__ = ["Nodes", "make_nodes", "replicate_errors"]


@dataclass(frozen=True)
class Nodes:
    """Gaussian nodes: xi (R, N, L, r), eta (R, N, L, r_t); R independent scramblings (QMC) or
    independent batches (MC) of N points each, equal weights."""

    xi: np.ndarray
    eta: np.ndarray
    method: str

    @property
    def n_rep(self) -> int:
        return self.xi.shape[0]

    @property
    def n(self) -> int:
        return self.xi.shape[1]

    def subset(self, k: int) -> Nodes:
        return Nodes(self.xi[k : k + 1], self.eta[k : k + 1], self.method)

    def describe(self) -> dict:
        return dict(method=self.method, n=self.n, n_rep=self.n_rep)


def make_nodes(
    params: GeneralParams | Mapping | None,
    n: int = 2**13,
    n_rep: int = 4,
    method: str = "qmc",
    rng: RNGLike = 0,
) -> Nodes:
    """``n_rep`` independent scramblings of ``n`` scrambled-Sobol normal points in L(r + r_t)
    dimensions (``method="qmc"``, n a power of 2), or i.i.d. normals (``"mc"``)."""
    from theory.gauss import sobol_normal

    p = as_params(params)
    n, n_rep = int(n), int(n_rep)
    if n < 2 or n_rep < 1:
        raise ValueError(f"need n >= 2 points and n_rep >= 1 replicates, got n={n}, n_rep={n_rep}")
    gen = as_rng(rng)
    dim = p.dim
    if method == "qmc":
        if n & (n - 1):
            raise ValueError(f"QMC needs a power-of-2 number of points, got n={n}")
        z = np.stack([sobol_normal(n, dim, gen) for _ in range(n_rep)])
    elif method == "mc":
        z = gen.standard_normal((n_rep, n, dim))
    else:
        raise ValueError(f"method must be 'qmc' or 'mc', got {method!r}")
    Lr = p.L * p.r
    xi = np.ascontiguousarray(z[..., :Lr].reshape(n_rep, n, p.L, p.r))
    eta = np.ascontiguousarray(z[..., Lr:].reshape(n_rep, n, p.L, p.r_t))
    return Nodes(xi, eta, method)


def replicate_errors(reps: list[dict], keys) -> dict:
    """``<key>_err``: the standard error over replicates (scramblings) of each ``key``, from the
    per-replicate values ``reps`` (floats or arrays; floats come back as floats)."""
    out = {}
    for key in keys:
        arr = np.array([np.asarray(r[key], float) for r in reps])
        e = arr.std(axis=0, ddof=1) / np.sqrt(len(reps))
        out[f"{key}_err"] = float(e) if e.ndim == 0 else e
    return out
