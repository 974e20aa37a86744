"""Numba kernels of the general attention model (any L, r, r_t; docs/attention.md §10): the
per-sample loss ℓ(x; T) = (σ²/2)||softmax_row(x xᵀ) - T||_F² of fields x (L, r) with its
gradient, and the global prox of Σ_ℓ (x_ℓ - w_ℓ)ᵀV⁻¹(x_ℓ - w_ℓ)/2 + ℓ(x) by multi-start Newton
(analytic Hessian, eigenvalue-modified, backtracking).  Numpy
references: ``theory.attention.general.channel.loss_grad_reference`` and
``theory.attention.general.proximal.prox_reference``.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def gram_softmax(x, M, S):
    """M = x xᵀ and S its row softmax (into ``M``, ``S``), x (L, r)."""
    L, r = x.shape
    for i in range(L):
        for k in range(L):
            s = 0.0
            for a in range(r):
                s += x[i, a] * x[k, a]
            M[i, k] = s
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
        for k in range(L):
            S[i, k] /= z


@numba.njit(cache=True)
def loss_grad_one(x, T, s2, grad, M, S, W):
    """ℓ(x) = (σ²/2)||softmax_row(x xᵀ) - T||² and its gradient (into ``grad``), x (L, r)."""
    L, r = x.shape
    gram_softmax(x, M, S)
    val = 0.0
    for i in range(L):
        dot = 0.0
        for k in range(L):
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
def obj_grad(x, w, T, Vinv, s2, grad, M, S, W):
    """Prox objective Σ_ℓ (x_ℓ - w_ℓ)ᵀV⁻¹(x_ℓ - w_ℓ)/2 + ℓ(x) and its gradient."""
    L, r = x.shape
    val = loss_grad_one(x, T, s2, grad, M, S, W)
    for i in range(L):
        for a in range(r):
            u = 0.0
            for b in range(r):
                u += Vinv[a, b] * (x[i, b] - w[i, b])
            val += 0.5 * (x[i, a] - w[i, a]) * u
            grad[i, a] += u
    return val


@numba.njit(cache=True)
def chol_solve(H, g, p, Lw):
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
def obj_hess(x, T, Vinv, s2, H, M, S, Wm, J, Hm, E):
    """Analytic Hessian of the prox objective at ``x`` (into ``H``, n×n with n = L r, index
    j = ℓ r + a).  With M = x xᵀ, S the row softmax, D = S - T, c_i = Σ_l D_il S_il:
    ∂ℓ/∂M_ik = W_ik = σ² S_ik (D_ik - c_i); row i's block of ∂²ℓ/∂M² is
    σ² [J_kk'(D_ik - c_i) + S_ik (J_kk' - Σ_l J_lk'(S_il + D_il))], J_kk' = S_ik(δ_kk' - S_ik');
    then H = Σ_i P_iᵀ Hm_i P_i (P_i[k, (j, a)] = ∂M_ik/∂x_ja = δ_ij x_ka + δ_kj x_ia)
    + δ_ab (W_jj' + W_j'j) + δ_jj' V⁻¹_ab."""
    L, r = x.shape
    n = L * r
    gram_softmax(x, M, S)
    for i in range(n):
        for j in range(n):
            H[i, j] = 0.0
    for i in range(L):
        c = 0.0
        for k in range(L):
            c += (S[i, k] - T[i, k]) * S[i, k]
        for k in range(L):
            Wm[i, k] = s2 * S[i, k] * (S[i, k] - T[i, k] - c)
        for k in range(L):
            for kk in range(L):
                J[k, kk] = S[i, k] * ((1.0 if k == kk else 0.0) - S[i, kk])
        for kk in range(L):
            dc = 0.0
            for l_ in range(L):
                dc += J[l_, kk] * (2.0 * S[i, l_] - T[i, l_])
            for k in range(L):
                Hm[k, kk] = s2 * (J[k, kk] * (S[i, k] - T[i, k] - c) + S[i, k] * (J[k, kk] - dc))
        # P_i (L, n)
        for k in range(L):
            for j in range(L):
                for a in range(r):
                    v = 0.0
                    if i == j:
                        v += x[k, a]
                    if k == j:
                        v += x[i, a]
                    E[k, j * r + a] = v
        for k in range(L):
            for kk in range(L):
                h = Hm[k, kk]
                if h == 0.0:
                    continue
                for p_ in range(n):
                    ep = E[k, p_]
                    if ep == 0.0:
                        continue
                    for q_ in range(n):
                        H[p_, q_] += ep * h * E[kk, q_]
    for j in range(L):
        for jj in range(L):
            v = Wm[j, jj] + Wm[jj, j]
            for a in range(r):
                H[j * r + a, jj * r + a] += v
        for a in range(r):
            for b in range(r):
                H[j * r + a, j * r + b] += Vinv[a, b]


@numba.njit(cache=True)
def workspace(L, r):
    """The scratch arrays of :func:`newton_ws` (allocated once per node, not per start)."""
    n = L * r
    return (
        np.empty((L, L)),
        np.empty((L, L)),
        np.empty((L, L)),
        np.empty((L, r)),
        np.empty((L, r)),
        np.empty((L, r)),
        np.empty((n, n)),
        np.empty((n, n)),
        np.empty(n),
        np.empty(n),
        np.empty((L, r)),
        np.empty((L, L)),
        np.empty((L, L)),
        np.empty((L, n)),
    )


@numba.njit(cache=True)
def newton(x, w, T, Vinv, s2, max_iter, gtol, fd):
    """Minimise the prox objective from ``x`` (modified in place): Newton with the analytic
    Hessian (:func:`obj_hess`; ``fd``: a central-difference Hessian of the analytic gradient,
    the original, ~3x slower route) (Cholesky when positive definite, otherwise
    eigenvalues replaced by max(|λ|, δ)), Armijo backtracking.  Returns (value, max|grad|)."""
    L, r = x.shape
    return newton_ws(x, w, T, Vinv, s2, max_iter, gtol, fd, workspace(L, r))


@numba.njit(cache=True)
def newton_ws(x, w, T, Vinv, s2, max_iter, gtol, fd, ws):
    """:func:`newton` with its scratch arrays ``ws`` (:func:`workspace`)."""
    L, r = x.shape
    n = L * r
    M, S, W, g, gp, gm, H, Lw, p, gf, xt, J, Hm, E = ws
    f = obj_grad(x, w, T, Vinv, s2, g, M, S, W)
    gmax = 0.0
    for _ in range(max_iter):
        gmax = 0.0
        for i in range(L):
            for a in range(r):
                gmax = max(gmax, abs(g[i, a]))
        if gmax < gtol:
            break
        if not fd:
            obj_hess(x, T, Vinv, s2, H, M, S, W, J, Hm, E)
            for j in range(n):
                gf[j] = g[j // r, j % r]
        for j in range(n if fd else 0):
            i0, a0 = j // r, j % r
            h = 1e-5 * max(1.0, abs(x[i0, a0]))
            old = x[i0, a0]
            x[i0, a0] = old + h
            obj_grad(x, w, T, Vinv, s2, gp, M, S, W)
            x[i0, a0] = old - h
            obj_grad(x, w, T, Vinv, s2, gm, M, S, W)
            x[i0, a0] = old
            for k in range(n):
                H[k, j] = (gp[k // r, k % r] - gm[k // r, k % r]) / (2 * h)
            gf[j] = g[i0, a0]
        for j in range(n):
            for k in range(j + 1, n):
                v = 0.5 * (H[j, k] + H[k, j])
                H[j, k] = v
                H[k, j] = v
        if not chol_solve(H, gf, p, Lw):
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
            ft = obj_grad(xt, w, T, Vinv, s2, gp, M, S, W)
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
def start(k, w, hs, warm, have_warm, out):
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
def prox_one(w, T, hs, Vinv, s2, warm, have_warm, xbest, fd):
    L, r = w.shape
    x = np.empty((L, r))
    ws = workspace(L, r)
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
            start(DIRECT[k], w, hs, warm, have_warm, x)
        elif k < nd + L:
            start(N_STARTS_FIXED + k - nd, w, hs, warm, have_warm, x)
        else:
            start(1 if k == nd + L else 5, w, hs, warm, have_warm, x)
            newton_ws(x, w, T, Vs, s2, 50, 1e-10, fd, ws)
        f, gmax = newton_ws(x, w, T, Vinv, s2, 100, 1e-10, fd, ws)
        if f < fbest - 1e-13 * (1.0 + abs(f)):
            fbest = f
            okbest = gmax < 1e-6
            for i in range(L):
                for a in range(r):
                    xbest[i, a] = x[i, a]
    return fbest, okbest


@numba.njit(cache=True)
def prox_batch(w, T, hs, Vinv, s2, warm, have_warm):
    """The prox at every node (analytic Newton Hessian)."""
    return _prox_batch(w, T, hs, Vinv, s2, warm, have_warm, False)


@numba.njit(cache=True)
def prox_batch_fd(w, T, hs, Vinv, s2, warm, have_warm):
    """:func:`prox_batch` with the central-difference Newton Hessian (the reference route)."""
    return _prox_batch(w, T, hs, Vinv, s2, warm, have_warm, True)


@numba.njit(cache=True, parallel=True)
def _prox_batch(w, T, hs, Vinv, s2, warm, have_warm, fd):
    N, L, r = w.shape
    x = np.empty((N, L, r))
    val = np.empty(N)
    ok = np.empty(N, dtype=np.bool_)
    for i in numba.prange(N):
        f, o = prox_one(w[i], T[i], hs[i], Vinv, s2, warm[i], have_warm, x[i], fd)
        val[i] = f
        ok[i] = o
    return x, val, ok
