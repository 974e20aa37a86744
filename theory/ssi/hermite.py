"""Hermite expansion of a target g(z_1, ..., z_L), its sequence information exponent (SIE), the
leading tensor's tied contraction and operator norm, and the tied/untied gains they predict.

Definitions (docs/ssi.md section 5, eqs. 21-24; stated once)
-----------------------------------------------------------
z ~ N(0, I_L); He_k are the probabilists' Hermite polynomials (E[He_j He_k] = delta_jk k!);
He_alpha(z) = prod_l He_{alpha_l}(z_l), alpha! = prod_l alpha_l!, |alpha| = sum_l alpha_l.

    g(z) = sum_alpha a_alpha He_alpha(z),   a_alpha = E[g He_alpha] / alpha!,
    C_k[i_1..i_k] = a_alpha alpha! / k!   (alpha = multiplicities of i_1..i_k),
    E[f g] = sum_k k! <C_k(f), C_k(g)>    (Parseval, with k!).

Examples: C_2(sum_l He_2(z_l)) = I_L; C_2(z_1 z_2) = [[0, 1/2], [1/2, 0]].

Quantities of :func:`analyze`
-----------------------------
* ``sie``: the lowest k >= 1 with C_k != 0 (None for a constant target); for L = 1 the classic
  information exponent (``information_exponent``).  ``even_sie``: the same for the even part
  (g(z) + g(-z))/2 -- what attention without positional encoding sees.
* ``tied_contraction`` = C_SIE x (1..1) = sum_{|alpha| = SIE} a_alpha (no 1/sqrt(L) factors).
* ``op_norm`` = ||C_SIE||_op = max_{|u|=1} |<C_SIE, u^(x)SIE>|: exact for SIE <= 2 (Euclidean
  norm, largest |eigenvalue|); for SIE >= 3 the best of restarted local maximisations on the
  sphere, a lower bound, flagged exact (``op_norm_exact``) only when it meets the upper bound of
  the unfolding's largest singular value, or when C_SIE is diagonal or L = 1.
* the gains nu_untied / nu_tied of the weak-recovery step counts (:func:`gains`, docs/ssi.md
  eqs. 29-31), with ratio = tied_contraction / op_norm and k = SIE:

      gain_equal   = |ratio| L^(1 - k/2)      both networks at the same small step size,
      gain_optimal = ratio^2 L^(1 - k)        each network at its own optimal step size,

  the predictions of this package's ODE (the same numbers as ``theory sgd gain``); beside them
  the published formulas ``gain_equal_published`` = |ratio| (x sqrt(L) if k = 1) and
  ``gain_optimal_published`` = ratio^2 (x L if k = 1).  They agree at equal step sizes for
  k <= 2; at optimal step sizes the published formula assumes that an untied row carries the
  SGD noise of the whole tied network, while it carries 1/L of it: L for sum_l He_2(z_l), not
  L^2.  Derivation and measurements: docs/findings.md §6.  Zero contraction: the tied network
  is stuck (every gain 0, ``tied_learnable`` False).  For even SIE the drift also carries the
  student activation's k-th Hermite coefficient (``theory.ssi.gain.drift_constants``), whose sign
  decides whether the tied network escapes.
* ``hermite_energy``: [k! ||C_k||_F^2 for k = 0..max_order], Parseval's decomposition of E[g^2].

Exactness: the target is expanded into a sum of products of blocks on disjoint variables
(coefficients of a product = tensor product of the blocks' coefficients).  Polynomials and
piecewise polynomials (relu, |z|, sign, Heaviside, Max/Min) of one variable or of one linear form
u.z ("ridge" blocks: C_k = b_k u^(x)k), and polynomials times exp/sin/cos/sinh/cosh of a
linear form (Gaussian shift E[P(x) e^{a x}] = e^{a^2/2} E[P(x + a)]) give exact sympy
coefficients (``exact = True``, ``tolerance = 0``).  Kinks of products are split first:
sign(a b) = sign(a) sign(b), relu(a b) = a b (1 + sign(a) sign(b))/2.
Other one-variable factors use adaptive quadrature (scipy
``quad_vec``, split at the kinks); other multi-variable blocks use tensor Gauss-Hermite with the
number of nodes raised until the coefficients change by less than ``tol`` (variables whose
kinks sit at fixed points get split Gauss-Legendre rules instead); the report then says
``exact = False`` and gives the achieved ``tolerance`` (absolute, on the a_alpha), and
``status = "max_iter"`` if the node sequence ended before reaching ``tol``.  A numerical
coefficient counts as zero when its magnitude is below
``zero_tol = max(10 * tolerance, 1e-12 * scale)`` (``scale`` = largest coefficient magnitude).
The target language itself (parsing, functions allowed): ``theory.ssi.targets``.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from theory._util import check_int, check_positive
from theory.results import Result
from theory.rng import as_rng
from theory.ssi.targets import MAX_DEGREE, Target, parse_target

__all__ = [
    "SIEReport",
    "OpNorm",
    "HermiteTensors",
    "hermite_coefficients",
    "polynomial_coefficients",
    "gains",
    "HermiteCoefficients",
    "hermite_tensors",
    "sie",
    "analyze",
    "op_norm",
    "tensor_from_coefficients",
]

DEFAULT_TOL = 1e-9
MAX_TENSOR_ENTRIES = 2_000_000

# =========================================================================== coefficient maths


def _univariate_he_in_monomials(n: int) -> list[sp.Rational]:
    """x^n = sum_j c_j He_j(x); returns [c_0..c_n] (c_{n-2m} = n!/(m! (n-2m)! 2^m))."""
    c = [sp.Integer(0)] * (n + 1)
    for m in range(n // 2 + 1):
        c[n - 2 * m] = sp.Rational(
            math.factorial(n), math.factorial(m) * math.factorial(n - 2 * m) * 2**m
        )
    return c


def _as_poly(expr: sp.Expr, syms) -> sp.Poly:
    """``expr`` (a polynomial in ``syms``) as a Poly, built by polynomial arithmetic: sp.poly
    never expands the expression, which for (z1 + ... + z6)**12 (6188 monomials) takes ~100 s
    where this takes ~0.1 s."""
    return sp.poly(expr, *syms)


def _total_degree(t) -> int:
    return int(_as_poly(t.expr, t.symbols).total_degree())


def _poly_coefficients(expr: sp.Expr, syms) -> dict[tuple, sp.Expr]:
    """Exact a_alpha of a polynomial in ``syms`` (coefficients may be any sympy constants)."""
    poly = _as_poly(expr, syms)
    out: dict[tuple, sp.Expr] = {}
    cache: dict[int, list] = {}
    for monom, coef in poly.terms():
        per_var = []
        for n in monom:
            if n not in cache:
                cache[n] = _univariate_he_in_monomials(n)
            per_var.append([(j, c) for j, c in enumerate(cache[n]) if c != 0])
        for combo in itertools.product(*per_var):
            alpha = tuple(j for j, _ in combo)
            val = coef
            for _, c in combo:
                val = val * c
            out[alpha] = out.get(alpha, 0) + val
    out = {a: v if (v.is_Rational or v.is_Float) else sp.simplify(v) for a, v in out.items()}
    return {a: v for a, v in out.items() if v != 0}


def _std_pdf(x):
    if x in (sp.oo, -sp.oo):
        return sp.Integer(0)
    return sp.exp(-(x**2) / 2) / sp.sqrt(2 * sp.pi)


def _std_cdf(x):
    if x == sp.oo:
        return sp.Integer(1)
    if x == -sp.oo:
        return sp.Integer(0)
    return (1 + sp.erf(x / sp.sqrt(2))) / 2


def _gauss_moments(a, b, nmax: int) -> list:
    """M_n = int_a^b x^n phi(x) dx for n = 0..nmax (exact, a/b may be +-oo)."""
    pa, pb = _std_pdf(a), _std_pdf(b)
    M = [_std_cdf(b) - _std_cdf(a)]
    if nmax >= 1:
        M.append(pa - pb)
    for n in range(2, nmax + 1):
        ta = 0 if a in (sp.oo, -sp.oo) else a ** (n - 1) * pa
        tb = 0 if b in (sp.oo, -sp.oo) else b ** (n - 1) * pb
        M.append((n - 1) * M[n - 2] + ta - tb)
    return M


def _prep_piecewise(h: sp.Expr) -> sp.Expr:
    h = h.replace(sp.sign, lambda a: 2 * sp.Heaviside(a) - 1)
    h = h.replace(sp.Heaviside, lambda *a: sp.Heaviside(a[0], sp.Rational(1, 2)))
    return sp.piecewise_fold(h.rewrite(sp.Piecewise))


def _pieces(h: sp.Expr, x: sp.Symbol):
    """Split a univariate piecewise polynomial into [(poly, a, b)], or None if not one."""
    if not h.has(sp.Piecewise, sp.Abs, sp.Max, sp.Min, sp.Heaviside, sp.sign):
        return None
    try:
        pw = _prep_piecewise(h)
    except Exception:
        return None
    if not isinstance(pw, sp.Piecewise):
        return [(pw, -sp.oo, sp.oo)] if pw.is_polynomial(x) else None
    remaining = sp.Interval(-sp.oo, sp.oo)
    out = []
    for e, c in pw.args:
        try:
            s = c.as_set() if c is not sp.true else sp.S.Reals
        except Exception:
            return None
        s = sp.Intersection(s, remaining)
        remaining = sp.Complement(remaining, s)
        parts = s.args if isinstance(s, sp.Union) else (s,)
        for p in parts:
            if isinstance(p, sp.FiniteSet) or p is sp.S.EmptySet:
                continue
            if not isinstance(p, sp.Interval):
                return None
            if not sp.sympify(e).is_polynomial(x):
                return None
            out.append((sp.expand(e), p.start, p.end))
    return out


def _univariate_exact(h: sp.Expr, x: sp.Symbol, K: int):
    """Exact b_j = E[h He_j]/j!, j = 0..K, for a (piecewise) polynomial h; else None."""
    if h.is_polynomial(x):
        d = _poly_coefficients(h, [x])
        return [d.get((j,), sp.Integer(0)) for j in range(K + 1)]
    if h.has(sp.exp, sp.sin, sp.cos, sp.sinh, sp.cosh) and not h.has(
        sp.Abs, sp.sign, sp.Heaviside, sp.Max, sp.Min, sp.Piecewise
    ):
        return _univariate_exp_linear(h, x, K)
    pieces = _pieces(h, x)
    if pieces is None:
        return None
    deg = max((sp.Poly(p, x).degree() for p, _, _ in pieces), default=0)
    bs = []
    moments = [(sp.Poly(p, x), _gauss_moments(a, b, deg + K)) for p, a, b in pieces]
    for j in range(K + 1):
        hej = sp.Poly(sp.hermite_prob(j, x), x)
        tot = sp.Integer(0)
        for P, M in moments:
            prod = P * hej
            for (n,), c in prod.terms():
                tot += c * M[n]
        bs.append(sp.simplify(tot / math.factorial(j)))
    return bs


def _normal_moment(n: int):
    """E[x^n], x ~ N(0, 1): (n-1)!! for even n, 0 for odd n."""
    if n % 2:
        return sp.Integer(0)
    return sp.Integer(math.prod(range(n - 1, 0, -2)))


def _univariate_exp_linear(h: sp.Expr, x: sp.Symbol, K: int):
    """Exact b_j for h = sum_t P_t(x) exp(a_t x + c_t) (P_t polynomials, a_t, c_t possibly
    complex constants: covers exp, sin, cos, sinh, cosh of linear arguments times polynomials)
    by the Gaussian shift E[P(x) e^{a x}] = e^{a^2/2} E[P(x + a)]; None if h has another form."""
    try:
        e = sp.expand(sp.powsimp(sp.expand(h.rewrite(sp.exp)), combine="exp"))
    except Exception:
        return None
    terms = []
    for term in sp.Add.make_args(e):
        term = sp.powsimp(term, combine="exp")
        poly, arg = sp.Integer(1), sp.Integer(0)
        for f in sp.Mul.make_args(term):
            if isinstance(f, sp.exp):
                arg += f.args[0]
            elif f.is_Pow and isinstance(f.base, sp.exp) and not f.exp.free_symbols:
                arg += f.base.args[0] * f.exp
            else:
                poly *= f
        arg = sp.expand(arg)
        if not (poly.is_polynomial(x) and arg.is_polynomial(x)):
            return None
        P = sp.Poly(arg, x)
        if P.degree() > 1:
            return None
        terms.append((poly, P.coeff_monomial(x), P.coeff_monomial(1)))
    out = []
    for j in range(K + 1):
        tot = sp.Integer(0)
        hej = sp.hermite_prob(j, x)
        for poly, a, c in terms:
            q = sp.Poly(sp.expand((poly * hej).subs(x, x + a)), x)
            mom = sum((coef * _normal_moment(n) for (n,), coef in q.terms()), sp.Integer(0))
            tot += sp.exp(c + a**2 / 2) * mom
        v = sp.simplify(sp.expand_complex(tot / math.factorial(j)))
        if v.has(sp.I):
            v = sp.simplify(sp.re(v)) if abs(complex(sp.N(sp.im(v), 30))) < 1e-25 else None
        if v is None:
            return None
        out.append(v)
    return out


def _kink_args(h: sp.Expr) -> list:
    """Expressions whose zero sets are the kinks/jumps of h (Abs, sign, Heaviside, Max, Min,
    Piecewise conditions)."""
    args = []
    for f in h.atoms(sp.Abs, sp.sign, sp.Heaviside):
        args.append(f.args[0])
    for f in h.atoms(sp.Max, sp.Min):
        for u, v in itertools.combinations(f.args, 2):
            args.append(u - v)
    for f in h.atoms(sp.Piecewise):
        for _, c in f.args:
            if isinstance(c, sp.core.relational.Relational):
                args.append(c.lhs - c.rhs)
    return args


def _real_roots(a, x, bound) -> set | None:
    try:
        sol = sp.solveset(sp.Eq(a, 0), x, domain=sp.S.Reals)
    except Exception:
        return None
    if not isinstance(sol, sp.FiniteSet):
        return None
    out = set()
    for r in sol:
        try:
            v = float(r)
        except (TypeError, ValueError):
            return None
        if abs(v) < bound:
            out.add(v)
    return out


def _kinks(h: sp.Expr, x: sp.Symbol) -> list[float]:
    pts = {0.0}
    for a in _kink_args(h):
        r = _real_roots(a, x, 30.0)
        if r:
            pts |= r
    return sorted(pts)


_SPLIT_B = 12.0  # truncation of split rules: phi(12) ~ 2e-32


def _axis_breakpoints(h: sp.Expr, syms: list) -> dict | None:
    """Per-variable kink locations when every kink of h depends on a single variable (e.g.
    relu(z2 + 1/2) * tanh(z1 z2)); None when a kink couples variables or cannot be solved."""
    bps: dict = {x: set() for x in syms}
    for a in _kink_args(h):
        fs = a.free_symbols & set(syms)
        if not fs:
            continue
        if len(fs) > 1:
            return None
        (x,) = fs
        r = _real_roots(a, x, _SPLIT_B)
        if r is None:
            return None
        bps[x] |= r
    return bps


@lru_cache(maxsize=64)
def _split_rule(bps: tuple, n: int, B: float = _SPLIT_B):
    """Gauss-Legendre with n nodes on each piece of [-B, B] cut at ``bps``, weights times the
    standard normal density (a rule for N(0, 1) that is exact-like for piecewise-smooth f)."""
    gx, gw = np.polynomial.legendre.leggauss(n)
    edges = [-B, *sorted(b for b in bps if abs(b) < B), B]
    xs, ws = [], []
    for lo, hi in itertools.pairwise(edges):
        if hi - lo < 1e-12:
            continue
        x = 0.5 * (hi - lo) * gx + 0.5 * (hi + lo)
        xs.append(x)
        ws.append(0.5 * (hi - lo) * gw * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    return np.concatenate(xs), np.concatenate(ws)


_QUAD_B = 40.0  # phi(40) ~ 1e-348: the Gaussian weight underflows beyond


def _univariate_numeric(h: sp.Expr, x: sp.Symbol, K: int, tol: float):
    """b_j = E[h He_j]/j!, j = 0..K by adaptive quadrature; returns (values, abs error)."""
    from scipy.integrate import quad_vec

    f = sp.lambdify(
        x,
        h.replace(sp.Heaviside, lambda *a: sp.Heaviside(a[0], sp.Rational(1, 2))),
        modules=["scipy", "numpy"],
    )
    jf = np.array([math.factorial(j) for j in range(K + 1)], dtype=float)

    def integrand(t):
        with np.errstate(all="ignore"):
            val = float(np.asarray(f(t), dtype=float))
        he = np.polynomial.hermite_e.hermevander(np.array([t]), K)[0]
        w = math.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
        return val * w * he / jf

    pts = _kinks(h, x)
    res = []
    err = 0.0
    for B in (_QUAD_B, _QUAD_B / 2):
        edges = [-B] + [p for p in pts if -B < p < B] + [B]
        tot = np.zeros(K + 1)
        e_tot = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for lo, hi in itertools.pairwise(edges):
                r, e = quad_vec(integrand, lo, hi, epsabs=tol / 10, epsrel=1e-13, limit=400)
                tot += r
                e_tot += float(e)
        res.append(tot)
        err = max(err, e_tot)
    full, half = res
    if not np.all(np.isfinite(full)) or not np.all(np.isfinite(half)):
        raise ValueError(
            f"the Gaussian expectation of {h} is not finite (the integrand is inf or nan "
            "somewhere: overflow, or log/sqrt of a negative number); the target must be real "
            "and square-integrable against N(0, 1)"
        )
    diff = float(np.max(np.abs(full - half)))
    scale = max(1.0, float(np.max(np.abs(full))))
    if diff > 1e-6 * scale:
        raise ValueError(
            f"the Gaussian expectation of {h} does not converge (the tails of the integrand do "
            "not decay); the target must be square-integrable against N(0, 1)"
        )
    if err > 1e-2 * scale:
        raise ValueError(
            f"the Gaussian expectation of {h} could not be computed (adaptive quadrature "
            f"error {err:.1e}): the target looks singular, not square-integrable or too "
            "oscillatory"
        )
    return full, max(err, diff)


# GH node sequences for an s-dimensional non-separable block
_GH_SEQ = {
    1: (40, 80, 160, 320, 640),
    2: (24, 48, 96, 160, 256),
    3: (12, 20, 32, 48, 64),
    4: (8, 12, 16, 24, 32),
    5: (6, 9, 12, 15),
    6: (5, 7, 9, 11),
}


def _multiindices(s: int, K: int):
    for tot in range(K + 1):
        for c in itertools.combinations_with_replacement(range(s), tot):
            a = [0] * s
            for i in c:
                a[i] += 1
            yield tuple(a)


def _block_gh(h: sp.Expr, syms: list, K: int, tol: float):
    """a_alpha of h(z_S) for |alpha| <= K by tensor Gauss-Hermite with node refinement.

    Variables whose kinks (Abs, sign, Heaviside, Max/Min, Piecewise) sit at fixed points get a
    split Gauss-Legendre rule on [-12, 12] cut at the kinks instead of Gauss-Hermite, which
    restores fast convergence for e.g. relu(z2 + 1/2) tanh(z1 z2).
    Returns (dict alpha -> float, achieved tolerance, converged flag, nodes used).
    """
    from theory.gauss import gh_rule

    s = len(syms)
    if s not in _GH_SEQ:
        raise ValueError(
            f"the non-separable part {h} couples {s} variables; numerical Hermite coefficients "
            "are supported for blocks of at most 6 variables"
        )
    f = sp.lambdify(
        syms,
        h.replace(sp.Heaviside, lambda *a: sp.Heaviside(a[0], sp.Rational(1, 2))),
        modules=["scipy", "numpy"],
    )
    alphas = list(_multiindices(s, K))
    afact = np.array([math.prod(math.factorial(q) for q in a) for a in alphas], dtype=float)
    # variables with kinks at known points get a split Gauss-Legendre rule instead of GH
    bps = _axis_breakpoints(h, syms)
    split = {} if bps is None else {i: tuple(sorted(bps[x])) for i, x in enumerate(syms) if bps[x]}
    prev = None
    diff = np.inf
    diffs = []
    used = None

    def project(rules):
        grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
        shape = tuple(r[0].size for r in rules)
        with np.errstate(all="ignore"):
            F = np.broadcast_to(np.asarray(f(*grids), dtype=float), shape).copy()
        if not np.all(np.isfinite(F)):
            raise ValueError(
                f"the target part {h} is not finite at some quadrature nodes; the Gaussian "
                "expectation is not defined (check logs, divisions, square roots, overflow)"
            )
        T = F
        for x, w in rules:  # contract axis 0 each time; the new axis goes last
            Wh = np.polynomial.hermite_e.hermevander(x, K) * w[:, None]  # (nodes, K+1)
            T = np.tensordot(T, Wh, axes=(0, 0))
        return np.array([T[a] for a in alphas]) / afact

    for n in _GH_SEQ[s]:
        rules = [_split_rule(split[i], n) if i in split else gh_rule(n) for i in range(s)]
        if prev is not None and math.prod(r[0].size for r in rules) > 4_000_000:
            break  # memory/time guard: keep the last level
        vals = project(rules)
        used = n
        if prev is not None:
            diff = float(np.max(np.abs(vals - prev)))
            diffs.append(diff)
            scale = max(1.0, float(np.max(np.abs(vals))))
            if diff <= tol * scale:
                prev = vals
                break
        prev = vals
    if split:  # the split rules truncate at +-12: the tails must not matter (integrability)
        short = [
            _split_rule(split[i], used, 9.0) if i in split else gh_rule(used) for i in range(s)
        ]
        gap = float(np.max(np.abs(project(short) - prev)))
        if gap > max(1e-8, tol) * max(1.0, float(np.max(np.abs(prev)))):
            raise ValueError(
                f"the Gaussian expectation of {h} does not converge (truncating the integral "
                f"at |z| = 9 instead of 12 changes it by {gap:.1e}): the target is not "
                "square-integrable against N(0, I)"
            )
    # divergence (not slow convergence of a non-smooth integrand): large AND not decreasing
    if diff > 0.1 * max(1.0, float(np.max(np.abs(prev)))) and (
        len(diffs) < 2 or diffs[-1] > 0.5 * diffs[-2]
    ):
        raise ValueError(
            f"the Gauss-Hermite coefficients of {h} do not converge (change {diff:.1e} at "
            f"{used} nodes per dimension): the target looks singular or not square-integrable"
        )
    converged = diff <= tol * max(1.0, float(np.max(np.abs(prev))))
    return dict(zip(alphas, prev.tolist())), diff, converged, used


def _ridge(h: sp.Expr, syms: list):
    """If h(z_S) = r(a . z_S) for a linear form with >= 2 variables, return (a, r(t), t)."""
    cands = []
    for f in sp.preorder_traversal(h):
        if not isinstance(f, (sp.Function, sp.Max, sp.Min)):
            continue
        for arg in f.args:
            if arg.is_polynomial(*syms) and sp.Poly(arg, *syms).total_degree() == 1:
                cands.append(arg)
    for c in h.atoms(sp.Pow):
        if c.base.is_polynomial(*syms) and sp.Poly(c.base, *syms).total_degree() == 1:
            cands.append(c.base)
    t = sp.Dummy("t", real=True)
    for arg in cands:
        P = sp.Poly(arg, *syms)
        a = [P.coeff_monomial(s) for s in syms]
        const = P.coeff_monomial(1)
        if sum(1 for v in a if v != 0) < len(syms):
            continue
        i = 0
        sol = (t - const - sum(a[j] * syms[j] for j in range(len(syms)) if j != i)) / a[i]
        r = sp.simplify(h.subs(syms[i], sol))
        if r.free_symbols <= {t}:
            r = r.subs(t, t + const)  # r as a function of the homogeneous form a . z
            return a, r, t
    return None


# --------------------------------------------------------------------------- coefficient store


@dataclass
class _Coeffs:
    """Hermite coefficients a_alpha (g = sum_alpha a_alpha He_alpha), alpha a tuple of L ints.

    ``exact``: dict alpha -> sympy number (exact contributions); ``numeric``: dict alpha ->
    float (quadrature contributions); the coefficient is their sum, :meth:`value`.
    ``tolerance``: achieved absolute accuracy of the numerical part (0 if exact);
    ``converged``: False when a Gauss-Hermite refinement stopped above ``tol``.
    """

    L: int
    exact: dict = field(default_factory=dict)
    numeric: dict = field(default_factory=dict)
    tolerance: float = 0.0
    converged: bool = True
    notes: list = field(default_factory=list)

    def add_exact(self, alpha, v):
        v = self.exact.get(alpha, 0) + v
        self.exact[alpha] = v

    def add_numeric(self, alpha, v):
        self.numeric[alpha] = self.numeric.get(alpha, 0.0) + float(v)

    @property
    def is_exact(self) -> bool:
        return not self.numeric

    def value(self, alpha) -> float:
        v = self.exact.get(alpha, 0)
        return float(sp.N(v, 30)) + self.numeric.get(alpha, 0.0)

    def support(self) -> set:
        return set(self.exact) | set(self.numeric)

    def scale(self) -> float:
        vals = [abs(self.value(a)) for a in self.support()]
        return max(vals, default=0.0)

    def zero_tol(self) -> float:
        if self.is_exact:
            return 0.0
        return max(10.0 * self.tolerance, 1e-12 * max(self.scale(), 1e-300))

    def is_zero(self, alpha) -> bool:
        if alpha not in self.numeric:
            v = self.exact.get(alpha, 0)
            return _exact_is_zero(v)
        return abs(self.value(alpha)) <= self.zero_tol()


def _exact_is_zero(v) -> bool:
    v = sp.sympify(v)
    z = v.is_zero
    if z is not None:
        return bool(z)
    return abs(complex(sp.N(v, 60))) < 1e-45


def _factor_blocks(term: sp.Expr, syms_all):
    """Split a product into (constant, [(factor, [symbols])]) with disjoint symbol sets."""
    const = sp.Integer(1)
    blocks: list[tuple[sp.Expr, set]] = []
    factors = []
    for f in sp.Mul.make_args(term):
        if isinstance(f, sp.exp) and isinstance(f.args[0], sp.Add):
            factors += [sp.exp(p) for p in f.args[0].args]  # exp(a + b) = exp(a) exp(b)
        else:
            factors.append(f)
    for f in factors:
        fs = f.free_symbols
        if not fs:
            const *= f
            continue
        merged_e, merged_s = f, set(fs)
        keep = []
        for e, s in blocks:
            if s & merged_s:
                merged_e *= e
                merged_s |= s
            else:
                keep.append((e, s))
        blocks = keep + [(merged_e, merged_s)]
    order = {s: i for i, s in enumerate(syms_all)}
    # re-merge exp factors within a block: exp(a) exp(b) -> exp(a + b) (no 0 * inf in floats)
    return const, [
        (sp.powsimp(e, combine="exp"), sorted(s, key=lambda q: order[q])) for e, s in blocks
    ]


_X1 = sp.Symbol("_x", real=True)
_UNIVARIATE_CACHE: dict = {}


def _block_coeffs(h, syms, K, tol, store: _Coeffs, cache: dict):
    """Coefficients of one block h(z_S): (dict alpha_sub -> value, exact flag)."""
    key = (h, tuple(syms), K)
    if key in cache:
        return cache[key]
    if len(syms) == 1:
        # canonical variable: tanh(z1) and tanh(z7) share one computation (module-level cache)
        hx = h.xreplace({syms[0]: _X1})
        ukey = (hx, K, float(tol))
        if ukey not in _UNIVARIATE_CACHE:
            b = _univariate_exact(hx, _X1, K)
            if b is not None:
                res = ({(j,): v for j, v in enumerate(b) if not _exact_is_zero(v)}, True, 0.0)
            else:
                try:
                    vals, err = _univariate_numeric(hx, _X1, K, tol)
                except ValueError as exc:  # name the user's variable, not the canonical one
                    raise ValueError(str(exc).replace(str(hx), str(h))) from None
                res = ({(j,): float(v) for j, v in enumerate(vals)}, False, err)
                if err > 10 * tol * max(1.0, float(np.max(np.abs(vals)))):
                    store.converged = False
                    store.notes.append(f"adaptive quadrature for {h} reached only {err:.1e} > tol")
            if len(_UNIVARIATE_CACHE) > 512:
                _UNIVARIATE_CACHE.clear()
            _UNIVARIATE_CACHE[ukey] = res
        d, ex, err = _UNIVARIATE_CACHE[ukey]
        store.tolerance = max(store.tolerance, err)
        out = (d, ex)
        cache[key] = out
        return out
    if h.is_polynomial(*syms):
        d = _poly_coefficients(h, syms)
        out = ({a: v for a, v in d.items() if sum(a) <= K}, True)
        cache[key] = out
        return out
    rd = _ridge(h, syms)
    if rd is not None:
        a, r, t = rd
        norm = sp.sqrt(sum(v**2 for v in a))
        u = [v / norm for v in a]
        s = sp.Dummy("s", real=True)
        hs = r.subs(t, norm * s)
        try:
            sub, ex = _block_coeffs(hs, [s], K, tol, store, cache)
        except ValueError as exc:
            raise ValueError(f"for {h}: {exc}") from None
        res = {}
        for alpha in _multiindices(len(syms), K):
            k = sum(alpha)
            if (k,) not in sub:
                continue
            mult = sp.Integer(math.factorial(k))
            for q in alpha:
                mult /= math.factorial(q)
            upow = sp.Integer(1)
            for q, uq in zip(alpha, u):
                upow *= uq**q
            if ex:
                v = sub[(k,)] * mult * upow
                if not _exact_is_zero(v):
                    res[alpha] = v
            else:
                res[alpha] = float(sub[(k,)]) * float(mult * upow)
        out = (res, ex)
        cache[key] = out
        return out
    vals, diff, conv, nodes = _block_gh(h, syms, K, tol)
    store.tolerance = max(store.tolerance, diff)
    if not conv:
        store.converged = False
        store.notes.append(
            f"Gauss-Hermite for {h} stopped at {nodes} nodes/dim with change {diff:.2e} > tol"
        )
    else:
        store.notes.append(f"Gauss-Hermite for {h}: {nodes} nodes/dim, change {diff:.1e}")
    out = (vals, False)
    cache[key] = out
    return out


def _rewrite_max_min(expr):
    """Max(a, b) -> a + relu(b - a), Min(a, b) -> a - relu(a - b) (exposes ridge structure)."""

    def mx(*args):
        acc = args[0]
        for b in args[1:]:
            acc = (
                acc + sp.Max(b - acc, 0, evaluate=False)
                if (b - acc).free_symbols and len(acc.free_symbols | b.free_symbols) > 1
                else sp.Max(acc, b)
            )
        return acc

    def mn(*args):
        acc = args[0]
        for b in args[1:]:
            acc = (
                acc - sp.Max(acc - b, 0, evaluate=False)
                if (acc - b).free_symbols and len(acc.free_symbols | b.free_symbols) > 1
                else sp.Min(acc, b)
            )
        return acc

    return expr.replace(sp.Max, mx).replace(sp.Min, mn)


def hermite_coefficients(
    target: str | sp.Expr | Target, max_order: int = 6, *, tol: float = DEFAULT_TOL
) -> _Coeffs:
    """All a_alpha (coefficient of He_alpha) with |alpha| <= max_order (polynomial parts: all
    orders).  Returns the internal store (exact sympy part + numerical float part)."""
    t = parse_target(target)
    K = check_int("max_order", max_order, lo=0, hi=MAX_DEGREE)
    syms = list(t.symbols)
    store = _Coeffs(L=t.L)
    expr = t.expr
    if not t.is_polynomial:
        expr = _rewrite_max_min(expr)

        # products inside kinks: sign(a b) = sign(a) sign(b), Heaviside(a b) = (1 + sign(a)
        # sign(b))/2, relu(a b) = a b (1 + sign(a) sign(b))/2: exposes separable structure
        # (e.g. relu(z1 z2) becomes exact); Heaviside(0) = 1/2 and sign(0) = 0 are consistent
        def _sgn(p):
            return sp.Mul(*[sp.sign(f) for f in sp.Mul.make_args(p)])

        def _is_prod(a):
            return a.is_Mul and sum(1 for f in a.args if f.free_symbols) > 1

        expr = expr.replace(
            lambda e: isinstance(e, sp.sign) and _is_prod(e.args[0]), lambda e: _sgn(e.args[0])
        )
        expr = expr.replace(
            lambda e: isinstance(e, sp.Heaviside) and _is_prod(e.args[0]),
            lambda e: (1 + _sgn(e.args[0])) / 2,
        )
        expr = expr.replace(
            lambda e: (
                isinstance(e, sp.Max)
                and len(e.args) == 2
                and 0 in e.args
                and _is_prod([a for a in e.args if a != 0][0])
            ),
            lambda e: (lambda p: p * (1 + _sgn(p)) / 2)([a for a in e.args if a != 0][0]),
        )
    if t.is_polynomial:  # no expression expansion: _poly_coefficients works on a Poly
        terms, poly_part = (), expr
    else:
        terms = sp.Add.make_args(sp.expand(expr, power_exp=False))
        poly_part = sp.Add(*[q for q in terms if q.is_polynomial(*syms)])
    if poly_part != 0:
        for a, v in _poly_coefficients(poly_part, syms).items():
            store.add_exact(a, v)
    cache: dict = {}
    # non-polynomial terms: merge terms that couple the same variables would cost GH dims, so
    # each term is handled as a product of independent blocks
    others = [q for q in terms if not q.is_polynomial(*syms)]
    # group multi-variable non-separable blocks that share variables (fewer GH runs)
    for q in others:
        const, blocks = _factor_blocks(q, syms)
        parts = []
        all_exact = True
        for h, bs in blocks:
            d, ex = _block_coeffs(h, bs, K, tol, store, cache)
            idx = [syms.index(s) for s in bs]
            parts.append((d, idx))
            all_exact &= ex
        for combo in itertools.product(*[list(d.items()) for d, _ in parts]):
            alpha = [0] * t.L
            for (asub, _), (_, idx) in zip(combo, parts):
                for qv, i in zip(asub, idx):
                    alpha[i] = qv
            if sum(alpha) > K:
                continue
            alpha = tuple(alpha)
            if all_exact:
                v = const
                for _, val in combo:
                    v = v * val
                store.add_exact(alpha, v)
            else:
                v = float(sp.N(const, 30))
                for _, val in combo:
                    v *= float(sp.N(val, 30)) if not isinstance(val, float) else val
                store.add_numeric(alpha, v)
    # tidy exact values
    for a in list(store.exact):
        v = store.exact[a]
        if _exact_is_zero(v):
            del store.exact[a]
        else:
            store.exact[a] = v
    return store


HermiteCoefficients = _Coeffs


def polynomial_coefficients(expr: str | sp.Expr | Target, L: int) -> dict[tuple, sp.Expr]:
    """The exact non-zero a_alpha of a polynomial in z1..zL (g = sum a_alpha He_alpha): the
    coefficients the Mehler engine of ``theory.ssi.risk`` works with."""
    t = parse_target(expr, L)
    if t.is_constant:
        return {(0,) * t.L: sp.nsimplify(t.expr)}
    if not t.is_polynomial:
        raise ValueError(f"{t.expr} is not a polynomial in z1..z{t.L}")
    degree = _total_degree(t)
    store = hermite_coefficients(t, degree)
    return {a: v for a, v in store.exact.items() if v != 0}


def tensor_from_coefficients(store: _Coeffs, k: int) -> np.ndarray:
    """Dense C_k (shape (L,)*k) from the a_alpha: C_k[i] = a_alpha alpha!/k!."""
    L = store.L
    if L**k > MAX_TENSOR_ENTRIES:
        raise ValueError(
            f"the Hermite tensor C_{k} would have L^k = {L}^{k} entries (limit "
            f"{MAX_TENSOR_ENTRIES:.0e}); use fewer variables or a lower order (max_order)"
        )
    C = np.zeros((L,) * k)
    kf = math.factorial(k)
    for a in store.support():
        if sum(a) != k:
            continue
        v = store.value(a)
        if v == 0:
            continue
        af = math.prod(math.factorial(q) for q in a)
        base = []
        for i, q in enumerate(a):
            base += [i] * q
        for perm in set(itertools.permutations(base)):
            C[perm] = v * af / kf
    return C


@dataclass(frozen=True, kw_only=True)
class HermiteTensors(Result):
    """``tensors`` = [C_0, C_1, ..., C_K] (C_k of shape (L,)*k, C_0 a 0-d array); ``exact``:
    whether every coefficient is an exact sympy value."""

    tensors: list = field(default_factory=list, repr=False)
    exact: bool = True


def hermite_tensors(
    target: str | sp.Expr | Target,
    max_order: int = 6,
    *,
    tol: float = DEFAULT_TOL,
    L: int | None = None,
) -> HermiteTensors:
    """The Hermite tensors C_0..C_max_order of a target (docs/ssi.md eq. 21)."""
    t = parse_target(target, L)
    store = hermite_coefficients(t, max_order, tol=tol)
    return HermiteTensors(
        tensors=[tensor_from_coefficients(store, k) for k in range(int(max_order) + 1)],
        exact=store.is_exact,
        status="ok" if store.converged else "max_iter",
        message="; ".join(store.notes),
        params=dict(expr=str(t.expr), L=t.L, max_order=int(max_order), tol=tol),
    )


def _orders_nonzero(store: _Coeffs, K: int) -> list[int]:
    ks = set()
    for a in store.support():
        k = sum(a)
        if 1 <= k and (K is None or k <= K) and not store.is_zero(a):
            ks.add(k)
    return sorted(ks)


def sie(
    target: str | sp.Expr | Target,
    max_order: int = 8,
    *,
    tol: float = DEFAULT_TOL,
    L: int | None = None,
) -> int | None:
    """Sequence information exponent: lowest k >= 1 with C_k != 0 (searching k <= max_order;
    polynomials are searched up to their degree).  None for a constant target or when nothing is
    non-zero up to max_order (see :func:`analyze` for the message)."""
    t = parse_target(target, L)
    if t.is_constant:
        return None
    K = int(max_order)
    if t.is_polynomial:
        K = max(K, _total_degree(t))
    ks = _orders_nonzero(hermite_coefficients(t, K, tol=tol), K)
    if not ks:
        warnings.warn(
            f"sie({t.expr}): no non-zero Hermite coefficient of order 1..{K}; the target is "
            f"constant within tolerance or its SIE exceeds max_order={K}",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return ks[0]


# =========================================================================== operator norm


def _contract_all_but_one(T: np.ndarray, u: np.ndarray) -> np.ndarray:
    v = T
    for _ in range(T.ndim - 1):
        v = v @ u
    return v


@dataclass(frozen=True, kw_only=True)
class OpNorm(Result):
    """``value`` = max_{|u|=1} |<C, u^(x)k>| (or the best lower bound found), ``exact``: whether
    it is certified (see :func:`op_norm`)."""

    value: float = 0.0
    exact: bool = True


def op_norm(
    C: np.ndarray, *, restarts: int = 30, rng: int | np.random.Generator = 0, max_iter: int = 20
) -> OpNorm:
    """Spectral norm max_{|u|=1} |<C, u^(x)k>| of a symmetric tensor and an exactness flag.

    k = 0: |C|; k = 1: Euclidean norm; k = 2: largest |eigenvalue| (exact).  k >= 3: best of
    local maximisations of +-<C, u^(x)k> on the sphere (Riemannian gradient ascent, then a
    monotone shifted power iteration, SS-HOPM) started from the basis vectors, the all-ones
    direction, the top singular vector of the unfolding, ``restarts`` random points (and, for
    L = 2, the best points of a dense scan of the circle).  This is a lower bound, flagged
    exact when it matches the largest singular value of the L x L^(k-1) unfolding (an upper
    bound) to 1e-9, when C is diagonal, or when L = 1.
    """
    value, exact = _op_norm(C, restarts, rng, max_iter)
    msg = "" if exact else "a lower bound: the local maxima did not meet the unfolding's bound"
    return OpNorm(value=value, exact=exact, message=msg)


def _op_norm(C, restarts, rng, max_iter) -> tuple[float, bool]:
    C = np.asarray(C, dtype=float)
    k = C.ndim
    if k == 0:
        return abs(float(C)), True
    L = C.shape[0]
    if k == 1:
        return float(np.linalg.norm(C)), True
    if k == 2:
        return float(np.max(np.abs(np.linalg.eigvalsh((C + C.T) / 2)))), True
    if L == 1:
        return abs(float(C.ravel()[0])), True
    fro = float(np.linalg.norm(C))
    if fro == 0:
        return 0.0, True
    diag = np.array([C[(i,) * k] for i in range(L)])
    if np.isclose(np.sum(diag**2), fro**2, rtol=1e-13, atol=0):
        return float(np.max(np.abs(diag))), True
    M = C.reshape(L, -1)
    U, S, _ = np.linalg.svd(M, full_matrices=False)
    upper = float(S[0])
    gen = as_rng(rng)
    starts = [np.eye(L)[i] for i in range(L)] + [np.ones(L) / math.sqrt(L), U[:, 0]]
    starts += [v / np.linalg.norm(v) for v in gen.standard_normal((restarts, L))]
    if L == 2:  # a dense scan of the half circle seeds the local searches near the global max
        th = np.linspace(0.0, np.pi, 4001)
        V = np.stack([np.cos(th), np.sin(th)], axis=1)
        vals = _scan(C, V)
        starts += [V[i] for i in np.argsort(vals)[-4:]]
    best = 0.0
    alpha = (k - 1) * fro  # shift making the power iteration monotone (Kolda & Mayo 2011)
    for sgn in (1.0, -1.0):
        T = sgn * C
        for u0 in starts:
            u = _ascent_sphere(T, u0, k)
            lam = float(_contract_all_but_one(T, u) @ u)
            for _ in range(max_iter):  # polish: monotone shifted power iteration
                g = _contract_all_but_one(T, u) + alpha * u
                nu = np.linalg.norm(g)
                if nu == 0:
                    break
                u = g / nu
                new = float(_contract_all_but_one(T, u) @ u)
                if abs(new - lam) <= 1e-15 * max(1.0, abs(new)):
                    lam = max(lam, new)
                    break
                lam = new
            best = max(best, lam)
    exact = abs(upper - best) <= 1e-9 * upper
    return (upper if exact else best), exact


def _scan(C, V):
    """|<C, v^(x)k>| for each row v of V."""
    out = np.empty(V.shape[0])
    for i, v in enumerate(V):
        out[i] = float(_contract_all_but_one(C, v) @ v)
    return np.abs(out)


def _ascent_sphere(T, u0, k, max_iter=1000):
    """Local maximiser of <T, u^(x)k> on the unit sphere: Riemannian gradient ascent with an
    adaptive step (doubled after a success, halved until the value increases)."""
    u = np.asarray(u0, float) / np.linalg.norm(u0)
    g = _contract_all_but_one(T, u)
    f = float(g @ u)
    eta = 1.0 / (k * max(float(np.linalg.norm(T)), 1e-300))
    for _ in range(max_iter):
        grad = k * (g - f * u)
        gn = float(np.linalg.norm(grad))
        if gn <= 1e-13 * max(abs(f), 1e-300) * k:
            break
        improved = False
        for _ in range(60):
            v = u + eta * grad
            v /= np.linalg.norm(v)
            gv = _contract_all_but_one(T, v)
            fv = float(gv @ v)
            if fv > f:
                improved = True
                break
            eta *= 0.5
        if not improved:
            break
        step = float(np.linalg.norm(v - u))
        u, g, f = v, gv, fv
        eta *= 2.0
        if step < 1e-15:
            break
    return u


# =========================================================================== the report


@dataclass(frozen=True, kw_only=True)
class SIEReport(Result):
    """Hermite/SIE analysis of a target (see the module docstring for every definition)."""

    expr: str = ""
    L: int = 1
    sie: int | None = None
    leading_tensor: Any = None
    tied_contraction: float | None = None
    op_norm: float | None = None
    op_norm_exact: bool = True
    gain_optimal: float | None = None
    gain_equal: float | None = None
    gain_optimal_published: float | None = None
    gain_equal_published: float | None = None
    tied_learnable: bool | None = None
    even_sie: int | None = None
    exact: bool = True
    information_exponent: int | None = None
    tolerance: float = 0.0
    max_order: int = 6
    leading_tensor_exact: Any = None
    hermite_energy: Any = None
    tied_contraction_exact: str | None = None

    def summary(self) -> str:
        lines = [f"target: {self.expr}   (L = {self.L})"]
        if self.message:
            lines.append(self.message)
        lines.append(f"SIE: {self.sie}")
        if self.sie is not None:
            arr = np.array2string(np.asarray(self.leading_tensor), precision=6)
            lines.append(f"leading tensor C_{self.sie}: {arr}")
            exact_c = f" (= {self.tied_contraction_exact})" if self.tied_contraction_exact else ""
            lines.append(f"tied contraction C_SIE x (1..1): {self.tied_contraction:.10g}{exact_c}")
            lab = "exact" if self.op_norm_exact else "estimate (power iteration)"
            lines.append(f"operator norm ||C_SIE||_op: {self.op_norm:.10g}  [{lab}]")
            lines.append(
                f"gain nu_untied/nu_tied at optimal step sizes: {self.gain_optimal:.6g}  "
                "(this package's ODE, as theory sgd gain)"
            )
            lines.append(
                f"    published formula (assumes equal SGD noise in both networks): "
                f"{self.gain_optimal_published:.6g}"
            )
            lines.append(
                f"gain at equal step sizes: {self.gain_equal:.6g}  (this package's ODE; "
                f"published formula: {self.gain_equal_published:.6g})"
            )
            ok = "yes" if self.tied_learnable else "NO (contraction is zero)"
            lines.append(f"tied network can learn it: {ok}")
        lines.append(
            f"SIE of the even part (attention without positional encoding): {self.even_sie}"
        )
        if self.L == 1:
            lines.append(f"classic information exponent: {self.information_exponent}")
        lines.append(
            "coefficients: "
            + ("exact (sympy)" if self.exact else f"numerical, tolerance {self.tolerance:.1e}")
        )
        return "\n".join(lines)


def gains(tied_contraction: float, op_norm: float, sie: int, L: int) -> dict[str, float]:
    """The tied/untied gains nu_untied / nu_tied predicted from the leading Hermite tensor
    (docs/ssi.md eqs. 29-31): this package's ``gain_equal`` and ``gain_optimal`` and the
    published formulas ``gain_equal_published`` and ``gain_optimal_published`` (see the module
    docstring).  All four are 0 when the tied contraction is 0 (tied network stuck)."""
    if tied_contraction == 0:
        return dict(
            gain_equal=0.0, gain_optimal=0.0, gain_equal_published=0.0, gain_optimal_published=0.0
        )
    if not (op_norm > 0):
        raise ValueError(f"the operator norm must be > 0 for a non-zero contraction, got {op_norm}")
    k = int(sie)
    ratio = tied_contraction / op_norm
    Lfac = L if k == 1 else 1
    return dict(
        gain_equal=abs(ratio) * L ** (1 - k / 2),
        gain_optimal=ratio**2 * L ** (1 - k),
        gain_equal_published=abs(ratio) * math.sqrt(Lfac),
        gain_optimal_published=ratio**2 * Lfac,
    )


def analyze(
    target: str | sp.Expr | Target,
    L: int | None = None,
    max_order: int = 6,
    *,
    tol: float = DEFAULT_TOL,
    rng: int | np.random.Generator = 0,
) -> SIEReport:
    """Full SIE analysis of a target (string or sympy expression): see the module docstring."""
    K = check_int("max_order", max_order, lo=1, hi=MAX_DEGREE)
    tol = check_positive("tol", tol, hi=1.0)
    t = parse_target(target, L)
    if t.is_polynomial and not t.is_constant:
        K = max(K, _total_degree(t))
    params = dict(expr=str(t.expr), L=t.L, max_order=K, tol=tol)
    if t.is_constant:
        return SIEReport(
            expr=str(t.expr),
            L=t.L,
            sie=None,
            exact=True,
            max_order=K,
            message="the target is constant: every Hermite coefficient of order >= 1 vanishes, "
            "so the SIE is undefined (sie = null) and nothing can be learned",
            params=params,
        )
    store = hermite_coefficients(t, K, tol=tol)
    ks = _orders_nonzero(store, K)
    even = [k for k in ks if k % 2 == 0]
    exact = store.is_exact
    status = "ok" if store.converged else "max_iter"
    note = "; ".join(store.notes)
    meta = dict(method="exact sympy" if exact else "numerical (quad / Gauss-Hermite)", notes=note)
    energy = [0.0] * (K + 1)  # k! ||C_k||_F^2 = sum_{|alpha|=k} a_alpha^2 alpha!  (Parseval)
    for a in store.support():
        k_a = sum(a)
        if k_a <= K:
            energy[k_a] += store.value(a) ** 2 * math.prod(math.factorial(q) for q in a)
    common = dict(
        expr=str(t.expr),
        L=t.L,
        exact=exact,
        tolerance=float(store.tolerance),
        max_order=K,
        even_sie=even[0] if even else None,
        params=params,
        metadata=meta,
        status=status,
        hermite_energy=energy,
    )
    if not ks:
        return SIEReport(
            sie=None,
            message=f"no non-zero Hermite coefficient of order 1..{K} (within tolerance "
            f"{store.zero_tol():.1e}): the target is constant or its SIE exceeds max_order = {K}"
            "; raise --max-order",
            **common,
        )
    k = ks[0]
    C = tensor_from_coefficients(store, k)
    tc = float(np.sum(C))
    # exact contraction = sum over alpha of a_alpha (k!/alpha!) * alpha!/k! = sum of a_alpha
    tc_exact = None
    lt_exact = None
    if exact:
        tce = sp.simplify(sum((store.exact[a] for a in store.exact if sum(a) == k), sp.Integer(0)))
        tc_exact = str(tce)
        tc_zero = _exact_is_zero(tce)
        if k <= 2 and t.L <= 16:
            kf = math.factorial(k)
            ent = {}
            for a, v in store.exact.items():
                if sum(a) == k:
                    af = math.prod(math.factorial(q) for q in a)
                    ent[a] = str(sp.simplify(v * af / kf))
            lt_exact = ent and {",".join(map(str, a)): v for a, v in ent.items()}
    else:
        n_entries = C.size
        tc_zero = abs(tc) <= store.zero_tol() * max(1.0, math.sqrt(n_entries))
    nrm = op_norm(C, rng=rng)
    if tc_zero:
        tc = 0.0
    g = gains(tc, nrm.value, k, t.L)
    msg = ""
    if tc_zero:
        msg = (
            "C_SIE x (1,...,1) = 0: the tied network is stuck at m = 0 (gain 0); the untied "
            "network learns it"
        )
    if status != "ok":
        msg = (
            (msg + "; " if msg else "")
            + "numerical quadrature did not reach the tolerance: "
            + note
        )
    return SIEReport(
        sie=k,
        leading_tensor=C,
        tied_contraction=tc,
        op_norm=nrm.value,
        op_norm_exact=nrm.exact,
        tied_learnable=not tc_zero,
        **g,
        information_exponent=k if t.L == 1 else None,
        leading_tensor_exact=lt_exact,
        tied_contraction_exact=tc_exact,
        message=msg,
        **common,
    )
