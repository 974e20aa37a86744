"""Hermite tensors, SIE and gains (docs/ssi.md sections 5 and 7).

Independent references: the linearisation formula of Hermite products, Stein's lemma closed
forms of the Hermite coefficients of relu/|z|/sign/exp/erf, mpmath quadrature for tanh, and a
tensor Gauss-Hermite projection (exact for polynomials of the degrees used) for Parseval and the
hypothesis-generated polynomials.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.ssi import (
    SIEReport,
    analyze,
    hermite_tensors,
    op_norm,
    parse_target,
    sie,
)

PHI0 = 1.0 / math.sqrt(2.0 * math.pi)


def he0(n: int) -> float:
    """He_n(0) = (-1)^(n/2) (n-1)!! for even n, 0 for odd n."""
    if n % 2:
        return 0.0
    return (-1) ** (n // 2) * float(math.prod(range(n - 1, 0, -2)))


def hermite_tensor_at(z: np.ndarray, k: int) -> np.ndarray:
    """Multivariate Hermite tensor H_k(z) (shape (L,)*k) at one point z."""
    L = z.size
    H = np.empty((L,) * k)
    He = np.polynomial.hermite_e.hermevander(z, k)  # (L, k+1)
    for idx in itertools.product(range(L), repeat=k):
        alpha = np.bincount(np.array(idx, dtype=int), minlength=L) if k else np.zeros(L, int)
        H[idx] = np.prod([He[l, alpha[l]] for l in range(L)])
    return H


def gh_projection(f, L: int, alpha, n: int = 12) -> float:
    """E[f He_alpha] by tensor Gauss-Hermite (exact for polynomial f of degree <= 2n-1-|alpha|)."""
    from theory.gauss import gh_tensor

    nodes, w = gh_tensor(n, L)
    He = [np.polynomial.hermite_e.hermeval(nodes[:, l], [0] * a + [1]) for l, a in enumerate(alpha)]
    return float(np.sum(w * f(nodes) * np.prod(He, axis=0)))


# --------------------------------------------------------------------------- parsing


def test_parse_target_basic():
    t = parse_target("He2(z1)+He2(z2)")
    assert t.L == 2 and t.is_polynomial
    assert [s.name for s in t.symbols] == ["z1", "z2"]
    z = np.array([[0.3, -1.2], [2.0, 0.0]])
    np.testing.assert_allclose(t.func(z), (z**2 - 1).sum(axis=1))
    assert parse_target("z1", L=3).L == 3
    assert parse_target(sp.Symbol("z2") ** 2).L == 2
    t = parse_target("He(3, z1) + relu(z2)")
    np.testing.assert_allclose(t.func(np.array([[2.0, -1.0]])), [8 - 6 + 0.0])
    t = parse_target("softmax(1, z1*z1, z1*z2)")
    z = np.array([[1.0, 2.0], [0.5, -3.0]])
    ref = np.exp(z[:, 0] ** 2) / (np.exp(z[:, 0] ** 2) + np.exp(z[:, 0] * z[:, 1]))
    np.testing.assert_allclose(t.func(z), ref, rtol=1e-14)
    # overflow-safe form: a huge logit gives 0 or 1, never nan
    np.testing.assert_allclose(t.func(np.array([[0.0, 0.0], [30.0, -30.0]])), [0.5, 1.0])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("foo(z1)", "unknown function 'foo'"),
        ("z1 +", "cannot parse"),
        ("x + z1", "unknown variable 'x'"),
        ("z0", "unknown variable 'z0'"),
        ("", "empty"),
        ("__import__('os')", "forbidden"),
        ("softmax(3, z1, z2)", "1-based index"),
        ("He2(z1, z2)", "exactly one argument"),
        ("He(1.5, z1)", "non-negative integer"),
        ("z1 z2", "cannot parse"),
    ],
)
def test_parse_errors(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_target(text)


def test_parse_variable_outside_L():
    with pytest.raises(ValueError, match="z3 but L = 2"):
        parse_target("z1*z3", L=2)


def test_njit_func_matches_numpy():
    t = parse_target(
        "tanh(z1)*z2 + relu(z1 - z2) + sign(z2) + Heaviside(z1) + erf(z2)/2 + "
        "softmax(2, z1*z1, z1*z2) + He3(z2)"
    )
    rng = np.random.default_rng(0)
    z = rng.standard_normal((50, 2))
    z[0] = [0.0, 0.0]  # sign(0) = 0, Heaviside(0) = 1/2 in both
    f = t.njit_func
    np.testing.assert_allclose([f(zz) for zz in z], t.func(z), rtol=1e-13, atol=1e-14)


# --------------------------------------------------------------------------- worked examples


@pytest.mark.parametrize(
    "expr, L, k, learnable",
    [
        ("z1 + z2 + z3 + z4", 4, 1, True),
        ("z1*z2", 2, 2, True),
        ("He2(z1)*He1(z2)*He3(z3)", 3, 6, True),
        ("He2(z1) + He2(z2) + He2(z3)", 3, 2, True),
        ("z1 - z2", 2, 1, False),
        ("z1**2 - z2**2", 2, 2, False),
    ],
)
def test_worked_examples_table(expr, L, k, learnable):
    rep = analyze(expr)
    assert isinstance(rep, SIEReport)
    assert rep.L == L and rep.sie == k and rep.exact
    assert rep.tied_learnable is learnable
    if not learnable:
        assert rep.tied_contraction == 0 and rep.gain_optimal == 0 and rep.gain_equal == 0
        assert rep.gain_optimal_published == 0 and rep.gain_equal_published == 0


@pytest.mark.parametrize("L", [1, 2, 3, 5])
def test_sum_he2_gain_L_squared(L):
    rep = analyze(" + ".join(f"He2(z{i + 1})" for i in range(L)))
    np.testing.assert_array_equal(rep.leading_tensor, np.eye(L))  # C_2 = I_L
    assert rep.tied_contraction == L and rep.op_norm == 1.0 and rep.op_norm_exact
    # published formula L^2 at optimal step sizes; this package (per-row noise K/L): L
    assert rep.gain_optimal_published == pytest.approx(L**2)
    assert rep.gain_equal_published == pytest.approx(L)
    assert rep.gain_optimal == pytest.approx(L) and rep.gain_equal == pytest.approx(L)
    assert rep.even_sie == 2


@pytest.mark.parametrize("L", [1, 2, 4])
def test_sum_z_gain(L):
    rep = analyze(" + ".join(f"z{i + 1}" for i in range(L)))
    # contraction L, op norm sqrt(L): published (sqrt L)^2 * L = L^2 at optimal, sqrt(L) *
    # sqrt(L) = L equal; this package: ratio^2 = L at optimal, L^(1/2) ratio = L equal
    assert rep.op_norm == pytest.approx(math.sqrt(L))
    assert rep.gain_optimal_published == pytest.approx(L**2)
    assert rep.gain_equal_published == pytest.approx(L)
    assert rep.gain_optimal == pytest.approx(L) and rep.gain_equal == pytest.approx(L)
    assert rep.even_sie is None  # odd target: attention without PE sees nothing
    assert rep.information_exponent == (1 if L == 1 else None)


def test_positional_lowering_example():
    # the paper's kappa 4 -> 2 example 4/3 + He4(z1) + 2 He4(z2): SIE 4, even, C_4 diagonal (1, 2)
    rep = analyze("4/3 + He4(z1) + 2*He4(z2)")
    assert rep.sie == 4 and rep.even_sie == 4
    assert rep.tied_contraction == 3 and rep.op_norm == 2 and rep.op_norm_exact
    assert rep.gain_optimal_published == pytest.approx(9 / 4)
    assert rep.gain_equal_published == pytest.approx(1.5)
    # this package: |ratio| L^(1 - k/2) = 1.5 / 2, ratio^2 L^(1 - k) = (9/4) / 8
    assert rep.gain_equal == pytest.approx(0.75) and rep.gain_optimal == pytest.approx(9 / 32)


def test_constant_target():
    assert sie("3") is None
    rep = analyze("7/2")
    assert rep.sie is None and "constant" in rep.message
    assert analyze("He2(z1) - z1**2 + 1").sie is None  # identically zero after expansion


def test_sie_beyond_max_order_is_searched_for_polynomials():
    assert sie("He9(z1)", max_order=3) == 9


def test_power_of_a_sum_is_expanded_by_polynomial_arithmetic():
    """(z1 + ... + z6)**12 (6188 monomials, at the size limits) took ~37 s CPU, ~90 % in sympy's
    expression expansion; the polynomial is now built by Poly arithmetic.  Independent check:
    g = s**12 is a function of s = 1.z ~ N(0, 6), so C_2[i][j] = E[g''(s)]/2! = 12*11*E[s^10]/2
    with E[s^10] = 9!! 6^5, and C_1 = 0 (g is even); the CPU bound (10 s) is ~4x what it takes
    on a loaded 2-core machine, and far below the old cost."""
    import time

    t0 = time.process_time()
    rep = analyze("(z1+z2+z3+z4+z5+z6)**12")
    cpu = time.process_time() - t0
    assert rep.sie == 2
    c2 = 12 * 11 * 945 * 6**5 // 2
    assert np.asarray(rep.leading_tensor) == pytest.approx(np.full((6, 6), c2), rel=1e-12)
    assert cpu < 10, cpu


def test_even_sie_odd_then_even():
    rep = analyze("z1 + He4(z2)")
    assert rep.sie == 1 and rep.even_sie == 4


# --------------------------------------------------------------------------- Hermite algebra


@pytest.mark.parametrize("j, k", [(1, 1), (2, 3), (3, 3), (4, 2)])
def test_products_same_variable_linearisation(j, k):
    # He_j He_k = sum_r C(j,r) C(k,r) r! He_{j+k-2r}: a_n for L = 1 is C_n itself
    _h = hermite_tensors(f"He{j}(z1)*He{k}(z1)", max_order=j + k)
    Cs, exact = _h.tensors, _h.exact
    assert exact
    ref = np.zeros(j + k + 1)
    for r in range(min(j, k) + 1):
        ref[j + k - 2 * r] = math.comb(j, r) * math.comb(k, r) * math.factorial(r)
    # C_n (L = 1) = E[g He_n]/n! = a_n
    np.testing.assert_allclose([float(np.ravel(C)[0]) for C in Cs], ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("a, b", [(1, 2), (2, 2), (3, 1)])
def test_products_distinct_variables(a, b):
    _h = hermite_tensors(f"He{a}(z1)*He{b}(z2)", max_order=a + b)
    Cs, _ = _h.tensors, _h.exact
    C = Cs[a + b]
    for k, Ck in enumerate(Cs):
        if k != a + b:
            assert np.all(Ck == 0)
    # every index tuple with a ones and b twos has a! b! / (a+b)!
    idx = (0,) * a + (1,) * b
    for perm in set(itertools.permutations(idx)):
        assert C[perm] == pytest.approx(
            math.factorial(a) * math.factorial(b) / math.factorial(a + b), rel=1e-14
        )
    assert np.count_nonzero(C) == math.comb(a + b, a)


def test_reconstruction_and_parseval_known_poly():
    expr = "z1**3*z2 - 2*z1*z2**2 + z3**4 - z1 + 5"
    t = parse_target(expr)
    _h = hermite_tensors(t, max_order=4)
    Cs, exact = _h.tensors, _h.exact
    assert exact
    rng = np.random.default_rng(1)
    for z in rng.standard_normal((4, 3)):
        recon = sum(float(np.sum(C * hermite_tensor_at(z, k))) for k, C in enumerate(Cs))
        assert recon == pytest.approx(float(t.func(z[None])[0]), rel=1e-12)
    eg2 = gh_projection(lambda x: t.func(x) ** 2, 3, (0, 0, 0), n=6)
    pars = sum(math.factorial(k) * float(np.sum(C**2)) for k, C in enumerate(Cs))
    assert pars == pytest.approx(eg2, rel=1e-12)


def _cayley(A):
    """Rational orthogonal matrix (I - A)(I + A)^{-1} from a rational skew matrix."""
    n = A.shape[0]
    return (sp.eye(n) - A) * (sp.eye(n) + A).inv()


def test_rotation_covariance():
    # C_k(g o R)[i..] = sum_j C_k(g)[j..] prod_m R[j_m, i_m]   for g(Rz), R orthogonal
    A = sp.Matrix(
        [
            [0, sp.Rational(1, 2), -1],
            [-sp.Rational(1, 2), 0, sp.Rational(1, 3)],
            [1, -sp.Rational(1, 3), 0],
        ]
    )
    R = _cayley(A)
    assert sp.simplify(R.T * R) == sp.eye(3)
    zs = sp.symbols("z1:4", real=True)
    z = sp.Matrix(zs)
    g = zs[0] ** 2 * zs[1] - 3 * zs[2] ** 3 + zs[0] * zs[2] + sp.hermite_prob(4, zs[1]) + zs[0]
    Rz = R * z
    g_rot = g.xreplace({zs[i]: Rz[i] for i in range(3)})
    _h = hermite_tensors(g, max_order=4, L=3)
    Cs, _ = _h.tensors, _h.exact
    _h = hermite_tensors(g_rot, max_order=4, L=3)
    Cr, exact = _h.tensors, _h.exact
    assert exact
    Rn = np.array(R.tolist(), dtype=float)
    for k in range(5):
        ref = Cs[k]
        for _ in range(k):  # contract the first axis with R, it moves to the end
            ref = np.tensordot(ref, Rn, axes=(0, 0))
        np.testing.assert_allclose(Cr[k], ref, rtol=0, atol=1e-12)
    # the SIE and the op norm are rotation invariant
    a, b = analyze(g, L=3), analyze(g_rot, L=3)
    assert a.sie == b.sie == 1
    assert a.op_norm == pytest.approx(b.op_norm, rel=1e-12)


# --------------------------------------------------------------------------- hypothesis


@st.composite
def polynomials(draw):
    L = draw(st.integers(1, 3))
    n_terms = draw(st.integers(1, 5))
    terms = []
    for _ in range(n_terms):
        c = draw(st.integers(-5, 5))
        powers = [draw(st.integers(0, 3)) for _ in range(L)]
        terms.append((c, powers))
    return L, terms


@settings(max_examples=25, deadline=None)
@given(polynomials())
def test_random_polynomials_parseval_and_projection(data):
    L, terms = data
    zs = sp.symbols(f"z1:{L + 1}", real=True)
    g = sum(c * sp.Mul(*[z**p for z, p in zip(zs, pw)]) for c, pw in terms)
    t = parse_target(g, L=L)
    K = 3 * L
    _h = hermite_tensors(t, max_order=K)
    Cs, exact = _h.tensors, _h.exact
    assert exact
    # each C_k against a Gauss-Hermite projection E[g He_alpha]/k! (exact: degree <= 3L + 3L)
    n = 3 * L + 1
    for k in range(1, min(K, 4) + 1):
        for idx in itertools.combinations_with_replacement(range(L), k):
            alpha = tuple(np.bincount(np.array(idx), minlength=L))
            ref = gh_projection(t.func, L, alpha, n=n) / math.factorial(k)
            assert Cs[k][idx] == pytest.approx(ref, abs=1e-9 * (1 + abs(ref)))
    # Parseval E[g^2] = sum_k k! ||C_k||^2 (degree of g <= 3L = K, so the sum is complete)
    eg2 = gh_projection(lambda x: t.func(x) ** 2, L, (0,) * L, n=n)
    pars = sum(math.factorial(k) * float(np.sum(C**2)) for k, C in enumerate(Cs))
    assert pars == pytest.approx(eg2, rel=1e-10, abs=1e-10)
    # SIE = lowest order with a non-zero tensor
    nz = [k for k in range(1, K + 1) if np.any(Cs[k] != 0)]
    assert sie(t) == (nz[0] if nz else None)


# --------------------------------------------------------------------------- non-polynomials


def _c1d(expr: str, K: int):
    _h = hermite_tensors(expr, max_order=K)
    Cs, exact = _h.tensors, _h.exact
    return np.array([float(np.ravel(C)[0]) for C in Cs]), exact


def test_relu_closed_form():
    # Stein: E[relu He_k] = phi(0) He_{k-2}(0) (k >= 2); a_0 = phi(0), a_1 = 1/2
    a, exact = _c1d("relu(z1)", 8)
    assert exact  # piecewise polynomial -> exact sympy
    ref = [PHI0, 0.5] + [PHI0 * he0(k - 2) / math.factorial(k) for k in range(2, 9)]
    np.testing.assert_allclose(a, ref, rtol=1e-14, atol=1e-16)
    rep = analyze("relu(z1)")
    assert rep.sie == 1 and rep.even_sie == 2 and rep.information_exponent == 1


def test_abs_and_sign_closed_forms():
    a, exact = _c1d("Abs(z1)", 8)
    assert exact
    ref = [2 * PHI0, 0.0] + [2 * PHI0 * he0(k - 2) / math.factorial(k) for k in range(2, 9)]
    np.testing.assert_allclose(a, ref, rtol=1e-14, atol=1e-16)
    assert analyze("abs(z1)").sie == 2
    a, exact = _c1d("sign(z1)", 7)
    assert exact
    ref = [0.0] + [2 * PHI0 * he0(k - 1) / math.factorial(k) for k in range(1, 8)]
    np.testing.assert_allclose(a, ref, rtol=1e-14, atol=1e-16)


def test_relu_shifted_kink_exact():
    # relu(z - 1/2): a_0 = phi(c) - c (1 - Phi(c)), a_1 = 1 - Phi(c), a_k = phi(c) He_{k-2}(c)/k!
    c = 0.5
    a, exact = _c1d("relu(z1 - 1/2)", 5)
    assert exact
    phi = math.exp(-c * c / 2) * PHI0
    Phi = 0.5 * (1 + math.erf(c / math.sqrt(2)))
    he = np.polynomial.hermite_e.hermeval
    ref = [phi - c * (1 - Phi), 1 - Phi] + [
        phi * he(c, [0] * (k - 2) + [1]) / math.factorial(k) for k in range(2, 6)
    ]
    np.testing.assert_allclose(a, ref, rtol=1e-13, atol=1e-15)


def test_tanh_against_mpmath():
    a, exact = _c1d("tanh(z1)", 7)
    assert not exact
    mpmath.mp.dps = 30
    for k in range(8):
        hek = sp.lambdify(sp.Symbol("x"), sp.hermite_prob(k, sp.Symbol("x")), "mpmath")
        ref = mpmath.quad(
            lambda x, hek=hek: mpmath.tanh(x) * hek(x) * mpmath.npdf(x),
            [-mpmath.inf, 0, mpmath.inf],
        ) / math.factorial(k)
        assert a[k] == pytest.approx(float(ref), abs=1e-10)
    rep = analyze("tanh(z1)")
    assert rep.sie == 1 and rep.even_sie is None and not rep.exact and rep.tolerance < 1e-9


def test_exp_and_erf_closed_forms():
    a, exact = _c1d("exp(z1)", 6)  # E[e^z He_k] = e^{1/2}  (exact: Gaussian shift)
    assert exact
    np.testing.assert_allclose(a, [math.exp(0.5) / math.factorial(k) for k in range(7)], rtol=1e-14)
    # cos(c z): E[cos(cz) He_k] = Re(i^k) c^k e^{-c^2/2}; sin: Im(i^k) c^k e^{-c^2/2}
    c = 1.5
    a, exact = _c1d("cos(3*z1/2) + sin(3*z1/2)", 6)
    assert exact
    ref = [
        ((1j**k).real + (1j**k).imag) * c**k * math.exp(-c * c / 2) / math.factorial(k)
        for k in range(7)
    ]
    np.testing.assert_allclose(a, ref, rtol=1e-13, atol=1e-16)
    a, _ = _c1d("erf(2*z1)", 3)  # E[erf(c z) z] = 2c / sqrt(pi (1 + 2c^2))
    assert a[1] == pytest.approx(4 / math.sqrt(math.pi * 9), rel=1e-11)
    assert abs(a[0]) < 1e-12 and abs(a[2]) < 1e-12


def test_ridge_relu_exact_multivariate():
    # relu(z1 + z2) = relu(sqrt2 s): C_k = b_k u^(x)k, u = (1,1)/sqrt2, b_k = sqrt2 * relu coeffs
    rep = analyze("relu(z1 + z2)")
    assert rep.exact and rep.sie == 1
    np.testing.assert_allclose(rep.leading_tensor, [0.5, 0.5], rtol=1e-14)
    _h = hermite_tensors("relu(z1 + z2)", max_order=2)
    Cs, _ = _h.tensors, _h.exact
    b2 = math.sqrt(2) * PHI0 / 2
    np.testing.assert_allclose(Cs[2], b2 * np.full((2, 2), 0.5), rtol=1e-14)
    # Max(z1, z2) = z1 + relu(z2 - z1): C_1 = (1/2, 1/2);
    # C_2 = sqrt2 phi0/2 * (u u^T), u = (-1, 1)/sqrt2
    _h = hermite_tensors("Max(z1, z2)", max_order=2)
    Cs, exact = _h.tensors, _h.exact
    assert exact
    np.testing.assert_allclose(Cs[1], [0.5, 0.5], rtol=1e-14)
    np.testing.assert_allclose(Cs[2], b2 * np.array([[0.5, -0.5], [-0.5, 0.5]]), rtol=1e-14)
    assert analyze("Max(z1, z2)").tied_contraction == pytest.approx(1.0)


def test_nonseparable_gauss_hermite_against_mc():
    # tanh(z1 z2) + softmax entry: GH coefficients against a large independent MC projection
    from theory.gauss import expect

    expr = "softmax(1, z1*z1, z1*z2)"
    t = parse_target(expr)
    _h = hermite_tensors(t, max_order=2)
    Cs, exact = _h.tensors, _h.exact
    assert not exact
    e = expect(
        lambda z: (
            t.func(z)[:, None]
            * np.stack([z[:, 0], z[:, 1], (z[:, 0] ** 2 - 1) / 2, z[:, 0] * z[:, 1] / 2], axis=1)
        ),
        dim=2,
        method="mc",
        n=400_000,
        rng=3,
    )
    ref = np.asarray(e.value)
    err = np.asarray(e.error)
    got = np.array([Cs[1][0], Cs[1][1], Cs[2][0, 0], Cs[2][0, 1]])
    # 5 standard errors of the MC reference
    assert np.all(np.abs(got - ref) < 5 * err + 1e-12), (got, ref, err)


def test_divergent_and_singular_targets():
    for text in ("exp(z1**2)", "exp(z1**2/2)", "log(z1)", "1/z1"):
        with pytest.raises(ValueError):
            analyze(text)


# --------------------------------------------------------------------------- op norm


def test_op_norm_orders():
    rng = np.random.default_rng(0)
    v = rng.standard_normal(5)
    r = op_norm(v)
    assert r.value == pytest.approx(np.linalg.norm(v)) and r.exact is True
    M = rng.standard_normal((4, 4))
    M = M + M.T
    r = op_norm(M)
    val, ex = r.value, r.exact
    assert ex and val == pytest.approx(np.max(np.abs(np.linalg.eigvalsh(M))))
    # rank-one symmetric tensor lam u^(x)3: op norm |lam|, certified by the unfolding bound
    u = rng.standard_normal(4)
    u /= np.linalg.norm(u)
    T = -2.5 * np.einsum("i,j,k->ijk", u, u, u)
    r = op_norm(T)
    val, ex = r.value, r.exact
    assert ex and val == pytest.approx(2.5, rel=1e-12)


def test_op_norm_estimate_against_brute_force():
    # z1 z2 z3: C_3 = sym(e1 e2 e3)/... ; max_u 6 * (1/6) u1 u2 u3 = 3^{-3/2}
    rep = analyze("z1*z2*z3")
    assert rep.op_norm == pytest.approx(3**-1.5, rel=1e-9)
    assert not rep.op_norm_exact  # labelled an estimate
    # random symmetric 3-tensor in 2-D: compare with a dense scan of the circle
    rng = np.random.default_rng(5)
    A = rng.standard_normal((2, 2, 2))
    T = sum(np.transpose(A, p) for p in itertools.permutations(range(3))) / 6
    th = np.linspace(0, 2 * np.pi, 200001)
    U = np.stack([np.cos(th), np.sin(th)], axis=1)
    brute = np.max(np.abs(np.einsum("ijk,ni,nj,nk->n", T, U, U, U)))
    assert op_norm(T).value == pytest.approx(brute, rel=1e-8)


# --------------------------------------------------------------------------- symbolic vs numeric


@pytest.mark.parametrize(
    "expr",
    [
        "Max(x, 0)",
        "Abs(x)",
        "sign(x)",
        "Abs(x - 1/3)",
        "Max(x**2 - 1, 0)",
        "Min(Abs(x), 1)",
        "Max(x, 0)*Max(1 - x, 0)",
    ],
)
def test_numerical_path_agrees_with_exact_piecewise(expr):
    # the adaptive-quadrature path (used for non-piecewise-polynomial functions), forced on
    # piecewise polynomials, against their exact sympy coefficients; tolerance: 1e-10 absolute
    from theory.ssi.hermite import _univariate_exact, _univariate_numeric

    x = sp.Symbol("x", real=True)
    h = sp.sympify(expr, locals={"x": x})
    exact = np.array([float(v) for v in _univariate_exact(h, x, 8)])
    num, err = _univariate_numeric(h, x, 8, 1e-11)
    assert err < 1e-9
    np.testing.assert_allclose(num, exact, rtol=0, atol=1e-10)


def test_gauss_hermite_block_agrees_with_separable_quadrature():
    # tanh(z1) tanh(z2 + 1/2) via 2-D tensor Gauss-Hermite vs the product of 1-D quadratures
    from theory.ssi.hermite import _block_gh, _univariate_numeric

    z1, z2 = sp.symbols("z1 z2", real=True)
    K = 4
    d, diff, conv, _ = _block_gh(sp.tanh(z1) * sp.tanh(z2 + sp.Rational(1, 2)), [z1, z2], K, 1e-10)
    assert conv and diff < 1e-9
    a, _ = _univariate_numeric(sp.tanh(z1), z1, K, 1e-12)
    b, _ = _univariate_numeric(sp.tanh(z2 + sp.Rational(1, 2)), z2, K, 1e-12)
    for (i, j), v in d.items():
        assert v == pytest.approx(a[i] * b[j], abs=1e-9)


def test_ridge_numeric_matches_gauss_hermite():
    # tanh(z1 + 2 z2) is handled as a ridge function (1-D quadrature in u.z); compare with the
    # 2-D Gauss-Hermite projection of the same function
    from theory.ssi.hermite import _block_gh

    z1, z2 = sp.symbols("z1 z2", real=True)
    h = hermite_tensors(sp.tanh(z1 + 2 * z2), max_order=3, L=2)
    Cs, exact = h.tensors, h.exact
    assert not exact
    d, diff, conv, _ = _block_gh(sp.tanh(z1 + 2 * z2), [z1, z2], 3, 1e-9)
    for alpha, v in d.items():
        k = sum(alpha)
        idx = (0,) * alpha[0] + (1,) * alpha[1]
        af = math.factorial(alpha[0]) * math.factorial(alpha[1])
        # C_k[idx] = a_alpha alpha!/k!; the GH result carries its own convergence error
        assert Cs[k][idx] == pytest.approx(v * af / math.factorial(k), abs=max(10 * diff, 1e-9))


def test_tied_drift_normalisation_identity():
    # the identity behind tied_contraction and gain_equal: for the tied pre-activation
    # s = sum_l z_l / sqrt(L), z = m z* + sqrt(1-m^2) eta,
    #   E[g(z*) He_k(s)] = k! m^k L^(-k/2) (C_k x 1)
    # checked by an exact 4-D Gauss-Hermite rule (polynomial integrand) for L = 2
    from theory.gauss import expect

    expr = "He3(z1) - 2*z1*z2**2 + z1*z2 + 0.5*z2"
    t = parse_target(expr)
    Cs = hermite_tensors(t, max_order=3).tensors
    m, L = 0.6, 2
    cov = np.block([[np.eye(2), m * np.eye(2)], [m * np.eye(2), np.eye(2)]])
    he = np.polynomial.hermite_e.hermeval
    for k in (1, 2, 3):
        f = lambda x, k=k: t.func(x[:, :2]) * he(x[:, 2:].sum(axis=1) / math.sqrt(L), [0] * k + [1])
        val = expect(f, None, cov, method="gh", n=6).value
        ref = math.factorial(k) * m**k * L ** (-k / 2) * float(np.sum(Cs[k]))
        assert val == pytest.approx(ref, rel=1e-10, abs=1e-12)


def test_gain_drift_fields():
    rep = analyze("He3(z1) + He3(z2) + He3(z3) + He3(z4)")
    # published formula: (4/1)^2 and 4; this package: the drift ratio L^(1-3/2) * 4 = 2 at
    # equal steps and its square divided by L (the untied row's noise K/L) = 1 at optimal steps
    assert rep.gain_optimal_published == pytest.approx(16)
    assert rep.gain_equal_published == pytest.approx(4)
    assert rep.gain_equal == pytest.approx(2) and rep.gain_optimal == pytest.approx(1)
    rep = analyze("He2(z1) + He2(z2) + He2(z3)")
    assert rep.gain_equal == pytest.approx(rep.gain_equal_published)
    assert rep.gain_optimal == pytest.approx(rep.gain_optimal_published / 3)


def test_kinks_of_products_are_exact():
    # relu(z1 z2) = (z1 z2 + |z1| |z2|)/2: C_2 = [[1/(2 pi), 1/4], [1/4, 1/(2 pi)]]
    # (E|z| = sqrt(2/pi), E[|z| He_2]/2 = phi(0)); sign(z1 z2) = sign(z1) sign(z2): C_2
    # off-diagonal (2/pi)/2
    rep = analyze("relu(z1*z2)")
    assert rep.exact and rep.sie == 2
    ref = np.array([[1 / (2 * np.pi), 0.25], [0.25, 1 / (2 * np.pi)]])
    np.testing.assert_allclose(rep.leading_tensor, ref, rtol=1e-14)
    _h = hermite_tensors("sign(z1*z2)", max_order=2)
    Cs, exact = _h.tensors, _h.exact
    assert exact
    np.testing.assert_allclose(Cs[2], [[0, 1 / np.pi], [1 / np.pi, 0]], rtol=1e-14, atol=1e-16)
    assert np.all(Cs[1] == 0) and float(Cs[0]) == 0


def test_sie_beyond_max_order_warns():
    # He7(z1) tanh(z2) has SIE 8 (tanh is odd: its first coefficient is order 1)
    with pytest.warns(RuntimeWarning, match="exceeds max_order"):
        assert sie("He7(z1)*tanh(z2)", max_order=4) is None
    assert sie("He7(z1)*tanh(z2)", max_order=8) == 8
    rep = analyze("He7(z1)*tanh(z2)", max_order=4)
    assert rep.sie is None and "raise --max-order" in rep.message


def test_axis_aligned_kinks_split_rule_against_mc():
    # relu(z2 + 1/2) * softmax entry: kink at z2 = -1/2 only -> split Gauss-Legendre rule in z2,
    # Gauss-Hermite in z3; converges to the tolerance; checked against MC (5 standard errors)
    from theory.gauss import expect

    t = parse_target("relu(softmax(1, z3, z2)*(z2 + 1/2))")
    rep = analyze(t, max_order=2)
    assert rep.status == "ok" and rep.tolerance < 1e-8 and rep.sie == 1
    e = expect(lambda z: t.func(z)[:, None] * z[:, 1:], dim=3, method="mc", n=400_000, rng=5)
    got = np.asarray(rep.leading_tensor)[1:]
    assert np.all(np.abs(got - e.value) < 5 * np.asarray(e.error)), (got, e.value, e.error)
    assert rep.leading_tensor[0] == 0.0  # z1 absent


def test_non_integrable_coefficients_raise():
    # E_z2[exp(-z1 z2)] = exp(z1^2/2): the z1-integral diverges
    with pytest.raises(ValueError, match="does not converge"):
        analyze("sign(z1)*exp(-z1*z2)")


@pytest.mark.slow
def test_sie_figure_hook(tmp_path):
    from theory.ssi.figures.sie import FIGURES

    out = FIGURES["sie-gains"](tmp_path, True)
    assert all((tmp_path / p).exists() or __import__("os").path.exists(p) for p in out["files"])
    nums = {d["name"]: d["value"] for d in out["numbers"]}
    assert nums["gain_optimal sum He2 L=6"] == pytest.approx(6)
    assert nums["gain_optimal_published sum He2 L=6"] == pytest.approx(36)
    assert nums["gain_optimal z1-z2"] == 0


def test_hermite_energy_is_parseval():
    # k! ||C_k||^2 per order sums to E[g^2] (exact 2-D Gauss-Hermite reference)
    t = parse_target("He2(z1) + 2*z1*z2 + 3 - z2**3")
    rep = analyze(t)
    eg2 = gh_projection(lambda x: t.func(x) ** 2, 2, (0, 0), n=6)
    assert sum(rep.hermite_energy) == pytest.approx(eg2, rel=1e-12)
    assert rep.hermite_energy[0] == pytest.approx(9.0) and rep.hermite_energy[2] == pytest.approx(6)
