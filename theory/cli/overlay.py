"""``theory overlay``: draw a user's simulation table over a theory curve (docs/overlay.md).

The theory is a table an earlier command wrote (``theory sgd ode --out``, ``theory erm curve
--out``) or a command spec such as ``"sgd ode --target z1 --model tied --lr 0.1 --d 100"`` or
``"erm curve --omega 0.3"``: it is parsed by that command's own parser (``theory.cli``) and
computed by the function the command calls (:data:`THEORIES`), over the simulation table's x
range; options the spec leaves out are taken from table columns of the same name that hold one
value (``--lr``, ``--d``, ``--omega``, ...).  The drawing is :func:`theory.plotting.overlay`.
"""

from __future__ import annotations

import argparse
import math
import shlex
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from theory._util import check_int
from theory.cli._common import add_json, emit

MAX_POINTS = 2000  # theory points over the x range


def _sgd_ode(args):
    from theory.cli.sgd import ode_run

    return ode_run(args)[1].points()


def _erm_curve(args):
    from theory.cli.erm import curve_table

    return curve_table(args)[1]


@dataclass(frozen=True)
class TheorySpec:
    """A theory command ``theory overlay`` can run: the function from its parsed options to
    table rows, the default axes, the option that sets its x range (filled from the simulation
    table when the spec leaves it out) and its default ``kind`` of rows to draw."""

    compute: Callable
    x: str
    y: str
    x_range: Callable  # (lo, hi, points, table) -> extra argv, or None
    kind: str | None = None


def _ode_range(lo, hi, points, sim, x):
    if x == "t":
        return ["--t-max", repr(float(hi))]
    if x == "steps":  # t = steps lr / d
        lr, d = _unique(sim, "lr"), _unique(sim, "d")
        if lr is not None and d is not None:
            return ["--t-max", repr(float(hi) * float(lr) / float(d))]
    return []


def _alpha_range(lo, hi, points, sim, x):
    return ["--alphas", f"{float(lo)!r}:{float(hi)!r}:{int(points)}"] if x == "alpha" else []


THEORIES = {
    ("sgd", "ode"): TheorySpec(_sgd_ode, "t", "m", _ode_range),
    ("erm", "curve"): TheorySpec(_erm_curve, "alpha", "eps_g", _alpha_range, kind="global"),
}
NO_FILL = {"json", "out", "plot", "help"}  # options never taken from the table


def register(subparsers) -> None:
    specs = ", ".join(f"'{' '.join(k)} ...'" for k in THEORIES)
    p = subparsers.add_parser(
        "overlay",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="draw a simulation table (CSV, JSON lines) over a theory curve",
        description="Draw the simulation points of --sim (mean and standard error over rows "
        "with the same x, or the <y>_err column) over the theory line of THEORY_SPEC: a "
        "table an earlier command wrote (theory sgd ode --out, theory erm curve --out) or a "
        f"command ({specs}) computed over the table's x range; options it leaves out are taken "
        "from table columns of the same name holding one value (lr, d, omega, ...).  Columns "
        "are named as the result fields (t, m, e, risk, alpha, eps_g, ...).",
        epilog="Example: theory sgd simulate --target z1 --model tied --activation linear --lr "
        "0.1 --d 100 --reduced --steps 2000 --out sim.csv;  theory overlay 'sgd ode --target "
        "z1 --model tied --activation linear' --sim sim.csv --plot overlay.png",
    )
    p.add_argument("theory", metavar="THEORY_SPEC", help="theory table path or command spec")
    p.add_argument(
        "--sim",
        required=True,
        help="simulation table (.csv, .jsonl, .json; other formats if pandas is installed)",
    )
    p.add_argument("--x", default=None, help="x field (default: the command's, e.g. t, alpha)")
    p.add_argument("--y", default=None, help="y field (default: the command's, e.g. m, eps_g)")
    p.add_argument("--plot", required=True, help="write the figure here (PNG, PDF, SVG)")
    p.add_argument("--out", default=None, help="write the theory rows drawn (.csv, .jsonl)")
    p.add_argument(
        "--kind",
        default=None,
        help="rows of a theory with a 'kind' column to draw (erm curve: semantic, positional, "
        "global, baseline; default global)",
    )
    p.add_argument(
        "--points",
        type=int,
        default=25,
        help="theory points over the x range (commands with a grid, e.g. erm curve)",
    )
    p.add_argument(
        "--xscale",
        choices=("auto", "linear", "log"),
        default="auto",
        help="x axis scale (auto: log for t and steps)",
    )
    add_json(p)
    p.set_defaults(func=_overlay)


def _unique(rows, name):
    """The one value of column ``name`` in ``rows`` (None if absent or not unique)."""
    vals = {r.get(name) for r in rows}
    return vals.pop() if len(vals) == 1 else None


def _columns(rows) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def check_fields(rows, fields, what: str) -> None:
    """ValueError naming the fields of ``fields`` missing from ``rows`` (the table ``what``),
    with the fields this package knows and the table's columns."""
    from theory.plotting import FIELD_LABELS

    cols = _columns(rows)
    missing = [f for f in fields if f not in cols]
    if not rows:
        raise ValueError(f"the {what} has no rows")
    if missing:
        raise ValueError(
            f"the {what} has no column {missing[0]!r} (its columns: {', '.join(cols)}); name "
            f"the columns as result fields: {', '.join(FIELD_LABELS)} (also m_<l>, e_<j> and "
            "<field>_err for a standard error), or pick another with --x/--y"
        )


def _subparser(words):
    from theory.cli import build_parser

    parser = build_parser()
    for w in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[w]
    return parser


