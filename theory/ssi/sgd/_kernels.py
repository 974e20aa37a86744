"""Numba kernels of online spherical SGD (full d and reduced) with pure-numpy references.

Conventions (the normalisation of docs/ssi.md section 1): token rows
x_l ~ N(0, I_d / d), ||w*||^2 = d, ||w||^2 = d, positional rows P_l of unit norm orthogonal to w*,
z = (X + P / sqrt(d)) w, loss l = ||y - f||^2 (no 1/2), update
w <- sqrt(d) (w - gamma grad) / ||w - gamma grad||.

Heads (what maps the token pre-activations z in R^L to the prediction and gives
delta = dl/dz in R^L):

* ``HEAD_MATRIX`` (0): attention, f = softmax_row(z z^T) (L x L), y an L x L matrix (flattened,
  row-major), loss = squared Frobenius norm.
* ``HEAD_FUNCTIONAL`` (1): attention with a scalar reduction f = sum_ij R_ij softmax_row(z z^T)_ij
  (trace: R = c I; projection: R = a b^T), y a scalar.
* ``HEAD_NETWORK`` (2): f = sigma(sum_l z_l / sqrt(L)) with the activation ``act`` (codes in
  ``theory.ssi._kernels.ACTIVATION_CODES``), y a scalar.  Used by the tied and the untied network.
  An activation written as an expression has code ``WRITTEN_CODE``: the kernels then call
  (fv, fd), its sigma and sigma' compiled to numba C callbacks
  (``theory.ssi.targets.activation_cfuncs``); every kernel takes (act, fv, fd), with
  :data:`NO_CALLBACKS` (never called) for a named activation.

Randomness: the reference kernel ``full_chunk`` (and ``reduced_chunk``) takes its Gaussians as
arrays, so it and its numpy reference are deterministic functions of the same arrays and are
tested against each other step by step.  The production full-d kernels draw the token rows
inside numba: ``full_chunk_fast`` with the SIMD block generator of
``theory.ssi.sgd._blocknormal`` (the default for d >= 64; tested against ``full_chunk`` fed
with ``fill_steps``) and ``full_chunk_rng`` with the scalar generator of ``theory.rng``
(tested against ``full_chunk`` fed with ``fill_normals``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from theory.rng import normal as zig_normal
from theory.ssi._kernels import WRITTEN_CODE, activation_reference
from theory.ssi.sgd import _blocknormal as BN

HEAD_MATRIX, HEAD_FUNCTIONAL, HEAD_NETWORK = 0, 1, 2

_SQ2 = math.sqrt(2.0)
_SQ6 = math.sqrt(6.0)
_SQ24 = math.sqrt(24.0)
_SQPI = math.sqrt(math.pi)


# =========================================================================== activations


#: no callback: what the kernels receive as (fv, fd) for a named activation (never called)
@numba.cfunc("float64(float64)", cache=True)
def _no_callback(s):
    return math.nan


NO_CALLBACKS = (_no_callback, _no_callback)


def act_args(act) -> tuple:
    """(code, fv, fd), the activation arguments of the kernels, for a kernel code of a named
    activation or an activation's name or expression (``theory.ssi._kernels.kernel_activation``)."""
    if isinstance(act, str):
        from theory.ssi._kernels import kernel_activation

        return kernel_activation(act)
    return (int(act), *NO_CALLBACKS)


@numba.njit(cache=True)
def act_value(code, s, fv):
    """sigma(s) of the activation ``code``; code WRITTEN_CODE calls the compiled expression fv."""
    if code == 0:
        return s
    if code == 1:
        return s if s > 0.0 else 0.0
    if code == 2:
        return math.tanh(s)
    if code == 3:
        return math.erf(s)
    if code == 4:
        return 1.0 / (1.0 + math.exp(-s))
    if code == 5:
        return abs(s)
    if code == 6:
        return s * s
    if code == 7:
        return s * s - 1.0
    if code == 8:
        return s * s * s - 3.0 * s
    if code == 9:
        s2 = s * s
        return s2 * s2 - 6.0 * s2 + 3.0
    if code == 10:
        return (s * s - 1.0) / _SQ2
    if code == 11:
        return (s * s * s - 3.0 * s) / _SQ6
    if code == 12:
        s2 = s * s
        return (s2 * s2 - 6.0 * s2 + 3.0) / _SQ24
    if code == WRITTEN_CODE:
        return fv(s)
    return np.nan


