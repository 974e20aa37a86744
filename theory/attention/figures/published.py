"""Numbers the authors of Cui et al. publish, drawn next to ours on the ERM figures.

Source: /work/shared/spec/published-numbers.md (the authors' hard-coded threshold lists and
the means of their gradient-descent runs at d = 1000; ω = 0.3, σ = 0.5, λ = 0.01,
A = [[0.6, 0.4], [0.4, 0.6]] unless stated).  Data only: the figures compare to these, nothing
is fitted to them.
"""

from __future__ import annotations

#: α_c(ω) of the authors' hard-coded list (the line of their phase diagram), (ω, α_c)
ALPHA_C = (
    (0.0, 0.5481),
    (0.10, 0.7072),
    (0.15, 0.8180),
    (0.20, 0.9278),
    (0.25, 1.06),
    (0.30, 1.2410),
    (0.35, 1.4541),
    (0.40, 1.7506),
    (0.425, 1.9393),
)

#: α_l(ω) of the authors' hard-coded list, (ω, α_l)
ALPHA_L = (
    (0.0, 0.7225),
    (0.05, 0.7653),
    (0.075, 0.8076),
    (0.10, 0.8506),
    (0.15, 0.9415),
    (0.20, 1.0714),
    (0.25, 1.2254),
    (0.275, 1.3271),
    (0.30, 1.4506),
    (0.325, 1.5844),
    (0.35, 1.7495),
    (0.38, 1.9932),
)

#: the authors' GD at d = 1000, ω = 0.3 (24 runs, means): (α, init, ε_g, ε_t, m, θ/σ²)
GD_OMEGA03 = (
    (0.5075, "positional", 0.003221, 0.001162, 0.2247, 0.0130),
    (0.5075, "semantic", 0.003567, 0.001382, 0.0242, 0.2311),
    (1.005, "positional", 0.003277, 0.002200, 0.2521, 0.0186),
    (1.005, "semantic", 0.002717, 0.002336, 0.0151, 0.4008),
    (1.2538, "positional", 0.003348, 0.002723, 0.2540, 0.0203),
    (1.2538, "semantic", 0.002343, 0.002732, 0.0113, 0.4714),
    (1.4196, "positional", 0.003392, 0.003136, 0.2574, 0.0201),
    (1.4196, "semantic", 0.002090, 0.002930, 0.0098, 0.5074),
    (2.000, "positional", 0.003492, 0.004585, 0.2618, 0.0325),
    (2.000, "semantic", 0.001443, 0.003652, 0.0065, 0.6340),
)

#: the authors' GD protocol (their src/empirics_mixed_teacher_softmax.py): full-batch GD,
#: learning rate 0.15, 5000 steps, weight decay λ, inits Q* / 1_d/sqrt(d) / 0.1 N(0, 1);
#: Adam: learning rate 0.01, 2500 steps, from the random init
GD_PROTOCOL = dict(lr=0.15, steps=5000)
ADAM_PROTOCOL = dict(lr=0.01, steps=2500)

#: the published heat-map grid: α = linspace(0.01, 2, 25), ω = 0.02 ... 0.50 step 0.02, d = 1000
HEATMAP_ALPHAS = (0.01, 2.0, 25)
HEATMAP_OMEGAS = tuple(round(0.02 * k, 2) for k in range(1, 26))

#: A = [[0.3, 0.7], [0.8, 0.2]]: the authors' stored eps_t crossings, (ω, α)
ALPHA_C_OTHER_A = ((0.14, 0.57), (0.15, 0.84))
