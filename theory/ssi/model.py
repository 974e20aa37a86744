r"""Sequence single-index (SSI) models under one-pass spherical SGD: population risk R(e, m), its
derivatives, the noise term K, the (e, m) ODE, flatness, escape-time predictions and the
semantic/positional phase diagram (spec sequence-single-index.md, typos of section 8 corrected).

Normalisation ("code normalisation", stated once)
-------------------------------------------------
X in R^{L x d} with N(0, 1/d) entries, ||w*||^2 = ||w||^2 = d, P rows of unit norm orthogonal to
w*.  m = w*.w/d, e_l = P_l.w/sqrt(d).  Given w, the pairs (z*_l, z_l) are independent across l:

    z*_l = xi_l,   z_l = e_l + m xi_l + sqrt(1 - m^2) eta_l,   xi, eta ~ N(0, I_L),

(the component of w along P and orthogonal to w*, P all end up in eta).  Loss l = ||y - f||^2
(no 1/2), R = E l.  Attention: f = Pi[softmax_row(z z^T)]; "trace" is sum_l A_ll (trace_norm
"sum") or that divided by sqrt(L) ("sqrtL", the authors' code).  Tied network:
f = sigma(sum_l z_l / sqrt(L)) with z_l = x_l.w; untied: z_l = x_l.w_l, one overlap m_l per row
(m_untied = ||(m_l)|| / sqrt(L)).

Positional encodings with Gram matrix G = P P^T = B B^T (B of full column rank r, from eigh):
e = B c with reduced coordinates c in R^r and the constraint ||c||^2 + m^2 <= 1.  pe="opposite"
(L = 2, P_1 = -P_2 = p) is B = (1, -1)^T, i.e. the scalar e of the spec with e_1 = -e_2 = e.
Every function below takes and returns e in these reduced coordinates.

The ODE (derivation, d -> infinity at fixed step gamma, t = gamma nu / d)
-----------------------------------------------------------------------
grad_w l = sum_l g_l (x_l + P_l/sqrt(d)), g_l = dl/dz_l.  Then w.grad = sum g_l z_l,
w*.grad = sum g_l xi_l, and ||grad||^2 = sum_l g_l^2 ||x_l||^2 + O(d^{-1/2}) = sum_l g_l^2 (1 +
O(d^{-1/2})), so the normalisation ||w - gamma grad|| / sqrt(d) = 1 - (gamma/d)(sum g z) +
(gamma^2/2d) sum g^2 + O(d^-2).  For e_l one also needs E[g_k P_l.x_k]: regressing P_l.x_k on
(x_k.w, x_k.w*) gives (e_l / (sqrt(d) (1-m^2))) E[g_k (z_k - e_k - m xi_k)].  Collecting the
O(gamma/d) terms and using dR/dm = E[sum g_l (xi_l - m eta_l / sqrt(1-m^2))]:

    dm/dt = -dR/dm + m (m dR/dm + c.grad_c R) - (gamma/2) K m
    dc/dt = -grad_c R + c (m dR/dm + c.grad_c R) - (gamma/2) K c,    grad_c R = B^T grad_e R
    K = E sum_l (dl/dz_l)^2

(de/dt = B dc/dt = -G grad_e R + ...: the spec's form).  Untied network: each row has its own
sphere, dm_l/dt = -(1 - m_l^2) dR/dm_l - (gamma/2) K_l m_l with K_l = E (dl/dz_l)^2.

How the expectations are computed
---------------------------------
* ``engine="hermite"`` (default for polynomial scalar targets, exact in the target): Mehler's
  formula.  With g = sum_k a_k He_k (a_k exact, from :mod:`theory.ssi.hermite`) and
  E[He_k(xi) | z] = m^k He_k(z - e) (m^k = prod_l m_l^{k_l}),

      E[g(xi) F(z)] = sum_k a_k m^k E[F(e + zeta) He_k(zeta)],   zeta ~ N(0, I_L),

  so R, its derivatives of every order and K are polynomials in m whose coefficients are
  L-dimensional Gaussian moments of student functions (f, f^2, (df/dz_l)^2, ...).  e-derivatives
  raise the Hermite index (Stein: d/de_i E[F(e+zeta) He_k] = E[F(e+zeta) He_{k+e_i}]).  The
  student moments use tensor Gauss-Hermite in L <= 4 dimensions (``n_student`` nodes per
  dimension) and, for the networks, the exact ridge identity E[F(u) He_k(zeta)] =
  L^{-|k|/2} E[F(u) He_{|k|}(u)] (u = sum zeta / sqrt(L)) with 1-D adaptive quadrature.
* ``engine="quad"`` (any target, e.g. the positional-semantic softmax target): direct
  2L-dimensional expectation over (xi, eta) with tensor Gauss-Hermite (``method="gh"``, L <= 2),
  scrambled Sobol (``"qmc"``) or Monte Carlo (``"mc"``) on FIXED nodes (common random numbers,
  so the ODE right-hand side is smooth).  dR/dm_l by Price's theorem,
  dR/dm_l = -2 E[dg/dxi_l . df/dz_l], which is regular at |m| = 1.  The Hessian of this engine is
  a central difference (h = 1e-4) of the quadrature gradient.  Networks default to QMC here
  (tensor GH puts symmetric node pairs exactly on a relu kink and biases dR/dm near m = 0).
* ``engine="ps"`` (default for the spec-6 model: positional-semantic target, L = 2, identity
  reduction, pe none/opposite): Mehler's formula with the numerically computed Hermite
  coefficients of softmax(xi xi^T) to order 40 (Parseval tail bound 1.3e-6 at |m| = 1), the
  student moments as Chebyshev interpolants in e (:class:`PSTables`); K by the same construction
  to order 16.  The exact phase-diagram criteria (:func:`pd_criteria`) use 2-D reductions
  (Stein in e, Price in m) instead and do not truncate.
* Attention with one reduced PE coordinate (pe="opposite") tabulates the student moments of the
  hermite engine as Chebyshev interpolants in e (40 nodes, ~1e-8 relative); ``flatness`` always
  uses the direct sums.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp
from scipy import integrate
from scipy.optimize import brentq

from theory._util import check_positive, check_unit_interval
from theory.gauss import gh_rule, gh_tensor, sobol_normal
from theory.results import Result
from theory.rng import as_rng
from theory.ssi._kernels import (
    activation,
    attention_jac,
    he_multi,
    he_table,
)

__all__ = [
    "PositionalSemanticTarget",
    "AttentionModel",
    "TiedNetwork",
    "UntiedNetwork",
    "ODEResult",
    "integrate_ode",
    "flatness",
    "predicted_escape",
    "boundaries",
    "phase_diagram",
    "REGIONS",
]

QUAD_GH_NODES = {1: 60, 2: 16}  # per dimension of the 2L-dim (xi, eta) rule
STUDENT_GH_NODES = {1: 120, 2: 64, 3: 24, 4: 14}  # per dimension of the L-dim student rule
QMC_POINTS = 2**15
STUDENT_CHEB = 40  # Chebyshev nodes in the reduced coordinate for one-dimensional encodings


# =========================================================================== targets


class PositionalSemanticTarget:
    """y = (1 - omega) softmax_row(z* z*^T) + omega A (spec section 6), an L x L matrix target.

    ``A`` defaults to A_a = softmax_row([[a^2, -a^2], [-a^2, a^2]]) (L = 2).  Output flattened
    row-major to L*L entries.
    """

    def __init__(self, omega: float, a: float | None = None, *, L: int = 2, A=None):
        self.omega = check_unit_interval("omega", omega)
        if A is None:
            if a is None:
                raise ValueError("give the positional strength a (or a matrix A)")
            if L != 2:
                raise ValueError("A_a is defined for L = 2; pass A= for other L")
            a = float(a)
            if not (0 < a <= 10):
                raise ValueError(f"a must be in (0, 10], got {a}")
            self.a = a
            A = positional_matrix(a)
        else:
            A = np.asarray(A, dtype=float)
            self.a = None
        if A.shape != (L, L):
            raise ValueError(f"A must be {L}x{L}, got {A.shape}")
        self.A = A
        self.L = int(L)
        self.k = self.L * self.L
        self.is_polynomial = False

    def __repr__(self):
        return f"PositionalSemanticTarget(omega={self.omega}, a={self.a})"

    def g(self, xi):
        A = _scores(xi)
        return ((1 - self.omega) * A + self.omega * self.A[None]).reshape(len(xi), -1)

    def dg(self, xi):
        _, dA = attention_jac(xi)  # (N, L, L, L) [i, j, l]
        N = len(xi)
        return (1 - self.omega) * np.moveaxis(dA, 3, 1).reshape(N, self.L, -1)


def _scores(z):
    from theory.ssi._kernels import attention_scores

    return attention_scores(z)


def positional_matrix(a: float) -> np.ndarray:
    """A_a = softmax_row([[a^2, -a^2], [-a^2, a^2]])."""
    p = 1.0 / (1.0 + math.exp(-2 * a * a))
    return np.array([[p, 1 - p], [1 - p, p]])


class _ScalarTarget:
    """A scalar sympy target (via :func:`theory.ssi.hermite.parse_target`) with numpy g, dg and, for
    polynomials, the exact Hermite coefficients of g and g^2."""

    def __init__(self, target, L):
        from theory.ssi import hermite

        self.t = hermite.parse_target(target, L)
        self.L = self.t.L
        self.k = 1
        self.expr = self.t.expr
        syms = self.t.symbols
        self.is_polynomial = bool(self.t.is_polynomial)
        grads = [sp.diff(self.expr, s) for s in syms]
        self._dg = sp.lambdify(syms, grads, modules=["scipy", "numpy"])
        if self.is_polynomial:
            self.a1_exact = _poly_hermite(self.expr, syms)
            self.a2_exact = _poly_hermite(sp.expand(self.expr**2), syms)
            self.a1 = {k: float(v) for k, v in self.a1_exact.items()}
            self.a2 = {k: float(v) for k, v in self.a2_exact.items()}
            self.degree = (
                int(sp.Poly(self.expr, *syms).total_degree()) if self.expr.free_symbols else 0
            )

    def __repr__(self):
        return f"target {self.expr} (L = {self.L})"

    def g(self, xi):
        return self.t.func(xi)[:, None]

    def dg(self, xi):
        with np.errstate(all="ignore"):
            out = self._dg(*[xi[:, i] for i in range(self.L)])
        return np.stack([np.broadcast_to(np.asarray(o, float), (len(xi),)) for o in out], axis=1)[
            :, :, None
        ]


def _poly_hermite(expr, syms) -> dict:
    """Exact a_alpha (g = sum a_alpha He_alpha) of a polynomial, via theory.ssi.hermite."""
    from theory.ssi import hermite

    if not expr.free_symbols & set(syms):
        return {(0,) * len(syms): sp.nsimplify(expr)}
    store = hermite.hermite_coefficients(
        hermite.parse_target(expr, len(syms)), int(sp.Poly(expr, *syms).total_degree())
    )
    return {a: v for a, v in store.exact.items() if v != 0}


def _make_target(target, L):
    if isinstance(target, (PositionalSemanticTarget, _ScalarTarget)):
        if target.L != L:
            raise ValueError(f"the target has L = {target.L} but the model has L = {L}")
        return target
    return _ScalarTarget(target, L)


# =========================================================================== models


def _pe_basis(pe, L: int) -> np.ndarray:
    """B (L, r) with G = B B^T: the reduced coordinates of the positional encoding."""
    if pe is None or (isinstance(pe, str) and pe == "none"):
        return np.zeros((L, 0))
    if isinstance(pe, str):
        if pe == "opposite":
            if L != 2:
                raise ValueError("pe='opposite' (P_1 = -P_2) needs L = 2; pass a Gram matrix")
            return np.array([[1.0], [-1.0]])
        if pe == "orthonormal":
            return np.eye(L)
        raise ValueError(
            f"pe must be 'none', 'opposite', 'orthonormal' or a Gram matrix; got {pe!r}"
        )
    G = np.asarray(pe, dtype=float)
    if G.shape != (L, L) or not np.allclose(G, G.T):
        raise ValueError(f"the positional Gram matrix must be symmetric {L}x{L}")
    if not np.allclose(np.diag(G), 1.0):
        raise ValueError("positional encodings have unit-norm rows: diag(G) must be 1")
    lam, U = np.linalg.eigh(G)
    if lam.min() < -1e-10:
        raise ValueError("the positional Gram matrix must be positive semi-definite")
    keep = lam > 1e-10
    return U[:, keep] * np.sqrt(lam[keep])


class _Model:
    """Common machinery; subclasses define the student and the geometry."""

    untied = False
    kind = "model"

    def _setup(self, target, L, B, engine, method, n, rng):
        self.L = int(L)
        if self.L < 1:
            raise ValueError(f"L must be >= 1, got {L}")
        self.target = _make_target(target, self.L)
        self.B = B
        self.r = B.shape[1]
        self.G = B @ B.T
        poly = isinstance(self.target, _ScalarTarget) and self.target.is_polynomial
        ps_ok = (
            isinstance(self.target, PositionalSemanticTarget)
            and self.L == 2
            and getattr(self, "reduction", None) == "identity"
            and self.r <= 1
            and (self.r == 0 or np.allclose(np.abs(B[:, 0]), 1.0) and B[0, 0] == -B[1, 0])
        )
        if engine == "auto":
            engine = "hermite" if poly and self.k == 1 else ("ps" if ps_ok else "quad")
        if engine not in ("hermite", "quad", "ps"):
            raise ValueError("engine must be 'auto', 'hermite', 'ps' or 'quad'")
        if engine == "ps" and not ps_ok:
            raise ValueError(
                "engine='ps' is the spec-6 model: positional-semantic target, L = 2, "
                "identity reduction, pe 'none' or 'opposite'"
            )
        if engine == "hermite" and not (poly and self.k == 1):
            raise ValueError(
                "engine='hermite' needs a polynomial scalar target and a scalar "
                "student output; use engine='quad'"
            )
        if self.target.k != self.k:
            raise ValueError(
                f"the target has {self.target.k} output(s) but the student has {self.k}: use a "
                "scalar reduction (trace/projection) for a scalar target, or the positional-"
                "semantic target with reduction='identity'"
            )
        self.engine = engine
        self.method = method
        self.n = n
        self.rng = rng
        self._cache = {}
        if engine == "quad":
            self._init_quad()
        if engine == "ps":
            self._ps = ps_tables()

    # ---------------------------------------------------------------- student (override)
    def student(self, z):  # pragma: no cover - abstract
        """f (N, k) and df/dz (N, L, k)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- coordinates
    def _split(self, e, m):
        if self.r == 0:
            c = np.zeros(0)
        else:
            c = np.atleast_1d(np.asarray(0.0 if e is None else e, dtype=float)).ravel()
            if c.size == 1 and self.r > 1:
                c = np.full(self.r, float(c[0]))
            if c.size != self.r:
                raise ValueError(f"e must have {self.r} reduced coordinate(s), got {c.size}")
        if self.untied:
            mv = np.atleast_1d(np.asarray(m, dtype=float)).ravel()
            if mv.size == 1:
                mv = np.full(self.L, float(mv[0]))
            if mv.size != self.L:
                raise ValueError(f"the untied network needs {self.L} overlaps m_l")
        else:
            mv = np.full(self.L, float(np.asarray(m, dtype=float).ravel()[0]))
        if np.any(np.abs(mv) > 1 + 1e-12):
            raise ValueError(f"|m| must be <= 1, got {mv}")
        return c, self.B @ c, np.clip(mv, -1.0, 1.0)

    # ---------------------------------------------------------------- raw quantities
    def _raw(self, e_raw, mv, hess=False):
        if self.engine == "hermite":
            return self._raw_hermite(e_raw, mv, hess)
        if self.engine == "ps":
            return self._raw_ps(e_raw, mv)
        return self._raw_quad(e_raw, mv)

    def _raw_ps(self, e_raw, mv):
        tg = self.target
        e = 0.5 * float(e_raw[0] - e_raw[1])
        m = float(np.mean(mv))
        R, Re, Rm, K = self._ps.fast_point(e, m, tg.omega, tg.A)
        return dict(
            R=R, dRde=np.array([0.5, -0.5]) * Re, dRdm=np.full(2, 0.5 * Rm), K=np.full(2, 0.5 * K)
        )

    # ---- quad engine
    def _init_quad(self):
        L = self.L
        dim = 2 * L
        method = self.method
        if method == "auto":
            # tensor GH puts node pairs exactly on the kink of relu-like activations (sum of
            # symmetric nodes = 0), which biases dR/dm near m = 0: networks use QMC
            method = "gh" if (L <= 2 and self.kind == "attention") else "qmc"
        if method == "gh":
            n = self.n or QUAD_GH_NODES.get(L, 6)
            nodes, w = gh_tensor(n, dim)
        elif method == "qmc":
            npts = self.n or QMC_POINTS
            nodes = sobol_normal(int(2 ** math.ceil(math.log2(npts))), dim, as_rng(self.rng))
            w = np.full(len(nodes), 1.0 / len(nodes))
        elif method == "mc":
            npts = self.n or 2**17
            nodes = as_rng(self.rng).standard_normal((npts, dim))
            w = np.full(npts, 1.0 / npts)
        else:
            raise ValueError("method must be 'auto', 'gh', 'qmc' or 'mc'")
        self.method = method
        self._xi = np.ascontiguousarray(nodes[:, :L])
        self._eta = np.ascontiguousarray(nodes[:, L:])
        self._w = np.asarray(w)
        self._g = self.target.g(self._xi)
        self._dg = self.target.dg(self._xi)
        self._egg = float(self._w @ np.sum(self._g**2, axis=1))

    def _raw_quad(self, e_raw, mv):
        s = np.sqrt(np.clip(1 - mv**2, 0.0, None))
        z = e_raw[None] + mv[None] * self._xi + s[None] * self._eta
        f, df = self.student(z)
        res = self._g - f  # (N, k)
        w = self._w
        R = float(w @ np.sum(res**2, axis=1))
        gl = -2.0 * np.einsum("nk,nlk->nl", res, df)  # dl/dz_l
        dRde = w @ gl
        dRdm = -2.0 * (w @ np.einsum("nlk,nlk->nl", self._dg, df))
        K = w @ gl**2
        return dict(R=R, dRde=dRde, dRdm=dRdm, K=K)

    # ---- hermite engine
    def _student_moments(self, e_raw, gammas):
        """Moments E[F(e + zeta) He_gamma(zeta)] for F in (f, f^2, h_l, f h_l, f^2 h_l)."""
        raise NotImplementedError

    def _direct_moments(self, e_raw, gammas):
        return self._student_moments(e_raw, gammas)

    def _hermite_plan(self, hess):
        """Index bookkeeping of the Hermite engine (cached): the Hermite indices gamma = k + r of
        every needed student moment and, per derivative order beta of m, the falling-factorial
        coefficients of d^beta m^k."""
        key = ("plan", hess)
        if key in self._cache:
            return self._cache[key]
        t = self.target
        L = self.L
        zero = (0,) * L
        unit = [_unit(L, l) for l in range(L)]
        ks1 = list(t.a1)
        ks2 = list(t.a2)
        raises = [zero] + unit
        pairs = [(i, j) for i in range(L) for j in range(L)]
        if hess:
            raises += [_add(unit[i], unit[j]) for i, j in pairs]
        gam = tuple(sorted({_add(k, r) for k in ks1 for r in raises} | set(ks2) | set(raises)))
        idx = {g: i for i, g in enumerate(gam)}
        K1 = np.array(ks1, dtype=int).reshape(len(ks1), L)
        betas = [zero] + unit + ([_add(unit[i], unit[j]) for i, j in pairs] if hess else [])
        coef = {}
        for b in betas:
            bb = np.array(b)
            ok = np.all(K1 >= bb, axis=1)
            ff = np.ones(len(ks1))
            for j, k in enumerate(ks1):
                ff[j] = math.prod(math.perm(q, qb) for q, qb in zip(k, b)) if ok[j] else 0.0
            coef[b] = (ff, np.clip(K1 - bb, 0, None))
        plan = dict(
            gam=gam,
            idx=idx,
            zero=zero,
            unit=unit,
            pairs=pairs,
            K1=K1,
            a1=np.array([t.a1[k] for k in ks1]),
            a2=np.array([t.a2[k] for k in ks2]),
            K2=np.array(ks2, dtype=int).reshape(len(ks2), L),
            col1={r: np.array([idx[_add(k, r)] for k in ks1], dtype=int) for r in raises},
            col2=np.array([idx[k] for k in ks2], dtype=int),
            coef=coef,
            egg=_egg_exact(t),
        )
        self._cache[key] = plan
        return plan

    def _raw_hermite(self, e_raw, mv, hess=False):
        P = self._hermite_plan(hess)
        M = self._student_moments(e_raw, P["gam"])
        L = self.L
        zero, unit, idx = P["zero"], P["unit"], P["idx"]
        a1 = P["a1"]

        def mono(beta):
            ff, ex = P["coef"][beta]
            return ff * np.prod(mv[None, :] ** ex, axis=1)

        m0 = mono(zero)
        f = M["f"]
        R = P["egg"] + M["f2"][idx[zero]] - 2 * float(np.sum(a1 * m0 * f[P["col1"][zero]]))
        dRde = np.array(
            [M["f2"][idx[unit[i]]] - 2 * np.sum(a1 * m0 * f[P["col1"][unit[i]]]) for i in range(L)]
        )
        dRdm = np.array([-2 * np.sum(a1 * mono(unit[l]) * f[P["col1"][zero]]) for l in range(L)])
        pw2 = np.prod(mv[None, :] ** P["K2"], axis=1)
        c0 = P["col1"][zero]
        K = 4 * (
            M["h"][:, P["col2"]] @ (P["a2"] * pw2)
            - 2 * (M["fh"][:, c0] @ (a1 * m0))
            + M["f2h"][:, idx[zero]]
        )
        out = dict(R=float(R), dRde=dRde, dRdm=dRdm, K=K)
        if hess:
            H = np.zeros((2 * L, 2 * L))  # raw (e_1..e_L, m_1..m_L)
            for i, j in P["pairs"]:
                r2 = _add(unit[i], unit[j])
                H[i, j] = M["f2"][idx[r2]] - 2 * np.sum(a1 * m0 * f[P["col1"][r2]])
                H[i, L + j] = H[L + j, i] = -2 * np.sum(a1 * mono(unit[j]) * f[P["col1"][unit[i]]])
                H[L + i, L + j] = -2 * np.sum(a1 * mono(r2) * f[c0])
            out["H"] = H
        return out

    # ---------------------------------------------------------------- public API
    def risk(self, e=None, m=0.0) -> float:
        """Population risk R(e, m) (e in reduced coordinates; ignored without PE)."""
        _, er, mv = self._split(e, m)
        return self._raw(er, mv)["R"]

    def grad(self, e=None, m=0.0):
        """(dR/de, dR/dm): dR/de scalar for one reduced coordinate (pe='opposite'), (r,) array
        otherwise ((0,) without PE); dR/dm scalar (tied/attention) or (L,) (untied)."""
        _, er, mv = self._split(e, m)
        q = self._raw(er, mv)
        ge = self.B.T @ q["dRde"]
        ge = float(ge[0]) if self.r == 1 else ge
        gm = q["dRdm"] if self.untied else float(np.sum(q["dRdm"]))
        return ge, gm

    def noise_K(self, e=None, m=0.0):
        """K = E sum_l (dl/dz_l)^2 (scalar), or the per-row K_l (L,) for the untied network."""
        _, er, mv = self._split(e, m)
        K = self._raw(er, mv)["K"]
        return K if self.untied else float(np.sum(K))

    def _reduce_map(self):
        """Matrix T (2L, n_red) mapping reduced (c, m) directions to raw (e_raw, m_raw)."""
        L = self.L
        nm = L if self.untied else 1
        T = np.zeros((2 * L, self.r + nm))
        T[:L, : self.r] = self.B
        if self.untied:
            T[L:, self.r :] = np.eye(L)
        else:
            T[L:, self.r] = 1.0
        return T

    def hessian(self, e=None, m=0.0, h: float = 1e-4) -> np.ndarray:
        """Hessian of R in the reduced coordinates (c_1..c_r, m) (untied: (m_1..m_L)).

        Hermite engine: exact in the target (Stein-raised moments).  Quad engine: central
        differences of the quadrature gradient with step ``h``."""
        c, er, mv = self._split(e, m)
        T = self._reduce_map()
        if self.engine == "hermite":
            return T.T @ self._raw(er, mv, hess=True)["H"] @ T
        x0 = np.concatenate([er, mv])
        n = T.shape[1]
        H = np.zeros((n, n))
        for j in range(n):
            gp = self._raw_grad_vec(x0 + h * T[:, j])
            gm_ = self._raw_grad_vec(x0 - h * T[:, j])
            H[:, j] = T.T @ (gp - gm_) / (2 * h)
        return 0.5 * (H + H.T)

    def _raw_grad_vec(self, x):
        L = self.L
        q = self._raw(x[:L], np.clip(x[L:], -1, 1))
        return np.concatenate([q["dRde"], q["dRdm"]])

    def rhs(self, y, lr: float) -> np.ndarray:
        """Right-hand side of the ODE in the state y = (c_1..c_r, m) (untied: (m_1..m_L))."""
        r = self.r
        c = y[:r]
        if self.untied:
            mv = np.clip(y, -1, 1)
            q = self._raw(np.zeros(self.L), mv)
            return -(1 - mv**2) * q["dRdm"] - 0.5 * lr * q["K"] * mv
        m = float(np.clip(y[r], -1, 1))
        q = self._raw(self.B @ c, np.full(self.L, m))
        gc = self.B.T @ q["dRde"]
        gm = float(np.sum(q["dRdm"]))
        K = float(np.sum(q["K"]))
        common = m * gm + float(c @ gc)
        dc = -gc + c * common - 0.5 * lr * K * c
        dm = -gm + m * common - 0.5 * lr * K * m
        return np.concatenate([dc, [dm]])


