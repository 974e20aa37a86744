"""Numba kernels of the L = 2 attention model: the per-sample loss and its prox, one node at a
time (docs/attention.md §2-3).

The loss of a sample is ℓ(x; κ, t) = κ [(a - t_1)² + (b - t_2)²] with a = sig(x_1(x_1 - x_2)),
b = sig(x_2(x_2 - x_1)) (docs/attention.md eq. 5; the argument ``s2`` of the kernels is κ, = σ²
in the effective channel).  The prox objective f(x) = |x - w|²/(2V) + ℓ(x; κ, t) is non-convex;
since 0 <= ℓ <= 2κ, every global minimiser lies in the disk |x - w| <= sqrt(2 V ℓ(w)).  The prox
runs a safeguarded Newton method (eigenvalue-shifted Hessian + Armijo backtracking) from several
starts -- w itself, the two zero-loss points ±x*(t), their midpoints with w, w/2, and the
projections of w on the valleys x1 = 0, x2 = 0, x1 = x2 -- and keeps the lowest value
(docs/attention.md §3).  Numpy references: ``theory.attention.channel`` (loss, gradient,
Hessian, teacher), ``theory.attention.proximal.prox_reference`` and ``prox_newton_reference``.
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
def teacher_t_jac(h1, h2, omega):
    """d(t_1, t_2)/d(h*_1, h*_2) of the teacher's diagonal, row-major (4 numbers)."""
    v1 = h1 * (h1 - h2)
    v2 = h2 * (h2 - h1)
    sa = sig(v1)
    sb = sig(v2)
    e1 = (1.0 - omega) * sa * (1.0 - sa)
    e2 = (1.0 - omega) * sb * (1.0 - sb)
    return e1 * (2.0 * h1 - h2), e1 * (-h1), e2 * (-h2), e2 * (2.0 * h2 - h1)


@numba.njit(cache=True)
def prox_jacobians(x1, x2, w1, w2, t1, t2, V, s2):
    """d x̂/d w and d x̂/d t (2x2 each, row-major: 8 numbers) at a local minimum x̂ (implicit
    function theorem: ∇_x f(x̂; w, t) = 0  ⇒  H dx̂ = dw / V - (∂²ℓ/∂x∂t) dt)."""
    _, _, _, H11, H12, H22 = fgh(x1, x2, w1, w2, t1, t2, V, s2)
    det = H11 * H22 - H12 * H12
    i11 = H22 / det
    i12 = -H12 / det
    i22 = H11 / det
    # ∂(∇_x ℓ)/∂t1 = -2 κ ka ∇u1 (column 1 of C), ∂/∂t2 = -2 κ kb ∇u2 (column 2)
    a = sig(x1 * (x1 - x2))
    b = sig(x2 * (x2 - x1))
    ka = a * (1.0 - a)
    kb = b * (1.0 - b)
    c11 = -2.0 * s2 * ka * (2.0 * x1 - x2)
    c21 = -2.0 * s2 * ka * (-x1)
    c12 = -2.0 * s2 * kb * (-x2)
    c22 = -2.0 * s2 * kb * (2.0 * x2 - x1)
    return (
        i11 / V,
        i12 / V,
        i12 / V,
        i22 / V,
        -(i11 * c11 + i12 * c21),
        -(i11 * c12 + i12 * c22),
        -(i12 * c11 + i22 * c21),
        -(i12 * c12 + i22 * c22),
    )


@numba.njit(cache=True)
def trace_jac_h(r, h1, h2, omega):
    """tr(d x̂/d h*) from the 8 numbers of :func:`prox_jacobians` and the teacher's dt/dh*."""
    d11, d12, d21, d22 = teacher_t_jac(h1, h2, omega)
    return r[4] * d11 + r[5] * d21 + r[6] * d12 + r[7] * d22


@numba.njit(cache=True, parallel=True)
def prox_rows(w, t, kappa, V, x0, local, want_jac):
    """Row-wise prox of |x - w_i|²/(2 V_i) + κ_i[(a - t_i1)² + (b - t_i2)²]: the global minimum
    (:func:`prox_point`) or, with ``local``, safeguarded Newton from ``x0`` (the minimiser of
    the basin of x0).  w, t, x0: (N, 2) (x0 unused unless ``local``); kappa, V: (N,).
    Returns x (N, 2), value (N,), d x̂/d w (N, 2, 2), d x̂/d t (N, 2, 2) (zeros unless
    ``want_jac``), ok (N,): Newton converged (from the winning start)."""
    n = w.shape[0]
    x = np.empty((n, 2))
    val = np.empty(n)
    jw = np.zeros((n, 2, 2))
    jt = np.zeros((n, 2, 2))
    ok = np.empty(n, dtype=np.bool_)
    for i in numba.prange(n):
        w1, w2, t1, t2, Vi, ki = w[i, 0], w[i, 1], t[i, 0], t[i, 1], V[i], kappa[i]
        if local:
            x1, x2, f, conv = newton(x0[i, 0], x0[i, 1], w1, w2, t1, t2, Vi, ki)
        else:
            x1, x2, f, conv = prox_point(w1, w2, t1, t2, Vi, ki)
        x[i, 0] = x1
        x[i, 1] = x2
        val[i] = f
        ok[i] = conv
        if want_jac:
            r = prox_jacobians(x1, x2, w1, w2, t1, t2, Vi, ki)
            jw[i, 0, 0] = r[0]
            jw[i, 0, 1] = r[1]
            jw[i, 1, 0] = r[2]
            jw[i, 1, 1] = r[3]
            jt[i, 0, 0] = r[4]
            jt[i, 0, 1] = r[5]
            jt[i, 1, 0] = r[6]
            jt[i, 1, 1] = r[7]
    return x, val, jw, jt, ok


@numba.njit(cache=True, fastmath={"reassoc", "contract"})
def risk_grad(X, Q, kappa, t1, t2, c, lam):
    """The empirical risk Σ_μ [ℓ(h_μ; κ_μ, t_μ) + c_μ] + (λ/2)|Q|² and its gradient in Q, with
    the fields h_μ = X_μ Q/√d of the tokens ``X`` (n, 2, d): one pass over the tokens (each
    sample's two rows are read once for the fields and again, from cache, for its gradient;
    the sums may be reassociated so that they vectorise, no finite-math assumption).
    Numpy reference: ``sample_loss_grad`` of ``theory.attention.channel`` and the two
    matrix-vector products of ``ERMData.fields`` / ``backproject``."""
    n, _, d = X.shape
    s = 1.0 / math.sqrt(d)
    grad = lam * Q
    tot = 0.0
    for mu in range(n):
        h1 = 0.0
        h2 = 0.0
        for k in range(d):
            h1 += X[mu, 0, k] * Q[k]
            h2 += X[mu, 1, k] * Q[k]
        h1 *= s
        h2 *= s
        a = sig(h1 * (h1 - h2))
        b = sig(h2 * (h2 - h1))
        ea = a - t1[mu]
        eb = b - t2[mu]
        fa = 2.0 * kappa[mu] * ea * a * (1.0 - a)
        fb = 2.0 * kappa[mu] * eb * b * (1.0 - b)
        g1 = (fa * (2.0 * h1 - h2) - fb * h2) * s
        g2 = (-fa * h1 + fb * (2.0 * h2 - h1)) * s
        tot += kappa[mu] * (ea * ea + eb * eb) + c[mu]
        for k in range(d):
            grad[k] += g1 * X[mu, 0, k] + g2 * X[mu, 1, k]
    return tot + 0.5 * lam * np.dot(Q, Q), grad
