"""The positional-semantic dot-product attention model (ERM, replica theory), L = 2, r = r_t = 1.

Implements spec/positional-semantic.md: the 2-D non-convex proximal operator (numba, global
minimum), the replica-symmetric state equations of §3 with their positional / semantic / trivial
branches, the free energy Φ, ε_t = -Φ, ε_g, the linear baseline of §5, and (through
``theory.solve``) continuation in α, the transition α_c(ω) and the threshold α_l(ω).

Quadrature: the default ``split`` rule (see ``_ps_kernels``) integrates ξ in polar coordinates
around the point where the student field vanishes and splits every circle at the jumps of the
prox's global minimiser; plain tensor Gauss-Hermite (``method="gh"``) is wrong by tens of percent
on the positional branch (BENCHMARKS.md, "ERM (replica theory)").

Units and normalisations (stated once): overlaps q = σ²|Q|²/d, m = 1ᵀQ/d, θ = σ² Q*ᵀQ/d,
ρ = σ²; errors ε_t = min L / d and ε_g = E||f(X) - y(X)||²_F / (2d), both per token dimension.
Shapes: local fields ``w`` and teacher fields ``h_star`` are ``(N, 2)`` (one row per sample or
quadrature node); ``jac`` is ``(N, 2, 2)`` with ``jac[i, k, l] = d x̂_k / d w_l``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from theory._util import check_positive, check_row_stochastic, check_unit_interval
from theory.attention import _kernels as _K
from theory.results import Result

S_SIGNS = np.array([1.0, -1.0])  # positional signs s_ℓ of p_1 = +1/√d, p_2 = -1/√d
BRANCHES = ("semantic", "positional", "trivial")
A_REFERENCE = ((0.6, 0.4), (0.4, 0.6))


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class ERMParams:
    """Model parameters: token std σ, ridge λ, positional mixing ω, teacher positional matrix A.

    ``rho`` (teacher norm σ²|Q*|²/d) defaults to σ².  ``A`` must be a row-stochastic 2×2
    matrix; the reference values are σ = 0.5, λ = 0.01, A = [[0.6, 0.4], [0.4, 0.6]].
    """

    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: tuple = A_REFERENCE
    rho: float | None = None

    def __post_init__(self):
        check_positive("sigma", self.sigma)
        check_positive("lam (the ridge strength)", self.lam, strict=False)
        check_unit_interval("omega", self.omega)
        A = check_row_stochastic("A", self.A)
        if A.shape != (2, 2):
            raise ValueError(f"A must be a 2x2 matrix (sequence length L = 2), got shape {A.shape}")
        object.__setattr__(self, "sigma", float(self.sigma))
        object.__setattr__(self, "lam", float(self.lam))
        object.__setattr__(self, "omega", float(self.omega))
        object.__setattr__(self, "A", tuple(tuple(float(v) for v in row) for row in A))
        rho = self.sigma**2 if self.rho is None else check_positive("rho", self.rho)
        object.__setattr__(self, "rho", float(rho))

    @property
    def s2(self) -> float:
        return self.sigma**2

    @property
    def A_array(self) -> np.ndarray:
        return np.array(self.A, dtype=float)

    @property
    def swap_symmetric(self) -> bool:
        """A_11 = A_22: then m = 0 is an exact invariant of the semantic branch."""
        return abs(self.A[0][0] - self.A[1][1]) <= 1e-14

    def replace(self, **kw) -> ERMParams:
        d = dict(sigma=self.sigma, lam=self.lam, omega=self.omega, A=self.A, rho=self.rho)
        d.update(kw)
        if "sigma" in kw and "rho" not in kw:
            d["rho"] = None
        return ERMParams(**d)

    def to_dict(self) -> dict:
        return dict(
            sigma=self.sigma,
            lam=self.lam,
            omega=self.omega,
            A=[list(r) for r in self.A],
            rho=self.rho,
        )


def as_params(params=None, **overrides) -> ERMParams:
    if params is None:
        return ERMParams(**overrides)
    if isinstance(params, dict):
        d = dict(params)
        d.update(overrides)
        return ERMParams(**d)
    if not isinstance(params, ERMParams):
        raise ValueError(f"params must be an ERMParams or a dict, got {type(params).__name__}")
    return params.replace(**overrides) if overrides else params


def check_alpha(alpha) -> float:
    return check_positive("alpha (the sample ratio n/d)", alpha)


# --------------------------------------------------------------------------- model pieces


def _nthreads() -> int:
    import numba

    return int(numba.get_num_threads())


def _rows(a, name) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a, dtype=float))
    if a.ndim == 1 and a.shape[0] == 2:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"{name} must have shape (N, 2), got {np.shape(a)}")
    return a


def softmax_diag(x) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal (S_11, S_22) of softmax_row(x xᵀ) for rows x of shape (N, 2)."""
    x = _rows(x, "x")
    u1 = x[:, 0] * (x[:, 0] - x[:, 1])
    u2 = x[:, 1] * (x[:, 1] - x[:, 0])
    return _expit(u1), _expit(u2)


def _expit(u):
    from scipy.special import expit

    return expit(u)


def teacher_diag(h_star, params) -> np.ndarray:
    """Diagonal (t_1, t_2) of T(h*) = (1 - ω) S(h*) + ω A, shape (N, 2)."""
    p = as_params(params)
    a, b = softmax_diag(h_star)
    A = p.A_array
    return np.stack(
        [(1 - p.omega) * a + p.omega * A[0, 0], (1 - p.omega) * b + p.omega * A[1, 1]], axis=1
    )


def attention_matrix(x) -> np.ndarray:
    """Full S(x) = softmax_row(x xᵀ), shape (N, 2, 2) (reference implementation)."""
    x = _rows(x, "x")
    G = x[:, :, None] * x[:, None, :]
    G = G - G.max(axis=2, keepdims=True)
    E = np.exp(G)
    return E / E.sum(axis=2, keepdims=True)


def loss(x, h_star, params) -> np.ndarray:
    """Per-sample loss ℓ(x; h*) = (σ²/2) ||S(x) - T(h*)||_F², shape (N,)."""
    p = as_params(params)
    x = _rows(x, "x")
    t = teacher_diag(_rows(h_star, "h_star"), p)
    a, b = softmax_diag(x)
    return p.s2 * ((a - t[:, 0]) ** 2 + (b - t[:, 1]) ** 2)


def loss_full(x, h_star, params) -> np.ndarray:
    """ℓ from the full 2×2 matrices (independent reference of :func:`loss`)."""
    p = as_params(params)
    S = attention_matrix(x)
    T = (1 - p.omega) * attention_matrix(h_star) + p.omega * p.A_array[None]
    return 0.5 * p.s2 * ((S - T) ** 2).sum(axis=(1, 2))


def loss_grad(x, h_star, params) -> np.ndarray:
    """∇_x ℓ(x; h*), shape (N, 2)."""
    p = as_params(params)
    x = _rows(x, "x")
    t = teacher_diag(_rows(h_star, "h_star"), p)
    a, b = softmax_diag(x)
    g1u = 2 * p.s2 * (a - t[:, 0]) * a * (1 - a)
    g2u = 2 * p.s2 * (b - t[:, 1]) * b * (1 - b)
    x1, x2 = x[:, 0], x[:, 1]
    return np.stack([g1u * (2 * x1 - x2) - g2u * x2, -g1u * x1 + g2u * (2 * x2 - x1)], axis=1)


@dataclass(frozen=True)
class ProxResult:
    """Global minimiser of |x - w|²/(2V) + ℓ(x; h*) per row.

    x (N, 2); jac (N, 2, 2) = d x̂/d w; jac_h (N, 2, 2) = d x̂/d h*; value (N,) = the minimum
    (the Moreau envelope); ok (N,) = Newton converged from the winning start.
    """

    x: np.ndarray
    jac: np.ndarray
    value: np.ndarray
    jac_h: np.ndarray = field(repr=False, default=None)
    ok: np.ndarray = field(repr=False, default=None)

    @property
    def g(self):  # pragma: no cover - convenience
        raise AttributeError("g depends on w and V: compute (x - w) / V")


