"""Numba kernels of the positional-semantic ERM model (L = 2, r = r_t = 1).

Notation (spec/positional-semantic.md §3).  For x ∈ R^2 the row softmax of x x^T is fixed by two
numbers, a = S_11 = sig(u_1), b = S_22 = sig(u_2) with u_1 = x_1(x_1 - x_2), u_2 = x_2(x_2 - x_1)
(S_12 = 1 - a, S_21 = 1 - b).  For a row-stochastic target T with diagonal (t_1, t_2),
||S(x) - T||_F^2 = 2 (a - t_1)^2 + 2 (b - t_2)^2, so the per-sample loss is

    ℓ(x; t) = σ² [(a - t_1)² + (b - t_2)²],         t_ℓ = (1 - ω) sig(h*_ℓ(h*_ℓ - h*_ℓ')) + ω A_ℓℓ.

The proximal objective at a node is  f(x) = |x - w|² / (2V) + ℓ(x; t)  (non-convex).  Since
0 <= ℓ <= 2σ², every global minimiser lies in the disk |x - w| <= sqrt(2 V ℓ(w; t)); the kernels
run a safeguarded Newton method (eigenvalue-shifted Hessian + Armijo backtracking) from several
starts — w itself, the two zero-loss points ±x*(t), their midpoints with w, w/2, and the
projections of w on the valleys x1 = 0, x2 = 0, x1 = x2 — and keep the lowest value.  The prox
has a scipy reference in ``theory.attention.model.prox_reference`` and the loss a
full-matrix numpy reference (``loss_full``), both used in the tests.
"""

from __future__ import annotations

import math

import numba
import numpy as np

NEWTON_MAX_ITER = 100
GRAD_TOL = 1e-12


@numba.njit(cache=True, inline="always")
def sig(u):
    if u >= 0.0:
        return 1.0 / (1.0 + math.exp(-u))
    e = math.exp(u)
    return e / (1.0 + e)


@numba.njit(cache=True, inline="always")
def logit(p):
    return math.log(p) - math.log1p(-p)


@numba.njit(cache=True)
def teacher_t(h1, h2, omega, a11, a22):
    """Diagonal (t1, t2) of T(h*) = (1 - ω) S(h*) + ω A."""
    t1 = (1.0 - omega) * sig(h1 * (h1 - h2)) + omega * a11
    t2 = (1.0 - omega) * sig(h2 * (h2 - h1)) + omega * a22
    return t1, t2


@numba.njit(cache=True)
def loss_value(x1, x2, t1, t2, s2):
    a = sig(x1 * (x1 - x2))
    b = sig(x2 * (x2 - x1))
    return s2 * ((a - t1) ** 2 + (b - t2) ** 2)


@numba.njit(cache=True)
def objective(x1, x2, w1, w2, t1, t2, V, s2):
    return ((x1 - w1) ** 2 + (x2 - w2) ** 2) / (2.0 * V) + loss_value(x1, x2, t1, t2, s2)


@numba.njit(cache=True)
def fgh(x1, x2, w1, w2, t1, t2, V, s2):
    """Objective, gradient (2) and Hessian (3 entries) of the prox objective at x."""
    u1 = x1 * (x1 - x2)
    u2 = x2 * (x2 - x1)
    a = sig(u1)
    b = sig(u2)
    r1 = a - t1
    r2 = b - t2
    ka = a * (1.0 - a)
    kb = b * (1.0 - b)
    f = ((x1 - w1) ** 2 + (x2 - w2) ** 2) / (2.0 * V) + s2 * (r1 * r1 + r2 * r2)
    g1u = 2.0 * s2 * r1 * ka  # dℓ/du1
    g2u = 2.0 * s2 * r2 * kb
    h1u = 2.0 * s2 * (ka * ka + r1 * ka * (1.0 - 2.0 * a))  # d²ℓ/du1²
    h2u = 2.0 * s2 * (kb * kb + r2 * kb * (1.0 - 2.0 * b))
    d11 = 2.0 * x1 - x2  # ∇u1 = (2x1 - x2, -x1)
    d12 = -x1
    d21 = -x2  # ∇u2 = (-x2, 2x2 - x1)
    d22 = 2.0 * x2 - x1
    gx1 = (x1 - w1) / V + g1u * d11 + g2u * d21
    gx2 = (x2 - w2) / V + g1u * d12 + g2u * d22
    # ∇²u1 = [[2, -1], [-1, 0]],  ∇²u2 = [[0, -1], [-1, 2]]
    H11 = 1.0 / V + h1u * d11 * d11 + h2u * d21 * d21 + 2.0 * g1u
    H12 = h1u * d11 * d12 + h2u * d21 * d22 - g1u - g2u
    H22 = 1.0 / V + h1u * d12 * d12 + h2u * d22 * d22 + 2.0 * g2u
    return f, gx1, gx2, H11, H12, H22


@numba.njit(cache=True)
def newton(x1, x2, w1, w2, t1, t2, V, s2):
    """Safeguarded Newton descent on the prox objective from (x1, x2).

    Returns (x1, x2, f, converged).  Descent is monotone (Armijo), so the method ends in the
    basin of attraction of a local minimum; the Hessian is shifted to be positive definite.
    """
    return newton_known(x1, x2, w1, w2, t1, t2, V, s2, _NO_MIN, _NO_MIN, _NO_MIN, 0)


