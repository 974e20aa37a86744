"""The published numbers the ERM figures draw next to ours, in the shapes the figures use, and
the authors' protocols the figures follow.

The numbers come from :mod:`theory.published` (where each has its source); this module only
arranges them.  Data only: the figures compare to these, nothing is fitted to them.
"""

from __future__ import annotations

from theory.published import published_values


def _pairs(prefix: str) -> tuple:
    recs = published_values("cui2024", prefix)
    return tuple(sorted((float(r.params["omega"]), r.value) for r in recs))


#: α_c(ω) of the authors' hard-coded list (the line of their phase diagram), (ω, α_c)
ALPHA_C = _pairs("alpha_c/")
#: α_l(ω) of the authors' hard-coded list, (ω, α_l)
ALPHA_L = _pairs("alpha_l/")


def _gd_table() -> tuple:
    rows: dict = {}
    for r in published_values("cui2024", "gd_table/"):
        rows.setdefault((r.params["alpha"], r.params["init"]), {})[r.quantity] = r.value
    order = ("eps_g", "eps_t", "m", "theta_over_sigma2")
    return tuple((a, init, *(v[q] for q in order)) for (a, init), v in sorted(rows.items()))


#: the authors' GD at d = 1000, ω = 0.3 (24 runs, means): (α, init, ε_g, ε_t, m, θ/σ²)
GD_OMEGA03 = _gd_table()

#: the authors' GD protocol (their src/empirics_mixed_teacher_softmax.py): full-batch GD,
#: learning rate 0.15, 5000 steps, weight decay λ, inits Q* / 1_d/sqrt(d) / 0.1 N(0, 1);
#: Adam: learning rate 0.01, 2500 steps, from the random init
GD_PROTOCOL = dict(lr=0.15, steps=5000)
ADAM_PROTOCOL = dict(lr=0.01, steps=2500)

#: the published heat-map grid: α = linspace(0.01, 2, 25), ω = 0.02 ... 0.50 step 0.02, d = 1000
HEATMAP_ALPHAS = (0.01, 2.0, 25)
HEATMAP_OMEGAS = tuple(round(0.02 * k, 2) for k in range(1, 26))

#: A = [[0.3, 0.7], [0.8, 0.2]]: the authors' stored eps_t crossings, (ω, α)
ALPHA_C_OTHER_A = _pairs("alpha_c_otherA/")
