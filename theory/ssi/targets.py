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

from theory._util import check_int, check_positive, check_row_stochastic, check_unit_interval
from theory.ssi._kernels import attention_jac, attention_scores

__all__ = [
    "SequenceTarget",
    "Target",
    "PositionalSemanticTarget",
    "parse_target",
    "parse_activation",
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


# =========================================================================== size limits

#: Limits on a target, checked on the text (or the sympy tree) BEFORE sympy builds or expands
#: anything, so that a hostile or mistyped target fails at once with a message instead of
#: exhausting memory (docs/ssi.md, "Limits").
MAX_L = 64  # highest variable index z<k> and sequence length L
MAX_DEGREE = 12  # polynomial degree, Hermite order He<k>, exponent of a variable
MAX_CONST_EXPONENT = 64  # exponent of a pure number (2**10 is fine, 10**10**10 is not)
MAX_NUMBER = 1e15  # absolute value of a number in the target
MAX_LENGTH = 2000  # characters of a target string
MAX_NODES = 500  # operations, numbers and variables of a target
MAX_DEPTH = 40  # nesting depth
MAX_EXPR_NODES = 200_000  # nodes of a sympy expression (degree <= 12 x <= 10000 monomials)
MAX_MONOMIALS = 10_000  # monomials of the expanded polynomial part (an upper bound)

_FUNC_LIST = (
    "He<k>, He(k, x), exp, log, sqrt, sin, cos, tanh, erf, abs, sign, relu, max, min, "
    "Heaviside, sigmoid, softmax"
)


@dataclass
class _Size:
    """Upper bounds carried up the expression tree: polynomial degree, monomial count, and the
    numeric value when the subtree is a plain number (None otherwise)."""

    degree: int = 0
    monomials: int = 1
    value: float | None = None
    const: bool = True  # no variable below


def _cap(n: int) -> int:
    return min(int(n), MAX_MONOMIALS + 1)


def _power_monomials(n: int, p: int) -> int:
    return _cap(math.comb(_cap(n) + p - 1, p)) if p > 0 else 1


class _Guard:
    """One walk over a target (a Python AST of the string, or a sympy tree) enforcing the limits
    above; ``source`` is the user's text for the messages."""

    def __init__(self, source: str, max_nodes: int = MAX_NODES):
        self.source = source
        self.nodes = 0
        self.max_nodes = max_nodes

    def fail(self, what: str) -> None:
        src = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        raise ValueError(f"the target {src!r} {what}")

    # ---- combination rules shared by both tree kinds
    def number(self, x: float) -> _Size:
        if not math.isfinite(x) or abs(x) > MAX_NUMBER:
            self.fail(
                f"contains the number {x:.3g}; numbers must be finite with absolute value <= "
                f"{MAX_NUMBER:g}: rescale the target"
            )
        return _Size(value=x)

    def variable(self, name: str) -> _Size:
        m = _VAR_RE.match(name)
        if not m:
            self.fail(
                f"uses the unknown variable {name!r}; variables are z1..zL (1-based) and the "
                f"functions are {_FUNC_LIST}"
            )
        k = int(m.group(1)) if len(m.group(1)) <= 6 else MAX_L + 1
        if k < 1:
            self.fail(f"uses the unknown variable {name!r}; variables are z1..zL, numbered from 1")
        if k > MAX_L:
            self.fail(f"uses z{m.group(1)}; at most {MAX_L} variables (z1..z{MAX_L}) are supported")
        return _Size(degree=1, const=False)

    def add(self, parts: list[_Size]) -> _Size:
        return self._bounded(
            _Size(
                degree=max(p.degree for p in parts),
                monomials=_cap(sum(p.monomials for p in parts)),
                const=all(p.const for p in parts),
            )
        )

    def mul(self, parts: list[_Size]) -> _Size:
        mono = 1
        for p in parts:
            mono = _cap(mono * p.monomials)
        return self._bounded(
            _Size(
                degree=sum(p.degree for p in parts),
                monomials=mono,
                const=all(p.const for p in parts),
            )
        )

    def power(self, base: _Size, exp: _Size) -> _Size:
        if not exp.const:  # a variable exponent: not a polynomial; bound what is below
            return self.mul([base, exp])
        v = exp.value
        if base.const:
            if v is not None and abs(v) > MAX_CONST_EXPONENT:
                self.fail(
                    f"raises a number to the power {v:.3g}; exponents of numbers must be at most "
                    f"{MAX_CONST_EXPONENT} in absolute value"
                )
            if base.value is not None and v is not None:
                try:
                    val = float(base.value) ** float(v)
                except (OverflowError, ZeroDivisionError):
                    val = math.inf
                if isinstance(val, complex):
                    return _Size()
                return self.number(val)
            return _Size()
        if v is None:  # z1**pi: bounded like z1
            return self._bounded(_Size(degree=base.degree, monomials=base.monomials, const=False))
        if abs(v) > MAX_DEGREE:
            self.fail(
                f"raises an expression in the variables to the power {v:.3g}; exponents are "
                f"limited to {MAX_DEGREE} in absolute value (polynomial degree <= {MAX_DEGREE})"
            )
        p = math.ceil(abs(v))
        mono = _power_monomials(base.monomials, p) if v == int(v) and v >= 0 else base.monomials
        return self._bounded(_Size(degree=base.degree * p, monomials=mono, const=False))

    def hermite(self, k, arg: _Size) -> _Size:
        if not (isinstance(k, int) and 0 <= k <= MAX_DEGREE):
            self.fail(
                f"uses the Hermite polynomial of order {k}; He(k, x) needs a non-negative integer "
                f"order k <= {MAX_DEGREE}"
            )
        mono = _cap(sum(_power_monomials(arg.monomials, k - 2 * j) for j in range(k // 2 + 1)))
        return self._bounded(_Size(degree=arg.degree * k, monomials=mono, const=arg.const))

    def function(self, args: list[_Size]) -> _Size:
        # a non-polynomial function: its arguments are bounded; the result counts as one monomial
        # of the largest argument degree (what the piecewise/numerical Hermite code works with)
        return self._bounded(
            _Size(degree=max((a.degree for a in args), default=0), const=all(a.const for a in args))
        )

    def _bounded(self, s: _Size) -> _Size:
        if s.degree > MAX_DEGREE:
            self.fail(
                f"has polynomial degree above {MAX_DEGREE} (at least {s.degree}); lower the "
                "powers or Hermite orders"
            )
        if s.monomials > MAX_MONOMIALS:
            self.fail(
                f"expands to more than {MAX_MONOMIALS} monomials; use fewer variables inside "
                "powers and Hermite polynomials"
            )
        return s

    def enter(self, depth: int) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            self.fail(f"has more than {self.max_nodes} terms and operations; shorten it")
        if depth > MAX_DEPTH:
            self.fail(f"is nested more than {MAX_DEPTH} levels deep; simplify it")

    # ---- a Python AST of the target string
    def walk_ast(self, node, depth: int = 0) -> _Size:
        import ast

        self.enter(depth)
        d = depth + 1
        if isinstance(node, ast.Expression):
            return self.walk_ast(node.body, d)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                self.fail(f"contains the literal {node.value!r}; only numbers are allowed")
            if isinstance(node.value, int) and abs(node.value) > MAX_NUMBER:
                return self.number(math.inf)
            return self.number(float(node.value))
        if isinstance(node, ast.Name):
            if node.id in ("pi", "E"):
                return _Size()
            if node.id in _FUNCS or re.fullmatch(r"He\d+", node.id):
                self.fail(f"uses the function {node.id} without an argument; write {node.id}(x)")
            return self.variable(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            s = self.walk_ast(node.operand, d)
            if s.value is not None and isinstance(node.op, ast.USub):
                return _Size(value=-s.value)
            return s
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            if op is ast.Pow:
                return self.power(self.walk_ast(node.left, d), self.walk_ast(node.right, d))
            if op not in (ast.Add, ast.Sub, ast.Mult, ast.Div):
                self.fail(
                    "uses an operator that targets do not have; the operators are + - * / and "
                    "** (or ^)"
                )
            # a chain a + b + c (or a * b * c) is one level, however long
            group = (ast.Add, ast.Sub) if op in (ast.Add, ast.Sub) else (ast.Mult, ast.Div)
            same = isinstance(node.left, ast.BinOp) and isinstance(node.left.op, group)
            a, b = self.walk_ast(node.left, depth if same else d), self.walk_ast(node.right, d)
            s = self.add([a, b]) if op in (ast.Add, ast.Sub) else self.mul([a, b])
            if a.value is not None and b.value is not None:
                x, y = a.value, b.value
                if op is ast.Div and y == 0:
                    self.fail("divides by zero; give a finite expression")
                val = {ast.Add: x + y, ast.Sub: x - y, ast.Mult: x * y}.get(op)
                s = self.number(x / y if op is ast.Div else val)
            return s
        if isinstance(node, ast.Call):
            return self._call_ast(node, d)
        if isinstance(node, ast.Attribute):
            self.fail("uses attribute access ('.name'); only numbers, z1..zL and functions")
        self.fail(
            f"uses Python syntax that targets do not have ({type(node).__name__}); write "
            f"numbers, z1..zL, + - * / ** (or ^), parentheses and the functions {_FUNC_LIST}"
        )

    def _call_ast(self, node, d: int) -> _Size:
        import ast

        if not isinstance(node.func, ast.Name):
            self.fail(f"calls something that is not one of the functions {_FUNC_LIST}")
        name = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            self.fail(f"passes keyword or starred arguments to {name}; write {name}(x)")
        m = re.fullmatch(r"He(\d+)", name)
        if m:
            order = int(m.group(1)) if len(m.group(1)) <= 6 else MAX_DEGREE + 1
            if len(node.args) != 1:
                self.fail(
                    f"calls {name}: {name}(x) takes exactly one argument, got {len(node.args)}"
                )
            return self.hermite(order, self.walk_ast(node.args[0], d))
        if name == "He":
            if len(node.args) != 2:
                self.fail("calls He with the wrong arguments; write He(k, x)")
            k = self.walk_ast(node.args[0], d).value
            k = int(k) if k is not None and k == int(k) else k
            return self.hermite(k, self.walk_ast(node.args[1], d))
        if name not in _FUNCS or name in ("pi", "E"):
            self.fail(f"calls the unknown function {name!r}; the functions are {_FUNC_LIST}")
        if not node.args:
            self.fail(f"calls {name} without arguments")
        return self.function([self.walk_ast(a, d) for a in node.args])

    # ---- a sympy expression given through the Python API
    def walk_sympy(self, e, depth: int = 0) -> _Size:
        self.enter(depth)
        d = depth + 1
        if e.is_Number:
            return self.number(float(e)) if e.is_real else _Size()
        if e.is_Symbol:
            return self.variable(e.name)
        if e.is_NumberSymbol or not e.free_symbols:
            return _Size()
        if e.is_Add:
            return self.add([self.walk_sympy(a, d) for a in e.args])
        if e.is_Mul:
            return self.mul([self.walk_sympy(a, d) for a in e.args])
        if e.is_Pow:
            return self.power(self.walk_sympy(e.base, d), self.walk_sympy(e.exp, d))
        return self.function([self.walk_sympy(a, d) for a in e.args if isinstance(a, sp.Basic)])


def check_target_text(text: str) -> None:
    """Reject a target string that is hostile (attribute access, lambda, imports, unknown
    functions, ...) or too large (see the ``MAX_*`` limits) before anything is evaluated."""
    import ast

    if len(text) > MAX_LENGTH:
        raise ValueError(
            f"the target expression is too long ({len(text)} > {MAX_LENGTH} characters); shorten it"
        )
    bad = re.search(r"__|\blambda\b|\bimport\b|[;\[\]{}\\\"'`@!$]", text)
    if bad:
        raise ValueError(
            f"cannot parse the target {text!r}: {bad.group(0)!r} is forbidden; write numbers, "
            f"z1..zL, + - * / ** (or ^), parentheses and the functions {_FUNC_LIST}"
        )
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        msg = getattr(exc, "msg", None) or (str(exc).splitlines() or [""])[0]
        raise ValueError(
            f"cannot parse the target {text!r}: {msg or type(exc).__name__}; write numbers, "
            f"z1..zL, + - * / ** (or ^), parentheses and the functions {_FUNC_LIST}"
        ) from None
    _Guard(text).walk_ast(tree)


def check_target_expr(expr: sp.Expr, source: str) -> None:
    """The limits of :func:`check_target_text` for a sympy expression, except the count of
    terms and operations, which bounds what a user types: an expression built by a program (a
    family of targets at large L) is bounded by its degree and its number of monomials instead
    (``MAX_EXPR_NODES`` is only the walk's own bound)."""
    _Guard(source, max_nodes=MAX_EXPR_NODES).walk_sympy(expr)


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
        L = check_int("L", L, lo=1, hi=MAX_L)
        if top > L:
            raise ValueError(
                f"the target uses z{top} but L = {L}: variables must lie in z1..z{L}; raise L "
                "or remove the variable"
            )
    return expr, L


def _parse_string(text: str) -> sp.Expr:
    from sympy.parsing.sympy_parser import auto_number, auto_symbol, convert_xor, parse_expr

    text = text.strip()
    if not text:
        raise ValueError("the target expression is empty")
    check_target_text(text)  # limits and hostile constructs, before sympy sees anything
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
    }
    try:
        expr = parse_expr(
            text,
            local_dict=local,
            global_dict=glob,
            transformations=(auto_symbol, auto_number, convert_xor),
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
        check_target_expr(parsed, source)
        parsed = _realify(parsed)
    parsed, L = _check_expr(parsed, L, source)
    return Target(expr=parsed, L=L, source=source)


_X_RE = re.compile(r"\bx\b")


def parse_activation(text: str) -> Target:
    """A student activation sigma(x) written in the target language: ``x`` is its variable, the
    functions and limits are those of a target (:func:`parse_target`).  Returns a
    :class:`Target` in z1 (L = 1) whose ``source`` is the text; ValueError saying what to change
    for anything else (another variable, a constant, a hostile or too large expression)."""
    if not isinstance(text, str):
        raise ValueError(f"an activation is a name or an expression in x, got {text!r}")
    text = text.strip()
    other = re.search(r"\bz\d+\b", text)
    if other:
        raise ValueError(
            f"the activation {text!r} uses {other.group(0)!r}: an activation is an expression "
            "in x alone (z1..zL are the target's variables)"
        )
    zed = _X_RE.sub("z1", text)
    try:
        t = parse_target(zed, 1)
    except ValueError as exc:
        msg = str(exc).replace(repr(zed), repr(text)).replace("the target", "the activation")
        msg = re.sub(r"variables are z1\.\.zL( \(1-based\))?", "its variable is x", msg)
        raise ValueError(msg.replace("z1..zL", "x").replace("z1", "x")) from None
    if t.is_constant:
        raise ValueError(f"the activation {text!r} is a constant; write an expression in x")
    return Target(expr=t.expr, L=1, source=text)


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
        self.L = check_int("L", L, lo=1, hi=MAX_L)
        if A is None:
            if a is None:
                raise ValueError("give the positional strength a (or a matrix A)")
            if self.L != 2:
                raise ValueError("A_a is defined for L = 2; pass A= for other L")
            a = check_positive("a", a)
            if not (0 < a <= 10):
                raise ValueError(f"a must be in (0, 10], got {a}")
            self.a = a
            A = positional_matrix(a)
        else:
            A = check_row_stochastic("A", A)
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
