"""Finite-d empirical risk of the positional-semantic model: reduction, gradient, GD."""

import numpy as np
import pytest

from theory import attention as A
from theory.attention.channel import sample_loss, sample_loss_grad, sample_loss_hess
from theory.attention.finite_d.data import make_teacher, sample_data
from theory.attention.finite_d.gd import (
    barzilai_borwein,
    gradient_descent,
    lbfgs,
    nesterov,
    simulate_gd,
)
from theory.attention.finite_d.problem import (
    make_problem,
    naive_risk,
    overlaps,
    risk,
    risk_reference,
)

P03 = A.ERMParams(omega=0.3)


def test_exact_reduction_matches_full_softmax():
    # the (kappa, a*, b*, c) reduction is exact at any d: compare with softmax(XQ(XQ)^T/d) X - Y
    pb = make_problem(1.5, P03, 30, seed=3, keep_targets=True, n_test=10)
    rng = np.random.default_rng(0)
    for scale in (0.1, 1.0, 3.0):
        Q = scale * rng.standard_normal(30) + 0.2
        L, _ = risk(Q, pb.train, 0.01)
        assert L == pytest.approx(naive_risk(Q, pb.train, 0.01), rel=1e-12)


@pytest.mark.parametrize("channel", ["exact", "effective"])
def test_one_pass_risk_kernel_matches_the_blas_reference(channel):
    # the numba pass (fields, loss gradient and back-projection per sample) against the numpy
    # reference (two BLAS products around the vectorised loss gradient): the same sums in
    # another order, so they agree to rounding (~1e-16 per term, d = 300 terms per field)
    pb = make_problem(1.2, P03, 300, seed=5, n_test=10)
    rng = np.random.default_rng(7)
    for scale in (0.05, 1.0, 4.0):
        Q = scale * rng.standard_normal(300) + 0.1
        L, g = risk(Q, pb.train, 0.02, channel=channel)
        Lr, gr = risk_reference(Q, pb.train, 0.02, channel=channel)
        assert L == pytest.approx(Lr, rel=1e-12)
        np.testing.assert_allclose(g, gr, rtol=0, atol=1e-12 * np.abs(gr).max())


def test_analytic_gradient_matches_finite_differences():
    pb = make_problem(2.0, A.ERMParams(omega=0.5), 40, seed=1, n_test=10)
    Q = np.random.default_rng(2).standard_normal(40) * 0.8 + 0.3
    _, g = risk(Q, pb.train, 0.01)
    eps = 1e-6
    fd = np.array(
        [
            (risk(Q + eps * e, pb.train, 0.01)[0] - risk(Q - eps * e, pb.train, 0.01)[0])
            / (2 * eps)
            for e in np.eye(40)
        ]
    )
    # central differences: truncation ~ eps^2 |L'''| ~ 1e-12, rounding ~ 1e-16 |L| / eps ~ 1e-10
    np.testing.assert_allclose(g, fd, atol=1e-8 * np.abs(g).max() + 1e-9)


def test_sample_hessian_matches_finite_differences():
    rng = np.random.default_rng(5)
    n = 200
    h = rng.standard_normal((n, 2)) * 1.5
    kap, a, b = rng.uniform(0.1, 1, n), rng.uniform(-0.1, 1.1, n), rng.uniform(0, 1, n)
    g, H = sample_loss_hess(h, kap, a, b)
    _, g2 = sample_loss_grad(h, kap, a, b, 0.0)
    np.testing.assert_allclose(g, g2, rtol=1e-13, atol=1e-15)
    eps = 1e-6
    for k in range(2):
        dh = np.zeros(2)
        dh[k] = eps
        fd = sample_loss_grad(h + dh, kap, a, b, 0)[1] - sample_loss_grad(h - dh, kap, a, b, 0)[1]
        np.testing.assert_allclose(H[:, :, k], fd / (2 * eps), atol=1e-7)
    # gradient of the loss itself
    for k in range(2):
        dh = np.zeros(2)
        dh[k] = eps
        fd = (sample_loss(h + dh, kap, a, b, 0) - sample_loss(h - dh, kap, a, b, 0)) / (2 * eps)
        np.testing.assert_allclose(g[:, k], fd, atol=1e-8)


