"""The semantic/positional phase diagram of SGD for the positional-semantic attention model
(L = 2, P_1 = -P_2, identity reduction, target docs/ssi.md eq. 3; docs/ssi.md section 8).

Each (a, omega) is classified by three booleans -- is the global minimum positional, is the
steepest-descent direction at the origin positional, do both candidate minima exist -- decided
on exact criteria: derivatives of R at the origin and at the two candidates (semantic (e, m) =
(0, 1), positional (1, 0)) reduced to 2-D Gaussian integrals (Stein in e, Price/Mehler in m),
each affine in omega for fixed a (eqs. 32-34).  :func:`boundaries` finds where each flips on a
line a = const by Brent roots; :func:`phase_diagram` classifies a grid into :data:`REGIONS`;
:func:`landscape` tabulates R(e, m) on the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq

from theory._util import check_int, check_positive
from theory.gauss import gh_rule
from theory.results import Result
from theory.ssi._kernels import attention_jac
from theory.ssi.tables import PSTables, ps_tables
from theory.ssi.targets import positional_matrix, positional_weight

__all__ = [
    "REGIONS",
    "PD_NODES",
    "CriteriaResult",
    "ClassificationResult",
    "BoundariesResult",
    "PhaseDiagramResult",
    "LandscapeResult",
    "pd_criteria",
    "pd_booleans",
    "boundaries",
    "phase_diagram",
    "landscape",
]


@dataclass(frozen=True, kw_only=True)
class CriteriaResult(Result):
    """The exact criteria (arrays broadcast over a and omega): R_ee and R_mm at the origin,
    R_m and R_ee at the semantic candidate (0, 1), R_e and R_mm at the positional candidate
    (1, 0), the second derivatives along the circle ``curv_sem`` = R_ee(0,1) - R_m(0,1) and
    ``curv_pos`` = R_mm(1,0) - R_e(1,0), and ``dR_pos_minus_sem`` = R(1, 0) - R(0, 1)."""

    Ree00: Any = None
    Rmm00: Any = None
    Rm01: Any = None
    Ree01: Any = None
    Re10: Any = None
    Rmm10: Any = None
    curv_sem: Any = None
    curv_pos: Any = None
    dR_pos_minus_sem: Any = None
    a: Any = None
    omega: Any = None
    nodes: int = 0


@dataclass(frozen=True, kw_only=True)
class ClassificationResult(Result):
    """The booleans of docs/ssi.md section 8 (arrays broadcast over a and omega):
    ``global_positional``, ``steepest_positional``, ``both_minima``, which candidates are
    boundary minima (``semantic_min``, ``positional_min``), the ``region`` index into
    :data:`REGIONS` (-1: neither candidate is a minimum) and the ``criteria`` they come from."""

    global_positional: Any = None
    steepest_positional: Any = None
    both_minima: Any = None
    semantic_min: Any = None
    positional_min: Any = None
    region: Any = None
    criteria: CriteriaResult | None = field(default=None, repr=False)
    a: Any = None
    omega: Any = None
    nodes: int = 0


@dataclass(frozen=True, kw_only=True)
class BoundariesResult(Result):
    """The omega in [0, 1] where each boolean flips on the line a = const (None: no flip)."""

    a: float = 0.0
    omega_steepest_switch: float | None = None
    omega_global_switch: float | None = None
    omega_positional_min_appears: float | None = None
    omega_semantic_min_disappears: float | None = None
    nodes: int = 0


@dataclass(frozen=True, kw_only=True)
class PhaseDiagramResult(ClassificationResult):
    """The classification on a grid: ``a`` (n_a,), ``omega`` (n_omega,), every array of
    :class:`ClassificationResult` of shape (n_a, n_omega), ``regions`` (the names of the region
    indices) and, with ``check_global``, ``global_check`` (True where no point of the disk is
    lower than the better candidate by more than 1e-6)."""

    regions: tuple = ()
    global_check: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class LandscapeResult(Result):
    """R(e, m) on a grid of [-1, 1]^2: ``e``, ``m`` (n,), ``risk`` (n, n), risk[i, j] =
    R(e[j], m[i]) (NaN outside the disk e^2 + m^2 <= 1)."""

    a: float = 0.0
    omega: float = 0.0
    e: np.ndarray = field(default=None, repr=False)
    m: np.ndarray = field(default=None, repr=False)
    risk: np.ndarray = field(default=None, repr=False)


REGIONS = (
    "unique semantic",
    "unique semantic, positional initial dynamics",
    "unique positional",
    "global semantic (SGD finds it)",
    "global semantic, SGD to local positional",
    "global positional",
)
PD_NODES = 200  # default 2-D Gauss-Hermite nodes per dimension for the phase-diagram integrals
MAX_PD_NODES = 2000  # n^2 points per integral
MAX_PD_POINTS = 4_000_000  # (a, omega) points of one phase diagram


@lru_cache(maxsize=8)
def _blocks(n: int = PD_NODES) -> dict:
    """a- and omega-independent building blocks of R (2-D integrals only; docs/ssi.md eq. 32).

    R(e, m) = C - 2 (1-omega) X(e, m) - 2 omega <A_a, F1(e)> + F2(e),
    X = E<S(xi), S(z)>, F1(e) = E S(v + zeta), F2(e) = E||S(v + zeta)||^2, v = (e, -e).
    e-derivatives by Stein along u = zeta_1 - zeta_2 (var 2): d/de -> *u, d^2/de^2 -> *(u^2-2).
    m-derivatives by Price/Mehler: X_mm(e, 0) = sum_{lk} <E[S He_lk], E[S(v+.) He_lk]>,
    X_m(0, 1) = sum_l E||d_l S||^2, X_ee(0, 1) = E<S, DS> u - E||DS||^2 (D = d_1 - d_2).
    """
    x, w = gh_rule(n)
    Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    u = Z[:, 0] - Z[:, 1]
    # He_{e_l + e_k}(zeta) = zeta_l zeta_k - delta_lk
    he2 = {
        (0, 0): Z[:, 0] ** 2 - 1,
        (0, 1): Z[:, 0] * Z[:, 1],
        (1, 0): Z[:, 0] * Z[:, 1],
        (1, 1): Z[:, 1] ** 2 - 1,
    }
    pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]

    def S_at(e):
        A, dA = attention_jac(Z + np.array([e, -e])[None])
        return A, dA

    out = {}
    S0, dS0 = S_at(0.0)
    out["ES0"] = np.einsum("n,nij->ij", W, S0)
    for e in (0.0, 1.0):
        S, _ = S_at(e)
        F2v = np.sum(S**2, axis=(1, 2))
        out[("F1", e, 0)] = np.einsum("n,nij->ij", W, S)
        out[("F1", e, 1)] = np.einsum("n,nij->ij", W * u, S)
        out[("F1", e, 2)] = np.einsum("n,nij->ij", W * (u * u - 2), S)
        out[("F2", e, 0)] = float(W @ F2v)
        out[("F2", e, 1)] = float((W * u) @ F2v)
        out[("F2", e, 2)] = float((W * (u * u - 2)) @ F2v)
        T = {p: np.einsum("n,nij->ij", W * he2[p], S) for p in pairs}
        out[("U", e)] = T
    T0 = out[("U", 0.0)]
    out["Xmm0"] = {
        e: float(sum(np.sum(T0[p] * out[("U", e)][p]) for p in pairs)) for e in (0.0, 1.0)
    }
    out["X01"] = out[("F2", 0.0, 0)]
    out["Xm01"] = float(W @ np.sum(dS0**2, axis=(1, 2, 3)))
    DS = dS0[..., 0] - dS0[..., 1]
    out["Xee01"] = float((W * u) @ np.sum(S0 * DS, axis=(1, 2)) - W @ np.sum(DS**2, axis=(1, 2)))
    out["n"] = n
    return out


def _check_point(a, omega) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float)
    om = np.asarray(omega, dtype=float)
    if not np.all((a > 0) & (a <= 10)):
        raise ValueError("the positional strength a must lie in (0, 10]")
    if not np.all((om >= 0) & (om <= 1)):
        raise ValueError("omega must lie in [0, 1]")
    return a, om


def _criteria(a, omega, n: int = PD_NODES) -> dict:
    """The criteria as a dict of arrays (see :func:`pd_criteria`)."""
    n = check_int("nodes", n, lo=8, hi=MAX_PD_NODES)
    a, om = _check_point(a, omega)
    b = _blocks(n)
    p = positional_weight(a)

    def dotA(M):  # <A_a, M> for A_a = [[p, 1-p], [1-p, p]] (rows sum to 1)
        return p * (M[0, 0] + M[1, 1]) + (1 - p) * (M[0, 1] + M[1, 0])

    ES0 = b["ES0"]
    F1 = lambda e, k: b[("F1", e, k)]
    F2 = lambda e, k: b[("F2", e, k)]
    Xee00 = float(np.sum(ES0 * F1(0.0, 2)))
    Ree00 = -2 * (1 - om) * Xee00 - 2 * om * dotA(F1(0.0, 2)) + F2(0.0, 2)
    Rmm00 = -2 * (1 - om) * b["Xmm0"][0.0]
    # semantic candidate (0, 1)
    Rm01 = -2 * (1 - om) * b["Xm01"]
    Ree01 = -2 * (1 - om) * b["Xee01"] - 2 * om * dotA(F1(0.0, 2)) + F2(0.0, 2)
    # positional candidate (1, 0)
    Xe10 = float(np.sum(ES0 * F1(1.0, 1)))
    Re10 = -2 * (1 - om) * Xe10 - 2 * om * dotA(F1(1.0, 1)) + F2(1.0, 1)
    Rmm10 = -2 * (1 - om) * b["Xmm0"][1.0]
    # R(1, 0) - R(0, 1)
    X10 = float(np.sum(ES0 * F1(1.0, 0)))
    dR = (
        -2 * (1 - om) * (X10 - b["X01"])
        - 2 * om * dotA(F1(1.0, 0) - F1(0.0, 0))
        + F2(1.0, 0)
        - F2(0.0, 0)
    )
    return dict(
        Ree00=Ree00,
        Rmm00=Rmm00,
        Rm01=Rm01,
        Ree01=Ree01,
        Re10=Re10,
        Rmm10=Rmm10,
        curv_sem=Ree01 - Rm01,
        curv_pos=Rmm10 - Re10,
        dR_pos_minus_sem=dR,
    )


def _booleans(a, omega, n: int = PD_NODES) -> dict:
    """The classification as a dict of arrays (see :func:`pd_booleans`)."""
    c = _criteria(a, omega, n)
    sem = (c["Rm01"] < 0) & (c["curv_sem"] > 0)
    pos = (c["Re10"] < 0) & (c["curv_pos"] > 0)
    glob_pos = np.where(sem & pos, c["dR_pos_minus_sem"] < 0, pos & ~sem)
    steep_pos = c["Ree00"] < c["Rmm00"]
    both = sem & pos
    region = np.full(np.broadcast(sem, pos).shape, -1)
    region = np.where(sem & ~pos & ~steep_pos, 0, region)
    region = np.where(sem & ~pos & steep_pos, 1, region)
    region = np.where(pos & ~sem, 2, region)
    region = np.where(both & ~glob_pos & ~steep_pos, 3, region)
    region = np.where(both & ~glob_pos & steep_pos, 4, region)
    region = np.where(both & glob_pos, 5, region)
    return dict(
        global_positional=glob_pos,
        steepest_positional=steep_pos,
        both_minima=both,
        semantic_min=sem,
        positional_min=pos,
        region=region,
        criteria=c,
    )


def _flip(fun_bool, comps, lo=0.0, hi=1.0):
    """First omega in [lo, hi] where the boolean fun_bool(omega) flips; candidates are Brent roots
    of the scalar component criteria ``comps`` (each continuous in omega)."""
    roots = []
    grid = np.linspace(lo, hi, 41)
    for comp in comps:
        vals = [comp(x) for x in grid]
        for x0, x1, v0, v1 in zip(grid[:-1], grid[1:], vals[:-1], vals[1:]):
            if v0 == 0:
                roots.append(x0)
            elif v0 * v1 < 0:
                roots.append(brentq(comp, x0, x1, xtol=1e-14, rtol=1e-14))
        if vals[-1] == 0:
            roots.append(hi)
    for r in sorted(roots):
        eps = 1e-9
        if bool(fun_bool(max(lo, r - eps))) != bool(fun_bool(min(hi, r + eps))):
            return float(r)
    return None


def pd_criteria(a: ArrayLike, omega: ArrayLike, n: int = PD_NODES) -> CriteriaResult:
    """The exact criteria at (a, omega) (arrays broadcast; docs/ssi.md eqs. 33-34): derivatives
    of R at the origin and at the two candidate minima, each affine in omega for fixed a."""
    c = _criteria(a, omega, n)
    return CriteriaResult(**c, a=a, omega=omega, nodes=n)


def pd_booleans(a: ArrayLike, omega: ArrayLike, n: int = PD_NODES) -> ClassificationResult:
    """The three booleans of docs/ssi.md section 8, which candidates are minima, and the region
    index into :data:`REGIONS` (-1: neither candidate is a boundary minimum)."""
    out = _booleans(a, omega, n)
    crit = CriteriaResult(**out.pop("criteria"), a=a, omega=omega, nodes=n)
    return ClassificationResult(**out, criteria=crit, a=a, omega=omega, nodes=n)


def boundaries(a: float, n: int = PD_NODES) -> BoundariesResult:
    """omega in [0, 1] on the line a = A where each boolean of docs/ssi.md section 8 flips
    (None if none).

    ``omega_steepest_switch``: root of R_ee(0,0) - R_mm(0,0); ``omega_global_switch``: root of
    R(1,0) - R(0,1) (where both are minima); ``omega_positional_min_appears`` /
    ``omega_semantic_min_disappears``: where the exact boundary-minimum criteria (outward normal
    derivative < 0 and positive second derivative along the circle) change.  Roots by Brent on
    the exact criteria (each affine in omega for fixed a).
    """
    a = check_positive("a", a, hi=10)
    n = check_int("nodes", n, lo=8, hi=MAX_PD_NODES)
    cr = lambda om, key: float(_criteria(a, om, n)[key])
    bo = lambda om, key: bool(_booleans(a, om, n)[key])
    out = dict(
        omega_steepest_switch=_flip(
            lambda o: bo(o, "steepest_positional"), [lambda o: cr(o, "Ree00") - cr(o, "Rmm00")]
        ),
        omega_global_switch=_flip(
            lambda o: cr(o, "dR_pos_minus_sem") < 0, [lambda o: cr(o, "dR_pos_minus_sem")]
        ),
        omega_positional_min_appears=_flip(
            lambda o: bo(o, "positional_min"),
            [lambda o: cr(o, "Re10"), lambda o: cr(o, "curv_pos")],
        ),
        omega_semantic_min_disappears=_flip(
            lambda o: bo(o, "semantic_min"), [lambda o: cr(o, "Rm01"), lambda o: cr(o, "curv_sem")]
        ),
    )
    missing = [k for k, v in out.items() if v is None]
    msg = f"no flip in omega in [0, 1] for: {', '.join(missing)}" if missing else ""
    return BoundariesResult(a=a, nodes=n, **out, message=msg, params=dict(a=a, nodes=n))


def phase_diagram(
    a_grid: ArrayLike,
    omega_grid: ArrayLike,
    n: int = PD_NODES,
    *,
    check_global: bool = False,
    n_disk: int = 41,
) -> PhaseDiagramResult:
    """Classify every (a, omega) of the grid: arrays (n_a, n_omega) of the three booleans, the
    candidate-minimum flags and the region index into :data:`REGIONS` (-1 = none).

    ``check_global``: also scan R over a polar grid of the closed disk (``n_disk`` radii x
    4 n_disk angles, from the Mehler/Chebyshev tables) and return ``global_check`` = True where
    no disk point is lower than the better candidate by more than 1e-6 (i.e. the global minimum
    is one of the two candidates, as boolean 1 assumes)."""
    ag, wg = np.asarray(a_grid, float), np.asarray(omega_grid, float)
    if ag.ndim != 1 or wg.ndim != 1 or not len(ag) or not len(wg):
        raise ValueError("a_grid and omega_grid must be non-empty 1-D sequences")
    if ag.size * wg.size > MAX_PD_POINTS:
        raise ValueError(
            f"the grid has {ag.size} x {wg.size} points, more than {MAX_PD_POINTS}; use a "
            "coarser grid"
        )
    _check_point(ag, wg)
    n_disk = check_int("n_disk", n_disk, lo=2, hi=1000)
    A, O = np.meshgrid(ag, wg, indexing="ij")
    out = _booleans(A, O, n)
    crit = CriteriaResult(**out.pop("criteria"), a=A, omega=O, nodes=n)
    global_check = None
    if check_global:
        tb = ps_tables()
        r = np.linspace(0, 1, n_disk)
        th = np.linspace(0, 2 * np.pi, 4 * n_disk, endpoint=False)
        E = np.concatenate([np.outer(r, np.sin(th)).ravel(), [0.0, 1.0]])
        M = np.concatenate([np.outer(r, np.cos(th)).ravel(), [1.0, 0.0]])
        X = tb.X(E, M)
        F1 = tb._ev(tb.F1, E)  # (4, n_pts)
        F2 = tb._ev(tb.F2, E)
        ok = np.ones(A.shape, dtype=bool)
        for i, a in enumerate(ag):
            A4 = positional_matrix(a).ravel()
            AF = A4 @ F1
            # R - const(a, omega) on every disk point, for all omega at once
            Rr = F2[None] - 2 * (1 - wg)[:, None] * X[None] - 2 * wg[:, None] * AF[None]
            best = np.minimum(Rr[:, -2], Rr[:, -1])
            ok[i] = Rr[:, :-2].min(axis=1) >= best - 1e-6
        global_check = ok
    n_none = int(np.sum(out["region"] < 0))
    msg = f"{n_none} cells where neither candidate is a boundary minimum" if n_none else ""
    if global_check is not None and not np.all(global_check):
        bad = int(np.sum(~global_check))
        msg = (msg + "; " if msg else "") + f"{bad} cells where a third point of the disk is lower"
    return PhaseDiagramResult(
        a=ag,
        omega=wg,
        regions=REGIONS,
        nodes=n,
        **out,
        criteria=crit,
        global_check=global_check,
        message=msg,
        params=dict(nodes=n, check_global=check_global, n_disk=n_disk),
    )


def landscape(
    a: float, omega: float, n_grid: int = 121, tables: PSTables | None = None
) -> LandscapeResult:
    """R(e, m) of the positional-semantic model on an n_grid x n_grid grid of [-1, 1]^2 (NaN
    outside the disk): ``e`` and ``m`` (n_grid,) grids, ``risk`` (n_grid, n_grid) with
    risk[i, j] = R(e[j], m[i])."""
    if n_grid < 2:
        raise ValueError(f"n_grid must be >= 2, got {n_grid}")
    tb = tables or ps_tables()
    eg = np.linspace(-1, 1, n_grid)
    E, M = np.meshgrid(eg, eg)
    inside = E**2 + M**2 <= 1 + 1e-12
    R = np.full(E.shape, np.nan)
    R[inside] = tb.eval(E[inside], M[inside], omega, positional_matrix(a))["R"]
    return LandscapeResult(
        a=float(a), omega=float(omega), e=eg, m=eg.copy(), risk=R, params=dict(n_grid=n_grid)
    )
