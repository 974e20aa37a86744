"""Figures of the injected positional encoding P_l = a_l w*/sqrt(d) + P~_l (docs/ssi.md section
4b): tied attention learning an odd target (paper Fig. 6) and the variant whose target also sees
the encoding (paper App. F.3).

The parameters of the published Fig. 6 and App. F.3 (the components a_l, d, gamma, steps, seeds)
are not in the authors' public code (IdePHICS/Sequence-Single-Index has no injected encoding), so
these pieces fix their own and say so: L = 2, Pi = Tr/sqrt(L) (the authors' trace), P~ = 0,
a = (c, c), gamma = 0.05, start m0 = 1/sqrt(d).  SGD is the full d-dimensional simulator (the
reduced chain has no injected encoding).  Signature and stores as in ``theory.ssi.figures.sgd``.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from theory import ssi
from theory.plotting import SIM_STYLE, reproduces
from theory.ssi.figures.sgd import _fig, _labels, _runs, _save

__all__ = ["FIGURES", "shifted_target"]

LR = 0.05
ODD = "z1 + z2"  # He_1(z_1) + He_1(z_2)
EVEN = "(z1**2 - 1 + z2**2 - 1)/sqrt(2)"  # sum_l He_2(z_l)/sqrt(2)


def shifted_target(expr: str, a) -> sp.Expr:
    """g(z + a): the target that sees the injected encoding, z*_l = (x_l + P_l/sqrt(d)) . w*
    = xi_l + a_l (docs/ssi.md section 4b)."""
    g = sp.sympify(expr)
    zs = sp.symbols(f"z1:{len(a) + 1}")
    return sp.expand(g.subs({z: z + float(v) for z, v in zip(zs, a)}, simultaneous=True))


def _model(target, c):
    return ssi.AttentionModel(
        target, L=2, pe="none", reduction="trace", trace_norm="sqrtL", pe_target=(c, c)
    )


def _panel(ax, out_dir, store, cases, d, t_max, seeds, quick):
    """ODE lines and SGD mean +- SE of m(t) for ``cases`` = [(label, model, colour)]; returns
    the numbers (final m, SGD vs ODE)."""
    numbers = []
    steps = int(round(t_max * d / LR))
    for label, model, col in cases:
        ode = ssi.integrate_ode(model, LR, d, t_max=t_max, n_out=120)
        ax.plot(ode.t, ode.m, color=col, lw=1.8, label=f"{label}: ODE")
        res = _runs(
            out_dir,
            store,
            model,
            d,
            LR,
            seeds,
            quick,
            reduced=False,
            steps=steps,
            m0=1 / math.sqrt(d),
            n_record=40,
        )
        t = res[0].t
        M = np.array([r.m for r in res])
        mean, se = M.mean(axis=0), M.std(axis=0, ddof=1) / math.sqrt(len(M))
        ax.errorbar(
            t[1:],
            mean[1:],
            yerr=se[1:],
            color=col,
            **SIM_STYLE,
            label=f"{label}: SGD (full d = {d}), mean ± SE of {len(M)} seeds",
        )
        m_ode = float(np.interp(t[-1], ode.t, ode.m))
        slug = label.replace("c = ", "c").replace(" ", "_")
        numbers.append(
            dict(
                name=f"{store}_{slug}_final_m",
                value=float(mean[-1]),
                how=f"{label}: mean m at t = {t[-1]:.3g} over {len(M)} seeds, SE {se[-1]:.3f}, "
                f"full-d SGD d = {d}, gamma = {LR}, m0 = 1/sqrt(d); ODE {m_ode:.4f}",
            )
        )
    ax.set_xlabel("t = γ ν / d")
    ax.set_ylabel("m = w*·w / d")
    ax.legend(fontsize=7, loc="upper left")
    return numbers


@reproduces(
    "arnaboldi2025",
    "Fig. 6",
    "tied attention (Tr/sqrt(L), L = 2) learns the odd target He1(z1) + He1(z2) only with an "
    "injected encoding P_l = c w*/sqrt(d): risk R(m) and m(t), ODE over full-d SGD",
    ["sgd-injected-pe.png"],
    cost=90,
)
def fig_injected_pe(out_dir, quick):
    """Left: R(m) at e = 0 for c = 0, -1, -2 (theory).  Right: m(t), ODE against full-d SGD."""
    d, t_max, seeds = (300, 5.0, range(4)) if quick else (1000, 8.0, range(16))
    cs = (0.0, -1.0, -2.0)
    fig, axes = _fig(1, 2, figsize=(12.5, 4.6))
    ms = np.linspace(-1, 1, 81)
    for j, c in enumerate(cs):
        model = _model(ODD, c)
        axes[0].plot(ms, [model.risk(None, m) for m in ms], color=f"C{j}", label=f"c = {c:g}")
    _labels(
        axes[0],
        "m",
        "population risk R(m), e = 0",
        "He1(z1) + He1(z2), attention Tr/√L, P = c w*/√d (P̃ = 0)\n"
        "c = 0: flat (f even in w); c < 0: origin a saddle",
    )
    axes[0].legend(fontsize=8)
    cases = [(f"c = {c:g}", _model(ODD, c), f"C{j}") for j, c in enumerate(cs)]
    numbers = _panel(axes[1], out_dir, "sgd-injected-pe", cases, d, t_max, seeds, quick)
    axes[1].set_title(
        f"γ = {LR}, d = {d}; published c, d, γ not on record (authors' code has no injection)",
        fontsize=9,
    )
    return dict(files=[_save(fig, out_dir, "sgd-injected-pe")], numbers=numbers)


@reproduces(
    "arnaboldi2025",
    "App. F.3",
    "the target sees the injected encoding (z*_l = xi_l + c): sum He2(z_l)/sqrt(2) learned by "
    "attention with P = c w*/sqrt(d), target blind vs seeing the encoding, ODE over full-d SGD",
    ["sgd-target-sees-pe.png"],
    cost=40,
)
def fig_target_sees_pe(out_dir, quick):
    """The same student (c = -1) on sum He2/sqrt(2) when the target does not see the encoding
    (g(xi)) and when it does (g(xi + c), :func:`shifted_target`): m(t), ODE against SGD."""
    d, t_max, seeds = (300, 4.0, range(4)) if quick else (1000, 6.0, range(16))
    c = -1.0
    blind = _model(EVEN, c)
    sees = _model(shifted_target(EVEN, (c, c)), c)
    fig, axes = _fig(1, 2, figsize=(12.5, 4.6))
    ms = np.linspace(-1, 1, 81)
    for j, (lab, model) in enumerate((("target blind", blind), ("target sees P", sees))):
        axes[0].plot(ms, [model.risk(None, m) for m in ms], color=f"C{j}", label=lab)
    _labels(
        axes[0],
        "m",
        "population risk R(m), e = 0",
        f"Σ He2(z_l)/√2, attention Tr/√L, P = c w*/√d, c = {c:g}\n"
        "seeing P: z*_l = ξ_l + c adds 2c Σ ξ_l/√2: the origin turns a minimum",
    )
    axes[0].legend(fontsize=8)
    cases = [("target blind", blind, "C0"), ("target sees P", sees, "C1")]
    numbers = _panel(axes[1], out_dir, "sgd-target-sees-pe", cases, d, t_max, seeds, quick)
    axes[1].set_title(f"γ = {LR}, d = {d}; published parameters not on record", fontsize=9)
    return dict(files=[_save(fig, out_dir, "sgd-target-sees-pe")], numbers=numbers)


FIGURES = {
    "sgd-injected-pe": fig_injected_pe,
    "sgd-target-sees-pe": fig_target_sees_pe,
}