_NO_MIN = np.zeros(1)
#: a descent path that comes within distance MERGE_TOL / (1 + |x_k|_1) of a local minimum x_k
#: already found (the landscape's length scale is 1/|∇u| ~ 1/|x|: distinct minima at |x| ~ 20 lie
#: 0.2 apart), where the Hessian is positive definite and the value is not below f(x_k), ends in
#: x_k: prox_point abandons it, it cannot improve the best value.  Measured: prox minimisers
#: bit-identical to the exhaustive multi-start on 3e6 random hard nodes (|w| <= 20, V in
#: [0.01, 300]) also at 4x this tolerance; prox_point 1.5-1.6x faster.
MERGE_TOL = 5e-2


@numba.njit(cache=True)
def newton_known(x1, x2, w1, w2, t1, t2, V, s2, k1, k2, kf, nk):
    """:func:`newton` that stops early (converged = False, value not below a known one) once the
    iterate is within MERGE_TOL of one of the ``nk`` known local minima (k1, k2) with values kf
    and its value has not dropped below that minimum's: monotone descent from there ends in
    that minimum's basin, which cannot beat what is already known."""
    f, g1, g2, H11, H12, H22 = fgh(x1, x2, w1, w2, t1, t2, V, s2)
    scale = 1.0 / V
    for _ in range(NEWTON_MAX_ITER):
        gn = math.sqrt(g1 * g1 + g2 * g2)
        if gn <= GRAD_TOL * (1.0 + math.sqrt(x1 * x1 + x2 * x2) * scale):
            # stationary; accept if the Hessian is PSD (a minimum), else push off the saddle
            tr = H11 + H22
            det = H11 * H22 - H12 * H12
            if det >= 0.0 and tr >= 0.0:
                return x1, x2, f, True
        # smallest eigenvalue of H
        tr = 0.5 * (H11 + H22)
        disc = math.sqrt(0.25 * (H11 - H22) ** 2 + H12 * H12)
        lmin = tr - disc
        shift = 0.0
        floor = 1e-3 * scale
        if lmin < floor:
            shift = floor - lmin
        A11 = H11 + shift
        A22 = H22 + shift
        det = A11 * A22 - H12 * H12
        p1 = -(A22 * g1 - H12 * g2) / det
        p2 = -(-H12 * g1 + A11 * g2) / det
        if gn <= GRAD_TOL * (1.0 + math.sqrt(x1 * x1 + x2 * x2) * scale):
            # at a saddle / maximum: step along the eigenvector of the negative eigenvalue
            if abs(H12) > 0.0:
                e1 = lmin - H22
                e2 = H12
            else:
                if H11 < H22:
                    e1, e2 = 1.0, 0.0
                else:
                    e1, e2 = 0.0, 1.0
            en = math.sqrt(e1 * e1 + e2 * e2)
            p1 = 1e-3 * e1 / en
            p2 = 1e-3 * e2 / en
        slope = g1 * p1 + g2 * p2
        step = 1.0
        accepted = False
        if shift == 0.0 and gn < 1e-6 * (1.0 + scale):
            # close to a strict minimum: Newton converges quadratically, and f changes below
            # round-off, so take the full step without a line search
            y1 = x1 + p1
            y2 = x2 + p2
            accepted = True
        for _ls in range(0 if accepted else 60):
            y1 = x1 + step * p1
            y2 = x2 + step * p2
            fy = objective(y1, y2, w1, w2, t1, t2, V, s2)
            if fy <= f + 1e-4 * step * slope or (fy < f and slope >= 0.0):
                accepted = True
                break
            step *= 0.5
        if not accepted:
            # no decrease possible at machine precision: we are at the minimum
            return x1, x2, f, gn <= 1e-7 * (1.0 + scale)
        dx = math.sqrt((y1 - x1) ** 2 + (y2 - x2) ** 2)
        x1, x2 = y1, y2
        f, g1, g2, H11, H12, H22 = fgh(x1, x2, w1, w2, t1, t2, V, s2)
        if dx <= 1e-15 * (1.0 + math.sqrt(x1 * x1 + x2 * x2)):
            return x1, x2, f, True
        if nk > 0 and H11 > 0.0 and H11 * H22 > H12 * H12:
            for j in range(nk):
                if (abs(x1 - k1[j]) + abs(x2 - k2[j])) * (
                    1.0 + abs(k1[j]) + abs(k2[j])
                ) <= MERGE_TOL and f >= kf[j]:
                    return x1, x2, f, False
    return x1, x2, f, False


@numba.njit(cache=True)
def zero_loss_point(t1, t2):
    """A point x* with S(x*)_11 = t1, S(x*)_22 = t2 (the other one is -x*); clipped targets."""
    eps = 1e-12
    p1 = min(max(t1, eps), 1.0 - eps)
    p2 = min(max(t2, eps), 1.0 - eps)
    v1 = logit(p1)
    v2 = logit(p2)
    dd = v1 + v2  # = (x1 - x2)^2 >= 0 needed
    if dd <= 0.0:
        return 0.0, 0.0
    d = math.sqrt(dd)
    s = (v1 - v2) / d
    return 0.5 * (s + d), 0.5 * (s - d)


