"""Finite-d simulator of the general attention model (docs/attention.md §10): any L, student
rank r, teacher rank r_t, row-stochastic A and positional encodings with Gram matrix G.

Normalisations: those of :mod:`theory.attention.general` (the theory it is compared with).
* Encodings ``P`` (L, d) with ``P Pᵀ = G`` exactly (:func:`encodings`): P = W Λ^{1/2} Uᵀ with
  G = W Λ Wᵀ and U (d, rank G) orthonormal, first column 1_d/√d — so the reference
  G = [[1, -1], [-1, 1]] gives p_{1,2} = ±1_d/√d as in :mod:`theory.attention.finite_d.data`.
* Teacher ``Q*`` (d, r_t) = √d × (orthonormal columns, uniform direction) × (ρ/σ²)^{1/2}, so
  σ² Q*ᵀQ*/d = ρ exactly (default ρ = σ² I: the theory's value, no teacher-norm fluctuation).
* Samples: Z (n, L, d) with i.i.d. N(0, σ²) entries, X = Z + P, H* = Z Q*/√d,
  T = (1-ω) softmax_row(H* H*ᵀ) + ω A, y = T Z.
* Student fields H = X Q/√d (n, L, r), S = softmax_row(H Hᵀ), f_Q(X) = S X.

Risk (EXACT at finite d; the per-sample loss only needs L×L Gram matrices):
    ||S X - T Z||_F² = tr(S Gxx Sᵀ) - 2 Σ S ∘ C + tr(T Gzz Tᵀ),  Gxx = X Xᵀ, C = T Z Xᵀ,
    L(Q) = Σ_μ ||S_μ X_μ - T_μ Z_μ||² / (2d) + (λ/2)||Q||_F²,
    ∂/∂S = (S Gxx - C)/d,  ∂/∂(H Hᵀ) = S ∘ (Γ - rowsum(Γ ∘ S)),  ∂/∂H = (W + Wᵀ) H,
    ∂/∂Q = Σ_μ X_μᵀ ∂H_μ / √d + λ Q.
Reported (same names as :class:`theory.attention.general.GeneralERMResult`): ε_t = L(Q̂)/d,
ε_g (fresh samples) with its standard error, q = σ² QᵀQ/d (r×r), m = P Q/√d (L×r: m_ℓ =
(√d p_ℓ)ᵀQ/d), θ = σ² QᵀQ*/d (r×r_t).  Q → Q O (O orthogonal, incl. -1) is a symmetry: compare
invariants.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from theory.attention.channel import attention
from theory.attention.general.channel import teacher_matrix
from theory.attention.general.params import GeneralParams, as_params
from theory.attention.params import ERMParams
from theory.results import Result
from theory.rng import RNGLike, as_rng

INITS = ("semantic", "positional", "random")


def _leading_direction(G):
    lam, W = np.linalg.eigh(G)
    v = W[:, -1]
    j = np.flatnonzero(np.abs(v) > 1e-12)[0]
    return v * np.sign(v[j])


def encodings(G, d: int, rng: RNGLike = 0) -> np.ndarray:
    """Encodings P (L, d) with P Pᵀ = G (see module docstring); U's first column is 1_d/√d, the
    others are a random orthonormal completion drawn from ``rng``."""
    G = np.asarray(G, float)
    lam, W = np.linalg.eigh(G)
    order = np.argsort(lam)[::-1]
    lam, W = lam[order], W[:, order]
    keep = lam > 1e-12 * max(1.0, lam.max())
    lam, W = lam[keep], W[:, keep]
    for j in range(W.shape[1]):
        i = np.flatnonzero(np.abs(W[:, j]) > 1e-12)[0]
        W[:, j] *= np.sign(W[i, j])
    k = lam.size
    if k > d:
        raise ValueError(f"d = {d} is smaller than the rank {k} of G")
    M = np.empty((d, k))
    M[:, 0] = 1.0 / math.sqrt(d)
    if k > 1:
        M[:, 1:] = as_rng(rng).standard_normal((d, k - 1))
    U, _ = np.linalg.qr(M)
    U *= np.sign(U[0, 0]) * np.sign(M[0, 0])  # keep the first column = +1/√d
    U[:, 0] = 1.0 / math.sqrt(d)
    return (W * np.sqrt(lam)) @ U.T


@dataclass(frozen=True)
class GeneralData:
    """n samples: X (n, L, d), T (n, L, L), Gxx = X Xᵀ, C = T Z Xᵀ, c0 = tr(T Z Zᵀ Tᵀ)
    (n,), H* (n, L, r_t); Z only when ``keep_tokens`` (tests)."""

    X: np.ndarray
    T: np.ndarray
    Gxx: np.ndarray
    C: np.ndarray
    c0: np.ndarray
    hstar: np.ndarray
    Z: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[2]


@dataclass(frozen=True)
class GeneralProblem:
    params: GeneralParams
    alpha: float
    seed: int
    P: np.ndarray
    qstar: np.ndarray
    train: GeneralData
    test_seed: np.random.SeedSequence
    n_test: int

    @property
    def d(self) -> int:
        return self.P.shape[1]


def sample_data(
    p: GeneralParams, P, qstar, n: int, rng: RNGLike, *, keep_tokens=False
) -> GeneralData:
    gen = as_rng(rng)
    L, d = P.shape
    Z = gen.standard_normal((n, L, d)) * p.sigma
    hstar = (Z.reshape(n * L, d) @ qstar).reshape(n, L, -1) / math.sqrt(d)
    T = teacher_matrix(hstar, p)
    Gzz = np.einsum("nld,nkd->nlk", Z, Z)
    ZP = np.einsum("nld,kd->nlk", Z, P)  # z_l . p_k
    Gzx = Gzz + ZP  # z_l . x_k
    Gxx = Gzz + ZP + np.swapaxes(ZP, 1, 2) + (P @ P.T)[None]
    C = T @ Gzx
    c0 = np.einsum("nlk,nkj,nlj->n", T, Gzz, T)
    X = Z + P[None] if keep_tokens else np.add(Z, P[None], out=Z)
    return GeneralData(X=X, T=T, Gxx=Gxx, C=C, c0=c0, hstar=hstar, Z=Z if keep_tokens else None)


def make_problem(
    alpha,
    params: ERMParams | Mapping | None = None,
    d=200,
    seed=0,
    *,
    n_test=5000,
    keep_tokens=False,
    **overrides,
) -> GeneralProblem:
    """Encodings, teacher and ``n = round(alpha d)`` training samples from ``seed`` (independent
    SeedSequence streams: encodings, teacher, train, test, init)."""
    p = as_params(params, **overrides)
    if alpha <= 0 or not np.isfinite(alpha):
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    if int(d) != d or d < p.L + 1:
        raise ValueError(f"d must be an integer > L, got {d!r}")
    if int(n_test) < 2:
        raise ValueError(f"n_test must be >= 2 to estimate an error bar, got {n_test}")
    d = int(d)
    n = max(1, int(round(alpha * d)))
    s_enc, s_teacher, s_train, s_test, _ = np.random.SeedSequence(int(seed)).spawn(5)
    P = encodings(p.G_array, d, np.random.default_rng(s_enc))
    U, _ = np.linalg.qr(np.random.default_rng(s_teacher).standard_normal((d, p.r_t)))
    root = np.linalg.cholesky(p.rho_array / p.s2).T  # Rᵀ R = ρ/σ²
    qstar = math.sqrt(d) * U @ root
    train = sample_data(p, P, qstar, n, np.random.default_rng(s_train), keep_tokens=keep_tokens)
    return GeneralProblem(
        params=p,
        alpha=float(alpha),
        seed=int(seed),
        P=P,
        qstar=qstar,
        train=train,
        test_seed=s_test,
        n_test=int(n_test),
    )


def sample_losses(Q: np.ndarray, data: GeneralData) -> np.ndarray:
    """Per-sample ||S X - T Z||²/(2d) from the Gram matrices, shape (n,)."""
    n, L, d = data.X.shape
    H = (data.X.reshape(n * L, d) @ Q).reshape(n, L, -1) / math.sqrt(d)
    return matrix_losses(attention(H), data)


def matrix_losses(S: np.ndarray, data: GeneralData) -> np.ndarray:
    """Per-sample ||S X - T Z||²/(2d) for mixing matrices S (n, L, L) or one S (L, L)."""
    S = np.broadcast_to(S, data.T.shape)
    quad = np.einsum("nij,njk,nik->n", S, data.Gxx, S)
    return (quad - 2 * (S * data.C).sum(axis=(1, 2)) + data.c0) / (2 * data.d)


def risk(Q: np.ndarray, data: GeneralData, lam: float) -> tuple[float, np.ndarray]:
    """(L(Q), ∂L/∂Q): the exact empirical risk (ridge included) and its gradient (d, r)."""
    n, L, d = data.X.shape
    Xf = data.X.reshape(n * L, d)
    H = (Xf @ Q).reshape(n, L, -1) / math.sqrt(d)
    S = attention(H)
    SG = S @ data.Gxx
    val = ((SG * S).sum() - 2 * (S * data.C).sum() + data.c0.sum()) / (2 * d)
    Gam = (SG - data.C) / d
    W = S * (Gam - (Gam * S).sum(axis=-1, keepdims=True))
    dH = (W + np.swapaxes(W, 1, 2)) @ H
    grad = Xf.T @ dH.reshape(n * L, -1) / math.sqrt(d)
    return val + 0.5 * lam * (Q * Q).sum(), grad + lam * Q


def naive_risk(Q: np.ndarray, data: GeneralData, p: GeneralParams) -> float:
    """Reference: Σ ||softmax(XQ(XQ)ᵀ/d) X - T Z||²/(2d) + (λ/2)|Q|² from the full tokens."""
    if data.Z is None:
        raise ValueError("naive_risk needs the tokens: make the problem with keep_tokens=True")
    d = data.d
    XQ = data.X @ Q
    S = attention(XQ / math.sqrt(d))
    R = S @ data.X - data.T @ data.Z
    return float((R**2).sum() / (2 * d) + 0.5 * p.lam * (Q * Q).sum())


def overlaps(Q: np.ndarray, prob: GeneralProblem) -> dict:
    d, s2 = prob.d, prob.params.s2
    return dict(q=s2 * Q.T @ Q / d, m=prob.P @ Q / math.sqrt(d), theta=s2 * Q.T @ prob.qstar / d)


def test_error(Q: np.ndarray, prob: GeneralProblem, chunk: int = 1000) -> tuple[float, float]:
    """ε_g of the student Q on the problem's fresh test samples: (mean, standard error)."""
    return _test_mean(lambda batch: sample_losses(Q, batch), prob, chunk)