@numba.njit(cache=True)
def act_deriv(code, s, fd):
    """sigma'(s) of the activation ``code``; code WRITTEN_CODE calls the compiled derivative fd."""
    if code == 0:
        return 1.0
    if code == 1:
        return 1.0 if s > 0.0 else 0.0
    if code == 2:
        t = math.tanh(s)
        return 1.0 - t * t
    if code == 3:
        return 2.0 / _SQPI * math.exp(-s * s)
    if code == 4:
        q = 1.0 / (1.0 + math.exp(-s))
        return q * (1.0 - q)
    if code == 5:
        return 1.0 if s > 0.0 else (-1.0 if s < 0.0 else 0.0)
    if code == 6:
        return 2.0 * s
    if code == 7:
        return 2.0 * s
    if code == 8:
        return 3.0 * s * s - 3.0
    if code == 9:
        return 4.0 * s * s * s - 12.0 * s
    if code == 10:
        return 2.0 * s / _SQ2
    if code == 11:
        return (3.0 * s * s - 3.0) / _SQ6
    if code == 12:
        return (4.0 * s * s * s - 12.0 * s) / _SQ24
    if code == WRITTEN_CODE:
        return fd(s)
    return np.nan


# =========================================================================== heads


@numba.njit(cache=True)
def head_grad(head, z, y, Rm, act, fv, fd, delta, work):
    """Loss l and delta = dl/dz (written into ``delta``) for one sample.

    z (L,), y (k,) target (k = L*L for HEAD_MATRIX, 1 otherwise), Rm (L, L) reduction matrix,
    act the activation code with (fv, fd) its compiled sigma, sigma' when act = WRITTEN_CODE
    (:data:`NO_CALLBACKS` otherwise), work (L, L) scratch.
    """
    L = z.shape[0]
    if head == HEAD_NETWORK:
        s = 0.0
        for l in range(L):
            s += z[l]
        s /= math.sqrt(L)
        f = act_value(act, s, fv)
        r = y[0] - f
        g = -2.0 * r * act_deriv(act, s, fd) / math.sqrt(L)
        for l in range(L):
            delta[l] = g
        return r * r
    # attention: S = softmax_row(z z^T) stored in work
    for i in range(L):
        mx = -np.inf
        for j in range(L):
            a = z[i] * z[j]
            work[i, j] = a
            if a > mx:
                mx = a
        tot = 0.0
        for j in range(L):
            v = math.exp(work[i, j] - mx)
            work[i, j] = v
            tot += v
        for j in range(L):
            work[i, j] /= tot
    loss = 0.0
    fval = 0.0
    if head == HEAD_FUNCTIONAL:
        for i in range(L):
            for j in range(L):
                fval += Rm[i, j] * work[i, j]
        r0 = y[0] - fval
        loss = r0 * r0
    for l in range(L):
        delta[l] = 0.0
    for i in range(L):
        # D_ij = dl/dS_ij ; GA_ij = S_ij (D_ij - sum_k D_ik S_ik)
        dot = 0.0
        for j in range(L):
            if head == HEAD_MATRIX:
                rij = y[i * L + j] - work[i, j]
                loss += rij * rij
                Dij = -2.0 * rij
            else:
                Dij = -2.0 * r0 * Rm[i, j]
            dot += Dij * work[i, j]
        for j in range(L):
            if head == HEAD_MATRIX:
                Dij = -2.0 * (y[i * L + j] - work[i, j])
            else:
                Dij = -2.0 * r0 * Rm[i, j]
            ga = work[i, j] * (Dij - dot)
            # A_ij = z_i z_j: dA_ij/dz_i = z_j, dA_ij/dz_j = z_i
            delta[i] += ga * z[j]
            delta[j] += ga * z[i]
    return loss


def head_grad_reference(head, z, y, Rm, act):
    """numpy reference of :func:`head_grad`: returns (loss, delta)."""
    z = np.asarray(z, dtype=float)
    L = z.shape[0]
    if head == HEAD_NETWORK:
        s = z.sum() / np.sqrt(L)
        f, df = activation_reference(act, s)
        r = y[0] - f
        return float(r * r), np.full(L, -2.0 * r * df / np.sqrt(L))
    A = np.outer(z, z)
    S = np.exp(A - A.max(axis=1, keepdims=True))
    S /= S.sum(axis=1, keepdims=True)
    if head == HEAD_MATRIX:
        Y = np.asarray(y, dtype=float).reshape(L, L)
        loss = float(((Y - S) ** 2).sum())
        D = -2.0 * (Y - S)
    else:
        r = y[0] - float((Rm * S).sum())
        loss = r * r
        D = -2.0 * r * Rm
    GA = S * (D - (D * S).sum(axis=1, keepdims=True))
    delta = (GA + GA.T) @ z
    return loss, delta


