"""``theory reproduce``: regenerate the figures and headline numbers of the papers."""

from __future__ import annotations

import os

from theory.cli._common import add_json, emit


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "reproduce",
        help="regenerate every figure (theory over simulation) and figures/SUMMARY.md",
        description="Regenerate the figures of the ERM, SGD and histogram work and write "
        "<out>/SUMMARY.md, the table of headline numbers with how each was computed. "
        "Finished pieces are cached in <out>/.cache (keyed by name, mode, package version and "
        "the source of every module of the package the piece imports), so a rerun only "
        "computes what is missing or changed.",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="quick",
        action="store_true",
        default=True,
        help="reduced sizes that keep the results meaningful (default; "
        "target: 10 minutes on 2 cores)",
    )
    mode.add_argument(
        "--full", dest="quick", action="store_false", help="the papers' sizes (hours)"
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="figures to make (names or shell patterns like 'erm-*'; default: all)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder for figures, SUMMARY.md and the cache "
        "(default: figures/quick with --quick, figures/full with --full)",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="list the available figures",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run up to N figures at the same time in separate processes (default 1)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDR",
        help="run the figures on a Dask cluster (e.g. tcp://host:8786; the workers must see "
        "--out; needs pip install 'theory[dask]')",
    )
    p.add_argument("--force", action="store_true", help="ignore the cache and recompute")
    p.add_argument(
        "--module",
        action="append",
        dest="modules",
        metavar="MOD",
        default=None,
        help="scan this importable module for a FIGURES dict instead of the "
        "package's figure modules (repeatable; for your own figures)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_json(p)
    p.set_defaults(func=_handle)


def _handle(args) -> int:
    from theory.reproduce import default_out, list_pieces, run_reproduce

    if args.list:
        rows = list_pieces(args.out, args.quick, modules=args.modules)
        mode = "quick" if args.quick else "full"
        out = default_out(args.quick) if args.out is None else args.out
        lines = [f"{len(rows)} figure(s) available ({mode} cache in {out}/.cache):"]
        for r in rows:
            ref = f"{r['paper']} {r['ref']}" if r["ref"] else "-"
            lines.append(f"  {r['name']:28s} {ref:36s} {'cached' if r['cached'] else ''}")
        emit(args, {"figures": rows}, "\n".join(lines))
        return 0
    import signal

    def _term(signum, frame):  # SIGTERM: stop like Ctrl-C, so SUMMARY.md lists what finished
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _term)
    saved_tqdm = os.environ.get("TQDM_DISABLE")
    if args.no_progress:  # also silence the progress bars inside the pieces (tqdm >= 4.66)
        os.environ["TQDM_DISABLE"] = "1"
    try:
        report = run_reproduce(
            args.names,
            out=args.out,
            quick=args.quick,
            workers=args.workers,
            force=args.force,
            progress=not args.no_progress,
            modules=args.modules,
            scheduler=args.scheduler,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
        if saved_tqdm is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = saved_tqdm
    counts = {}
    for o in report.outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    text = [
        f"{o.name:32s} {o.status:8s}"
        + (f" {o.seconds:7.1f} s" if o.seconds is not None else "")
        + (f"  {o.error}" if o.error else "")
        for o in report.outcomes
    ]
    text.append(
        ", ".join(f"{v} {k}" for k, v in counts.items())
        + f"; {report.seconds:.0f} s; summary in {report.summary}"
    )
    emit(args, report.to_dict(), "\n".join(text))
    return 1 if report.failed else 0