def _test_mean(losses, prob: GeneralProblem, chunk: int = 1000) -> tuple[float, float]:
    gen = np.random.default_rng(prob.test_seed)
    vals = []
    k = 0
    while k < prob.n_test:
        nb = min(chunk, prob.n_test - k)
        vals.append(losses(sample_data(prob.params, prob.P, prob.qstar, nb, gen)))
        k += nb
    v = np.concatenate(vals)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))


def initial_weights(init: str, prob: GeneralProblem, init_scale: float = 1.0) -> np.ndarray:
    """semantic: Q[:, :min(r, r_t)] = Q*; positional: Q[:, 0] = 0.5 √d u (u the unit direction of
    the leading encoding combination Σ_ℓ v_ℓ p_ℓ, v the top eigenvector of G: reference
    Q = 0.5·1_d, m = ±0.5); random: 0.1 N(0, 1).  Columns not set are 0.1 N(0, 1)."""
    p, d = prob.params, prob.d
    gen = np.random.default_rng(np.random.SeedSequence(prob.seed).spawn(5)[4])
    Q = 0.1 * gen.standard_normal((d, p.r))
    if init == "semantic":
        k = min(p.r, p.r_t)
        Q[:, :k] = prob.qstar[:, :k]
    elif init == "positional":
        u = prob.P.T @ _leading_direction(p.G_array)
        Q[:, 0] = 0.5 * math.sqrt(d) * u / np.linalg.norm(u)
    elif init != "random":
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    return init_scale * Q