# =========================================================================== full-d kernel


@numba.njit(cache=True)
def _full_step(
    W,
    ustar,
    Qp,
    Bpe,
    Gt,
    zst,
    yt,
    gamma,
    head,
    Rm,
    act,
    fv,
    fd,
    untied,
    C,
    delta,
    work,
    z,
    corr,
    dots,
    pjs,
):
    """One SGD step on the full weights (see :func:`full_chunk`); returns the sample loss."""
    L, d = Gt.shape
    R = W.shape[0]
    k = Qp.shape[0]
    sd = math.sqrt(d)
    isd = 1.0 / sd
    # ---- forward: z_l = x_l . w_r + P_l . w_r / sqrt(d)
    for l in range(L):
        r = l if untied else 0
        a = 0.0
        b = 0.0
        for i in range(d):
            g = Gt[l, i]
            a += g * ustar[i]
            b += g * W[r, i]
        a *= isd
        b *= isd
        corr[l] = zst[l] * isd - a  # x_l = G/sqrt(d) + corr_l ustar
        # ustar . w_r = sqrt(d) C[r, 0]
        zl = b + corr[l] * sd * C[r, 0]
        if not untied:
            for j in range(k):
                zl += Bpe[l, j] * C[r, 1 + j]  # P_l . w / sqrt(d) = e_l
        z[l] = zl
    loss = head_grad(head, z, yt, Rm, act, fv, fd, delta, work)
    # ---- update + renormalisation, fused with the new frame coordinates
    for r in range(R):
        for j in range(1 + k):
            dots[j] = 0.0
        nrm = 0.0
        if untied:
            cu = gamma * delta[r] * corr[r]
            gd = gamma * delta[r] * isd
            for i in range(d):
                wi = W[r, i] - gd * Gt[r, i] - cu * ustar[i]
                W[r, i] = wi
                nrm += wi * wi
                dots[0] += wi * ustar[i]
        else:
            cu = 0.0
            for l in range(L):
                cu += delta[l] * corr[l]
            cu *= gamma
            for j in range(k):
                pj = 0.0
                for l in range(L):
                    pj += delta[l] * Bpe[l, j]
                pjs[j] = gamma * isd * pj
            gl = gamma * isd
            for i in range(d):
                s = 0.0
                for l in range(L):
                    s += delta[l] * Gt[l, i]
                wi = W[r, i] - gl * s - cu * ustar[i]
                for j in range(k):
                    wi -= pjs[j] * Qp[j, i]
                W[r, i] = wi
                nrm += wi * wi
                dots[0] += wi * ustar[i]
                for j in range(k):
                    dots[1 + j] += wi * Qp[j, i]
        scale = sd / math.sqrt(nrm)
        for i in range(d):
            W[r, i] *= scale
        for j in range(1 + k):
            C[r, j] = dots[j] * scale * isd
    return loss


@numba.njit(cache=True)
def _recovered(C, untied, eta2):
    q = 0.0
    if untied:
        for r in range(C.shape[0]):
            q += C[r, 0] * C[r, 0]
        q /= C.shape[0]
    else:
        for j in range(C.shape[1]):
            q += C[0, j] * C[0, j]
    return q >= eta2


@numba.njit(cache=True)
def _full_steps(
    W, ustar, Qp, Bpe, G, state, zstar, Y, gamma, head, Rm, act, fv, fd, untied, eta2, C
):
    """The step loop of :func:`full_chunk` (token rows G[t]) and :func:`full_chunk_rng` (G with
    no steps: rows drawn from ``state``); n = zstar.shape[0] steps."""
    n, L = zstar.shape
    d = W.shape[1]
    k = Qp.shape[0]
    delta = np.empty(L)
    work = np.empty((L, L))
    z = np.empty(L)
    corr = np.empty(L)
    dots = np.empty(1 + k)
    pjs = np.empty(max(k, 1))
    draw = G.shape[0] == 0
    Gt = np.empty((L, d))
    hit = -1
    loss_sum = 0.0
    for t in range(n):
        if draw:
            for l in range(L):
                for i in range(d):
                    Gt[l, i] = zig_normal(state)
        else:
            Gt[:, :] = G[t]
        loss_sum += _full_step(
            W, ustar, Qp, Bpe, Gt, zstar[t], Y[t], gamma, head, Rm, act, fv, fd, untied, C,
            delta, work, z, corr, dots, pjs,
        )  # fmt: skip
        if hit < 0 and _recovered(C, untied, eta2):
            hit = t
    return hit, loss_sum