N_STARTS = 9


@numba.njit(cache=True)
def start_point(k, w1, w2, z1, z2):
    """The k-th Newton start: w; ±x*(t); the midpoints of w and ±x*; w/2; the projections of w
    on the axes x1 = 0, x2 = 0 and on the diagonal x1 = x2 (the valleys where one or both softmax
    entries can be fitted with a small coordinate)."""
    if k == 0:
        return w1, w2
    if k == 1:
        return z1, z2
    if k == 2:
        return -z1, -z2
    if k == 3:
        return 0.5 * (z1 + w1), 0.5 * (z2 + w2)
    if k == 4:
        return 0.5 * (w1 - z1), 0.5 * (w2 - z2)
    if k == 5:
        return 0.5 * w1, 0.5 * w2
    if k == 6:
        return 0.0, w2
    if k == 7:
        return w1, 0.0
    c = 0.5 * (w1 + w2)
    return c, c


@numba.njit(cache=True)
def prox_point(w1, w2, t1, t2, V, s2):
    """Global minimiser of |x - w|²/(2V) + ℓ(x; t) by multi-start safeguarded Newton.

    Returns (x1, x2, f, ok): the minimiser, its value, and whether Newton converged from the
    winning start.  The start set (see ``start_point``) was chosen from the basins found by
    brute force over 2e5 random hard cases (V up to 300, |w| up to ~20); the tests check it again
    against a dense grid over the disk |x - w| <= sqrt(2 V ℓ(w)) that contains every minimiser.
    """
    z1, z2 = zero_loss_point(t1, t2)
    k1 = np.empty(N_STARTS)
    k2 = np.empty(N_STARTS)
    kf = np.empty(N_STARTS)
    best1, best2, bestf, ok = newton(w1, w2, w1, w2, t1, t2, V, s2)
    nk = 0
    if ok:
        k1[0], k2[0], kf[0] = best1, best2, bestf
        nk = 1
    for k in range(1, N_STARTS):
        y1, y2 = start_point(k, w1, w2, z1, z2)
        x1, x2, f, conv = newton_known(y1, y2, w1, w2, t1, t2, V, s2, k1, k2, kf, nk)
        if conv:
            k1[nk], k2[nk], kf[nk] = x1, x2, f
            nk += 1
        if f < bestf - 1e-15 * (1.0 + abs(bestf)):
            best1, best2, bestf, ok = x1, x2, f, conv
    return best1, best2, bestf, ok


@numba.njit(cache=True)
def prox_jacobians(x1, x2, w1, w2, t1, t2, V, s2, h1, h2, omega):
    """d x̂ / d w (2x2) and d x̂ / d h* (2x2) at a local minimum x̂ (implicit function theorem).

    ∇_x f(x̂; w, t) = 0  ⇒  H dx̂ = dw / V - (∂²ℓ/∂x∂t) dt.
    """
    _, _, _, H11, H12, H22 = fgh(x1, x2, w1, w2, t1, t2, V, s2)
    det = H11 * H22 - H12 * H12
    i11 = H22 / det
    i12 = -H12 / det
    i22 = H11 / det
    jw11 = i11 / V
    jw12 = i12 / V
    jw21 = i12 / V
    jw22 = i22 / V
    # ∂(∇_x ℓ)/∂t1 = -2 s2 ka ∇u1, ∂/∂t2 = -2 s2 kb ∇u2
    a = sig(x1 * (x1 - x2))
    b = sig(x2 * (x2 - x1))
    ka = a * (1.0 - a)
    kb = b * (1.0 - b)
    c11 = -2.0 * s2 * ka * (2.0 * x1 - x2)
    c21 = -2.0 * s2 * ka * (-x1)
    c12 = -2.0 * s2 * kb * (-x2)
    c22 = -2.0 * s2 * kb * (2.0 * x2 - x1)
    # dt/dh*: t1 = (1-ω) sig(v1) + ..., v1 = h1(h1 - h2): ∇v1 = (2h1 - h2, -h1)
    v1 = h1 * (h1 - h2)
    v2 = h2 * (h2 - h1)
    sa = sig(v1)
    sb = sig(v2)
    e1 = (1.0 - omega) * sa * (1.0 - sa)
    e2 = (1.0 - omega) * sb * (1.0 - sb)
    dt1_dh1 = e1 * (2.0 * h1 - h2)
    dt1_dh2 = e1 * (-h1)
    dt2_dh1 = e2 * (-h2)
    dt2_dh2 = e2 * (2.0 * h2 - h1)
    # B = C @ (dt/dh) : (2x2), dx̂/dh = -H^{-1} B
    B11 = c11 * dt1_dh1 + c12 * dt2_dh1
    B12 = c11 * dt1_dh2 + c12 * dt2_dh2
    B21 = c21 * dt1_dh1 + c22 * dt2_dh1
    B22 = c21 * dt1_dh2 + c22 * dt2_dh2
    jh11 = -(i11 * B11 + i12 * B21)
    jh12 = -(i11 * B12 + i12 * B22)
    jh21 = -(i12 * B11 + i22 * B21)
    jh22 = -(i12 * B12 + i22 * B22)
    return jw11, jw12, jw21, jw22, jh11, jh12, jh21, jh22


