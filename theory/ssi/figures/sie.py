"""Figures of the Hermite/SIE analysis: predicted tied/untied gains vs L for example targets.

``FIGURES["sie-gains"](out_dir, quick)`` writes ``sie-gains.png`` (gain at optimal and at equal
step sizes vs L from :func:`theory.ssi.analyze`: this package's prediction, with the published
formula beside it where they differ; docs/ssi.md section 7) and ``sie-table.md`` (SIE, even SIE,
leading-tensor contraction, operator norm and gains of worked examples).  Everything is exact
sympy arithmetic for these polynomial targets; the figure is a theory prediction (no simulation
points: the SGD escape-time simulations belong to ``theory.ssi.figures.sgd``).
"""

from __future__ import annotations

import math
from pathlib import Path

from theory._util import atomic_savefig, atomic_write_text
from theory.plotting import reproduces

# (label, builder of the target string for a given L, minimal L)
GAIN_TARGETS = [
    (
        r"$\sum_\ell He_2(z_\ell)/\sqrt{2}$ (SIE 2)",
        lambda L: "(" + " + ".join(f"He2(z{i + 1})" for i in range(L)) + ")/sqrt(2)",
        1,
    ),
    (
        r"$\sum_\ell z_\ell/\sqrt{L}$ (SIE 1)",
        lambda L: "(" + " + ".join(f"z{i + 1}" for i in range(L)) + f")/sqrt({L})",
        1,
    ),
    (
        r"$\sum_\ell \mathrm{relu}(z_\ell)$ (SIE 1)",
        lambda L: " + ".join(f"relu(z{i + 1})" for i in range(L)),
        1,
    ),
    (
        r"$\sum_\ell He_3(z_\ell)$ (SIE 3)",
        lambda L: " + ".join(f"He3(z{i + 1})" for i in range(L)),
        1,
    ),
    (
        r"chain $\sum_\ell z_\ell z_{\ell+1}$ (SIE 2)",
        lambda L: " + ".join(f"z{i + 1}*z{i + 2}" for i in range(L - 1)),
        2,
    ),
    (
        r"star $z_1 \sum_{\ell>1} z_\ell$ (SIE 2)",
        lambda L: "z1*(" + " + ".join(f"z{i + 2}" for i in range(L - 1)) + ")",
        2,
    ),
]
_STYLES = ["o-", "s--", "^:", "D-.", "v-", "P-"]

TABLE_TARGETS = [
    "z1 + z2 + z3",
    "z1*z2",
    "He2(z1)*He3(z2)",
    "He2(z1) + He2(z2)",
    "z1 - z2",
    "(z1**2 - z2**2)/sqrt(2)",
    "4/3 + He4(z1) + 2*He4(z2)",
    "relu(z1) + relu(z2)",
    "Abs(z1 + z2)",
    "tanh(z1)*tanh(z2)",
    "softmax(1, z1*z1, z1*z2)",
]


def _fmt(x, digits=6):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