def test_channel_tends_to_the_effective_loss():
    # E|x1 - x2|^2 = 2 d sigma^2 + |p1 - p2|^2 = 2 d sigma^2 + 4 exactly -> E kappa = sigma^2 + 2/d
    d, n, sigma = 500, 4000, 0.5
    data = sample_data(make_teacher(d, A.ERMParams(omega=0.3, sigma=sigma), rng=0), n, rng=1)
    se = data.kappa.std(ddof=1) / np.sqrt(n)
    assert abs(data.kappa.mean() - (sigma**2 + 2 / d)) < 4 * se  # 4 standard errors
    # a* -> T_11 with O(1/sqrt(d)) fluctuations (cross products z1.z2 ~ sqrt(d) sigma^2)
    dev = np.abs(data.astar - data.T[:, 0, 0])
    assert dev.mean() < 2.0 / np.sqrt(d)
    assert np.abs(data.bstar - data.T[:, 1, 1]).mean() < 2.0 / np.sqrt(d)
    assert 0 <= data.c.min() and data.c.mean() < 10 / d  # residual orthogonal to delta: O(1/d)


def test_overlap_normalisations():
    pb = make_problem(1.0, P03, 200, seed=0, n_test=10)
    t = pb.teacher
    assert t.rho == pytest.approx(0.25, rel=1e-12)  # normalised teacher: rho = sigma^2
    ov = overlaps(t.qstar, t)  # Q = Q*: theta = q = rho = sigma^2 |Q*|^2/d
    assert ov["theta"] == pytest.approx(t.rho) and ov["q"] == pytest.approx(t.rho)
    assert ov["theta_over_sigma2"] == pytest.approx(t.rho / t.sigma**2)
    ov = overlaps(np.full(200, 0.3), t)  # Q = 0.3 1_d: m = 0.3, q = sigma^2 0.09
    assert ov["m"] == pytest.approx(0.3) and ov["q"] == pytest.approx(0.25 * 0.09)
    # local fields: h_l = z_l.Q/sqrt(d) + s_l m, so the mean of h_1 - h_2 over samples is 2m
    h = pb.train.fields(np.full(200, 0.3))
    assert np.mean(h[:, 0] - h[:, 1]) == pytest.approx(0.6, abs=4 * 0.5 * 0.3 * np.sqrt(2 / 200))


def test_gd_reaches_the_lbfgs_minimum():
    # plain GD (lr 0.15) and L-BFGS from the same start land on the same local minimiser
    pb = make_problem(2.0, P03, 60, seed=4, n_test=10)
    Q0 = pb.teacher.qstar.copy()
    Qg, st, _, grms, _ = gradient_descent(Q0, pb.train, 0.01, lr=0.15, steps=20000, tol=1e-7)
    Ql, st2, _, _, _ = lbfgs(Q0, pb.train, 0.01, tol=1e-9)
    assert st == "converged" and st2 == "converged"
    Lg, Ll = risk(Qg, pb.train, 0.01)[0], risk(Ql, pb.train, 0.01)[0]
    # |grad| < 1e-7 RMS and Hessian eigenvalues >= ~lam = 0.01: |Q - Q_min| <~ 1e-5 sqrt(d)
    assert Lg == pytest.approx(Ll, rel=1e-8)
    np.testing.assert_allclose(Qg, Ql, atol=1e-4)


