"""The semantic/positional phase diagram of SGD for the positional-semantic attention model
(L = 2, identity reduction, target docs/ssi.md eq. 3 with ANY row-stochastic 2 x 2 A; docs/ssi.md
section 8 and "Boundaries of any L = 2 teacher").  The encoding is one reduced direction b
(e_raw = c b): P_1 = -P_2 (``pe="opposite"``, b = (1, -1), the paper's) or P_1 = P_2 (Gram
[[1, 1], [1, 1]], b = (1, 1)).

Each (a, omega) is classified by three booleans -- is the global minimum positional, is the
steepest-descent direction at the origin positional, do both candidate minima exist -- decided
on exact criteria: derivatives of R at the origin and at the two candidates (semantic (e, m) =
(0, 1), positional (1, 0)) reduced to 2-D Gaussian integrals (Stein in e, Price/Mehler in m),
each affine in omega and linear in A (eqs. 32-34).  :func:`boundaries` finds where each flips
on a line -- omega at fixed A, or the strength s of A(s) = softmax_row(s B) at fixed omega -- by
Brent roots; :func:`phase_diagram` classifies a (a, omega) or (s, omega) grid into
:data:`REGIONS`; :func:`landscape` tabulates R(e, m) on the disk.

Scope: L = 2 (the candidates and their exact criteria are those of a one-dimensional positional
coordinate; at L > 2, or with a Gram matrix of rank 2 at L = 2, the positional candidate is a
point of a sphere found by minimisation and these criteria do not apply: refused with a
ValueError), identity reduction (the only reduction the risk engine pairs with the matrix
target).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq

from theory._util import check_int, check_positive, check_row_stochastic, check_unit_interval
from theory.gauss import gh_rule
from theory.results import Result
from theory.ssi._kernels import attention_jac, softmax_rows
from theory.ssi.risk import _pe_basis
from theory.ssi.tables import PSTables, ps_tables
from theory.ssi.targets import positional_matrix

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
    "teacher_matrix",
    "strength_matrix",
    "FAMILY_LOGITS",
    "pd_direction",
    "teacher_logits",
    "FLIP_NAMES",
    "NumericalClassificationResult",
    "classify_numerical",
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
    A: Any = None
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
    A: Any = None
    omega: Any = None
    nodes: int = 0


@dataclass(frozen=True, kw_only=True)
class BoundariesResult(Result):
    """Where each boolean flips on one line of the phase diagram (None: no flip).

    ``along="omega"``: the line omega in [0, 1] at fixed A; the flips are ``omega_*``.
    ``along="strength"``: the line A(s) = softmax_row(s B), s in ``s_range``, at fixed ``omega``;
    the flips are ``s_*`` (``B`` the logits; s = 1 is the teacher given).  ``a`` is the A_a
    strength when the teacher is that family, ``A`` the teacher matrix (at s = 1 on a strength
    line), ``b`` the reduced encoding direction (e_raw = c b)."""

    along: str = "omega"
    a: float | None = None
    A: list | None = None
    B: list | None = None
    omega: float | None = None
    s_range: tuple | None = None
    b: tuple = (1.0, -1.0)
    omega_steepest_switch: float | None = None
    omega_global_switch: float | None = None
    omega_positional_min_appears: float | None = None
    omega_semantic_min_disappears: float | None = None
    s_steepest_switch: float | None = None
    s_global_switch: float | None = None
    s_positional_min_appears: float | None = None
    s_semantic_min_disappears: float | None = None
    nodes: int = 0


@dataclass(frozen=True, kw_only=True)
class PhaseDiagramResult(ClassificationResult):
    """The classification on a grid: ``a`` (n_a,) -- the A_a strengths, or with ``B`` given the
    strengths s of A(s) = softmax_row(s B) --, ``omega`` (n_omega,), every array of
    :class:`ClassificationResult` of shape (n_a, n_omega), ``regions`` (the names of the region
    indices) and, with ``check_global``, ``global_check`` (True where no point of the disk is
    lower than the better candidate by more than 1e-6)."""

    regions: tuple = ()
    global_check: np.ndarray | None = field(default=None, repr=False)
    B: Any = None
    b: tuple = (1.0, -1.0)


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
#: the logits of the A_a family: A_a = softmax_row(a^2 FAMILY_LOGITS) (docs/ssi.md eq. 3)
FAMILY_LOGITS = np.array([[1.0, -1.0], [-1.0, 1.0]])
MAX_STRENGTH_LOGIT = 700.0  # |s B_ij| beyond this overflows exp in double precision
OPPOSITE = (1.0, -1.0)


def teacher_matrix(a: float | None = None, A=None, A_logits=None) -> np.ndarray:
    """The 2 x 2 positional matrix of the teacher from exactly one of: the A_a strength ``a``,
    a row-stochastic ``A``, or pre-softmax ``A_logits`` (A = softmax_row(A_logits))."""
    given = [x is not None for x in (a, A, A_logits)]
    if sum(given) != 1:
        raise ValueError("give exactly one of a (the A_a family), A or A_logits")
    if a is not None:
        return positional_matrix(check_positive("a", a, hi=10))
    if A is not None:
        A = check_row_stochastic("A", A)
        if A.shape != (2, 2):
            raise ValueError(f"A must be 2x2 (L = 2), got shape {A.shape}")
        return A
    return softmax_rows(_check_logits("A_logits", A_logits))


def _check_logits(name, B) -> np.ndarray:
    B = np.asarray(B, dtype=float)
    if B.shape != (2, 2):
        raise ValueError(f"{name} must be 2x2 (L = 2), got shape {B.shape}")
    if not np.all(np.isfinite(B)):
        raise ValueError(f"{name} must be finite numbers, got {B.tolist()}")
    return B


def strength_matrix(s: ArrayLike, B) -> np.ndarray:
    """A(s) = softmax_row(s B) for strengths ``s`` (any shape) and 2 x 2 logits ``B``: an array
    ``(*s.shape, 2, 2)``.  With B = :data:`FAMILY_LOGITS`, A(a^2) = A_a."""
    B = _check_logits("B", B)
    s = np.asarray(s, dtype=float)
    if not np.all(np.isfinite(s)) or np.any(
        np.abs(s)[..., None, None] * np.abs(B) > MAX_STRENGTH_LOGIT
    ):
        raise ValueError(
            f"the strength s must be finite with |s B_ij| <= {MAX_STRENGTH_LOGIT:g} (exp overflow)"
        )
    return softmax_rows(s[..., None, None] * B)


def teacher_logits(A: ArrayLike) -> np.ndarray:
    """Logits B with softmax_row(B) = A (B = log A; every entry of A must be > 0): the default
    direction of a strength line through A (s = 1 is A)."""
    A = check_row_stochastic("A", A)
    if np.any(A <= 0):
        raise ValueError(
            "the strength line through A needs every entry of A > 0 (B = log A); give the "
            "logits B (--B / B=) instead"
        )
    return np.log(A)


def pd_direction(pe="opposite", reduction="identity", L: int = 2) -> tuple[float, float]:
    """The reduced encoding direction b (e_raw = c b) for which the exact criteria hold, or a
    ValueError saying why the problem is outside them: L must be 2, the reduction identity
    (the positional-semantic target is an L x L matrix; the risk engine pairs it with the
    identity reduction only) and the encoding Gram matrix of rank 1 (P_1 = -P_2 or P_1 = P_2;
    with rank 2 the positional candidate is a point of a circle, found by minimisation)."""
    L = check_int("L", L, lo=1, hi=64)
    if L != 2:
        raise ValueError(
            f"the exact phase-diagram criteria need L = 2 (got L = {L}): at L > 2 the positional "
            "candidate is not a fixed point of the sphere; classify one point numerically with "
            "`theory sgd classify` (theory.ssi.classify_numerical)"
        )
    if reduction != "identity":
        raise ValueError(
            f"reduction {reduction!r}: the positional-semantic target is a 2x2 matrix and the "
            "risk engine pairs it with the identity reduction only"
        )
    if isinstance(pe, str) and pe == "none":
        raise ValueError(
            "pe='none': without a positional encoding there is no positional candidate (R "
            "depends on m only); give pe='opposite' or a rank-1 Gram matrix"
        )
    B = _pe_basis(pe, 2)
    if B.shape[1] != 1:
        raise ValueError(
            "the exact criteria need a rank-1 encoding Gram matrix (P_1 = -P_2: [[1,-1],[-1,1]], "
            f"or P_1 = P_2: [[1,1],[1,1]]); this one has rank {B.shape[1]}, whose positional "
            "candidate is a point of a circle; classify one point numerically with `theory sgd "
            "classify` (theory.ssi.classify_numerical)"
        )
    b = B[:, 0] * np.sign(B[0, 0])
    b = np.where(np.abs(np.abs(b) - 1) < 1e-9, np.sign(b), b)  # exact +-1 for the cache key
    return (float(b[0]), float(b[1]))


@lru_cache(maxsize=8)
def _blocks(n: int = PD_NODES, b: tuple = OPPOSITE) -> dict:
    """A- and omega-independent building blocks of R (2-D integrals only; docs/ssi.md eq. 32).

    R(e, m) = C - 2 (1-omega) X(e, m) - 2 omega <A, F1(e)> + F2(e),
    X = E<S(xi), S(z)>, F1(e) = E S(v + zeta), F2(e) = E||S(v + zeta)||^2, v = e b.
    e-derivatives by Stein along u = b.zeta (var |b|^2): d/de -> *u, d^2/de^2 -> *(u^2-|b|^2).
    m-derivatives by Price/Mehler: X_mm(e, 0) = sum_{lk} <E[S He_lk], E[S(v+.) He_lk]>,
    X_m(0, 1) = sum_l E||d_l S||^2, X_ee(0, 1) = E<S, DS> u - E||DS||^2 (D = b.grad).
    """
    bv = np.asarray(b, dtype=float)
    bb = float(bv @ bv)
    x, w = gh_rule(n)
    Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    u = bv[0] * Z[:, 0] + bv[1] * Z[:, 1]
    # He_{e_l + e_k}(zeta) = zeta_l zeta_k - delta_lk
    he2 = {
        (0, 0): Z[:, 0] ** 2 - 1,
        (0, 1): Z[:, 0] * Z[:, 1],
        (1, 0): Z[:, 0] * Z[:, 1],
        (1, 1): Z[:, 1] ** 2 - 1,
    }
    pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]

    def S_at(e):
        A, dA = attention_jac(Z + e * bv[None])
        return A, dA

    out = {}
    S0, dS0 = S_at(0.0)
    out["ES0"] = np.einsum("n,nij->ij", W, S0)
    for e in (0.0, 1.0):
        S, _ = S_at(e)
        F2v = np.sum(S**2, axis=(1, 2))
        out[("F1", e, 0)] = np.einsum("n,nij->ij", W, S)
        out[("F1", e, 1)] = np.einsum("n,nij->ij", W * u, S)
        out[("F1", e, 2)] = np.einsum("n,nij->ij", W * (u * u - bb), S)
        out[("F2", e, 0)] = float(W @ F2v)
        out[("F2", e, 1)] = float((W * u) @ F2v)
        out[("F2", e, 2)] = float((W * (u * u - bb)) @ F2v)
        T = {p: np.einsum("n,nij->ij", W * he2[p], S) for p in pairs}
        out[("U", e)] = T
    T0 = out[("U", 0.0)]
    out["Xmm0"] = {
        e: float(sum(np.sum(T0[p] * out[("U", e)][p]) for p in pairs)) for e in (0.0, 1.0)
    }
    out["X01"] = out[("F2", 0.0, 0)]
    out["Xm01"] = float(W @ np.sum(dS0**2, axis=(1, 2, 3)))
    DS = bv[0] * dS0[..., 0] + bv[1] * dS0[..., 1]
    out["Xee01"] = float((W * u) @ np.sum(S0 * DS, axis=(1, 2)) - W @ np.sum(DS**2, axis=(1, 2)))
    out["n"] = n
    return out


def _check_omega(omega) -> np.ndarray:
    om = np.asarray(omega, dtype=float)
    if not np.all((om >= 0) & (om <= 1)):
        raise ValueError("omega must lie in [0, 1]")
    return om


def _check_a(a) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if not np.all((a > 0) & (a <= 10)):
        raise ValueError("the positional strength a must lie in (0, 10]")
    return a


def _criteria(A, omega, n: int = PD_NODES, b: tuple = OPPOSITE) -> dict:
    """The criteria as a dict of arrays (see :func:`pd_criteria`); ``A`` (..., 2, 2)
    broadcast against ``omega``."""
    n = check_int("nodes", n, lo=8, hi=MAX_PD_NODES)
    om = _check_omega(omega)
    A = np.asarray(A, dtype=float)
    bl = _blocks(n, b)

    def dotA(M):  # <A, M> = sum_ij A_ij M_ij
        return np.einsum("...ij,ij->...", A, M)

    ES0 = bl["ES0"]
    F1 = lambda e, k: bl[("F1", e, k)]
    F2 = lambda e, k: bl[("F2", e, k)]
    Xee00 = float(np.sum(ES0 * F1(0.0, 2)))
    Ree00 = -2 * (1 - om) * Xee00 - 2 * om * dotA(F1(0.0, 2)) + F2(0.0, 2)
    Rmm00 = -2 * (1 - om) * bl["Xmm0"][0.0]
    # semantic candidate (0, 1)
    Rm01 = -2 * (1 - om) * bl["Xm01"]
    Ree01 = -2 * (1 - om) * bl["Xee01"] - 2 * om * dotA(F1(0.0, 2)) + F2(0.0, 2)
    # positional candidate (1, 0)
    Xe10 = float(np.sum(ES0 * F1(1.0, 1)))
    Re10 = -2 * (1 - om) * Xe10 - 2 * om * dotA(F1(1.0, 1)) + F2(1.0, 1)
    Rmm10 = -2 * (1 - om) * bl["Xmm0"][1.0]
    # R(1, 0) - R(0, 1)
    X10 = float(np.sum(ES0 * F1(1.0, 0)))
    dR = (
        -2 * (1 - om) * (X10 - bl["X01"])
        - 2 * om * dotA(F1(1.0, 0) - F1(0.0, 0))
        + F2(1.0, 0)
        - F2(0.0, 0)
    )
    shape = np.broadcast_shapes(om.shape, A.shape[:-2])
    full = lambda v: np.broadcast_to(v, shape) if shape else v
    out = dict(
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
    return {k: full(v) for k, v in out.items()}


def _booleans(A, omega, n: int = PD_NODES, b: tuple = OPPOSITE) -> dict:
    """The classification as a dict of arrays (see :func:`pd_booleans`)."""
    c = _criteria(A, omega, n, b)
    return dict(_classify(c), criteria=c)


def _classify(c: dict) -> dict:
    """The booleans and the region index from the criteria ``c``."""
    sem = (c["Rm01"] < 0) & (c["curv_sem"] > 0)
    pos = (c["Re10"] < 0) & (c["curv_pos"] > 0)
    glob_pos = np.where(sem & pos, c["dR_pos_minus_sem"] < 0, pos & ~sem)
    steep_pos = c["Ree00"] < c["Rmm00"]
    return dict(
        global_positional=glob_pos,
        steepest_positional=steep_pos,
        both_minima=sem & pos,
        semantic_min=sem,
        positional_min=pos,
        region=_region(sem, pos, glob_pos, steep_pos),
    )


def _region(sem, pos, glob_pos, steep_pos) -> np.ndarray:
    """The index into :data:`REGIONS` (-1: neither candidate is a minimum)."""
    both = sem & pos
    region = np.full(np.broadcast(sem, pos).shape, -1)
    region = np.where(sem & ~pos & ~steep_pos, 0, region)
    region = np.where(sem & ~pos & steep_pos, 1, region)
    region = np.where(pos & ~sem, 2, region)
    region = np.where(both & ~glob_pos & ~steep_pos, 3, region)
    region = np.where(both & ~glob_pos & steep_pos, 4, region)
    return np.where(both & glob_pos, 5, region)


def _flip(fun_bool, comps, lo=0.0, hi=1.0):
    """First x in [lo, hi] where the boolean fun_bool(x) flips; candidates are Brent roots
    of the scalar component criteria ``comps`` (each continuous in x)."""
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


def _point_A(a, A, A_logits):
    """The teacher matrix (..., 2, 2) of pd_criteria / pd_booleans: A_a for an array ``a``."""
    if a is not None and A is None and A_logits is None:
        return positional_matrix(_check_a(a))
    if A is not None and a is None and A_logits is None:
        A = np.asarray(A, dtype=float)
        if A.shape[-2:] != (2, 2):
            raise ValueError(f"A must be (..., 2, 2), got shape {A.shape}")
        if np.any(A < 0) or not np.allclose(A.sum(-1), 1.0, atol=1e-10):
            raise ValueError("A must be row-stochastic (non-negative, rows summing to 1)")
        return A
    return teacher_matrix(a, A, A_logits)


def pd_criteria(
    a: ArrayLike | None = None,
    omega: ArrayLike | None = None,
    n: int = PD_NODES,
    *,
    A=None,
    A_logits=None,
    pe="opposite",
) -> CriteriaResult:
    """The exact criteria at (A, omega) (arrays broadcast; docs/ssi.md eqs. 33-34): derivatives
    of R at the origin and at the two candidate minima, each affine in omega for fixed A.  The
    teacher is A_a (``a``, an array allowed), ``A`` (..., 2, 2) or ``A_logits``."""
    if omega is None:
        raise ValueError("give omega (the positional weight in [0, 1])")
    Am = _point_A(a, A, A_logits)
    c = _criteria(Am, omega, n, pd_direction(pe))
    return CriteriaResult(**c, a=a, A=Am, omega=omega, nodes=n)


def pd_booleans(
    a: ArrayLike | None = None, omega: ArrayLike | None = None, n: int = PD_NODES, **teacher
) -> ClassificationResult:
    """The three booleans of docs/ssi.md section 8, which candidates are minima, and the region
    index into :data:`REGIONS` (-1: neither candidate is a boundary minimum); the teacher
    keywords (``A``, ``A_logits``, ``pe``) as in :func:`pd_criteria`."""
    crit = pd_criteria(a, omega, n, **teacher)
    out = _classify(crit.__dict__)
    return ClassificationResult(**out, criteria=crit, a=a, A=crit.A, omega=omega, nodes=n)


_FLIPS = (
    ("steepest_switch", "steepest_positional", lambda c: [c["Ree00"] - c["Rmm00"]]),
    ("global_switch", None, lambda c: [c["dR_pos_minus_sem"]]),
    ("positional_min_appears", "positional_min", lambda c: [c["Re10"], c["curv_pos"]]),
    ("semantic_min_disappears", "semantic_min", lambda c: [c["Rm01"], c["curv_sem"]]),
)


#: the four flips of :func:`boundaries` (fields ``omega_<name>`` or ``s_<name>``)
FLIP_NAMES = tuple(name for name, _, _ in _FLIPS)


def boundaries(
    a: float | None = None,
    n: int = PD_NODES,
    *,
    A=None,
    A_logits=None,
    along: str = "omega",
    omega: float | None = None,
    B=None,
    s_range: tuple[float, float] = (0.0, 4.0),
    pe="opposite",
    reduction: str = "identity",
    L: int = 2,
) -> BoundariesResult:
    """Where each boolean of docs/ssi.md section 8 flips on one line of the phase diagram of an
    L = 2 teacher y = (1 - omega) softmax_row(z* z*^T) + omega A (None where it does not).

    Teacher: exactly one of ``a`` (A_a), ``A`` (row-stochastic 2 x 2) or ``A_logits``.
    ``along="omega"``: omega in [0, 1] at fixed A (``omega_*`` fields).  ``along="strength"``:
    s in ``s_range`` on A(s) = softmax_row(s B) at fixed ``omega`` (``s_*`` fields); ``B``
    defaults to the teacher's logits (A_logits, a^2 FAMILY_LOGITS for A_a, else log A), so s = 1
    is the teacher given.  ``pe``: "opposite" (P_1 = -P_2) or a rank-1 Gram matrix;
    ``reduction`` and ``L`` are checked (identity, 2; see :func:`pd_direction`).

    ``*_steepest_switch``: root of R_ee(0,0) - R_mm(0,0); ``*_global_switch``: root of
    R(1,0) - R(0,1) (where both are minima); ``*_positional_min_appears`` /
    ``*_semantic_min_disappears``: where the exact boundary-minimum criteria (outward normal
    derivative < 0 and positive second derivative along the circle) change.  Roots by Brent on
    the exact criteria (affine in omega, smooth in s), bracketed on 41 points of the line.
    """
    n = check_int("nodes", n, lo=8, hi=MAX_PD_NODES)
    b = pd_direction(pe, reduction, L)
    A0 = teacher_matrix(a, A, A_logits)
    if a is not None:
        a = float(a)
    if along == "omega":
        if omega is not None or B is not None:
            raise ValueError(
                "along='omega' scans omega: drop omega= and B= (they fix a strength line)"
            )
        lo, hi = 0.0, 1.0
        mat = lambda x: A0
        w_of = lambda x: x
        Bl = None
    elif along == "strength":
        if omega is None:
            raise ValueError("along='strength' needs the fixed omega=")
        omega = check_unit_interval("omega", omega)
        if B is not None:
            Bl = _check_logits("B", B)
        elif A_logits is not None:
            Bl = _check_logits("A_logits", A_logits)
        elif a is not None:
            Bl = a * a * FAMILY_LOGITS
        else:
            Bl = teacher_logits(A0)
        lo, hi = (float(x) for x in s_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ValueError(f"s_range must be two finite numbers lo < hi, got {s_range}")
        strength_matrix(np.array([lo, hi]), Bl)  # overflow check
        mat = lambda x: strength_matrix(x, Bl)
        w_of = lambda x: omega
    else:
        raise ValueError(f"along must be 'omega' or 'strength', got {along!r}")
    cr = lambda x: _criteria(mat(x), w_of(x), n, b)
    bo = lambda x: _booleans(mat(x), w_of(x), n, b)
    prefix = "omega_" if along == "omega" else "s_"
    out = {}
    for name, flag, comps in _FLIPS:
        k = len(comps(cr(lo)))
        fcomps = [lambda x, i=i, comps=comps: float(comps(cr(x))[i]) for i in range(k)]
        if flag is None:
            fb = lambda x: float(cr(x)["dR_pos_minus_sem"]) < 0
        else:
            fb = lambda x, flag=flag: bool(bo(x)[flag])
        out[prefix + name] = _flip(fb, fcomps, lo, hi)
    missing = [k for k, v in out.items() if v is None]
    where = "omega in [0, 1]" if along == "omega" else f"s in [{lo:g}, {hi:g}]"
    msg = f"no flip in {where} for: {', '.join(missing)}" if missing else ""
    params = dict(a=a, A=A0.tolist(), along=along, omega=omega, nodes=n, b=b)
    if along == "strength":
        params.update(B=Bl.tolist(), s_range=(lo, hi))
    return BoundariesResult(
        along=along,
        a=a,
        A=A0.tolist(),
        B=None if Bl is None else Bl.tolist(),
        omega=omega,
        s_range=None if along == "omega" else (lo, hi),
        b=b,
        nodes=n,
        **out,
        message=msg,
        params=params,
    )


def phase_diagram(
    a_grid: ArrayLike,
    omega_grid: ArrayLike,
    n: int = PD_NODES,
    *,
    B=None,
    pe="opposite",
    check_global: bool = False,
    n_disk: int = 41,
) -> PhaseDiagramResult:
    """Classify every (a, omega) of the grid: arrays (n_a, n_omega) of the three booleans, the
    candidate-minimum flags and the region index into :data:`REGIONS` (-1 = none).  With logits
    ``B`` the first axis is the strength s of A(s) = softmax_row(s B) (any s, B finite) instead
    of the A_a strength a; ``pe`` as in :func:`boundaries`.

    ``check_global``: also scan R over a polar grid of the closed disk (``n_disk`` radii x
    4 n_disk angles, from the Mehler/Chebyshev tables; P_1 = -P_2 only) and return
    ``global_check`` = True where no disk point is lower than the better candidate by more than
    1e-6 (i.e. the global minimum is one of the two candidates, as boolean 1 assumes)."""
    ag, wg = np.asarray(a_grid, float), np.asarray(omega_grid, float)
    if ag.ndim != 1 or wg.ndim != 1 or not len(ag) or not len(wg):
        raise ValueError("a_grid and omega_grid must be non-empty 1-D sequences")
    if ag.size * wg.size > MAX_PD_POINTS:
        raise ValueError(
            f"the grid has {ag.size} x {wg.size} points, more than {MAX_PD_POINTS}; use a "
            "coarser grid"
        )
    b = pd_direction(pe)
    _check_omega(wg)
    Ag = positional_matrix(_check_a(ag)) if B is None else strength_matrix(ag, B)
    n_disk = check_int("n_disk", n_disk, lo=2, hi=1000)
    if check_global and b != OPPOSITE:
        raise ValueError("check_global scans the Mehler tables of P_1 = -P_2 (pe='opposite') only")
    S, O = np.meshgrid(ag, wg, indexing="ij")
    out = _booleans(Ag[:, None], O, n, b)
    crit = CriteriaResult(**out.pop("criteria"), a=S, A=Ag, omega=O, nodes=n)
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
        ok = np.ones(S.shape, dtype=bool)
        for i in range(len(ag)):
            AF = Ag[i].ravel() @ F1
            # R - const(A, omega) on every disk point, for all omega at once
            Rr = F2[None] - 2 * (1 - wg)[:, None] * X[None] - 2 * wg[:, None] * AF[None]
            best = np.minimum(Rr[:, -2], Rr[:, -1])
            ok[i] = Rr[:, :-2].min(axis=1) >= best - 1e-6
        global_check = ok
    n_none = int(np.sum(out["region"] < 0))
    msg = f"{n_none} cells where neither candidate is a boundary minimum" if n_none else ""
    if global_check is not None and not np.all(global_check):
        bad = int(np.sum(~global_check))
        msg = (msg + "; " if msg else "") + f"{bad} cells where a third point of the disk is lower"
    Bl = None if B is None else np.asarray(B, float).tolist()
    return PhaseDiagramResult(
        a=ag,
        A=Ag,
        omega=wg,
        regions=REGIONS,
        nodes=n,
        **out,
        criteria=crit,
        global_check=global_check,
        B=Bl,
        b=b,
        message=msg,
        params=dict(nodes=n, check_global=check_global, n_disk=n_disk, B=Bl, b=b),
    )


@dataclass(frozen=True, kw_only=True)
class NumericalClassificationResult(Result):
    """The phase-diagram booleans at one (A, omega) by a stated numerical method (``exact`` is
    False): where the exact criteria do not extend (L > 2, or a rank-2 encoding Gram matrix).

    ``end_points``: one dict per start (``start`` "semantic"/"positional", reduced ``c``, ``m``,
    ``risk``, ``kind`` by :func:`theory.ssi.trajectory.classify_minimum`); ``R_semantic`` /
    ``R_positional``: the lowest risk among the end points of each kind (None: none);
    ``hessian0``: the Hessian of R at the origin in (c, m)."""

    exact: bool = False
    omega: float = 0.0
    A: list | None = None
    L: int = 2
    global_positional: bool = False
    steepest_positional: bool = False
    both_minima: bool = False
    semantic_min: bool = False
    positional_min: bool = False
    region: int = -1
    R_semantic: float | None = None
    R_positional: float | None = None
    end_points: list = field(default_factory=list)
    hessian0: list | None = None


MAX_FALLBACK_NODES = 2**20  # quadrature nodes (GH per axis is further bounded by gh_tensor)
NUMERICAL_METHOD = (
    "numerical classification (the fallback where the exact criteria, L = 2 with a rank-1 "
    "encoding, do not apply): R by the "
    "quadrature engine on fixed nodes; each candidate is the end point of a constrained "
    "minimisation of R on the ball |c|^2 + m^2 <= 1 (SLSQP, exact gradient of the quadrature) "
    "from the semantic corner (m = 1, tilted by 0.05 in a random c direction) and from "
    "n_starts positional starts (|c| = 1, m = 0.05, random directions); an end point is "
    "semantic/positional within 15 degrees of the m/c axes; the steepest direction compares "
    "the lowest eigenvalue of the c-block of the Hessian at the origin (central differences) "
    "with R_mm"
)


def classify_numerical(
    omega: float,
    A,
    *,
    L: int | None = None,
    pe="orthonormal",
    n: int | None = None,
    n_starts: int = 3,
    rng=0,
) -> NumericalClassificationResult:
    """The region of :data:`REGIONS` at one (A, omega) of an L x L teacher
    y = (1 - omega) softmax_row(z* z*^T) + omega A, by the numerical method
    :data:`NUMERICAL_METHOD` (the fallback where :func:`pd_criteria` does not apply: L > 2 or a
    rank-2 Gram matrix at L = 2; at L = 2, P_1 = -P_2 it is tested against the exact criteria).
    ``pe``: "orthonormal", "opposite" or a Gram matrix; ``n``: quadrature nodes of the quad
    engine; ``rng``: the QMC nodes and the start directions."""
    from scipy.optimize import minimize

    from theory.rng import as_rng
    from theory.ssi.risk import AttentionModel
    from theory.ssi.targets import PositionalSemanticTarget
    from theory.ssi.trajectory import classify_minimum

    A = check_row_stochastic("A", A)
    L = A.shape[0] if L is None else check_int("L", L, lo=2, hi=8)
    n_starts = check_int("n_starts", n_starts, lo=1, hi=50)
    if n is not None:  # per-axis Gauss-Hermite nodes (L <= 2) or QMC points (L > 2)
        n = check_int("quadrature nodes", n, lo=4, hi=MAX_FALLBACK_NODES)
    tgt = PositionalSemanticTarget(omega, L=L, A=A)
    model = AttentionModel(tgt, L=L, pe=pe, reduction="identity", engine="quad", n=n, rng=rng)
    r = model.r
    if r == 0:
        raise ValueError("pe='none': there is no positional candidate (R depends on m only)")
    gen = as_rng(rng)

    def unit(k):
        v = gen.standard_normal(k)
        return v / np.linalg.norm(v)

    def proj(x):  # SLSQP may step slightly outside the ball: evaluate at its projection
        return x / max(1.0, float(np.linalg.norm(x)))

    def fun(x):
        x = proj(x)
        return model.risk(x[:r], x[r])

    def jac(x):
        x = proj(x)
        ge, gm = model.grad(x[:r], x[r])
        return np.append(np.atleast_1d(ge), gm)

    ball = dict(type="ineq", fun=lambda x: 1.0 - x @ x, jac=lambda x: -2.0 * x)
    starts = [("semantic", np.append(0.05 * unit(r), np.sqrt(1 - 0.05**2)))]
    for _ in range(n_starts):
        starts.append(("positional", np.append(np.sqrt(1 - 0.05**2) * unit(r), 0.05)))
    ends = []
    for kind0, x0 in starts:
        res = minimize(
            fun,
            x0,
            jac=jac,
            method="SLSQP",
            constraints=[ball],
            options=dict(maxiter=100, ftol=1e-10),
        )
        x = proj(res.x)
        ends.append(
            dict(
                start=kind0,
                c=x[:r].tolist(),
                m=float(x[r]),
                risk=float(fun(x)),
                kind=classify_minimum(x[:r], x[r]),
                converged=bool(res.success),
            )
        )
    R_of = lambda k: min((e["risk"] for e in ends if e["kind"] == k), default=None)
    R_sem, R_pos = R_of("semantic"), R_of("positional")
    sem = ends[0]["kind"] == "semantic"
    pos = R_pos is not None
    glob_pos = bool(pos and (not sem or R_pos < R_sem))
    H = model.hessian(np.zeros(r), 0.0)
    steep_pos = bool(np.linalg.eigvalsh(H[:r, :r]).min() < H[r, r])
    region = int(_region(np.array(sem), np.array(pos), np.array(glob_pos), np.array(steep_pos)))
    bad = [i for i, e in enumerate(ends) if not e["converged"]]
    msg = NUMERICAL_METHOD
    if bad:
        msg += f"; starts {bad} did not converge (SLSQP), their end points are kept"
    flags = dict(
        global_positional=glob_pos,
        steepest_positional=steep_pos,
        both_minima=bool(sem and pos),
        semantic_min=bool(sem),
        positional_min=bool(pos),
        region=region,
    )
    return NumericalClassificationResult(
        **flags,
        omega=float(omega),
        A=A.tolist(),
        L=L,
        R_semantic=R_sem,
        R_positional=R_pos,
        end_points=ends,
        hessian0=H.tolist(),
        message=msg,
        params=dict(omega=float(omega), A=A.tolist(), L=L, n=n, n_starts=n_starts, rng=str(rng)),
        metadata=dict(method="quad + SLSQP", engine=model.engine, quad_method=model.method),
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
