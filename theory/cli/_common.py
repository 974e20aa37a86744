"""Helpers shared by the subcommands: JSON output and common options."""

from __future__ import annotations

import argparse
import sys

from theory._util import dumps_json


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
