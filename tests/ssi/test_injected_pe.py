"""The injected positional encoding P_l = a_l w*/sqrt(d) + P~_l (AttentionModel(pe_target=a),
docs/ssi.md section 4b; paper Fig. 6): risk, gradient, Hessian, ODE and the full-d simulator."""

import json
import math

import numpy as np
import pytest

from theory.ssi.ode import integrate_ode, rhs
from theory.ssi.risk import AttentionModel
from theory.ssi.sgd.full import simulate_sgd
from theory.ssi.sgd.reduced import simulate_reduced

ODD = "z1 + z2"
KW = dict(L=2, reduction="trace", trace_norm="sqrtL")


def test_injected_risk_is_the_shifted_risk_of_an_orthonormal_encoding():
    # independent route: the model with an orthonormal encoding P~ (B = I, no injection)
    # evaluated at e = a m must give the injected model's risk at m (both are R(e_raw, m))
    a = np.array([-1.0, 0.5])
    inj = AttentionModel(ODD, pe="none", pe_target=a, **KW)
    ortho = AttentionModel(ODD, pe="orthonormal", **KW)
    for m in (0.0, 0.3, -0.7):
        assert inj.risk(None, m) == pytest.approx(ortho.risk(a * m, m), rel=1e-10)


def test_default_pe_target_changes_nothing():
    # pe_target=None and all-zero give the model without injection (same key, same numbers)
    a = AttentionModel(ODD, pe="opposite", **KW)
    b = AttentionModel(ODD, pe="opposite", pe_target=(0.0, 0.0), **KW)
    assert a.key() == b.key()
    assert a.risk(0.2, 0.4) == b.risk(0.2, 0.4)
    assert a.grad(0.2, 0.4) == b.grad(0.2, 0.4)


def test_gradient_and_hessian_against_finite_differences_of_the_risk():
    # the chain rule dR/dm + a . dR/de and the Hessian map against central differences of risk();
    # h = 1e-4: truncation ~h^2 R''' ~ 1e-9, rounding ~1e-16/h ~ 1e-12.  120 student nodes per
    # axis: the Stein-raised e-derivative and the quadrature of R then agree to ~5e-9 (3e-7 at
    # the default 64 nodes, with or without injection)
    M = AttentionModel(ODD, pe="opposite", pe_target=(-1.0, -1.0), n_student=120, **KW)
    c, m, h = 0.1, 0.2, 1e-4
    ge, gm = M.grad(c, m)
    assert gm == pytest.approx((M.risk(c, m + h) - M.risk(c, m - h)) / (2 * h), abs=2e-8)
    assert ge == pytest.approx((M.risk(c + h, m) - M.risk(c - h, m)) / (2 * h), abs=2e-8)
    # second difference with h2 = 1e-3: truncation h2^2 R''''/12 ~ 1e-7, rounding of the
    # quadrature ~1e-12/h2^2 ~ 1e-6 (measured 1e-6)
    H = M.hessian(0.0, 0.0)
    h2 = 1e-3
    fd = (M.risk(0.0, h2) - 2 * M.risk(0.0, 0.0) + M.risk(0.0, -h2)) / h2**2
    assert H[1, 1] == pytest.approx(fd, abs=5e-6)


def test_injection_makes_the_odd_target_learnable():
    # without injection the tied attention is even in w: R(m) flat at the origin for an odd
    # target (all m-derivatives vanish); with a = (-1, -1) the m-curvature is negative
    flat = AttentionModel(ODD, pe="none", **KW)
    inj = AttentionModel(ODD, pe="none", pe_target=(-1.0, -1.0), **KW)
    assert abs(flat.hessian(None, 0.0)[0, 0]) < 1e-12
    assert inj.hessian(None, 0.0)[0, 0] < -0.5
    assert inj.risk(None, 1.0) < inj.risk(None, 0.0) - 0.2


def test_ode_rhs_is_the_projected_gradient_of_the_shifted_risk():
    # lr = 0: dm/dt = -dR/dm + m (m dR/dm), with dR/dm by central differences of risk();
    # 120 student nodes: Stein-raised derivative and quadrature agree to ~3e-9 (3e-8 at 64)
    M = AttentionModel(ODD, pe="none", pe_target=(-1.0, -1.0), n_student=120, **KW)
    m, h = 0.3, 1e-5
    g = (M.risk(None, m + h) - M.risk(None, m - h)) / (2 * h)
    assert rhs(M, np.array([m]), 0.0)[0] == pytest.approx(-g + m * m * g, abs=1e-8)


