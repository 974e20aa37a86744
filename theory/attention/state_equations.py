"""The replica-symmetric state equations of the L = 2 attention model (docs/attention.md §4).

At overlaps (q, m, θ, V) the channel expectations over ξ, η ~ N(0, I_2) of the prox messages
g_ℓ = (x̂_ℓ - ω_ℓ)/V (docs/attention.md eq. 9-10) give the conjugates (q̂, m̂, θ̂, V̂) (eq. 11),
the ridge step gives the overlaps back in closed form (eq. 13), and Φ (eq. 14) gives
ε_t = -Φ; ε_g is the channel's loss at the student field without the prox (eq. 10, 15).
One application of the whole map is :func:`state_map`.

Normalisations (stated once): q = σ²|Q|²/d, m = 1ᵀQ/d, θ = σ² Q*ᵀQ/d, ρ = σ²|Q*|²/d; errors
per token dimension, ε_t = min L/d, ε_g = E||f(X) - y(X)||²_F/(2d).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from theory.attention import _quadrature_kernels as _Q
from theory.attention.params import ERMParams, as_params
from theory.attention.quadrature import Rule, integrate_channel

__all__ = [
    "channel",
    "free_energy",
    "guard_theta",
    "hats_from_channel",
    "overlaps_from_hats",
    "phi_at",
    "state_map",
    "zero_point",
]


def guard_theta(q: float, theta: float, rho: float) -> tuple[float, bool]:
    """Keep ρ - θ²/q > 0 (the teacher field's conditional variance, docs/attention.md eq. 9):
    clip |θ| just below √(ρ q).  Returns (θ, clipped)."""
    lim = math.sqrt(rho * q) * (1 - 1e-9)
    if abs(theta) >= lim:
        return math.copysign(lim, theta), True
    return theta, False


def channel(
    q: float,
    m: float,
    theta: float,
    V: float,
    params: ERMParams | Mapping | None,
    rule: Rule,
    *,
    jac: bool = False,
    symmetry: bool = True,
) -> dict:
    """Expectations over (ξ, η) of the channel quantities at (q, m, θ, V) (docs/attention.md
    eq. 10): ``g2`` = E[Σ_ℓ g_ℓ²], ``sg`` = E[Σ s_ℓ g_ℓ], ``geta`` = E[Σ g_ℓ η_ℓ], ``gxi`` =
    E[Σ g_ℓ ξ_ℓ], ``M`` = E[Moreau envelope], ``trjw`` = E[tr dx̂/dω] and ``trjh`` =
    E[tr dx̂/dh*] (with ``jac``), ``eps_g`` (no prox), ``bad`` = weight of the nodes where Newton
    did not converge; split rule: ``jumps``, ``unresolved``.

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
    s, stats = integrate_channel(rule, q, m, theta, V, p, jac=jac, symmetry=symmetry)
    wsum = s[_Q.C_W]
    return dict(
        g2=s[_Q.C_G2] / wsum,
        sg=s[_Q.C_SG] / wsum,
        geta=s[_Q.C_GETA] / wsum,
        gxi=s[_Q.C_GXI] / wsum,
        M=s[_Q.C_M] / wsum,
        trjw=s[_Q.C_TRJW] / wsum,
        trjh=s[_Q.C_TRJH] / wsum,
        eps_g=s[_Q.C_EG] / wsum,
        bad=s[_Q.C_BAD] / wsum,
        wsum=wsum,
        **stats,
    )


def hats_from_channel(
    alpha: float,
    q: float,
    m: float,
    theta: float,
    V: float,
    ch: dict,
    params: ERMParams | Mapping | None,
) -> dict:
    """Conjugate equations in their Stein forms (docs/attention.md eq. 11), and the derivative
    forms ``Vhat_jac``, ``thetahat_jac`` (eq. 12; they miss the jump term where x̂ jumps)."""
    p = as_params(params)
    c = math.sqrt(p.rho - theta * theta / q)
    qhat = alpha * ch["g2"]
    mhat = alpha * ch["sg"]
    thetahat = alpha * ch["geta"] / c
    Vhat = -(alpha / math.sqrt(q)) * ch["gxi"] + theta * thetahat / q
    out = dict(qhat=qhat, mhat=mhat, thetahat=thetahat, Vhat=Vhat)
    out["Vhat_jac"] = -(alpha / V) * (ch["trjw"] - 2.0)
    out["thetahat_jac"] = (alpha / V) * ch["trjh"]
    return out


def overlaps_from_hats(
    qhat: float, mhat: float, thetahat: float, Vhat: float, params: ERMParams | Mapping | None
) -> dict:
    """Ridge step in closed form (docs/attention.md eq. 13), D = λ + σ² V̂."""
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


def free_energy(
    alpha: float, o: dict, h: dict, EM: float, params: ERMParams | Mapping | None
) -> float:
    """Φ (docs/attention.md eq. 14) at overlaps ``o`` (q, m, theta, V), hats ``h`` and the
    channel's E[M]; ε_t = -Φ."""
    p = as_params(params)
    D = p.lam + p.s2 * h["Vhat"]
    return (
        0.5 * (h["Vhat"] * o["q"] - h["qhat"] * o["V"])
        - o["m"] * h["mhat"]
        - o["theta"] * h["thetahat"]
        + 0.5 * (p.s2 * h["qhat"] + h["mhat"] ** 2 + p.s2 * p.rho * h["thetahat"] ** 2) / D
        - alpha * EM
    )


def phi_at(
    alpha: float, overlaps: dict, hats: dict, params: ERMParams | Mapping | None, rule: Rule
) -> float:
    """Φ as a function of all eight variables (for stationarity checks): E[M] recomputed at the
    given (q, m, θ, V)."""
    ch = channel(overlaps["q"], overlaps["m"], overlaps["theta"], overlaps["V"], params, rule)
    return free_energy(alpha, overlaps, hats, ch["M"], params)


def state_map(alpha: float, x: dict, p: ERMParams, rule: Rule) -> tuple[dict, dict, dict, bool]:
    """One application of the state equations at ``x`` = (q, m, theta, V): returns the new
    overlaps, the channel expectations, the hats (at θ guarded by :func:`guard_theta`) and
    whether θ was clipped."""
    q, m, V = x["q"], x["m"], x["V"]
    th, clipped = guard_theta(q, x["theta"], p.rho)
    ch = channel(q, m, th, V, p, rule)
    h = hats_from_channel(alpha, q, m, th, V, ch, p)
    return overlaps_from_hats(h["qhat"], h["mhat"], h["thetahat"], h["Vhat"], p), ch, h, clipped


def _eta_nodes(rule: Rule | None):
    """2-D η nodes and weights (tensor product of the split rule's 1-D η rule)."""
    from theory.attention.quadrature import coarse_rule, eta_rule, make_rule

    r = rule if rule is not None and rule.method == "split" else make_rule("split")
    if r.method != "split":  # pragma: no cover - make_rule("split") is split
        r = coarse_rule()
    x, w = eta_rule(r)
    eta = np.stack([np.repeat(x, x.size), np.tile(x, x.size)], axis=1)
    return eta, np.outer(w, w).ravel()


def zero_point(alpha: float, params: ERMParams | Mapping | None, rule: Rule | None = None) -> dict:
    """The Q = 0 fixed point of the trivial subspace (q → 0, m = θ = 0) in closed form.

    At Q = 0 the student field is ω = √q ξ → 0 and the loss is quadratic there with zero
    gradient (∇u_ℓ(0) = 0): ℓ(x) ≈ ℓ(0) + ½ xᵀH₀(t)x, H₀ = (σ²/2)[(½ - t₁)∇²u₁ + (½ - t₂)∇²u₂]
    (indefinite: det H₀ = -(σ²/2)²(t₁ - t₂)²).  Where x̂(0) = 0 is the prox's global minimiser
    and I + V H₀ > 0, x̂ = (I + V H₀)⁻¹ω, g = -K ω with K = H₀(I + V H₀)⁻¹, and the state
    equations (11), (13) reduce to an equation for V alone, over the teacher's η only
    (h* = √ρ η):

        V̂₀(V) = α E[tr K],     V = σ²/(λ + σ² V̂₀(V)),

    and the linearisation of the q-equation at Q = 0 is q ↦ μ q with μ = α V² E[tr K²]: the
    Q = 0 point attracts the trivial iteration when μ < 1.  Φ = -α E[ℓ(0)], ε_g = E[ℓ(0)].

    Returns dict(exists, V, Vhat, mu, eps_t, eps_g, message): ``exists`` False (with the
    reason) when no V > 0 solves the V equation with I + V H₀ > 0 on the η nodes, or when the
    global prox at ω = 0 is not x̂ = 0 there (weight of such nodes > 1e-9).  The η nodes are
    those of ``rule``'s split rule (the default's without one).
    """
    from theory.attention.channel import sample_loss_hess, teacher_diag
    from theory.attention.proximal import prox_rows

    p = as_params(params)
    eta, w = _eta_nodes(rule)
    keep = w > 1e-14
    eta, w = eta[keep], w[keep] / w[keep].sum()
    t = teacher_diag(math.sqrt(p.rho) * eta, p)
    zeros = np.zeros_like(eta)
    _, H = sample_loss_hess(zeros, p.s2, t[:, 0], t[:, 1])
    ev, U = np.linalg.eigh(H)  # H = U diag(ev) Uᵀ: K has eigenvalues ev/(1 + V ev)
    neg = ev.min()
    v_max = math.inf if neg >= 0 else -1.0 / neg
    ell0 = p.s2 * ((0.5 - t[:, 0]) ** 2 + (0.5 - t[:, 1]) ** 2)
    base = dict(eps_t=float(alpha * (w @ ell0)), eps_g=float(w @ ell0))

    def kern(V):
        k = ev / (1.0 + V * ev)
        return float(w @ k.sum(axis=1)), float(w @ (k * k).sum(axis=1))

    def gap(V):  # V (λ + σ² V̂₀(V)) - σ²: -σ² at V = 0, its first zero is the fixed point
        return V * (p.lam + p.s2 * alpha * kern(V)[0]) - p.s2

    hi = min(v_max * (1 - 1e-9), 1e8 * p.s2 / max(p.lam, 1e-300))
    grid = np.geomspace(hi * 1e-8, hi, 400)
    vals = np.array([gap(V) for V in grid])
    up = np.nonzero((vals[:-1] < 0) & (vals[1:] >= 0))[0]
    if not up.size:
        return dict(
            base,
            exists=False,
            V=math.nan,
            Vhat=math.nan,
            mu=math.nan,
            message=(
                "no Q = 0 fixed point: λ + σ²V̂ stays below σ²/V for every V at which the loss "
                f"is locally convex enough (V < {v_max:.3g}); the trivial point, if any, has q > 0"
            ),
        )
    from scipy.optimize import brentq

    V = float(brentq(gap, grid[up[0]], grid[up[0] + 1], xtol=1e-14, rtol=1e-13))
    tr, tr2 = kern(V)
    Vhat, mu = alpha * tr, alpha * V * V * tr2
    # x̂(ω = 0) = 0 must be the prox's GLOBAL minimiser at every node (else the prox jumps to a
    # zero-loss point and q̂ > 0 at q = 0)
    r = prox_rows(zeros, V, p.s2, t[:, 0], t[:, 1], jac=False)
    off = float(w @ (np.abs(r.x).max(axis=1) > 1e-7))
    out = dict(base, V=V, Vhat=float(Vhat), mu=float(mu), exists=off <= 1e-9)
    if off > 1e-9:
        out["message"] = (
            f"no Q = 0 fixed point: at V = {V:.6g} the prox at ω = 0 leaves x = 0 on a weight "
            f"{off:.2g} of the teacher's fields"
        )
    else:
        stable = "attracting" if mu < 1 else "repelling"
        out["message"] = f"Q = 0 fixed point at V = {V:.6g}, q-multiplier μ = {mu:.4g} ({stable})"
    return out
