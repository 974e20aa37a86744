"""``theory docs``: build the documentation site (docs/) into docs/_build/html, the CI way."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import webbrowser
from pathlib import Path

# what docs/conf.py loads (the ``docs`` extra of pyproject.toml)
DOCS_MODULES = ("sphinx", "myst_nb", "numpydoc", "pydata_sphinx_theme")
INSTALL_HINT = "install the docs extra: pip install '.[docs]'"


def checkout_root() -> Path:
    """The source checkout whose ``docs/`` is built: the one holding this package (an editable
    install or a run from the checkout), else the working directory."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (root / "docs" / "conf.py").is_file():
            return root
    raise ValueError(
        "no docs/conf.py next to the package or in the working directory; run theory docs "
        "from a source checkout of theory"
    )


def sphinx_command(no_exec: bool = False) -> list[str]:
    """The build command of CI (.ci/run), relative to the checkout root: warnings are errors."""
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html"]
    cmd += ["docs", "docs/_build/html"]
    if no_exec:
        cmd += ["-D", "nb_execution_mode=off"]
    return cmd


def run(args) -> int:
    missing = [m for m in DOCS_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"{INSTALL_HINT} (missing: {', '.join(missing)})")
    root = checkout_root()
    cmd = sphinx_command(args.no_exec)
    print("+ python " + " ".join(cmd[1:]), flush=True)
    status = subprocess.run(cmd, cwd=root).returncode
    if status != 0:
        print(f"theory docs: the sphinx build failed (exit {status})", file=sys.stderr)
        return status
    index = root / "docs" / "_build" / "html" / "index.html"
    print(index)
    if args.open:
        webbrowser.open(index.as_uri())
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "docs",
        help="build the documentation site into docs/_build/html (needs the docs extra)",
        description="Build the documentation site of this checkout (docs/, Sphinx + MyST-NB) "
        "into docs/_build/html with the command CI runs: python -m sphinx -W --keep-going -b "
        "html docs docs/_build/html (warnings are errors; the tutorial notebooks are executed, "
        "about a minute of CPU).  Prints the path of the built index.html.  Needs the docs "
        "extra: pip install '.[docs]'.",
        epilog="Examples: theory docs;  theory docs --no-exec --open",
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="open the built index.html in a web browser (its path is printed either way)",
    )
    p.add_argument(
        "--no-exec",
        action="store_true",
        help="do not execute the notebooks (-D nb_execution_mode=off): a quick build whose "
        "tutorial pages show no outputs",
    )
    p.set_defaults(func=run)