@dataclass(frozen=True, kw_only=True)
class GeneralSimResult(Result):
    """One finite-d L-BFGS run; field names as in ``GeneralERMResult`` (module docstring)."""

    alpha: float
    omega: float
    d: int
    n: int
    seed: int
    init: str
    q: np.ndarray
    m: np.ndarray
    theta: np.ndarray
    eps_t: float
    eps_g: float
    eps_g_err: float
    grad_rms: float
    iterations: int
    method: str = "lbfgs"


def simulate(
    alpha,
    params: ERMParams | Mapping | None = None,
    d=200,
    init="semantic",
    seed=0,
    *,
    n_test=5000,
    steps=5000,
    tol=1e-7,
    init_scale=1.0,
    problem: GeneralProblem | None = None,
    Q0: np.ndarray | None = None,
    **overrides,
) -> GeneralSimResult:
    """Minimise the exact empirical risk by L-BFGS (scipy) from ``init``; one seed.

    ``tol``: stop when the max |gradient| entry < tol (status "converged", else "max_iter").
    For a given seed the problem (encodings, teacher, data, test set) is the same whatever
    ``init``, so the inits of one seed can be compared (empirical global minimiser).
    """
    from scipy.optimize import minimize

    if problem is None:
        problem = make_problem(alpha, params, d, seed, n_test=n_test, **overrides)
    p = problem.params
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    Q0 = initial_weights(init, problem, init_scale) if Q0 is None else np.asarray(Q0, float)
    dd, r = problem.d, p.r
    t0 = time.perf_counter()

    def fun(qf):
        v, g = risk(qf.reshape(dd, r), problem.train, p.lam)
        return v, g.ravel()

    res = minimize(
        fun,
        Q0.ravel(),
        jac=True,
        method="L-BFGS-B",
        options=dict(maxiter=int(steps), gtol=tol, ftol=0.0, maxcor=30),
    )
    Q = res.x.reshape(dd, r)
    L_, g = risk(Q, problem.train, p.lam)
    gmax = float(np.abs(g).max())
    status = "converged" if gmax < tol * 10 else "max_iter"
    if not np.isfinite(L_):
        status = "nan"
    eg, ege = test_error(Q, problem)
    ov = overlaps(Q, problem)
    return GeneralSimResult(
        alpha=problem.alpha,
        omega=p.omega,
        d=dd,
        n=problem.train.n,
        seed=problem.seed,
        init=init,
        eps_t=L_ / dd,
        eps_g=eg,
        eps_g_err=ege,
        grad_rms=float(np.linalg.norm(g) / math.sqrt(dd)),
        iterations=int(res.nit),
        status=status,
        message=f"L-BFGS: {res.message}; max|grad| {gmax:.2e}",
        params=dict(
            p.to_dict(),
            alpha=problem.alpha,
            d=dd,
            seed=problem.seed,
            init=init,
            n_test=problem.n_test,
        ),
        metadata=dict(method="lbfgs", wall_time_s=time.perf_counter() - t0),
        **ov,
    )


