"""Vectorised numpy kernels of the SSI models (shapes in every docstring).

* :func:`softmax_rows`, :func:`attention_scores`, :func:`attention_jac`: A = softmax_row(z z^T)
  and dA/dz for any L (no temperature inside the softmax, docs/ssi.md eq. 4).
* the activations of the tied/untied networks: ONE table, :data:`ACTIVATIONS` (sigma, sigma',
  kinks) for the theory, with the integer codes of the numba SGD kernels in
  :data:`ACTIVATION_CODES`; :func:`activation_reference` is the numpy reference the kernels are
  tested against.
* multi-index Hermite tables He_alpha(z) (probabilists').
"""

from __future__ import annotations

import functools
import itertools
import math
import re

import numpy as np
from scipy.special import erf


def softmax_rows(M) -> np.ndarray:
    """Row softmax along the last axis (numerically stable: the row maximum is subtracted)."""
    M = np.asarray(M, dtype=float)
    M = M - M.max(axis=-1, keepdims=True)
    E = np.exp(M)
    return E / E.sum(axis=-1, keepdims=True)


def attention_scores(z: np.ndarray) -> np.ndarray:
    """A = softmax_row(z z^T): z (N, L) -> (N, L, L)."""
    z = np.asarray(z, dtype=float)
    return softmax_rows(z[:, :, None] * z[:, None, :])


