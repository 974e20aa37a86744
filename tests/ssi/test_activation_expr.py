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
    activation,
    activation_code,
)
from theory.ssi.hermite import hermite_coefficients
from theory.ssi.targets import parse_activation

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


def test_written_activation_without_kernel_is_refused_by_the_simulators():
    with pytest.raises(ValueError, match="SGD simulators run the named activations"):
        activation_code("x**2+x")
    with pytest.raises(ValueError, match="SGD simulators"):
        ssi.simulate_sgd(ssi.TiedNetwork("z1", L=1, activation="x**3"), 50, 0.1, 0)


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


def test_gain_simulate_refuses_a_written_activation_first(capsys):
    argv = ["sgd", "gain", "--target", "sum_he2", "--Ls", "1", "--simulate", "--d", "50"]
    assert main([*argv, "--activation", "x**2+x", "--workers", "1"]) == 2
    assert "SGD simulators" in capsys.readouterr().err
