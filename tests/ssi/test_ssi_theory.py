"""Population risk, derivatives, K, flatness and the phase-diagram criteria of theory.ssi, checked
against closed forms and against independent numerical methods."""

import math

import numpy as np
import pytest

from theory import ssi
from theory.ssi._kernels import attention_jac, attention_scores, attention_trace_jac
from theory.ssi.targets import positional_weight

SQ2PI = math.sqrt(2 * math.pi)


def test_attention_jacobian_matches_finite_differences():
    z = np.random.default_rng(0).standard_normal((5, 3)) * 1.5
    A, dA = attention_jac(z)
    assert np.allclose(A.sum(axis=2), 1.0)
    h = 1e-6
    for l in range(3):
        zp, zm = z.copy(), z.copy()
        zp[:, l] += h
        zm[:, l] -= h
        fd = (attention_scores(zp) - attention_scores(zm)) / (2 * h)
        # central difference error O(h^2 * third derivative) + roundoff 1e-16/h
        assert np.allclose(fd, dA[..., l], atol=1e-8)


@pytest.mark.parametrize("L", [1, 2, 5, 8])
def test_trace_attention_kernel_matches_finite_differences_and_the_full_jacobian(L):
    """The O(N L^2) trace kernel (what made the L = 7-8 ODE of the robustness sweep 10x
    cheaper) against central differences of Tr softmax(z z^T) and the full (N, L, L, L)
    Jacobian's diagonal."""
    z = np.random.default_rng(L).standard_normal((7, L)) * 1.5
    f, df = attention_trace_jac(z)
    A, dA = attention_jac(z)
    idx = np.arange(L)
    assert np.allclose(f, np.trace(attention_scores(z), axis1=1, axis2=2), rtol=1e-14)
    # the same quantity through the full Jacobian: equal up to summation-order roundoff
    assert np.allclose(df, dA[:, idx, idx, :].sum(axis=1), rtol=1e-12, atol=1e-14)
    h = 1e-6
    for l in range(L):
        zp, zm = z.copy(), z.copy()
        zp[:, l] += h
        zm[:, l] -= h
        tr = lambda x: np.trace(attention_scores(x), axis1=1, axis2=2)
        # central difference error O(h^2 * third derivative) + roundoff 1e-16/h
        assert np.allclose((tr(zp) - tr(zm)) / (2 * h), df[:, l], atol=1e-8)


def test_linear_tied_network_closed_form():
    # f = u = (z1 + z2)/sqrt(2), g = z1 + z2:  R = 3 - 2 sqrt(2) m, K = 4 R
    model = ssi.TiedNetwork("z1 + z2", L=2, activation="linear")
    for m in (0.0, 0.3, -0.7, 1.0):
        R = 3 - 2 * math.sqrt(2) * m
        assert model.risk(None, m) == pytest.approx(R, abs=1e-12)
        assert model.grad(None, m)[1] == pytest.approx(-2 * math.sqrt(2), abs=1e-12)
        assert model.noise_K(None, m) == pytest.approx(4 * R, abs=1e-10)


def test_relu_tied_network_sum_he2_curvature():
    # X(m) = E[g relu(u)] = sum_l m^2 (1/sqrt2)^2 E[relu He2] = m^2 / sqrt(2 pi)
    # -> d2R/dm2 = -4 / sqrt(2 pi) for every m; R(0) = E g^2 + E relu^2 - 2 E g E relu = 4 + 1/2
    model = ssi.TiedNetwork("He2(z1) + He2(z2)", L=2, activation="relu")
    assert model.risk(None, 0.0) == pytest.approx(4.5, abs=1e-11)
    for m in (0.0, 0.5):
        assert model.hessian(None, m)[0, 0] == pytest.approx(-4 / SQ2PI, abs=1e-10)
        assert model.grad(None, m)[1] == pytest.approx(-4 * m / SQ2PI, abs=1e-10)
    # K at m = 0: 4 E[(g - relu)^2 relu'^2] = 4 (E g^2 / 2 + E relu^2 relu'^2) = 4 (2 + 1/2)
    assert model.noise_K(None, 0.0) == pytest.approx(10.0, abs=1e-9)


