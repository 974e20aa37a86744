"""The faster routes of the general (rank-r) solver give what the plain routes give.

* the analytic Newton Hessian of the prox (``_kernels.obj_hess``) against central differences
  of the analytic gradient, and the prox at QMC nodes by the analytic-Hessian Newton against
  the original central-difference Newton (``prox_batch_fd``): same minimisers;
* a rank-2 fixed point with error bars on the fast kernel against the same solve on the
  central-difference kernel.
"""

import numpy as np
import pytest

from theory.attention import general as pg
from theory.attention.general import _kernels as K
from theory.attention.general import channel as gc
from theory.attention.general.state_equations import fields


@pytest.mark.parametrize("L,r,rt", [(2, 1, 1), (2, 2, 1), (3, 2, 2)])
def test_analytic_hessian_matches_finite_differences_of_the_gradient(L, r, rt):
    p = pg.GeneralParams(L=L, r=r, r_t=rt)
    rng = np.random.default_rng(3 + L + r)
    n = L * r
    for _ in range(10):
        x = rng.standard_normal((L, r))
        w = rng.standard_normal((L, r))
        T = gc.teacher_matrix(0.5 * rng.standard_normal((1, L, rt)), p)[0]
        A = rng.standard_normal((r, r))
        Vinv = A @ A.T + 0.3 * np.eye(r)
        M, S, W = (np.empty((L, L)) for _ in range(3))
        J, Hm = np.empty((L, L)), np.empty((L, L))
        E, H = np.empty((L, n)), np.empty((n, n))
        K.obj_hess(x, T, Vinv, p.s2, H, M, S, W, J, Hm, E)
        Hfd = np.empty((n, n))
        gp, gm = np.empty((L, r)), np.empty((L, r))
        h = 1e-6
        for j in range(n):
            xp, xm = x.copy(), x.copy()
            xp.flat[j] += h
            xm.flat[j] -= h
            K.obj_grad(xp, w, T, Vinv, p.s2, gp, M, S, W)
            K.obj_grad(xm, w, T, Vinv, p.s2, gm, M, S, W)
            Hfd[:, j] = (gp - gm).ravel() / (2 * h)
        assert np.allclose(H, H.T, atol=1e-14)
        assert np.allclose(H, Hfd, atol=1e-7, rtol=1e-6)


def test_prox_with_the_analytic_hessian_finds_the_same_minimisers():
    p = pg.GeneralParams(L=2, r=2, r_t=1, omega=0.3)
    nodes = pg.make_nodes(p, 2**9, 2, "qmc", 0)
    o = dict(
        q=np.array([[0.03, 0.004], [0.004, 0.02]]),
        m=np.array([[0.01, 0.2], [-0.01, -0.2]]),
        theta=np.array([[0.05], [0.01]]),
        V=np.array([[12.0, 1.0], [1.0, 9.0]]),
    )
    w, hs, _, _ = fields(o, p, nodes)
    wf = np.ascontiguousarray(w.reshape(-1, 2, 2))
    hf = np.ascontiguousarray(hs.reshape(-1, 2, 1))
    T = np.ascontiguousarray(gc.teacher_matrix(hf, p))
    Vinv = np.ascontiguousarray(np.linalg.inv(o["V"]))
    for warm, have in ((wf, False), (0.9 * wf, True)):
        xa, va, oka = K.prox_batch(wf, T, hf, Vinv, p.s2, np.ascontiguousarray(warm), have)
        xb, vb, okb = K.prox_batch_fd(wf, T, hf, Vinv, p.s2, np.ascontiguousarray(warm), have)
        assert oka.all() and okb.all()
        assert np.abs(va - vb).max() < 1e-12
        assert np.abs(xa - xb).max() < 1e-7


@pytest.mark.parametrize("r,branch", [(1, "semantic"), (2, "positional")])
def test_fixed_point_on_the_fast_kernel_is_the_central_difference_one(monkeypatch, r, branch):
    from theory.attention.general import state_equations as gs

    p = pg.GeneralParams(L=2, r=r, r_t=1, omega=0.3)
    kw = dict(n=2**8, n_rep=2, tol=1e-6, error=False)
    fast = pg.fixed_point(2.0, p, branch, **kw)
    monkeypatch.setattr(gs, "_K", type("K", (), {"prox_batch": staticmethod(K.prox_batch_fd)}))
    plain = pg.fixed_point(2.0, p, branch, **kw)
    assert fast.status == plain.status == "converged" and fast.branch == plain.branch == branch
    # both converged to 1e-6 on maps equal to ~1e-12: the same fixed point
    for f in ("eps_g", "eps_t"):
        assert getattr(fast, f) == pytest.approx(getattr(plain, f), rel=1e-5)
    a, b = fast.invariants(), plain.invariants()
    for k in ("q_eig", "theta_sv", "mm_eig"):
        assert np.allclose(a[k], b[k], rtol=1e-4, atol=1e-9), k
