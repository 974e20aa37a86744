r"""The target language of sequence single-index models: ONE representation of a target, used by
the Hermite analysis, the risk engines, the ODE and both SGD simulators.

A target is the map y = g(z*), z* = X w* ~ N(0, I_L) (docs/ssi.md eq. 2).  It is one of

* :class:`Target` -- a scalar expression g(z1, ..., zL) (a sympy expression, parsed from a string
  by :func:`parse_target`), ``k = 1`` output;
* :class:`PositionalSemanticTarget` -- the matrix target
  y = (1 - omega) softmax_row(z* z*^T) + omega A of docs/ssi.md eq. 3, ``k = L^2`` outputs
  (row-major).

Both are subclasses of :class:`SequenceTarget` and answer the same questions: ``L``, ``k``,
``values(z)`` (N, L) -> (N, k), ``grad(z)`` (N, L) -> (N, L, k) (dg/dz*_l),
``is_polynomial`` and ``key()`` (a JSON-able identity, used by the result stores).  Targets are
immutable and picklable (the compiled numpy functions are rebuilt after unpickling).
:func:`as_target` turns whatever a user passes (string, sympy expression, target) into one.

Target strings
--------------
Variables z1..zL (1-based).  ``^`` means power.  Functions: ``He<k>(x)`` or ``He(k, x)``
(probabilists' Hermite), exp, log, sqrt, sin, cos, tanh, erf, Abs/abs, sign, relu (= Max(x, 0)),
Max/max, Min/min, Heaviside (H(0) = 1/2), sigmoid, and softmax entries
``softmax(i, a_1, ..., a_n)`` = exp(a_i) / sum_j exp(a_j) (i is 1-based), e.g. the (1, 1) entry of
softmax_row(z z^T) for L = 2 is ``softmax(1, z1*z1, z1*z2)``.  Constants pi and E.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef

from theory._util import check_unit_interval
from theory.ssi._kernels import attention_jac, attention_scores

__all__ = [
    "SequenceTarget",
    "Target",
    "PositionalSemanticTarget",
    "parse_target",
    "as_target",
    "positional_matrix",
    "positional_weight",
]

_VAR_RE = re.compile(r"^z(\d+)$")


# =========================================================================== parsing


def _relu(x):
    return sp.Max(x, 0)


def _softmax(i, *args):
    if not args:
        raise ValueError("softmax(i, a1, ..., an) needs at least one argument after the index i")
    i = sp.sympify(i)
    if not (i.is_Integer and 1 <= int(i) <= len(args)):
        raise ValueError(
            f"softmax(i, a1, ..., an): the first argument is the 1-based index of the entry, an "
            f"integer between 1 and {len(args)}; got {i}"
        )
    ai = args[int(i) - 1]
    # 1 / sum_j exp(a_j - a_i): the same value, but overflow-safe when evaluated in floats
    return 1 / sp.Add(*[sp.exp(a - ai) for a in args])


def _he(k, x):
    k = sp.sympify(k)
    if not (k.is_Integer and int(k) >= 0):
        raise ValueError(f"He(k, x) needs a non-negative integer order k, got {k}")
    return sp.hermite_prob(int(k), x)


def _he_k(k: int):
    def he_k(*args):
        if len(args) != 1:
            raise ValueError(f"He{k}(x) takes exactly one argument, got {len(args)}")
        return sp.hermite_prob(k, args[0])

    return he_k


def _sigmoid(x):
    return 1 / (1 + sp.exp(-x))


_FUNCS: dict[str, Any] = {
    "exp": sp.exp,
    "log": sp.log,
    "sqrt": sp.sqrt,
    "sin": sp.sin,
    "cos": sp.cos,
    "tanh": sp.tanh,
    "erf": sp.erf,
    "Abs": sp.Abs,
    "abs": sp.Abs,
    "sign": sp.sign,
    "relu": _relu,
    "ReLU": _relu,
    "Max": sp.Max,
    "max": sp.Max,
    "Min": sp.Min,
    "min": sp.Min,
    "Heaviside": sp.Heaviside,
    "heaviside": sp.Heaviside,
    "sigmoid": _sigmoid,
    "softmax": _softmax,
    "He": _he,
    "pi": sp.pi,
    "E": sp.E,
}

# sympy function classes a target may contain after parsing
_ALLOWED_FUNCS = (
    sp.exp,
    sp.log,
    sp.sin,
    sp.cos,
    sp.tanh,
    sp.erf,
    sp.Abs,
    sp.sign,
    sp.Max,
    sp.Min,
    sp.Heaviside,
    sp.Piecewise,
    sp.erfc,
    sp.sinh,
    sp.cosh,
    sp.atan,
)


def _check_expr(expr: sp.Expr, L: int | None, source: str) -> tuple[sp.Expr, int]:
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"the target {source!r} is not a scalar expression")
    undef = sorted({type(f).__name__ for f in expr.atoms(AppliedUndef)})
    if undef:
        raise ValueError(
            f"unknown function {undef[0]!r} in the target {source!r}; allowed: He<k>, exp, log, "
            "sqrt, sin, cos, tanh, erf, Abs, sign, relu, Max, Min, Heaviside, sigmoid, softmax"
        )
    for f in expr.atoms(sp.Function):
        if not isinstance(f, _ALLOWED_FUNCS):
            raise ValueError(f"the function {type(f).__name__} is not supported in a target")
    if expr.has(sp.I) or expr.has(sp.zoo) or expr.has(sp.nan) or expr.has(sp.oo):
        raise ValueError(f"the target {source!r} is complex or infinite; give a real expression")
    idx = []
    for s in expr.free_symbols:
        m = _VAR_RE.match(s.name)
        if not m or int(m.group(1)) < 1:
            raise ValueError(
                f"unknown variable {s.name!r} in the target {source!r}; variables are z1..zL "
                "(1-based)"
            )
        idx.append(int(m.group(1)))
    top = max(idx, default=0)
    if L is None:
        L = max(top, 1)
    else:
        L = int(L)
        if L < 1:
            raise ValueError(f"L must be >= 1, got {L}")
        if top > L:
            raise ValueError(
                f"the target uses z{top} but L = {L}: variables must lie in z1..z{L}; raise L "
                "or remove the variable"
            )
    return expr, L


def _parse_string(text: str) -> sp.Expr:
    from sympy.parsing.sympy_parser import (
        auto_number,
        auto_symbol,
        convert_xor,
        factorial_notation,
        parse_expr,
    )

    text = text.strip()
    if not text:
        raise ValueError("the target expression is empty")
    if len(text) > 5000:
        raise ValueError("the target expression is too long (> 5000 characters)")
    if re.search(r"__|\blambda\b|\bimport\b|[;\[\]{}\\\"'`@]", text):
        raise ValueError(f"cannot parse the target {text!r}: it contains forbidden characters")
    local: dict[str, Any] = dict(_FUNCS)
    for name in set(re.findall(r"\b(z\d+)\b", text)):
        local[name] = sp.Symbol(name, real=True)
    for name in set(re.findall(r"\bHe(\d+)\b", text)):
        local[f"He{name}"] = _he_k(int(name))
    glob = {
        "__builtins__": {},
        "Integer": sp.Integer,
        "Float": sp.Float,
        "Rational": sp.Rational,
        "Symbol": sp.Symbol,
        "Function": sp.Function,
        "factorial": sp.factorial,
    }
    try:
        expr = parse_expr(
            text,
            local_dict=local,
            global_dict=glob,
            transformations=(auto_symbol, auto_number, factorial_notation, convert_xor),
        )
    except ValueError as exc:
        raise ValueError(f"cannot parse the target {text!r}: {exc}") from None
    except Exception as exc:  # SyntaxError, TokenError, TypeError from bad arity, ...
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"cannot parse the target {text!r}: {msg}") from None
    if not isinstance(expr, sp.Basic):
        expr = sp.sympify(expr)
    return expr


def _realify(expr: sp.Expr) -> sp.Expr:
    """Replace every z<k> symbol by the real symbol of the same name."""
    rep = {s: sp.Symbol(s.name, real=True) for s in expr.free_symbols if not s.is_real}
    return expr.xreplace(rep) if rep else expr


def parse_target(expr: str | sp.Expr | Target, L: int | None = None) -> Target:
    """Parse a scalar target (string or sympy expression in z1..zL) into a :class:`Target`.

    ``L`` is inferred from the highest variable index when not given; a variable beyond ``L``
    raises ValueError.  He<k>(x) is expanded into its polynomial.
    """
    if isinstance(expr, Target):
        if L is None or int(L) == expr.L:
            return expr
        return parse_target(expr.expr, L)
    if isinstance(expr, SequenceTarget):
        raise ValueError(f"{expr!r} is a matrix target, not a scalar expression")
    if isinstance(expr, str):
        source = expr
        parsed = _parse_string(expr)
    else:
        try:
            parsed = sp.sympify(expr)
        except (sp.SympifyError, TypeError) as exc:
            raise ValueError(f"cannot read the target {expr!r}: {exc}") from None
        source = str(parsed)
        parsed = _realify(parsed)
    parsed, L = _check_expr(parsed, L, source)
    return Target(expr=parsed, L=L, source=source)


# =========================================================================== numba scalar func


def _compile_njit(expr: sp.Expr, L: int):
    import numba
    from sympy.printing.pycode import PythonCodePrinter

    e = expr.replace(sp.sign, lambda a: 2 * sp.Heaviside(a, sp.Rational(1, 2)) - 1)
    e = e.replace(sp.Heaviside, lambda *a: sp.Heaviside(a[0], sp.Rational(1, 2)))
    e = e.rewrite(sp.Piecewise) if e.has(sp.Heaviside) else e
    rep = {sp.Symbol(f"z{i + 1}", real=True): sp.Symbol(f"_z[{i}]") for i in range(L)}
    e = e.xreplace(rep)

    class _Printer(PythonCodePrinter):
        def _print_Float(self, x):  # plain float literal
            return repr(float(x))

        def _print_Rational(self, x):
            return repr(float(x))

        def _print_Integer(self, x):
            return f"{int(x)}.0" if abs(int(x)) < 2**53 else repr(float(x))

    try:
        body = _Printer({"standard": "python3"}).doprint(e)
    except Exception as exc:
        raise ValueError(f"cannot compile the target {expr} for numba: {exc}") from None
    if "not supported" in body.lower():
        raise ValueError(f"cannot compile the target {expr} for numba: {body.splitlines()[0]}")
    src = f"def _g(_z):\n    return float({body})\n"
    ns: dict[str, Any] = {"math": math}
    try:
        exec(compile(src, "<theory.ssi.targets target>", "exec"), ns)
        fn = numba.njit(ns["_g"])
        fn(np.zeros(L))
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"cannot compile the target {expr} for numba: {msg}") from None
    return fn


# =========================================================================== the targets


class SequenceTarget:
    """Common interface of the targets (see the module docstring); not instantiated itself."""

    L: int
    k: int

    @property
    def is_polynomial(self) -> bool:
        return False

    def values(self, z: np.ndarray) -> np.ndarray:
        """y at the rows of z (N, L): (N, k)."""
        raise NotImplementedError

    def grad(self, z: np.ndarray) -> np.ndarray:
        """dy/dz*_l at the rows of z (N, L): (N, L, k)."""
        raise NotImplementedError

    def key(self) -> dict:
        """JSON-able identity of the target (the store keys of the simulations)."""
        raise NotImplementedError


@lru_cache(maxsize=256)
def _lambdified(expr: sp.Expr, L: int):
    """(g, grad g) as vectorised numpy functions of z1..zL (cached per expression: a target
    unpickled in a worker process compiles once per process)."""
    syms = tuple(sp.Symbol(f"z{i + 1}", real=True) for i in range(L))
    e = expr.replace(sp.Heaviside, lambda *a: sp.Heaviside(a[0], sp.Rational(1, 2)))
    g = sp.lambdify(syms, e, modules=["scipy", "numpy"])
    dg = sp.lambdify(syms, [sp.diff(expr, s) for s in syms], modules=["scipy", "numpy"])
    return g, dg


@dataclass(frozen=True)
class Target(SequenceTarget):
    """A scalar target g(z_1..z_L) given by an expression (built by :func:`parse_target`).

    ``func(z)``: vectorised numpy, z of shape (N, L) -> (N,); ``values(z)`` the same as (N, 1).
    ``njit_func``: numba scalar function of a float64 vector z of shape (L,) (compiled on first
    access; ValueError if the expression cannot be compiled).
    """

    expr: sp.Expr
    L: int
    source: str = field(default="", compare=False)

    k = 1

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return tuple(sp.Symbol(f"z{i + 1}", real=True) for i in range(self.L))

    @property
    def is_polynomial(self) -> bool:
        return bool(self.expr.is_polynomial(*self.symbols))

    @property
    def is_constant(self) -> bool:
        return not self.expr.free_symbols

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return f"target {self.expr} (L = {self.L})"

    def __getstate__(self):
        return dict(expr=self.expr, L=self.L, source=self.source)

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def _check(self, z) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        if z.ndim == 1 and self.L == 1:
            z = z[:, None]
        if z.ndim != 2 or z.shape[1] != self.L:
            raise ValueError(f"the target expects an array of shape (N, {self.L}), got {z.shape}")
        return z

    def func(self, z: np.ndarray) -> np.ndarray:
        z = self._check(z)
        with np.errstate(all="ignore"):
            out = _lambdified(self.expr, self.L)[0](*[z[:, i] for i in range(self.L)])
        return np.broadcast_to(np.asarray(out, dtype=float), (z.shape[0],)).copy()

    def values(self, z: np.ndarray) -> np.ndarray:
        return self.func(z)[:, None]

    def grad(self, z: np.ndarray) -> np.ndarray:
        z = self._check(z)
        with np.errstate(all="ignore"):
            out = _lambdified(self.expr, self.L)[1](*[z[:, i] for i in range(self.L)])
        cols = [np.broadcast_to(np.asarray(o, float), (len(z),)) for o in out]
        return np.stack(cols, axis=1)[:, :, None]

    def key(self) -> dict:
        return dict(kind="expression", expr=str(self.expr), L=self.L)

    @cached_property
    def njit_func(self):
        return _compile_njit(self.expr, self.L)


def positional_weight(a: float | np.ndarray) -> np.ndarray:
    """The diagonal entry p = 1 / (1 + exp(-2 a^2)) of A_a (:func:`positional_matrix`)."""
    a = np.asarray(a, dtype=float)
    return 1.0 / (1.0 + np.exp(-2 * a * a))


def positional_matrix(a: float | np.ndarray) -> np.ndarray:
    """A_a = softmax_row([[a^2, -a^2], [-a^2, a^2]]) (docs/ssi.md eq. 3); ``a`` a scalar (2, 2)
    or an array (..., 2, 2).  Written out: with e = exp(-2 a^2), the rows are
    (1, e) / (1 + e) and (e, 1) / (1 + e) -- the same floating-point operations as the row
    softmax, so the numbers are identical to ``softmax_rows``."""
    a = np.asarray(a, dtype=float)
    e = np.exp(-2 * a * a)
    p, q = 1.0 / (1.0 + e), e / (1.0 + e)
    return np.stack([np.stack([p, q], -1), np.stack([q, p], -1)], -2)


class PositionalSemanticTarget(SequenceTarget):
    """y = (1 - omega) softmax_row(z* z*^T) + omega A, an L x L matrix target (docs/ssi.md
    eq. 3), flattened row-major to k = L^2 outputs.

    ``A`` defaults to A_a = :func:`positional_matrix` (a) (L = 2); pass ``A=`` (row-stochastic
    L x L) for other positional parts.
    """

    def __init__(self, omega: float, a: float | None = None, *, L: int = 2, A=None):
        self.omega = check_unit_interval("omega", omega)
        self.L = int(L)
        if A is None:
            if a is None:
                raise ValueError("give the positional strength a (or a matrix A)")
            if self.L != 2:
                raise ValueError("A_a is defined for L = 2; pass A= for other L")
            a = float(a)
            if not (0 < a <= 10):
                raise ValueError(f"a must be in (0, 10], got {a}")
            self.a = a
            A = positional_matrix(a)
        else:
            A = np.asarray(A, dtype=float)
            self.a = None
        if A.shape != (self.L, self.L):
            raise ValueError(f"A must be {self.L}x{self.L}, got {A.shape}")
        self.A = A
        self.k = self.L * self.L

    def __repr__(self):
        return f"PositionalSemanticTarget(omega={self.omega}, a={self.a})"

    def values(self, z: np.ndarray) -> np.ndarray:
        S = attention_scores(z)
        return ((1.0 - self.omega) * S + self.omega * self.A).reshape(len(z), -1)

    def grad(self, z: np.ndarray) -> np.ndarray:
        _, dA = attention_jac(z)  # (N, L, L, L) [i, j, l]
        return (1.0 - self.omega) * np.moveaxis(dA, 3, 1).reshape(len(z), self.L, -1)

    def key(self) -> dict:
        if self.a is not None:
            return dict(kind="positional_semantic", omega=self.omega, a=self.a, L=self.L)
        return dict(kind="positional_semantic", omega=self.omega, A=self.A.tolist(), L=self.L)


def as_target(target: str | sp.Expr | SequenceTarget, L: int | None = None) -> SequenceTarget:
    """The one coercion of user input into a target: a :class:`SequenceTarget` is checked against
    ``L`` (an expression target is re-read for another L), anything else goes to
    :func:`parse_target`."""
    if isinstance(target, PositionalSemanticTarget):
        if L is not None and int(L) != target.L:
            raise ValueError(f"the target has L = {target.L} but the model has L = {L}")
        return target
    return parse_target(target, L)