@pytest.mark.parametrize("cls", [ssi.TiedNetwork, ssi.UntiedNetwork])
def test_hermite_engine_matches_monte_carlo_quadrature(cls):
    tgt = "z1^2*z2 + z2 + He2(z1)"
    exact = cls(tgt, L=2, activation="tanh")
    qmc = cls(tgt, L=2, activation="tanh", engine="quad", method="qmc", n=2**16, rng=1)
    m = 0.4 if cls is ssi.TiedNetwork else [0.4, -0.2]
    # scrambled Sobol with 2^16 points on smooth integrands: relative errors ~1e-4;
    # tolerances 3e-3 relative are > 10 error estimates
    assert exact.risk(None, m) == pytest.approx(qmc.risk(None, m), rel=3e-3)
    assert np.allclose(exact.grad(None, m)[1], qmc.grad(None, m)[1], rtol=3e-3, atol=3e-3)
    assert np.allclose(exact.noise_K(None, m), qmc.noise_K(None, m), rtol=3e-3)


def test_attention_hermite_engine_matches_direct_gauss_hermite():
    tgt = "4/3 + He4(z1) + 2*He4(z2)"
    ex = ssi.AttentionModel(tgt, 2, pe="opposite", reduction="trace")
    gh = ssi.AttentionModel(
        tgt, 2, pe="opposite", reduction="trace", engine="quad", method="gh", n=24
    )
    for e, m in [(0.2, 0.3), (0.5, 0.7)]:
        # direct 4-D GH (24^4 nodes) vs Mehler + 2-D GH: agree to ~1e-5 relative on R and
        # ~1e-3 on derivatives (the direct rule converges slowly for the degree-8 K integrand)
        assert ex.risk(e, m) == pytest.approx(gh.risk(e, m), rel=1e-6)
        assert np.allclose(ex.grad(e, m), gh.grad(e, m), rtol=1e-3, atol=1e-4)
        assert ex.noise_K(e, m) == pytest.approx(gh.noise_K(e, m), rel=5e-3)
        assert np.allclose(ex.hessian(e, m), gh.hessian(e, m), rtol=1e-2, atol=3e-3)


def test_reduced_gradient_is_directional_derivative():
    # pe='opposite': dR/de of the reduced coordinate = dR/de1 - dR/de2 = d/de R((e,-e), m)
    model = ssi.AttentionModel("He2(z1) + z1*z2 + 1", 2, pe="opposite", reduction="trace")
    e, m, h = 0.3, 0.2, 1e-5
    fd = (model.risk(e + h, m) - model.risk(e - h, m)) / (2 * h)
    # the gradient uses the Stein-raised moment E[F He_{k+e_i}]; the identity with the
    # derivative holds for the integral, on the 64^2 GH rule to its accuracy (~1e-6)
    assert model.grad(e, m)[0] == pytest.approx(fd, abs=1e-5)
    fdm = (model.risk(e, m + h) - model.risk(e, m - h)) / (2 * h)
    assert model.grad(e, m)[1] == pytest.approx(fdm, abs=1e-7)


def test_flatness_published_example_kappa_4_to_2():
    tgt = "4/3 + He4(z1) + 2*He4(z2)"
    f0 = ssi.flatness(ssi.AttentionModel(tgt, 2, pe="none", reduction="trace"))
    k0, H0 = f0.kappa, f0.hessian
    assert k0 == 4 and np.all(H0 == 0)
    for norm, sign in (("sqrtL", -1), ("sum", +1)):
        f = ssi.flatness(
            ssi.AttentionModel(tgt, 2, pe="opposite", reduction="trace", trace_norm=norm)
        )
        k, H = f.kappa, f.hessian
        assert k == 2
        assert np.sign(H[0, 0]) == sign  # negative e-curvature in the authors' Tr/sqrt(L)
        assert H[1, 1] == 0 and H[0, 1] == 0
    # independent check of d2R/de2 at 0: at m = 0, z = (e, -e) + eta is independent of xi, so
    # R(e, 0) = E g^2 - 2 E[g] E[f(v + eta)] + E[f(v + eta)^2] (E g = 4/3, E g^2 = 16/9 + 24
    # + 4 * 24); 2-D Gauss-Hermite with 200^2 nodes and a finite difference in e
    from theory.gauss import gh_rule

    x, w = gh_rule(200)
    Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()

    def R0(e):
        A = attention_scores(Z + np.array([e, -e]))
        f = (A[:, 0, 0] + A[:, 1, 1]) / math.sqrt(2)
        return 16 / 9 + 24 + 96 - 2 * (4 / 3) * (W @ f) + W @ f**2

    h = 1e-2
    fd = (R0(h) - 2 * R0(0.0) + R0(-h)) / h**2
    model = ssi.AttentionModel(tgt, 2, pe="opposite", reduction="trace", trace_norm="sqrtL")
    f = ssi.flatness(model)
    k, H = f.kappa, f.hessian
    assert R0(0.0) == pytest.approx(model.risk(0.0, 0.0), abs=1e-7)  # 64^2 vs 200^2 GH
    assert H[0, 0] == pytest.approx(fd, abs=2e-5)  # FD truncation h^2 R4/12 ~ 1e-5


