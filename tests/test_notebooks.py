"""The notebooks in notebooks/: committed with their outputs, which cannot go stale.

``notebooks/execute.py`` (the one home of executing, normalising and comparing notebooks) runs
each notebook with nbclient in a kernel on *this* interpreter at the notebooks' small sizes
(``THEORY_NOTEBOOK_QUICK=1``) and writes it back; the staleness test executes each notebook
afresh the same way and compares with what is committed.  nbclient, nbformat and ipykernel are in
the ``test`` extra: imported, not skipped, so a missing one fails instead of silently skipping.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"

NOTEBOOKS = (
    "01-sie-of-a-new-target.ipynb",
    "02-erm-phase-transition.ipynb",
    "03-sgd-dynamics.ipynb",
)

_spec = importlib.util.spec_from_file_location("notebooks_execute", NB_DIR / "execute.py")
execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute)


def committed(name: str):
    return nbformat.read(NB_DIR / name, as_version=4)


def test_all_notebooks_present_and_committed_with_their_outputs():
    assert sorted(p.name for p in NB_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)
    for name in NOTEBOOKS:
        nb = committed(name)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        src = "\n".join(c.source for c in code)
        assert 'os.environ.get("THEORY_NOTEBOOK_QUICK") == "1"' in src, f"{name}: QUICK switch"
        assert "theory._" not in src, f"{name}: use the public API only"
        assert "THEORY_NOTEBOOK_QUICK=1" in nb.cells[0].source, f"{name}: say the outputs' size"
        # executed: every cell that draws a figure shows it, as a PNG of tens of kB
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        for cell in code:
            pngs = [o.data["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
            assert len(pngs) == cell.source.count("plt.subplots("), (name, cell.id)
            for png in pngs:
                assert 5_000 < len(base64.b64decode(png)) < 100_000, (name, cell.id)
        # deterministic: what execute.py writes is left as it is (no counts, no timings)
        assert execute.normalise(copy.deepcopy(nb)) == nb, f"{name}: run notebooks/execute.py"
        assert all(c.execution_count is None for c in code)
        assert "execution" not in str([c.metadata for c in nb.cells])
        # no wall-clock times, no absolute paths of the machine that ran them
        text = "".join(o.get("text", "") for o in outputs)
        text += "".join(v for o in outputs for k, v in o.get("data", {}).items() if "text" in k)
        assert str(ROOT) not in text and "site-packages" not in text, name
        assert not re.search(r"(?<![\w.])/(home|tmp|work|usr|opt|Users)/", text), name
        assert not re.search(r"\b(wall|elapsed|took)\b", text, flags=re.I), name


def test_notebooks_are_a_fixed_point_of_the_nbstripout_hook():
    # the pre-commit hook (.pre-commit-config.yaml) must not rewrite what execute.py writes
    nbstripout = pytest.importorskip("nbstripout", reason="the dev extra is not installed")
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    keys = re.search(r'--extra-keys "([^"]+)"', config).group(1).split()
    assert "--keep-output" in config and "--keep-id" in config and "--keep-count" not in config
    for name in NOTEBOOKS:
        nb = committed(name)
        stripped = nbstripout.strip_output(
            copy.deepcopy(nb), keep_output=True, keep_count=False, keep_id=True, extra_keys=keys
        )
        assert stripped == nb, name


def test_the_staleness_check_sees_a_changed_number_image_or_output():
    # the check of test_committed_outputs_match_a_fresh_execution, on a doctored copy of a
    # committed notebook: it must report each change (and nothing on the unchanged copy)
    nb = committed("01-sie-of-a-new-target.ipynb")
    assert execute.compare(nb, copy.deepcopy(nb)) == []
    cell = next(c for c in nb.cells if c.id == "c07")  # prints the Hermite energies, draws a bar
    stream = next(o for o in cell.outputs if o.output_type == "stream")

    changed = copy.deepcopy(nb)
    target = next(c for c in changed.cells if c.id == "c07")
    label = "E[g^2] by quadrature = "
    number = re.search(re.escape(label) + r"([0-9.]+)", stream.text).group(1)
    bumped = f"{float(number) * (1 + 1e-5):.10f}"  # 10x the relative tolerance
    doctored = stream.text.replace(label + number, label + bumped)
    next(o for o in target.outputs if o.output_type == "stream").text = doctored
    assert [p for p in execute.compare(nb, changed) if number in p and bumped in p]

    changed = copy.deepcopy(nb)
    target = next(c for c in changed.cells if c.id == "c07")
    image = next(o for o in target.outputs if "image/png" in o.get("data", {}))
    raw = bytearray(base64.b64decode(image.data["image/png"]))
    raw[16:20] = (int.from_bytes(raw[16:20], "big") + 1).to_bytes(4, "big")  # IHDR width + 1
    image.data["image/png"] = base64.b64encode(bytes(raw)).decode()
    assert any("pixels" in p for p in execute.compare(nb, changed))

    changed = copy.deepcopy(nb)
    next(c for c in changed.cells if c.id == "c07").outputs.pop()
    assert any("outputs" in p for p in execute.compare(nb, changed))


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("eps_g 0.12345", "eps_g 0.12346", True),  # one unit of the last printed digit
        ("eps_g 0.12345", "eps_g 0.12347", False),
        ("t = 1.0000000000", "t = 1.0000004000", True),  # within 1e-6 relative
        ("t = 1.0000000000", "t = 1.0000020000", False),
        ("12345 steps", "12345 steps", True),
        ("12345 steps", "12346 steps", False),  # integers: exact
        ("x 1.5e-03", "x 1.6e-03", True),
        ("x 1.5e-03", "x 1.7e-03", False),
        ("SIE 2", "SIE 3", False),
        ("m   0.0000  q", "m  -0.0000  q", True),  # a column padded one space less
        ("converged", "maxiter", False),
    ],
)
def test_numbers_are_compared_within_the_stated_tolerance(a, b, same):
    assert (execute.compare_text(a, b) == []) is same


@pytest.fixture(scope="module")
def kernel_name():
    with execute.kernel(quick=True) as name:
        yield name


# execution times on one core: 01 ~10 s, 02 and 03 a minute or more (fixed points, SGD chains)
@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_outputs_match_a_fresh_execution(name, kernel_name):
    fresh = execute.execute(NB_DIR / name, kernel_name)
    problems = execute.compare(committed(name), fresh)
    assert not problems, f"{name} is stale (python notebooks/execute.py {name}):\n" + "\n".join(
        problems
    )
