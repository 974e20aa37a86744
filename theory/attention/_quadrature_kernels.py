"""Numba kernels of the replica channel expectations (docs/attention.md §4-5): sums over the
nodes of a tensor or sampled rule, and the split (polar) rule that integrates across the jumps
of the prox's global minimiser.  The per-node prox is ``theory.attention._kernels``; the numpy
wrapper and the references are ``theory.attention.quadrature``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from theory.attention._kernels import (
    loss_value,
    newton,
    prox_jacobians,
    prox_point,
    teacher_t,
    trace_jac_h,
)

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
                r = prox_jacobians(x1, x2, w1, w2, t1, t2, V, s2)
                acc[C_TRJW] += wt * (r[0] + r[3])
                acc[C_TRJH] += wt * trace_jac_h(r, h1, h2, omega)
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
# ξ_0 = -(m, -m)/√q.  The split rule (docs/attention.md §5) integrates ξ in polar coordinates
# around ξ_0: for every (η node, radius r) it scans the circle at K angles with the global prox,
# detects each basin change between neighbouring angles, locates the jump angle by a safeguarded
# Illinois iteration on the difference of the two basins' minimum values, and integrates every
# smooth arc with G-point Gauss-Legendre (the integrand evaluated by Newton continuation inside
# the arc's basin).  η uses a 1-D rule per component (trapezoid or Gauss-Hermite), r
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
        r = prox_jacobians(x1, x2, w1, w2, t1, t2, V, s2)
        acc[C_TRJW] += wt * (r[0] + r[3])
        acc[C_TRJH] += wt * trace_jac_h(r, h1, h2, omega)
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