@numba.njit(cache=True)
def full_chunk(W, ustar, Qp, Bpe, G, zstar, Y, gamma, head, Rm, act, fv, fd, untied, eta2, C):
    """Run ``G.shape[0]`` SGD steps in place on ``W`` (rows on the sqrt(d)-sphere).

    W (R, d): R = 1 (attention / tied) or L (untied).  ustar (d,) = w*/sqrt(d).  Qp (k, d)
    orthonormal basis of span(P) (k = 0 without encoding), Bpe (L, k) with P_l = sum_j Bpe[l, j]
    Qp[j].  G (n, L, d) standard normals, zstar (n, L) target pre-activations, Y (n, k_out).
    The token row of step t is x_l = G[t, l] / sqrt(d) with its component along ustar replaced
    by zstar[t, l] / sqrt(d) (same law as a fresh N(0, I/d) row, and x_l . w* = zstar[t, l]).
    C (R, 1 + k) holds on entry and exit the frame coordinates (w . ustar, w . Qp_j) / sqrt(d) of
    each row.  Weak recovery: ||C[0]||^2 >= eta2 (tied/attention) or sum_l C[l, 0]^2 / L >= eta2
    (untied).  Returns (index of the first step after which recovery holds or -1, sum of losses).
    """
    nostate = np.zeros(4, dtype=np.uint64)
    return _full_steps(
        W, ustar, Qp, Bpe, G, nostate, zstar[: G.shape[0]], Y, gamma, head, Rm, act, fv, fd,
        untied, eta2, C,
    )  # fmt: skip


@numba.njit(cache=True)
def full_chunk_rng(
    W, ustar, Qp, Bpe, state, zstar, Y, gamma, head, Rm, act, fv, fd, untied, eta2, C
):
    """:func:`full_chunk` with the Gaussian token rows drawn inside the kernel (xoshiro256** +
    ziggurat, state (4,) uint64 advanced in place): n = zstar.shape[0] steps, same outputs.
    Equals ``full_chunk`` fed with ``fill_normals(state, (n, L, d))`` from the same state."""
    nog = np.empty((0, zstar.shape[1], W.shape[1]))
    return _full_steps(
        W, ustar, Qp, Bpe, nog, state, zstar, Y, gamma, head, Rm, act, fv, fd, untied, eta2, C
    )


# =========================================================================== in-kernel RNG
# xoshiro256** (Blackman & Vigna) and the 128-layer ziggurat of Marsaglia & Tsang in Doornik's
# ZIGNOR form (disjoint bits of one output for the layer index and the abscissa): N(0, 1) draws.


# Normals: the xoshiro256** + ziggurat generator of theory.gauss (one implementation for the
# package; the same bits and tables, so streams are unchanged).
@numba.njit(cache=True)
def fill_normals(s, out):
    """Fill ``out`` (any shape, C-contiguous) with standard normals from state ``s``."""
    flat = out.reshape(-1)
    for i in range(flat.shape[0]):
        flat[i] = zig_normal(s)


def full_chunk_reference(W, ustar, Qp, Bpe, G, zstar, Y, gamma, head, Rm, act, untied, eta2, C):
    """Plain numpy reference of :func:`full_chunk` (same arguments, same in-place effect)."""
    n, L, d = G.shape
    hit = -1
    loss_sum = 0.0
    P = Bpe @ Qp if Qp.shape[0] else np.zeros((L, d))
    for t in range(n):
        X = G[t] / np.sqrt(d)
        X = X + np.outer(zstar[t] / np.sqrt(d) - X @ ustar, ustar)
        if untied:
            z = np.einsum("ld,ld->l", X, W)
        else:
            z = (X + P / np.sqrt(d)) @ W[0]
        loss, delta = head_grad_reference(head, z, Y[t], Rm, act)
        loss_sum += loss
        if untied:
            W -= gamma * delta[:, None] * X
        else:
            W[0] -= gamma * (delta @ (X + P / np.sqrt(d)))
        W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
        C[:, 0] = W @ ustar / np.sqrt(d)
        if Qp.shape[0]:
            C[:, 1:] = W @ Qp.T / np.sqrt(d)
        q = (C[:, 0] ** 2).mean() if untied else (C[0] ** 2).sum()
        if hit < 0 and q >= eta2:
            hit = t
    return hit, loss_sum