@numba.njit(cache=True, parallel=True)
def prox_batch(w, hs, V, s2, omega, a11, a22, want_jac):
    """Row-wise global prox.  w, hs: (N, 2).  Returns x (N,2), value (N,), jac_w (N,2,2),
    jac_h (N,2,2) (zeros unless want_jac), ok (N,) bool."""
    n = w.shape[0]
    x = np.empty((n, 2))
    val = np.empty(n)
    jw = np.zeros((n, 2, 2))
    jh = np.zeros((n, 2, 2))
    ok = np.empty(n, dtype=np.bool_)
    for i in numba.prange(n):
        t1, t2 = teacher_t(hs[i, 0], hs[i, 1], omega, a11, a22)
        x1, x2, f, conv = prox_point(w[i, 0], w[i, 1], t1, t2, V, s2)
        x[i, 0] = x1
        x[i, 1] = x2
        val[i] = f
        ok[i] = conv
        if want_jac:
            r = prox_jacobians(x1, x2, w[i, 0], w[i, 1], t1, t2, V, s2, hs[i, 0], hs[i, 1], omega)
            jw[i, 0, 0] = r[0]
            jw[i, 0, 1] = r[1]
            jw[i, 1, 0] = r[2]
            jw[i, 1, 1] = r[3]
            jh[i, 0, 0] = r[4]
            jh[i, 0, 1] = r[5]
            jh[i, 1, 0] = r[6]
            jh[i, 1, 1] = r[7]
    return x, val, jw, jh, ok


@numba.njit(cache=True, parallel=True)
def prox_batch_t(w, t, V, s2):
    """Row-wise global prox with the teacher targets t = (t1, t2) given directly (N, 2)."""
    n = w.shape[0]
    x = np.empty((n, 2))
    val = np.empty(n)
    for i in numba.prange(n):
        x1, x2, f, conv = prox_point(w[i, 0], w[i, 1], t[i, 0], t[i, 1], V, s2)
        x[i, 0] = x1
        x[i, 1] = x2
        val[i] = f
    return x, val


N_CHANNEL = 10
# indices of the channel sums returned by ``channel_sums`` (all weighted by the rule's weights)
C_G2, C_SG, C_GETA, C_GXI, C_M, C_TRJW, C_TRJH, C_EG, C_W, C_BAD = range(N_CHANNEL)


@numba.njit(cache=True, parallel=True)
def channel_sums(nodes, weights, q, m, theta, V, rho, s2, omega, a11, a22, want_jac, nthreads):
    """Weighted sums over quadrature nodes (ξ1, ξ2, η1, η2) of the channel quantities.

    Local fields ω_ℓ = √q ξ_ℓ + s_ℓ m (s = (+1, -1)), h*_ℓ = (θ/√q) ξ_ℓ + √(ρ - θ²/q) η_ℓ.
    Returns an array of N_CHANNEL sums:
      Σ_ℓ g_ℓ², Σ_ℓ s_ℓ g_ℓ, Σ_ℓ g_ℓ η_ℓ, Σ_ℓ g_ℓ ξ_ℓ, M (the prox minimum), tr(dx̂/dw),
      tr(dx̂/dh*), ℓ_g = σ²[(S_11(h) - t_1)² + (S_22(h) - t_2)²] with h = ω (no prox),
      Σ weights, and the weight of nodes where Newton did not converge.
    """
    n = nodes.shape[0]
    sq = math.sqrt(q)
    a = theta / sq
    c = math.sqrt(max(rho - theta * theta / q, 0.0))
    out = np.zeros(N_CHANNEL)
    part = np.zeros((nthreads, N_CHANNEL))
    chunk = (n + nthreads - 1) // nthreads
    for th in numba.prange(nthreads):
        lo = th * chunk
        hi = min(n, lo + chunk)
        acc = np.zeros(N_CHANNEL)
        for i in range(lo, hi):
            wt = weights[i]
            xi1 = nodes[i, 0]
            xi2 = nodes[i, 1]
            et1 = nodes[i, 2]
            et2 = nodes[i, 3]
            w1 = sq * xi1 + m
            w2 = sq * xi2 - m
            h1 = a * xi1 + c * et1
            h2 = a * xi2 + c * et2
            t1, t2 = teacher_t(h1, h2, omega, a11, a22)
            x1, x2, f, conv = prox_point(w1, w2, t1, t2, V, s2)
            g1 = (x1 - w1) / V
            g2 = (x2 - w2) / V
            acc[C_G2] += wt * (g1 * g1 + g2 * g2)
            acc[C_SG] += wt * (g1 - g2)
            acc[C_GETA] += wt * (g1 * et1 + g2 * et2)
            acc[C_GXI] += wt * (g1 * xi1 + g2 * xi2)
            acc[C_M] += wt * f
            if want_jac:
                r = prox_jacobians(x1, x2, w1, w2, t1, t2, V, s2, h1, h2, omega)
                acc[C_TRJW] += wt * (r[0] + r[3])
                acc[C_TRJH] += wt * (r[4] + r[7])
            acc[C_EG] += wt * loss_value(w1, w2, t1, t2, s2)
            acc[C_W] += wt
            if not conv:
                acc[C_BAD] += wt
        for k in range(N_CHANNEL):
            part[th, k] = acc[k]
    for th in range(nthreads):
        for k in range(N_CHANNEL):
            out[k] += part[th, k]
    return out


