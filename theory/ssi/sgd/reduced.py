r"""The exact reduced (d-independent) simulator of online spherical SGD.

Claim
-----
For online spherical SGD with a fresh isotropic sample at every step (normalisation of
``theory.ssi.sgd.simulate``), the frame coordinates of the student form a Markov chain whose
transition law depends on d only through one chi-square variable per student row, and this
chain has EXACTLY the law of the full d-dimensional simulation (no large-d approximation).

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

Validation: ``tests/test_sgd_reduced.py`` compares escape-step distributions of this chain and the
full simulator at small d (two-sample KS test and means within standard errors).
"""

from __future__ import annotations

from theory.ssi.sgd.simulate import _DOC_COMMON, SGDResult, _run

__all__ = ["simulate_reduced"]


def simulate_reduced(
    model_spec,
    d,
    lr,
    seed,
    *,
    steps=None,
    m0=None,
    e0=None,
    start="random",
    eta=None,
    n_record=200,
    max_steps=10**9,
    margin=1.0,
    t_margin=10.0,
) -> SGDResult:
    return _run(
        model_spec,
        d,
        lr,
        seed,
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
    "The exact reduced chain of the frame coordinates (see the module "
    "docstring); cost per step independent of d.\n" + _DOC_COMMON
)