@pytest.mark.parametrize(
    "model,kappa",
    [
        (lambda: ssi.TiedNetwork("z1 + z2", 2, "relu"), 1),
        (lambda: ssi.TiedNetwork("He2(z1) + He2(z2)", 2, "relu"), 2),
        (lambda: ssi.TiedNetwork("z1 - z2", 2, "relu"), None),  # tied network stuck
        (lambda: ssi.UntiedNetwork("z1 - z2", 2, "relu"), 1),
        (lambda: ssi.AttentionModel("z1 + z2", 2, pe="none", reduction="trace"), None),
        (lambda: ssi.AttentionModel("z1*z2", 2, pe="none", reduction="trace"), 2),
    ],
)
def test_flatness_examples(model, kappa):
    assert ssi.flatness(model(), max_order=6).kappa == kappa


def test_predicted_escape():
    p = ssi.predicted_escape("He2(z1)+He2(z2)+He2(z3)", d=1000)
    assert p.sie == 2 and p.scaling == "d log^2 d"
    assert p.gain_optimal_published == pytest.approx(9.0) and p.gain_optimal == pytest.approx(3)
    assert p.steps_order == pytest.approx(1000 * math.log(1000) ** 2)
    p = ssi.predicted_escape("z1 - z2")
    assert p.tied_learnable is False and p.gain_optimal == 0
    assert ssi.predicted_escape("He3(z1)").scaling == "d^2"


# --------------------------------------------------------------------------- phase diagram


def test_pd_criteria_converged_in_nodes():
    c1 = ssi.pd_criteria(0.9, 0.7, n=150)
    c2 = ssi.pd_criteria(0.9, 0.7, n=250)
    keys = ("Ree00", "Rmm00", "Rm01", "Ree01", "Re10", "Rmm10", "curv_sem", "curv_pos")
    for k in keys + ("dR_pos_minus_sem",):
        assert float(getattr(c1, k)) == pytest.approx(float(getattr(c2, k)), abs=1e-8), k


def test_pd_criteria_match_mehler_tables():
    # the criteria (Stein/Price reductions) vs the Mehler-series/Chebyshev tables (another
    # reduction); the tables truncate the m-series at order 40 (bound 1.3e-6 on X at |m| = 1,
    # weaker for m-derivatives at m = 1)
    tb = ssi.ps_tables()
    for a, om in [(1.0, 0.67), (0.8, 0.5)]:
        c = ssi.pd_criteria(a, om)
        A = ssi.positional_matrix(a)
        v00, v01, v10 = (tb.eval(e, m, om, A) for e, m in [(0, 0), (0, 1), (1, 0)])
        assert v00["Ree"] == pytest.approx(c.Ree00, abs=2e-6)
        assert v00["Rmm"] == pytest.approx(c.Rmm00, abs=2e-6)
        assert v10["Re"] == pytest.approx(c.Re10, abs=2e-6)
        assert v10["Rmm"] == pytest.approx(c.Rmm10, abs=2e-6)
        assert v10["R"] - v01["R"] == pytest.approx(c.dR_pos_minus_sem, abs=5e-6)
        assert v01["Rm"] == pytest.approx(c.Rm01, abs=2e-4)
        assert v01["Ree"] == pytest.approx(c.Ree01, abs=2e-4)


def test_pd_symmetry_and_direct_quadrature():
    # direct 4-D Gauss-Hermite risk (another method) vs the tables; R even in e and in m
    model = ssi.ps_model(1.0, 0.67, engine="quad", n=16)
    tb = ssi.ps_tables()
    A = ssi.positional_matrix(1.0)
    for e, m in [(0.3, 0.4), (0.6, -0.5)]:
        r = model.risk(e, m)
        assert r == pytest.approx(model.risk(-e, m), abs=1e-12)
        assert r == pytest.approx(model.risk(e, -m), abs=1e-12)
        assert r == pytest.approx(float(tb.eval(e, m, 0.67, A)["R"]), abs=2e-5)


