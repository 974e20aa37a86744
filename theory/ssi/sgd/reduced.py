r"""The exact reduced (d-independent) simulator of online spherical SGD.

Claim
-----
For online spherical SGD with a fresh isotropic sample at every step (normalisation of
``theory.ssi.sgd.driver``; docs/ssi.md section 9), the frame coordinates of the student form a
Markov chain whose transition law depends on d only through one chi-square variable per student
row, and this chain has EXACTLY the law of the full d-dimensional simulation (no large-d
approximation).

Setting.  Let u* = w*/sqrt(d) and let q_1..q_k be an orthonormal basis of span(P_1..P_L) (P_l
unit rows orthogonal to w*), P_l = sum_j B_lj q_j (B B^T = G, the Gram matrix of the encoding).
Put Q = (q_0 = u*, q_1, ..., q_k), k1 = k + 1.  Write the student (one row; the untied case is
treated at the end) as

    w = sqrt(d) ( sum_{j<k1} c_j q_j + r v ),  v unit, orthogonal to Q,  r = sqrt(1 - |c|^2),

so m = c_0 and e_l = P_l . w / sqrt(d) = sum_j B_lj c_{j+1}.  (If r = 0 pick any unit v
orthogonal to Q; nothing below depends on the choice.)

Step 1 (decomposition of the sample).  The token rows are x_l ~ N(0, I_d/d), independent of each
other and of the past.  Given the past, Q and v are fixed, so by rotation invariance of the
isotropic Gaussian

    x_l = (1/sqrt(d)) ( sum_j alpha_lj q_j + beta_l v ) + x_l^perp,

with alpha_lj, beta_l i.i.d. N(0, 1) and x_l^perp a N(0, Pi/d) vector, Pi the projector on the
(d - k1 - 1)-dimensional complement of span(Q, v), all mutually independent.  Hence
z*_l = x_l . w* = alpha_l0 and

    z_l = (x_l + P_l/sqrt(d)) . w = sum_j alpha_lj c_j + r beta_l + e_l,

so the prediction f, the loss and delta = dl/dz in R^L are functions of (alpha, beta, c) only.

Step 2 (the update).  grad_w l = sum_l delta_l (x_l + P_l/sqrt(d)).  With h = gamma/d and
w' = w - gamma grad:

    q_j . w' / sqrt(d) = c_j - h sum_l delta_l (alpha_lj + B_l,j)        (B_l,0 := 0, P ⟂ w*)
    v   . w' / sqrt(d) = r   - h sum_l delta_l beta_l                    =: r'
    Pi w' / sqrt(d)    = -(gamma/sqrt(d)) sum_l delta_l x_l^perp.

Given delta (a function of alpha, beta, c, independent of x^perp), the vector
sum_l delta_l x_l^perp is N(0, |delta|^2 Pi / d), so
|Pi w'|^2 / d = h^2 |delta|^2 chi,   chi ~ chi-square(d - k1 - 1),   independent of (alpha, beta).

Step 3 (renormalisation).  With c'_j = q_j . w'/sqrt(d) and
N^2 = |w'|^2 / d = |c'|^2 + r'^2 + h^2 |delta|^2 chi, the renormalised student sqrt(d) w'/|w'| has
frame coordinates c_new = c'/N and rest norm r_new = sqrt(r'^2 + h^2 |delta|^2 chi) / N; its new
unit rest direction v_new lies in span(v, Pi w') and is again orthogonal to Q.

Step 4 (Markov property).  The next sample is independent of everything so far, so Step 1
applies again with v_new: the law of (c_{t+1}, r_{t+1}) given the whole past depends only on
(c_t, r_t) and r_t = sqrt(1 - |c_t|^2).  The chain c_t, drawn with (alpha, beta, chi) as above,
therefore has the law of the frame coordinates of the full simulation, for every finite d >= k1 + 2.
Per step it costs O(L k1) normals, one chi-square draw and one forward/backward pass of the head:
independent of d.

Untied network (rows w_l, each on its own sphere, no encoding).  Token l only meets row l:
z_l = x_l . w_l, grad_{w_l} l = delta_l x_l.  Decompose x_l along (u*, v_l) and the complement of
span(u*, v_l) (d - 2 dimensions): z_l = m_l alpha_l + r_l beta_l, and the row update is the one
above with k1 = 1 and chi_l ~ chi-square(d - 2), independent across rows because the token rows
are.  The cross-row overlaps w_l . w_l' never enter f or delta, so (m_1..m_L) is Markov.

Flattened untied network (``UntiedNetwork(..., normalisation="flat")``: W on ONE sphere of radius
sqrt(L d) in R^{L d}).  Take the frame of the L teacher directions e_l (x) w*/sqrt(d) of R^{L d};
c_l = m_l / sqrt(L) are the coordinates of W / sqrt(L d) along them and r the norm of the rest.
The same four steps, with u = c . alpha + r beta the network's pre-activation, delta = dl/du,
h = gamma / (L d) and one chi ~ chi-square(L d - L - 1) per step, give the chain of
``theory.ssi.sgd._kernels.flat_chunk``; m_untied = |c|.

Validation: ``tests/ssi/test_sgd_reduced.py`` compares escape-step distributions of this chain and
the full simulator at small d (two-sample KS test and means within standard errors).
"""

