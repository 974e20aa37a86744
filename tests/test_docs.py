"""The documentation site (docs/): it builds with warnings as errors, and the built HTML has what
issue 14 asks for -- every section linked from the index, the notebooks' figures produced by
executing them, rendered equations, every CLI subcommand, every public name of each package.

The build executes the three notebooks (about a minute of CPU), so the test is slow.  CI builds
the site once (.ci/run) and points THEORY_DOCS_HTML at it; without that variable the test builds
into a temporary folder.  Skipped when the ``docs`` extra is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

for _mod in ("sphinx", "myst_nb", "numpydoc", "pydata_sphinx_theme"):
    pytest.importorskip(_mod, reason="the docs extra is not installed (pip install '.[docs]')")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGES = ("theory.attention", "theory.ssi", "theory.histogram", "theory.solve")


class Page(HTMLParser):
    """What the checks read from one HTML page: links, images (and whether they sit in a notebook
    cell's output), element ids, the text of math containers, the scripts loaded, the text, the
    ``<pre>`` blocks (text and the highlight language of the block around them) and the prose
    (text outside code, math, scripts and styles)."""

    def __init__(self, path: Path):
        super().__init__()
        self.links, self.images, self.output_images, self.ids = set(), [], [], set()
        self.math, self.scripts, self.text = [], [], []
        self.pres: list[list[str]] = []  # [text, language ("" when none is given)]
        self.prose: list[str] = []
        # (tag, in cell output, in math, highlight language, in pre, in code/script/style)
        self._stack: list[tuple[str, bool, bool, str, bool, bool]] = []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        top = self._stack[-1] if self._stack else ("", False, False, "", False, False)
        in_output = top[1] or "cell_output" in classes
        in_math = top[2] or "math" in classes
        lang = next((c[len("highlight-") :] for c in classes if c.startswith("highlight-")), top[3])
        in_pre = top[4] or tag == "pre"
        in_code = top[5] or tag in ("pre", "code", "script", "style", "kbd", "samp")
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.add(a["href"].split("#")[0])
        if tag == "img":
            self.images.append(a.get("src", ""))
            if in_output:
                self.output_images.append(a.get("src", ""))
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if in_math and "math" in classes:
            self.math.append("")
        if tag == "pre" and not top[4]:
            self.pres.append(["", lang])
        if tag not in ("img", "br", "hr", "meta", "link", "input"):
            self._stack.append((tag, in_output, in_math, lang, in_pre, in_code))

    def handle_endtag(self, tag):
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        self.text.append(data)
        top = self._stack[-1] if self._stack else ("", False, False, "", False, False)
        if top[2] and self.math:
            self.math[-1] += data
        if top[4] and self.pres:
            self.pres[-1][0] += data
        if not (top[2] or top[5]):
            self.prose.append(data)


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    given = os.environ.get("THEORY_DOCS_HTML")
    if given:
        out = Path(given)
        assert (out / "index.html").exists(), f"THEORY_DOCS_HTML={given} has no index.html"
        return out
    out = tmp_path_factory.mktemp("docs") / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q"]
    cmd += ["-d", str(out.parent / "doctrees"), str(DOCS), str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"the -W build failed:\n{proc.stderr[-5000:]}"
    return out


def test_index_links_every_section(html):
    index = Page(html / "index.html")
    pages = [p.stem for p in DOCS.glob("*.md") if p.stem != "index"]
    pages += [f"generated/tutorials/{p.stem}" for p in (ROOT / "notebooks").glob("*.ipynb")]
    pages += ["generated/gallery", "generated/cli", "generated/api"]
    assert "README" in pages and "install" in pages and len(pages) >= 14
    for page in pages:
        assert f"{page}.html" in index.links, f"index.html does not link {page}"
        assert (html / f"{page}.html").exists()


@pytest.mark.parametrize("nb", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_page_shows_the_figures_of_its_execution(html, nb):
    # the build executes the notebook (conf.py: nb_execution_mode = "force"), replacing the
    # committed outputs: the page shows a figure for each one the notebook draws
    cells = json.loads((ROOT / "notebooks" / nb).read_text())["cells"]
    n_figures = sum("".join(c["source"]).count("plt.subplots(") for c in cells)
    assert n_figures >= 1
    path = html / "generated" / "tutorials" / nb.replace(".ipynb", ".html")
    page = Page(path)
    assert len(page.output_images) >= n_figures, (nb, page.output_images)
    for src in page.output_images:
        image = (path.parent / src).resolve()
        assert image.suffix == ".png" and image.stat().st_size > 5_000, src  # a drawn figure
    assert page.math, f"{nb}: the notebook's $-math is not rendered"


# numerics.md has inline math only (no display equation): its rendering is checked by
# test_mathematics_page_has_math_and_no_equation_in_a_code_block below
@pytest.mark.parametrize("name", ["histogram", "solver", "findings", "ssi", "attention"])
def test_mathematics_page_has_rendered_equations(html, name):
    # every $$ block of the page's source becomes one MathJax display container, numbered
    # equations keeping their number (\tag)
    source = (DOCS / f"{name}.md").read_text()
    blocks = re.findall(r"^ *\$\$\n(.*?)\n *\$\$", source, flags=re.M | re.S)
    assert blocks
    page = Page(html / f"{name}.html")
    assert any("mathjax" in s.lower() for s in page.scripts), "MathJax is not loaded"
    display = [m.strip() for m in page.math if m.strip().startswith("\\[")]
    assert len(display) == len(blocks)
    for block, math in zip(blocks, display):
        assert math.endswith("\\]") and " ".join(block.split()) in " ".join(math.split())
    tags = re.findall(r"\\tag\{([^}]+)\}", source)
    assert all(any(f"\\tag{{{t}}}" in m for m in display) for t in tags)


MATH_PAGES = ("attention", "ssi", "numerics", "solver", "histogram", "findings")
MATH_PAGES += ("published-vs-computed",)
# a <pre> is code, not an equation, when its block names a code language (```console, ```python)
# or one of its lines reads as a command or as Python; an indented block names no language
CODE_LANGUAGES = {"console", "bash", "shell", "sh", "python", "pycon", "ipython3", "json", "toml"}
CODE_LINE = re.compile(
    r"^\s*(\$ |>>> |theory |python |pip |import |from \S+ import |def |class |print\()", re.M
)
# a relation sign, or an equation number closing a line: "... (16)", "... (20b)"
RELATION = re.compile(r"[=<>≤≥≈≠∈∝→←]|\(\d+[a-z]?\)\s*$", re.M)


def looks_like_an_equation(text: str, language: str) -> bool:
    return (
        language not in CODE_LANGUAGES
        and not CODE_LINE.search(text)
        and bool(RELATION.search(text))
    )


def test_the_equation_heuristic_tells_equations_from_code():
    # the Unicode code blocks the mathematics pages used to have, and code they still have
    assert looks_like_an_equation("    y = g(z*),     g: R^L → R^k.          (2)", "default")
    assert looks_like_an_equation("κ = min{ k > 0 : ∇^k R(0, 0) ≠ 0 }.   (25)", "text")
    assert looks_like_an_equation("SIE 1: ν ~ d,    SIE k ≥ 3: ν ~ d^{k−1}", "default")
    assert looks_like_an_equation("w ← √d (w − γ ∇ℓ) / || w − γ ∇ℓ ||    (16)", "none")
    assert not looks_like_an_equation("$ theory sgd boundaries --a 1 --json", "default")
    assert not looks_like_an_equation("res = ssi.simulate_seeds(model, 1000)", "python")
    assert not looks_like_an_equation("from theory import ssi\nr = ssi.flatness(m)", "default")
    assert not looks_like_an_equation("import numpy as np\nx = np.ones(3)", "default")


@pytest.mark.parametrize("name", MATH_PAGES)
def test_mathematics_page_has_math_and_no_equation_in_a_code_block(html, name):
    # the equations are MathJax math, not Unicode in code blocks; no $-math left unparsed
    page = Page(html / f"{name}.html")
    equations = [t for t, lang in page.pres if looks_like_an_equation(t, lang)]
    assert not equations, f"{name}: {len(equations)} equations in code blocks:\n" + "\n".join(
        equations
    )
    assert any("mathjax" in s.lower() for s in page.scripts), "MathJax is not loaded"
    assert page.math, f"{name}: no math element"
    assert all(m.strip().startswith(("\\(", "\\[")) for m in page.math), page.math[:3]
    prose = "".join(page.prose)
    unparsed = re.findall(r"\$[^$\s][^$\n]*\$", prose)
    assert not unparsed, f"{name}: $-math shown as text: {unparsed[:5]}"


def _commands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub.prog
                yield from _commands(sub)


def test_cli_reference_lists_every_subcommand(html):
    from theory.cli import build_parser

    text = "".join(Page(html / "generated" / "cli.html").text)
    progs = list(_commands(build_parser()))
    assert "theory erm transition" in progs and "theory sgd ode" in progs and len(progs) > 20
    for prog in progs:
        assert prog in text, f"the CLI reference misses {prog!r}"
    # each section shows the command's own help, e.g. an option of `theory sgd ode`
    assert "--lr" in text and "--omega" in text


def test_api_reference_lists_each_public_surface(html):
    page = Page(html / "generated" / "api.html")
    for name in ("theory.attention.fixed_point", "theory.attention.transition"):
        assert name in page.ids
    assert "theory.ssi.integrate_ode" in page.ids and "theory.ssi.Trajectory" in page.ids
    for pkg in PACKAGES:
        public = importlib.import_module(pkg).__all__
        missing = [n for n in public if f"{pkg}.{n}" not in page.ids]
        assert not missing, f"{pkg}: not in the API reference: {missing}"


def test_gallery_shows_every_full_mode_figure(html):
    page = Page(html / "generated" / "gallery.html")
    shown = {Path(src).name for src in page.images}
    figures = sorted(p.name for p in (ROOT / "figures" / "full").glob("*.png"))
    assert figures and set(figures) <= shown
    for src in page.images:
        assert (html / "generated" / src).resolve().exists(), src
    # captions: the numbers SUMMARY.md's gallery gives, e.g. the phase diagram's boundaries
    summary = (ROOT / "figures" / "full" / "SUMMARY.md").read_text()
    caption = re.search(r"a=1: omega_steepest_switch = [0-9.]+", summary)
    if caption:
        assert caption.group(0) in "".join(page.text)