def test_bad_pe_target_and_reduced_chain_refused():
    with pytest.raises(ValueError, match="pe_target"):
        AttentionModel(ODD, pe_target=(1.0,), **KW)
    with pytest.raises(ValueError, match="pe_target"):
        AttentionModel(ODD, pe_target=(np.nan, 0.0), **KW)
    M = AttentionModel(ODD, pe_target=(-1.0, -1.0), **KW)
    with pytest.raises(ValueError, match="reduced chain"):
        simulate_reduced(M, 100, 0.05, 0, steps=10)


def test_full_simulator_sees_the_injected_shift():
    # at lr ~ 0 the weights stay at m0 = 0.5, so the mean sample loss of 20000 steps estimates
    # R(m0) of the injected model (SE ~ sd(loss) / sqrt(20000) ~ 0.02; tolerance 0.08 = 4 SE);
    # ignoring the injection would give R(0.5) of the plain model, 0.26 higher
    a = (-3.0, -3.0)
    M = AttentionModel(ODD, pe="none", pe_target=a, **KW)
    plain = AttentionModel(ODD, pe="none", **KW)
    assert plain.risk(None, 0.5) - M.risk(None, 0.5) > 0.2
    r = simulate_sgd(M, 64, 1e-9, 3, steps=20000, m0=0.5, n_record=20)
    steps = np.diff(r.steps)
    loss = float(np.sum(r.risk[1:] * steps) / np.sum(steps))
    assert loss == pytest.approx(M.risk(None, 0.5), abs=0.08)
    assert abs(r.final_m - 0.5) < 1e-6


@pytest.mark.slow
def test_ode_matches_full_d_sgd_with_injected_encoding():
    # d = 1000, gamma = 0.05, m0 = 1/sqrt(d), 8 seeds to t = 4 (8e4 steps each, ~60 s):
    # the mean of m over seeds against the ODE within 3 SE + 0.01 (finite-d bias O(1/sqrt(d))
    # on the escape time; measured agreement within 1 SE, docs/ssi.md section 4b)
    M = AttentionModel(ODD, pe="none", pe_target=(-1.0, -1.0), **KW)
    d, lr = 1000, 0.05
    o = integrate_ode(M, lr=lr, d=d, t_max=4.0)
    runs = [
        simulate_sgd(M, d, lr, s, steps=int(4 * d / lr), m0=1 / math.sqrt(d), n_record=40)
        for s in range(8)
    ]
    for t in (1.0, 2.0, 3.0, 4.0):
        ms = np.array([np.interp(t, r.t, r.m) for r in runs])
        se = ms.std(ddof=1) / math.sqrt(len(ms))
        assert abs(ms.mean() - np.interp(t, o.t, o.m)) < 3 * se + 0.01


def test_shifted_target_is_the_target_at_z_plus_a():
    # the target that sees the encoding: g(z + a), checked on He_2 by hand:
    # He_2(z + a) = z^2 + 2 a z + a^2 - 1
    import sympy as sp

    from theory.ssi.figures.injected import shifted_target

    z1, z2 = sp.symbols("z1 z2")
    got = shifted_target("z1**2 - 1 + z2", (0.5, -2.0))
    assert sp.simplify(got - (z1**2 + z1 + 0.25 - 1 + z2 - 2.0)) == 0


@pytest.mark.slow  # the flatness run takes ~1 min on the loaded machine
def test_cli_pe_target(capsys):
    # the CLI builds the injected model: `sgd flatness` finds kappa = 2 for the odd target
    # (without --pe-target it finds no finite kappa, the Hessian at the origin being 0)
    from theory.cli import main

    assert main(["sgd", "flatness", "--target", ODD, "--trace-norm", "sqrtL",
                 "--pe-target=-1,-1", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["kappa"] == 2 and "pe_target" in out["model"]


def test_cli_bad_pe_target_exits_2():
    # what the model cannot take: exit 2 with one line
    from theory.cli import main

    assert (
        main(["sgd", "ode", "--target", ODD, "--pe-target=-1", "--lr", "0.05", "--d", "100"]) == 2
    )
    assert (
        main(["sgd", "ode", "--target", ODD, "--pe-target=x,1", "--lr", "0.05", "--d", "100"]) == 2
    )
    tied = ["sgd", "ode", "--model", "tied", "--target", ODD, "--pe-target=1,1"]
    assert main([*tied, "--lr", "0.05", "--d", "100"]) == 2
