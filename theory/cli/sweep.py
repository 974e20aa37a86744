"""``theory sweep NAME``: map a registered function over a parameter grid.

Examples::

    theory sweep erm-fixed-point --alphas 1:3:5 --omegas 0.2,0.3 --out table.csv --workers 2
    theory sweep demo --xs 0:1:11 --ys 1,2 --out demo.jsonl --scheduler tcp://127.0.0.1:8786

Every finished point is appended to the table at once; rerunning the same command after an
interruption computes only the missing points.
"""

from __future__ import annotations

import argparse
import inspect
import math

from theory._util import check_finite, check_int
from theory.cli._common import add_json, emit

MAX_SWEEP_POINTS = 1_000_000  # points of one sweep (each is a row of the result table)


def _axis_flag(name: str) -> str:
    return f"--{name}s"


def register(subparsers) -> None:
    from theory.sweep import SWEEPABLE

    p = subparsers.add_parser(
        "sweep",
        help="map a registered computation over a parameter grid (local processes or Dask)",
        description="Run a registered computation over the cartesian product of the given "
        "parameter ranges.  Ranges are START:STOP:N (N points, both ends included), START:STOP "
        "(integers) or a,b,c.  Each finished point is appended atomically to --out, so an "
        "interrupted sweep resumes where it stopped.  --scheduler runs the sweep on a Dask "
        "distributed cluster (pip install 'theory[dask]').",
    )
    sub = p.add_subparsers(dest="sweep_name", metavar="NAME")
    p.set_defaults(func=_handle_list)
    for name, entry in SWEEPABLE.items():
        sp = sub.add_parser(name, help=entry.help, description=entry.help)
        sig = inspect.signature(entry.fn).parameters
        for axis, (typ, helptext) in entry.axes.items():
            has_default = sig[axis].default is not inspect.Parameter.empty
            extra = f" (default: {sig[axis].default})" if has_default else " (required)"
            sp.add_argument(
                _axis_flag(axis),
                dest=f"axis_{axis}",
                metavar="RANGE",
                required=not has_default,
                help=f"{helptext}: START:STOP:N, START:STOP or a,b,c"
                + ("; separate expressions with ';'" if typ is str else "")
                + extra,
            )
        for opt, (typ, default, helptext) in entry.options.items():
            sp.add_argument(
                f"--{opt}",
                dest=f"opt_{opt}",
                type=typ,
                default=default,
                metavar=opt.upper(),
                help=helptext if default is None else f"{helptext} (default: {default})",
            )
        _add_common(sp)
        sp.set_defaults(func=_handle, sweep_entry=name)


def _add_common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--out",
        metavar="FILE",
        help="result table (.csv or .jsonl); points already in it are skipped",
    )
    sp.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local worker processes (default: number of CPUs; 1 = in process)",
    )
    sp.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="Dask scheduler address (e.g. tcp://127.0.0.1:8786) to run the points on",
    )
    sp.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_json(sp)


def _handle_list(args) -> int:
    from theory.sweep import SWEEPABLE

    lines = ["registered sweeps (theory sweep NAME --help for the options):"]
    for name, entry in SWEEPABLE.items():
        axes = " ".join(f"{_axis_flag(a)} RANGE" for a in entry.axes)
        lines.append(f"  {name:16s} {axes}")
        lines.append(f"  {'':16s} {entry.help}")
    emit(
        args,
        {"sweeps": {n: {"axes": list(e.axes)} for n, e in SWEEPABLE.items()}},
        "\n".join(lines),
    )
    return 0


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _handle(args) -> int:
    from theory.sweep import (
        KEY_COLUMN,
        ResultTable,
        expand_grid,
        get_sweepable,
        parse_axis,
        point_key,
        run_sweep,
    )

    entry = get_sweepable(args.sweep_entry)
    grid = {}
    for axis, (typ, _h) in entry.axes.items():
        text = getattr(args, f"axis_{axis}")
        if text is not None:
            grid[axis] = parse_axis(text, typ)
    for opt in entry.options:
        val = getattr(args, f"opt_{opt}")
        if isinstance(val, float):
            check_finite(f"--{opt}", val)
        if val is not None:
            grid[opt] = [val]
    n_points = math.prod(len(v) for v in grid.values())
    if n_points > MAX_SWEEP_POINTS:
        raise ValueError(
            f"the grid has {n_points} points, more than {MAX_SWEEP_POINTS}; use fewer values "
            "per axis or split the sweep"
        )
    if args.workers is not None:
        check_int("--workers", args.workers, lo=0, hi=1024)
    points = expand_grid(grid)
    resumed = 0
    if args.out:
        have = {r.get(KEY_COLUMN) for r in ResultTable(args.out).read()}
        resumed = sum(point_key(p) in have for p in points)
    rows = run_sweep(
        entry.fn,
        points,
        out=args.out,
        workers=args.workers,
        scheduler=args.scheduler,
        progress=not args.no_progress,
        desc=f"sweep {entry.name}",
    )
    payload = {
        "name": entry.name,
        "out": args.out,
        "n_points": len(rows),
        "n_resumed": resumed,
        "n_computed": len(rows) - resumed,
        "rows": rows,
    }
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["  ".join(cols)]
    lines += ["  ".join(_fmt(r.get(c)) for c in cols) for r in rows]
    lines.append(
        f"# {len(rows)} points ({resumed} read back from {args.out}, "
        f"{len(rows) - resumed} computed)"
        if args.out
        else f"# {len(rows)} points"
    )
    emit(args, payload, "\n".join(lines))
    return 0
