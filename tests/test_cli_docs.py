"""``theory docs``: the missing-extra message, and the command it runs (the CI build command;
no build here: the site is built by tests/test_docs.py and .ci/run)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest

from theory.cli import build_parser, main
from theory.cli import docs as cli_docs

CI_COMMAND = "-m sphinx -W --keep-going -b html docs docs/_build/html"  # .ci/run's docs step


def test_without_sphinx_exit_2_with_one_line(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sphinx" else real(name, *a)
    )
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    assert main(["docs"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "install the docs extra: pip install '.[docs]'" in err[0]
    assert "sphinx" in err[0].split("missing:")[1] and not ran


@pytest.mark.parametrize(
    ("argv", "no_exec", "opened"),
    [([], False, False), (["--no-exec"], True, False), (["--open", "--no-exec"], True, True)],
)
def test_arguments_and_the_command_run(monkeypatch, capsys, argv, no_exec, opened):
    args = build_parser().parse_args(["docs", *argv])
    assert (args.no_exec, args.open) == (no_exec, opened)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # extra "there"
    calls, pages = [], []
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda cmd, cwd: calls.append((cmd, cwd)) or types.SimpleNamespace(returncode=0),
    )
    monkeypatch.setattr(cli_docs.webbrowser, "open", pages.append)
    assert main(["docs", *argv]) == 0
    ((cmd, cwd),) = calls
    assert cmd[0] == sys.executable and " ".join(cmd[1:]).startswith(CI_COMMAND)
    assert (" ".join(cmd).endswith("-D nb_execution_mode=off")) == no_exec
    assert (cwd / "docs" / "conf.py").is_file()
    index = cwd / "docs" / "_build" / "html" / "index.html"
    assert str(index) in capsys.readouterr().out.splitlines()
    assert pages == ([index.as_uri()] if opened else [])


def test_a_failed_build_passes_its_status_on(monkeypatch, capsys):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(subprocess, "run", lambda cmd, cwd: types.SimpleNamespace(returncode=1))
    assert main(["docs", "--open"]) == 1
    assert "sphinx build failed" in capsys.readouterr().err


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["docs", "--no-such-option"])
    assert exc.value.code == 2 and len(capsys.readouterr().err.splitlines()) == 1