def test_boundaries_are_roots_and_flips():
    b = ssi.boundaries(1.0)
    w = b.omega_steepest_switch
    c = ssi.pd_criteria(1.0, w)
    assert c.Ree00 == pytest.approx(c.Rmm00, abs=1e-12)
    c = ssi.pd_criteria(1.0, b.omega_global_switch)
    assert abs(c.dR_pos_minus_sem) < 1e-12
    # the criteria are affine in omega (R is affine in the target): collinear values
    v = [float(ssi.pd_criteria(0.9, om).Re10) for om in (0.2, 0.5, 0.8)]
    assert v[1] == pytest.approx(0.5 * (v[0] + v[2]), abs=1e-13)
    # ordering on a = 1 (both minima exist between the two flips)
    assert (
        b.omega_positional_min_appears
        < b.omega_steepest_switch
        < b.omega_global_switch
        < b.omega_semantic_min_disappears
    )
    eps = 1e-6
    for key, flag in (
        ("omega_positional_min_appears", "positional_min"),
        ("omega_semantic_min_disappears", "semantic_min"),
    ):
        lo = getattr(ssi.pd_booleans(1.0, getattr(b, key) - eps), flag)
        hi = getattr(ssi.pd_booleans(1.0, getattr(b, key) + eps), flag)
        assert bool(lo) != bool(hi)


def test_global_minimum_is_a_candidate():
    # on a fine grid of the disk the smallest R is (up to the grid) at one of the candidates
    for a, om in [(1.0, 0.67), (1.0, 0.9), (0.8, 0.5)]:
        R = ssi.landscape(a, om, n_grid=121).risk
        tb = ssi.ps_tables()
        A = ssi.positional_matrix(a)
        best = min(float(tb.eval(0, 1, om, A)["R"]), float(tb.eval(1, 0, om, A)["R"]))
        assert np.nanmin(R) >= best - 1e-9


def test_phase_diagram_regions():
    pdg = ssi.phase_diagram(np.linspace(0.7, 1.0, 7), np.linspace(0.4, 1.0, 13))
    reg = pdg.region
    assert reg.shape == (7, 13)
    assert reg[0, 0] == 0  # small a, small omega: unique semantic
    assert reg[-1, -1] == 2  # a = 1, omega = 1: unique positional
    b = ssi.boundaries(1.0)
    one = ssi.pd_booleans(1.0, 0.5 * (b.omega_steepest_switch + b.omega_global_switch))
    assert int(one.region) == 4  # both minima, global semantic, steepest positional
    with pytest.raises(ValueError):
        ssi.boundaries(0.0)


def test_chebyshev_moment_tables_match_direct_sums():
    # one-dimensional encodings use Chebyshev interpolants (40 nodes) of the student moments in
    # the reduced coordinate; smooth in e: agreement ~1e-8 relative
    model = ssi.AttentionModel("1 + He2(z1) + z1*z2", 2, pe="opposite", reduction="trace")
    gam = model._hermite_plan(True)["gam"]
    for c in (-0.93, 0.21, 0.77):
        a = model._cheb_moments(c, gam)
        b = model._direct_moments(np.array([c, -c]), gam)
        for k in a:
            assert np.allclose(a[k], b[k], rtol=0, atol=1e-7 * np.abs(b[k]).max())


def test_positional_semantic_noise_K_mehler_vs_independent_integrals():
    # at m = 0, xi and z are independent: K = 4 E_z[sum_l D_l^T E_xi[(g - f)(g - f)^T] D_l],
    # a 2-D integral (200^2 GH nodes), computed here without the Mehler tables
    from theory.gauss import gh_rule

    om, a = 0.67, 1.0
    A = ssi.positional_matrix(a)
    x, w = gh_rule(200)
    Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    g = (1 - om) * attention_scores(Z).reshape(-1, 4) + om * A.ravel()
    Cgg = np.einsum("n,na,nb->ab", W, g, g)
    Eg = W @ g
    model = ssi.ps_model(a, om)
    for e in (0.0, 0.9):
        Ae, dA = attention_jac(Z + np.array([e, -e]))
        f = Ae.reshape(-1, 4)
        D = np.moveaxis(dA, 3, 1).reshape(-1, 2, 4)
        M = (
            Cgg[None]
            - Eg[None, :, None] * f[:, None, :]
            - f[:, :, None] * Eg[None, None, :]
            + f[:, :, None] * f[:, None, :]
        )
        K = 4 * W @ np.einsum("nla,nab,nlb->n", D, M, D)
        assert model.noise_K(e, 0.0) == pytest.approx(K, rel=2e-4)  # 100^2-node tables
    # interior point with m != 0: direct 4-D GH (20^4 nodes) agrees to ~2e-4
    gh = ssi.ps_model(a, om, engine="quad", n=20)
    assert model.noise_K(0.3, 0.4) == pytest.approx(gh.noise_K(0.3, 0.4), rel=1e-3)


