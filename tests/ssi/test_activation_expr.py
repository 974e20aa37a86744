"""Student activations written as expressions in x (`--activation 'x**2+x'`): parsed by the
target language, Hermite moments from the targets' Hermite engine, the named activations kept as
shortcuts with their numbers unchanged."""

import math

import numpy as np
import pytest

from theory import ssi
from theory.cli import main
from theory.ssi._kernels import (
    ACTIVATION_CODES,
    ACTIVATION_EXPRESSIONS,
    ACTIVATIONS,
    WRITTEN_CODE,
    activation,
    activation_code,
    kernel_activation,
)
from theory.ssi.hermite import hermite_coefficients
from theory.ssi.sgd import _kernels as SK
from theory.ssi.targets import activation_cfuncs, parse_activation

TARGET = "He2(z1)+He2(z2)"


def test_x2_plus_x_hermite_coefficients_exact():
    # x^2 + x = He2(x) + He1(x) + 1 (He2 = x^2 - 1): a0 = a1 = a2 = 1, nothing above
    c = hermite_coefficients(parse_activation("x**2+x").expr, 6)
    assert c.is_exact
    assert [c.value((n,)) for n in range(7)] == [1, 1, 1, 0, 0, 0, 0]
    net = ssi.TiedNetwork(TARGET, L=2, activation="x**2+x")
    # E[sigma He_n] = n! a_n = 1, 1, 2; E[sigma'^2 He_n] of sigma' = 2x + 1 = 2 He1 + 1:
    # (2x+1)^2 = 4 He2 + 4 He1 + 5 -> 5, 4, 8
    mu = net._ridge_moments(2)
    assert np.array_equal(mu[0], [1.0, 1.0, 2.0]) and np.array_equal(mu[2], [5.0, 4.0, 8.0])
    assert net.activation_hermite.startswith("exact")


def test_relu_written_equals_named_and_closed_form():
    named = ssi.TiedNetwork(TARGET, L=2, activation="relu")
    written = ssi.TiedNetwork(TARGET, L=2, activation="relu(x)")
    assert written.activation == "relu(x)" and named.activation == "relu"
    assert written.activation_hermite.startswith("exact")
    assert named.activation_hermite.startswith("adaptive quadrature")
    # closed form: E[relu He0] = E[relu He2] = 1/sqrt(2 pi), E[relu He1] = 1/2
    s = 1 / math.sqrt(2 * math.pi)
    assert np.allclose(written._ridge_moments(2)[0], [s, 0.5, s], rtol=1e-14, atol=0)
    # the named path integrates to epsrel 1e-12 (scipy quad_vec)
    assert np.allclose(named._ridge_moments(6), written._ridge_moments(6), rtol=1e-10, atol=1e-12)
    a = ssi.integrate_ode(named, 0.05, 1000)
    b = ssi.integrate_ode(written, 0.05, 1000)
    # the same ODE up to the quadrature's 1e-12 in its coefficients (ODE rtol 1e-8)
    assert b.t_escape == pytest.approx(a.t_escape, rel=1e-8)
    assert b.final_m == pytest.approx(a.final_m, rel=1e-8)


@pytest.mark.parametrize("cls", [ssi.TiedNetwork, ssi.UntiedNetwork])
def test_ode_x2_equals_named_square(cls):
    a = ssi.integrate_ode(cls(TARGET, L=2, activation="square"), 0.05, 1000)
    b = ssi.integrate_ode(cls(TARGET, L=2, activation="x**2"), 0.05, 1000)
    # exact Hermite moments vs quadrature to 1e-12, the ODE at rtol 1e-8
    assert b.t_escape == pytest.approx(a.t_escape, rel=1e-8)
    assert b.final_m == pytest.approx(0.5, abs=1e-8) and a.final_m == pytest.approx(0.5, abs=1e-8)


def test_named_activations_unchanged():
    """The named activations keep their fast path: the numbers of main before this change
    (commit ec12805, the same calls), bit for bit."""
    m = ssi.UntiedNetwork(TARGET, L=2, activation="relu")
    r = ssi.integrate_ode(m, 0.05, 1000)
    assert r.t_escape == 1.032631331474764 and r.final_m == 0.9421899086906358
    t = ssi.UntiedNetwork(TARGET, L=2, activation="tanh")
    assert float(t._ridge_moments(4)[2][2]) == -0.356592549772136


