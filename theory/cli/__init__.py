"""The ``theory`` command.

Each area of the package registers its own subcommand from a module of this package
(``theory/cli/<name>.py`` with a ``register(subparsers)`` function).  Handlers receive the parsed
arguments and return an exit status (or ``None`` for 0).  Invalid input anywhere raises
``ValueError``; it is printed as one line on stderr and the command exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from theory import __version__
from theory.cli._common import Parser, one_line

# order = order in `theory --help`
COMMANDS = ("sie", "erm", "sgd", "histogram", "overlay", "reproduce", "sweep", "docs")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="theory",
        description="Theory of learning in attention models: Hermite/SIE analysis, replica ERM "
        "phase transitions, SGD dynamics, and the matching finite-d simulations.",
    )
    parser.add_argument("--version", action="version", version=f"theory {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"theory.cli.{name}").register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0 if args.command is None else 2
    # "theory sgd ode": the command and the subcommand the error belongs to
    sub = [v for k, v in vars(args).items() if k.endswith("_command") and isinstance(v, str)]
    name = " ".join([args.command, *sub])
    try:
        status = args.func(args)
    except ValueError as exc:
        print(f"theory {name}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except (OverflowError, MemoryError, RecursionError) as exc:  # sizes the checks let through
        print(
            f"theory {name}: error: the input is too large to compute "
            f"({type(exc).__name__}: {one_line(exc)}); use smaller values",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:  # a path that cannot be read or written
        print(f"theory {name}: error: {one_line(exc)}; check the path", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"theory {name}: interrupted (finished pieces are kept on disk)",
            file=sys.stderr,
        )
        return 130
    return 0 if status is None else int(status)