# --------------------------------------------------------------------------- split (polar) rule
#
# Where the global minimiser of the prox jumps between basins, x̂(ξ, η) is discontinuous across
# curves that (in the ξ-plane, at fixed η) radiate from the point where w = 0, i.e. from
# ξ_0 = -(m, -m)/√q.  The "split" rule therefore integrates ξ in polar coordinates around ξ_0:
# for every (η node, radius r) it scans the circle at K angles with the global prox, detects each
# basin change between neighbouring angles (local Newton continuation in both directions),
# locates the jump angle by a safeguarded Illinois iteration on the difference of the two basins'
# minimum values, and integrates every smooth arc with G-point Gauss-Legendre (the integrand is
# evaluated by Newton continuation inside the arc's basin).  η uses tensor Gauss-Hermite, r
# Gauss-Legendre on [0, |ξ_0| + R_MAX].

R_MAX = 8.0
MAX_STACK = 64
SAME_TOL = 1e-7


@numba.njit(cache=True)
def _node(phi, r, e1, e2, c01, c02, sq, m, a, c):
    xi1 = c01 + r * math.cos(phi)
    xi2 = c02 + r * math.sin(phi)
    w1 = sq * xi1 + m
    w2 = sq * xi2 - m
    h1 = a * xi1 + c * e1
    h2 = a * xi2 + c * e2
    return xi1, xi2, w1, w2, h1, h2


@numba.njit(cache=True)
def _close(x1, x2, y1, y2):
    return abs(x1 - y1) + abs(x2 - y2) <= SAME_TOL * (1.0 + abs(y1) + abs(y2))


@numba.njit(cache=True)
def _accum(acc, wt, x1, x2, f, w1, w2, xi1, xi2, e1, e2, V, s2, t1, t2, h1, h2, omega, want_jac):
    dens = math.exp(-0.5 * (xi1 * xi1 + xi2 * xi2)) / (2.0 * math.pi)
    wt = wt * dens
    g1 = (x1 - w1) / V
    g2 = (x2 - w2) / V
    acc[C_G2] += wt * (g1 * g1 + g2 * g2)
    acc[C_SG] += wt * (g1 - g2)
    acc[C_GETA] += wt * (g1 * e1 + g2 * e2)
    acc[C_GXI] += wt * (g1 * xi1 + g2 * xi2)
    acc[C_M] += wt * f
    if want_jac:
        r = prox_jacobians(x1, x2, w1, w2, t1, t2, V, s2, h1, h2, omega)
        acc[C_TRJW] += wt * (r[0] + r[3])
        acc[C_TRJH] += wt * (r[4] + r[7])
    acc[C_EG] += wt * loss_value(w1, w2, t1, t2, s2)
    acc[C_W] += wt


@numba.njit(cache=True)
def _arc(
    acc,
    wbase,
    p0,
    p1,
    sx1,
    sx2,
    r,
    e1,
    e2,
    c01,
    c02,
    sq,
    m,
    a,
    c,
    V,
    s2,
    omega,
    a11,
    a22,
    glx,
    glw,
    want_jac,
    reverse,
):
    """Integrate the arc [p0, p1] (one basin) with Gauss-Legendre, continuing Newton from
    (sx1, sx2) (the minimiser at p0, or at p1 when ``reverse``)."""
    G = glx.shape[0]
    half = 0.5 * (p1 - p0)
    mid = 0.5 * (p1 + p0)
    y1, y2 = sx1, sx2
    for jj in range(G):
        j = G - 1 - jj if reverse else jj
        phi = mid + half * glx[j]
        xi1, xi2, w1, w2, h1, h2 = _node(phi, r, e1, e2, c01, c02, sq, m, a, c)
        t1, t2 = teacher_t(h1, h2, omega, a11, a22)
        y1, y2, f, conv = newton(y1, y2, w1, w2, t1, t2, V, s2)
        _accum(
            acc,
            wbase * half * glw[j],
            y1,
            y2,
            f,
            w1,
            w2,
            xi1,
            xi2,
            e1,
            e2,
            V,
            s2,
            t1,
            t2,
            h1,
            h2,
            omega,
            want_jac,
        )
        if not conv:
            acc[C_BAD] += wbase * half * glw[j]


@numba.njit(cache=True)
def _local(phi, s1, s2_, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22):
    xi1, xi2, w1, w2, h1, h2 = _node(phi, r, e1, e2, c01, c02, sq, m, a, c)
    t1, t2 = teacher_t(h1, h2, omega, a11, a22)
    return newton(s1, s2_, w1, w2, t1, t2, V, s2)


