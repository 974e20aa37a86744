"""Execute the notebooks and write them back with their outputs, small and deterministic.

Refresh every committed notebook (a few minutes on one core)::

    python notebooks/execute.py                  # all notebooks of this folder, in place
    python notebooks/execute.py 03-sgd-dynamics.ipynb
    python notebooks/execute.py --check          # compare with a fresh run, write nothing

The committed outputs are those of a run at the notebooks' small sizes
(``THEORY_NOTEBOOK_QUICK=1``, the sizes the documentation build executes), in a kernel on this
interpreter with one BLAS/Numba thread.  What is written is the fixed point of the repository's
nbstripout hook (.pre-commit-config.yaml): no execution counts, no timings, no kernel or
language versions; consecutive stream outputs are merged (how a print is split into messages
depends on timing).  Figures are PNG at the DPI each notebook sets (``figure.dpi``).

``compare`` is the staleness check of tests/test_notebooks.py: the same cells, the same output
types, every number of a text output equal within a tolerance, every image of the same pixel size.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

NB_DIR = Path(__file__).resolve().parent
KERNEL = "theory-notebooks"
# ipykernel's inline backend: figures are rendered into the outputs, no display needed
INLINE = "module://matplotlib_inline.backend_inline"
# the kernelspec written into the committed notebooks (a reader's default Python kernel)
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
# one thread everywhere: a parallel reduction's order (hence its last digits) does not vary
THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def notebooks() -> list[Path]:
    return sorted(NB_DIR.glob("*.ipynb"))


@contextlib.contextmanager
def kernel(quick: bool = True):
    """The name of a kernelspec running this interpreter (found through JUPYTER_PATH while the
    context is open), with the notebooks' QUICK switch, the inline backend and one thread."""
    env = {"THEORY_NOTEBOOK_QUICK": "1" if quick else "0", "MPLBACKEND": INLINE}
    env |= {k: "1" for k in THREADS} | {"PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix="theory-jupyter-") as base:
        spec = Path(base) / "kernels" / KERNEL
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        kernel_json = {"argv": argv, "display_name": "theory", "language": "python", "env": env}
        (spec / "kernel.json").write_text(json.dumps(kernel_json))
        saved = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = os.pathsep.join([base] + ([saved] if saved else []))
        try:
            yield KERNEL
        finally:
            if saved is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = saved


def execute(path: Path, kernel_name: str, timeout: int = 3600):
    """The notebook at ``path`` executed from a scratch folder, then normalised."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="theory-nb-") as cwd:
        client = NotebookClient(
            nb,
            kernel_name=kernel_name,
            timeout=timeout,
            startup_timeout=300,  # a kernel on a busy machine starts slowly
            allow_errors=False,
            record_timing=False,
            resources={"metadata": {"path": cwd}},
        )
        client.execute()
    return normalise(nb)


def normalise(nb):
    """What changes from run to run, removed (the nbstripout hook's fixed point)."""
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    for cell in nb.cells:
        for key in ("execution", "collapsed", "scrolled", "ExecuteTime"):
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            continue
        cell.execution_count = None
        merged = []
        for out in cell.outputs:
            if out.get("execution_count") is not None:
                out["execution_count"] = None
            out.pop("transient", None)
            prev = merged[-1] if merged else None
            if out.output_type == "stream" and prev is not None and prev.output_type == "stream":
                if prev.name == out.name:
                    prev.text += out.text
                    continue
            merged.append(out)
        cell.outputs = merged
    return nb


def write(nb, path: Path) -> None:
    import nbformat

    nbformat.validate(nb)
    nbformat.write(nb, path)


# a number in a text output: sign, digits, decimals, exponent
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# relative tolerance: the notebooks' numbers are solver outputs (fixed points converged to
# <= 1e-8, Brent roots, quadratures); another BLAS or thread count changes their last digits by
# far less than 1e-6 of their size.  A number printed with decimals may also flip by one unit of
# its last digit (0.12345 vs 0.12346) when the value sits at a rounding boundary: that is allowed.
# Integers (SIE, L, d, SGD step counts of a seeded chain) must agree to rtol, i.e. exactly.
RTOL = 1e-6


def _numbers_differ(a: str, b: str, rtol: float) -> bool:
    x, y = float(a), float(b)
    if math.isnan(x) or math.isnan(y):
        return not (math.isnan(x) and math.isnan(y))
    mantissa, _, exponent = a.lower().partition("e")
    last_digit = 0.0
    if "." in mantissa or exponent:
        decimals = len(mantissa.partition(".")[2])
        last_digit = 1.000001 * 10.0 ** (int(exponent or 0) - decimals)
    return abs(x - y) > max(rtol * max(abs(x), abs(y)), last_digit)


def compare_text(committed: str, fresh: str, rtol: float = RTOL) -> list[str]:
    """The differences between two texts: the words must be equal (up to how much white space
    pads a column: -0.0000 is one character wider than 0.0000), the numbers within ``rtol`` (or
    one unit of the last printed digit)."""

    def words(text: str) -> list[str]:
        return [" ".join(part.split()) for part in NUMBER.split(text)]

    if words(committed) != words(fresh):
        return [f"text differs:\n--- committed\n{committed}\n--- fresh\n{fresh}"]
    pairs = zip(NUMBER.findall(committed), NUMBER.findall(fresh))
    return [f"number {a} is now {b}" for a, b in pairs if _numbers_differ(a, b, rtol)]


def png_size(data: str) -> tuple[int, int]:
    """(width, height) in pixels of a base64 PNG (its IHDR chunk)."""
    raw = base64.b64decode(data)
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG image")
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def compare(committed, fresh, rtol: float = RTOL) -> list[str]:
    """Why the committed notebook is stale against a fresh execution (empty list: it is not)."""
    if [c.source for c in committed.cells] != [c.source for c in fresh.cells]:
        return ["the cells differ (sources)"]
    problems = []
    for i, (old, new) in enumerate(zip(committed.cells, fresh.cells)):
        if old.cell_type != "code":
            continue
        where = f"cell {i} ({old.get('id', '?')})"
        kinds = [(o.output_type, o.get("name")) for o in old.outputs]
        if kinds != [(o.output_type, o.get("name")) for o in new.outputs]:
            problems.append(
                f"{where}: outputs {kinds} are now {[o.output_type for o in new.outputs]}"
            )
            continue
        for a, b in zip(old.outputs, new.outputs):
            if a.output_type == "stream":
                problems += [f"{where}: {p}" for p in compare_text(a.text, b.text, rtol)]
            elif a.output_type in ("execute_result", "display_data"):
                if sorted(a.data) != sorted(b.data):
                    problems.append(f"{where}: mime types {sorted(a.data)} -> {sorted(b.data)}")
                    continue
                for mime, value in a.data.items():
                    if mime == "image/png":
                        sa, sb = png_size(_text(value)), png_size(_text(b.data[mime]))
                        if sa != sb:
                            problems.append(f"{where}: image of {sa} pixels is now {sb}")
                    elif mime.startswith("text/"):
                        diff = compare_text(_text(value), _text(b.data[mime]), rtol)
                        problems += [f"{where}: {p}" for p in diff]
            elif a.output_type == "error":
                problems.append(f"{where}: an error output is committed")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks of notebooks/ (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with a fresh run only")
    parser.add_argument("--full", action="store_true", help="run at the full sizes (not QUICK)")
    args = parser.parse_args(argv)
    paths = [NB_DIR / Path(n).name for n in args.names] or notebooks()
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook in {NB_DIR.name}/: {', '.join(missing)}")
    import nbformat

    stale = 0
    with kernel(quick=not args.full) as name:
        for path in paths:
            fresh = execute(path, name)
            if args.check:
                problems = compare(nbformat.read(path, as_version=4), fresh)
                stale += bool(problems)
                print(
                    f"{path.name}: " + ("stale\n  " + "\n  ".join(problems) if problems else "ok")
                )
            else:
                write(fresh, path)
                print(f"{path.name}: written, {path.stat().st_size / 1000:.0f} kB")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
