"""Sphinx extension: the pages of the documentation site that are generated from the package.

At ``config-inited`` (before Sphinx first looks for source files) it writes, under
``docs/generated/`` (git-ignored, rewritten only when their content changes):

* ``cli.md`` -- the command-line reference, one section per command and subcommand, walked from
  the argparse parser of ``theory.cli.build_parser()`` (so a new subcommand appears by itself);
* ``gallery.md`` and ``gallery/*.png`` -- the full-mode gallery: the "## Gallery" section of
  ``figures/full/SUMMARY.md`` (captions with the numbers of that run), then every other figure of
  ``figures/full/`` under the record that describes it;
* ``api.md`` -- the API reference: for each package of ``API``, its docstring and one entry per
  name of its ``__all__`` (``autoclass`` / ``autofunction`` / ``autodata``), so a name added to
  ``__all__`` is documented without editing a page;
* ``tutorials/*.ipynb`` -- the notebooks of ``notebooks/``, which MyST-NB executes during the
  build (``conf.py`` sets ``THEORY_NOTEBOOK_QUICK=1``, the notebooks' small sizes).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "generated"
FULL = ROOT / "figures" / "full"


def _write(path: Path, text: str | bytes) -> None:
    """Write ``path`` only when its content changes (keeps incremental builds incremental)."""
    data = text.encode() if isinstance(text, str) else text
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _subcommands(parser: argparse.ArgumentParser):
    """(help, subparser) of each subcommand of ``parser``, in the order of ``--help``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield helps.get(name) or "", sub


def cli_markdown(parser: argparse.ArgumentParser, depth: int = 2) -> str:
    """One section per command: its ``--help`` verbatim, then its subcommands one level down."""
    parts = []
    for helptext, sub in _subcommands(parser):
        parts.append(f"{'#' * depth} `{sub.prog}`\n")
        if helptext:
            parts.append(f"{helptext}\n")
        parts.append(f"```text\n{sub.format_help().rstrip()}\n```\n")
        parts.append(cli_markdown(sub, depth + 1))
    return "\n".join(parts)


def write_cli() -> None:
    from theory.cli import build_parser

    parser = build_parser()
    text = (
        "# Command-line reference\n\n"
        "Generated at build time from the parsers of `theory.cli` (`theory COMMAND --help` prints "
        "the same text). Bad input exits with status 2 and one line on stderr.\n\n"
        f"```text\n{parser.format_help().rstrip()}\n```\n\n" + cli_markdown(parser)
    )
    _write(OUT / "cli.md", text)


def gallery_section(summary: str) -> str:
    """The body of the "## Gallery" section of a SUMMARY.md (up to the next ``## `` heading)."""
    match = re.search(r"^## Gallery\s*$(.*?)(?=^## |\Z)", summary, flags=re.M | re.S)
    return match.group(1).strip() if match else ""


def record_caption(record: str, stem: str) -> str:
    """The headline numbers a record lists for figure ``stem`` (its "| figure | quantity | value |"
    rows, wall times left out), as one caption line."""
    numbers = record.split("\n## Figures")[0]  # the headline table, not the list of files
    rows = re.findall(rf"^\| {re.escape(stem)} \| ([^|]+) \| ([^|]+) \|", numbers, flags=re.M)
    return "; ".join(f"{q.strip()} = {v.strip()}" for q, v in rows if "wall" not in q)


def write_gallery() -> None:
    summary = (FULL / "SUMMARY.md").read_text() if (FULL / "SUMMARY.md").exists() else ""
    body = gallery_section(summary)
    shown = set(re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", body))
    # the figures not in SUMMARY.md's gallery, grouped by the record kept beside it that names
    # them (an earlier run's), each captioned with that record's numbers
    others = []
    for record_path in sorted(FULL.glob("*.md")):
        if record_path.name == "SUMMARY.md":
            continue
        record = record_path.read_text()
        pngs = [p for p in sorted(FULL.glob("*.png")) if p.name not in shown and p.name in record]
        if not pngs:
            continue
        title, _, rest = record.partition("\n")
        others.append(f"## {title.lstrip('# ').strip()}\n\n{rest.strip().split(chr(10) * 2)[0]}\n")
        for png in pngs:
            shown.add(png.name)
            caption = record_caption(record, png.stem)
            others.append(f"### {png.stem}\n\n![{png.stem}](gallery/{png.name})\n\n{caption}\n")
    for png in sorted(FULL.glob("*.png")):
        _write(OUT / "gallery" / png.name, png.read_bytes())
    body = re.sub(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)", r"![\1](gallery/\2)", body)
    body = re.sub(r"^### ", "## ", body, flags=re.M)  # its "## Gallery" is this page's title
    text = (
        "# Gallery (full mode)\n\n"
        "The figures of `theory reproduce --full` (`figures/full/`), each with the numbers of the "
        "run that drew it, as its `SUMMARY.md` records them. Generated at build time.\n\n"
        + (body or "No gallery in `figures/full/SUMMARY.md` yet.")
        + "\n\n"
        + "\n".join(others)
    )
    _write(OUT / "gallery.md", text)


API = (
    ("theory.attention", "positional vs semantic learning by ERM"),
    ("theory.ssi", "SGD in sequence single-index models"),
    ("theory.histogram", "the histogram counting task"),
    ("theory.solve", "the shared iteration core and roots"),
    ("theory.results", "the result contract"),
)


def write_api() -> None:
    parts = [
        "# API reference\n\n"
        "The public surface of each package: every name of its `__all__`, with its docstring "
        "(generated at build time). Every public computation returns a `Result` "
        "(`theory.results`) with a `status` and a `message`; theory and simulation share field "
        "names, error bars are `<field>_err`.\n"
    ]
    for package, title in API:
        module = importlib.import_module(package)
        entries = [f".. automodule:: {package}\n   :no-members:\n"]
        for name in module.__all__:
            obj = getattr(module, name)
            kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else "data"
            entries.append(f".. auto{kind}:: {package}.{name}\n")
        body = "\n".join(entries)
        parts.append(f"## `{package}` -- {title}\n\n```{{eval-rst}}\n{body}```\n")
    _write(OUT / "api.md", "\n".join(parts))


def write_tutorials() -> None:
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        _write(OUT / "tutorials" / nb.name, nb.read_bytes())


def generate(app=None, config=None) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_cli()
    write_api()
    write_gallery()
    write_tutorials()


def setup(app):
    app.connect("config-inited", generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
