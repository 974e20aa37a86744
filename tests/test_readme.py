"""README.md opens with exactly two commands (main job, tests) and .ci/run runs the second."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S)


def test_readme_opens_with_install_and_reproduce_then_install_and_tests():
    blocks = _blocks()
    main_job, tests = blocks[0].strip(), blocks[1].strip()
    assert "\n" not in main_job and "\n" not in tests
    assert "pip install ." in main_job and "theory reproduce --quick" in main_job
    assert 'pip install ".[test]"' in tests and "pytest" in tests


def test_ci_runs_the_readme_test_command():
    # .ci/run extracts the second code block of README.md and evaluates it: run the same
    # extraction here and check it yields the README's test command
    script = (ROOT / ".ci" / "run").read_text()
    heredocs = [h.split("\nPY\n", 1)[0] for h in script.split("<<'PY'\n")[1:]]
    (snippet,) = [h for h in heredocs if "README.md" in h]
    out = subprocess.run(
        ["python3", "-c", snippet], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == _blocks()[1].strip()
    assert 'eval "$test_cmd"' in script
    # and it lints with the ruff version pinned in pyproject's lint extra
    assert "ruff check ." in script and "ruff format --check ." in script