def prox(w_local, h_star, V, params, *, jac: bool = True) -> ProxResult:
    """Row-wise global prox of the 2-D non-convex per-sample loss (numba, parallel over rows).

    Parameters
    ----------
    w_local : (N, 2) local fields ω_ℓ.
    h_star : (N, 2) teacher local fields h*_ℓ.
    V : float > 0, the prox variance.
    params : ERMParams (or dict).
    jac : also return d x̂/d w and d x̂/d h* (implicit-function theorem at the minimiser).
    """
    p = as_params(params)
    V = check_positive("V", V)
    w = _rows(w_local, "w_local")
    h = _rows(h_star, "h_star")
    if w.shape != h.shape:
        raise ValueError(f"w_local {w.shape} and h_star {h.shape} must have the same shape")
    A = p.A_array
    x, val, jw, jh, ok = _K.prox_batch(w, h, V, p.s2, p.omega, A[0, 0], A[1, 1], bool(jac))
    return ProxResult(x=x, jac=jw, value=val, jac_h=jh, ok=ok)


def prox_reference(w_local, h_star, V, params, *, starts=None):
    """Pure numpy/scipy reference of :func:`prox`: L-BFGS-B from the same start set plus a ring
    of 16 starts on the disk that contains every minimiser; lowest value wins.  Slow."""
    from scipy.optimize import minimize

    p = as_params(params)
    w = _rows(w_local, "w_local")
    h = _rows(h_star, "h_star")
    t = teacher_diag(h, p)
    xs = np.empty_like(w)
    vals = np.empty(w.shape[0])
    for i in range(w.shape[0]):
        wi, ti = w[i], t[i]

        def f(x, wi=wi, ti=ti):
            a = _sigmoid(x[0] * (x[0] - x[1]))
            b = _sigmoid(x[1] * (x[1] - x[0]))
            return ((x - wi) ** 2).sum() / (2 * V) + p.s2 * ((a - ti[0]) ** 2 + (b - ti[1]) ** 2)

        z = np.array(_K.zero_loss_point(ti[0], ti[1]))
        R = math.sqrt(2 * V * f(wi) + 1e-300)
        cands = [
            wi,
            z,
            -z,
            (z + wi) / 2,
            (wi - z) / 2,
            wi / 2,
            np.array([0.0, wi[1]]),
            np.array([wi[0], 0.0]),
            np.full(2, wi.mean()),
        ]
        cands += [
            wi + r * np.array([math.cos(a), math.sin(a)])
            for r in (R, R / 2)
            for a in np.linspace(0, 2 * math.pi, 8, endpoint=False)
        ]
        if starts is not None:
            cands = list(starts)
        best = None
        for c in cands:
            r = minimize(f, c, method="BFGS", options=dict(gtol=1e-11))
            if best is None or r.fun < best.fun:
                best = r
        xs[i] = best.x
        vals[i] = best.fun
    return xs, vals


def _sigmoid(u):
    return 1.0 / (1.0 + math.exp(-u)) if u >= 0 else math.exp(u) / (1.0 + math.exp(u))


# --------------------------------------------------------------------------- quadrature rules


@dataclass(frozen=True)
class Rule:
    """Quadrature rule over (ξ1, ξ2, η1, η2) ~ N(0, I_4).

    Tensor/sampled rules (``gh``, ``qmc``, ``mc``): ``nodes`` (N, 4), ``weights`` (N,).
    The ``split`` rule (default) is described in ``theory.attention._kernels``: ξ in polar
    coordinates around the point where the student field vanishes, radius by ``n_r``-point
    Gauss-Legendre, every circle scanned at ``n_phi`` angles with the jumps of the global
    minimiser located and the arcs between them integrated by ``n_arc``-point Gauss-Legendre.
    η (the outer 2-D integral) by a tensor rule per component: ``eta="trap"`` (default) the
    trapezoidal rule with spacing ``h`` on [-ETA_CUT, ETA_CUT] (offset grid, even and symmetric),
    ``eta="gh"`` ``n``-point Gauss-Hermite.  The η-integrand is analytic but its complex
    singularities come close to the real axis (the teacher's sigmoid of a quadratic form, and the
    basin structure of the prox): the trapezoidal rule converges geometrically in 1/h there,
    Gauss-Hermite only like exp(-c√n) and non-monotonically (BENCHMARKS.md, ERM section).
    """

    method: str
    n: int
    nodes: np.ndarray | None = None
    weights: np.ndarray | None = None
    n_r: int = 0
    n_phi: int = 0
    n_arc: int = 0
    eta: str = "gh"
    h: float = 0.0

    @property
    def n_points(self) -> int:
        if self.weights is not None:
            return int(self.weights.size)
        return int(self.n * self.n * self.n_r)  # circles

    @property
    def cost(self) -> float:
        """Relative cost of a split rule (η nodes with non-negligible weight × circles × scan)."""
        if self.method != "split":
            return float(self.n_points)
        ex, ew = eta_rule(self)
        keep = np.sum(np.outer(ew, ew) > 1e-15 * ew.max() ** 2)
        return float(keep) * self.n_r * (self.n_phi + 4 * self.n_arc)

    def describe(self) -> dict:
        if self.method == "split":
            d = dict(method="split", eta=self.eta, n_r=self.n_r, n_phi=self.n_phi, n_arc=self.n_arc)
            if self.eta == "trap":
                d.update(h_eta=self.h, eta_cut=ETA_CUT)
            else:
                d.update(n_eta=self.n)
            return d
        return dict(method=self.method, nodes=self.n, n_points=self.n_points)


#: circles (η node × radius) whose Gaussian weight bound is below W_SKIP are skipped; below
#: W_DEEP the jumps on them are not located to full depth (changes < 1e-9 relative, measured)
W_SKIP = 1e-12
W_DEEP = 1e-9
#: half-width of the η domain of the trapezoidal rule (the Gaussian weight there is 1e-12.2)
ETA_CUT = 7.5
#: default split rule: trapezoid in η with spacing h, radial nodes, scan angles, arc nodes.
#: Chosen from the convergence study in BENCHMARKS.md (ERM section): channel expectations
#: within ~1e-6 relative of the converged values at the positional and semantic fixed points.
SPLIT_DEFAULT = dict(eta="trap", h=0.5, n_r=16, n_phi=16, n_arc=4)
#: a cheap split rule: the iteration gets close to the fixed point and the Jacobian of the map
#: comes from it; the accurate rule then only polishes (theory.solve.fixed_point.newton_iteration)
SPLIT_COARSE = dict(eta="gh", n=8, n_r=12, n_phi=16, n_arc=4)


def eta_rule(rule: Rule) -> tuple[np.ndarray, np.ndarray]:
    """1-D rule for each η component of a split rule: nodes (even count, symmetric) and weights
    (including the standard normal density)."""
    if rule.eta == "trap":
        h = rule.h
        N = int(math.floor(ETA_CUT / h))
        x = h * (np.arange(-N, N) + 0.5)
        w = h * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return np.ascontiguousarray(x), np.ascontiguousarray(w)
    from theory.gauss import gh_rule

    x, w = gh_rule(rule.n)
    return np.ascontiguousarray(x), np.ascontiguousarray(w)