@dataclass(frozen=True, kw_only=True)
class FixedMSimResult(Result):
    """L-BFGS minima of the empirical risk restricted to PQ/√d = m and Q*ᵀQ = 0 (r = 1), from
    ``restarts`` independent random starts on ONE data set.

    Per restart: ``eps_t``, ``eps_g``, ``q`` (lists).  ``overlap`` (R×R): σ² Q_aᵀQ_b/d of
    the parts of the minimisers orthogonal to the constraint directions (diagonal = their
    self-overlaps).  A replica-symmetric landscape (one minimum, up to O(1/√d)) has all
    entries equal; distinct minima show off-diagonal entries below the diagonal.  (With m = 0
    the constraint is symmetric under Q → -Q: compare |overlap|.)
    """

    alpha: float
    omega: float
    d: int
    n: int
    seed: int
    m: np.ndarray
    eps_t: list
    eps_g: list
    q: list
    overlap: np.ndarray
    grad_max: float

    @property
    def mutual_ratio(self) -> float:
        """Mean off-diagonal |overlap| over the mean diagonal (1 for a unique minimum)."""
        O = np.asarray(self.overlap)
        R = O.shape[0]
        if R < 2:
            return math.nan
        off = np.abs(O[~np.eye(R, dtype=bool)]).mean()
        return float(off / np.diag(O).mean())