def _add(a, b):
    return tuple(x + y for x, y in zip(a, b))


def _egg_exact(t) -> float:
    """E g^2 = sum_k a_k^2 k! (Parseval)."""
    return float(sum(v**2 * math.prod(math.factorial(q) for q in k) for k, v in t.a1.items()))


class AttentionModel(_Model):
    """Tied single-layer attention f_w(X) = Pi[softmax_row(z z^T)], z = (X + P/sqrt(d)) w.

    Parameters
    ----------
    target : str | sympy expression | theory.ssi.hermite.Target | PositionalSemanticTarget
    L : sequence length.
    pe : "none", "opposite" (L = 2, P_1 = -P_2) , "orthonormal" or a Gram matrix G = P P^T.
    reduction : "identity" (matrix output, squared Frobenius loss), "trace" or
        ("projection", a, b) = a^T A b.
    trace_norm : "sum" (Tr A) or "sqrtL" (Tr A / sqrt(L), the authors' code).
    engine, method, n, rng : see the module docstring (``n`` = nodes per dimension for GH,
        points for QMC/MC; ``rng`` seeds QMC/MC nodes).
    """

    kind = "attention"

    def __init__(
        self,
        target,
        L: int = 2,
        pe="none",
        reduction="identity",
        trace_norm="sum",
        *,
        engine="auto",
        method="auto",
        n=None,
        n_student=None,
        rng=0,
    ):
        L = int(L)
        if isinstance(reduction, str):
            red = reduction
            if red not in ("identity", "trace"):
                raise ValueError("reduction must be 'identity', 'trace' or ('projection', a, b)")
            self.proj = None
        else:
            if len(reduction) != 3 or reduction[0] != "projection":
                raise ValueError("a projection reduction is ('projection', a, b)")
            red = "projection"
            self.proj = (np.asarray(reduction[1], float), np.asarray(reduction[2], float))
            if self.proj[0].shape != (L,) or self.proj[1].shape != (L,):
                raise ValueError(f"projection vectors must have length L = {L}")
        if trace_norm not in ("sum", "sqrtL"):
            raise ValueError("trace_norm must be 'sum' or 'sqrtL'")
        self.reduction = red
        self.trace_norm = trace_norm
        self.pe = pe if isinstance(pe, str) else "gram"
        self.k = L * L if red == "identity" else 1
        self.n_student = n_student
        self._setup(target, L, _pe_basis(pe, L), engine, method, n, rng)

    def __repr__(self):
        return (
            f"AttentionModel({self.target!r}, L={self.L}, pe={self.pe!r}, "
            f"reduction={self.reduction!r}, engine={self.engine!r})"
        )

    def student(self, z):
        A, dA = attention_jac(z)
        N, L = z.shape
        if self.reduction == "identity":
            return A.reshape(N, -1), np.moveaxis(dA, 3, 1).reshape(N, L, -1)
        if self.reduction == "trace":
            c = 1.0 if self.trace_norm == "sum" else 1.0 / math.sqrt(L)
            idx = np.arange(L)
            f = c * A[:, idx, idx].sum(axis=1)
            df = c * dA[:, idx, idx, :].sum(axis=1)
            return f[:, None], df[:, :, None]
        a, b = self.proj
        f = np.einsum("i,nij,j->n", a, A, b)
        df = np.einsum("i,nijl,j->nl", a, dA, b)
        return f[:, None], df[:, :, None]

    def _student_nodes(self):
        if "nodes" not in self._cache:
            L = self.L
            if L <= 4:
                n = self.n_student or STUDENT_GH_NODES[L]
                z, w = gh_tensor(n, L)
            else:
                z = sobol_normal(self.n_student or QMC_POINTS, L, as_rng(self.rng))
                w = np.full(len(z), 1.0 / len(z))
            self._cache["nodes"] = (np.asarray(z), np.asarray(w))
        return self._cache["nodes"]

    def _student_moments(self, e_raw, gammas):
        """Moments at e_raw; with one reduced coordinate c (e_raw = B c, |c| <= 1) they come from
        Chebyshev interpolants in c on STUDENT_CHEB nodes (smooth functions of c: spectral
        accuracy, checked in the tests), otherwise from the direct Gauss-Hermite sum."""
        if self.r == 1:
            b = self.B[:, 0]
            c = float(b @ e_raw / (b @ b))
            if abs(c) <= 1 and np.allclose(e_raw, b * c, atol=1e-14):
                return self._cheb_moments(c, gammas)
        return self._direct_moments(e_raw, gammas)

    def _cheb_moments(self, c, gammas):
        from numpy.polynomial import chebyshev as C

        key = ("cheb", gammas)
        tab = self._cache.get(key)
        if tab is None:
            x = np.cos(np.pi * (np.arange(STUDENT_CHEB) + 0.5) / STUDENT_CHEB)
            rows = []
            for xc in x:
                M = self._direct_moments(self.B[:, 0] * xc, gammas)
                rows.append(
                    np.concatenate(
                        [M["f"], M["f2"], M["h"].ravel(), M["fh"].ravel(), M["f2h"].ravel()]
                    )
                )
            tab = C.chebfit(x, np.array(rows), STUDENT_CHEB - 1)
            self._cache[key] = tab
        v = C.chebval(c, tab)
        L, ng = self.L, len(gammas)
        sizes = [ng, ng, L * ng, L * ng, L * ng]
        parts = np.split(v, np.cumsum(sizes)[:-1])
        return dict(
            f=parts[0],
            f2=parts[1],
            h=parts[2].reshape(L, ng),
            fh=parts[3].reshape(L, ng),
            f2h=parts[4].reshape(L, ng),
        )

    def _direct_moments(self, e_raw, gammas):
        key = (tuple(np.round(e_raw, 15)), gammas)
        hit = self._cache.get("mom")
        if hit is not None and hit[0] == key:
            return hit[1]
        zeta, w = self._student_nodes()
        hk = self._cache.get(("he", gammas))
        if hk is None:
            hk = he_multi(zeta, list(gammas)) * w[:, None]
            self._cache[("he", gammas)] = hk
        f, df = self.student(zeta + e_raw[None])
        f = f[:, 0]
        h = df[:, :, 0] ** 2  # (N, L)
        F = np.column_stack([f, f**2, h, f[:, None] * h, (f**2)[:, None] * h])
        mom = np.einsum("nf,ng->fg", F, hk)  # (2 + 3L, n_gamma); einsum: no BLAS threads
        L = self.L
        out = dict(
            f=mom[0],
            f2=mom[1],
            h=mom[2 : 2 + L],
            fh=mom[2 + L : 2 + 2 * L],
            f2h=mom[2 + 2 * L : 2 + 3 * L],
        )
        self._cache["mom"] = (key, out)
        return out