def make_rule(
    method: str = "split",
    nodes: int | None = None,
    rng=0,
    *,
    n_r: int | None = None,
    n_phi: int | None = None,
    n_arc: int | None = None,
    h: float | None = None,
    eta: str | None = None,
) -> Rule:
    """Build a quadrature rule.

    ``split`` (default, accurate across the jumps of the prox; sizes default to
    ``SPLIT_DEFAULT``): η by the trapezoidal rule with spacing ``h`` (``eta="trap"``, default)
    or by ``nodes``-point Gauss-Hermite per component (``eta="gh"``; giving ``nodes`` alone
    selects it); ``n_r``, ``n_phi``, ``n_arc`` as in :class:`Rule`.
    ``gh``: plain tensor Gauss-Hermite with ``nodes`` per dimension (default 14) — converges
    slowly and non-monotonically where the prox jumps (positional branch); kept as a reference.
    ``qmc``: ``nodes`` scrambled-Sobol points (default 2^16); ``mc``: ``nodes`` i.i.d. normals.
    """
    from theory import gauss
    from theory.rng import as_rng

    if method == "split":
        d = dict(SPLIT_DEFAULT)
        if eta is None:
            eta = "gh" if (nodes is not None and h is None) else d["eta"]
        if eta not in ("trap", "gh"):
            raise ValueError(f"eta must be 'trap' or 'gh', got {eta!r}")
        d["eta"] = eta
        d["n"] = int(nodes) if nodes is not None else (10 if eta == "gh" else 0)
        if h is not None:
            d["h"] = float(h)
        for k, v in (("n_r", n_r), ("n_phi", n_phi), ("n_arc", n_arc)):
            if v is not None:
                d[k] = int(v)
        if eta == "gh" and d["n"] < 2:
            raise ValueError(
                f"split rule: nodes (Gauss-Hermite per eta component) must be >= 2, got {d['n']}"
            )
        if eta == "trap" and not 0.05 <= d["h"] <= 2.0:
            raise ValueError(
                f"split rule: h (trapezoid spacing in eta) must lie in [0.05, 2], got {d['h']}"
            )
        if d["n_r"] < 2 or d["n_phi"] < 4 or d["n_arc"] < 2:
            raise ValueError(
                f"split rule sizes too small (need n_r >= 2, n_phi >= 4, n_arc >= 2): {d}"
            )
        if eta == "trap":
            d["n"] = 2 * int(math.floor(ETA_CUT / d["h"]))
        return Rule(
            "split",
            d["n"],
            n_r=d["n_r"],
            n_phi=d["n_phi"],
            n_arc=d["n_arc"],
            eta=eta,
            h=d["h"] if eta == "trap" else 0.0,
        )
    if method == "gh":
        n = int(nodes if nodes is not None else 14)
        x, w = gauss.gh_tensor(n, 4)
        return Rule("gh", n, np.ascontiguousarray(x), np.ascontiguousarray(w))
    if method == "qmc":
        n = int(nodes if nodes is not None else 2**16)
        x = gauss.sobol_normal(n, 4, rng)
        return Rule("qmc", n, np.ascontiguousarray(x), np.full(x.shape[0], 1.0 / x.shape[0]))
    if method == "mc":
        n = int(nodes if nodes is not None else 2**16)
        x = as_rng(rng).standard_normal((n, 4))
        return Rule("mc", n, x, np.full(n, 1.0 / n))
    raise ValueError(f"method must be 'split', 'gh', 'qmc' or 'mc', got {method!r}")


def coarse_rule() -> Rule:
    """The cheap rule of :data:`SPLIT_COARSE`."""
    c = SPLIT_COARSE
    return make_rule(
        "split",
        c.get("n"),
        n_r=c["n_r"],
        n_phi=c["n_phi"],
        n_arc=c["n_arc"],
        eta=c["eta"],
        h=c.get("h"),
    )


def _split_sums(rule: Rule, q, m, theta, V, p: ERMParams, jac: bool, symmetry: bool = True):
    ex, ew = eta_rule(rule)
    sq = math.sqrt(q)
    R = math.sqrt(2.0) * abs(m) / sq + _K.R_MAX
    x, w = np.polynomial.legendre.leggauss(rule.n_r)
    rx = (x + 1) * R / 2
    rw = w * R / 2
    glx, glw = np.polynomial.legendre.leggauss(rule.n_arc)
    A = p.A_array
    sym = 0
    if symmetry:
        sym = (1 if theta == 0.0 else 0) + (2 if (m == 0.0 and p.swap_symmetric) else 0)
        if sym and p.swap_symmetric:
            sym += 4
    return _K.split_sums(
        ex,
        ew,
        ex,
        ew,
        rx,
        rw,
        glx,
        glw,
        rule.n_phi,
        float(q),
        float(m),
        float(theta),
        float(V),
        p.rho,
        p.s2,
        p.omega,
        A[0, 0],
        A[1, 1],
        bool(jac),
        _K.MAX_DEPTH,
        _nthreads(),
        sym,
        W_SKIP,
        W_DEEP,
    )


# --------------------------------------------------------------------------- state equations


def _guard_theta(q, theta, rho):
    """Keep ρ - θ²/q > 0 (spec §7): clip |θ| just below √(ρ q).  Returns (θ, clipped)."""
    lim = math.sqrt(rho * q) * (1 - 1e-9)
    if abs(theta) >= lim:
        return math.copysign(lim, theta), True
    return theta, False


def channel(
    q, m, theta, V, params, rule: Rule, *, jac: bool = False, symmetry: bool = True
) -> dict:
    """Expectations over (ξ, η) of the channel quantities at (q, m, θ, V) (see ``channel_sums``).

    Returns E[Σg²], E[Σ s g], E[Σ g η], E[Σ g ξ], E[M] (Moreau envelope), E[tr dx̂/dw],
    E[tr dx̂/dh*] (if ``jac``), ε_g (no prox), and the weight of nodes where Newton failed.
    ``symmetry`` (split rule, even η-node count): use the exact η → -η symmetry when θ = 0 or
    m = 0, and with it the ℓ1 ↔ ℓ2 swap when A_11 = A_22 (a quarter of the work; the odd
    expectations are then exactly 0).  The tests run with ``symmetry=False`` to check the
    symmetric sums and that the odd expectations vanish without being imposed.
    """
    p = as_params(params)
    if not (q > 0 and V > 0):
        raise ValueError(f"q and V must be > 0 (got q={q}, V={V})")
    if p.rho - theta * theta / q <= 0:
        raise ValueError(f"rho - theta^2/q must be > 0 (got rho={p.rho}, theta={theta}, q={q})")
    A = p.A_array
    stats = {}
    if rule.method == "split":
        s = _split_sums(rule, q, m, theta, V, p, jac, symmetry)
        stats = dict(jumps=float(s[_K.N_CHANNEL]), unresolved=float(s[_K.N_CHANNEL + 1]))
    else:
        s = _K.channel_sums(
            rule.nodes,
            rule.weights,
            float(q),
            float(m),
            float(theta),
            float(V),
            p.rho,
            p.s2,
            p.omega,
            A[0, 0],
            A[1, 1],
            bool(jac),
            _nthreads(),
        )
    wsum = s[_K.C_W]
    return dict(
        g2=s[_K.C_G2] / wsum,
        sg=s[_K.C_SG] / wsum,
        geta=s[_K.C_GETA] / wsum,
        gxi=s[_K.C_GXI] / wsum,
        M=s[_K.C_M] / wsum,
        trjw=s[_K.C_TRJW] / wsum,
        trjh=s[_K.C_TRJH] / wsum,
        eps_g=s[_K.C_EG] / wsum,
        bad=s[_K.C_BAD] / wsum,
        wsum=wsum,
        **stats,
    )


