"""The exact reduced chain: kernel vs numpy reference, one step vs the full update decomposed by
hand (the algebra of the docstring proof), and the law of the chain vs the full simulator at small
d (escape-step distributions; the Markov/rotation-invariance part of the proof)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import stats

from theory.ssi import TiedNetwork, UntiedNetwork, ps_model, simulate_reduced, simulate_sgd
from theory.ssi.sgd import _kernels as K

z1, z2 = sp.symbols("z1 z2", real=True)

CASES = [
    (K.HEAD_MATRIX, 0, 2, 4, False, np.array([[1.0], [-1.0]])),
    (
        K.HEAD_FUNCTIONAL,
        0,
        3,
        1,
        False,
        np.linalg.cholesky(np.array([[1, 0.3, 0.1], [0.3, 1, 0.2], [0.1, 0.2, 1.0]])),
    ),
    (K.HEAD_NETWORK, 1, 3, 1, False, np.zeros((3, 0))),
    (K.HEAD_NETWORK, 2, 2, 1, True, np.zeros((2, 0))),
    # activations written as expressions: the kernels call their compiled sigma, sigma'
    (K.HEAD_NETWORK, "x**2+x", 3, 1, False, np.zeros((3, 0))),
    (K.HEAD_NETWORK, "tanh(2*x)-x/3", 2, 1, True, np.zeros((2, 0))),
]


@pytest.mark.parametrize("head,act,L,kout,untied,B", CASES)
def test_reduced_kernel_matches_numpy_reference(head, act, L, kout, untied, B):
    rng = np.random.default_rng(5)
    n, h = 200, 0.3 / 20
    k1 = 1 if untied else 1 + B.shape[1]
    R = L if untied else 1
    C = rng.standard_normal((R, k1)) * 0.3
    rr = np.sqrt(1 - (C**2).sum(1))
    alpha = rng.standard_normal((n, L, k1))
    beta = rng.standard_normal((n, L))
    chi = rng.chisquare(17, (n, R))
    Y = rng.uniform(0, 1, (n, kout))
    Rm = rng.standard_normal((L, L))
    C1, r1, C2, r2 = C.copy(), rr.copy(), C.copy(), rr.copy()
    out1 = K.reduced_chunk(
        C1,
        r1,
        np.ascontiguousarray(B),
        alpha,
        beta,
        chi,
        Y,
        h,
        head,
        Rm,
        *K.act_args(act),
        untied,
        0.6,
    )
    out2 = K.reduced_chunk_reference(C2, r2, B, alpha, beta, chi, Y, h, head, Rm, act, untied, 0.6)
    np.testing.assert_allclose(C1, C2, atol=1e-11)  # 200 steps of O(1) round-off
    np.testing.assert_allclose(r1, r2, atol=1e-11)
    np.testing.assert_allclose(out1[1], out2[1], rtol=1e-10)
    assert out1[0] == out2[0]
    np.testing.assert_allclose((C1**2).sum(1) + r1**2, 1.0, atol=1e-13)


@pytest.mark.parametrize("head,act,L,kout,untied,B", CASES)
def test_one_reduced_step_equals_decomposed_full_step(head, act, L, kout, untied, B):
    """Steps 1-3 of the proof: decompose an explicit sample along (frame, v, rest); the reduced
    update with chi := d |sum_l delta_l x_l^perp|^2 / |delta|^2 reproduces the full update."""
    rng = np.random.default_rng(6)
    d, gamma = 11, 0.7
    k = B.shape[1]
    R = L if untied else 1
    M = np.linalg.qr(rng.standard_normal((d, 1 + k + R)))[0]
    ustar, Qp = M[:, 0].copy(), M[:, 1 : 1 + k].T.copy()
    frame = M[:, : 1 + k]
    C = rng.standard_normal((R, 1 + k)) * 0.4
    rr = np.sqrt(1 - (C**2).sum(1))
    V = M[:, 1 + k :].T  # rest directions of each row
    W = math.sqrt(d) * (C @ frame.T + rr[:, None] * V)
    X = rng.standard_normal((L, d)) / math.sqrt(d)
    zs = X @ (math.sqrt(d) * ustar)
    Y = rng.uniform(0, 1, (1, kout))
    Rm = rng.standard_normal((L, L))
    # full update (numpy reference; G with the exact ustar component -> no replacement)
    Wf, Cf = W.copy(), np.zeros_like(C)
    K.full_chunk_reference(
        Wf,
        ustar,
        Qp,
        B,
        (X * math.sqrt(d))[None],
        zs[None],
        Y,
        gamma,
        head,
        Rm,
        act,
        untied,
        9.0,
        Cf,
    )
    # decomposition of the same sample
    alpha = np.zeros((1, L, 1 + k))
    beta = np.zeros((1, L))
    perp = np.zeros((L, d))
    for l in range(L):
        r = l if untied else 0
        basis = np.column_stack([frame[:, :1] if untied else frame, V[r]])
        coef = basis.T @ X[l]
        alpha[0, l, : basis.shape[1] - 1] = math.sqrt(d) * coef[:-1]
        beta[0, l] = math.sqrt(d) * coef[-1]
        perp[l] = X[l] - basis @ coef
    if untied:
        alpha = alpha[:, :, :1]
        z = alpha[0, :, 0] * C[:, 0] + rr * beta[0]
    else:
        Bf = np.concatenate([np.zeros((L, 1)), B], axis=1)
        z = alpha[0] @ C[0] + Bf @ C[0] + rr[0] * beta[0]
    np.testing.assert_allclose(
        z, np.einsum("ld,ld->l", X, W) if untied else (X + B @ Qp / math.sqrt(d)) @ W[0], atol=1e-12
    )
    _, delta = K.head_grad_reference(head, z, Y[0], Rm, act)
    if untied:
        chi = d * (perp**2).sum(1)[None]
    else:
        chi = np.array([[d * np.sum((delta @ perp) ** 2) / (delta @ delta)]])
    Cr, rrr = C.copy(), rr.copy()
    K.reduced_chunk_reference(
        Cr, rrr, B, alpha, beta, chi, Y, gamma / d, head, Rm, act, untied, 9.0
    )
    np.testing.assert_allclose(Cr, Cf, atol=1e-12)
    rest = Wf - (Wf @ (frame[:, :1] if untied else frame)) @ (frame[:, :1] if untied else frame).T
    np.testing.assert_allclose(rrr, np.linalg.norm(rest, axis=1) / math.sqrt(d), atol=1e-12)


def test_random_start_has_the_uniform_sphere_law():
    """m0 of a uniform point of the sqrt(d)-sphere: m0^2 ~ Beta(1/2, (d-1)/2)."""
    model = TiedNetwork(z1 * z2, L=2, activation="square")
    d = 15
    m0 = np.array([simulate_reduced(model, d, 0.1, s, steps=0).m[0] for s in range(400)])
    # KS p-value threshold 1e-3: a correct sampler fails with probability 0.1%
    assert stats.kstest(m0**2, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3


def _escape_steps(f, model, d, lr, seeds, **kw):
    out = []
    for s in seeds:
        r = f(model, d, lr, s, **kw)
        out.append(r.steps_escape if r.steps_escape is not None else np.inf)
    return np.array(out, dtype=float)


def _assert_same_escape_law(name, model, d, lr, n, **kw):
    """Escape steps of n full-d SGD runs and n reduced-chain runs (other seeds) have the same
    law: two-sample KS p > 1e-3 (a correct chain fails with probability 0.1 %) and means within
    4 combined standard errors."""
    full = _escape_steps(simulate_sgd, model, d, lr, range(n), **kw)
    red = _escape_steps(simulate_reduced, model, d, lr, range(1000, 1000 + n), **kw)
    assert np.all(np.isfinite(full)) and np.all(np.isfinite(red))
    p = stats.ks_2samp(full, red).pvalue
    assert p > 1e-3, (name, p, full.mean(), red.mean())
    se = math.hypot(full.std(ddof=1) / math.sqrt(n), red.std(ddof=1) / math.sqrt(n))
    assert abs(full.mean() - red.mean()) < 4 * se, (name, full.mean(), red.mean(), se)


@pytest.mark.parametrize(
    "name,model,d,lr,kw",
    [
        (
            "tied SIE-2 product target, random start",
            TiedNetwork(z1 * z2, L=2, activation="square"),
            12,
            0.3,
            dict(eta=0.6, max_steps=50_000, t_margin=0.0, margin=0.0),
        ),
        (
            "attention positional-semantic, start at the origin",
            ps_model(1.0, 0.6),
            12,
            0.05,
            dict(start="origin", eta=0.5, max_steps=100_000, t_margin=0.0, margin=0.0),
        ),
        (
            "untied relu, sum target",
            UntiedNetwork((z1 + z2) / sp.sqrt(2), L=2, activation="relu"),
            10,
            0.2,
            dict(eta=0.6, max_steps=50_000, t_margin=0.0, margin=0.0),
        ),
    ],
)
@pytest.mark.parametrize("fast", [True, False], ids=["block-generator", "scalar-generator"])
def test_escape_step_distribution_full_vs_reduced(name, model, d, lr, kw, fast, monkeypatch):
    """Both full-d kernels (the SIMD block generator + fused passes, forced here at small d, and
    the scalar per-draw generator) against the exact reduced chain."""
    from theory.ssi.sgd import full as sgd_mod

    monkeypatch.setattr(sgd_mod, "FAST_MIN_D", 0 if fast else 10**9)
    n = 120
    _assert_same_escape_law(name, model, d, lr, n, **kw)


def test_reduced_cost_does_not_grow_with_d():
    """Same seed, d = 10^3 vs 10^6: the chain runs (no d-sized arrays) and the escape of the
    realisable linear target takes ~ sqrt(d)-scaled steps (m0 ~ 1/sqrt(d), drift O(1/d))."""
    model = TiedNetwork((z1 + z2) / sp.sqrt(2), L=2, activation="linear")
    r = simulate_reduced(model, 10**6, 0.5, 0, m0=1e-3, eta=2e-3, t_margin=0.0, margin=0.0)
    assert r.status == "converged"
    # ODE: m' = 2 (1 - m^2) - noise ~ 2 near 0 -> t = 1e-3 / 2, steps = t d / gamma = 1000
    # (noise term gamma/2 K m ~ 1e-3 relative): within 20% (diffusion ~ sqrt(nu) gamma/d)
    assert r.steps_escape == pytest.approx(1000, rel=0.2)


@pytest.mark.parametrize(
    "name,model,lr,kw",
    [
        (
            "tied SIE-2 product target, random start",
            TiedNetwork(z1 * z2, L=2, activation="square"),
            0.3,
            dict(eta=0.4, max_steps=200_000, t_margin=0.0, margin=0.0),
        ),
        (
            "attention positional-semantic, start at the origin",
            ps_model(1.0, 0.6),
            0.05,
            dict(start="origin", eta=0.4, max_steps=400_000, t_margin=0.0, margin=0.0),
        ),
    ],
)
def test_escape_step_distribution_full_vs_reduced_d64(name, model, lr, kw):
    """d = 64: the default full simulator (block generator, no forcing; rows padded 64 -> 128)
    against the exact reduced chain, ~4e3 / ~2.4e4 steps per run."""
    from theory.ssi.sgd import full as sgd_mod

    d, n = 64, 120
    assert d >= sgd_mod.FAST_MIN_D
    _assert_same_escape_law(name, model, d, lr, n, **kw)


def _numpy_flat_untied_escapes(L, d, lr, eta, n_runs, max_steps, rng):
    """Independent full-d online SGD of the untied relu network on sum_l He2(z_l)/sqrt(2) with W
    renormalised as ONE vector of R^{L d} to norm sqrt(L d), from uniform starts on that sphere;
    all runs advance together.  Returns the first step with m_untied >= eta (0 if at the start)."""
    W = rng.standard_normal((n_runs, L, d))
    W *= math.sqrt(L * d) / np.linalg.norm(W.reshape(n_runs, -1), axis=1)[:, None, None]
    m2 = (W[:, :, 0] ** 2 / d).mean(axis=1)  # w* = sqrt(d) e_0: m_l = w_l[0] / sqrt(d)
    esc = np.where(m2 >= eta**2, 0.0, np.inf)
    for t in range(1, max_steps + 1):
        X = rng.standard_normal((n_runs, L, d)) / math.sqrt(d)
        zs = X[:, :, 0] * math.sqrt(d)
        y = (zs**2 - 1).sum(axis=1) / math.sqrt(2)
        u = np.einsum("sld,sld->s", X, W) / math.sqrt(L)
        delta = 2 * (np.maximum(u, 0) - y) * (u > 0)  # dl/du
        W -= lr * (delta / math.sqrt(L))[:, None, None] * X
        W *= math.sqrt(L * d) / np.linalg.norm(W.reshape(n_runs, -1), axis=1)[:, None, None]
        m2 = (W[:, :, 0] ** 2 / d).mean(axis=1)
        esc = np.where(np.isinf(esc) & (m2 >= eta**2), float(t), esc)
        if np.all(np.isfinite(esc)):
            break
    return esc


def test_flattened_untied_chain_has_the_law_of_full_flattened_sgd():
    """The exact reduced chain of the flattened untied network (UntiedNetwork(...,
    normalisation="flat"), random start uniform on the sphere of R^{L d}) against an
    independent numpy simulation of the full d-dimensional flattened SGD at small d: escape-step
    distributions agree (KS p > 1e-3, means within 4 combined SE).  At these sizes the per-row
    normalisation escapes ~30 % later (about 4-5 SE with 600 runs), so the check sees the
    normalisation."""
    L, d, lr, eta, n = 4, 6, 0.3, 0.6, 600
    full = _numpy_flat_untied_escapes(L, d, lr, eta, n, 20_000, np.random.default_rng(11))
    tgt = "(" + " + ".join(f"He2(z{i + 1})" for i in range(L)) + ")/sqrt(2)"
    flat = UntiedNetwork(tgt, L, "relu", normalisation="flat")
    kw = dict(eta=eta, max_steps=20_000, margin=0.0, t_margin=0.0, n_record=2)
    red = np.array([simulate_reduced(flat, d, lr, s, **kw).steps_escape for s in range(n)], float)
    assert np.all(np.isfinite(full)) and np.all(np.isfinite(red))
    assert stats.ks_2samp(full, red).pvalue > 1e-3
    se = math.hypot(full.std(ddof=1), red.std(ddof=1)) / math.sqrt(n)
    assert abs(full.mean() - red.mean()) < 4 * se, (full.mean(), red.mean(), se)
