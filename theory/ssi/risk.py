r"""The SSI problem objects and their population risk: :class:`AttentionModel`,
:class:`TiedNetwork`, :class:`UntiedNetwork`, each with R(e, m), its derivatives and the SGD noise
term K computed by one of three engines.

A model is ONE problem description (target + student + positional encoding) accepted by the
theory (this module, ``theory.ssi.ode``, ``theory.ssi.flatness``) and by the simulations
(``theory.ssi.sgd``).  Normalisation, order parameters and every formula: docs/ssi.md sections
1-3 (eqs. 1-15).  In short: m = w*.w/d, e_l = P_l.w/sqrt(d); the encoding enters through
B (L, r) with G = P P^T = B B^T, and e = B c with reduced coordinates c in R^r -- every function
below takes and returns e in these reduced coordinates (pe="opposite", L = 2, P_1 = -P_2: B =
(1, -1)^T and c is the scalar e of the paper).

The three engines (docs/ssi.md section 3)
-----------------------------------------
* ``engine="hermite"`` (default for polynomial scalar targets; exact in the target): Mehler's
  formula, eq. 11, with the exact Hermite coefficients of g and g^2; e-derivatives by Stein's
  raising of the Hermite index (eq. 12); the student moments by tensor Gauss-Hermite in L <= 4
  dimensions (``n_student`` nodes per axis; scrambled Sobol above), or, for the networks, by the
  ridge identity eq. 13 and 1-D adaptive quadrature.  Attention with one reduced encoding
  coordinate tabulates its student moments as Chebyshev interpolants in c (``STUDENT_CHEB``
  nodes, ~1e-8 relative); ``flatness`` uses the direct sums.
* ``engine="quad"`` (any target): the 2L-dimensional expectation eq. 10 over (xi, eta) on FIXED
  nodes (common random numbers: the ODE right-hand side is smooth): tensor Gauss-Hermite
  (``method="gh"``, L <= 2), scrambled Sobol (``"qmc"``) or Monte Carlo (``"mc"``); dR/dm by
  Price's theorem (eq. 14), regular at |m| = 1; the Hessian by central differences (h = 1e-4) of
  the quadrature gradient.  Networks default to QMC (tensor GH puts symmetric node pairs on a
  relu kink and biases dR/dm near m = 0).
* ``engine="ps"`` (default for the positional-semantic model of docs/ssi.md section 8: L = 2,
  identity reduction, pe none/opposite): the Mehler series in m with numerically computed Hermite
  coefficients of softmax(xi xi^T) to order 40 and the student moments as Chebyshev
  interpolants in e (eq. 15, ``theory.ssi.tables``); K by the same construction to order 16.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp
from scipy import integrate

from theory._util import check_int
from theory.gauss import gh_tensor, sobol_normal
from theory.rng import as_rng
from theory.ssi._kernels import (
    ACTIVATIONS,
    activation_key,
    attention_jac,
    attention_trace_jac,
    he_multi,
    he_table,
    written_activation,
)
from theory.ssi._kernels import activation as activation_fn
from theory.ssi.hermite import polynomial_coefficients
from theory.ssi.tables import ps_tables
from theory.ssi.targets import MAX_L, PositionalSemanticTarget, Target, as_target

__all__ = ["SSIModel", "AttentionModel", "TiedNetwork", "UntiedNetwork", "ps_model"]

QUAD_GH_NODES = {1: 60, 2: 16}  # per dimension of the 2L-dim (xi, eta) rule
STUDENT_GH_NODES = {1: 120, 2: 64, 3: 24, 4: 14}  # per dimension of the L-dim student rule
QMC_POINTS = 2**15
MAX_PE_TARGET = 10.0  # |a_l|: the encoding's component along w* (z_l shifts by a_l m)
STUDENT_CHEB = 40  # Chebyshev nodes in the reduced coordinate for one-dimensional encodings


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


class SSIModel:
    """One SSI problem: a target, a student, the geometry of the positional encoding.

    The same object is the input of the theory (:meth:`risk`, :meth:`grad`, :meth:`noise_K`,
    :meth:`hessian`, ``theory.ssi.integrate_ode``, ``theory.ssi.flatness``) and of the
    simulations (``theory.ssi.simulate_sgd``, ``simulate_reduced``, ``simulate_seeds``).
    Subclasses define the student.  Picklable: the quadrature nodes and tables of the risk
    engines are built on first use, in the process that uses them.
    """

    untied = False
    kind = "model"

    def _setup(self, target, L, B, engine, method, n, rng):
        self.L = check_int("L", L, lo=1, hi=MAX_L)
        self.target = as_target(target, self.L)
        self.B = B
        self.r = B.shape[1]
        self.G = B @ B.T
        if not hasattr(self, "a_pe"):
            self.a_pe = np.zeros(self.L)  # encoding components along w* (AttentionModel)
        poly = isinstance(self.target, Target) and self.target.is_polynomial
        ps_ok = (
            isinstance(self.target, PositionalSemanticTarget)
            and self.L == 2
            and self.kind == "attention"
            and self.reduction == "identity"
            and self.r <= 1
            and not np.any(self.a_pe)
            and (self.r == 0 or np.allclose(np.abs(B[:, 0]), 1.0) and B[0, 0] == -B[1, 0])
        )
        if engine == "auto":
            engine = "hermite" if poly and self.k == 1 else ("ps" if ps_ok else "quad")
        if engine not in ("hermite", "quad", "ps"):
            raise ValueError("engine must be 'auto', 'hermite', 'ps' or 'quad'")
        if engine == "ps" and not ps_ok:
            raise ValueError(
                "engine='ps' is the positional-semantic model of docs/ssi.md section 8: "
                "positional-semantic target, L = 2, identity reduction, pe 'none' or 'opposite'"
            )
        if engine == "hermite" and not (poly and self.k == 1):
            raise ValueError(
                "engine='hermite' needs a polynomial scalar target and a scalar "
                "student output; use engine='quad'"
            )
        if self.target.k != self.k:
            raise ValueError(
                f"the target has {self.target.k} output(s) but the student has {self.k}: a scalar "
                "target needs a scalar reduction (reduction='trace' or a projection); the "
                "identity reduction needs a matrix target (PositionalSemanticTarget)"
            )
        if method not in ("auto", "gh", "qmc", "mc"):
            raise ValueError("method must be 'auto', 'gh', 'qmc' or 'mc'")
        if method == "auto" and engine == "quad":
            # tensor GH puts node pairs exactly on the kink of relu-like activations (sum of
            # symmetric nodes = 0), which biases dR/dm near m = 0: networks use QMC
            method = "gh" if (self.L <= 2 and self.kind == "attention") else "qmc"
        self.engine = engine
        self.method = method
        self.n = n
        self.rng = rng
        self._cache = {}

    # ---------------------------------------------------------------- pickling / identity
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = {}  # nodes, tables and moments are rebuilt where they are used
        return state

    @property
    def n_rows(self) -> int:
        """Number of student rows on their own sphere: L (untied), else 1."""
        return self.L if self.untied else 1

    def key(self) -> dict:
        """JSON-able identity of the problem (target, student, encoding): the store key of the
        simulations.  The numerical settings of the theory (engine, nodes) are not part of it."""
        raise NotImplementedError

    # ---------------------------------------------------------------- student (override)
    def student(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
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
        mv = np.clip(mv, -1.0, 1.0)
        return c, self.e_raw(c, mv), mv

    def e_raw(self, c: np.ndarray, mv: np.ndarray) -> np.ndarray:
        """The shifts e_l = P_l . w / sqrt(d) at reduced coordinates c and overlaps mv (L,):
        B c, plus a_l m for an encoding with components a_l along w* (docs/ssi.md section 4b)."""
        return self.B @ c + self.a_pe * mv

    # ---------------------------------------------------------------- raw quantities
    def _raw(self, e_raw, mv, hess=False):
        if self.engine == "hermite":
            return self._raw_hermite(e_raw, mv, hess)
        if self.engine == "ps":
            return self._raw_ps(e_raw, mv)
        return self._raw_quad(e_raw, mv)

    def _raw_ps(self, e_raw, mv):
        tg = self.target
        tb = self._cache.get("ps")
        if tb is None:
            tb = self._cache["ps"] = ps_tables()
        e = 0.5 * float(e_raw[0] - e_raw[1])
        m = float(np.mean(mv))
        R, Re, Rm, K = tb.fast_point(e, m, tg.omega, tg.A)
        return dict(
            R=R, dRde=np.array([0.5, -0.5]) * Re, dRdm=np.full(2, 0.5 * Rm), K=np.full(2, 0.5 * K)
        )

    # ---- quad engine
    def _quad(self) -> dict:
        """The fixed nodes of the quad engine (built on first use)."""
        q = self._cache.get("quad")
        if q is not None:
            return q
        L = self.L
        dim = 2 * L
        method = self.method
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
        xi = np.ascontiguousarray(nodes[:, :L])
        w = np.asarray(w)
        g = self.target.values(xi)
        q = dict(
            xi=xi,
            eta=np.ascontiguousarray(nodes[:, L:]),
            w=w,
            g=g,
            dg=self.target.grad(xi),
        )
        self._cache["quad"] = q
        return q

    def _raw_quad(self, e_raw, mv):
        q = self._quad()
        s = np.sqrt(np.clip(1 - mv**2, 0.0, None))
        z = e_raw[None] + mv[None] * q["xi"] + s[None] * q["eta"]
        f, df = self.student(z)
        res = q["g"] - f  # (N, k)
        w = q["w"]
        R = float(w @ np.sum(res**2, axis=1))
        gl = -2.0 * np.einsum("nk,nlk->nl", res, df)  # dl/dz_l
        dRde = w @ gl
        dRdm = -2.0 * (w @ np.einsum("nlk,nlk->nl", q["dg"], df))
        K = w @ gl**2
        return dict(R=R, dRde=dRde, dRdm=dRdm, K=K)

    # ---- hermite engine
    def _student_moments(self, e_raw, gammas):
        """Moments E[F(e + zeta) He_gamma(zeta)] for F in (f, f^2, h_l, f h_l, f^2 h_l)."""
        raise NotImplementedError

    def _direct_moments(self, e_raw, gammas):
        return self._student_moments(e_raw, gammas)

    def _hermite_coefficients(self) -> tuple[dict, dict]:
        """The Hermite coefficients a_alpha of g and of g^2 (floats from exact sympy values;
        g = sum a_alpha He_alpha, docs/ssi.md eq. 21), for the Mehler engine."""
        c = self._cache.get("a")
        if c is None:
            expr = self.target.expr
            a1 = polynomial_coefficients(expr, self.L)
            a2 = polynomial_coefficients(sp.expand(expr**2), self.L)
            c = self._cache["a"] = (
                {k: float(v) for k, v in a1.items()},
                {k: float(v) for k, v in a2.items()},
            )
        return c

    def _hermite_plan(self, hess):
        """Index bookkeeping of the Hermite engine (cached): the Hermite indices gamma = k + r of
        every needed student moment and, per derivative order beta of m, the falling-factorial
        coefficients of d^beta m^k."""
        key = ("plan", hess)
        if key in self._cache:
            return self._cache[key]
        a1d, a2d = self._hermite_coefficients()
        L = self.L
        zero = (0,) * L
        unit = [_unit(L, l) for l in range(L)]
        ks1 = list(a1d)
        ks2 = list(a2d)
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
            a1=np.array([a1d[k] for k in ks1]),
            a2=np.array([a2d[k] for k in ks2]),
            K2=np.array(ks2, dtype=int).reshape(len(ks2), L),
            col1={r: np.array([idx[_add(k, r)] for k in ks1], dtype=int) for r in raises},
            col2=np.array([idx[k] for k in ks2], dtype=int),
            coef=coef,
            egg=_egg_exact(a1d),
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
    def risk(self, e: float | np.ndarray | None = None, m: float | np.ndarray = 0.0) -> float:
        """Population risk R(e, m) (e in reduced coordinates; ignored without PE)."""
        _, er, mv = self._split(e, m)
        return self._raw(er, mv)["R"]

    def grad(
        self, e: float | np.ndarray | None = None, m: float | np.ndarray = 0.0
    ) -> tuple[float | np.ndarray, float | np.ndarray]:
        """(dR/de, dR/dm): dR/de scalar for one reduced coordinate (pe='opposite'), (r,) array
        otherwise ((0,) without PE); dR/dm scalar (tied/attention) or (L,) (untied)."""
        _, er, mv = self._split(e, m)
        q = self._raw(er, mv)
        ge = self.B.T @ q["dRde"]
        ge = float(ge[0]) if self.r == 1 else ge
        gm = q["dRdm"] if self.untied else self.dRdm_total(q)
        return ge, gm

    def dRdm_total(self, q: dict) -> float:
        """dR/dm of the tied student from the raw derivatives ``q``: sum_l dR/dm_l, plus
        a . dR/de (chain rule through e_l = (B c)_l + a_l m, docs/ssi.md section 4b)."""
        return float(np.sum(q["dRdm"]) + self.a_pe @ q["dRde"])

    def noise_K(
        self, e: float | np.ndarray | None = None, m: float | np.ndarray = 0.0
    ) -> float | np.ndarray:
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
            T[:L, self.r] = self.a_pe  # e_raw moves with m along the components on w*
        return T

    def hessian(
        self, e: float | np.ndarray | None = None, m: float | np.ndarray = 0.0, h: float = 1e-4
    ) -> np.ndarray:
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


def _add(a, b):
    return tuple(x + y for x, y in zip(a, b))


def _egg_exact(a1: dict) -> float:
    """E g^2 = sum_k a_k^2 k! (Parseval, docs/ssi.md eq. 22)."""
    return float(sum(v**2 * math.prod(math.factorial(q) for q in k) for k, v in a1.items()))


def _unit(L, q):
    return tuple(int(i == q) for i in range(L))


class AttentionModel(SSIModel):
    """Tied single-layer attention f_w(X) = Pi[softmax_row(z z^T)], z = (X + P/sqrt(d)) w.

    Parameters
    ----------
    target : str | sympy expression | Target | PositionalSemanticTarget (``theory.ssi.targets``)
    L : sequence length.
    pe : "none", "opposite" (L = 2, P_1 = -P_2) , "orthonormal" or a Gram matrix G = P P^T.
    reduction : "identity" (matrix output, squared Frobenius loss), "trace" or
        ("projection", a, b) = a^T A b.
    trace_norm : "sum" (Tr A) or "sqrtL" (Tr A / sqrt(L), the authors' code).
    pe_target : None (default: P orthogonal to w*) or a_l, l = 1..L: the injected encoding
        P_l = a_l w*/sqrt(d) + P~_l with P~ the encoding given by ``pe`` (orthogonal to w*), so
        e_l = (B c)_l + a_l m (paper Fig. 6; docs/ssi.md section 4b).  The reduced coordinates
        c stay those of P~.
    engine, method, n, n_student, rng : see the module docstring (``n`` = nodes per dimension
        for GH, points for QMC/MC; ``rng`` draws the QMC/MC nodes).
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
        pe_target=None,
    ):
        L = check_int("L", L, lo=1, hi=MAX_L)
        self.a_pe = np.zeros(L)
        if pe_target is not None:
            a = np.atleast_1d(np.asarray(pe_target, dtype=float)).ravel()
            if a.shape != (L,) or not np.all(np.isfinite(a)) or np.any(np.abs(a) > MAX_PE_TARGET):
                raise ValueError(
                    f"pe_target must be L = {L} finite numbers of size <= {MAX_PE_TARGET:g} "
                    f"(the encoding's components along w*), got {pe_target!r}"
                )
            self.a_pe = a
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
        inj = f", pe_target={self.a_pe.tolist()}" if np.any(self.a_pe) else ""
        return (
            f"AttentionModel({self.target!r}, L={self.L}, pe={self.pe!r}{inj}, "
            f"reduction={self.reduction!r}, engine={self.engine!r})"
        )

    def key(self) -> dict:
        pe = self.G.tolist() if self.pe == "gram" else self.pe
        proj = None if self.proj is None else [self.proj[0].tolist(), self.proj[1].tolist()]
        return dict(
            kind=self.kind,
            L=self.L,
            target=self.target.key(),
            pe=pe,
            reduction=self.reduction,
            trace_norm=self.trace_norm,
            projection=proj,
        ) | ({"pe_target": self.a_pe.tolist()} if np.any(self.a_pe) else {})

    def student(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        N, L = z.shape
        if self.reduction == "trace":
            c = 1.0 if self.trace_norm == "sum" else 1.0 / math.sqrt(L)
            f, df = attention_trace_jac(z)  # O(N L^2): no (N, L, L, L) derivative
            return c * f[:, None], c * df[:, :, None]
        A, dA = attention_jac(z)
        if self.reduction == "identity":
            return A.reshape(N, -1), np.moveaxis(dA, 3, 1).reshape(N, L, -1)
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
                # antithetic: the scrambled-Sobol half and its mirror image -z, so the rule
                # integrates every odd function exactly, as the Gaussian does.  The attention
                # student is even in z, so its gradient in the encoding vanishes at e = 0 and
                # (e, m) = 0 is a fixed point of the ODE; plain Sobol points broke that by their
                # error (dc/dt ~ 3e-4 at (e, m) = 0, L = 7), which left a spurious fixed point
                # |c| ~ 1e-4 the flow neither escaped nor collapsed from (issue 13)
                n = self.n_student or QMC_POINTS
                half = sobol_normal((n + 1) // 2, L, as_rng(self.rng))
                z = np.concatenate([half, -half])
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


class TiedNetwork(SSIModel):
    """Tied network f = sigma(sum_l z_l / sqrt(L)), z_l = x_l . w (no positional encoding)."""

    kind = "tied"

    def __init__(
        self, target, L: int = 1, activation="relu", *, engine="auto", method="auto", n=None, rng=0
    ):
        # a name (lower case) or an expression in x (theory.ssi._kernels.activation_key)
        self.activation = activation_key(activation)
        self.k = 1
        L = check_int("L", L, lo=1, hi=MAX_L)
        self._setup(target, L, np.zeros((L, 0)), engine, method, n, rng)

    def __repr__(self):
        return f"{type(self).__name__}({self.target!r}, L={self.L}, activation={self.activation!r})"

    @property
    def sigma(self):
        return activation_fn(self.activation)[0]

    @property
    def dsigma(self):
        return activation_fn(self.activation)[1]

    @property
    def kinks(self):
        return activation_fn(self.activation)[2]

    def key(self) -> dict:
        return dict(kind=self.kind, L=self.L, target=self.target.key(), activation=self.activation)

    def student(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        L = z.shape[1]
        u = z.sum(axis=1) / math.sqrt(L)
        f = self.sigma(u)
        df = np.repeat((self.dsigma(u) / math.sqrt(L))[:, None], L, axis=1)
        return f[:, None], df[:, :, None]

    @property
    def activation_hermite(self) -> str:
        """How the Hermite moments of the activation are computed: adaptive quadrature for a
        named activation; for one written as an expression the Hermite engine of the targets
        (``theory.ssi.hermite``), exact (sympy) or numerical with its achieved tolerance."""
        self._ridge_moments(4)
        return self._cache["activation_hermite"]

    def _ridge_moments(self, kmax):
        """mu_F(n) = E[F(u) He_n(u)], u ~ N(0,1), n <= kmax, for F = sigma, sigma^2, sigma'^2,
        sigma sigma'^2, sigma^2 sigma'^2: adaptive quadrature split at the kinks for a named
        activation; the Hermite engine of the targets for one written as an expression
        (:attr:`activation_hermite` says which, and how accurate)."""
        key = ("ridge", kmax)
        if key in self._cache:
            return self._cache[key]
        if self.activation not in ACTIVATIONS:
            out = self._written_moments(kmax)
            if out is not None:
                self._cache[key] = out
                return out
        self._cache.setdefault(
            "activation_hermite", "adaptive quadrature (scipy quad_vec, split at the kinks)"
        )
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

    def _written_moments(self, kmax):
        """The moments of :meth:`_ridge_moments` of a written activation from its Hermite
        coefficients (E[F He_n] = n! a_n); None when an F exceeds the target language's limits
        (e.g. degree > 12), which then falls back to quadrature."""
        from theory.ssi.hermite import DEFAULT_TOL, hermite_coefficients

        t = written_activation(self.activation)[3]
        s = t.expr
        ds = sp.diff(s, t.symbols[0])
        out = np.zeros((5, kmax + 1))
        exact, tol = True, 0.0
        try:
            for i, F in enumerate((s, s**2, ds**2, s * ds**2, s**2 * ds**2)):
                c = hermite_coefficients(F, kmax)
                out[i] = [c.value((n,)) * math.factorial(n) for n in range(kmax + 1)]
                exact &= c.is_exact
                tol = max(tol, c.tolerance * math.factorial(kmax))
        except ValueError:
            return None
        self._cache["activation_hermite"] = (
            "exact (sympy Hermite coefficients)"
            if exact
            else f"numerical Hermite coefficients (Gauss-Hermite / adaptive quadrature to "
            f"tol {DEFAULT_TOL:g}), achieved tolerance {tol:.1e} (absolute, on the moments)"
        )
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
    """Untied network f = sigma(sum_l x_l . w_l / sqrt(L)) (docs/ssi.md eq. 6); the state is
    the vector of row overlaps (m_1..m_L); m_untied = ||m|| / sqrt(L).

    ``normalisation``: "rows" (each row on its own sqrt(d)-sphere, the model of the theory) or
    "flat" (W renormalised as ONE vector of R^{L d} to norm sqrt(L d), the protocol of the
    authors' code).  The risk functions are those of rows of norm sqrt(d); "flat" is simulated by
    the exact reduced chain only, and has no ODE in this package (docs/findings.md §6).
    """

    kind = "untied"
    untied = True

    def __init__(
        self,
        target,
        L: int = 1,
        activation="relu",
        *,
        normalisation: str = "rows",
        engine="auto",
        method="auto",
        n=None,
        rng=0,
    ):
        if normalisation not in ("rows", "flat"):
            raise ValueError(f"normalisation must be 'rows' or 'flat', got {normalisation!r}")
        self.normalisation = normalisation
        super().__init__(target, L, activation, engine=engine, method=method, n=n, rng=rng)

    def __repr__(self):
        flat = ", normalisation='flat'" if self.normalisation == "flat" else ""
        return f"UntiedNetwork({self.target!r}, L={self.L}, activation={self.activation!r}{flat})"

    def key(self) -> dict:
        return dict(super().key(), normalisation=self.normalisation)


def ps_model(a: float, omega: float, **kw: object) -> AttentionModel:
    """The positional-semantic attention model of docs/ssi.md section 8: target eq. 3 with A_a,
    L = 2, P_1 = -P_2, identity reduction."""
    return AttentionModel(
        PositionalSemanticTarget(omega, a), L=2, pe="opposite", reduction="identity", **kw
    )