@reproduces(
    "beyond",
    "SIE and gain table",
    "SIE, leading Hermite tensor and tied/untied gain: ours and the published formula",
    ["sie-gains.png", "sie-table.md"],
    cost=4,
)
def sie_gains(out_dir: Path, quick: bool) -> dict:
    from theory.plotting import use_agg
    from theory.ssi import analyze

    use_agg()
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    Ls = list(range(1, 7 if quick else 11))
    rows = {}
    for label, build, lmin in GAIN_TARGETS:
        rows[label] = [analyze(build(L), L=L) for L in Ls if L >= lmin]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    he2, he3 = rows[GAIN_TARGETS[0][0]], rows[GAIN_TARGETS[3][0]]
    for ax, field, title, (pub_rows, pub_label) in (
        (
            axes[0],
            "gain_optimal",
            "at optimal step sizes",
            (he2, r"$\sum He_2$: published formula ($L^2$; assumes equal noise)"),
        ),
        (
            axes[1],
            "gain_equal",
            "at equal step sizes",
            (he3, r"$\sum He_3$: published formula ($|C\cdot 1|/\|C\|_{op}$)"),
        ),
    ):
        for (label, reps), sty in zip(rows.items(), _STYLES):
            xs = [r.L for r in reps]
            ax.plot(
                xs,
                [getattr(r, field) for r in reps],
                sty,
                ms=4,
                mfc="none",
                label=f"theory: {label}",
            )
        ax.plot(Ls, list(Ls), "k:", lw=1, label="$L$")
        ax.plot(
            [r.L for r in pub_rows],
            [getattr(r, f"{field}_published") for r in pub_rows],
            "x--",
            color="0.4",
            label=pub_label,
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(Ls, [str(L) for L in Ls])
        ax.minorticks_off()
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(r"predicted gain $\nu_{untied}/\nu_{tied}$")
        ax.set_title(
            f"tied vs untied gain {title}\n(this package, docs/ssi.md eqs. 29-30; "
            "dashed: the published formula)",
            fontsize=9,
        )
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(
        "Sequence information exponent: predicted tied/untied gain "
        "(theory only; exact Hermite tensors)",
        fontsize=10,
    )
    fig.tight_layout()
    png = atomic_savefig(fig, out_dir / "sie-gains.png", dpi=130)
    plt.close(fig)

    lines = [
        "| target | L | SIE | even SIE | C_SIE x 1 | op norm | gain (opt. γ) | published "
        "(opt. γ) | gain (equal γ) | published (equal γ) | tied learns | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    targets = TABLE_TARGETS if not quick else TABLE_TARGETS[:9]
    for expr in targets:
        r = analyze(expr)
        opn = _fmt(r.op_norm) + ("" if r.op_norm_exact or r.op_norm is None else " (est.)")
        lines.append(
            f"| `{expr}` | {r.L} | {_fmt(r.sie)} | {_fmt(r.even_sie)} | "
            f"{_fmt(r.tied_contraction)} | {opn} | {_fmt(r.gain_optimal)} | "
            f"{_fmt(r.gain_optimal_published)} | {_fmt(r.gain_equal)} | "
            f"{_fmt(r.gain_equal_published)} | {_fmt(r.tied_learnable)} | "
            f"{'yes' if r.exact else f'no (tol {r.tolerance:.0e})'} |"
        )
    table = atomic_write_text(out_dir / "sie-table.md", "\n".join(lines) + "\n")

    he2 = rows[GAIN_TARGETS[0][0]][-1]
    lin = rows[GAIN_TARGETS[1][0]][-1]
    how = "exact sympy Hermite tensors (theory.ssi.analyze), docs/ssi.md eqs. 29-31; no randomness"
    numbers = [
        dict(name=f"gain_optimal sum He2 L={he2.L}", value=he2.gain_optimal, how=how),
        dict(
            name=f"gain_optimal_published sum He2 L={he2.L}",
            value=he2.gain_optimal_published,
            how=how,
        ),
        dict(name=f"gain_equal sum He2 L={he2.L}", value=he2.gain_equal, how=how),
        dict(name=f"gain_optimal sum z/sqrt(L) L={lin.L}", value=lin.gain_optimal, how=how),
        dict(name=f"gain_equal sum z/sqrt(L) L={lin.L}", value=lin.gain_equal, how=how),
        dict(name="gain_optimal z1-z2", value=analyze("z1 - z2").gain_optimal, how=how),
        dict(name="SIE He2(z1)*He3(z2)", value=analyze("He2(z1)*He3(z2)").sie, how=how),
    ]
    if not (
        math.isclose(he2.gain_optimal, he2.L, rel_tol=1e-9)
        and math.isclose(he2.gain_optimal_published, he2.L**2, rel_tol=1e-9)
    ):
        raise RuntimeError(f"sum He2 gains off their closed forms L, L^2: {he2.gain_optimal}")
    return dict(files=[str(png), str(table)], numbers=numbers)


FIGURES = {"sie-gains": sie_gains}