@numba.njit(cache=True)
def _global(phi, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22):
    xi1, xi2, w1, w2, h1, h2 = _node(phi, r, e1, e2, c01, c02, sq, m, a, c)
    t1, t2 = teacher_t(h1, h2, omega, a11, a22)
    return prox_point(w1, w2, t1, t2, V, s2)


@numba.njit(cache=True)
def _locate_jump(
    lo, hi, ta1, ta2, tb1, tb2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
):
    """Jump angle in a tiny bracket [lo, hi]: basin A (tracked from ta) is global at lo, basin B
    (tracked from tb) at hi.  Illinois iteration on D = f_A - f_B, bisection when one basin has
    vanished at the trial point.  Returns the angle."""
    Dlo = 0.0
    Dhi = 0.0
    have_lo = False
    have_hi = False
    side_last = 0
    for _it in range(60):
        if hi - lo <= 1e-13 * (1.0 + abs(hi)):
            break
        if have_lo and have_hi and Dhi > Dlo:
            ph = lo + (hi - lo) * (-Dlo) / (Dhi - Dlo)
            if not (lo < ph < hi) or min(ph - lo, hi - ph) < 1e-3 * (hi - lo):
                ph = 0.5 * (lo + hi)
        else:
            ph = 0.5 * (lo + hi)
        u1, u2, fu, _ = _local(
            ph, ta1, ta2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
        )
        v1, v2, fv, _ = _local(
            ph, tb1, tb2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
        )
        if _close(u1, u2, v1, v2):
            da = abs(u1 - ta1) + abs(u2 - ta2)
            db = abs(v1 - tb1) + abs(v2 - tb2)
            side = 1 if da > db else -1  # A collapsed into B → ph lies on the B side
            valid = False
            D = 0.0
        else:
            D = fu - fv
            side = -1 if D < 0.0 else 1
            valid = True
        if side < 0:
            lo = ph
            ta1, ta2 = u1, u2
            if valid:
                Dlo = D
                have_lo = True
                if side_last < 0 and have_hi:
                    Dhi *= 0.5  # Illinois
            side_last = -1
        else:
            hi = ph
            tb1, tb2 = v1, v2
            if valid:
                Dhi = D
                have_hi = True
                if side_last > 0 and have_lo:
                    Dlo *= 0.5
            side_last = 1
    return 0.5 * (lo + hi)


JUMP_WIDTH = 1e-7  # bracket width (radians) below which a basin change is treated as a jump
TRY_WIDTH = 0.03  # bracket width below which a single jump is located and verified
SMOOTH_RATIO = 0.05
MAX_DEPTH = 40