@pytest.mark.parametrize("name", sorted(ACTIVATION_EXPRESSIONS))
def test_every_name_is_its_expression(name):
    """Each named activation equals the expression that stands for it (values and
    derivatives), and that expression runs the name's SGD kernel."""
    text = ACTIVATION_EXPRESSIONS[name]
    u = np.linspace(-3.1, 2.9, 41)  # no node at a kink (0)
    s0, ds0, _ = ACTIVATIONS[name]
    s1, ds1, _ = activation(text)
    assert np.allclose(s1(u), s0(u), rtol=1e-13, atol=1e-13)
    assert np.allclose(ds1(u), ds0(u), rtol=1e-13, atol=1e-13)
    assert activation_code(text) == ACTIVATION_CODES[name]


def test_written_activation_runs_the_callback_kernel():
    # an expression equal to no name gets the callback code, a name's expression its kernel
    assert activation_code("x**2+x") == WRITTEN_CODE
    assert kernel_activation("x**2")[0] == ACTIVATION_CODES["square"]
    code, fv, fd = kernel_activation("x**2+x")
    assert code == WRITTEN_CODE and (fv(3.0), fd(3.0)) == (12.0, 7.0)
    # compiled once per expression string within a process
    assert kernel_activation("x**2+x")[1] is fv


def _square_chunk(act):
    """One reduced chunk (tied, L = 2) from fixed draws with the kernel activation ``act``."""
    rng = np.random.default_rng(4)
    n, L = 3000, 2
    C, rr = np.array([[0.1]]), np.array([math.sqrt(1 - 0.01)])
    alpha, beta = rng.standard_normal((n, L, 1)), rng.standard_normal((n, L))
    chi = rng.chisquare(97, (n, 1))
    Y = ((alpha[:, :, 0].sum(1) / math.sqrt(2)) ** 2)[:, None]
    out = SK.reduced_chunk(
        C, rr, np.zeros((L, 0)), alpha, beta, chi, Y, 0.1 / 100, SK.HEAD_NETWORK,
        np.zeros((L, L)), *act, False, 0.5,
    )  # fmt: skip
    return out, C, rr


def test_x2_written_vs_named_square_bit_identical():
    """'x**2' runs the kernel of 'square' (bit-identical by construction); forced through the
    compiled callbacks (s**2.0 and 2.0*s) it is bit-identical too: pow(s, 2) is exact in
    IEEE arithmetic like s*s."""
    named = _square_chunk(SK.act_args("square"))
    assert SK.act_args("x**2")[0] == ACTIVATION_CODES["square"]
    forced = _square_chunk((WRITTEN_CODE, *activation_cfuncs("x**2")))
    assert named[0] == forced[0]
    assert np.array_equal(named[1], forced[1]) and np.array_equal(named[2], forced[2])
    m = ssi.TiedNetwork("He2(z1)", L=1, activation="square")
    w = ssi.TiedNetwork("He2(z1)", L=1, activation="x**2")
    a = ssi.simulate_sgd(m, 100, 0.1, 3, steps=3000)
    b = ssi.simulate_sgd(w, 100, 0.1, 3, steps=3000)
    assert np.array_equal(a.m, b.m) and np.array_equal(a.risk, b.risk, equal_nan=True)


def _mean_vs_ode(model, d, lr, m0, t_max, seeds, reduced, times):
    """Mean SGD overlap over seeds vs the ODE at given times: (mean, SE, ODE) per time."""
    ode = ssi.integrate_ode(model, lr, d, m0=m0, t_max=t_max)
    res = ssi.simulate_seeds(
        model, d, lr, seeds, reduced=reduced, workers=1, progress=False, m0=m0,
        steps=int(t_max * d / lr), n_record=60,
    )  # fmt: skip
    t = res[0].t
    M = np.array([r.m for r in res])
    mu, se = M.mean(0), M.std(0, ddof=1) / math.sqrt(len(M))
    out = []
    for tq in times:
        i = int(np.argmin(np.abs(t - tq)))
        out.append((mu[i], se[i], float(np.interp(t[i], ode.t, ode.m))))
    return out


X2X_TARGET = "((z1+z2)/sqrt(2))**2 + (z1+z2)/sqrt(2)"  # realisable by sigma = x^2 + x