def test_projection_reduction_and_gram_encoding_L3():
    # L = 3, projection a^T A b, a general Gram matrix: hermite engine (3-D GH student moments)
    # vs direct 6-D scrambled Sobol (2^16 points x 1 scrambling: ~1e-3 relative)
    G = np.array([[1.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.0]])
    red = ("projection", [1.0, 0.0, -1.0], [0.5, 0.5, 0.0])
    tgt = "z1*z2 + He2(z3) + 1"
    ex = ssi.AttentionModel(tgt, 3, pe=G, reduction=red)
    qm = ssi.AttentionModel(tgt, 3, pe=G, reduction=red, engine="quad", method="qmc", n=2**16)
    assert ex.engine == "hermite" and ex.r == 3
    e, m = np.array([0.2, -0.1, 0.3]), 0.4
    assert ex.risk(e, m) == pytest.approx(qm.risk(e, m), rel=1e-3)
    ge, gm = ex.grad(e, m)
    qe, qg = qm.grad(e, m)
    assert np.allclose(ge, qe, atol=1e-3) and gm == pytest.approx(qg, abs=1e-3)
    assert ex.noise_K(e, m) == pytest.approx(qm.noise_K(e, m), rel=1e-2)


def test_ps_tables_disk_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("THEORY_CACHE_DIR", str(tmp_path))
    ssi.ps_tables.cache_clear()
    try:
        built = ssi.ps_tables(8, 8, 30)
        assert len(list(tmp_path.glob("ps_tables-*.npz"))) == 1
        ssi.ps_tables.cache_clear()
        loaded = ssi.ps_tables(8, 8, 30)
        assert "cache" in loaded.params
        A = ssi.positional_matrix(0.9)
        for e, m in [(0.1, 0.2), (0.7, -0.3)]:
            a, b = built.eval(e, m, 0.6, A), loaded.eval(e, m, 0.6, A)
            assert all(a[k] == b[k] for k in a)
            assert built.K(e, m, 0.6, A) == loaded.K(e, m, 0.6, A)
    finally:
        ssi.ps_tables.cache_clear()


def test_ps_fast_point_equals_table_evaluation():
    tb = ssi.ps_tables()
    A = ssi.positional_matrix(0.9)
    for e, m in [(0.3, 0.2), (-0.8, 0.5), (0.0, 1.0)]:
        v = tb.eval(e, m, 0.6, A, second=False)
        R, Re, Rm, K = tb.fast_point(e, m, 0.6, A)
        assert (R, Re, Rm) == pytest.approx((v["R"], v["Re"], v["Rm"]), abs=1e-13)
        assert K == pytest.approx(tb.K(e, m, 0.6, A), abs=1e-13)


def test_positional_matrix_is_the_row_softmax_of_its_definition():
    # A_a = softmax_row([[a^2, -a^2], [-a^2, a^2]]): the written-out form must give the same
    # numbers as the generic row softmax (the simulations and the theory share it)
    from theory.ssi._kernels import softmax_rows

    a = np.concatenate([np.linspace(0.01, 3.0, 301), [0.76, 1.0]])
    M = np.stack([np.stack([a * a, -a * a], -1), np.stack([-a * a, a * a], -1)], -2)
    np.testing.assert_array_equal(ssi.positional_matrix(a), softmax_rows(M))
    np.testing.assert_array_equal(ssi.positional_matrix(a)[:, 0, 0], positional_weight(a))
    np.testing.assert_allclose(ssi.positional_matrix(a).sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    assert ssi.positional_matrix(1.0)[0, 0] == pytest.approx(1 / (1 + math.exp(-2)), rel=1e-15)