def attention_jac(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A (N, L, L) and dA (N, L, L, L) with dA[n, i, j, l] = dA_ij / dz_l.

    log A_ij = z_i z_j - log sum_k exp(z_i z_k), so
    dA_ij/dz_l = A_ij [ delta_il (z_j - mu_i) + z_i (delta_jl - A_il) ],  mu_i = sum_k A_ik z_k.
    """
    z = np.asarray(z, dtype=float)
    N, L = z.shape
    A = attention_scores(z)
    mu = np.einsum("nik,nk->ni", A, z)
    eye = np.eye(L)
    # term1[n,i,j,l] = delta_il (z_j - mu_i)
    t1 = eye[None, :, None, :] * (z[:, None, :] - mu[:, :, None])[:, :, :, None]
    # term2[n,i,j,l] = z_i (delta_jl - A_il)
    t2 = z[:, :, None, None] * (eye[None, None, :, :] - A[:, :, None, :])
    return A, A[..., None] * (t1 + t2)


def attention_trace_jac(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tr A (N,) and dTr A/dz (N, L) of A = softmax_row(z z^T), in O(N L^2) memory and time
    (:func:`attention_jac` builds the full (N, L, L, L) derivative: 16M numbers per call at
    L = 8 on 2^15 nodes).  From the formula of :func:`attention_jac` at j = i:

        dTr A/dz_l = A_ll (2 z_l - mu_l) - sum_i A_ii z_i A_il.
    """
    z = np.asarray(z, dtype=float)
    # softmax_row(z z^T) in place; the row maximum of z_i z_k is z_i max(z) or z_i min(z) (the
    # same floating-point product): no reduction over the short last axis, which dominated
    A = z[:, :, None] * z[:, None, :]
    A -= np.where(z >= 0, z * z.max(axis=1, keepdims=True), z * z.min(axis=1, keepdims=True))[
        :, :, None
    ]
    np.exp(A, out=A)
    A /= np.einsum("nij->ni", A)[:, :, None]
    diag = np.einsum("nii->ni", A)
    mu = np.einsum("nik,nk->ni", A, z)
    d = diag * (2.0 * z - mu) - np.einsum("ni,nil->nl", diag * z, A)
    return diag.sum(axis=1), d


# --------------------------------------------------------------------------- activations


def _relu(x):
    return np.maximum(x, 0.0)


def _relu_d(x):
    return (x > 0).astype(float)


def _sig(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


ACTIVATIONS = {
    "relu": (_relu, _relu_d, (0.0,)),
    "linear": (lambda x: x, lambda x: np.ones_like(x), ()),
    "tanh": (np.tanh, lambda x: 1.0 - np.tanh(x) ** 2, ()),
    "erf": (erf, lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-x * x), ()),
    "sigmoid": (_sig, lambda x: _sig(x) * (1.0 - _sig(x)), ()),
    "square": (lambda x: x * x, lambda x: 2.0 * x, ()),
    "he2": (lambda x: x * x - 1.0, lambda x: 2.0 * x, ()),
    "he3": (lambda x: x**3 - 3.0 * x, lambda x: 3.0 * x * x - 3.0, ()),
    "he4": (lambda x: x**4 - 6.0 * x * x + 3.0, lambda x: 4.0 * x**3 - 12.0 * x, ()),
    "abs": (np.abs, np.sign, (0.0,)),
}
# unit-norm Hermite activations He_k / sqrt(k!) and aliases (the simulator's names)
for _k, _c in ((2, math.sqrt(2.0)), (3, math.sqrt(6.0)), (4, math.sqrt(24.0))):
    _s, _ds, _kk = ACTIVATIONS[f"he{_k}"]
    ACTIVATIONS[f"he{_k}n"] = (
        (lambda x, s=_s, c=_c: s(x) / c),
        (lambda x, ds=_ds, c=_c: ds(x) / c),
        _kk,
    )
for _alias in ("identity", "id", "he1"):
    ACTIVATIONS[_alias] = ACTIVATIONS["linear"]


#: activation name -> integer code of the numba SGD kernels (``theory.ssi.sgd._kernels``)
ACTIVATION_CODES = {
    "linear": 0,
    "identity": 0,
    "id": 0,
    "he1": 0,
    "relu": 1,
    "tanh": 2,
    "erf": 3,
    "sigmoid": 4,
    "abs": 5,
    "square": 6,
    "he2": 7,
    "he3": 8,
    "he4": 9,
    "he2n": 10,  # He_2 / sqrt(2)  (unit-norm)
    "he3n": 11,  # He_3 / sqrt(6)
    "he4n": 12,  # He_4 / sqrt(24)
}
_CODE_NAMES = {c: n for n, c in reversed(ACTIVATION_CODES.items())}


#: each named activation written in the target language: what a user may write instead of the
#: name (``activation_code`` maps such an expression to the name's simulator kernel)
ACTIVATION_EXPRESSIONS = {
    "linear": "x",
    "relu": "relu(x)",
    "tanh": "tanh(x)",
    "erf": "erf(x)",
    "sigmoid": "sigmoid(x)",
    "abs": "abs(x)",
    "square": "x**2",
    "he2": "He2(x)",
    "he3": "He3(x)",
    "he4": "He4(x)",
    "he2n": "He2(x)/sqrt(2)",
    "he3n": "He3(x)/sqrt(6)",
    "he4n": "He4(x)/sqrt(24)",
}


def activation_key(name: str) -> str:
    """The canonical form of an activation: a known name in lower case, or the text of an
    expression in x (checked by ``theory.ssi.targets.parse_activation``; ValueError listing the
    names and the expression language otherwise)."""
    key = str(name).strip()
    if key.lower() in ACTIVATIONS:
        return key.lower()
    if not re.search(r"\bx\b", key):
        raise ValueError(
            f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)} or write an "
            "expression in x (e.g. 'x**2+x', 'tanh(2*x)', 'relu(x)-0.5')"
        )
    written_activation(key)
    return key


@functools.lru_cache(maxsize=64)
def written_activation(text: str):
    """(sigma, sigma', kinks, target) of an activation written as an expression in x: vectorised
    numpy functions of the target language's expression (``target``, a one-variable
    ``theory.ssi.targets.Target``) and its kinks (where sigma or sigma' jumps)."""
    import sympy as sp

    from theory.ssi.hermite import _kinks
    from theory.ssi.targets import parse_activation

    t = parse_activation(text)
    z1 = t.symbols[0]
    kinked = t.expr.atoms(sp.Abs, sp.sign, sp.Heaviside, sp.Max, sp.Min, sp.Piecewise)
    kinks = tuple(_kinks(t.expr, z1)) if kinked else ()

    def sigma(x):
        return t.func(np.atleast_1d(np.asarray(x, dtype=float)).ravel()).reshape(np.shape(x))

    def dsigma(x):
        u = np.atleast_1d(np.asarray(x, dtype=float)).ravel()
        return t.grad(u)[:, 0, 0].reshape(np.shape(x))

    return sigma, dsigma, kinks, t


def activation(name: str):
    """(sigma, sigma', kinks) of an activation: a name of :data:`ACTIVATIONS` (the fast path) or
    an expression in x (:func:`written_activation`); ValueError listing the known names."""
    key = activation_key(name)
    if key in ACTIVATIONS:
        return ACTIVATIONS[key]
    return written_activation(key)[:3]


