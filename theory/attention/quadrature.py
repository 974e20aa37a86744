"""Quadrature of the replica channel expectations over (ξ_1, ξ_2, η_1, η_2) ~ N(0, I_4)
(docs/attention.md §5).

The default ``split`` rule integrates ξ in polar coordinates around the point where the student
field vanishes and splits every circle at the jumps of the prox's global minimiser; plain tensor
Gauss-Hermite (``method="gh"``) converges slowly and non-monotonically where the prox jumps (the
positional branch) and is kept as a reference, with ``qmc`` and ``mc``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory.attention import _quadrature_kernels as _Q
from theory.attention.params import ERMParams
from theory.rng import RNGLike

__all__ = [
    "ETA_CUT",
    "SPLIT_COARSE",
    "SPLIT_DEFAULT",
    "W_DEEP",
    "W_SKIP",
    "Rule",
    "coarse_rule",
    "cubature_2d",
    "cubature_rule",
    "eta_rule",
    "integrate_channel",
    "make_rule",
]


def _nthreads() -> int:
    import numba

    return int(numba.get_num_threads())


@dataclass(frozen=True)
class Rule:
    """Quadrature rule over (ξ1, ξ2, η1, η2) ~ N(0, I_4).

    Tensor/sampled rules (``gh``, ``qmc``, ``mc``): ``nodes`` (N, 4), ``weights`` (N,).
    The ``split`` rule (default; docs/attention.md §5): ξ in polar coordinates around the point
    where the student field vanishes, radius by ``n_r``-point Gauss-Legendre, every circle
    scanned at ``n_phi`` angles with the jumps of the global minimiser located and the arcs
    between them integrated by ``n_arc``-point Gauss-Legendre.
    η (the outer 2-D integral) by a tensor rule per component: ``eta="trap"`` (default) the
    trapezoidal rule with spacing ``h`` on [-ETA_CUT, ETA_CUT] (offset grid, even and symmetric),
    ``eta="gh"`` ``n``-point Gauss-Hermite.  The η-integrand is analytic but its complex
    singularities come close to the real axis (the teacher's sigmoid of a quadratic form, and the
    basin structure of the prox): the trapezoidal rule converges geometrically in 1/h there,
    Gauss-Hermite only like exp(-c√n) and non-monotonically (docs/attention.md §5).
    """

    method: str
    n: int
    nodes: np.ndarray | None = None
    weights: np.ndarray | None = None
    n_r: int = 0
    n_phi: int = 0
    n_arc: int = 0
    eta: str = "gh"
    h: float = 0.0

    @property
    def n_points(self) -> int:
        if self.weights is not None:
            return int(self.weights.size)
        return int(self.n * self.n * self.n_r)  # circles

    @property
    def cost(self) -> float:
        """Relative cost of a split rule (η nodes with non-negligible weight × circles × scan)."""
        if self.method != "split":
            return float(self.n_points)
        ex, ew = eta_rule(self)
        keep = np.sum(np.outer(ew, ew) > 1e-15 * ew.max() ** 2)
        return float(keep) * self.n_r * (self.n_phi + 4 * self.n_arc)

    def describe(self) -> dict:
        if self.method == "split":
            d = dict(method="split", eta=self.eta, n_r=self.n_r, n_phi=self.n_phi, n_arc=self.n_arc)
            if self.eta == "trap":
                d.update(h_eta=self.h, eta_cut=ETA_CUT)
            else:
                d.update(n_eta=self.n)
            return d
        if self.method == "cubature":
            return dict(method="cubature", degree=self.n, n_points=self.n_points)
        return dict(method=self.method, nodes=self.n, n_points=self.n_points)


#: circles (η node × radius) whose Gaussian weight bound is below W_SKIP are skipped; below
#: W_DEEP the jumps on them are not located to full depth (changes < 1e-9 relative, measured)
W_SKIP = 1e-12
W_DEEP = 1e-9
#: half-width of the η domain of the trapezoidal rule (the Gaussian weight there is 1e-12.2)
ETA_CUT = 7.5
#: default split rule: trapezoid in η with spacing h, radial nodes, scan angles, arc nodes.
#: Chosen from the convergence study (docs/attention.md §5, BENCHMARKS.md "ERM (replica
#: theory)"): channel expectations within ~1e-6 relative of the converged values at the
#: positional and semantic fixed points.
SPLIT_DEFAULT = dict(eta="trap", h=0.5, n_r=16, n_phi=16, n_arc=4)
#: a cheap split rule: the iteration gets close to the fixed point and the Jacobian of the map
#: comes from it; the accurate rule then only polishes (docs/solver.md §3)
SPLIT_COARSE = dict(eta="gh", n=8, n_r=12, n_phi=16, n_arc=4)


def eta_rule(rule: Rule) -> tuple[np.ndarray, np.ndarray]:
    """1-D rule for each η component of a split rule: nodes (even count, symmetric) and weights
    (including the standard normal density)."""
    if rule.eta == "trap":
        h = rule.h
        N = int(math.floor(ETA_CUT / h))
        x = h * (np.arange(-N, N) + 0.5)
        w = h * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return np.ascontiguousarray(x), np.ascontiguousarray(w)
    from theory.gauss import gh_rule

    x, w = gh_rule(rule.n)
    return np.ascontiguousarray(x), np.ascontiguousarray(w)


def make_rule(
    method: str = "split",
    nodes: int | None = None,
    rng: RNGLike = 0,
    *,
    n_r: int | None = None,
    n_phi: int | None = None,
    n_arc: int | None = None,
    h: float | None = None,
    eta: str | None = None,
) -> Rule:
    """Build a quadrature rule.

    ``split`` (default, accurate across the jumps of the prox; sizes default to
    ``SPLIT_DEFAULT``): η by the trapezoidal rule with spacing ``h`` (``eta="trap"``, default)
    or by ``nodes``-point Gauss-Hermite per component (``eta="gh"``; giving ``nodes`` alone
    selects it); ``n_r``, ``n_phi``, ``n_arc`` as in :class:`Rule`.
    ``gh``: plain tensor Gauss-Hermite with ``nodes`` per dimension (default 14) — converges
    slowly and non-monotonically where the prox jumps (positional branch); kept as a reference.
    ``qmc``: ``nodes`` scrambled-Sobol points (default 2^16); ``mc``: ``nodes`` i.i.d. normals.
    """
    from theory import gauss
    from theory.rng import as_rng

    if method == "split":
        d = dict(SPLIT_DEFAULT)
        if eta is None:
            eta = "gh" if (nodes is not None and h is None) else d["eta"]
        if eta not in ("trap", "gh"):
            raise ValueError(f"eta must be 'trap' or 'gh', got {eta!r}")
        d["eta"] = eta
        d["n"] = int(nodes) if nodes is not None else (10 if eta == "gh" else 0)
        if h is not None:
            d["h"] = float(h)
        for k, v in (("n_r", n_r), ("n_phi", n_phi), ("n_arc", n_arc)):
            if v is not None:
                d[k] = int(v)
        if eta == "gh" and d["n"] < 2:
            raise ValueError(
                f"split rule: nodes (Gauss-Hermite per eta component) must be >= 2, got {d['n']}"
            )
        if eta == "trap" and not 0.05 <= d["h"] <= 2.0:
            raise ValueError(
                f"split rule: h (trapezoid spacing in eta) must lie in [0.05, 2], got {d['h']}"
            )
        if d["n_r"] < 2 or d["n_phi"] < 4 or d["n_arc"] < 2:
            raise ValueError(
                f"split rule sizes too small (need n_r >= 2, n_phi >= 4, n_arc >= 2): {d}"
            )
        if eta == "trap":
            d["n"] = 2 * int(math.floor(ETA_CUT / d["h"]))
        return Rule(
            "split",
            d["n"],
            n_r=d["n_r"],
            n_phi=d["n_phi"],
            n_arc=d["n_arc"],
            eta=eta,
            h=d["h"] if eta == "trap" else 0.0,
        )
    if method == "gh":
        n = int(nodes if nodes is not None else 14)
        x, w = gauss.gh_tensor(n, 4)
        return Rule("gh", n, np.ascontiguousarray(x), np.ascontiguousarray(w))
    if method == "qmc":
        n = int(nodes if nodes is not None else 2**16)
        x = gauss.sobol_normal(n, 4, rng)
        return Rule("qmc", n, np.ascontiguousarray(x), np.full(x.shape[0], 1.0 / x.shape[0]))
    if method == "mc":
        n = int(nodes if nodes is not None else 2**16)
        x = as_rng(rng).standard_normal((n, 4))
        return Rule("mc", n, x, np.full(n, 1.0 / n))
    raise ValueError(f"method must be 'split', 'gh', 'qmc' or 'mc', got {method!r}")


def coarse_rule() -> Rule:
    """The cheap rule of :data:`SPLIT_COARSE`."""
    c = SPLIT_COARSE
    return make_rule(
        "split",
        c.get("n"),
        n_r=c["n_r"],
        n_phi=c["n_phi"],
        n_arc=c["n_arc"],
        eta=c["eta"],
        h=c.get("h"),
    )


#: 2-D cubature rules for the weight exp(-x² - y²) on R², fully symmetric (invariant under the
#: 8 symmetries of the square), as (degree, [(orbit, weight, (a, b))]): orbit "a0" = (±a, 0),
#: (0, ±a); "aa" = (±a, ±a); "ab" = (±a, ±b), (±b, ±a).  Weights are normalised to sum 1.
#: Degree 7: Stroud & Secrest, Math. Comp. 17 (1963) 105, rule VI (12 points), in closed form.
#: Degree 11: Rabinowitz & Richter, Math. Comp. 23 (1969) 765 (28 points): three "a0" orbits and
#: two "ab" orbits; the orbits (√3, weight 1/72), (1/√2, √(3/2); 1/32) and the position of the
#: second "ab" orbit, (√(3/2), 3/√2), are exact, the five other numbers are computed here from
#: the moment equations (:func:`_degree11`).  These are the rules of the authors' code for the
#: state equations (7) and for Φ, ε_g and the linear baseline (11) (docs/attention.md §11;
#: docs/published-vs-computed.md).
_S5 = math.sqrt(5.0)
_CUBATURE = {
    7: [
        ("a0", 1.0 / 36.0, (math.sqrt(3.0), 0.0)),
        ("aa", (5.0 + 2.0 * _S5) / 45.0, (math.sqrt((9.0 - 3.0 * _S5) / 8.0), 0.0)),
        ("aa", (5.0 - 2.0 * _S5) / 45.0, (math.sqrt((9.0 + 3.0 * _S5) / 8.0), 0.0)),
    ],
}


def _orbit(kind: str, a: float, b: float) -> list[tuple[float, float]]:
    if kind == "a0":
        return [(a, 0.0), (-a, 0.0), (0.0, a), (0.0, -a)]
    if kind == "aa":
        return [(a, a), (a, -a), (-a, a), (-a, -a)]
    return [(sx * u, sy * v) for u, v in ((a, b), (b, a)) for sx in (1, -1) for sy in (1, -1)]


def _degree11() -> list:
    """The degree-11 Rabinowitz-Richter rule: its five free numbers (two radii of "a0" orbits,
    their weights and the weight of the outer "ab" orbit) solve the 12 moment equations
    E[x^2i y^2j] = (2i-1)!! (2j-1)!! / 2^(i+j) for 2(i+j) <= 10 (least squares from a rough
    start; residual ~1e-16)."""
    from scipy.optimize import least_squares
    from scipy.special import gamma

    r3, r15 = math.sqrt(3.0), math.sqrt(1.5)
    fixed = [("a0", 1.0 / 72.0, (r3, 0.0)), ("ab", 1.0 / 32.0, (math.sqrt(0.5), r15))]
    outer = (r15, 3.0 / math.sqrt(2.0))
    moments = [(i, j) for i in range(6) for j in range(i, 6) if i + j <= 5]

    def orbits(x):
        a1, w1, a3, w3, wab = x
        return fixed + [("a0", w1, (a1, 0.0)), ("a0", w3, (a3, 0.0)), ("ab", wab, outer)]

    def residual(x):
        out = []
        for i, j in moments:
            s = sum(
                w * px ** (2 * i) * py ** (2 * j)
                for kind, w, (a, b) in orbits(x)
                for px, py in _orbit(kind, a, b)
            )
            out.append(s * math.pi / (gamma(i + 0.5) * gamma(j + 0.5)) - 1.0)
        return out

    sol = least_squares(residual, [2.7, 3e-4, 0.6, 0.17, 1e-3], xtol=1e-15, ftol=1e-15, gtol=1e-15)
    if max(abs(v) for v in residual(sol.x)) > 1e-12:  # pragma: no cover - a broken solve
        raise RuntimeError("the degree-11 cubature's moment equations did not solve")
    return orbits(sol.x)


def cubature_2d(degree: int) -> tuple[np.ndarray, np.ndarray]:
    """The 2-D rule of :data:`_CUBATURE` of this ``degree`` (7 or 11) for E over N(0, I_2):
    nodes (N, 2) (the tabulated points × √2) and weights (N,) summing to 1."""
    if degree not in (7, 11):
        raise ValueError(f"cubature degree must be 7 or 11, got {degree!r}")
    if degree not in _CUBATURE:
        _CUBATURE[degree] = _degree11()
    pts, wts = [], []
    for kind, wt, (a, b) in _CUBATURE[degree]:
        orb = _orbit(kind, a, b)
        pts += orb
        wts += [wt] * len(orb)
    return np.asarray(pts) * math.sqrt(2.0), np.asarray(wts)


def cubature_rule(degree: int = 7) -> Rule:
    """The tensor product of two :func:`cubature_2d` rules over (ξ1, ξ2) and (η1, η2), as in the
    authors' code (degree 7: 144 nodes).  Far too coarse to converge (the prox jumps); kept to
    reproduce the published numbers (docs/published-vs-computed.md)."""
    x, w = cubature_2d(degree)
    n = w.size
    nodes = np.empty((n * n, 4))
    nodes[:, :2] = np.repeat(x, n, axis=0)
    nodes[:, 2:] = np.tile(x, (n, 1))
    return Rule("cubature", degree, np.ascontiguousarray(nodes), np.outer(w, w).ravel())


def integrate_channel(
    rule: Rule,
    q: float,
    m: float,
    theta: float,
    V: float,
    p: ERMParams,
    *,
    jac: bool = False,
    symmetry: bool = True,
) -> tuple[np.ndarray, dict]:
    """Weighted sums of the channel quantities over ``rule`` (layout: the ``C_*`` indices of
    ``theory.attention._quadrature_kernels``) and, for the split rule, its statistics
    (``jumps`` located, ``unresolved`` basin changes).  ``symmetry``: see
    :func:`theory.attention.state_equations.channel`."""
    A = p.A_array
    if rule.method != "split":
        s = _Q.channel_sums(
            rule.nodes,
            rule.weights,
            float(q),
            float(m),
            float(theta),
            float(V),
            p.rho,
            p.s2,
            p.omega,
            A[0, 0],
            A[1, 1],
            bool(jac),
            _nthreads(),
        )
        return s, {}
    s = _split_sums(rule, q, m, theta, V, p, jac, symmetry)
    return s, dict(jumps=float(s[_Q.N_CHANNEL]), unresolved=float(s[_Q.N_CHANNEL + 1]))


def _split_sums(rule: Rule, q, m, theta, V, p: ERMParams, jac: bool, symmetry: bool = True):
    ex, ew = eta_rule(rule)
    sq = math.sqrt(q)
    R = math.sqrt(2.0) * abs(m) / sq + _Q.R_MAX
    x, w = np.polynomial.legendre.leggauss(rule.n_r)
    rx = (x + 1) * R / 2
    rw = w * R / 2
    glx, glw = np.polynomial.legendre.leggauss(rule.n_arc)
    A = p.A_array
    sym = 0
    if symmetry:
        # η → -η (with ξ → -ξ when m = 0) holds for any A: T is even in h*, the loss in x
        sym = (1 if theta == 0.0 else 0) + (2 if m == 0.0 else 0)
        if sym and p.swap_symmetric:
            sym += 4
    return _Q.split_sums(
        ex,
        ew,
        ex,
        ew,
        rx,
        rw,
        glx,
        glw,
        rule.n_phi,
        float(q),
        float(m),
        float(theta),
        float(V),
        p.rho,
        p.s2,
        p.omega,
        A[0, 0],
        A[1, 1],
        bool(jac),
        _Q.MAX_DEPTH,
        _nthreads(),
        sym,
        W_SKIP,
        W_DEEP,
    )