class TiedNetwork(_Model):
    """Tied network f = sigma(sum_l z_l / sqrt(L)), z_l = x_l . w (no positional encoding)."""

    kind = "tied"

    def __init__(
        self, target, L: int = 1, activation="relu", *, engine="auto", method="auto", n=None, rng=0
    ):
        self.activation = activation
        self.sigma, self.dsigma, self.kinks = _act(activation)
        self.k = 1
        self._setup(target, int(L), np.zeros((int(L), 0)), engine, method, n, rng)

    def __repr__(self):
        return f"{type(self).__name__}({self.target!r}, L={self.L}, activation={self.activation!r})"

    def student(self, z):
        L = z.shape[1]
        u = z.sum(axis=1) / math.sqrt(L)
        f = self.sigma(u)
        df = np.repeat((self.dsigma(u) / math.sqrt(L))[:, None], L, axis=1)
        return f[:, None], df[:, :, None]

    def _ridge_moments(self, kmax):
        """mu_F(n) = E[F(u) He_n(u)], u ~ N(0,1), n <= kmax, for F = sigma, sigma^2, sigma'^2,
        sigma sigma'^2, sigma^2 sigma'^2 (adaptive quadrature split at the kinks)."""
        key = ("ridge", kmax)
        if key in self._cache:
            return self._cache[key]
        s, ds = self.sigma, self.dsigma
        funcs = [
            s,
            lambda u: s(u) ** 2,
            lambda u: ds(u) ** 2,
            lambda u: s(u) * ds(u) ** 2,
            lambda u: s(u) ** 2 * ds(u) ** 2,
        ]
        pts = [-np.inf, *sorted(self.kinks), np.inf]

        def integrand(u):
            u = np.atleast_1d(u)
            he = he_table(u, kmax)  # (kmax+1, 1)
            val = np.array([F(u) for F in funcs])[:, 0]  # (5,)
            return (
                (val[:, None] * he[:, 0][None, :]).ravel()
                * math.exp(-(u[0] ** 2) / 2)
                / math.sqrt(2 * math.pi)
            )

        tot = np.zeros(5 * (kmax + 1))
        for lo, hi in zip(pts[:-1], pts[1:]):
            v, _ = integrate.quad_vec(
                lambda u: integrand(np.array([u])), lo, hi, epsabs=1e-13, epsrel=1e-12
            )
            tot += v
        out = tot.reshape(5, kmax + 1)
        self._cache[key] = out
        return out

    def _student_moments(self, e_raw, gammas):
        kmax = max(sum(g) for g in gammas)
        mu = self._ridge_moments(kmax)
        L = self.L
        deg = np.array([sum(g) for g in gammas])
        scale = L ** (-deg / 2.0)
        mom = mu[:, deg] * scale[None]
        # h_l = sigma'(u)^2 / L for every l
        out = dict(
            f=mom[0],
            f2=mom[1],
            h=np.repeat(mom[2][None] / L, L, axis=0),
            fh=np.repeat(mom[3][None] / L, L, axis=0),
            f2h=np.repeat(mom[4][None] / L, L, axis=0),
        )
        return out