#: the kernel code of an activation written as an expression that equals no named one: the SGD
#: kernels call its compiled sigma, sigma' (``theory.ssi.targets.activation_cfuncs``)
WRITTEN_CODE = 13


def activation_code(name: str) -> int:
    """The kernel code of an activation: a named one, or an expression equal to one of them
    (:data:`ACTIVATION_EXPRESSIONS`: 'x**2' runs the kernel of 'square'); any other expression
    in x: :data:`WRITTEN_CODE` (ValueError for what is neither)."""
    key = activation_key(name)
    if key in ACTIVATION_CODES:
        return ACTIVATION_CODES[key]
    named = _named_equal(key)
    return WRITTEN_CODE if named is None else ACTIVATION_CODES[named]


def kernel_activation(name: str) -> tuple:
    """(code, fv, fd): what the SGD kernels take for an activation (``theory.ssi.sgd._kernels``):
    its code and, for a written one (:data:`WRITTEN_CODE`), sigma and sigma' compiled to numba
    C callbacks (once per expression and process); the never-called ``NO_CALLBACKS`` for a
    name, whose kernel path is unchanged.  ValueError when the expression cannot be compiled."""
    from theory.ssi.sgd._kernels import NO_CALLBACKS
    from theory.ssi.targets import activation_cfuncs

    code = activation_code(name)
    if code != WRITTEN_CODE:
        return (code, *NO_CALLBACKS)
    return (code, *activation_cfuncs(activation_key(name)))


@functools.lru_cache(maxsize=64)
def _named_equal(text: str) -> str | None:
    """The named activation equal to the expression ``text`` (values at a few points, then
    sympy's simplification), or None."""
    import sympy as sp

    expr = written_activation(text)[3].expr
    u = np.array([-2.3, -1.1, -0.4, 0.0, 0.3, 0.9, 1.7, 2.9])
    for name, written in ACTIVATION_EXPRESSIONS.items():
        if np.allclose(ACTIVATIONS[name][0](u), written_activation(text)[0](u), rtol=1e-12):
            if sp.simplify(expr - written_activation(written)[3].expr) == 0:
                return name
    return None


def activation_reference(code, s):
    """(sigma(s), sigma'(s)) for a kernel activation code, or an activation's name or expression
    (a str): the numpy reference of ``theory.ssi.sgd._kernels.act_value`` / ``act_deriv``."""
    if isinstance(code, str):
        sig, dsig, _ = activation(code)
    else:
        sig, dsig, _ = ACTIVATIONS[_CODE_NAMES[int(code)]]
    s = np.asarray(s, dtype=float)
    return sig(s), dsig(s)


# --------------------------------------------------------------------------- Hermite tables


def he_table(x: np.ndarray, kmax: int) -> np.ndarray:
    """He_0..He_kmax at x: (N,) -> (kmax+1, N) (three-term recurrence)."""
    x = np.asarray(x, dtype=float)
    out = np.empty((kmax + 1,) + x.shape)
    out[0] = 1.0
    if kmax >= 1:
        out[1] = x
    for k in range(1, kmax):
        out[k + 1] = x * out[k] - k * out[k - 1]
    return out


def he_multi(z: np.ndarray, alphas: list[tuple]) -> np.ndarray:
    """He_alpha(z) for a list of multi-indices: z (N, L) -> (N, len(alphas))."""
    z = np.asarray(z, dtype=float)
    if not alphas:
        return np.ones((z.shape[0], 0))
    kmax = max(max(a) for a in alphas)
    tabs = [he_table(z[:, l], kmax) for l in range(z.shape[1])]
    out = np.ones((z.shape[0], len(alphas)))
    for j, a in enumerate(alphas):
        for l, q in enumerate(a):
            if q:
                out[:, j] *= tabs[l][q]
    return out


def multi_indices(L: int, kmax: int) -> list[tuple]:
    """All alpha in N^L with |alpha| <= kmax, ordered by total degree."""
    out = []
    for k in range(kmax + 1):
        for c in itertools.combinations_with_replacement(range(L), k):
            a = [0] * L
            for i in c:
                a[i] += 1
            out.append(tuple(a))
    return out
