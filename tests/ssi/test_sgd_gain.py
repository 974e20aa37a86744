"""Tied/untied gain (theory.ssi.gain): closed form vs numerical step-size minimisation, the
drift/noise constants against the package's ODE, the exact tied <-> untied mapping, the flattened
kernel against its numpy reference, and the ODE's optimal-step gain against reduced SGD."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.optimize import brentq

from theory import ssi
from theory.ssi import gain as G
from theory.ssi.sgd import _kernels as SK


def test_sie1_constant_is_the_root_of_its_stationarity_condition():
    # d/dx [-ln(1-x)/x^2] = 0  <=>  x/(1-x) = -2 ln(1-x): independent root finding
    x = brentq(lambda x: x / (1 - x) + 2 * math.log1p(-x), 0.1, 0.99, xtol=1e-15)
    assert G.X_STAR == pytest.approx(x, abs=1e-12)
    assert G.F_STAR == pytest.approx(-math.log1p(-x) / x**2, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_linear_escape_steps_against_quadrature(k):
    # nu(lr) = (d / lr) int_{m0}^{eta} dm / (A m^(k-1) - lr K m / 2), integrated numerically
    A, K, d, m0, eta, lr = 1.3, 4.0, 1000.0, 0.03, 0.5, 0.05 if k < 3 else 0.005
    t, _ = integrate.quad(
        lambda m: 1.0 / (A * m ** (k - 1) - 0.5 * lr * K * m), m0, eta, epsrel=1e-12
    )
    assert G.linear_escape_steps(A, K, k, lr, d, m0, eta) == pytest.approx(t * d / lr, rel=1e-9)


def test_linear_optimum_closed_forms_against_numerical_minimisation():
    A, K, d, m0, eta = 1.1, 6.0, 1000.0, 1 / math.sqrt(1000), 0.5
    # SIE 2: nu* = 2 d K ln(eta/m0) / A^2 at lr* = A/K, vs a brute-force scan
    o2 = G.linear_optimal(A, K, 2, d, m0, eta)
    nu2, lr2 = o2.nu, o2.lr
    lrs = np.geomspace(lr2 / 10, 1.99 * lr2, 20001)
    vals = [G.linear_escape_steps(A, K, 2, g, d, m0, eta) for g in lrs]
    assert nu2 == pytest.approx(min(vals), rel=1e-6)
    assert lr2 == pytest.approx(lrs[int(np.argmin(vals))], rel=2e-3)
    # SIE 1 with m0 -> 0: nu* = F* d K eta^2 / (2 A^2), lr* = 2 A x* / (K eta)
    o1 = G.linear_optimal(A, K, 1, d, 1e-12, eta)
    nu1, lr1 = o1.nu, o1.lr
    assert nu1 == pytest.approx(G.F_STAR * d * K * eta**2 / (2 * A**2), rel=1e-8)
    assert lr1 == pytest.approx(2 * A * G.X_STAR / (K * eta), rel=1e-4)


@pytest.mark.parametrize("fam,L", [("sum_he2", 3), ("sum_z", 3), ("z1*z2 + z2*z3", 3)])
def test_drift_and_noise_constants_from_the_package_ode(fam, L):
    expr = G.family_target(fam, L)
    c = G.drift_constants(expr, L)
    k = c.sie
    tn = ssi.TiedNetwork(expr, L=L)
    un = ssi.UntiedNetwork(expr, L=L)
    eps = 1e-4
    # tied: -dR/dm(eps) = A eps^(k-1) + O(eps^k)
    assert -tn.grad(None, eps)[1] / eps ** (k - 1) == pytest.approx(c.A_tied, rel=1e-3)
    if k == 1:  # untied best-direction drift = |grad_m R(0)|
        assert np.linalg.norm(un.grad(None, np.zeros(L))[1]) == pytest.approx(c.A_untied, rel=1e-8)
    else:  # = largest eigenvalue of -Hessian(0) in the row overlaps
        lam = np.linalg.eigvalsh(-un.hessian(None, np.zeros(L)))
        assert lam.max() == pytest.approx(c.A_untied, rel=1e-8)
    # the per-row noise term is exactly 1/L of the tied one at m = 0 (delta_l = delta / sqrt L)
    assert c.K_row == pytest.approx(c.K_tied / L, rel=1e-10)


def test_closed_form_against_full_ode_minimisation_in_the_linear_regime():
    # small eta, large d: the full ODE of theory.ssi.ode reduces to its linearisation.
    # Corrections: SIE 2 (sum He2) O(eta^2) (K(m) = K(0) + O(m^2), sphere term m^2);
    # SIE 1 (sum z) O(eta) since K(m) = K(0) - 4 m for a linear target with relu
    for fam, k, d, eta, tol in (("sum_he2", 2, 1e8, 0.01, 1e-3), ("sum_z", 1, 1e12, 1e-4, 1e-3)):
        expr = G.family_target(fam, 2)
        c = G.drift_constants(expr, 2)
        lin = G.linear_optimal(c.A_tied, c.K_tied, k, d, 1 / math.sqrt(d), eta)
        nu_lin, lr_lin = lin.nu, lin.lr
        opt = G.ode_optimal(ssi.TiedNetwork(expr, L=2), d, eta, lr_lin, xatol=1e-3)
        nu, lr = opt.nu, opt.lr
        assert nu == pytest.approx(nu_lin, rel=tol)
        assert lr == pytest.approx(lr_lin, rel=3e-2)  # flat optimum: lr* is softer than nu*


@pytest.mark.parametrize("fam", ["sum_he2", "sum_z"])
def test_untied_ode_is_the_tied_ode_slowed_down_by_L(fam):
    # derivation: in a = m_vec / sqrt(L) both networks share R(a); the untied drift and noise
    # are 1/L of the tied ones, so nu_untied(gamma) = L nu_tied(gamma) at EVERY gamma
    L, d, eta = 3, 1000, 0.5
    expr = G.family_target(fam, L)
    for lr in (0.02, 0.15):
        nt = G.ode_escape_steps(ssi.TiedNetwork(expr, L=L), lr, d, eta)
        nu = G.ode_escape_steps(ssi.UntiedNetwork(expr, L=L), lr, d, eta)
        assert nu / nt == pytest.approx(L, rel=1e-5)
    c = G.closed_form_gains(expr, L, d, eta, 0.05)
    assert c.gain_optimal_closed == pytest.approx(L, rel=1e-9)
    # = the published formula times K_row / K_tied = 1/L
    assert c.gain_optimal_closed == pytest.approx(c.gain_optimal_published / L, rel=1e-9)


@pytest.mark.parametrize("act", [1, "x**2+x"])  # relu; a written activation (callbacks)
def test_flat_kernel_matches_numpy_reference(act):
    rng = np.random.default_rng(3)
    L, n, d = 3, 400, 50
    c0 = rng.standard_normal(L) * 0.1
    r0 = np.array([math.sqrt(1 - c0 @ c0)])
    alpha = rng.standard_normal((n, L))
    beta = rng.standard_normal(n)
    chi = rng.chisquare(L * d - L - 1, n)
    Y = (alpha**2 - 1).sum(axis=1) / math.sqrt(2)
    out = []
    for fn, a in ((SK.flat_chunk, SK.act_args(act)), (SK.flat_chunk_reference, (act,))):
        c, r = c0.copy(), r0.copy()
        hit, loss = fn(c, r, alpha, beta, chi, Y, 0.3 / (L * d), *a, 0.2**2)
        out.append((hit, loss, c, r))
    assert out[0][0] == out[1][0]
    assert out[0][1] == pytest.approx(out[1][1], rel=1e-12)
    np.testing.assert_allclose(out[0][2], out[1][2], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out[0][3], out[1][3], rtol=1e-12)


def test_ode_optimal_gain_against_reduced_sgd():
    # SIE 1, L = 3, d = 200, each network at its ODE-optimal step size; the simulated gain must
    # agree with the ODE's within 4 standard errors (+3 % for the finite-d shift of the optimum)
    # and be incompatible with the published L^2 = 9
    rows = G.gain_curve(
        "sum_z",
        [3],
        simulate=True,
        d=200,
        seeds=48,
        step_rule="optimal",
        lr_factors=(1.0,),
        workers=1,
        untied_norms=("rows", "flat"),
    ).rows
    r = rows[0]
    assert r["gain_optimal_published"] == pytest.approx(9.0)
    assert r["gain_optimal"] == pytest.approx(3.0)
    for sfx in ("", "_flat"):
        g, e = r[f"gain_sim{sfx}"], r[f"gain_sim{sfx}_err"]
        assert abs(g - r["gain_optimal_ode"]) < 4 * e + 0.03 * g, (sfx, g, e, r)
        assert 9.0 - g > 4 * e


def test_cli_gain_json_contract(capsys):
    import json

    from theory.cli import main

    code = main(
        ["sgd", "gain", "--target", "sum_he2", "--Ls", "1,2", "--json", "--ode-start", "fixed"]
    )
    out = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert code == 0 and len(out) == 1
    rows = json.loads(out[0])["rows"]
    for r, L in zip(rows, (1, 2)):
        # published formula L^2, this package's prediction and ODE (closed form, minimised) L
        assert r["gain_optimal_published"] == pytest.approx(L**2)
        assert r["gain_optimal"] == pytest.approx(L)
        assert r["gain_equal"] == pytest.approx(L)
        assert r["gain_optimal_closed"] == pytest.approx(L, rel=1e-9)
        assert r["gain_optimal_ode"] == pytest.approx(L, rel=1e-5)
        assert r["gain_equal_ode"] == pytest.approx(L, rel=1e-5)
    assert (
        main(
            ["sgd", "gain", "--target", "sum_z", "--Ls", "1", "--simulate", "--untied-norm", "cols"]
        )
        == 2
    )


@pytest.mark.parametrize(
    "fam,L,act", [("sum_he2", 3, "relu"), ("sum_z", 4, "relu"), ("sum_he3", 2, "erf")]
)
def test_hermite_gain_formula_is_the_minimised_linear_ode(fam, L, act):
    # theory.ssi.hermite.gains (ratio^2 L^(1-k), |ratio| L^(1-k/2)) against the numerical
    # minimisation over the step size of the linearised ODE's escape steps (linear_optimal) and
    # its small-step limit (SIE 3: the noise term would stop the escape at lr = 0.05)
    expr = G.family_target(fam, L)
    d, eta = 1000, 0.5
    c = G.closed_form_gains(expr, L, d, eta, 1e-7, act)
    assert c.tied_escapes
    assert c.gain_optimal_closed == pytest.approx(c.gain_optimal, rel=1e-6)
    assert c.gain_equal_closed == pytest.approx(c.gain_equal, rel=1e-4)


def test_theory_sie_and_theory_sgd_gain_agree(capsys):
    import json

    from theory.cli import main

    assert main(["sie", "(He2(z1) + He2(z2) + He2(z3))/sqrt(2)", "--json"]) == 0
    sie = json.loads(capsys.readouterr().out)
    assert main(["sgd", "gain", "--target", "sum_he2", "--Ls", "3", "--no-ode", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    for key in ("gain_optimal", "gain_equal", "gain_optimal_published", "gain_equal_published"):
        assert sie[key] == pytest.approx(row[key], rel=1e-12), key
    # the package's number is the linearised ODE minimised over the step size, not L^2
    assert sie["gain_optimal"] == pytest.approx(row["gain_optimal_closed"], rel=1e-9)
    assert sie["gain_optimal"] == pytest.approx(3.0) and sie["gain_optimal_published"] == 9.0


def test_the_equal_and_optimal_curves_share_one_ode_optimisation(monkeypatch):
    """gain_curve at equal and at optimal step sizes needs the same ODE optima: they are
    computed once per setting (G._ode_gains_memo), and equal a direct ode_gains call."""
    G._ode_gains_memo.cache_clear()
    calls = []
    real = G.ode_gains
    monkeypatch.setattr(G, "ode_gains", lambda *a, **k: calls.append(a) or real(*a, **k))
    kw = dict(d=300, lr=0.01, eta=0.5, activation="relu")
    eq = G.gain_curve("sum_he2", [1], step_rule="equal", **kw)
    opt = G.gain_curve("sum_he2", [1], step_rule="optimal", **kw)
    assert len(calls) == 1
    direct = real(G.family_target("sum_he2", 1), 1, 300, 0.5, 0.01, "relu", start="typical")
    for row in (eq.rows[0], opt.rows[0]):
        assert row["gain_optimal_ode"] == direct.gain_optimal_ode
        assert row["lr_opt_untied_ode"] == direct.lr_opt_untied_ode
    assert eq.rows[0]["gain_predicted_ode"] == direct.gain_equal_ode
    assert opt.rows[0]["gain_predicted_ode"] == direct.gain_optimal_ode