@pytest.mark.parametrize("init", ["semantic", "positional"])
def test_accelerated_methods_converge_where_plain_gd_does_not(init):
    # d = 300, alpha = 2: Nesterov (restart) and Barzilai-Borwein reach RMS gradient 1e-8 in a
    # few hundred iterations; plain GD at lr 0.15 contracts like (1 - 0.15 * 0.01) per step near
    # the minimum and is still at max_iter after the same budget.  All land on the L-BFGS
    # minimiser (gradient 1e-8 and Hessian >= ~lam: |Q - Q_min| <~ 1e-6 sqrt(d) per coordinate)
    d = 300
    pb = make_problem(2.0, P03, d, seed=2, n_test=10)
    Q0 = pb.teacher.qstar.copy() if init == "semantic" else np.full(d, 1 / np.sqrt(d))
    Ql, stl, _, _, _ = lbfgs(Q0, pb.train, 0.01, tol=1e-9)
    assert stl == "converged"
    for fn in (nesterov, barzilai_borwein):
        Q, st, it, grms, trace = fn(Q0, pb.train, 0.01, steps=600, tol=1e-8)
        assert st == "converged" and grms < 1e-8 and it < 600, (fn.__name__, st, it)
        np.testing.assert_allclose(Q, Ql, atol=1e-5)
        assert trace[-1][0] == it and trace[-1][2] == pytest.approx(grms)
    Qg, stg, itg, grms_g, _ = gradient_descent(Q0, pb.train, 0.01, lr=0.15, steps=600, tol=1e-8)
    assert stg == "max_iter" and itg == 600 and grms_g > 1e-7


def test_simulate_gd_result_fields_and_seed_sharing():
    r1 = simulate_gd(1.0, P03, 50, "semantic", seed=7, method="lbfgs", n_test=500)
    r2 = simulate_gd(1.0, P03, 50, "positional", seed=7, method="lbfgs", n_test=500)
    assert r1.status == "converged" and r1.n == 50 and r1.init == "semantic"
    for f in ("q", "m", "theta", "theta_over_sigma2", "eps_t", "eps_g", "iterations"):
        assert f in r1.row()
    assert r1.theta == pytest.approx(0.25 * r1.theta_over_sigma2)
    assert r1.metadata["rho"] == r2.metadata["rho"]  # same teacher for both inits of a seed
    assert r1.eps_g_err > 0


@pytest.mark.parametrize(
    "kw",
    [
        dict(alpha=0),
        dict(omega=1.5),
        dict(sigma=0),
        dict(lam=-1),
        dict(A=[[0.5, 0.6], [0.4, 0.4]]),
        dict(init="nope"),
        dict(d=1),
        dict(lr=-0.1),
        dict(method="adam"),
    ],
)
def test_bad_input(kw):
    model = {"omega": 0.3, **{k: v for k, v in kw.items() if k in ("omega", "sigma", "lam", "A")}}
    args = dict(alpha=1.0, d=20, init="semantic")
    args.update({k: v for k, v in kw.items() if k not in model})
    with pytest.raises(ValueError):
        simulate_gd(
            args.pop("alpha"),
            model,
            args.pop("d"),
            args.pop("init"),
            n_test=10,
            **args,
        )


def test_finite_d_side_accepts_the_asymmetric_A_the_theory_accepts():
    # one ERMParams for theory and simulation: an asymmetric row-stochastic A is valid for both
    # (the data's exact per-sample reduction holds for any A: checked against the full tokens)
    p = A.ERMParams(omega=0.5, A=[[0.3, 0.7], [0.8, 0.2]])
    pb = make_problem(1.5, p, 30, seed=1, keep_targets=True, n_test=10)
    Q = np.random.default_rng(3).standard_normal(30) + 0.1
    assert risk(Q, pb.train, p.lam)[0] == pytest.approx(naive_risk(Q, pb.train, p.lam), rel=1e-12)
    assert np.allclose(pb.train.T.sum(axis=2), 1.0)
    r = simulate_gd(1.5, p, 30, "positional", 1, method="lbfgs", n_test=50)
    assert r.status == "converged" and r.params["A"] == [[0.3, 0.7], [0.8, 0.2]]