from __future__ import annotations

import math

import numpy as np

from theory.ssi.risk import SSIModel
from theory.ssi.sgd import _kernels as K
from theory.ssi.sgd.driver import DOC_COMMON, SGDResult, is_flat, run

__all__ = ["simulate_reduced"]


class _ReducedState:
    """The exact reduced chain of the frame coordinates (per-row spheres)."""

    def __init__(self, model, d, rng, C0, rr0):
        self.model, self.d = model, d
        self.B = np.ascontiguousarray(model.B)
        self.C = C0.copy()
        self.rr = rr0.copy()
        k1 = self.C.shape[1]
        # chi-square degrees of freedom of the part orthogonal to (frame, current student row)
        self.dof = d - k1 - 1

    def run(self, n, rng, tfn, lr, head, Rm, act, eta2):
        L = self.model.L
        k1 = self.C.shape[1]
        R = self.C.shape[0]
        alpha = rng.standard_normal((n, L, k1))
        beta = rng.standard_normal((n, L))
        chi = rng.chisquare(self.dof, (n, R))
        Y = np.ascontiguousarray(tfn(np.ascontiguousarray(alpha[:, :, 0])))
        return K.reduced_chunk(
            self.C,
            self.rr,
            self.B,
            alpha,
            beta,
            chi,
            Y,
            lr / self.d,
            head,
            Rm,
            *act,
            self.model.untied,
            eta2,
        )

    def chunk_max(self):
        return 1 << 14

    def coords(self):
        return self.C.copy()


class _FlatReducedState:
    """The exact reduced chain of the flattened untied network: c (L,) = (m_l / sqrt(L)) and the
    rest norm r (1,), advanced by ``theory.ssi.sgd._kernels.flat_chunk``."""

    def __init__(self, model, d, rng, C0, rr0):
        self.L, self.d = model.L, d
        self.c = C0[:, 0] / math.sqrt(self.L)
        self.r = np.array([math.sqrt(max(1.0 - float(self.c @ self.c), 0.0))])

    def run(self, n, rng, tfn, lr, head, Rm, act, eta2):
        L, D = self.L, self.L * self.d
        alpha = rng.standard_normal((n, L))
        beta = rng.standard_normal(n)
        chi = rng.chisquare(D - L - 1, n)
        Y = np.ascontiguousarray(tfn(alpha)[:, 0])
        return K.flat_chunk(self.c, self.r, alpha, beta, chi, Y, lr / D, *act, eta2)

    def chunk_max(self):
        return 1 << 14

    def coords(self):
        return (math.sqrt(self.L) * self.c)[:, None]


def simulate_reduced(
    model: SSIModel,
    d: int,
    lr: float,
    rng: int | np.random.Generator,
    *,
    steps: int | None = None,
    m0: float | None = None,
    e0: float | np.ndarray | None = None,
    start: str = "random",
    eta: float | None = None,
    n_record: int = 200,
    max_steps: int = 10**9,
    margin: float = 1.0,
    t_margin: float = 10.0,
) -> SGDResult:
    if np.any(model.a_pe):
        raise ValueError(
            "the reduced chain has no injected encoding (pe_target): use simulate_sgd (the "
            "full-d simulator) or simulate_seeds(..., reduced=False)"
        )
    return run(
        model,
        d,
        lr,
        rng,
        _FlatReducedState if is_flat(model) else _ReducedState,
        steps=steps,
        m0=m0,
        e0=e0,
        start=start,
        eta=eta,
        n_record=n_record,
        max_steps=max_steps,
        margin=margin,
        t_margin=t_margin,
        backend="reduced",
    )


simulate_reduced.__doc__ = (
    "The exact reduced chain of the frame coordinates (see the module docstring); cost per step "
    "independent of d.  Same law as ``simulate_sgd``.\n" + DOC_COMMON
)
