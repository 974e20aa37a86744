"""Helpers shared by the subcommands: the argument parser class, JSON output and common
options.  Values are validated by the library (``theory._util`` check_* functions), whose
ValueError the command prints as one line (``theory.cli.main``)."""

from __future__ import annotations

import argparse
import math
import sys

from theory._util import dumps_json


def one_line(text: str) -> str:
    """``text`` on one line (an error message must be ONE line on stderr)."""
    return " ".join(str(text).split())


def finite_float(text: str) -> float:
    """``float(text)``, refusing NaN and ±inf (no option of ``theory`` means anything by them;
    ``1e999`` overflows to inf and is refused too)."""
    x = float(text)
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return x


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are ONE line on stderr (exit status 2): the error, then where
    to look (``theory sgd ode: error: argument --lr: invalid float value: 'x' (see theory sgd ode
    --help)``).  Subparsers inherit the class.  Every ``type=float`` option is parsed by
    :func:`finite_float` (NaN and inf are refused; the action's type stays ``float``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", float, finite_float)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout instead of the human-readable text",
    )


def emit(args, payload: dict, text: str | None = None) -> None:
    """Print ``payload`` as one JSON object if ``--json`` was given, else ``text``."""
    if getattr(args, "json", False):
        sys.stdout.write(dumps_json(payload) + "\n")
    else:
        if text is None:
            text = "\n".join(f"{k}: {v}" for k, v in payload.items())
        sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()