class UntiedNetwork(TiedNetwork):
    """Untied network f = sigma(sum_l x_l . w_l / sqrt(L)), each row on its own sphere; the state
    is the vector of row overlaps (m_1..m_L); m_untied = ||m|| / sqrt(L)."""

    kind = "untied"
    untied = True


def _act(name):
    s, ds, kinks = activation(name)
    return s, ds, kinks


# =========================================================================== ODE


@dataclass(frozen=True, kw_only=True)
class ODEResult(Result):
    """(e, m) trajectory of the d -> infinity ODE on log-spaced times.

    ``t`` (T,), ``steps`` = t d / lr, ``e`` (T,) (reduced coordinate; (T, r) for r > 1; zeros
    without PE), ``m`` (T,) (untied: m_untied = ||m_rows|| / sqrt(L)), ``m_rows`` (T, L) untied
    only, ``risk`` (T,).  ``t_escape`` / ``steps_escape``: first time ||(e, m)|| >= eta
    (untied: m_untied >= eta), None if never.  ``minimum``: "semantic" (final point within 15
    degrees of the m axis, norm > 0.5), "positional" (within 15 degrees of the e axis), "other".
    """

    t: np.ndarray = None
    steps: np.ndarray = None
    e: np.ndarray = None
    m: np.ndarray = None
    m_rows: np.ndarray | None = None
    risk: np.ndarray = None
    t_escape: float | None = None
    steps_escape: float | None = None
    final_e: float | list = 0.0
    final_m: float | list = 0.0
    minimum: str = "other"
    lr: float = 0.0
    d: float = 0.0
    eta: float = 0.0