def hats_from_channel(alpha, q, m, theta, V, ch: dict, params) -> dict:
    """Conjugate equations (Stein forms, spec §3) and the derivative (Jacobian) forms."""
    p = as_params(params)
    c = math.sqrt(p.rho - theta * theta / q)
    qhat = alpha * ch["g2"]
    mhat = alpha * ch["sg"]
    thetahat = alpha * ch["geta"] / c
    Vhat = -(alpha / math.sqrt(q)) * ch["gxi"] + theta * thetahat / q
    out = dict(qhat=qhat, mhat=mhat, thetahat=thetahat, Vhat=Vhat)
    # derivative forms: V̂ = -α E[tr ∂g/∂w] = -(α/V) E[tr(dx̂/dw) - 2], θ̂ = (α/V) E[tr dx̂/dh*]
    out["Vhat_jac"] = -(alpha / V) * (ch["trjw"] - 2.0)
    out["thetahat_jac"] = (alpha / V) * ch["trjh"]
    return out


def overlaps_from_hats(qhat, mhat, thetahat, Vhat, params) -> dict:
    """Ridge step in closed form (spec §3): D = λ + σ² V̂."""
    p = as_params(params)
    D = p.lam + p.s2 * Vhat
    if not D > 0:
        raise FloatingPointError(
            f"lambda + sigma^2 Vhat = {D:.3g} <= 0: the ridge step is unstable"
        )
    return dict(
        q=p.s2 * (p.s2 * qhat + mhat**2 + p.s2 * p.rho * thetahat**2) / D**2,
        m=mhat / D,
        theta=p.s2 * p.rho * thetahat / D,
        V=p.s2 / D,
    )


def free_energy(alpha, o: dict, h: dict, EM: float, params) -> float:
    """Φ of spec §3 at overlaps ``o`` (q, m, theta, V) and hats ``h``; ε_t = -Φ."""
    p = as_params(params)
    D = p.lam + p.s2 * h["Vhat"]
    return (
        0.5 * (h["Vhat"] * o["q"] - h["qhat"] * o["V"])
        - o["m"] * h["mhat"]
        - o["theta"] * h["thetahat"]
        + 0.5 * (p.s2 * h["qhat"] + h["mhat"] ** 2 + p.s2 * p.rho * h["thetahat"] ** 2) / D
        - alpha * EM
    )


def phi_at(alpha, overlaps: dict, hats: dict, params, rule: Rule) -> float:
    """Φ as a function of all eight variables (for stationarity checks): E[M] recomputed at the
    given (q, m, θ, V)."""
    ch = channel(overlaps["q"], overlaps["m"], overlaps["theta"], overlaps["V"], params, rule)
    return free_energy(alpha, overlaps, hats, ch["M"], params)


#: cold-start initialisations (spec §4: semantic m ≈ 0, θ ≈ 0.35, q ≈ 0.9; positional θ = 0,
#: m ≈ 0.2)
DEFAULT_INIT = {
    "semantic": dict(q=0.9, m=0.0, theta=0.35, V=1.0),
    # V is divided by √α (the positional V at the reference parameters is ≈ 16/√α for α in
    # [0.5, 4]); from here the quasi-Newton solve converges where the damped iteration, whose
    # map has an eigenvalue ≈ -5 in the m direction, needs many steps
    "positional": dict(q=0.05, m=0.25, theta=0.0, V=16.0),
    "trivial": dict(q=0.05, m=0.0, theta=0.0, V=1.0),
}

#: what a converged result passes on to a warm-started neighbour (in ``metadata``): the
#: accurate-minus-cheap shift and the cheap stage's Jacobian
WARM_EXTRAS = ("cheap_shift", "jac_cheap")
#: a warm start whose accurate-map residual is below WARM_DIRECT_RESIDUAL is polished by
#: quasi-Newton on the accurate rule directly (at most WARM_DIRECT_MAPS maps), else by the
#: cheap-then-accurate route of a cold start
WARM_DIRECT_RESIDUAL = 5e-2
WARM_DIRECT_MAPS = 6

#: |m| or |θ|/σ² below this is "zero" when labelling a fixed point
LABEL_TOL = 1e-6
#: during the iteration, θ/σ² (semantic) or |m| (positional) below this and still decreasing
#: means the branch collapsed onto the trivial one (status "diverged", message says so)
COLLAPSE = 2e-2


def label_branch(m: float, theta: float, params) -> str:
    p = as_params(params)
    has_m = abs(m) > LABEL_TOL
    has_t = abs(theta) / p.s2 > LABEL_TOL
    if has_t and not has_m:
        return "semantic"
    if has_m and not has_t:
        return "positional"
    if not has_m and not has_t:
        return "trivial"
    return "mixed"


@dataclass(frozen=True, kw_only=True)
class ERMResult(Result):
    """A replica-symmetric fixed point of the ERM state equations (or a simulation summary with
    the same field names).  ``branch`` is read from the order parameters (θ = 0 → positional,
    m = 0 → semantic, both → trivial, neither → mixed); ``branch_init`` is the initialisation."""

    alpha: float
    omega: float
    q: float = math.nan
    m: float = math.nan
    theta: float = math.nan
    V: float = math.nan
    qhat: float = math.nan
    mhat: float = math.nan
    thetahat: float = math.nan
    Vhat: float = math.nan
    eps_t: float = math.nan
    eps_g: float = math.nan
    branch: str = ""
    branch_init: str = ""
    iterations: int = 0
    residual: float = math.nan

    @property
    def theta_over_s2(self) -> float:
        return self.theta / self.params.get("sigma", 0.5) ** 2


def _enforce(branch, params, d):
    if branch == "positional" or branch == "trivial":
        d["theta"] = 0.0
    if branch == "trivial" or (branch == "semantic" and params.swap_symmetric):
        d["m"] = 0.0
    return d