@pytest.mark.parametrize("reduced,d", [(True, 10_000), (False, 1_000)])
def test_written_polynomial_sgd_matches_ode(reduced, d):
    """Tied network with sigma = 'x**2+x' (compiled callbacks; exact Hermite moments for the
    ODE), realisable target, m0 = 0.3, gamma = 0.05, 8 seeds: the mean SGD overlap follows
    the ODE within 4 SE plus the O(1/sqrt(d)) finite-size allowance (as for the named ReLU in
    test_sgd_theory_vs_sim)."""
    model = ssi.TiedNetwork(X2X_TARGET, L=2, activation="x**2+x")
    t_max = 3.0 if reduced else 1.0
    for mu, se, pred in _mean_vs_ode(model, d, 0.05, 0.3, t_max, range(8), reduced, (0.3, 1.0)):
        assert abs(mu - pred) < 4 * se + 2 / math.sqrt(d), (mu, se, pred)


def test_written_untied_runs_full_and_reduced():
    """Untied network, written activation: the full and reduced simulators run it, and their
    mean final overlaps (8 seeds each, d = 400) agree within 4 combined SE + 0.02."""
    model = ssi.UntiedNetwork("He2(z1)/sqrt(2)+He2(z2)/sqrt(2)", L=2, activation="x**2-1+x/4")
    kw = dict(workers=1, progress=False, m0=0.3, steps=4000)
    f = [r.final_m for r in ssi.simulate_seeds(model, 400, 0.1, range(8), **kw)]
    r = [x.final_m for x in ssi.simulate_seeds(model, 400, 0.1, range(8, 16), reduced=True, **kw)]
    se = math.hypot(np.std(f, ddof=1), np.std(r, ddof=1)) / math.sqrt(8)
    assert abs(np.mean(f) - np.mean(r)) < 4 * se + 0.02


@pytest.mark.slow
def test_written_tanh_sgd_matches_ode():
    """sigma = 'tanh(x)' (numerical Hermite moments, achieved 1e-10), target
    tanh((z1+z2)/sqrt(2)), m0 = 0.1, gamma = 0.2, d = 20000, 8 seeds of the reduced chain:
    measured |mean - ODE| <= 2.9 SE at t = 0.3, 1, 3; tolerance 4 SE + 2/sqrt(d)."""
    model = ssi.TiedNetwork("tanh((z1+z2)/sqrt(2))", L=2, activation="tanh(x)")
    assert model.activation_hermite.startswith("numerical")
    for mu, se, pred in _mean_vs_ode(model, 20_000, 0.2, 0.1, 3.0, range(8), True, (0.3, 1, 3)):
        assert abs(mu - pred) < 4 * se + 2 / math.sqrt(20_000), (mu, se, pred)


HOSTILE = [
    "x.__class__",
    "__import__('os').system('true')",
    "(lambda: 1)()",
    "x**10**10",
    "He1000(x)",
    "x*y",
    "z1",
    "1",
    "nope",
    "x +",
    "foo(x)",
    "exp(" * 60 + "x" + ")" * 60,
    "",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_activation_exit_2(text, capsys):
    argv = ["sgd", "ode", "--target", "He2(z1)", "--model", "tied", "--lr", "0.05", "--d", "100"]
    assert main([*argv, f"--activation={text}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "activation" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("text", ["x.__class__", "x**10**10", "He1000(x)", "x*y", ""])
def test_hostile_activation_exit_2_in_simulate(text, capsys):
    argv = ["sgd", "simulate", "--target", "He2(z1)", "--model", "tied", "--lr", "0.05"]
    assert main([*argv, "--d", "100", "--seeds", "1", f"--activation={text}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "activation" in err[0] and "Traceback" not in err[0]


def test_cli_simulate_written_tanh(tmp_path):
    out = tmp_path / "run.csv"
    argv = ["sgd", "simulate", "--target", "tanh(z1)", "--model", "tied", "--L", "1"]
    argv += ["--lr", "0.1", "--d", "200", "--seeds", "1", "--steps", "20000"]
    assert main([*argv, "--activation", "tanh(x)", "--workers", "1", "--out", str(out)]) == 0
    rows = out.read_text().splitlines()
    # realisable target, information exponent 1: from a random start the overlap has grown
    # to near 1 by t = 10 (ODE: escape at t ~ 3 for d = 200; |m| since tanh is odd)
    m_end = float(rows[-1].split(",")[rows[0].split(",").index("m")])
    assert len(rows) > 2 and abs(m_end) > 0.8