def classify_minimum(e, m) -> str:
    e = np.atleast_1d(np.asarray(e, dtype=float))
    ne = float(np.linalg.norm(e))
    am = abs(float(m))
    if math.hypot(ne, am) < 0.5:
        return "other"
    ang = math.degrees(math.atan2(ne, am))
    if ang < 15:
        return "semantic"
    if ang > 75:
        return "positional"
    return "other"


def integrate_ode(
    model,
    lr: float,
    d: float,
    m0=None,
    e0=None,
    eta=None,
    t_max=None,
    n_out: int = 200,
    rtol: float = 1e-8,
    atol: float = 1e-14,
) -> ODEResult:
    """Integrate the (e, m) ODE of spec section 3 (corrected signs) from (e0, m0).

    Defaults: m0 = 1/sqrt(d) (every row for the untied network), e0 = 1/sqrt(d) in every reduced
    coordinate, eta = 2/sqrt(d).  ``t_max=None`` integrates until stationary (|dy/dt| t below
    1e-9 after escape, or the state collapsed to 1e-3 of its start, or exactly no drift).
    Times are reported as t and as SGD steps nu = t d / lr.
    """
    from theory.solve.ode import integrate_log_time

    lr = check_positive("lr", lr, strict=False)
    d = check_positive("d", d)
    m0 = 1 / math.sqrt(d) if m0 is None else m0
    eta = 2 / math.sqrt(d) if eta is None else check_positive("eta", eta)
    L = model.L
    if model.untied:
        y0 = np.atleast_1d(np.asarray(m0, dtype=float)).ravel()
        if y0.size == 1:
            y0 = np.full(L, float(y0[0]))
        if y0.size != L:
            raise ValueError(f"m0 must be a scalar or have L = {L} entries")
        norm = lambda y: float(np.linalg.norm(y)) / math.sqrt(L)
    else:
        if model.r:
            c0 = np.atleast_1d(np.asarray(1 / math.sqrt(d) if e0 is None else e0, float)).ravel()
            if c0.size == 1:
                c0 = np.full(model.r, float(c0[0]))
        else:
            c0 = np.zeros(0)
        y0 = np.concatenate([c0, [float(m0)]])
        norm = lambda y: float(np.linalg.norm(y))
    if norm(y0) > 1 + 1e-12:
        raise ValueError("the initial point must satisfy ||(e, m)|| <= 1")
    n0 = norm(y0)

    def fun(t, y):
        return model.rhs(y, lr)

    def stop(t, y, dy, escaped):
        ny = norm(y)
        speed = float(np.linalg.norm(dy))
        if speed == 0.0:
            return True
        if escaped:
            return speed * t <= 1e-9 * max(ny, 1e-300)
        return ny <= 1e-3 * n0

    sol = integrate_log_time(
        fun,
        y0,
        t_first=max(lr, 1e-12) / d,
        t_max=t_max,
        event=lambda y: norm(y) - eta,
        stop=stop,
        n_out=n_out,
        rtol=rtol,
        atol=atol,
    )
    Y = sol.y
    if model.untied:
        m_rows = Y
        m = np.linalg.norm(Y, axis=1) / math.sqrt(L)
        e = np.zeros(len(Y))
        final_e, final_m = 0.0, float(np.linalg.norm(sol.y_final) / math.sqrt(L))
        risk = np.array([model.risk(None, np.clip(row, -1, 1)) for row in Y])
        minimum = "semantic" if final_m > 0.5 else "other"
    else:
        m_rows = None
        m = Y[:, -1]
        e = Y[:, 0] if model.r == 1 else (Y[:, :-1] if model.r > 1 else np.zeros(len(Y)))
        fe = sol.y_final[:-1]
        final_e = float(fe[0]) if model.r == 1 else (fe.tolist() if model.r > 1 else 0.0)
        final_m = float(sol.y_final[-1])
        risk = np.array(
            [model.risk(row[:-1] if model.r else None, np.clip(row[-1], -1, 1)) for row in Y]
        )
        minimum = classify_minimum(fe, final_m)
    if sol.status != "converged":
        minimum = "other" if sol.status == "nan" else minimum
    te = sol.t_event
    return ODEResult(
        t=sol.t,
        steps=sol.t * d / lr if lr > 0 else np.full_like(sol.t, np.inf),
        e=e,
        m=m,
        m_rows=m_rows,
        risk=risk,
        t_escape=te,
        steps_escape=(te * d / lr if (te is not None and lr > 0) else None),
        final_e=final_e,
        final_m=final_m,
        minimum=minimum,
        lr=lr,
        d=d,
        eta=eta,
        status=sol.status,
        message=sol.message,
        params=dict(model=repr(model), lr=lr, d=d, m0=m0, e0=e0, eta=eta),
        metadata=dict(engine=model.engine, n_rhs=sol.n_rhs, t_final=sol.t_final),
    )