def fixed_point(
    alpha,
    params=None,
    branch: str = "semantic",
    init: dict | None = None,
    *,
    mixing: float = 0.5,
    tol: float = 1e-6,
    max_iter: int = 300,
    nodes: int | None = None,
    method: str = "split",
    rng=0,
    rule: Rule | None = None,
    accel: str = "newton",
    coarse: bool = True,
    keep_history: bool = False,
    diagnostics: bool = False,
) -> ERMResult:
    """Solve the state equations of spec §3 on one branch.

    ``branch`` picks the initialisation (``DEFAULT_INIT``) and the exact invariant subspace:
    positional → θ ≡ 0 (exact: T is even in h*), semantic → m ≡ 0 (exact for A_11 = A_22),
    trivial → θ ≡ m ≡ 0.  The returned ``branch`` is read from the converged order parameters.
    ``init`` overrides (q, m, theta, V) (warm start).

    Iteration (``accel``):
      * ``"newton"`` (default): a warm start whose residual on the requested rule is below
        ``WARM_DIRECT_RESIDUAL`` (continuation: typically 1e-4-1e-2) is polished directly by
        quasi-Newton on the requested rule with the cheap map's finite-difference Jacobian
        (2-3 accurate and 4 cheap maps; the cheap rule's own error, ~2e-3 and oscillating with
        the parameters, would make a cheap fixed point a worse start).  Otherwise:
        a quasi-Newton (Broyden) solve of F(x) = x on the cheap rule
        ``SPLIT_COARSE`` (warm starts and positional cold starts; a cold semantic start, or a
        failed Newton, uses the damped Anderson iteration, ``mixing`` = weight on the new
        iterate, down to a residual of 1e-3), then a quasi-Newton solve on the requested rule
        whose starting Jacobian comes from finite differences of the cheap map — typically 2-4
        evaluations of the accurate map.  If it stalls, the damped Anderson iteration takes
        over on the requested rule (said in ``message``).  A warm start that is a result (or
        a dict with the keys of ``WARM_EXTRAS``) also passes on its accurate-minus-cheap shift
        and cheap Jacobian.
      * ``"anderson"``: damped Anderson iteration, first to 1e-5 on the cheap rule, then on the
        requested one; ``"none"``: the plain damped iteration.
    Convergence: the UNDAMPED map's relative change per order parameter < ``tol`` (default 1e-6,
    below the default rule's quadrature error of ~4e-5; ε_t, being stationary, is then exact to
    ~1e-12 relative).  ``coarse``
    = False uses the requested rule throughout (no cheap rule).
    Quadrature: ``method`` ("split" default, "gh", "qmc", "mc") and ``nodes`` (see
    :func:`make_rule`), or a prebuilt ``rule``.
    ``diagnostics``: re-evaluate the channel at the final point with the prox Jacobians and put
    the derivative forms of V̂ and θ̂ (``Vhat_jac``, ``thetahat_jac``) in ``metadata`` (one more
    map evaluation).
    """
    from theory.solve.fixed_point import anderson_iteration, damped_iteration, newton_iteration

    p = as_params(params)
    alpha = check_alpha(alpha)
    if branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    if accel not in ("newton", "anderson", "none"):
        raise ValueError(f"accel must be 'newton', 'anderson' or 'none', got {accel!r}")
    if not 0.0 < mixing <= 1.0:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing}")
    if rule is None:
        rule = make_rule(method, nodes, rng)
    x0 = dict(DEFAULT_INIT[branch])
    if branch == "positional":
        x0["V"] /= math.sqrt(alpha)
    shift = None
    cheap_x = None
    jac_prev = None
    if init is not None:
        extra = (init.metadata or {}) if hasattr(init, "to_dict") else init
        # a warm start from a neighbouring solution also carries its accurate-minus-cheap shift
        # and the final Jacobian of the cheap quasi-Newton stage (it varies slowly along a
        # branch; the accurate stage starts from the cheap stage's final Jacobian)
        shift = extra.get("cheap_shift")
        jac_prev = extra.get("jac_cheap")
        if hasattr(init, "to_dict"):
            init = init.to_dict()
        for k in ("q", "m", "theta", "V"):
            if k in init and init[k] is not None and np.isfinite(init[k]):
                x0[k] = float(init[k])
    x0 = _enforce(branch, p, x0)
    x0["m"], x0["theta"] = abs(x0["m"]), abs(x0["theta"])
    if not (x0["q"] > 0 and x0["V"] > 0):
        raise ValueError(f"the initial q and V must be > 0, got {x0}")
    keys = (
        ["q", "V"]
        + (["m"] if x0["m"] != 0 or branch == "positional" else [])
        + (["theta"] if x0["theta"] != 0 or branch == "semantic" else [])
    )
    if branch == "semantic" and not p.swap_symmetric:
        keys = ["q", "V", "m", "theta"]
    guard_hits = [0]

    def make_F(rl):
        def F(x):
            full = dict(q=x["q"], V=x["V"], m=x.get("m", 0.0), theta=x.get("theta", 0.0))
            th, clipped = _guard_theta(full["q"], full["theta"], p.rho)
            guard_hits[0] += clipped
            ch = channel(full["q"], full["m"], th, full["V"], p, rl)
            h = hats_from_channel(alpha, full["q"], full["m"], th, full["V"], ch, p)
            new = _enforce(
                branch, p, overlaps_from_hats(h["qhat"], h["mhat"], h["thetahat"], h["Vhat"], p)
            )
            return {k: new[k] for k in keys}, (ch, h)

        return F

    solver = anderson_iteration if accel == "anderson" else damped_iteration
    start = {k: x0[k] for k in keys}

    trace = []

    def stop(Fx, it):
        # a branch that collapses onto the trivial one does not exist at this α: stop early when
        # its order parameter (θ/σ² or |m|) is small AND has decreased at every one of the last
        # 15 iterations (a cold start can pass through m ≈ 0 transiently)
        if branch == "semantic":
            v = abs(Fx.get("theta", 1.0)) / p.s2
        elif branch == "positional":
            v = abs(Fx.get("m", 1.0))
        else:
            return None
        trace.append(v)
        last = trace[-16:]
        if len(last) == 16 and v < COLLAPSE and all(b < a for a, b in zip(last, last[1:])):
            return (
                f"the {branch} branch collapsed onto the trivial one (order parameter "
                f"{v:.2e} < {COLLAPSE:g}, decreasing for 15 iterations)"
            )
        # ... or is below 3 COLLAPSE, has decreased at every one of the last 30 iterations, and
        # the Aitken extrapolation of that decay (iterations -30, -15, 0) ends below COLLAPSE/2
        # (the slow geometric escape from a branch that ended nearby)
        last = trace[-31:]
        if len(last) == 31 and v < 3 * COLLAPSE and all(b < a for a, b in zip(last, last[1:])):
            a0, a1, a2 = last[0], last[15], last[30]
            den = a0 + a2 - 2 * a1
            limit = (a0 * a2 - a1 * a1) / den if den > 0 else math.inf
            if limit < COLLAPSE / 2:
                return (
                    f"the {branch} branch collapsed onto the trivial one (order parameter "
                    f"{v:.2e}, decreasing for 30 iterations towards {max(limit, 0):.1e})"
                )
        return None

    iters = 0
    cheap = rule
    if coarse and rule.method == "split":
        c = coarse_rule()
        if rule.cost > 2 * c.cost:
            cheap = c
    if accel == "newton":
        # 1. quasi-Newton on the cheap rule (Jacobian by finite differences of the cheap map);
        #    if it fails, the damped Anderson iteration on the cheap rule down to 1e-3
        # 2. quasi-Newton on the requested rule, its Jacobian from finite differences of the
        #    cheap map: a few accurate maps polish the cheap fixed point
        #    (a cold semantic start is far from the fixed point: Anderson first there)
        pre = out = None
        if init is not None and cheap is not rule:
            # a warm start (continuation) is usually within ~1e-3 of the fixed point: solve the
            # accurate equations directly, the Jacobian from finite differences of the cheap map
            # at the start (no cheap fixed point: the cheap rule's error, ~2e-3 and oscillating
            # with the parameters, is larger than a good warm start's)
            direct = newton_iteration(
                make_F(rule),
                start,
                tol=tol,
                max_iter=WARM_DIRECT_MAPS,
                jacobian_map=make_F(cheap),
                keep_history=keep_history,
                stop=stop,
                max_start_residual=WARM_DIRECT_RESIDUAL,
            )
            iters += direct.iterations
            if direct.status in ("converged", "diverged"):
                out = direct
        if out is None and (init is not None or branch == "positional"):
            pre = newton_iteration(
                make_F(cheap),
                start,
                tol=max(tol, 1e-4) if cheap is not rule else tol,
                max_iter=16,
                keep_history=keep_history,
                stop=stop,
                jacobian0=_jac_for(jac_prev, keys),
            )
            iters += pre.iterations
        if out is None and (pre is None or pre.status != "converged"):
            pre = anderson_iteration(
                make_F(cheap),
                start,
                mixing=mixing,
                tol=max(tol, 1e-3),
                max_iter=max_iter,
                keep_history=keep_history,
                stop=stop,
            )
            iters += pre.iterations
        if out is not None:
            out.iterations = iters
        elif pre.status == "diverged" or (
            cheap is rule and pre.status == "converged" and pre.residual < tol
        ):
            out = pre  # (no cheap rule: stage 1 already solved the requested equations)
            out.iterations = iters
        else:
            begin = dict(pre.x) if pre.status == "converged" else start
            if pre.status == "converged" and shift and cheap is not rule:
                # defect correction: the accurate fixed point is the cheap one plus a shift that
                # varies slowly along a branch (given by the warm start's result)
                trial = {k: begin[k] + shift.get(k, 0.0) for k in begin}
                if all(v > 0 for k, v in trial.items() if k in ("q", "V")):
                    begin = trial
            out = newton_iteration(
                make_F(rule),
                begin,
                tol=tol,
                max_iter=min(max_iter, 40),
                jacobian_map=make_F(cheap) if cheap is not rule else None,
                keep_history=keep_history,
                stop=stop,
                jacobian_base=((pre.x, pre.Fx) if pre.status == "converged" and pre.Fx else None),
            )
            if out.status == "converged" and pre.status == "converged" and cheap is not rule:
                cheap_x = {k: float(v) for k, v in pre.x.items()}
            if out.status in ("converged", "diverged"):
                out.iterations += iters
                iters = 0
            else:
                # fall back to the damped Anderson iteration on the requested rule
                note = f"quasi-Newton stopped ({out.status}: {out.message})"
                iters += out.iterations
                nxt = dict(out.x) if out.status == "max_iter" else begin
                out = anderson_iteration(
                    make_F(rule),
                    nxt,
                    mixing=mixing,
                    tol=tol,
                    max_iter=max_iter,
                    keep_history=keep_history,
                    stop=stop,
                )
                out.iterations += iters
                out.message = f"{note}; {out.message}" if out.message else note
    else:
        if cheap is not rule:
            pre = solver(
                make_F(cheap),
                start,
                mixing=mixing,
                tol=max(tol, 1e-5),
                max_iter=max_iter,
                keep_history=keep_history,
                stop=stop,
            )
            iters += pre.iterations
            if pre.status == "converged":
                start = dict(pre.x)
        if iters and pre.status == "diverged":
            out = pre
        else:
            out = solver(
                make_F(rule),
                start,
                mixing=mixing,
                tol=tol,
                max_iter=max_iter,
                keep_history=keep_history,
                stop=stop,
            )
            out.iterations += iters
            if out.status == "max_iter" and accel == "anderson":
                # Anderson can lock into a cycle where the map is rough: fall back to the plain
                # damped iteration with half the mixing from the last iterate
                n0 = out.iterations
                out = damped_iteration(
                    make_F(rule),
                    dict(out.x),
                    mixing=mixing / 2,
                    tol=tol,
                    max_iter=max_iter,
                    keep_history=keep_history,
                    stop=stop,
                )
                out.iterations += n0
                note = "Anderson did not converge, finished with the damped iteration"
                out.message = f"{out.message}; {note}" if out.message else note
    if out.Fx:
        out.Fx = _enforce(
            branch,
            p,
            dict(
                q=out.Fx["q"], V=out.Fx["V"], m=out.Fx.get("m", 0.0), theta=out.Fx.get("theta", 0.0)
            ),
        )
    out.x = dict(q=out.x["q"], V=out.x["V"], m=out.x.get("m", 0.0), theta=out.x.get("theta", 0.0))
    res = _result_from(alpha, p, branch, out, rule, tol, guard_hits[0], diagnostics)
    if out.status == "diverged" and "collapsed onto the trivial" in (out.message or ""):
        res.metadata["collapsed"] = True
    if (
        res.converged
        and accel == "newton"
        and cheap is not rule
        and getattr(pre, "jacobian", None) is not None
    ):
        res.metadata["jac_cheap"] = dict(
            keys=list(keys), J=pre.jacobian[0].tolist(), scale=pre.jacobian[1].tolist()
        )
    if cheap_x is not None and res.converged:
        res.metadata["cheap_shift"] = {
            k: float(getattr(res, k) * (1 if cheap_x[k] >= 0 else -1) - cheap_x[k]) for k in cheap_x
        }
    return res