# =========================================================================== reduced kernel


@numba.njit(cache=True)
def reduced_chunk(C, rr, Bpe, alpha, beta, chi, Y, h, head, Rm, act, fv, fd, untied, eta2):
    """Run ``alpha.shape[0]`` steps of the exact reduced chain in place on (C, rr).

    C (R, 1 + k): frame coordinates c (c[0] = m, c[1:] = coordinates along the orthonormal
    encoding directions) of each student row; rr (R,) = norm of the rest (||c||^2 + rr^2 = 1).
    alpha (n, L, 1 + k), beta (n, L) standard normals (alpha[:, :, 0] = z*), chi (n, R)
    chi-square(d - k - 2) variables, Y (n, k_out) targets, h = gamma / d.
    See ``theory.ssi.sgd.reduced`` for the derivation.  Returns (first recovery index or -1,
    sum of losses).
    """
    n = alpha.shape[0]
    L = alpha.shape[1]
    k1 = alpha.shape[2]
    R = C.shape[0]
    delta = np.empty(L)
    work = np.empty((L, L))
    z = np.empty(L)
    cn = np.empty(k1)
    hit = -1
    loss_sum = 0.0
    for t in range(n):
        for l in range(L):
            r = l if untied else 0
            zl = rr[r] * beta[t, l]
            for j in range(k1):
                zl += alpha[t, l, j] * C[r, j]
            if not untied:
                for j in range(k1 - 1):
                    zl += Bpe[l, j] * C[r, 1 + j]
            z[l] = zl
        loss_sum += head_grad(head, z, Y[t], Rm, act, fv, fd, delta, work)
        for r in range(R):
            if untied:
                dl = delta[r]
                cn[0] = C[r, 0] - h * dl * alpha[t, r, 0]
                rp = rr[r] - h * dl * beta[t, r]
                rem = h * h * dl * dl * chi[t, r]
            else:
                sb = 0.0
                d2 = 0.0
                for l in range(L):
                    sb += delta[l] * beta[t, l]
                    d2 += delta[l] * delta[l]
                for j in range(k1):
                    s = 0.0
                    for l in range(L):
                        s += delta[l] * alpha[t, l, j]
                        if j > 0:
                            s += delta[l] * Bpe[l, j - 1]
                    cn[j] = C[r, j] - h * s
                rp = rr[r] - h * sb
                rem = h * h * d2 * chi[t, r]
            perp2 = rp * rp + rem
            nrm2 = perp2
            kk = 1 if untied else k1
            for j in range(kk):
                nrm2 += cn[j] * cn[j]
            inv = 1.0 / math.sqrt(nrm2)
            for j in range(kk):
                C[r, j] = cn[j] * inv
            rr[r] = math.sqrt(perp2) * inv
        if hit < 0:
            q = 0.0
            if untied:
                for r in range(R):
                    q += C[r, 0] * C[r, 0]
                q /= R
            else:
                for j in range(k1):
                    q += C[0, j] * C[0, j]
            if q >= eta2:
                hit = t
    return hit, loss_sum


def reduced_chunk_reference(C, rr, Bpe, alpha, beta, chi, Y, h, head, Rm, act, untied, eta2):
    """Plain numpy reference of :func:`reduced_chunk`."""
    n, L, k1 = alpha.shape
    hit = -1
    loss_sum = 0.0
    Bfull = np.zeros((L, k1))
    Bfull[:, 1:] = Bpe
    for t in range(n):
        if untied:
            z = alpha[t, :, 0] * C[:, 0] + rr * beta[t]
        else:
            z = alpha[t] @ C[0] + Bfull @ C[0] + rr[0] * beta[t]
        loss, delta = head_grad_reference(head, z, Y[t], Rm, act)
        loss_sum += loss
        if untied:
            cn = C[:, 0] - h * delta * alpha[t, :, 0]
            rp = rr - h * delta * beta[t]
            rem = h * h * delta**2 * chi[t]
            nrm = np.sqrt(cn**2 + rp**2 + rem)
            C[:, 0] = cn / nrm
            rr[:] = np.sqrt(rp**2 + rem) / nrm
        else:
            cn = C[0] - h * (delta @ (alpha[t] + Bfull))
            rp = rr[0] - h * delta @ beta[t]
            rem = h * h * (delta @ delta) * chi[t, 0]
            nrm = np.sqrt(cn @ cn + rp**2 + rem)
            C[0] = cn / nrm
            rr[0] = np.sqrt(rp**2 + rem) / nrm
        q = (C[:, 0] ** 2).mean() if untied else (C[0] ** 2).sum()
        if hit < 0 and q >= eta2:
            hit = t
    return hit, loss_sum