@numba.njit(cache=True)
def _circle(
    acc,
    stats,
    wbase,
    r,
    e1,
    e2,
    c01,
    c02,
    sq,
    m,
    a,
    c,
    V,
    s2,
    omega,
    a11,
    a22,
    K,
    glx,
    glw,
    want_jac,
    max_depth,
):
    """Angular integral over the circle of radius r around ξ_0 at fixed η = (e1, e2).

    Every scan interval is bisected (global prox at the midpoint) until the global minimiser is
    smooth on it — the midpoint minimiser lies within SMOOTH_RATIO·|x(p1) - x(p0)| of the
    chord's midpoint and Newton continuation across the interval reproduces the global minimisers
    — or until it is narrower than TRY_WIDTH, where a single jump between the two ends' basins is
    located (Illinois, ~1e-13 rad) and verified (each basin global beside the jump and in the
    middle of its sub-arc; otherwise bisection continues down to JUMP_WIDTH).  Detection does
    not rely on continuation alone, so it also catches jumps where both basins are born and die
    between two scan angles (hysteresis).
    """
    two_pi = 2.0 * math.pi
    X1 = np.empty(K + 1)
    X2 = np.empty(K + 1)
    for k in range(K):
        x1, x2, f, ok = _global(
            two_pi * k / K, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
        )
        X1[k] = x1
        X2[k] = x2
    X1[K] = X1[0]
    X2[K] = X2[0]
    sp0 = np.empty(MAX_STACK)
    sp1 = np.empty(MAX_STACK)
    sa1 = np.empty(MAX_STACK)
    sa2 = np.empty(MAX_STACK)
    sb1 = np.empty(MAX_STACK)
    sb2 = np.empty(MAX_STACK)
    sd = np.empty(MAX_STACK, dtype=np.int64)
    for k in range(K):
        sp0[0] = two_pi * k / K
        sp1[0] = two_pi * (k + 1) / K
        sa1[0] = X1[k]
        sa2[0] = X2[k]
        sb1[0] = X1[k + 1]
        sb2[0] = X2[k + 1]
        sd[0] = 0
        top = 1
        while top > 0:
            top -= 1
            p0 = sp0[top]
            p1 = sp1[top]
            A1 = sa1[top]
            A2 = sa2[top]
            B1 = sb1[top]
            B2 = sb2[top]
            depth = sd[top]
            if p1 - p0 <= JUMP_WIDTH or depth >= max_depth or top + 2 > MAX_STACK:
                chord = abs(B1 - A1) + abs(B2 - A2)
                if chord > SAME_TOL * (1.0 + abs(A1) + abs(A2)):
                    stats[1] += 1.0  # unresolved basin change (bracket below JUMP_WIDTH)
                    pj = 0.5 * (p0 + p1)
                    _arc(
                        acc,
                        wbase,
                        p0,
                        pj,
                        A1,
                        A2,
                        r,
                        e1,
                        e2,
                        c01,
                        c02,
                        sq,
                        m,
                        a,
                        c,
                        V,
                        s2,
                        omega,
                        a11,
                        a22,
                        glx,
                        glw,
                        want_jac,
                        False,
                    )
                    _arc(
                        acc,
                        wbase,
                        pj,
                        p1,
                        B1,
                        B2,
                        r,
                        e1,
                        e2,
                        c01,
                        c02,
                        sq,
                        m,
                        a,
                        c,
                        V,
                        s2,
                        omega,
                        a11,
                        a22,
                        glx,
                        glw,
                        want_jac,
                        True,
                    )
                else:
                    _arc(
                        acc,
                        wbase,
                        p0,
                        p1,
                        A1,
                        A2,
                        r,
                        e1,
                        e2,
                        c01,
                        c02,
                        sq,
                        m,
                        a,
                        c,
                        V,
                        s2,
                        omega,
                        a11,
                        a22,
                        glx,
                        glw,
                        want_jac,
                        False,
                    )
                continue
            pm = 0.5 * (p0 + p1)
            stats[2] += 1.0
            stats[3] = max(stats[3], depth)
            M1, M2, fm, _ = _global(pm, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22)
            chord = abs(B1 - A1) + abs(B2 - A2)
            dev = abs(M1 - 0.5 * (A1 + B1)) + abs(M2 - 0.5 * (A2 + B2))
            # a smooth minimiser passes close to the chord's midpoint (deviation ~ curvature ×
            # chord²); a jump puts the midpoint near one end (deviation ~ chord / 2)
            smooth = dev <= SMOOTH_RATIO * chord + SAME_TOL * (1.0 + abs(M1) + abs(M2))
            if smooth:
                # continuation A → pm → p1 must land on the global minimisers
                y1, y2, fy, _ = _local(
                    pm, A1, A2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
                )
                smooth = _close(y1, y2, M1, M2)
                if smooth:
                    y1, y2, fy, _ = _local(
                        p1, y1, y2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
                    )
                    smooth = _close(y1, y2, B1, B2)
            if smooth:
                _arc(
                    acc,
                    wbase,
                    p0,
                    p1,
                    A1,
                    A2,
                    r,
                    e1,
                    e2,
                    c01,
                    c02,
                    sq,
                    m,
                    a,
                    c,
                    V,
                    s2,
                    omega,
                    a11,
                    a22,
                    glx,
                    glw,
                    want_jac,
                    False,
                )
                continue
            if p1 - p0 <= TRY_WIDTH:
                # locate a single jump between the basins of the two ends and verify that each
                # basin is global beside it and in the middle of its sub-arc
                pj = _locate_jump(
                    p0, p1, A1, A2, B1, B2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
                )
                eps = 1e-10 * (p1 - p0) + 1e-14
                ok = p0 + eps < pj < p1 - eps
                for side in range(4):
                    if not ok:
                        break
                    if side == 0:
                        ph, S1, S2 = pj - eps, A1, A2
                    elif side == 1:
                        ph, S1, S2 = pj + eps, B1, B2
                    elif side == 2:
                        ph, S1, S2 = 0.5 * (p0 + pj), A1, A2
                    else:
                        ph, S1, S2 = 0.5 * (pj + p1), B1, B2
                    y1, y2, fy, _ = _local(
                        ph, S1, S2, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
                    )
                    g1_, g2_, gf, _ = _global(
                        ph, r, e1, e2, c01, c02, sq, m, a, c, V, s2, omega, a11, a22
                    )
                    ok = gf >= fy - 1e-13 * (1.0 + abs(fy))
                if ok:
                    stats[0] += 1.0
                    _arc(
                        acc,
                        wbase,
                        p0,
                        pj,
                        A1,
                        A2,
                        r,
                        e1,
                        e2,
                        c01,
                        c02,
                        sq,
                        m,
                        a,
                        c,
                        V,
                        s2,
                        omega,
                        a11,
                        a22,
                        glx,
                        glw,
                        want_jac,
                        False,
                    )
                    _arc(
                        acc,
                        wbase,
                        pj,
                        p1,
                        B1,
                        B2,
                        r,
                        e1,
                        e2,
                        c01,
                        c02,
                        sq,
                        m,
                        a,
                        c,
                        V,
                        s2,
                        omega,
                        a11,
                        a22,
                        glx,
                        glw,
                        want_jac,
                        True,
                    )
                    continue
            sp0[top] = p0
            sp1[top] = pm
            sa1[top] = A1
            sa2[top] = A2
            sb1[top] = M1
            sb2[top] = M2
            sd[top] = depth + 1
            top += 1
            sp0[top] = pm
            sp1[top] = p1
            sa1[top] = M1
            sa2[top] = M2
            sb1[top] = B1
            sb2[top] = B2
            sd[top] = depth + 1
            top += 1