def _jac_for(saved, keys):
    """A Jacobian saved in a result's metadata, usable for the solver variables ``keys``."""
    if not saved or list(saved.get("keys", ())) != list(keys):
        return None
    return np.asarray(saved["J"], dtype=float), np.asarray(saved["scale"], dtype=float)


def _result_from(alpha, p, branch, out, rule, tol, guard_hits, diagnostics=False) -> ERMResult:
    # converged: the channel of the last map evaluation (at out.x) is reused and the result is
    # reported at out.x — the fixed point to within the tolerance, with hats and Φ consistent
    # with it (ε_t, being stationary, is exact to ~tol²); otherwise (or for the derivative-form
    # diagnostics) everything is evaluated at the final undamped image F(out.x)
    reuse = not diagnostics and out.status == "converged" and isinstance(out.aux, tuple)
    x = out.x if reuse or not out.Fx else out.Fx
    if reuse:  # the channel saw θ through the guard
        x = dict(x, theta=_guard_theta(x["q"], x["theta"], p.rho)[0])
    meta = dict(rule.describe(), tol=tol, guard_hits=int(guard_hits))
    if out.aux is None or out.status == "nan":
        return ERMResult(
            alpha=alpha,
            omega=p.omega,
            status=out.status,
            message=out.message,
            branch_init=branch,
            iterations=out.iterations,
            params=p.to_dict(),
            metadata=meta,
            history=out.history,
        )
    try:
        if reuse:
            ch, h = out.aux
        else:
            ch = channel(x["q"], x["m"], x["theta"], x["V"], p, rule, jac=diagnostics)
            h = hats_from_channel(alpha, x["q"], x["m"], x["theta"], x["V"], ch, p)
    except ValueError as exc:
        return ERMResult(
            alpha=alpha,
            omega=p.omega,
            status="diverged",
            message=str(exc),
            branch_init=branch,
            iterations=out.iterations,
            params=p.to_dict(),
            metadata=meta,
            history=out.history,
        )
    phi = free_energy(alpha, x, h, ch["M"], p)
    meta.update(
        phi=phi,
        eps_t_energy=alpha * (ch["M"] - 0.5 * x["V"] * ch["g2"]) + p.lam * x["q"] / (2 * p.s2),
        newton_fail_weight=ch["bad"],
        jumps=ch.get("jumps"),
        unresolved_jumps=ch.get("unresolved"),
        mhat_signed=h["mhat"],
        thetahat_signed=h["thetahat"],
    )
    if diagnostics:
        meta.update(Vhat_jac=h["Vhat_jac"], thetahat_jac=h["thetahat_jac"])
    m, th = abs(x["m"]), abs(x["theta"])
    return ERMResult(
        alpha=alpha,
        omega=p.omega,
        q=x["q"],
        m=m,
        theta=th,
        V=x["V"],
        qhat=h["qhat"],
        mhat=abs(h["mhat"]),
        thetahat=abs(h["thetahat"]),
        Vhat=h["Vhat"],
        eps_t=-phi,
        eps_g=ch["eps_g"],
        branch=label_branch(m, th, p),
        branch_init=branch,
        status=out.status,
        message=out.message,
        iterations=out.iterations,
        residual=out.residual,
        params=p.to_dict(),
        metadata=meta,
        history=out.history,
    )


# --------------------------------------------------------------------------- linear baseline


def _softmax_moments(rho: float, n: int = 160) -> tuple[float, float]:
    """E[S_11] and E[S_11²] for S = softmax_row(h hᵀ), h ~ N(0, ρ I_2).

    With d = h1 - h2 and s = h1 + h2 (independent, variance 2ρ), u = h1(h1 - h2) = d(d + s)/2,
    so given d, u ~ N(d²/2, ρ d²/2): a 2-D Gaussian integral with an analytic integrand,
    evaluated by a 2-D Gauss-Hermite product rule with ``n`` nodes per dimension (converged to
    machine precision for n >= 100 at ρ <= 4; the tests compare with scipy's adaptive dblquad).
    """
    from scipy.special import expit

    from theory.gauss import gh_rule

    x, w = gh_rule(n)
    d = math.sqrt(2 * rho) * x[:, None]
    z = x[None, :]
    u = 0.5 * d**2 + np.abs(d) * math.sqrt(rho / 2) * z
    S = expit(u)
    W = w[:, None] * w[None, :]
    return float((W * S).sum()), float((W * S**2).sum())