# =========================================================================== flattened untied chain


@numba.njit(cache=True)
def flat_chunk(c, r, alpha, beta, chi, Y, h, act, fv, fd, eta2):
    """Exact reduced chain of the FLATTENED untied network, ``alpha.shape[0]`` steps in place.

    W in R^{L x d} on one sphere of radius sqrt(L d); c (L,) = coordinates of W/sqrt(L d) along
    the orthonormal directions e_l (x) w*/sqrt(d) (c_l = m_l / sqrt(L), |c| = m_untied), r (1,)
    the norm of the rest.  Per step (same derivation as ``theory.ssi.sgd.reduced`` with the
    frame of the L teacher directions of R^{L d}): z* = alpha (n, L), u = c.alpha + r beta,
    delta = 2 (sigma(u) - y) sigma'(u), c' = c - h delta alpha, r' = r - h delta beta,
    rest^2 = h^2 delta^2 chi, chi ~ chi^2(L d - L - 1), h = gamma / (L d), renormalise.
    Returns (first index with |c|^2 >= eta2 or -1, sum of losses)."""
    n, L = alpha.shape
    cn = np.empty(L)
    hit = -1
    loss_sum = 0.0
    for t in range(n):
        u = r[0] * beta[t]
        for l in range(L):
            u += c[l] * alpha[t, l]
        s = act_value(act, u, fv)
        res = s - Y[t]
        loss_sum += res * res
        dl = 2.0 * res * act_deriv(act, u, fd)
        nrm2 = 0.0
        for l in range(L):
            cn[l] = c[l] - h * dl * alpha[t, l]
            nrm2 += cn[l] * cn[l]
        rp = r[0] - h * dl * beta[t]
        perp2 = rp * rp + h * h * dl * dl * chi[t]
        inv = 1.0 / math.sqrt(nrm2 + perp2)
        q = 0.0
        for l in range(L):
            c[l] = cn[l] * inv
            q += c[l] * c[l]
        r[0] = math.sqrt(perp2) * inv
        if hit < 0 and q >= eta2:
            hit = t
    return hit, loss_sum


def flat_chunk_reference(c, r, alpha, beta, chi, Y, h, act, eta2):
    """Plain numpy reference of :func:`flat_chunk` (same in-place semantics)."""
    hit, loss_sum = -1, 0.0
    for t in range(alpha.shape[0]):
        u = float(c @ alpha[t] + r[0] * beta[t])
        s, ds = activation_reference(act, u)
        res = float(s) - float(Y[t])
        loss_sum += res * res
        dl = 2.0 * res * float(ds)
        cn = c - h * dl * alpha[t]
        rp = r[0] - h * dl * beta[t]
        perp2 = rp**2 + h * h * dl * dl * chi[t]
        nrm = math.sqrt(cn @ cn + perp2)
        c[:] = cn / nrm
        r[0] = math.sqrt(perp2) / nrm
        if hit < 0 and c @ c >= eta2:
            hit = t
    return hit, loss_sum


# =========================================================================== fast full-d kernel
# The same SGD step as ``_full_step`` with (i) the token rows drawn by the SIMD block generator
# of ``theory.ssi.sgd._blocknormal`` (xoshiro256** lanes + 2048-layer ziggurat, exact N(0, 1)),
# (ii) every pass over a d-vector written as a single vectorisable loop (fastmath "reassoc" /
# "contract" on those loops only: sums in a different order, NaN/inf semantics kept), (iii) the
# update fused with the norm and frame overlaps (one pass over w per step for L = 2 and at most
# one encoding direction) and (iv) a lazy scale: the stored row v is w / sig, so the
# renormalisation costs no pass; rows are rescaled in place only when sig leaves [1/2, 2] and at
# the end of a chunk.  Same law as ``full_chunk`` fed with ``fill_steps`` (tested to round-off).

_FM = {"reassoc", "contract"}