@numba.njit(cache=True, parallel=True)
def split_sums(
    eta_x,
    eta_w,
    eta2_x,
    eta2_w,
    r_x,
    r_w,
    glx,
    glw,
    K,
    q,
    m,
    theta,
    V,
    rho,
    s2,
    omega,
    a11,
    a22,
    want_jac,
    max_depth,
    nthreads,
    sym,
    w_skip=1e-15,
    w_deep=1e-9,
):
    """Channel sums (same layout as ``channel_sums``) with the jump-splitting polar rule.

    eta_x, eta_w / eta2_x, eta2_w: 1-D rules for η_1 / η_2 (tensor product is formed here);
    r_x, r_w: Gauss-Legendre nodes/weights for the radius on [0, R]; glx, glw: G-point
    Gauss-Legendre on [-1, 1] for each angular arc; K: scan angles per circle.
    stats: [number of jumps located, number of unresolved basin changes, bisection midpoints,
    maximal depth].
    sym: exploit the exact η → -η symmetry (requires a symmetric η rule with an even number of
    nodes, eta2 = eta): 1 when θ = 0 (positional: the circle at -η equals the one at η, the
    η-odd sums vanish), 2 when m = 0 (semantic: the circle at -η is the one at η turned by π
    with x̂ → -x̂, the s·g sum vanishes), 3 when both; 0 = no symmetry.  Only half of the η
    nodes are computed, with doubled weights, and the odd sums are set to 0.
    sym + 4: also the swap symmetry of a swap-symmetric A (A_11 = A_22): the circle at
    (η_2, η_1) is the one at (η_1, η_2) reflected (ξ → (-ξ_2, -ξ_1) when θ = 0, ξ → (ξ_2, ξ_1)
    when m = 0), and every sum over ℓ is invariant.  Only the fundamental domain
    η_1 <= η_2, η_1 + η_2 <= 0 of the 4-element group is computed, with weights 4 (generic) or
    2 (on the diagonal or the anti-diagonal).
    """
    sq = math.sqrt(q)
    a = theta / sq
    c = math.sqrt(max(rho - theta * theta / q, 0.0))
    c01 = -m / sq
    c02 = m / sq
    r0 = math.sqrt(c01 * c01 + c02 * c02)
    ne = eta_x.shape[0]
    ne2 = eta2_x.shape[0]
    nr = r_x.shape[0]
    swap = sym >= 4 and ne % 2 == 0 and ne2 == ne
    base_sym = sym - 4 if sym >= 4 else sym
    # the η pairs to compute, with their symmetry multiplicity
    npair = 0
    P1 = np.empty(ne * ne2, dtype=np.int64)
    P2 = np.empty(ne * ne2, dtype=np.int64)
    PW = np.empty(ne * ne2)
    for i1 in range(ne):
        for i2 in range(ne2):
            mult = 1.0
            if swap:
                if i1 > i2 or i1 + i2 > ne - 1:
                    continue
                mult = 2.0 if (i1 == i2 or i1 + i2 == ne - 1) else 4.0
            elif base_sym != 0 and ne % 2 == 0:
                if i1 >= ne // 2:
                    continue
                mult = 2.0
            P1[npair] = i1
            P2[npair] = i2
            PW[npair] = mult
            npair += 1
    odd_zero = swap or (base_sym != 0 and ne % 2 == 0)
    ncirc = npair * nr
    part = np.zeros((nthreads, N_CHANNEL + 4))
    for th in numba.prange(nthreads):
        acc = np.zeros(N_CHANNEL)
        stats = np.zeros(4)
        # interleaved (not contiguous) assignment: the circles' cost varies strongly with η
        # (tails are skipped), contiguous blocks leave one thread idle
        for idx in range(th, ncirc, nthreads):
            ir = idx % nr
            ip = idx // nr
            i1 = P1[ip]
            i2 = P2[ip]
            wsym = PW[ip]
            r = r_x[ir]
            wbase = wsym * eta_w[i1] * eta2_w[i2] * r_w[ir] * r
            # total weight of the circle is at most wbase * exp(-(r - |ξ_0|)²/2): resolve jumps
            # fully only where it matters at the 1e-9 level
            dr = r - r0
            cw = wbase * math.exp(-0.5 * dr * dr)
            if cw < w_skip:
                continue
            depth = max_depth if cw > w_deep else 3
            _circle(
                acc,
                stats,
                wbase,
                r,
                eta_x[i1],
                eta2_x[i2],
                c01,
                c02,
                sq,
                m,
                a,
                c,
                V,
                s2,
                omega,
                a11,
                a22,
                K,
                glx,
                glw,
                want_jac,
                depth,
            )
        for k in range(N_CHANNEL):
            part[th, k] = acc[k]
        for k in range(4):
            part[th, N_CHANNEL + k] = stats[k]
    out = np.zeros(N_CHANNEL + 4)
    for th in range(nthreads):
        for k in range(N_CHANNEL + 4):
            out[k] += part[th, k]
    if odd_zero:
        if base_sym == 1 or base_sym == 3:
            out[C_GETA] = 0.0
            out[C_TRJH] = 0.0
        if base_sym == 2 or base_sym == 3:
            out[C_SG] = 0.0
    return out