# =========================================================================== flatness


def flatness(model, max_order: int = 8, *, rel_tol: float = 1e-8):
    """Flatness index kappa = lowest k > 0 with grad^k R(0, 0) != 0, and the Hessian at 0.

    Hermite engine (polynomial targets): every derivative at the origin is
        d_e^alpha d_m^beta R(0,0)
            = [beta = 0] E[f(zeta)^2 He_alpha] - 2 a_beta beta! E[f He_{alpha+beta}]
    (raw coordinates), so the pattern of zeros coming from the target is exact (the a_beta are
    exact rationals) and the student moments are Gauss-Hermite integrals converged to ~1e-13; a
    derivative counts as zero when |value| <= rel_tol * (sum of |terms|) + 1e-12.  Quad engine
    (non-polynomial targets): only orders 1 and 2 (central differences); ValueError above.
    Returns (kappa or None, Hessian in reduced coordinates (c.., m)).
    """
    L = model.L
    T = model._reduce_map()  # (2L, n)
    H = model.hessian(np.zeros(model.r) if model.r else None, np.zeros(L) if model.untied else 0.0)
    if model.engine != "hermite":
        ge, gm = model.grad(np.zeros(model.r) if model.r else None, 0.0)
        g = np.concatenate([np.atleast_1d(ge), np.atleast_1d(gm)])
        if np.max(np.abs(g)) > 1e-8:
            return 1, H
        if np.max(np.abs(H)) > 1e-6:
            return 2, H
        raise ValueError(
            "flatness above order 2 is exact only for polynomial targets; this "
            "target is not polynomial"
        )
    t = model.target
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
            if be in t.a1:
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
                if be in t.a1:
                    bf = math.prod(math.factorial(q) for q in be)
                    term = -2 * cf * t.a1[be] * bf * M["f"][idx[_add(al, be)]]
                    val += term
                    scale += abs(term)
            if abs(val) > rel_tol * scale + 1e-12:
                nonzero = True
                break
        if nonzero:
            return k, H
    return None, H


def _unit(L, q):
    return tuple(int(i == q) for i in range(L))


# =========================================================================== escape predictions


def predicted_escape(
    target, L: int | None = None, d: float | None = None, lr=None, activation: str = "relu"
) -> dict:
    """Escape-time scaling law and tied/untied gains from the Hermite data (spec section 5).

    Returns ``sie``, ``scaling`` ("d", "d log^2 d", "d^(k-1)"), ``exponent`` and ``log_power``
    (steps ~ d^exponent log^log_power d at the best admissible step size), ``steps_order`` (that
    expression evaluated at ``d`` when given, no constant), ``alpha_tied`` = C_SIE x (1..1),
    ``alpha_untied`` = ||C_SIE||_op, ``gain_optimal``, ``gain_equal``, ``tied_learnable``,
    ``even_sie``.  The scaling is at the optimal step size (constant-gamma SIE = 2: d log d).
    With both ``d`` and ``lr``: the ODE escape steps of the tied and the untied network with
    ``activation`` from m0 = 1/sqrt(d) (threshold eta = 2/sqrt(d) on m, resp. on m_untied):
    ``steps_escape_tied``, ``steps_escape_untied`` (None if stuck) and ``gain_ode`` (their ratio,
    untied / tied, at equal step size).
    """
    from theory.ssi import hermite

    rep = hermite.analyze(target, L)
    k = rep.sie
    out = dict(
        sie=k,
        even_sie=rep.even_sie,
        alpha_tied=rep.tied_contraction,
        alpha_untied=rep.op_norm,
        gain_optimal=rep.gain_optimal,
        gain_equal=rep.gain_equal,
        tied_learnable=rep.tied_learnable,
        exact=rep.exact,
    )
    if k is None:
        out.update(scaling=None, exponent=None, log_power=None, steps_order=None)
        return out
    if k == 1:
        sc, ex, lp = "d", 1, 0
    elif k == 2:
        sc, ex, lp = "d log^2 d", 1, 2
    else:
        sc, ex, lp = f"d^{k - 1}", k - 1, 0
    out.update(
        scaling=sc, exponent=ex, log_power=lp, scaling_constant_lr=("d log d" if k == 2 else sc)
    )
    if d is not None:
        d = check_positive("d", d)
        out["steps_order"] = d**ex * math.log(d) ** lp
        if lr is not None:
            t = hermite.parse_target(target, L)
            rt = integrate_ode(TiedNetwork(t, t.L, activation), lr, d)
            ru = integrate_ode(UntiedNetwork(t, t.L, activation), lr, d)
            st, su = rt.steps_escape, ru.steps_escape
            out.update(
                steps_escape_tied=st,
                steps_escape_untied=su,
                gain_ode=(su / st) if (st and su) else (0.0 if su else None),
            )
    return out


# =========================================================================== phase diagram (spec 6)

REGIONS = (
    "unique semantic",
    "unique semantic, positional initial dynamics",
    "unique positional",
    "global semantic (SGD finds it)",
    "global semantic, SGD to local positional",
    "global positional",
)
PD_NODES = 200  # default 2-D Gauss-Hermite nodes per dimension for the phase-diagram integrals