def simulate_fixed_m(
    alpha,
    m,
    params: ERMParams | Mapping | None = None,
    d=400,
    seed=0,
    *,
    restarts=3,
    n_test=2000,
    steps=20000,
    tol=1e-7,
    init_scale=0.1,
    theta_free=False,
    theta0=None,
    problem: GeneralProblem | None = None,
    **overrides,
) -> FixedMSimResult:
    """L-BFGS on the exact risk restricted to the affine subspace {PQ/√d = m, Q*ᵀQ = 0}
    (r = 1): Q = Q₀ + N y with Q₀ the minimum-norm point of the subspace and N an orthonormal
    basis of the null space of the constraints; ``restarts`` random starts y ~ init_scale ·
    N(0, 1) on the same data.  The finite-d counterpart of
    :func:`theory.attention.general.fixed_m_point`.

    ``theta_free``: drop the constraint Q*ᵀQ = 0 (only PQ/√d = m: the semantic sector for
    m = 0); the starts are then Q* ρ⁻¹ θ0 (θ0 (r_t,), default 0: a start of overlap θ0 with
    the teacher) plus the random part, and ``overlap`` includes the teacher direction."""
    from scipy.optimize import minimize

    if problem is None:
        problem = make_problem(alpha, params, d, seed, n_test=n_test, **overrides)
    p = problem.params
    if p.r != 1:
        raise ValueError(f"simulate_fixed_m needs student rank r = 1, got r = {p.r}")
    if int(restarts) < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    dd = problem.d
    m = np.asarray(m, float).reshape(-1)
    if m.shape != (p.L,):
        raise ValueError(f"m must have L = {p.L} entries, got {m.size}")
    if theta_free:
        C, c = problem.P / math.sqrt(dd), m
    else:
        C = np.vstack([problem.P / math.sqrt(dd), p.s2 * problem.qstar.T / dd])
        c = np.concatenate([m, np.zeros(p.r_t)])
    Q0 = np.linalg.lstsq(C, c, rcond=None)[0]
    if np.abs(C @ Q0 - c).max() > 1e-9 * (1 + np.abs(m).max()):
        raise ValueError(
            "m is not reachable: it must lie in the range of the encodings' Gram "
            "matrix G (simplex encodings: entries summing to zero)"
        )
    _, s, Wt = np.linalg.svd(C, full_matrices=True)
    k = int((s > 1e-10 * s.max()).sum())
    N = Wt[k:].T
    y_center = np.zeros(N.shape[1])
    if theta_free and theta0 is not None:
        th0 = np.asarray(theta0, float).reshape(p.r_t)
        y_center = N.T @ (problem.qstar @ np.linalg.solve(p.rho_array, th0))

    def fun(y):
        v, g = risk((Q0 + N @ y)[:, None], problem.train, p.lam)
        return v, N.T @ g[:, 0]

    gen = np.random.default_rng(np.random.SeedSequence(problem.seed).spawn(6)[5])
    t0 = time.perf_counter()
    Ys, rows, gmax, msgs = [], [], 0.0, []
    for _ in range(int(restarts)):
        y0 = y_center + init_scale * gen.standard_normal(N.shape[1])
        res = minimize(
            fun,
            y0,
            jac=True,
            method="L-BFGS-B",
            options=dict(maxiter=int(steps), gtol=tol, ftol=0.0, maxcor=30),
        )
        Q = (Q0 + N @ res.x)[:, None]
        L_, g = risk(Q, problem.train, p.lam)
        gmax = max(gmax, float(np.abs(N.T @ g[:, 0]).max()))
        msgs.append(str(res.message))
        Ys.append(res.x)
        eg_, _ = test_error(Q, problem)
        rows.append((L_ / dd, eg_, float(p.s2 * (Q * Q).sum() / dd)))
    Y = np.array(Ys)
    overlap = p.s2 * Y @ Y.T / dd  # N orthonormal: (N y_a)·(N y_b) = y_a·y_b
    status = "converged" if gmax < 10 * tol else "max_iter"
    return FixedMSimResult(
        alpha=problem.alpha,
        omega=p.omega,
        d=dd,
        n=problem.train.n,
        seed=problem.seed,
        m=m,
        eps_t=[float(r_[0]) for r_ in rows],
        eps_g=[float(r_[1]) for r_ in rows],
        q=[r_[2] for r_ in rows],
        overlap=overlap,
        grad_max=gmax,
        status=status,
        message="; ".join(sorted(set(msgs))),
        params=dict(
            p.to_dict(),
            alpha=problem.alpha,
            d=dd,
            seed=problem.seed,
            restarts=int(restarts),
            m=m.tolist(),
            theta_free=bool(theta_free),
        ),
        metadata=dict(method="lbfgs-constrained", wall_time_s=time.perf_counter() - t0),
    )