def _fill(parser, tokens, sim) -> list[str]:
    """argv for the options of ``parser`` that ``tokens`` leaves out and the simulation table
    holds one number of (a column named as the option's destination)."""
    extra = []
    for a in parser._actions:
        if not a.option_strings or a.nargs == 0 or a.dest in NO_FILL:
            continue
        if any(t == o or t.startswith(o + "=") for o in a.option_strings for t in tokens):
            continue
        v = _unique(sim, a.dest)
        if isinstance(v, (int, float)) and not isinstance(v, bool):  # numbers: a string column
            # (e.g. a simulator's --method) means something else than the theory's option
            extra += [a.option_strings[-1], str(v)]
    return extra


def theory_rows(spec: str, sim: list[dict], x: str | None, points: int):
    """(rows, x, y, kind, argv) of a theory spec: a table path, or a command run over the
    simulation table's x range (``argv``: the command as run, None for a table)."""
    from theory.store import read_table

    try:
        tokens = shlex.split(spec)
    except ValueError as exc:
        raise ValueError(f"cannot split THEORY_SPEC {spec!r}: {exc}") from None
    key = tuple(tokens[:2])
    if key not in THEORIES:
        if len(tokens) == 1 or Path(spec).suffix:
            rows = read_table(spec)
            cols = set(_columns(rows))
            # a table a theory command wrote: that command's axes and kind by default
            th = next((t for t in THEORIES.values() if {t.x, t.y} <= cols), None)
            if th is None:
                return rows, x, None, None, None
            return rows, x or th.x, th.y, th.kind, None
        raise ValueError(
            f"THEORY_SPEC must be a theory table (.csv, .jsonl) or a command: "
            f"{', '.join(repr(' '.join(k) + ' ...') for k in THEORIES)}; got {spec!r}"
        )
    th = THEORIES[key]
    x = x or th.x
    parser = _subparser(key)
    argv = list(tokens[2:])
    xs = [float(r[x]) for r in sim if isinstance(r.get(x), (int, float))]
    if xs and not any(t.split("=")[0] in ("--t-max", "--alphas") for t in argv):
        argv += th.x_range(min(xs), max(xs), points, sim, x)
    argv += _fill(parser, argv, sim)
    args = parser.parse_args(argv)
    args.json, args.out, args.plot = True, None, None  # quiet: no progress bars, no files
    if hasattr(args, "no_progress"):
        args.no_progress = True
    return th.compute(args), x, th.y, th.kind, [*key, *argv]


def _title(argv, spec, sim, x, y) -> str:
    head = "theory: " + (" ".join(shlex.quote(t) for t in argv) if argv else Path(spec).name)
    skip = {x, y, f"{y}_err", "seed", "t", "steps"}
    params = []
    for c in _columns(sim):
        v = _unique(sim, c)
        if c not in skip and isinstance(v, (int, float)) and not isinstance(v, bool):
            params.append(f"{c} = {v:.4g}")
    lines = textwrap.wrap(head, 90) + (textwrap.wrap(", ".join(params), 90) if params else [])
    return "\n".join(lines)


def _overlay(args):
    from theory.plotting import mean_and_sem, overlay, use_agg
    from theory.store import read_table, write_table

    check_int("--points", args.points, lo=2, hi=MAX_POINTS)
    sim = read_table(args.sim)
    if not sim:
        raise ValueError(f"the simulation table {args.sim!r} has no rows")
    rows, x, y, kind, argv = theory_rows(args.theory, sim, args.x, args.points)
    x, y = x or "t", args.y or y or "m"
    check_fields(sim, [x, y], f"simulation table {args.sim!r}")
    kind = args.kind or kind
    if kind is not None and any("kind" in r for r in rows):
        kinds = sorted({str(r.get("kind")) for r in rows})
        rows = [r for r in rows if r.get("kind") == kind]
        if not rows:
            raise ValueError(f"--kind {kind!r}: the theory has kinds {', '.join(kinds)}")
    check_fields(rows, [x, y], "theory" + ("" if argv else f" table {args.theory!r}"))
    if args.out:
        write_table(args.out, rows)
    use_agg()
    import matplotlib.pyplot as plt

    from theory._util import atomic_savefig

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    overlay(ax, rows, sim, x=x, y=y)
    xscale = args.xscale
    if xscale == "auto":
        xscale = "log" if x in ("t", "steps") else "linear"
    ax.set_xscale(xscale)
    ax.set_title(_title(argv, args.theory, sim, x, y), fontsize=8)
    ax.legend(frameon=False)
    fig.tight_layout()
    atomic_savefig(fig, args.plot, dpi=120)
    plt.close(fig)
    xs, mu, se = mean_and_sem(sim, x, y)
    payload = dict(
        x=x,
        y=y,
        theory=" ".join(argv) if argv else args.theory,
        theory_points=len(rows),
        sim_x=xs,
        sim_mean=mu,
        sim_err=se,
        plot=args.plot,
        **({"out": args.out} if args.out else {}),
    )
    finite = [v for v in se if math.isfinite(v)]
    text = (
        f"{payload['theory']}: {len(rows)} theory points; {len(xs)} simulation points "
        f"({len(sim)} rows, largest SE {max(finite, default=0.0):.3g}); {y} vs {x}\n"
        f"figure: {args.plot}" + (f"\ntheory table: {args.out}" if args.out else "")
    )
    emit(
        args,
        {k: (np.asarray(v).tolist() if k.startswith("sim_") else v) for k, v in payload.items()},
        text,
    )
    return 0