def linear_baseline(params=None, *, n: int = 160) -> float:
    """ε_g of the linear positional baseline f_B(X) = B X (spec §5), d → ∞:
    ε_g^lin = (σ²/2)(1 - ω)² Σ_ij Var[softmax(h hᵀ)_ij] = 2 σ² (1 - ω)² Var[S_11], h ~ N(0, ρ I)
    (Var S_12 = Var S_11 and, by the h1 ↔ h2 symmetry, the second row equals the first)."""
    p = as_params(params)
    m1, m2 = _softmax_moments(p.rho, n)
    return 2.0 * p.s2 * (1.0 - p.omega) ** 2 * (m2 - m1 * m1)


def linear_baseline_B(params=None, *, n: int = 160) -> np.ndarray:
    """The baseline's limiting B* = ω A + (1 - ω) E[softmax(h hᵀ)], shape (2, 2)."""
    p = as_params(params)
    m1, _ = _softmax_moments(p.rho, n)
    ES = np.array([[m1, 1 - m1], [1 - m1, m1]])
    return p.omega * p.A_array + (1 - p.omega) * ES


# --------------------------------------------------------------------------- curves, transition


def curve(
    alphas,
    params=None,
    branches=("semantic", "positional"),
    *,
    sweeps=None,
    progress: bool = False,
    **fp_kwargs,
) -> list[ERMResult]:
    """Fixed points along ``alphas`` for each branch by continuation (warm starts).

    ``sweeps``: "forward" (increasing α) and/or "backward" (decreasing α); each result carries
    ``metadata["sweep"]``.  Default (None): each branch is followed from where it surely exists
    — the semantic branch backward from the largest α (it disappears at small α), the
    positional and trivial ones forward.  Once a followed branch collapses onto the trivial one
    (its end), the remaining α of that sweep are returned unsolved (status "diverged",
    ``metadata["not_continued"]``).  Results are returned branch by branch, sweep by
    sweep, in increasing α.  ``fp_kwargs`` go to :func:`fixed_point` (mixing, tol, nodes,
    method, rule, ...).
    """
    from theory.solve.continuation import sweep as _sweep

    p = as_params(params)
    alphas = np.asarray(alphas, dtype=float)
    for a in alphas:
        check_alpha(a)
    for b in branches:
        if b not in BRANCHES:
            raise ValueError(f"branch must be one of {BRANCHES}, got {b!r}")
    if "rule" not in fp_kwargs:
        fp_kwargs["rule"] = make_rule(
            fp_kwargs.pop("method", "split"), fp_kwargs.pop("nodes", None)
        )

    def sweeps_of(b):
        if sweeps is not None:
            return tuple(sweeps)
        return ("backward",) if b == "semantic" else ("forward",)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(alphas) * sum(len(sweeps_of(b)) for b in branches), desc="erm curve")
    out = []
    for b in branches:
        last, lost = [], {}

        def solve(a, init, b=b, last=last, lost=lost):
            d = "forward" if not last or a > last[-1].alpha else "backward"
            if d in lost:
                # natural continuation cannot pass the end (fold) of a branch: once the branch,
                # followed this way, collapsed onto the trivial one, it is not solved further
                return ERMResult(
                    alpha=a,
                    omega=p.omega,
                    status="diverged",
                    branch_init=b,
                    params=p.to_dict(),
                    metadata=dict(not_continued=True),
                    message=f"not continued: the {b} branch, followed {d}, "
                    f"collapsed at α = {lost[d]:.6g}",
                )
            if init is not None and last:
                # carry the accurate-minus-cheap shift along the branch (defect correction)
                init = dict(init, **{k: last[-1].metadata.get(k) for k in WARM_EXTRAS})
            r = fixed_point(a, p, b, init=init, **fp_kwargs)
            if r.converged and r.branch == b:
                last.append(r)
            elif last and r.metadata.get("collapsed"):
                lost[d] = a
            return r

        res = _sweep(
            solve,
            alphas,
            None,
            directions=sweeps_of(b),
            progress=bar,
            accept=lambda r, b=b: r.converged and r.branch == b,
        )
        for d in sweeps_of(b):
            for r in res[d]:
                r.metadata["sweep"] = d
                out.append(r)
    if bar is not None:
        bar.close()
    return out


def global_minimiser(results: list[ERMResult]) -> list[ERMResult]:
    """Per α, the converged fixed point with the lowest ε_t (spec §4: the global minimiser)."""
    by = {}
    for r in results:
        if not r.converged or not math.isfinite(r.eps_t):
            continue
        k = round(float(r.alpha), 12)
        if k not in by or r.eps_t < by[k].eps_t:
            by[k] = r
    return [by[k] for k in sorted(by)]


@dataclass(frozen=True, kw_only=True)
class TransitionResult(Result):
    """α_c (ε_t(semantic) = ε_t(positional)) and α_l (global minimiser's ε_g = ε_g^lin)."""

    omega: float
    alpha_c: float = math.nan
    alpha_l: float = math.nan
    eps_g_lin: float = math.nan
    eps_g_sem_at_alpha_c: float = math.nan
    eps_g_pos_at_alpha_c: float = math.nan
    eps_t_at_alpha_c: float = math.nan
    alpha_l_branch: str = ""