@dataclass(frozen=True, kw_only=True)
class LinearFitResult(Result):
    """The linear baseline f_B(X) = B X fitted at finite d (no ridge: L² parameters, n L d
    equations): ``B`` (L×L), ε_t = L(B)/d and ε_g on fresh samples with its standard error."""

    alpha: float
    omega: float
    d: int
    n: int
    seed: int
    B: np.ndarray
    eps_t: float
    eps_g: float
    eps_g_err: float


def linear_fit(
    alpha,
    params: ERMParams | Mapping | None = None,
    d=200,
    seed=0,
    *,
    n_test=5000,
    problem: GeneralProblem | None = None,
    **overrides,
) -> LinearFitResult:
    """Least squares for B: min_B Σ_μ ||B X_μ - y_μ||²/(2d), i.e. B (Σ_μ X_μX_μᵀ) = Σ_μ T_μZ_μX_μᵀ
    (the Gram matrices the risk already keeps).  The finite-d counterpart of
    :func:`theory.attention.general.linear_baseline`."""
    if problem is None:
        problem = make_problem(alpha, params, d, seed, n_test=n_test, **overrides)
    tr = problem.train
    B = np.linalg.solve(tr.Gxx.sum(axis=0).T, tr.C.sum(axis=0).T).T
    eps_t = float(matrix_losses(B, tr).sum() / problem.d)
    eg, ege = _test_mean(lambda batch: matrix_losses(B, batch), problem)
    p = problem.params
    return LinearFitResult(
        alpha=problem.alpha,
        omega=p.omega,
        d=problem.d,
        n=tr.n,
        seed=problem.seed,
        B=B,
        eps_t=eps_t,
        eps_g=eg,
        eps_g_err=ege,
        status="ok",
        params=dict(p.to_dict(), alpha=problem.alpha, d=problem.d, seed=problem.seed),
        metadata=dict(method="least-squares", n_test=problem.n_test),
    )
