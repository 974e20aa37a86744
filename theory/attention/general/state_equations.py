"""The replica-symmetric state equations of the general model (docs/attention.md §10).

Order parameters are matrices: q (r, r), m (L, r) (row ℓ = (√d p_ℓ)ᵀQ/d), θ (r, r_t), V (r, r).
At a node (ξ_ℓ ~ N(0, I_r), η_ℓ ~ N(0, I_{r_t})) the fields are ω_ℓ = q^{1/2} ξ_ℓ + m_ℓ and
h*_ℓ = θᵀ q^{-1/2} ξ_ℓ + c η_ℓ, c = (ρ - θᵀ q⁻¹ θ)^{1/2} (docs/attention.md eq. 22); the
channel expectations of the prox messages g_ℓ = V⁻¹(x̂_ℓ - ω_ℓ) give the conjugates (eq. 24),
the ridge step the overlaps (eq. 25), Φ (eq. 23) gives ε_t = -Φ.  For L = 2, r = r_t = 1,
the reference A and G = [[1, -1], [-1, 1]] these are the L = 2 equations
(:mod:`theory.attention.state_equations`) term by term.  Shapes: fields ``w`` (N, L, r),
teacher fields ``hs`` (N, L, r_t), nodes ``xi`` (R, N, L, r), ``eta`` (R, N, L, r_t).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from theory.attention.general import _kernels as _K
from theory.attention.general.channel import loss, teacher_matrix
from theory.attention.general.params import GeneralParams, as_params
from theory.attention.general.quadrature import Nodes

__all__ = [
    "channel",
    "fields",
    "free_energy",
    "guard_theta",
    "hats_from_channel",
    "overlaps_from_hats",
    "pooled",
]


def _sym_pow(M, power):
    lam, U = np.linalg.eigh(0.5 * (M + M.T))
    if lam.min() <= 0:
        raise FloatingPointError(f"matrix not positive definite (eigenvalues {lam})")
    return (U * lam**power) @ U.T


def guard_theta(q, theta, rho):
    """Keep ρ - θᵀq⁻¹θ positive definite: shrink θ if needed.  Returns (θ, hit)."""
    qi = np.linalg.inv(q)
    C = rho - theta.T @ qi @ theta
    if np.linalg.eigvalsh(0.5 * (C + C.T)).min() > 1e-9 * np.trace(rho):
        return theta, False
    # the largest eigenvalue of ρ^{-1/2} θᵀq⁻¹θ ρ^{-1/2} must stay < 1
    rm = _sym_pow(rho, -0.5)
    lmax = np.linalg.eigvalsh(rm @ theta.T @ qi @ theta @ rm).max()
    return theta * math.sqrt((1 - 1e-6) / lmax), True


def fields(o: dict, p: GeneralParams, nodes: Nodes):
    """Student fields ω (R, N, L, r) and teacher fields h* (R, N, L, r_t) at the nodes."""
    sq = _sym_pow(o["q"], 0.5)
    sqi = _sym_pow(o["q"], -0.5)
    B = o["theta"].T @ sqi  # (r_t, r)
    C = p.rho_array - o["theta"].T @ np.linalg.inv(o["q"]) @ o["theta"]
    c = _sym_pow(C, 0.5)
    w = np.einsum("ab,RNlb->RNla", sq, nodes.xi) + o["m"][None, None]
    hs = np.einsum("ab,RNlb->RNla", B, nodes.xi) + np.einsum("ab,RNlb->RNla", c, nodes.eta)
    return w, hs, sqi, c


def channel(o: dict, params: GeneralParams | Mapping | None, nodes: Nodes, *, warm=None) -> dict:
    """Expectations at overlaps ``o`` = dict(q, m, theta, V) (matrices), per replicate.

    Returns arrays with a leading replicate axis R: ``gg`` (R, r, r) = E[Σ_ℓ g_ℓ g_ℓᵀ],
    ``g`` (R, L, r) = E[g_ℓ], ``geta`` (R, r, r_t) = E[Σ g_ℓ η_ℓᵀ], ``gxi`` (R, r, r) =
    E[Σ g_ℓ ξ_ℓᵀ], ``M`` (R,) = E[Moreau envelope], ``eps_g`` (R,), ``bad`` (R,) = fraction
    of nodes where Newton did not reach |∇| < 1e-6; plus ``x`` (R, N, L, r), the minimisers
    (warm starts for the next call), and the matrices ``sqi`` = q^{-1/2}, ``c``.
    """
    p = as_params(params)
    w, hs, sqi, c = fields(o, p, nodes)
    R, N = nodes.n_rep, nodes.n
    wf = np.ascontiguousarray(w.reshape(R * N, p.L, p.r))
    hf = np.ascontiguousarray(hs.reshape(R * N, p.L, p.r_t))
    Vinv = np.linalg.inv(o["V"])
    T = np.ascontiguousarray(teacher_matrix(hf, p))
    have = warm is not None
    wm = np.ascontiguousarray(warm.reshape(R * N, p.L, p.r) if have else wf)
    x, val, ok = _K.prox_batch(wf, T, hf, np.ascontiguousarray(Vinv), p.s2, wm, have)
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


def pooled(ch: dict) -> dict:
    out = {
        k: v.mean(axis=0)
        for k, v in ch.items()
        if k in ("gg", "g", "geta", "gxi", "M", "eps_g", "bad")
    }
    out.update(sqi=ch["sqi"], c=ch["c"])
    return out


def hats_from_channel(alpha, o: dict, ch: dict, params: GeneralParams | Mapping | None) -> dict:
    """Conjugate equations in their Stein forms (docs/attention.md eq. 24) from POOLED
    expectations ``ch`` (:func:`pooled`)."""
    as_params(params)
    qhat = alpha * 0.5 * (ch["gg"] + ch["gg"].T)
    mhat = alpha * ch["g"]
    thetahat = alpha * ch["geta"] @ np.linalg.inv(ch["c"])
    Vhat = -alpha * ch["gxi"] @ ch["sqi"] + thetahat @ o["theta"].T @ np.linalg.inv(o["q"])
    Vhat = 0.5 * (Vhat + Vhat.T)
    return dict(qhat=qhat, mhat=mhat, thetahat=thetahat, Vhat=Vhat)


def overlaps_from_hats(h: dict, params: GeneralParams | Mapping | None) -> dict:
    """Ridge step in closed form (docs/attention.md eq. 25), K = (λ I + σ² V̂)⁻¹."""
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


def free_energy(
    alpha, o: dict, h: dict, EM: float, params: GeneralParams | Mapping | None
) -> float:
    """Φ (docs/attention.md eq. 23) at overlaps ``o`` and hats ``h``; ε_t = -Φ."""
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