@numba.njit(cache=True, fastmath=_FM)
def _dot2(g, u, w, d):
    """(g . u, g . w) over the first d entries."""
    a = 0.0
    b = 0.0
    for i in range(d):
        a += g[i] * u[i]
        b += g[i] * w[i]
    return a, b


@numba.njit(cache=True, fastmath=_FM)
def _upd_l2(w, g0, g1, u, q, c0, c1, cu, cq, d):
    """Fused tied update for two tokens and one encoding direction:
    w <- w - c0 g0 - c1 g1 - cu u - cq q; returns (|w|^2, w . u, w . q)."""
    nrm = 0.0
    du = 0.0
    dq = 0.0
    for i in range(d):
        v = w[i] - c0 * g0[i] - c1 * g1[i] - cu * u[i] - cq * q[i]
        w[i] = v
        nrm += v * v
        du += v * u[i]
        dq += v * q[i]
    return nrm, du, dq


@numba.njit(cache=True, fastmath=_FM)
def _upd_l2_fwd(w, g0, g1, u, q, c0, c1, cu, cq, h0, h1, d):
    """:func:`_upd_l2` fused with the next step's forward products: also returns
    (h0 . u, h0 . w_new, h1 . u, h1 . w_new) for the next token rows h0, h1."""
    nrm = 0.0
    du = 0.0
    dq = 0.0
    a0 = 0.0
    b0 = 0.0
    a1 = 0.0
    b1 = 0.0
    for i in range(d):
        v = w[i] - c0 * g0[i] - c1 * g1[i] - cu * u[i] - cq * q[i]
        w[i] = v
        nrm += v * v
        du += v * u[i]
        dq += v * q[i]
        a0 += h0[i] * u[i]
        b0 += h0[i] * v
        a1 += h1[i] * u[i]
        b1 += h1[i] * v
    return nrm, du, dq, a0, b0, a1, b1


@numba.njit(cache=True, fastmath=_FM)
def _upd_row(w, g, u, cg, cu, d):
    """w <- w - cg g - cu u; returns (|w|^2, w . u)."""
    nrm = 0.0
    du = 0.0
    for i in range(d):
        v = w[i] - cg * g[i] - cu * u[i]
        w[i] = v
        nrm += v * v
        du += v * u[i]
    return nrm, du


@numba.njit(cache=True, fastmath=_FM)
def _axpy(y, a, x, d):
    for i in range(d):
        y[i] += a * x[i]


@numba.njit(cache=True, fastmath=_FM)
def _scal_into(y, a, x, d):
    for i in range(d):
        y[i] = a * x[i]


@numba.njit(cache=True, fastmath=_FM)
def _dot(x, y, d):
    s = 0.0
    for i in range(d):
        s += x[i] * y[i]
    return s


@numba.njit(cache=True, fastmath=_FM)
def _scale(x, a, d):
    for i in range(d):
        x[i] *= a


