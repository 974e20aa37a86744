"""The flatness index kappa of the risk at the origin (docs/ssi.md section 6, eq. 25): the
order of the first non-zero derivative of R(e, m) at (e, m) = (0, 0), where SGD starts."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from theory._util import check_int
from theory.results import Result
from theory.ssi.risk import SSIModel, _add, _unit
from theory.ssi.targets import MAX_DEGREE

__all__ = ["FlatnessResult", "flatness"]


@dataclass(frozen=True, kw_only=True)
class FlatnessResult(Result):
    """``kappa``: the flatness index (None: no non-zero derivative up to ``max_order``);
    ``hessian``: the Hessian of R at the origin in the reduced coordinates ``coordinates``
    (e.., m; untied network: m1..mL); ``exact``: the zero pattern is exact (Mehler engine,
    polynomial target); ``engine``: the risk engine used."""

    kappa: int | None = None
    hessian: np.ndarray = field(default=None, repr=False)
    coordinates: list = field(default_factory=list)
    exact: bool = False
    engine: str = ""


def flatness(model: SSIModel, max_order: int = 8, *, rel_tol: float = 1e-8) -> FlatnessResult:
    """Flatness index kappa = lowest k > 0 with grad^k R(0, 0) != 0, and the Hessian at 0
    (docs/ssi.md eq. 25).

    Hermite engine (polynomial targets): every derivative at the origin is

        d_e^alpha d_m^beta R(0,0)
            = [beta = 0] E[f(zeta)^2 He_alpha] - 2 a_beta beta! E[f He_{alpha+beta}]

    (raw coordinates), so the pattern of zeros coming from the target is exact (the a_beta are
    exact rationals) and the student moments are Gauss-Hermite integrals converged to ~1e-13; a
    derivative counts as zero when |value| <= rel_tol * (sum of |terms|) + 1e-12.  Quad engine
    (non-polynomial targets): only orders 1 and 2 (central differences); ValueError above.
    Returns a :class:`FlatnessResult`.
    """
    max_order = check_int("max_order", max_order, lo=1, hi=MAX_DEGREE)
    L = model.L
    coords = ["e"] * model.r + (["m"] if not model.untied else [f"m{i + 1}" for i in range(L)])

    def result(kappa, H):
        exact = model.engine == "hermite"
        if kappa is None:
            msg = f"no non-zero derivative of R at the origin up to order {max_order}"
        else:
            msg = f"lowest non-zero derivative of R at the origin: order {kappa}"
        return FlatnessResult(
            kappa=kappa,
            hessian=np.asarray(H),
            coordinates=coords,
            exact=exact,
            engine=model.engine,
            message=msg,
            params=dict(model=model.key(), max_order=max_order, rel_tol=rel_tol),
        )

    T = model._reduce_map()  # (2L, n)
    H = model.hessian(np.zeros(model.r) if model.r else None, np.zeros(L) if model.untied else 0.0)
    if model.engine != "hermite":
        ge, gm = model.grad(np.zeros(model.r) if model.r else None, 0.0)
        g = np.concatenate([np.atleast_1d(ge), np.atleast_1d(gm)])
        if np.max(np.abs(g)) > 1e-8:
            return result(1, H)
        if np.max(np.abs(H)) > 1e-6:
            return result(2, H)
        raise ValueError(
            "flatness above order 2 is exact only for polynomial targets; this "
            "target is not polynomial"
        )
    a1, _ = model._hermite_coefficients()
    n = T.shape[1]
    zero = (0,) * L
    for k in range(1, max_order + 1):
        # all raw multi-indices (alpha, beta) of total order k reachable from the reduced dirs
        combos = list(itertools.combinations_with_replacement(range(n), k))
        raw_needed = set()
        exp_list = []
        for cmb in combos:
            poly = {(zero, zero): 1.0}
            for j in cmb:
                new = {}
                for (al, be), cf in poly.items():
                    for q in range(2 * L):
                        v = T[q, j]
                        if v == 0:
                            continue
                        if q < L:
                            key = (_add(al, _unit(L, q)), be)
                        else:
                            key = (al, _add(be, _unit(L, q - L)))
                        new[key] = new.get(key, 0.0) + cf * v
                poly = new
            exp_list.append(poly)
            raw_needed |= set(poly)
        gam = set()
        for al, be in raw_needed:
            gam.add(al)
            if be in a1:
                gam.add(_add(al, be))
        gam = tuple(sorted(gam))
        M = model._direct_moments(np.zeros(L), gam)
        idx = {g_: i for i, g_ in enumerate(gam)}
        nonzero = False
        for poly in exp_list:
            val = 0.0
            scale = 0.0
            for (al, be), cf in poly.items():
                if be == zero:
                    term = cf * M["f2"][idx[al]]
                    val += term
                    scale += abs(term)
                if be in a1:
                    bf = math.prod(math.factorial(q) for q in be)
                    term = -2 * cf * a1[be] * bf * M["f"][idx[_add(al, be)]]
                    val += term
                    scale += abs(term)
            if abs(val) > rel_tol * scale + 1e-12:
                nonzero = True
                break
        if nonzero:
            return result(k, H)
    return result(None, H)
