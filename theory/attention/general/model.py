"""Generalised replica state equations of the positional-semantic attention model (spec §8).

Any sequence length L >= 2, student rank r >= 1, teacher rank r_t >= 1, any row-stochastic L×L
teacher matrix A and any positional encodings (through their Gram matrix G).  For L = 2,
r = r_t = 1, A = [[0.6, 0.4], [0.4, 0.6]] and G = [[1, -1], [-1, 1]] the equations reduce
EXACTLY to those of spec §3 (``theory.attention.model``, the independent reference
of the tests).  The extension is derived here, not published: it is validated against finite-d
L-BFGS on the empirical risk (``theory.attention.finite_d.general``, tests/test_ps_general.py).

Model and normalisations (stated once)
--------------------------------------
Tokens x_ℓ = p_ℓ + z_ℓ ∈ R^d, z_ℓ ~ N(0, σ² I_d), ℓ = 1..L.  Encodings p_ℓ with Gram matrix
``G[ℓ, ℓ'] = p_ℓ · p_ℓ' = (√d p_ℓ)·(√d p_ℓ')/d`` (symmetric PSD, L×L; unit-norm encodings have
G_ℓℓ = 1; the reference p_{1,2} = ±1_d/√d gives G = [[1, -1], [-1, 1]]).  Student Q ∈ R^{d×r},
local fields H = X Q/√d ∈ R^{L×r}, f_Q(X) = softmax_row(H Hᵀ) X.  Teacher Q* ∈ R^{d×r_t},
H* = Z Q*/√d, y = [(1-ω) softmax_row(H* H*ᵀ) + ω A] Z.  Ridge λ.  Per-sample effective loss
(large d):  ℓ(x; h*) = (σ²/2) ||S(x) - T(h*)||_F²,  S(x) = softmax_row(x xᵀ) for x ∈ R^{L×r}.

Order parameters (matrices; r×r, L×r, r×r_t, r×r):
    q = σ² QᵀQ/d,   m_ℓ = (√d p_ℓ)ᵀQ/d ∈ R^r (row ℓ of m),   θ = σ² QᵀQ*/d,   V,
    ρ = σ² Q*ᵀQ*/d (r_t×r_t, → σ² I for an i.i.d. N(0,1) teacher).
Local fields at a quadrature node (ξ_ℓ ~ N(0, I_r), η_ℓ ~ N(0, I_{r_t}), all independent):
    ω_ℓ = q^{1/2} ξ_ℓ + m_ℓ,     h*_ℓ = θᵀ q^{-1/2} ξ_ℓ + c η_ℓ,   c = (ρ - θᵀ q^{-1} θ)^{1/2}
(symmetric square roots), so that Cov(q^{1/2}ξ, h*) = θ and Var h* = ρ.

Derivation of the state equations
---------------------------------
RS zero-temperature free energy (the ridge part has the same Gaussian form as for r = 1; the
teacher and encodings are orthogonal to the noise to leading order):

    Φ = ½ tr(V̂ q) - ½ tr(q̂ V) - Σ_ℓ m_ℓ·m̂_ℓ - tr(θᵀ θ̂)
        + ½ tr[(σ² q̂ + Σ_{ℓℓ'} G_ℓℓ' m̂_ℓ m̂_ℓ'ᵀ + σ² θ̂ ρ θ̂ᵀ) K]  -  α E[M],
    K = (λ I_r + σ² V̂)^{-1},
    M(ω, h*) = min_x { Σ_ℓ (x_ℓ - ω_ℓ)ᵀ V^{-1} (x_ℓ - ω_ℓ)/2 + ℓ(x; h*) }   (Moreau envelope).

The ridge term is the minimum over Q of (λ/2)|Q|² + (σ²/2) tr(QᵀQ V̂) - tr(Qᵀ b) with
b = σ ζ q̂^{1/2} + Σ_ℓ (√d p_ℓ) m̂_ℓᵀ + σ² Q* θ̂ᵀ (ζ an i.i.d. N(0,1) d×r matrix), i.e. Q = b K.
Stationarity in the hats gives the ridge step (spec §8):
    ∂/∂q̂:  V = σ² K;     ∂/∂m̂_ℓ:  m_ℓ = K Σ_ℓ' G_ℓℓ' m̂_ℓ';     ∂/∂θ̂:  θ = σ² K θ̂ ρ;
    ∂/∂V̂ (dK = -σ² K dV̂ K):  q = σ² K [σ² q̂ + Σ G_ℓℓ' m̂_ℓ m̂_ℓ'ᵀ + σ² θ̂ ρ θ̂ᵀ] K.
Stationarity in the overlaps (with g_ℓ = V^{-1}(x̂_ℓ - ω_ℓ) = -∂M/∂ω_ℓ and, for the Gaussian
fields u = (q^{1/2}ξ_ℓ, h*_ℓ) of covariance C = [[q, θ], [θᵀ, ρ]], ∂E f/∂C = ½ E ∇∇f):
    ∂/∂V   (∂M/∂V = -½ Σ_ℓ g_ℓ g_ℓᵀ):    q̂ = α E[Σ_ℓ g_ℓ g_ℓᵀ]
    ∂/∂m_ℓ:                               m̂_ℓ = α E[g_ℓ]
    ∂/∂θ:                                 θ̂ = α E[Σ_ℓ ∂g_ℓ/∂h*_ℓ]          (r×r_t)
    ∂/∂q:                                 V̂ = -α E[Σ_ℓ ∂g_ℓ/∂ω_ℓ]          (r×r)
Stein's lemma turns the derivative forms into forms that only need g (the derivative forms miss
the surface term where x̂ jumps between basins of the non-convex prox; the Stein forms do not):
    E[g_ℓ η_ℓᵀ] = E[∂g_ℓ/∂h*_ℓ] c     ⇒  θ̂ = α E[Σ_ℓ g_ℓ η_ℓᵀ] c^{-1},
    E[g_ℓ ξ_ℓᵀ] = E[∂g_ℓ/∂ω_ℓ] q^{1/2} + E[∂g_ℓ/∂h*_ℓ] θᵀ q^{-1/2}
                                      ⇒  V̂ = -α E[Σ_ℓ g_ℓ ξ_ℓᵀ] q^{-1/2} + θ̂ θᵀ q^{-1}
(V̂ is symmetrised; its antisymmetric part is quadrature noise).  For L = 2, r = r_t = 1 with
m_ℓ = s_ℓ m these are spec §3 term by term: Σ_ℓ m_ℓ m̂_ℓ = m α E[Σ s_ℓ g_ℓ] = m m̂ and
Σ G m̂ m̂ᵀ = (m̂_1 - m̂_2)² = m̂².
Errors: ε_t = -Φ at the fixed point; ε_g = (σ²/2) E||S(ω) - T(h*)||_F² (no prox; the
encodings' contribution to the residual is O(1/d)).

Exact invariants: θ = 0 is preserved (T is even in h*, so E[g ηᵀ] = 0: the positional branch);
m = 0 is preserved for ANY A and G (S(-x) = S(x), T(-h*) = T(h*): the prox is odd under
(ξ, η) → -(ξ, η) when m = 0, so E[g] = 0: the semantic branch).  Q → Q O (O ∈ O(r)) leaves
the model invariant, so for r > 1 the overlaps are defined up to that rotation: compare
invariants (eigenvalues of q, singular values of θ).

Numerics: expectations over L·(r + r_t) Gaussians (2·L·r for r_t = r) by
scrambled Sobol QMC (``theory.gauss.sobol_normal``, ``n_rep`` independent scramblings of ``n``
points; "mc": i.i.d. normals).  The nodes are FROZEN during the iteration (the map is then
deterministic); the fixed point is solved on all n·n_rep points, and its error bar is the
standard error of the n_rep fixed points re-solved on each scrambling alone (warm-started).
The prox is solved per node by multi-start Newton (numerical Hessian of the analytic gradient,
eigenvalue-modified, backtracking) in numba; the lowest value wins; the previous iterate's
minimiser at the same node is one of the starts.

L = 3 positional side (issue 3): settled, and what it means
----------------------------------------------------------
Setting: L = 3, r = r_t = 1, simplex encodings, A = 0.6 / 0.2, ω = 0.3, σ = 0.5, λ = 0.01,
α = 1 (α = 2 for the profile).  Numbers and commands: BENCHMARKS.md, "## ERM generalised (§8)".

* The ansatz can represent what L-BFGS finds.  m is a free L×r matrix (no symmetry between
  encodings imposed); the L-BFGS minima from the positional start have m in the encoding
  plane (Σ_ℓ m_ℓ = 0, as the ridge step m = K G m̂ forces), along the vertex direction
  (1, 1, -2)/√6 or between it and the edge direction (1, -1, 0)/√2, |m| = 0.24-0.38,
  q = 0.083-0.101 and |θ| = 0.007-0.06, not falling like 1/√d (d = 400-1600).
* There is no RS positional fixed point besides m ≈ 0.  :func:`fixed_m_point` gives the RS
  training loss ε_t(m) of the risk restricted to a fixed m (θ = 0; m̂ becomes the Lagrange
  multiplier; it reproduces the L = 2 positional fixed point as the minimum of its profile,
  slow test).  At L = 3 it RISES monotonically with |m| along both symmetry directions, at
  α = 1 (0.00708 at m = 0 to 0.00720 at |m| = 0.35) and at α = 2 (0.014185 to 0.01462 at
  0.4).  Newton on the UNDAMPED θ ≡ 0 map (finite-difference Jacobian, frozen nodes) started
  at the L-BFGS overlaps also ends at m ≈ 0 (|m| ≈ 0.09, q = 0.1167, V = 27.35, residual
  4e-4 = the frozen-node roughness): the drift of the damped iteration is not a solver
  failure.  The prox (numba multi-start) agrees with scipy BFGS + 16 random starts and with
  basinhopping at these overlaps (V = 22-28); QMC 2^12×2 and 2^13×4 differ by 8e-7 in ε_t
  and 0.5 % in q.
* The θ = 0 sector of the finite-d risk is glassy, which RS cannot describe. L-BFGS restarts on
  the SAME data, restricted to m = 0
  (:func:`~theory.attention.finite_d.general.simulate_fixed_m`) end
  in distinct minima whose mutual overlap q_ab is on average 7-20 % (at most 52 %) of their
  self-overlap q (d = 400-1600), ε_t differing by 5e-5-1e-4; at |m| = 0.35 q_ab/q ≈ 0.85-0.92,
  not growing with d. RS assumes q_ab = q. Control: at the L = 2 positional fixed point (α = 2)
  every restart ends in the same minimum (q_ab/q = 1 to 1e-9), where RS is confirmed.
  Consequences, measured: at m = 0 the L-BFGS minima have ε_t = 0.00748(13) (d = 800, 4 seeds)
  above the RS 0.00708; at |m| = 0.35 ε_t agrees with RS (0.00726(7) at d = 1600 vs 0.00720) but
  q does not (0.0932(10) vs 0.100, flat in d). So the "positional-like minima" are local minima
  of a replica-symmetry-broken landscape; the RS θ = 0 branch (m ≈ 0, ε_t = 0.00708) is the RS
  estimate there, not a prediction for them. A 1RSB (or dynamical) theory would be needed; not
  done. :func:`replicon_smooth` (the AT quantity without the jump term) is 0.24-0.26 on the
  semantic fixed points (RS-stable, and they agree with L-BFGS) but heavy-tailed and unconverged
  (O(1) ± O(0.5) at 2^15 MC points) on every θ = 0 point, L = 2 included: it does not
  discriminate there and is reported only as such.
* For the phase picture at L = 3, ω = 0.3, α = 1 and 2 this does not matter: the semantic
  branch has a lower ε_t (0.006102 and 0.009753) than every θ = 0 state, RS or L-BFGS.

Shapes: fields ``w`` (N, L, r), teacher fields ``hs`` (N, L, r_t), teacher matrices ``T``
(N, L, L), nodes ``xi`` (R, N, L, r), ``eta`` (R, N, L, r_t).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from theory._util import check_positive, check_row_stochastic, check_unit_interval
from theory.results import Result
from theory.rng import as_rng

BRANCHES = ("semantic", "positional", "free")
KEYS = ("q", "m", "theta", "V")


# --------------------------------------------------------------------------- parameters


def default_A(L: int) -> np.ndarray:
    """0.6 on the diagonal, 0.4/(L-1) elsewhere (L = 2: the reference [[0.6, 0.4], [0.4, 0.6]])."""
    A = np.full((L, L), 0.4 / (L - 1))
    np.fill_diagonal(A, 0.6)
    return A


def simplex_gram(L: int) -> np.ndarray:
    """Gram matrix of L unit encodings at the vertices of a regular simplex (Σ p_ℓ = 0):
    G = L/(L-1) (I - 11ᵀ/L).  L = 2: [[1, -1], [-1, 1]] (the reference p = ±1_d/√d)."""
    return L / (L - 1) * (np.eye(L) - np.full((L, L), 1.0 / L))


def _as_matrix(name, v, shape):
    a = np.asarray(v, dtype=float)
    if a.ndim == 0:
        a = float(a) * np.eye(shape[0])
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


@dataclass(frozen=True)
class GeneralParams:
    """Parameters of the generalised model (spec §8).

    L (tokens, >= 2), r (student rank), r_t (teacher rank), sigma, lam (ridge), omega (teacher
    mixing), A (L×L row-stochastic; default :func:`default_A`), G (L×L symmetric PSD Gram matrix
    of the encodings, G[ℓ,ℓ'] = p_ℓ·p_ℓ'; default :func:`simplex_gram`), rho (teacher norm
    σ² Q*ᵀQ*/d, r_t×r_t or a scalar times I; default σ² I).
    """

    L: int = 2
    r: int = 1
    r_t: int = 1
    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: tuple | None = None
    G: tuple | None = None
    rho: tuple | float | None = None

    def __post_init__(self):
        for name in ("L", "r", "r_t"):
            v = getattr(self, name)
            if int(v) != v or v < (2 if name == "L" else 1):
                raise ValueError(
                    f"{name} must be an integer >= {2 if name == 'L' else 1}, got {v!r}"
                )
            object.__setattr__(self, name, int(v))
        L = self.L
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(
            self, "lam", check_positive("lam (the ridge strength)", self.lam, strict=False)
        )
        object.__setattr__(self, "omega", check_unit_interval("omega", self.omega))
        A = default_A(L) if self.A is None else check_row_stochastic("A", self.A)
        if A.shape != (L, L):
            raise ValueError(f"A must be an {L}x{L} matrix (L = {L}), got shape {A.shape}")
        G = simplex_gram(L) if self.G is None else _as_matrix("G", self.G, (L, L))
        if not np.allclose(G, G.T, atol=1e-12):
            raise ValueError("G (the Gram matrix of the encodings) must be symmetric")
        if np.linalg.eigvalsh(G).min() < -1e-10:
            raise ValueError(
                "G (the Gram matrix of the encodings) must be positive "
                "semi-definite: give G[l, l'] = p_l . p_l' for actual encodings"
            )
        rho = (
            self.sigma**2 * np.eye(self.r_t)
            if self.rho is None
            else _as_matrix("rho", self.rho, (self.r_t, self.r_t))
        )
        if not np.allclose(rho, rho.T, atol=1e-12) or np.linalg.eigvalsh(rho).min() <= 0:
            raise ValueError("rho (the teacher norm matrix) must be symmetric positive definite")
        tup = lambda M: tuple(tuple(float(x) for x in row) for row in M)  # noqa: E731
        object.__setattr__(self, "A", tup(A))
        object.__setattr__(self, "G", tup(G))
        object.__setattr__(self, "rho", tup(rho))

    @property
    def s2(self) -> float:
        return self.sigma**2

    @property
    def A_array(self) -> np.ndarray:
        return np.array(self.A, dtype=float)

    @property
    def G_array(self) -> np.ndarray:
        return np.array(self.G, dtype=float)

    @property
    def rho_array(self) -> np.ndarray:
        return np.array(self.rho, dtype=float)

    @property
    def dim(self) -> int:
        """Dimension of the Gaussian expectations, L (r + r_t)."""
        return self.L * (self.r + self.r_t)

    def replace(self, **kw) -> GeneralParams:
        d = self.to_dict()
        d.update(kw)
        if "sigma" in kw and "rho" not in kw:
            d["rho"] = None
        return GeneralParams(**d)

    def to_dict(self) -> dict:
        return dict(
            L=self.L,
            r=self.r,
            r_t=self.r_t,
            sigma=self.sigma,
            lam=self.lam,
            omega=self.omega,
            A=[list(x) for x in self.A],
            G=[list(x) for x in self.G],
            rho=[list(x) for x in self.rho],
        )


def as_params(params=None, **overrides) -> GeneralParams:
    if params is None:
        return GeneralParams(**overrides)
    if isinstance(params, dict):
        d = dict(params)
        d.update(overrides)
        return GeneralParams(**d)
    if not isinstance(params, GeneralParams):
        raise ValueError(f"params must be a GeneralParams or a dict, got {type(params).__name__}")
    return params.replace(**overrides) if overrides else params


# --------------------------------------------------------------------------- numba kernels


@numba.njit(cache=True)
def _loss_grad(x, T, s2, grad, M, S, W):
    """ℓ(x) = (σ²/2)||softmax_row(x xᵀ) - T||² and its gradient (into ``grad``), x (L, r)."""
    L, r = x.shape
    for i in range(L):
        for k in range(L):
            s = 0.0
            for a in range(r):
                s += x[i, a] * x[k, a]
            M[i, k] = s
    val = 0.0
    for i in range(L):
        mx = M[i, 0]
        for k in range(1, L):
            if M[i, k] > mx:
                mx = M[i, k]
        z = 0.0
        for k in range(L):
            e = math.exp(M[i, k] - mx)
            S[i, k] = e
            z += e
        dot = 0.0
        for k in range(L):
            S[i, k] /= z
            dk = S[i, k] - T[i, k]
            val += 0.5 * s2 * dk * dk
            dot += s2 * dk * S[i, k]
        for k in range(L):
            W[i, k] = S[i, k] * (s2 * (S[i, k] - T[i, k]) - dot)
    for i in range(L):
        for a in range(r):
            s = 0.0
            for k in range(L):
                s += (W[i, k] + W[k, i]) * x[k, a]
            grad[i, a] = s
    return val


@numba.njit(cache=True)
def _obj_grad(x, w, T, Vinv, s2, grad, M, S, W):
    """Prox objective Σ_ℓ (x_ℓ - w_ℓ)ᵀV⁻¹(x_ℓ - w_ℓ)/2 + ℓ(x) and its gradient."""
    L, r = x.shape
    val = _loss_grad(x, T, s2, grad, M, S, W)
    for i in range(L):
        for a in range(r):
            u = 0.0
            for b in range(r):
                u += Vinv[a, b] * (x[i, b] - w[i, b])
            val += 0.5 * (x[i, a] - w[i, a]) * u
            grad[i, a] += u
    return val


@numba.njit(cache=True)
def _chol_solve(H, g, p, Lw):
    """p = -H⁻¹ g by a hand-written Cholesky factorisation (fast for the tiny n here).
    Returns False (p untouched) if H is not numerically positive definite."""
    n = H.shape[0]
    for j in range(n):
        s = H[j, j]
        for k in range(j):
            s -= Lw[j, k] * Lw[j, k]
        if s <= 1e-12 * (1.0 + abs(H[j, j])):
            return False
        Lw[j, j] = math.sqrt(s)
        for i in range(j + 1, n):
            s = H[i, j]
            for k in range(j):
                s -= Lw[i, k] * Lw[j, k]
            Lw[i, j] = s / Lw[j, j]
    for i in range(n):  # forward: L y = -g
        s = -g[i]
        for k in range(i):
            s -= Lw[i, k] * p[k]
        p[i] = s / Lw[i, i]
    for i in range(n - 1, -1, -1):  # backward: Lᵀ p = y
        s = p[i]
        for k in range(i + 1, n):
            s -= Lw[k, i] * p[k]
        p[i] = s / Lw[i, i]
    return True


@numba.njit(cache=True)
def _newton(x, w, T, Vinv, s2, max_iter, gtol):
    """Minimise the prox objective from ``x`` (modified in place): Newton with a central-
    difference Hessian of the analytic gradient (Cholesky when positive definite, otherwise
    eigenvalues replaced by max(|λ|, δ)), Armijo backtracking.  Returns (value, max|grad|)."""
    L, r = x.shape
    n = L * r
    M = np.empty((L, L))
    S = np.empty((L, L))
    W = np.empty((L, L))
    g = np.empty((L, r))
    gp = np.empty((L, r))
    gm = np.empty((L, r))
    H = np.empty((n, n))
    Lw = np.empty((n, n))
    p = np.empty(n)
    gf = np.empty(n)
    xt = np.empty((L, r))
    f = _obj_grad(x, w, T, Vinv, s2, g, M, S, W)
    gmax = 0.0
    for _ in range(max_iter):
        gmax = 0.0
        for i in range(L):
            for a in range(r):
                gmax = max(gmax, abs(g[i, a]))
        if gmax < gtol:
            break
        for j in range(n):
            i0, a0 = j // r, j % r
            h = 1e-5 * max(1.0, abs(x[i0, a0]))
            old = x[i0, a0]
            x[i0, a0] = old + h
            _obj_grad(x, w, T, Vinv, s2, gp, M, S, W)
            x[i0, a0] = old - h
            _obj_grad(x, w, T, Vinv, s2, gm, M, S, W)
            x[i0, a0] = old
            for k in range(n):
                H[k, j] = (gp[k // r, k % r] - gm[k // r, k % r]) / (2 * h)
            gf[j] = g[i0, a0]
        for j in range(n):
            for k in range(j + 1, n):
                v = 0.5 * (H[j, k] + H[k, j])
                H[j, k] = v
                H[k, j] = v
        if not _chol_solve(H, gf, p, Lw):
            lam, U = np.linalg.eigh(H)
            big = 0.0
            for j in range(n):
                big = max(big, abs(lam[j]))
            delta = 1e-8 * (1.0 + big)
            for k in range(n):
                p[k] = 0.0
            for j in range(n):
                c = 0.0
                for k in range(n):
                    c += U[k, j] * gf[k]
                c /= max(abs(lam[j]), delta)
                for k in range(n):
                    p[k] -= U[k, j] * c
        slope = 0.0
        for k in range(n):
            slope += p[k] * gf[k]
        t = 1.0
        accepted = False
        ft = f
        for _ls in range(40):
            for k in range(n):
                xt[k // r, k % r] = x[k // r, k % r] + t * p[k]
            ft = _obj_grad(xt, w, T, Vinv, s2, gp, M, S, W)
            if ft <= f + 1e-4 * t * slope:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        for i in range(L):
            for a in range(r):
                x[i, a] = xt[i, a]
                g[i, a] = gp[i, a]
        if f - ft <= 1e-16 * (1.0 + abs(f)) and t < 1e-6:
            f = ft
            break
        f = ft
    gmax = 0.0
    for i in range(L):
        for a in range(r):
            gmax = max(gmax, abs(g[i, a]))
    return f, gmax


N_STARTS_FIXED = 8


@numba.njit(cache=True)
def _start(k, w, hs, warm, have_warm, out):
    """The k-th start: 0 warm, 1 w, 2 zero, 3 w/2, 4 1.5 w, 5 ±h* (aligned with w, padded to
    r columns), 6 (w ± h*)/2, 7 every token at the mean of w over tokens, 8.. w with token
    (k-8) zeroed."""
    L, r = w.shape
    rt = hs.shape[1]
    rr = min(r, rt)
    sgn = 0.0
    for i in range(L):
        for a in range(rr):
            sgn += w[i, a] * hs[i, a]
    sgn = 1.0 if sgn >= 0 else -1.0
    for i in range(L):
        for a in range(r):
            hv = sgn * hs[i, a] if a < rr else 0.0
            if k == 0:
                out[i, a] = warm[i, a] if have_warm else w[i, a]
            elif k == 1:
                out[i, a] = w[i, a]
            elif k == 2:
                out[i, a] = 0.0
            elif k == 3:
                out[i, a] = 0.5 * w[i, a]
            elif k == 4:
                out[i, a] = 1.5 * w[i, a]
            elif k == 5:
                out[i, a] = hv
            elif k == 6:
                out[i, a] = 0.5 * (w[i, a] + hv)
            elif k == 7:
                s = 0.0
                for j in range(L):
                    s += w[j, a]
                out[i, a] = s / L
            else:
                out[i, a] = 0.0 if i == k - N_STARTS_FIXED else w[i, a]


#: homotopy starts: Newton on the objective with V⁻¹ scaled by this factor from w and from ±h*
#: (the loss dominates: lands near a minimiser of ℓ), then Newton on the true objective.  They
#: catch the far basins the direct starts miss when V is large (tests: against the L = 2 prox).
HOMOTOPY_EPS = 0.01
#: direct starts used (see :func:`_start`): warm, w, 0, ±h*, token mean; then w with token ℓ
#: zeroed
DIRECT = (0, 1, 2, 5, 7)


@numba.njit(cache=True)
def _prox_one(w, T, hs, Vinv, s2, warm, have_warm, xbest):
    L, r = w.shape
    x = np.empty((L, r))
    Vs = np.empty_like(Vinv)
    for a in range(r):
        for b in range(r):
            Vs[a, b] = HOMOTOPY_EPS * Vinv[a, b]
    fbest = np.inf
    okbest = False
    nd = len(DIRECT)
    for k in range(nd + L + 2):
        if k < nd:
            if DIRECT[k] == 0 and not have_warm:
                continue
            _start(DIRECT[k], w, hs, warm, have_warm, x)
        elif k < nd + L:
            _start(N_STARTS_FIXED + k - nd, w, hs, warm, have_warm, x)
        else:
            _start(1 if k == nd + L else 5, w, hs, warm, have_warm, x)
            _newton(x, w, T, Vs, s2, 50, 1e-10)
        f, gmax = _newton(x, w, T, Vinv, s2, 100, 1e-10)
        if f < fbest - 1e-13 * (1.0 + abs(f)):
            fbest = f
            okbest = gmax < 1e-6
            for i in range(L):
                for a in range(r):
                    xbest[i, a] = x[i, a]
    return fbest, okbest


@numba.njit(cache=True, parallel=True)
def _prox_batch(w, T, hs, Vinv, s2, warm, have_warm):
    N, L, r = w.shape
    x = np.empty((N, L, r))
    val = np.empty(N)
    ok = np.empty(N, dtype=np.bool_)
    for i in numba.prange(N):
        f, o = _prox_one(w[i], T[i], hs[i], Vinv, s2, warm[i], have_warm, x[i])
        val[i] = f
        ok[i] = o
    return x, val, ok


# --------------------------------------------------------------------------- model pieces


def softmax_rows(M: np.ndarray) -> np.ndarray:
    """Row softmax of ``M`` (..., L, L), numerically stable."""
    M = M - M.max(axis=-1, keepdims=True)
    E = np.exp(M)
    return E / E.sum(axis=-1, keepdims=True)


def attention(x: np.ndarray) -> np.ndarray:
    """S(x) = softmax_row(x xᵀ) for x of shape (..., L, r) → (..., L, L)."""
    return softmax_rows(np.einsum("...ia,...ka->...ik", x, x))


def teacher_matrix(hs: np.ndarray, params) -> np.ndarray:
    """T(h*) = (1-ω) softmax_row(h* h*ᵀ) + ω A for h* (..., L, r_t) → (..., L, L)."""
    p = as_params(params)
    return (1 - p.omega) * attention(hs) + p.omega * p.A_array


def loss(x, T, s2) -> np.ndarray:
    """ℓ = (σ²/2)||S(x) - T||_F² (numpy reference), x (N, L, r), T (N, L, L) → (N,)."""
    return 0.5 * s2 * ((attention(np.asarray(x, float)) - T) ** 2).sum(axis=(-2, -1))


def loss_grad_reference(x, T, s2) -> tuple[np.ndarray, np.ndarray]:
    """Pure-numpy ℓ and ∇_x ℓ (N, L, r): Γ = σ²(S - T), W = S ∘ (Γ - rowsum(Γ∘S)),
    ∇ = (W + Wᵀ) x.  Reference of the numba kernel."""
    x = np.asarray(x, float)
    S = attention(x)
    Gam = s2 * (S - T)
    W = S * (Gam - (Gam * S).sum(axis=-1, keepdims=True))
    g = np.einsum("...ik,...ka->...ia", W + np.swapaxes(W, -1, -2), x)
    return 0.5 * s2 * ((S - T) ** 2).sum(axis=(-2, -1)), g


def loss_grad(x, T, s2) -> tuple[np.ndarray, np.ndarray]:
    """Numba ℓ and ∇_x ℓ, same contract as :func:`loss_grad_reference` (loops over rows)."""
    x = np.ascontiguousarray(np.asarray(x, float))
    T = np.ascontiguousarray(np.asarray(T, float))
    N, L, r = x.shape
    g = np.empty_like(x)
    v = np.empty(N)
    M, S, W = np.empty((L, L)), np.empty((L, L)), np.empty((L, L))
    for i in range(N):
        v[i] = _loss_grad(x[i], T[i], float(s2), g[i], M, S, W)
    return v, g


def _check_V(V, r):
    V = np.atleast_2d(np.asarray(V, float))
    if V.shape != (r, r):
        raise ValueError(f"V must be an {r}x{r} matrix, got shape {V.shape}")
    if not np.allclose(V, V.T, atol=1e-12) or np.linalg.eigvalsh(V).min() <= 0:
        raise ValueError("V must be symmetric positive definite")
    return V


@dataclass(frozen=True)
class ProxResult:
    """x (N, L, r) global minimiser; value (N,) the Moreau envelope M; ok (N,) gradient < 1e-6."""

    x: np.ndarray
    value: np.ndarray
    ok: np.ndarray


def prox(w, hs, V, params, *, warm=None) -> ProxResult:
    """Global minimiser of Σ_ℓ (x_ℓ - w_ℓ)ᵀV⁻¹(x_ℓ - w_ℓ)/2 + ℓ(x; h*) per row (numba, parallel).

    w (N, L, r) student fields; hs (N, L, r_t) teacher fields; V (r×r, or a scalar for r = 1);
    warm (N, L, r) optional extra start per row.
    """
    p = as_params(params)
    w = np.ascontiguousarray(np.asarray(w, float))
    hs = np.ascontiguousarray(np.asarray(hs, float))
    if w.ndim != 3 or w.shape[1:] != (p.L, p.r):
        raise ValueError(f"w must have shape (N, {p.L}, {p.r}), got {w.shape}")
    if hs.shape != (w.shape[0], p.L, p.r_t):
        raise ValueError(f"hs must have shape ({w.shape[0]}, {p.L}, {p.r_t}), got {hs.shape}")
    Vinv = np.linalg.inv(_check_V(V, p.r))
    T = np.ascontiguousarray(teacher_matrix(hs, p))
    have = warm is not None
    warm = np.ascontiguousarray(warm if have else w, dtype=float)
    x, val, ok = _prox_batch(w, T, hs, np.ascontiguousarray(Vinv), p.s2, warm, have)
    return ProxResult(x=x, value=val, ok=ok)


def prox_reference(w, hs, V, params, *, n_random: int = 16, rng=0):
    """scipy BFGS reference of :func:`prox`: the same deterministic starts plus ``n_random``
    random ones (w + N(0, (1 + |w|²/n) I)); lowest value wins.  Slow (Python loop over rows)."""
    from scipy.optimize import minimize

    p = as_params(params)
    gen = as_rng(rng)
    w = np.asarray(w, float)
    hs = np.asarray(hs, float)
    Vinv = np.linalg.inv(_check_V(V, p.r))
    T = teacher_matrix(hs, p)
    N, L, r = w.shape
    xs = np.empty_like(w)
    vals = np.empty(N)
    for i in range(N):
        wi, Ti = w[i], T[i]

        def f(xf, wi=wi, Ti=Ti):
            x = xf.reshape(L, r)
            lv, lg = loss_grad_reference(x[None], Ti[None], p.s2)
            D = x - wi
            return (lv[0] + 0.5 * np.einsum("ia,ab,ib->", D, Vinv, D), (lg[0] + D @ Vinv).ravel())

        starts = []
        for k in range(1, N_STARTS_FIXED + L):
            s = np.empty((L, r))
            _start(k, wi, np.ascontiguousarray(hs[i]), wi, False, s)
            starts.append(s.ravel())
        scale = math.sqrt(1.0 + (wi**2).sum() / (L * r))
        starts += [(wi + scale * gen.standard_normal((L, r))).ravel() for _ in range(n_random)]
        best = None
        for s in starts:
            res = minimize(f, s, jac=True, method="BFGS", options=dict(gtol=1e-10))
            if best is None or res.fun < best.fun:
                best = res
        xs[i] = best.x.reshape(L, r)
        vals[i] = best.fun
    return xs, vals


# --------------------------------------------------------------------------- quadrature nodes


@dataclass(frozen=True)
class Nodes:
    """Gaussian nodes: xi (R, N, L, r), eta (R, N, L, r_t); R independent scramblings (QMC) or
    independent batches (MC) of N points each, equal weights."""

    xi: np.ndarray
    eta: np.ndarray
    method: str

    @property
    def n_rep(self) -> int:
        return self.xi.shape[0]

    @property
    def n(self) -> int:
        return self.xi.shape[1]

    def subset(self, k: int) -> Nodes:
        return Nodes(self.xi[k : k + 1], self.eta[k : k + 1], self.method)

    def describe(self) -> dict:
        return dict(method=self.method, n=self.n, n_rep=self.n_rep)


def make_nodes(params, n: int = 2**13, n_rep: int = 4, method: str = "qmc", rng=0) -> Nodes:
    """``n_rep`` independent scramblings of ``n`` scrambled-Sobol normal points in L(r + r_t)
    dimensions (``method="qmc"``, n a power of 2), or i.i.d. normals (``"mc"``)."""
    from theory.gauss import sobol_normal

    p = as_params(params)
    n, n_rep = int(n), int(n_rep)
    if n < 2 or n_rep < 1:
        raise ValueError(f"need n >= 2 points and n_rep >= 1 replicates, got n={n}, n_rep={n_rep}")
    gen = as_rng(rng)
    dim = p.dim
    if method == "qmc":
        if n & (n - 1):
            raise ValueError(f"QMC needs a power-of-2 number of points, got n={n}")
        z = np.stack([sobol_normal(n, dim, gen) for _ in range(n_rep)])
    elif method == "mc":
        z = gen.standard_normal((n_rep, n, dim))
    else:
        raise ValueError(f"method must be 'qmc' or 'mc', got {method!r}")
    Lr = p.L * p.r
    xi = np.ascontiguousarray(z[..., :Lr].reshape(n_rep, n, p.L, p.r))
    eta = np.ascontiguousarray(z[..., Lr:].reshape(n_rep, n, p.L, p.r_t))
    return Nodes(xi, eta, method)


# --------------------------------------------------------------------------- state equations


def _sym_pow(M, power):
    lam, U = np.linalg.eigh(0.5 * (M + M.T))
    if lam.min() <= 0:
        raise FloatingPointError(f"matrix not positive definite (eigenvalues {lam})")
    return (U * lam**power) @ U.T


def _guard_theta(q, theta, rho):
    """Keep ρ - θᵀq⁻¹θ positive definite (spec §7): shrink θ if needed.  Returns (θ, hit)."""
    qi = np.linalg.inv(q)
    C = rho - theta.T @ qi @ theta
    if np.linalg.eigvalsh(0.5 * (C + C.T)).min() > 1e-9 * np.trace(rho):
        return theta, False
    # the largest eigenvalue of ρ^{-1/2} θᵀq⁻¹θ ρ^{-1/2} must stay < 1
    rm = _sym_pow(rho, -0.5)
    lmax = np.linalg.eigvalsh(rm @ theta.T @ qi @ theta @ rm).max()
    return theta * math.sqrt((1 - 1e-6) / lmax), True


def _fields(o: dict, p: GeneralParams, nodes: Nodes):
    """Student fields ω (R, N, L, r) and teacher fields h* (R, N, L, r_t) at the nodes."""
    sq = _sym_pow(o["q"], 0.5)
    sqi = _sym_pow(o["q"], -0.5)
    B = o["theta"].T @ sqi  # (r_t, r)
    C = p.rho_array - o["theta"].T @ np.linalg.inv(o["q"]) @ o["theta"]
    c = _sym_pow(C, 0.5)
    w = np.einsum("ab,RNlb->RNla", sq, nodes.xi) + o["m"][None, None]
    hs = np.einsum("ab,RNlb->RNla", B, nodes.xi) + np.einsum("ab,RNlb->RNla", c, nodes.eta)
    return w, hs, sqi, c


def channel(o: dict, params, nodes: Nodes, *, warm=None) -> dict:
    """Expectations at overlaps ``o`` = dict(q, m, theta, V) (matrices), per replicate.

    Returns arrays with a leading replicate axis R: ``gg`` (R, r, r) = E[Σ_ℓ g_ℓ g_ℓᵀ],
    ``g`` (R, L, r) = E[g_ℓ], ``geta`` (R, r, r_t) = E[Σ g_ℓ η_ℓᵀ], ``gxi`` (R, r, r) =
    E[Σ g_ℓ ξ_ℓᵀ], ``M`` (R,) = E[Moreau envelope], ``eps_g`` (R,), ``bad`` (R,) = fraction
    of nodes where Newton did not reach |∇| < 1e-6; plus ``x`` (R, N, L, r), the minimisers
    (warm starts for the next call), and the matrices ``sqi`` = q^{-1/2}, ``c``.
    """
    p = as_params(params)
    w, hs, sqi, c = _fields(o, p, nodes)
    R, N = nodes.n_rep, nodes.n
    wf = np.ascontiguousarray(w.reshape(R * N, p.L, p.r))
    hf = np.ascontiguousarray(hs.reshape(R * N, p.L, p.r_t))
    Vinv = np.linalg.inv(o["V"])
    T = np.ascontiguousarray(teacher_matrix(hf, p))
    have = warm is not None
    wm = np.ascontiguousarray(warm.reshape(R * N, p.L, p.r) if have else wf)
    x, val, ok = _prox_batch(wf, T, hf, np.ascontiguousarray(Vinv), p.s2, wm, have)
    g = np.einsum("ab,Nlb->Nla", Vinv, x - wf).reshape(R, N, p.L, p.r)
    eg = loss(wf, T, p.s2).reshape(R, N)
    return dict(
        gg=np.einsum("RNla,RNlb->Rab", g, g) / N,
        g=g.mean(axis=1),
        geta=np.einsum("RNla,RNlb->Rab", g, nodes.eta) / N,
        gxi=np.einsum("RNla,RNlb->Rab", g, nodes.xi) / N,
        M=val.reshape(R, N).mean(axis=1),
        eps_g=eg.mean(axis=1),
        bad=1.0 - ok.reshape(R, N).mean(axis=1),
        x=x.reshape(R, N, p.L, p.r),
        sqi=sqi,
        c=c,
    )


def _pooled(ch: dict) -> dict:
    out = {
        k: v.mean(axis=0)
        for k, v in ch.items()
        if k in ("gg", "g", "geta", "gxi", "M", "eps_g", "bad")
    }
    out.update(sqi=ch["sqi"], c=ch["c"])
    return out


def hats_from_channel(alpha, o: dict, ch: dict, params) -> dict:
    """Conjugate equations (Stein forms, module docstring) from POOLED expectations ``ch``."""
    as_params(params)
    qhat = alpha * 0.5 * (ch["gg"] + ch["gg"].T)
    mhat = alpha * ch["g"]
    thetahat = alpha * ch["geta"] @ np.linalg.inv(ch["c"])
    Vhat = -alpha * ch["gxi"] @ ch["sqi"] + thetahat @ o["theta"].T @ np.linalg.inv(o["q"])
    Vhat = 0.5 * (Vhat + Vhat.T)
    return dict(qhat=qhat, mhat=mhat, thetahat=thetahat, Vhat=Vhat)


def overlaps_from_hats(h: dict, params) -> dict:
    """Ridge step in closed form (spec §8), K = (λ I + σ² V̂)⁻¹."""
    p = as_params(params)
    D = p.lam * np.eye(p.r) + p.s2 * h["Vhat"]
    if np.linalg.eigvalsh(D).min() <= 0:
        raise FloatingPointError(
            "lambda I + sigma^2 Vhat is not positive definite: the ridge step is unstable"
        )
    K = np.linalg.inv(D)
    K = 0.5 * (K + K.T)
    G = p.G_array
    Gm = G @ h["mhat"]  # (L, r): Σ_ℓ' G_ℓℓ' m̂_ℓ'
    B = p.s2 * h["qhat"] + h["mhat"].T @ Gm + p.s2 * h["thetahat"] @ p.rho_array @ h["thetahat"].T
    q = p.s2 * K @ B @ K
    return dict(
        q=0.5 * (q + q.T), m=Gm @ K, theta=p.s2 * K @ h["thetahat"] @ p.rho_array, V=p.s2 * K
    )


def free_energy(alpha, o: dict, h: dict, EM: float, params) -> float:
    """Φ (module docstring) at overlaps ``o`` and hats ``h``; ε_t = -Φ."""
    p = as_params(params)
    K = np.linalg.inv(p.lam * np.eye(p.r) + p.s2 * h["Vhat"])
    G = p.G_array
    B = (
        p.s2 * h["qhat"]
        + h["mhat"].T @ G @ h["mhat"]
        + p.s2 * h["thetahat"] @ p.rho_array @ h["thetahat"].T
    )
    return float(
        0.5 * np.trace(h["Vhat"] @ o["q"])
        - 0.5 * np.trace(h["qhat"] @ o["V"])
        - (o["m"] * h["mhat"]).sum()
        - (o["theta"] * h["thetahat"]).sum()
        + 0.5 * np.trace(B @ K)
        - alpha * EM
    )


def default_init(branch: str, params) -> dict:
    """Cold starts (L = 2, r = 1: those of ``positional_semantic.DEFAULT_INIT``).

    semantic: q = 0.9 I, θ = 0.35 on the leading diagonal, m = 0, V = I;
    positional: q = 0.05 I, θ = 0, m = 0.3·√2·(leading eigenvector of G) in the first column
    (reference: m = (0.3, -0.3)), V = 10 I (from the L = 2 code's V = 1 start the plain damped
    iteration at α = 2, ω = 0.3 falls into a near-trivial fixed point m ≈ 0.016 of higher ε_t);
    free: the semantic start plus the positional m/4.
    """
    p = as_params(params)
    L, r, rt = p.L, p.r, p.r_t
    lam, U = np.linalg.eigh(p.G_array)
    v = U[:, -1] * (1.0 if U[np.argmax(np.abs(U[:, -1])), -1] >= 0 else -1.0)
    mpos = np.zeros((L, r))
    mpos[:, 0] = 0.3 * math.sqrt(2.0) * v
    th = np.zeros((r, rt))
    for a in range(min(r, rt)):
        th[a, a] = 0.35
    if branch == "semantic":
        return dict(q=0.9 * np.eye(r), m=np.zeros((L, r)), theta=th, V=np.eye(r))
    if branch == "positional":
        return dict(q=0.05 * np.eye(r), m=mpos, theta=np.zeros((r, rt)), V=10 * np.eye(r))
    if branch == "free":
        return dict(q=0.9 * np.eye(r), m=0.25 * mpos, theta=th, V=np.eye(r))
    raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")


#: ||m|| or ||θ||/σ² below this is "zero" when labelling a fixed point
LABEL_TOL = 1e-6


def label_branch(m, theta, params) -> str:
    p = as_params(params)
    has_m = np.abs(m).max() > LABEL_TOL
    has_t = np.abs(theta).max() / p.s2 > LABEL_TOL
    return {
        (True, False): "semantic",
        (False, True): "positional",
        (False, False): "trivial",
        (True, True): "mixed",
    }[(has_t, has_m)]


@dataclass(frozen=True, kw_only=True)
class GeneralERMResult(Result):
    """A fixed point of the generalised state equations (matrices as numpy arrays).

    q (r, r), m (L, r), theta (r, r_t), V (r, r) and their hats; eps_t = -Φ, eps_g; ``err``:
    standard errors (same keys) from the fixed points re-solved on each scrambling alone
    (empty if n_rep < 2 or ``error=False``).  For r = r_t = 1 the scalar views ``q_s``,
    ``theta_s`` (= |θ|) and ``m_norm`` (= √(Σ_ℓ m_ℓ²/2), = |m| of the L = 2 reference) are
    what the L = 2 code reports.
    """

    alpha: float
    omega: float
    q: np.ndarray = None
    m: np.ndarray = None
    theta: np.ndarray = None
    V: np.ndarray = None
    qhat: np.ndarray = None
    mhat: np.ndarray = None
    thetahat: np.ndarray = None
    Vhat: np.ndarray = None
    eps_t: float = math.nan
    eps_g: float = math.nan
    err: dict = None
    branch: str = ""
    branch_init: str = ""
    iterations: int = 0
    residual: float = math.nan

    @property
    def q_s(self) -> float:
        return float(np.trace(self.q)) / self.q.shape[0]

    @property
    def theta_s(self) -> float:
        return float(np.linalg.norm(self.theta))

    @property
    def m_norm(self) -> float:
        return float(np.sqrt((self.m**2).sum() / 2))

    def invariants(self) -> dict:
        """Rotation-invariant summaries (Q → Q O): eigenvalues of q, singular values of θ,
        eigenvalues of mᵀm (r×r); plus eps_t, eps_g."""
        return dict(
            q_eig=np.linalg.eigvalsh(self.q).tolist(),
            theta_sv=np.linalg.svd(self.theta, compute_uv=False).tolist(),
            mm_eig=np.linalg.eigvalsh(self.m.T @ self.m).tolist(),
            eps_t=self.eps_t,
            eps_g=self.eps_g,
        )


def _enforce(branch, o):
    if branch == "positional":
        o["theta"] = np.zeros_like(o["theta"])
    elif branch == "semantic":
        o["m"] = np.zeros_like(o["m"])
    return o


def _invariants(o):
    """Rotation invariants used by the r > 1 convergence test, one vector per order parameter."""
    return dict(
        q=np.linalg.eigvalsh(o["q"]),
        V=np.linalg.eigvalsh(o["V"]),
        theta=np.linalg.svd(o["theta"], compute_uv=False),
        m=np.linalg.eigvalsh(o["m"].T @ o["m"]),
    )


def _residual(x, Fx, keys, atol=1e-10):
    """Relative undamped residual per order parameter, max over them.  For r > 1 it is taken on
    the rotation invariants (:func:`_invariants`): the model is invariant under Q → Q O and
    with frozen QMC nodes the iterate can creep along that orbit without changing anything
    physical."""
    if x["q"].shape[0] > 1:
        x, Fx = _invariants(x), _invariants(Fx)
    return max(float(np.linalg.norm(Fx[k] - x[k]) / max(np.linalg.norm(Fx[k]), atol)) for k in keys)


def _flat(d, keys, scale):
    return np.concatenate([np.ravel(d[k]) / scale[k] for k in keys])


def _unflat(v, keys, scale, like):
    out, i = dict(like), 0
    for k in keys:
        n = like[k].size
        out[k] = v[i : i + n].reshape(like[k].shape) * scale[k]
        i += n
    return out


def _pd(o):
    return all(np.linalg.eigvalsh(0.5 * (o[k] + o[k].T)).min() > 0 for k in ("q", "V"))


#: largest residual of a per-scrambling re-solve still used for the error bars (measured: the
#: single-scrambling map of 2^11 points in 6 dimensions, r = 2, stalls at ~3e-3; the spread
#: between scramblings it measures is larger)
ERR_RESIDUAL = 1e-2
#: Anderson steps that move an order parameter by more than this (relative) are rejected
MAX_STEP = 0.2
#: ||m||/√L (positional) or ||θ||/σ² (semantic) below this and decreasing for 15 iterations:
#: the branch collapsed onto the trivial one (status "diverged"; the L = 2 code's rule)
COLLAPSE = 2e-2


def _collapsed(branch, Fx, p, trace):
    if branch == "positional":
        v = float(np.linalg.norm(Fx["m"])) / math.sqrt(p.L)
    elif branch == "semantic":
        v = float(np.linalg.norm(Fx["theta"])) / p.s2
    else:
        return None
    trace.append(v)
    last = trace[-16:]
    if len(last) == 16 and v < COLLAPSE and all(b < a for a, b in zip(last, last[1:])):
        return (
            f"the {branch} branch collapsed onto the trivial one (order parameter {v:.2e} "
            f"< {COLLAPSE:g}, decreasing for 15 iterations)"
        )
    return None


def _iterate(
    alpha,
    p,
    branch,
    x0,
    nodes,
    *,
    mixing,
    tol,
    max_iter,
    warm=None,
    history=None,
    accel="anderson",
    depth=4,
):
    """Damped iteration x ← (1-mixing) x + mixing F(x) on the frozen nodes, with Anderson
    acceleration (type II, ``depth`` past residuals, variables scaled per order parameter) once
    the residual is below 0.05; an accelerated step that leaves q or V non positive definite or
    moves an order parameter by more than ``MAX_STEP`` (relative) is replaced by the damped
    step, and the history is cleared when the residual grows tenfold
    over the best one.  Returns
    (status, message, x, Fx, hats, channel, iterations, residual, guard_hits, warm)."""
    keys = [
        k
        for k in KEYS
        if not (branch == "positional" and k == "theta") and not (branch == "semantic" and k == "m")
    ]
    x = {k: np.array(v, float) for k, v in x0.items()}
    last_good = None
    res, it, guard = math.inf, 0, 0
    grow, prev = 0, math.inf
    status, msg = "max_iter", f"no convergence in {max_iter} iterations"
    Fx = h = ch = None
    scale, X_hist, F_hist, best, trace = None, [], [], math.inf, []
    while it < max_iter:
        it += 1
        try:
            xg = dict(x)
            xg["theta"], hit = _guard_theta(x["q"], x["theta"], p.rho_array)
            guard += hit
            ch_r = channel(xg, p, nodes, warm=warm)
            chp = _pooled(ch_r)
            h = hats_from_channel(alpha, xg, chp, p)
            Fx = _enforce(branch, overlaps_from_hats(h, p))
            finite = all(np.all(np.isfinite(v)) for v in Fx.values())
        except (FloatingPointError, np.linalg.LinAlgError) as exc:
            finite, msg = False, f"map failed: {exc}"
        if not finite:
            if last_good is None or mixing / 2 < 1e-3:
                return (
                    "nan",
                    msg or "non-finite iterate",
                    x,
                    None,
                    None,
                    None,
                    it,
                    math.nan,
                    guard,
                    warm,
                )
            mixing /= 2
            x = dict(last_good)
            X_hist.clear()
            F_hist.clear()
            continue
        ch = chp
        warm = ch_r["x"]
        res = _residual(x, Fx, keys)
        if history is not None:
            history.append(
                dict(
                    iteration=it,
                    residual=res,
                    mixing=mixing,
                    **{k: np.array(x[k]).tolist() for k in KEYS},
                )
            )
        if res < tol:
            status, msg = "converged", ""
            break
        if any(np.abs(Fx[k]).max() > 1e8 for k in keys):
            status, msg = "diverged", "order parameters diverged"
            break
        why = _collapsed(branch, Fx, p, trace)
        if why:
            status, msg = "diverged", why
            break
        last_good = dict(x)
        x_prev = x
        damped = {k: (1 - mixing) * x[k] + mixing * Fx[k] for k in KEYS}
        if accel != "anderson":
            grow = grow + 1 if res > prev else 0
            if grow >= 3 and mixing / 2 >= 1e-3:
                mixing /= 2
                grow = 0
            prev = res
            x = damped
            continue
        if scale is None:
            scale = {k: max(float(np.linalg.norm(Fx[k])), 1e-3) for k in keys}
        if res > 10 * best or res >= 0.05:
            X_hist.clear()
            F_hist.clear()
        best = min(best, res)
        xf, ff = _flat(x, keys, scale), _flat(Fx, keys, scale) - _flat(x, keys, scale)
        X_hist.append(xf)
        F_hist.append(ff)
        del X_hist[: -depth - 1], F_hist[: -depth - 1]
        x = damped
        if len(X_hist) >= 2:
            dX = np.diff(np.array(X_hist), axis=0).T
            dF = np.diff(np.array(F_hist), axis=0).T
            gam = np.linalg.lstsq(dF, ff, rcond=None)[0]
            xn = xf + mixing * ff - (dX + mixing * dF) @ gam
            cand = _unflat(xn, keys, scale, damped)
            small = all(
                np.linalg.norm(cand[k] - x_prev[k])
                <= MAX_STEP * max(np.linalg.norm(x_prev[k]), 1e-3)
                for k in keys
            )
            if np.all(np.isfinite(xn)) and small and _pd(cand):
                x = cand
    return status, msg, x, Fx, h, ch, it, res, guard, warm


def fixed_point(
    alpha,
    params=None,
    branch: str = "semantic",
    init: dict | None = None,
    *,
    mixing: float = 0.2,
    tol: float = 1e-6,
    max_iter: int = 300,
    n: int = 2**13,
    n_rep: int = 4,
    method: str = "qmc",
    rng=0,
    nodes: Nodes | None = None,
    error: bool = True,
    accel: str = "anderson",
    keep_history: bool = False,
) -> GeneralERMResult:
    """Solve the generalised state equations (module docstring) on one branch.

    ``branch``: "semantic" (m ≡ 0, exact invariant), "positional" (θ ≡ 0, exact invariant) or
    "free" (nothing imposed); it also picks the cold start (:func:`default_init`), overridden by
    ``init`` = dict(q, m, theta, V) (arrays; scalars accepted for r = 1) or a previous result.
    For r > 1 the residual is measured on rotation invariants (eigenvalues of q, V, mᵀm,
    singular values of θ), see :func:`_residual`.
    Iteration: ``mixing`` = weight of the new iterate (default 0.2: at α = 2, ω = 0.3 the L = 2
    positional fixed point is unstable for the damped map with mixing 0.5 — an eigenvalue of
    the map's Jacobian below -3 — and the iteration collapses onto the trivial fixed point),
    ``accel`` = "anderson" (default, see
    :func:`_iterate`) or "none" (plain damped iteration); convergence when the UNDAMPED map's
    relative change ||F(x)_k - x_k||_F / ||F(x)_k||_F < ``tol`` for every order parameter k.
    Quadrature: ``n_rep`` scramblings of ``n`` Sobol points (``method="qmc"``) or MC, frozen
    during the iteration; with ``error`` (and n_rep >= 2) each scrambling's own fixed point is
    re-solved from the pooled one and their standard error is reported in ``err``.
    """
    p = as_params(params)
    alpha = check_positive("alpha (the sample ratio n/d)", alpha)
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    if accel not in ("anderson", "none"):
        raise ValueError(f"accel must be 'anderson' or 'none', got {accel!r}")
    if nodes is None:
        nodes = make_nodes(p, n, n_rep, method, rng)
    x0 = default_init(branch, p)
    if init is not None:
        if isinstance(init, GeneralERMResult):
            init = dict(q=init.q, m=init.m, theta=init.theta, V=init.V)
        shapes = dict(q=(p.r, p.r), m=(p.L, p.r), theta=(p.r, p.r_t), V=(p.r, p.r))
        for k in KEYS:
            if k in init and init[k] is not None:
                v = np.asarray(init[k], float)
                if k == "m" and v.shape == (p.L,) and p.r == 1:
                    v = v[:, None]
                x0[k] = np.broadcast_to(v, shapes[k]).copy() if v.ndim == 0 else v.copy()
                if x0[k].shape != shapes[k]:
                    raise ValueError(f"init[{k!r}] must have shape {shapes[k]}, got {v.shape}")
    x0 = _enforce(branch, x0)
    for k in ("q", "V"):
        if np.linalg.eigvalsh(0.5 * (x0[k] + x0[k].T)).min() <= 0:
            raise ValueError(f"the initial {k} must be positive definite")
    hist = [] if keep_history else None
    status, msg, x, Fx, h, ch, its, res, guard, warm = _iterate(
        alpha,
        p,
        branch,
        x0,
        nodes,
        mixing=mixing,
        tol=tol,
        max_iter=max_iter,
        history=hist,
        accel=accel,
    )
    meta = dict(nodes.describe(), tol=tol, guard_hits=int(guard), mixing=mixing)
    common = dict(
        alpha=alpha,
        omega=p.omega,
        branch_init=branch,
        iterations=its,
        params=p.to_dict(),
        metadata=meta,
        history=hist,
    )
    if Fx is None:
        return GeneralERMResult(
            status=status if status != "converged" else "nan", message=msg, **common
        )
    # everything evaluated at the final undamped iterate Fx (self-consistent to tol)
    try:
        fin, eps_t, eps_g, hh, chf = _evaluate(alpha, p, branch, Fx, nodes, warm)
    except (FloatingPointError, np.linalg.LinAlgError) as exc:
        return GeneralERMResult(status="diverged", message=str(exc), **common)
    meta.update(newton_fail_fraction=float(chf["bad"]), phi=-eps_t)
    err = {}
    if error and nodes.n_rep >= 2 and status == "converged":
        reps = []
        for k in range(nodes.n_rep):
            sub = nodes.subset(k)
            # re-solves to max(tol, 1e-4): far below the QMC error they estimate; for r > 1 the
            # iterate can creep along the O(r) orbit, so a re-solve that stops at max_iter with
            # a residual < ERR_RESIDUAL is kept (its residual is recorded in the metadata)
            st, _, xk, Fk, _, _, _, rk, _, wk = _iterate(
                alpha,
                p,
                branch,
                fin,
                sub,
                mixing=mixing,
                tol=max(tol, 1e-4),
                max_iter=max_iter,
                warm=warm[k : k + 1],
                accel=accel,
            )
            if st == "max_iter" and accel == "anderson":
                # Anderson can cycle on the rough single-scrambling map: finish damped
                st, _, _, Fk2, _, _, _, rk2, _, wk2 = _iterate(
                    alpha,
                    p,
                    branch,
                    xk,
                    sub,
                    mixing=mixing / 2,
                    tol=max(tol, 1e-4),
                    max_iter=max_iter,
                    warm=wk,
                    accel="none",
                )
                if Fk2 is not None and rk2 < rk:
                    Fk, rk, wk = Fk2, rk2, wk2
            meta.setdefault("error_resolve_residuals", []).append(float(rk))
            if Fk is None or not (st == "converged" or (st == "max_iter" and rk < ERR_RESIDUAL)):
                reps = None
                meta["error_message"] = f"scrambling {k} alone: {st}"
                break
            _, et, egk, hk, _ = _evaluate(alpha, p, branch, Fk, sub, wk)
            reps.append(dict(Fk, eps_t=et, eps_g=egk, **hk))
        if reps:
            R = len(reps)
            for key in reps[0]:
                arr = np.array([np.asarray(r_[key], float) for r_ in reps])
                err[key] = arr.std(axis=0, ddof=1) / math.sqrt(R)
            meta["rep_eps_t"] = [r_["eps_t"] for r_ in reps]
            # rotation-invariant summaries per scrambling (r > 1: matrix entries drift along
            # the O(r) orbit, their spread is not an error bar; these are)
            inv = np.array(
                [
                    np.concatenate(
                        [
                            np.linalg.eigvalsh(r_["q"]),
                            np.linalg.svd(r_["theta"], compute_uv=False),
                            np.linalg.eigvalsh(r_["m"].T @ r_["m"]),
                        ]
                    )
                    for r_ in reps
                ]
            )
            meta["invariants_err"] = (inv.std(axis=0, ddof=1) / math.sqrt(R)).tolist()
            meta["invariants_order"] = "q eigenvalues, theta singular values, eig(m^T m)"
    return GeneralERMResult(
        q=fin["q"],
        m=fin["m"],
        theta=fin["theta"],
        V=fin["V"],
        qhat=hh["qhat"],
        mhat=hh["mhat"],
        thetahat=hh["thetahat"],
        Vhat=hh["Vhat"],
        eps_t=eps_t,
        eps_g=eps_g,
        err=err,
        branch=label_branch(fin["m"], fin["theta"], p),
        status=status,
        message=msg,
        residual=res,
        **common,
    )


def _evaluate(alpha, p, branch, o, nodes, warm):
    o = {k: np.array(v, float) for k, v in o.items()}
    o["theta"], _ = _guard_theta(o["q"], o["theta"], p.rho_array)
    chr_ = channel(o, p, nodes, warm=warm)
    ch = _pooled(chr_)
    h = hats_from_channel(alpha, o, ch, p)
    phi = free_energy(alpha, o, h, float(ch["M"]), p)
    return o, -phi, float(ch["eps_g"]), h, ch


# --------------------------------------------------------------------------- fixed-m profile


@dataclass(frozen=True, kw_only=True)
class FixedMResult(Result):
    """RS energy profile at a FIXED positional overlap m (θ ≡ 0), r = 1.

    q, V solve the state equations with m held fixed (m̂ is then the Lagrange multiplier
    G⁺ m (λ + σ² V̂) instead of α E[g]); eps_t = -Φ is the RS training loss of the minimiser of
    the empirical risk restricted to {PQ/√d = m, Q*ᵀQ = 0}; ``grad_m`` (L,) = dε_t/dm
    projected on the range of G (zero at a fixed point of the full θ = 0 equations);
    ``err``: standard errors over the scramblings (same keys), when n_rep >= 2;
    ``metadata["rep_eps_t"]``: ε_t of each scrambling (paired differences between profile
    points on the same nodes are far more precise than ``err`` suggests).
    """

    alpha: float
    omega: float
    m: np.ndarray = None
    q: float = math.nan
    V: float = math.nan
    eps_t: float = math.nan
    eps_g: float = math.nan
    grad_m: np.ndarray = None
    err: dict = None
    iterations: int = 0
    residual: float = math.nan


def _fixed_m_map(alpha, p, m, q, V, nodes):
    """One application of the fixed-m map: returns (q', V', hats with the multiplier m̂,
    pooled channel, grad_m = dε_t/dm)."""
    o = dict(q=np.array([[q]]), m=m, theta=np.zeros((1, p.r_t)), V=np.array([[V]]))
    ch = _pooled(channel(o, p, nodes))
    h = hats_from_channel(alpha, o, ch, p)
    D = p.lam + p.s2 * h["Vhat"][0, 0]
    if D <= 0:
        raise FloatingPointError("lambda + sigma^2 Vhat <= 0: the ridge step is unstable")
    G = p.G_array
    Gp = np.linalg.pinv(G)
    mhat_c = Gp @ m * D
    # dΦ/dm = α E[g] - m̂ (Φ stationary in everything else); ε_t = -Φ
    grad = -(G @ Gp) @ (h["mhat"] - mhat_c)
    hc = dict(h, mhat=mhat_c)
    B = p.s2 * h["qhat"][0, 0] + float((mhat_c.T @ G @ mhat_c)[0, 0])
    return p.s2 * B / D**2, p.s2 / D, hc, ch, grad[:, 0]


def fixed_m_point(
    alpha,
    m,
    params=None,
    *,
    q0: float = 0.1,
    V0: float = 10.0,
    tol: float = 1e-8,
    max_iter: int = 60,
    n: int = 2**12,
    n_rep: int = 2,
    method: str = "qmc",
    rng=0,
    nodes: Nodes | None = None,
    error: bool = True,
) -> FixedMResult:
    """RS training loss ε_t(m) of the minimiser restricted to a fixed positional overlap m
    (θ = 0; r = 1).  Its stationary points in m are the fixed points of the positional
    (θ ≡ 0) branch; its profile tells whether such a point exists where the damped iteration
    does not go.  Solved by Newton in (log q, log V) with a finite-difference Jacobian on
    frozen QMC nodes (``n_rep`` scramblings of ``n`` points); convergence when both relative
    residuals < ``tol``.  With ``error`` each scrambling is re-solved alone (warm start) and
    the standard error of (q, V, eps_t, eps_g) is reported.  ``m`` (L,) must lie in the range
    of G (for simplex encodings: Σ_ℓ m_ℓ = 0).
    """
    p = as_params(params)
    alpha = check_positive("alpha (the sample ratio n/d)", alpha)
    if p.r != 1:
        raise ValueError(f"fixed_m_point needs student rank r = 1, got r = {p.r}")
    m = np.asarray(m, float).reshape(-1)
    if m.shape != (p.L,):
        raise ValueError(f"m must have L = {p.L} entries, got {m.size}")
    G = p.G_array
    if np.linalg.norm(G @ np.linalg.pinv(G) @ m - m) > 1e-10 * (1 + np.linalg.norm(m)):
        raise ValueError(
            "m must lie in the range of the encodings' Gram matrix G (for simplex "
            "encodings: entries summing to zero)"
        )
    check_positive("q0", q0)
    check_positive("V0", V0)
    if nodes is None:
        nodes = make_nodes(p, n, n_rep, method, rng)
    m2 = m[:, None]

    def solve(nd, x):
        def res(x):
            qn, Vn, *_ = _fixed_m_map(alpha, p, m2, math.exp(x[0]), math.exp(x[1]), nd)
            return np.log([qn, Vn]) - x

        r = res(x)
        it = 0
        while np.abs(r).max() >= tol and it < max_iter:
            it += 1
            J = np.empty((2, 2))
            for j in range(2):
                e = np.zeros(2)
                e[j] = 1e-4
                J[:, j] = (res(x + e) - res(x - e)) / 2e-4
            try:
                dx = np.linalg.solve(J, -r)
            except np.linalg.LinAlgError:
                dx = r  # plain iteration step
            x = x + dx * min(1.0, 0.5 / max(np.abs(dx).max(), 1e-300))
            r = res(x)
        return x, float(np.abs(r).max()), it

    def evaluate(nd, x):
        qn, Vn, h, ch, grad = _fixed_m_map(alpha, p, m2, math.exp(x[0]), math.exp(x[1]), nd)
        o = dict(q=np.array([[qn]]), m=m2, theta=np.zeros((1, p.r_t)), V=np.array([[Vn]]))
        return dict(
            q=qn,
            V=Vn,
            eps_t=-free_energy(alpha, o, h, float(ch["M"]), p),
            eps_g=float(ch["eps_g"]),
            grad_m=grad,
        )

    common = dict(
        alpha=alpha,
        omega=p.omega,
        m=m,
        params=p.to_dict(),
        metadata=dict(nodes.describe(), tol=tol, method_solve="newton (log q, log V)"),
    )
    try:
        x, res, its = solve(nodes, np.log([q0, V0]))
        out = evaluate(nodes, x)
    except (FloatingPointError, np.linalg.LinAlgError) as exc:
        return FixedMResult(status="nan", message=str(exc), **common)
    status = "converged" if res < tol else "max_iter"
    err = {}
    if error and status == "converged" and nodes.n_rep >= 2:
        reps = []
        for k in range(nodes.n_rep):
            xk, rk, _ = solve(nodes.subset(k), x)
            if rk >= max(tol, 1e-6):
                reps = None
                break
            reps.append(evaluate(nodes.subset(k), xk))
        if reps:
            for key in reps[0]:
                arr = np.array([np.asarray(r_[key], float) for r_ in reps])
                err[key] = arr.std(axis=0, ddof=1) / math.sqrt(len(reps))
            # per-scrambling values: profiles on the same nodes can be compared pairwise
            common["metadata"]["rep_eps_t"] = [float(r_["eps_t"]) for r_ in reps]
    return FixedMResult(
        status=status,
        message="" if status == "converged" else f"Newton residual {res:.2e} after {its} steps",
        iterations=its,
        residual=res,
        err=err,
        **out,
        **common,
    )


# --------------------------------------------------------------------------- RS stability


def prox_jacobian(x, hs, V, params) -> np.ndarray:
    """∂x̂/∂ω at a prox minimiser x̂ (r = 1, away from basin jumps): (I + V ∇²ℓ(x̂))⁻¹
    (implicit function theorem on x̂ - ω + V ∇ℓ(x̂) = 0), ∇²ℓ by central differences of the
    analytic gradient.  x (N, L, 1), hs (N, L, r_t) → (N, L, L)."""
    p = as_params(params)
    x = np.asarray(x, float)
    N, L, r = x.shape
    if r != 1:
        raise ValueError(f"prox_jacobian needs student rank r = 1, got r = {r}")
    T = teacher_matrix(np.asarray(hs, float), p)
    H = np.empty((N, L, L))
    for j in range(L):
        e = np.zeros((1, L, 1))
        e[0, j, 0] = 1e-5
        gp = loss_grad_reference(x + e, T, p.s2)[1][:, :, 0]
        gm = loss_grad_reference(x - e, T, p.s2)[1][:, :, 0]
        H[:, :, j] = (gp - gm) / 2e-5
    H = 0.5 * (H + np.swapaxes(H, 1, 2))
    return np.linalg.inv(np.eye(L)[None] + float(np.asarray(V).ravel()[0]) * H)


def replicon_smooth(alpha, o: dict, params=None, *, n: int = 2**14, rng=0) -> tuple:
    """Smooth part of the de Almeida-Thouless (replicon) quantity of the RS solution, r = 1:

        λ_AT = α E[ ||∂x̂/∂ω - I||_F² ] = α V² E[ Σ_ℓℓ' (∂g_ℓ/∂ω_ℓ')² ],

    (output replicon α E||∂g/∂ω||² times the ridge prior's V²; the L fields of a sample share
    Q and have independent noise, hence the Frobenius norm).  RS is locally stable only if
    λ_AT < 1.  The basin jumps of the non-convex prox add a further positive (at zero
    temperature divergent) contribution that is NOT included: λ_AT > 1 is therefore a
    sufficient sign of replica-symmetry breaking, λ_AT < 1 a necessary condition for RS.
    ``o`` = dict(q, m, theta, V) (a fixed point or any overlaps).  Plain MC over ``n`` Gaussian
    nodes.  Returns (λ_AT, standard error).
    """
    p = as_params(params)
    if p.r != 1:
        raise ValueError(f"replicon_smooth needs student rank r = 1, got r = {p.r}")
    o = {k: np.atleast_2d(np.asarray(v, float)) for k, v in o.items()}
    if o["m"].shape == (1, p.L):
        o["m"] = o["m"].T
    nodes = make_nodes(p, n, 1, "mc", rng)
    w, hs, _, _ = _fields(o, p, nodes)
    x = prox(w[0], hs[0], o["V"], p).x
    J = prox_jacobian(x, hs[0], o["V"], p) - np.eye(p.L)[None]
    v = alpha * (J**2).sum(axis=(1, 2))
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))