@numba.njit(cache=True)
def full_chunk_fast(
    W, ustar, Qp, Bpe, S, s, zstar, Y, gamma, head, Rm, act, fv, fd, untied, eta2, C
):
    """:func:`full_chunk` with the Gaussian rows drawn in the kernel by the block generator
    (lanes ``S`` (4, NLANES), scalar state ``s`` (4,), both advanced in place): n = zstar.shape[0]
    steps, same outputs.  Step t uses the rows of ``_blocknormal.fill_rows`` on an (L, padded d)
    buffer (see :func:`fill_steps`).  W rows are on the sqrt(d)-sphere on entry and on exit."""
    n, L = zstar.shape
    R, d = W.shape
    k = Qp.shape[0]
    sd = math.sqrt(d)
    isd = 1.0 / sd
    dp = BN.padded_width(d)
    Gp = np.empty((L, dp))
    rb = np.empty(BN.NB, dtype=np.uint64)
    rpos = np.empty(L * dp, dtype=np.int64)
    rval = np.empty(L * dp, dtype=np.uint64)
    delta = np.empty(L)
    work = np.empty((L, L))
    z = np.empty(L)
    corr = np.empty(L)
    dots = np.empty(1 + k)
    comb = np.empty(d)
    sig = np.ones(R)
    fused = (not untied) and L == 2 and k <= 1
    qrow = Qp[0] if k >= 1 else ustar  # dummy direction when k = 0 (coefficient 0)
    Gn = np.empty((L, dp)) if fused else Gp  # next step's rows (fused path)
    araw = np.empty(L)  # forward products G_l . u*, G_l . v (v = w / sig)
    braw = np.empty(L)
    hit = -1
    loss_sum = 0.0
    if fused and n > 0:
        BN.fill_rows(S, s, Gp, rb, rpos, rval)
        for l in range(L):
            araw[l], braw[l] = _dot2(Gp[l], ustar, W[0], d)
    for t in range(n):
        if not fused:
            BN.fill_rows(S, s, Gp, rb, rpos, rval)
            for l in range(L):
                araw[l], braw[l] = _dot2(Gp[l], ustar, W[l if untied else 0], d)
        # ---- forward
        for l in range(L):
            r = l if untied else 0
            a = araw[l] * isd
            b = braw[l] * sig[r] * isd
            corr[l] = zstar[t, l] * isd - a
            zl = b + corr[l] * sd * C[r, 0]
            if not untied:
                for j in range(k):
                    zl += Bpe[l, j] * C[r, 1 + j]
            z[l] = zl
        loss_sum += head_grad(head, z, Y[t], Rm, act, fv, fd, delta, work)
        # ---- update of v = w / sig, renormalisation folded into sig
        for r in range(R):
            inv = 1.0 / sig[r]
            if untied:
                nrm, du = _upd_row(
                    W[r],
                    Gp[r],
                    ustar,
                    gamma * delta[r] * isd * inv,
                    gamma * delta[r] * corr[r] * inv,
                    d,
                )
            else:
                cu = 0.0
                for l in range(L):
                    cu += delta[l] * corr[l]
                cu *= gamma * inv
                gl = gamma * isd * inv
                if fused:
                    cq = 0.0
                    if k == 1:
                        cq = gl * (delta[0] * Bpe[0, 0] + delta[1] * Bpe[1, 0])
                    if t + 1 < n:
                        # draw the next rows now: the update pass then also gives their
                        # forward products (one pass over w per step)
                        BN.fill_rows(S, s, Gn, rb, rpos, rval)
                        nrm, du, dq, araw[0], braw[0], araw[1], braw[1] = _upd_l2_fwd(
                            W[0],
                            Gp[0],
                            Gp[1],
                            ustar,
                            qrow,
                            gl * delta[0],
                            gl * delta[1],
                            cu,
                            cq,
                            Gn[0],
                            Gn[1],
                            d,
                        )
                        Gp, Gn = Gn, Gp
                    else:
                        nrm, du, dq = _upd_l2(
                            W[0], Gp[0], Gp[1], ustar, qrow, gl * delta[0], gl * delta[1], cu, cq, d
                        )
                    if k == 1:
                        dots[1] = dq
                else:
                    _scal_into(comb, delta[0], Gp[0], d)
                    for l in range(1, L):
                        _axpy(comb, delta[l], Gp[l], d)
                    for j in range(k):
                        pj = 0.0
                        for l in range(L):
                            pj += delta[l] * Bpe[l, j]
                        _axpy(comb, pj, Qp[j], d)
                    nrm, du = _upd_row(W[0], comb, ustar, gl, cu, d)
                    for j in range(k):
                        dots[1 + j] = _dot(W[0], Qp[j], d)
            scale = sd / math.sqrt(nrm)  # w_new = scale * v
            C[r, 0] = du * scale * isd
            if not untied:
                for j in range(k):
                    C[r, 1 + j] = dots[1 + j] * scale * isd
            if scale < 0.5 or scale > 2.0:
                _scale(W[r], scale, d)
                sig[r] = 1.0
                if fused:
                    braw[0] *= scale  # products were taken with v = w / scale
                    braw[1] *= scale
            else:
                sig[r] = scale
        if hit < 0 and _recovered(C, untied, eta2):
            hit = t
    for r in range(R):
        if sig[r] != 1.0:
            _scale(W[r], sig[r], d)
    return hit, loss_sum


def fill_steps(S, s, n, L, d):
    """The token rows (n, L, d) that :func:`full_chunk_fast` draws for n steps from (S, s)."""
    dp = BN.padded_width(d)
    G = np.empty((n, L, d))
    buf = np.empty((L, dp))
    rb = np.empty(BN.NB, dtype=np.uint64)
    rpos = np.empty(L * dp, dtype=np.int64)
    rval = np.empty(L * dp, dtype=np.uint64)
    for t in range(n):
        BN.fill_rows(S, s, buf, rb, rpos, rval)
        G[t] = buf[:, :d]
    return G