@lru_cache(maxsize=8)
def pd_blocks(n: int = PD_NODES) -> dict:
    """a- and omega-independent building blocks of R for the spec-6 model (2-D integrals only).

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


def pd_criteria(a, omega, n: int = PD_NODES) -> dict:
    """The exact spec-6 criteria at (a, omega) (arrays broadcast): derivatives of R at the origin
    and at the two candidate minima, each affine in omega for fixed a."""
    b = pd_blocks(n)
    a = np.asarray(a, dtype=float)
    om = np.asarray(omega, dtype=float)
    p = 1.0 / (1.0 + np.exp(-2 * a * a))

    def dotA(M):  # <A_a, M> for A_a = [[p, 1-p], [1-p, p]]
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


def pd_booleans(a, omega, n: int = PD_NODES) -> dict:
    """The three booleans of spec 6 (plus which candidates are minima) and the region index."""
    c = pd_criteria(a, omega, n)
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


def boundaries(a: float, n: int = PD_NODES) -> dict:
    """omega in [0, 1] on the line a = A where each spec-6 boolean flips (None if none).

    ``omega_steepest_switch``: root of R_ee(0,0) - R_mm(0,0); ``omega_global_switch``: root of
    R(1,0) - R(0,1) (where both are minima); ``omega_positional_min_appears`` /
    ``omega_semantic_min_disappears``: where the exact boundary-minimum criteria (outward normal
    derivative < 0 and positive second derivative along the circle) change.  Roots by Brent on
    the exact criteria (each affine in omega for fixed a).
    """
    a = float(a)
    if not (0 < a <= 10):
        raise ValueError(f"a must be in (0, 10], got {a}")
    cr = lambda om, key: float(pd_criteria(a, om, n)[key])
    bo = lambda om, key: bool(pd_booleans(a, om, n)[key])
    out = dict(
        a=a,
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
        nodes=n,
    )
    return out


def phase_diagram(
    a_grid, omega_grid, n: int = PD_NODES, *, check_global: bool = False, n_disk: int = 41
) -> dict:
    """Classify every (a, omega) of the grid: arrays (n_a, n_omega) of the three booleans, the
    candidate-minimum flags and the region index into :data:`REGIONS` (-1 = none).

    ``check_global``: also scan R over a polar grid of the closed disk (``n_disk`` radii x
    4 n_disk angles, from the Mehler/Chebyshev tables) and return ``global_check`` = True where
    no disk point is lower than the better candidate by more than 1e-6 (i.e. the global minimum
    is one of the two candidates, as boolean 1 assumes)."""
    ag, wg = np.asarray(a_grid, float), np.asarray(omega_grid, float)
    A, O = np.meshgrid(ag, wg, indexing="ij")
    out = pd_booleans(A, O, n)
    out.update(a=ag, omega=wg, regions=REGIONS, nodes=n)
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
        out["global_check"] = ok
    return out


PS_KMAX_K = 16  # Mehler order of the K tables (K only enters through gamma K / 2)
PS_KMAX = 40  # Mehler truncation order (Parseval tail of S beyond 40: 9e-7)
PS_NCHEB = 40  # Chebyshev nodes in e on [-1, 1]
PS_NODES = 100  # 2-D GH nodes per dimension for the tables


class PSTables:
    """Exact-to-truncation tables of the spec-6 risk along e in [-1, 1] (a-, omega-independent).

    X(e, m) = E<S(xi), S(z)> = sum_j m^j c_j(e),  c_j(e) = sum_{|k| = j} <S_k, F_k(e)> / k!
    (Mehler; S_k = E[S(xi) He_k(xi)], F_k(e) = E[S(v(e) + zeta) He_k(zeta)], v = (e, -e)),
    truncated at j <= kmax (error <= sqrt(tail_S tail_F) <= ~1e-6 at |m| = 1 for kmax = 40, the
    Parseval tails being computed in ``tail``).  c_j(e), F1(e) = E S(v + zeta) and
    F2(e) = E||S(v + zeta)||^2 are stored as Chebyshev interpolants on ``ncheb`` nodes (smooth,
    Gaussian-smoothed functions: spectral accuracy); e-derivatives are those of the interpolants.
    """

    def __init__(self, kmax=PS_KMAX, ncheb=PS_NCHEB, n=PS_NODES):
        from numpy.polynomial import chebyshev as C

        from theory.ssi._kernels import attention_scores, multi_indices

        x, w = gh_rule(n)
        Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
        W = np.outer(w, w).ravel()
        ks = multi_indices(2, kmax)
        deg = np.array([sum(k) for k in ks])
        kfac = np.array([math.factorial(k[0]) * math.factorial(k[1]) for k in ks], float)
        H = he_multi(Z, ks) * W[:, None]  # (N, nk)
        S0 = attention_scores(Z).reshape(-1, 4)
        Shat = np.einsum("na,nk->ka", S0, H)  # (nk, 4)
        self.ES = Shat[0].reshape(2, 2)
        self.ESS = float(W @ np.sum(S0**2, axis=1))
        tail_S = self.ESS - float(np.sum(np.sum(Shat**2, axis=1) / kfac))
        nodes = np.cos(np.pi * (np.arange(ncheb) + 0.5) / ncheb)
        cvals = np.zeros((ncheb, kmax + 1))
        F1 = np.zeros((ncheb, 4))
        F2 = np.zeros(ncheb)
        tails = []
        for i, e in enumerate(nodes):
            Se = attention_scores(Z + np.array([e, -e])[None]).reshape(-1, 4)
            Fhat = np.einsum("na,nk->ka", Se, H)
            contrib = np.sum(Shat * Fhat, axis=1) / kfac
            cvals[i] = np.bincount(deg, weights=contrib, minlength=kmax + 1)
            F1[i] = Fhat[0]
            F2[i] = W @ np.sum(Se**2, axis=1)
            tails.append(F2[i] - float(np.sum(np.sum(Fhat**2, axis=1) / kfac)))
        # ---- K tables (Mehler to order kmax_k): see K()
        kk = PS_KMAX_K
        nkk = (kk + 1) * (kk + 2) // 2  # multi_indices is ordered by total degree
        Hk = H[:, :nkk]
        degk = deg[:nkk]
        kfk = kfac[:nkk]
        SS = (S0[:, :, None] * S0[:, None, :]).reshape(-1, 16)
        GSS = np.einsum("na,nk->ka", SS, Hk)  # (nkk, 16)
        Sk = Shat[:nkk]
        kvals = []
        for e in nodes:
            Ae, dAe = attention_jac(Z + np.array([e, -e])[None])
            f = Ae.reshape(-1, 4)
            D = np.moveaxis(dAe, 3, 1).reshape(-1, 2, 4)  # (N, l, a)
            Q = np.einsum("nla,nlb->nab", D, D).reshape(-1, 16)
            fD = np.einsum("na,nla->nl", f, D)
            T = np.einsum("nla,nl->na", D, fD)
            V = np.sum(fD**2, axis=1)
            Qh = np.einsum("na,nk->ka", Q, Hk)  # (nkk, 16)
            Th = np.einsum("na,nk->ka", T, Hk)  # (nkk, 4)
            K1 = np.bincount(degk, np.sum(GSS * Qh, axis=1) / kfk, minlength=kk + 1)
            Q4 = Qh.reshape(-1, 4, 4)
            K2 = np.stack(
                [
                    np.bincount(
                        degk, np.einsum("ka,ka->k", Sk, Q4[:, :, b]) / kfk, minlength=kk + 1
                    )
                    for b in range(4)
                ],
                axis=1,
            )
            K3 = np.bincount(degk, np.sum(Sk * Th, axis=1) / kfk, minlength=kk + 1)
            kvals.append(np.concatenate([K1, K2.ravel(), K3, Qh[0], Th[0], [W @ V]]))
        self.kk = kk
        fit = lambda y: C.chebfit(nodes, y, ncheb - 1)
        self.Ktab = fit(np.array(kvals))
        self.c = fit(cvals)  # (ncheb, kmax+1) Chebyshev coefficients per power j
        self.F1 = fit(F1)
        self.F2 = fit(F2)
        self.C = C
        self.kmax = kmax
        self.tail = math.sqrt(max(tail_S, 0.0) * max(max(tails), 0.0))
        self.params = dict(kmax=kmax, ncheb=ncheb, n=n, truncation_bound=self.tail)

    def _ev(self, coef, e, der=0):
        C = self.C
        if der:
            key = (id(coef), der)
            cache = self.__dict__.setdefault("_der", {})
            if key not in cache:
                cache[key] = C.chebder(coef, der, axis=0)
            coef = cache[key]
        return C.chebval(e, coef)

    def X(self, e, m, de=0, dm=0):
        """d_e^de d_m^dm X(e, m) (e, m scalars or broadcastable arrays)."""
        e = np.asarray(e, float)
        m = np.asarray(m, float)
        cj = self._ev(self.c, e, de)  # (kmax+1, *shape)
        j = np.arange(self.kmax + 1).reshape((-1,) + (1,) * e.ndim)
        if dm == 0:
            pw = m[None] ** j
        elif dm == 1:
            pw = j * m[None] ** np.clip(j - 1, 0, None) * (j >= 1)
        else:
            pw = j * (j - 1) * m[None] ** np.clip(j - 2, 0, None) * (j >= 2)
        return np.sum(cj * pw, axis=0)

    def fast_point(self, e, m, omega, A):
        """(R, dR/de, dR/dm, K) at one scalar point: one Chebyshev basis evaluation shared by
        every table (same numbers as :meth:`eval` and :meth:`K`; used by the ODE)."""
        C = self.C
        st = self.__dict__.get("_stack")
        if st is None:
            dc = C.chebder(self.c, 1, axis=0)
            dF1 = C.chebder(self.F1, 1, axis=0)
            dF2 = C.chebder(self.F2, 1, axis=0)
            cols = [self.c, dc, self.F1, dF1, self.F2[:, None], dF2[:, None], self.Ktab]
            # pad derivative tables to the same number of rows
            nr = self.c.shape[0]
            cols = [np.vstack([x, np.zeros((nr - x.shape[0], x.shape[1]))]) for x in cols]
            st = np.hstack(cols)
            self._stack = st
        nr = st.shape[0]
        v = C.chebvander(float(e), nr - 1)[0] @ st
        k1 = self.kmax + 1
        c, dc = v[:k1], v[k1 : 2 * k1]
        F1, dF1 = v[2 * k1 : 2 * k1 + 4], v[2 * k1 + 4 : 2 * k1 + 8]
        F2, dF2 = v[2 * k1 + 8], v[2 * k1 + 9]
        kt = v[2 * k1 + 10 :]
        A4 = np.asarray(A, float).ravel()
        j = np.arange(k1)
        mp = float(m) ** j
        mp1 = j * float(m) ** np.clip(j - 1, 0, None)
        w1 = 2 * (1 - omega)
        egg = (
            (1 - omega) ** 2 * self.ESS
            + 2 * omega * (1 - omega) * float(self.ES.ravel() @ A4)
            + omega**2 * float(A4 @ A4)
        )
        R = egg + F2 - w1 * (c @ mp) - 2 * omega * (A4 @ F1)
        Re = dF2 - w1 * (dc @ mp) - 2 * omega * (A4 @ dF1)
        Rm = -w1 * (c @ mp1)
        return float(R), float(Re), float(Rm), self._K_from(kt, m, omega, A4)

    def _K_from(self, v, m, omega, A4):
        kk = self.kk
        K1, K2, K3 = (
            v[: kk + 1],
            v[kk + 1 : 5 * (kk + 1)].reshape(kk + 1, 4),
            v[5 * (kk + 1) : 6 * (kk + 1)],
        )
        rest = v[6 * (kk + 1) :]
        EQ, ET, EV = rest[:16].reshape(4, 4), rest[16:20], rest[20]
        pw = float(m) ** np.arange(kk + 1)
        w = omega
        val = (
            (1 - w) ** 2 * (pw @ K1)
            + 2 * (1 - w) * (w * (pw @ K2 @ A4) - pw @ K3)
            + w**2 * A4 @ EQ @ A4
            - 2 * w * (A4 @ ET)
            + EV
        )
        return 4.0 * float(val)

    def K(self, e, m, omega, A):
        """K(e, m) = E sum_l (dl/dz_l)^2 of the spec-6 model by Mehler's formula (order
        PS_KMAX_K): with D_l = df/dz_l, Q_ab = sum_l D_la D_lb, T_a = sum_l D_la (f.D_l),
        V = sum_l (f.D_l)^2,
        K/4 = (1-w)^2 E[S_a S_b(xi) Q_ab(z)] + 2 (1-w) (w A_b E[S_a(xi) Q_ab(z)] - E[S_a T_a])
              + w^2 A.E[Q].A - 2 w A.E[T] + E[V]."""
        return self._K_from(
            self.C.chebval(float(e), self.Ktab), m, omega, np.asarray(A, float).ravel()
        )

    def eval(self, e, m, omega, A, second=True):
        """R, dR/de (reduced e), dR/dm and (``second``) the second derivatives of the spec-6
        risk."""
        A4 = np.asarray(A, float).ravel()
        F1 = lambda d: np.tensordot(A4, self._ev(self.F1, e, d), axes=(0, 0))
        F2 = lambda d: self._ev(self.F2, e, d)
        egg = (
            (1 - omega) ** 2 * self.ESS
            + 2 * omega * (1 - omega) * float(self.ES.ravel() @ A4)
            + omega**2 * float(A4 @ A4)
        )
        w1 = 2 * (1 - omega)
        out = dict(
            R=egg + F2(0) - w1 * self.X(e, m) - 2 * omega * F1(0),
            Re=F2(1) - w1 * self.X(e, m, de=1) - 2 * omega * F1(1),
            Rm=-w1 * self.X(e, m, dm=1),
        )
        if second:
            out.update(
                Ree=F2(2) - w1 * self.X(e, m, de=2) - 2 * omega * F1(2),
                Rem=-w1 * self.X(e, m, de=1, dm=1),
                Rmm=-w1 * self.X(e, m, dm=2),
            )
        return out


_PS_FIELDS = ("c", "F1", "F2", "Ktab", "ES", "ESS", "kmax", "kk", "tail")


def _cache_dir():
    import os
    from pathlib import Path

    return Path(os.environ.get("THEORY_CACHE_DIR", Path.home() / ".cache" / "theory"))


@lru_cache(maxsize=4)
def ps_tables(kmax=PS_KMAX, ncheb=PS_NCHEB, n=PS_NODES) -> PSTables:
    """Cached :class:`PSTables`: in memory, and on disk in ``$THEORY_CACHE_DIR`` (default
    ~/.cache/theory; a .npz keyed by every parameter and a hash of the table code; rebuilt if
    missing or unreadable, skipped if the folder is not writable).  Building takes ~5-10 s."""
    import hashlib
    import inspect
    import io

    from numpy.polynomial import chebyshev as C

    from theory import __version__
    from theory._util import atomic_write_bytes

    src = hashlib.sha1((inspect.getsource(PSTables) + inspect.getsource(attention_jac)).encode())
    name = (
        f"ps_tables_k{kmax}_kk{PS_KMAX_K}_c{ncheb}_n{n}_v{__version__}_{src.hexdigest()[:12]}.npz"
    )
    path = _cache_dir() / name
    try:
        with np.load(path) as z:
            tb = PSTables.__new__(PSTables)
            for f in _PS_FIELDS:
                v = z[f]
                setattr(tb, f, v if v.ndim else v.item())
            tb.kmax, tb.kk = int(tb.kmax), int(tb.kk)
            tb.C = C
            tb.params = dict(
                kmax=kmax, ncheb=ncheb, n=n, truncation_bound=float(tb.tail), cache=str(path)
            )
            return tb
    except (OSError, KeyError, ValueError):
        pass
    tb = PSTables(kmax, ncheb, n)
    try:
        buf = io.BytesIO()
        np.savez(buf, **{f: np.asarray(getattr(tb, f)) for f in _PS_FIELDS})
        atomic_write_bytes(path, buf.getvalue())
    except OSError:
        pass
    return tb


def landscape(a: float, omega: float, n_grid: int = 121, tables: PSTables | None = None):
    """R(e, m) of the spec-6 model on an n_grid x n_grid grid of [-1, 1]^2 (NaN outside the
    disk): returns (e_grid, m_grid, R) with R[i, j] = R(e_grid[j], m_grid[i])."""
    tb = tables or ps_tables()
    eg = np.linspace(-1, 1, n_grid)
    E, M = np.meshgrid(eg, eg)
    inside = E**2 + M**2 <= 1 + 1e-12
    R = np.full(E.shape, np.nan)
    R[inside] = tb.eval(E[inside], M[inside], omega, positional_matrix(a))["R"]
    return eg, eg, R


def ps_model(a: float, omega: float, **kw) -> AttentionModel:
    """The spec-6 attention model: positional-semantic target, L = 2, P_1 = -P_2, identity."""
    return AttentionModel(
        PositionalSemanticTarget(omega, a), L=2, pe="opposite", reduction="identity", **kw
    )