def transition(
    params=None,
    *,
    alphas=None,
    xtol: float = 1e-4,
    progress: bool = False,
    hint: float | None = None,
    hint_l: float | None = None,
    seeds: dict | None = None,
    step: float = 1.25,
    **fp_kwargs,
) -> TransitionResult:
    """α_c(ω) and α_l(ω) (spec §4-5).

    Δε_t(α) = ε_t(semantic) - ε_t(positional) (> 0 below α_c) is bracketed, then its root is
    refined by Brent to ``xtol``.  Bracketing: on the grid ``alphas`` when given (first sign
    change), otherwise adaptively — from ``hint`` (default 1) in geometric steps of 1.25 towards
    the sign change (α in [0.02, 50]).  Every fixed point is warm-started from the nearest ones
    already solved on its branch (linear extrapolation in α), or from ``seeds``
    ({branch: dict(q, m, theta, V)}) for the first one — how :func:`phase_diagram` carries the
    solution from one ω to the next.
    α_l: where the global minimiser's ε_g crosses ε_g^lin — inside the positional branch below
    α_c, at α_c itself when the drop happens in the jump, or inside the semantic branch above
    α_c (same bracket + Brent).
    ``status``: "converged", or "max_iter" when a bracket is missing (the message says which,
    and the field is nan).  ``metadata["solved"]`` counts the fixed points computed.
    """
    from theory.solve.continuation import _extrapolate
    from theory.solve.transition import find_root

    p = as_params(params)
    if "rule" not in fp_kwargs:
        fp_kwargs["rule"] = make_rule(
            fp_kwargs.pop("method", "split"), fp_kwargs.pop("nodes", None)
        )
    solved: dict[str, dict[float, ERMResult]] = {"semantic": {}, "positional": {}}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=f"erm transition ω={p.omega:g}", unit="fixed point")

    def ok(r, b):
        return r is not None and r.converged and r.branch == b

    def warm(a, b):
        good = sorted((x for x, r in solved[b].items() if ok(r, b)), key=lambda x: abs(x - a))
        if not good:
            return (seeds or {}).get(b)
        r1 = solved[b][good[0]]
        if len(good) < 2 or abs(good[0] - a) < 1e-12:
            return r1
        # linear extrapolation from the two nearest (the same guard as in continuation)
        keys = ("q", "m", "theta", "V")
        near = [{k: getattr(solved[b][x], k) for k in keys} for x in (good[1], good[0])]
        out = _extrapolate(near, [good[1], good[0]], a, keys)
        out.update({k: r1.metadata.get(k) for k in WARM_EXTRAS})
        return out

    def solve_at(a, b):
        a = float(a)
        if a in solved[b]:
            return solved[b][a]
        r = fixed_point(a, p, b, init=warm(a, b), **fp_kwargs)
        if not ok(r, b) and warm(a, b) is not None:
            r2 = fixed_point(a, p, b, **fp_kwargs)  # the warm start may have jumped: cold start
            if ok(r2, b):
                r = r2
        solved[b][a] = r
        if bar is not None:
            bar.update(1)
        return r

    def dE(a):
        rs, rp = solve_at(a, "semantic"), solve_at(a, "positional")
        if not (ok(rs, "semantic") and ok(rp, "positional")):
            return math.nan
        return rs.eps_t - rp.eps_t

    msgs = []
    if alphas is not None:
        grid = np.sort(np.asarray(alphas, dtype=float))
        for a in grid:
            check_alpha(a)
    else:
        grid = _bracket(dE, float(hint) if hint else 1.0, sign_below=+1.0, step=step)
    rc = find_root(dE, grid, xtol=xtol)
    alpha_c = rc.root
    eps_lin = linear_baseline(p)
    out = dict(omega=p.omega, eps_g_lin=eps_lin)
    if rc.status == "converged":
        rs, rp = solve_at(alpha_c, "semantic"), solve_at(alpha_c, "positional")
        out.update(
            alpha_c=alpha_c,
            eps_g_sem_at_alpha_c=rs.eps_g,
            eps_g_pos_at_alpha_c=rp.eps_g,
            eps_t_at_alpha_c=0.5 * (rs.eps_t + rp.eps_t),
        )
    else:
        msgs.append(f"alpha_c: {rc.message or rc.status}")
    alpha_l, l_branch = math.nan, ""
    if math.isfinite(alpha_c):
        if out["eps_g_pos_at_alpha_c"] < eps_lin:
            # the positional minimiser is already below the baseline: α_l lies below α_c
            f = lambda a: _eps_g_minus(solve_at(a, "positional"), "positional", eps_lin)  # noqa: E731
            g = _bracket(f, alpha_c, sign_below=+1.0, start_value=f(alpha_c))
            rl = find_root(f, g, xtol=xtol)
            l_branch = "positional"
        elif out["eps_g_sem_at_alpha_c"] < eps_lin:
            rl, l_branch = None, "jump"
            alpha_l = alpha_c
        else:
            f = lambda a: _eps_g_minus(solve_at(a, "semantic"), "semantic", eps_lin)  # noqa: E731
            if hint_l and hint_l > alpha_c:
                g = _bracket(f, float(hint_l), sign_below=+1.0, step=step, lo=alpha_c)
            else:
                g = _bracket(f, alpha_c, sign_below=+1.0, start_value=f(alpha_c))
            rl = find_root(f, g, xtol=xtol)
            l_branch = "semantic"
        if rl is not None:
            if rl.status == "converged":
                alpha_l = rl.root
            else:
                msgs.append(f"alpha_l: {rl.message or rl.status} ({l_branch} branch)")
                l_branch = ""
    if bar is not None:
        bar.close()
    status = "converged" if math.isfinite(alpha_c) and math.isfinite(alpha_l) else "max_iter"
    rule = fp_kwargs["rule"]
    n_solved = sum(len(v) for v in solved.values())
    seeds_out = (
        {
            b: {k: getattr(solve_at(alpha_c, b), k) for k in ("q", "m", "theta", "V")}
            for b in ("semantic", "positional")
        }
        if math.isfinite(alpha_c)
        else None
    )
    return TransitionResult(
        alpha_l=alpha_l,
        alpha_l_branch=l_branch,
        status=status,
        message="; ".join(msgs),
        params=p.to_dict(),
        metadata=dict(
            rule.describe(),
            grid=[float(x) for x in grid],
            dE_evaluations=rc.values,
            solved=n_solved,
            seeds_at_alpha_c=seeds_out,
        ),
        **out,
    )


def _bracket(
    f,
    a0: float,
    *,
    sign_below: float,
    start_value: float | None = None,
    step: float = 1.25,
    lo: float = 0.02,
    hi: float = 50.0,
) -> list[float]:
    """Points of a geometric walk from ``a0`` towards the sign change of ``f`` (``f`` has the
    sign ``sign_below`` below the root), ending with the first pair that brackets it (or at the
    edge of [lo, hi], or where ``f`` stops being finite).  The factor starts at ``step`` and
    its excess over 1 doubles at every step (a good hint gives a tight bracket, a poor one is
    still found in a few steps).  Returned sorted."""
    fa = f(a0) if start_value is None else start_value
    pts = [a0]
    if not math.isfinite(fa):
        # a branch is missing at a0: probe both sides for a finite value
        for k in range(1, 8):
            for a in (a0 * step**k, a0 / step**k):
                if lo <= a <= hi:
                    v = f(a)
                    pts.append(a)
                    if math.isfinite(v):
                        a0, fa = a, v
                        break
            if math.isfinite(fa):
                break
        if not math.isfinite(fa):
            return sorted(pts)
    up = fa * sign_below > 0  # still below the root: walk up
    a = a0
    fac = step
    while True:
        prev = a
        a = a * fac if up else a / fac
        fac = min(1.0 + 2.0 * (fac - 1.0), 2.0)
        edge = not lo < a < hi
        a = min(max(a, lo), hi)  # the interval's edge is evaluated once
        if a in pts:
            break
        v = f(a)
        pts.append(a)
        for _ in range(4):  # a branch ends between prev and a: step back (geometric midpoint)
            if math.isfinite(v):
                break
            a = math.sqrt(prev * a)
            v = f(a)
            pts.append(a)
            fac = step
        if edge or not math.isfinite(v) or v * fa <= 0:
            break
    return sorted(pts)


def _eps_g_minus(r, b, eps_lin):
    if not (r.converged and r.branch == b):
        return math.nan
    return r.eps_g - eps_lin


def phase_diagram(omegas, params=None, *, progress: bool = False, on_row=None, **kw) -> list[dict]:
    """α_c(ω) and α_l(ω) for each ω: rows with omega, alpha_c, alpha_l, eps_g_lin, status.

    Without an explicit ``alphas`` grid each ω starts its bracket at the previous ω's α_c with
    the previous fixed points as warm starts (continuation in ω).  ``on_row(rows)`` is called
    after every ω (e.g. to write the rows done so far)."""
    p = as_params(params)
    rows = []
    it = omegas
    if progress:
        from tqdm import tqdm

        it = tqdm(omegas, desc="phase diagram")
    hint, seeds = kw.pop("hint", None), kw.pop("seeds", None)
    done = []  # (ω, α_c, α_l) of the converged ω so far
    for w in it:
        hint_l, step = None, 1.25
        if len(done) >= 2:
            # extrapolate log α_c and log α_l linearly in ω from the last two: a tight bracket
            (w1, c1, l1), (w2, c2, l2) = done[-2], done[-1]
            t_ = (float(w) - w2) / (w2 - w1) if w2 != w1 else 0.0
            hint = math.exp(math.log(c2) + t_ * (math.log(c2) - math.log(c1)))
            if math.isfinite(l1) and math.isfinite(l2):
                hint_l = math.exp(math.log(l2) + t_ * (math.log(l2) - math.log(l1)))
            step = 1.04
        t = transition(
            p.replace(omega=float(w)), hint=hint, hint_l=hint_l, seeds=seeds, step=step, **kw
        )
        if math.isfinite(t.alpha_c):
            done.append((float(w), t.alpha_c, t.alpha_l))
        rows.append(
            dict(
                omega=float(w),
                alpha_c=t.alpha_c,
                alpha_l=t.alpha_l,
                eps_g_lin=t.eps_g_lin,
                alpha_l_branch=t.alpha_l_branch,
                status=t.status,
                message=t.message,
            )
        )
        if math.isfinite(t.alpha_c):
            hint, seeds = t.alpha_c, t.metadata.get("seeds_at_alpha_c")
        if on_row is not None:
            on_row(rows)
    return rows
