"""theory reproduce: discovery, caching and reuse, selection, failure isolation, SUMMARY.md."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid

import pytest

import theory.reproduce as rp

FAKE = textwrap.dedent('''
    """A fake figure module for the tests."""
    from pathlib import Path

    CALLS = Path(__file__).with_suffix(".calls")


    def _log(name, quick):
        with open(CALLS, "a") as fh:
            fh.write(f"{name}:{'quick' if quick else 'full'}\\n")


    def good(out_dir, quick):
        _log("good", quick)
        p = Path(out_dir) / "good.png"
        p.write_bytes(b"not really a png")
        return dict(files=[str(p)], numbers=[
            dict(name="alpha_c(omega=0.3)", value=1.23456789, how="Brent root | 40 GH nodes"),
            dict(name="kappa", value=[4, 2], how="exact (polynomial target)")])


    def other(out_dir, quick):
        _log("other", quick)
        p = Path(out_dir) / "sub" / "other.png"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"x")
        return dict(files=[p], numbers=[
            dict(name="n", value=100 if quick else 1000, how="d = n, 3 seeds")])


    def broken(out_dir, quick):
        _log("broken", quick)
        raise RuntimeError("boom: the solver did not converge")


    def liar(out_dir, quick):
        _log("liar", quick)
        return dict(files=["never-written.png"], numbers=[])


    FIGURES = {"good": good, "other": other, "broken": broken, "liar": liar}
''')


@pytest.fixture
def fake(tmp_path, monkeypatch):
    name = f"fake_figs_{uuid.uuid4().hex[:8]}"
    src = tmp_path / "mods"
    src.mkdir()
    (src / f"{name}.py").write_text(FAKE)
    (src / f"{name}_nofigs.py").write_text("X = 1\n")
    (src / f"{name}_broken.py").write_text("import numpy\nraise ImportError('needs scipy>=99')\n")
    monkeypatch.syspath_prepend(str(src))
    modules = (name,)
    monkeypatch.setattr(rp, "FIGURE_MODULES", modules)
    calls = src / f"{name}.calls"

    def read_calls():
        return calls.read_text().split() if calls.exists() else []

    def reset():
        calls.unlink(missing_ok=True)

    yield dict(
        name=name, file=src / f"{name}.py", calls=read_calls, reset=reset, out=tmp_path / "figs"
    )
    for m in (name, f"{name}_nofigs", f"{name}_broken"):
        sys.modules.pop(m, None)


def test_discover_fails_loudly_on_a_broken_figure_module(fake):
    assert list(rp.discover()) == ["good", "other", "broken", "liar"]
    with pytest.raises(ValueError, match="has no FIGURES dict"):
        rp.discover([fake["name"], f"{fake['name']}_nofigs"])
    with pytest.raises(ValueError, match="needs scipy>=99"):
        rp.discover([f"{fake['name']}_broken"])
    with pytest.raises(ValueError, match="cannot import"):
        rp.discover(["theory.no_such_module_xyz"])


def test_failure_isolation_cache_and_summary(fake):
    out = fake["out"]
    rep = rp.run_reproduce(out=out, quick=True, progress=False, log=lambda m: None)
    status = {o.name: o.status for o in rep.outcomes}
    assert status == {"good": "ok", "other": "ok", "broken": "failed", "liar": "failed"}
    assert sorted(fake["calls"]()) == sorted(
        ["good:quick", "other:quick", "broken:quick", "liar:quick"]
    )
    by = {o.name: o for o in rep.outcomes}
    assert "RuntimeError: boom" in by["broken"].error
    assert "never-written.png" in by["liar"].error
    assert by["good"].files == ["good.png"] and by["other"].files == ["sub/other.png"]
    cached = sorted(r["name"] for r in rp.open_cache(out).rows())
    assert cached == ["good", "other"]

    summary = (out / "SUMMARY.md").read_text()
    assert "| good | alpha_c(omega=0.3) | 1.23457 | Brent root \\| 40 GH nodes |" in summary
    gallery = summary.split("## Gallery", 1)[1]  # the finished pieces with their own numbers
    assert "### good" in gallery and "alpha_c(omega=0.3) = 1.23457" in gallery
    assert "### broken" not in gallery
    assert "| good | kappa | [4, 2] | exact (polynomial target) |" in summary
    assert "| other | n | 100 | d = n, 3 seeds |" in summary
    assert "**failed**: RuntimeError: boom: the solver did not converge" in summary

    # rerun: finished pieces are reused, failed ones are retried
    fake["reset"]()
    rep = rp.run_reproduce(out=out, quick=True, progress=False, log=lambda m: None)
    assert sorted(fake["calls"]()) == ["broken:quick", "liar:quick"]
    assert {o.name: o.status for o in rep.outcomes}["good"] == "cached"
    assert "| good | alpha_c(omega=0.3) | 1.23457 |" in (out / "SUMMARY.md").read_text()

    # a deleted figure makes its piece run again
    fake["reset"]()
    (out / "sub" / "other.png").unlink()
    rp.run_reproduce(["other", "good"], out=out, quick=True, progress=False, log=lambda m: None)
    assert fake["calls"]() == ["other:quick"]

    # full mode has its own cache entries
    fake["reset"]()
    rep = rp.run_reproduce(["other"], out=out, quick=False, progress=False, log=lambda m: None)
    assert fake["calls"]() == ["other:full"]
    assert "| other | n | 1000 |" in (out / "SUMMARY.md").read_text()

    # force ignores the cache
    fake["reset"]()
    rp.run_reproduce(["good"], out=out, quick=True, force=True, progress=False, log=lambda m: None)
    assert fake["calls"]() == ["good:quick"]


def test_cache_key_follows_source_and_version(fake, monkeypatch):
    out = fake["out"]
    rp.run_reproduce(["good"], out=out, progress=False, log=lambda m: None)
    fake["reset"]()
    rp.run_reproduce(["good"], out=out, progress=False, log=lambda m: None)
    assert fake["calls"]() == []
    # editing the module that defines the piece invalidates its cache
    fake["file"].write_text(FAKE + "\n# an edit\n")
    rp.run_reproduce(["good"], out=out, progress=False, log=lambda m: None)
    assert fake["calls"]() == ["good:quick"]
    # a summary written when the piece is not selected shows the run of the earlier code as
    # such, not as current; another mode, or a deleted figure, has none to show
    fake["file"].write_text(FAKE + "\n# a second edit\n")
    rep = rp.run_reproduce(["other"], out=out, progress=False, log=lambda m: None)
    good = {o.name: o for o in rep.outcomes}["good"]
    assert good.status.startswith("earlier code (20") and good.numbers[0]["value"] == 1.23456789
    summary = (out / "SUMMARY.md").read_text()
    assert "| good | alpha_c(omega=0.3) | 1.23457 |" in summary and "earlier code (20" in summary
    rep = rp.run_reproduce(["other"], out=out, quick=False, progress=False, log=lambda m: None)
    assert {o.name: o.status for o in rep.outcomes}["good"] == "not run"
    (out / "good.png").unlink()
    rep = rp.run_reproduce(["other"], out=out, progress=False, log=lambda m: None)
    assert {o.name: o.status for o in rep.outcomes}["good"] == "not run"
    # so does a new package version
    fake["reset"]()
    monkeypatch.setattr(rp, "__version__", "99.0")
    rp.run_reproduce(["good"], out=out, progress=False, log=lambda m: None)
    assert fake["calls"]() == ["good:quick"]


PKG_FIGS = textwrap.dedent("""
    from pathlib import Path


    def fig(out_dir, quick):
        from PKG import helper  # a function-local import counts too

        p = Path(out_dir) / "fig.png"
        p.write_bytes(b"x")
        with open(Path(__file__).with_name("calls"), "a") as fh:
            fh.write("fig\\n")
        return dict(files=[p], numbers=[dict(name="v", value=helper.VALUE, how="helper")])


    FIGURES = {"pkg-fig": fig}
""")


def test_cache_key_follows_every_imported_module(tmp_path, monkeypatch):
    """Editing a module that the figure module imports (not only the figure module itself)
    invalidates the cached piece; editing an unrelated module does not."""
    pkg = f"pkgfigs_{uuid.uuid4().hex[:8]}"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "figs.py").write_text(PKG_FIGS.replace("PKG", pkg))
    (root / "helper.py").write_text("VALUE = 1.0\n")
    (root / "unrelated.py").write_text("X = 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = root / "calls"
    out = tmp_path / "figs"

    def run():
        rp.run_reproduce(out=out, modules=[f"{pkg}.figs"], progress=False, log=lambda m: None)
        n = len(calls.read_text().split()) if calls.exists() else 0
        calls.unlink(missing_ok=True)
        return n

    try:
        assert run() == 1
        assert run() == 0  # cached
        (root / "unrelated.py").write_text("X = 1\n")
        assert run() == 0
        (root / "helper.py").write_text("VALUE = 2.0\n")
        assert run() == 1
        assert f"{pkg}.helper" in rp.source_closure(f"{pkg}.figs")
        assert "theory.plotting" in rp.source_closure("theory.reproduce")  # a local import
    finally:
        for m in [m for m in sys.modules if m.startswith(pkg)]:
            sys.modules.pop(m)


def test_selection_by_name_and_pattern(fake):
    out = fake["out"]
    rep = rp.run_reproduce(["oth*"], out=out, progress=False, log=lambda m: None)
    assert fake["calls"]() == ["other:quick"]
    status = {o.name: o.status for o in rep.outcomes}
    assert status == {"good": "not run", "other": "ok", "broken": "not run", "liar": "not run"}
    assert rep.failed == []
    with pytest.raises(ValueError, match="no figure called 'nope'"):
        rp.run_reproduce(["nope"], out=out, progress=False, log=lambda m: None)


def test_workers_run_in_processes(fake):
    rep = rp.run_reproduce(
        ["good", "other", "broken"], out=fake["out"], workers=2, progress=False, log=lambda m: None
    )
    status = {o.name: o.status for o in rep.outcomes}
    assert status["good"] == "ok" and status["other"] == "ok" and status["broken"] == "failed"
    assert "boom" in {o.name: o for o in rep.outcomes}["broken"].error


FACTORY = textwrap.dedent('''
    """Pieces made by a factory: closures that pickle cannot find by their names."""
    from pathlib import Path


    def _piece(tag):
        def piece(out_dir, quick):
            p = Path(out_dir) / f"{tag}.txt"
            p.write_text(tag)
            return dict(files=[str(p)], numbers=[dict(name="tag", value=tag, how="factory")])

        piece.__name__ = piece.__qualname__ = f"fig_{tag}"  # not an attribute of the module
        return piece


    FIGURES = {"made-a": _piece("a"), "made-b": _piece("b")}
''')


def test_a_pool_runs_pieces_made_by_a_factory(tmp_path, monkeypatch):
    # the pool is sent the piece's module and name, not the function: the SGD equal-step gain
    # and fraction-positional pieces are closures, which a process pool could not pickle
    name = f"fake_factory_{uuid.uuid4().hex[:8]}"
    src = tmp_path / "mods"
    src.mkdir()
    (src / f"{name}.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setattr(rp, "FIGURE_MODULES", (name,))
    try:
        rep = rp.run_reproduce(out=tmp_path / "figs", workers=2, progress=False, log=lambda m: None)
    finally:
        sys.modules.pop(name, None)
    assert {o.name: o.status for o in rep.outcomes} == {"made-a": "ok", "made-b": "ok"}
    assert (tmp_path / "figs" / "a.txt").read_text() == "a"


def test_cli(fake, capsys):
    from theory.cli import main

    out = str(fake["out"])
    assert main(["reproduce", "--list", "--out", out, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in listed["figures"]] == ["good", "other", "broken", "liar"]

    assert main(["reproduce", "good", "other", "--out", out, "--no-progress", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["failed"] == [] and payload["mode"] == "quick"
    assert main(["reproduce", "broken", "--out", out, "--no-progress"]) == 1
    assert "failed" in capsys.readouterr().out
    assert main(["reproduce", "nope", "--out", out, "--no-progress"]) == 2
    assert "no figure called" in capsys.readouterr().err


SLOW = textwrap.dedent("""
    import time
    from pathlib import Path


    def quick_one(out_dir, quick):
        p = Path(out_dir) / "one.png"
        p.write_bytes(b"1")
        return dict(files=[p], numbers=[dict(name="first", value=1.5, how="instant")])


    def slow_one(out_dir, quick):
        (Path(out_dir) / "slow-started").write_text("")
        time.sleep(120)
        return dict(files=[], numbers=[])


    FIGURES = {"quick-one": quick_one, "slow-one": slow_one}
""")


def test_sigterm_keeps_finished_pieces(tmp_path):
    """A run stopped by SIGTERM writes SUMMARY.md with what finished; a rerun reuses it."""
    import os
    import signal
    import subprocess
    import time

    name = f"slow_figs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(SLOW)
    out = tmp_path / "figs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    cmd = [
        sys.executable,
        "-m",
        "theory",
        "reproduce",
        "--module",
        name,
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.time()
    while not (out / "slow-started").exists():
        assert time.time() - t0 < 60 and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    summary = (out / "SUMMARY.md").read_text()
    assert "| quick-one | first | 1.5 | instant |" in summary
    assert "| slow-one |" in summary and "not run" in summary
    # the finished piece is cached: --list shows it
    res = subprocess.run(
        cmd[:-1] + ["--list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    listed = {r["name"]: r["cached"] for r in json.loads(res.stdout)["figures"]}
    assert listed == {"quick-one": True, "slow-one": False}


def test_every_package_piece_says_what_it_reproduces(capsys):
    """Each of the package's own pieces names its paper, its figure and the files it writes,
    and ``--list --json`` prints them (issue 12 §1)."""
    from theory.cli import main
    from theory.plotting import PAPERS

    pieces = rp.discover()
    for p in pieces.values():
        d = p.describe()
        assert d["paper"] in PAPERS, p.name
        assert d["ref"] and d["what"], p.name
        assert d["files"] and all("/" not in f for f in d["files"]), p.name
    assert main(["reproduce", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["figures"]
    assert [r["name"] for r in rows] == list(pieces)
    assert all({"name", "paper", "ref", "files"} <= set(r) for r in rows)


def test_reproduces_rejects_an_unknown_paper_and_an_empty_ref():
    from theory.plotting import reproduces

    with pytest.raises(ValueError, match="paper must be one of"):
        reproduces("nature2099", "Fig. 1", "x", ["a.png"])
    with pytest.raises(ValueError, match="non-empty ref"):
        reproduces("beyond", "", "x", ["a.png"])
    with pytest.raises(ValueError, match="at least one file"):
        reproduces("beyond", "Fig. 1", "x", [])


def test_quick_and_full_write_to_their_own_folders():
    assert rp.default_out(True).as_posix() == "figures/quick"
    assert rp.default_out(False).as_posix() == "figures/full"


def test_a_piece_that_does_not_write_what_it_declares_fails(tmp_path, monkeypatch):
    name = f"fake_decl_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent("""
        from pathlib import Path
        from theory.plotting import reproduces

        @reproduces("beyond", "Fig. 0", "a check", ["a.png", "b.png"])
        def half(out_dir, quick):
            p = Path(out_dir) / "a.png"
            p.write_bytes(b"x")
            return dict(files=[p], numbers=[])

        FIGURES = {"half": half}
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        rep = rp.run_reproduce(
            out=tmp_path / "out", modules=[name], progress=False, log=lambda m: None
        )
    finally:
        sys.modules.pop(name, None)
    (o,) = rep.outcomes
    assert o.status == "failed" and "b.png" in o.error and o.ref == "Fig. 0"


SLOW2 = SLOW.replace(
    'FIGURES = {"quick-one": quick_one, "slow-one": slow_one}',
    textwrap.dedent("""
        def slow_two(out_dir, quick):
            (Path(out_dir) / "slow-two-started").write_text("")
            time.sleep(120)
            return dict(files=[], numbers=[])


        FIGURES = {"quick-one": quick_one, "slow-one": slow_one, "slow-two": slow_two}
    """),
)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_stops_a_pool_run_and_its_workers(tmp_path, sig):
    """``theory reproduce --workers 2`` stopped by SIGTERM (or SIGINT) while both workers run a
    piece: within seconds no process of its group is left (it used to wait for the running
    pieces -- 120 s here -- and a worker outlived a second SIGTERM); the finished piece stays
    cached, and the rerun reuses it and runs the rest."""
    import os
    import signal
    import subprocess
    import time

    name = f"slow_figs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(SLOW2)
    out = tmp_path / "figs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    cmd = [sys.executable, "-m", "theory", "reproduce", "--module", name, "--out", str(out)]
    cmd += ["--no-progress", "--workers", "2"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    cache = out / rp.CACHE_DIR / rp.CACHE_NAME
    try:
        t0 = time.time()
        while not (
            (out / "slow-started").exists()
            and (out / "slow-two-started").exists()
            and cache.exists()
            and b"quick-one" in cache.read_bytes()
        ):
            assert time.time() - t0 < 120 and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        t_sig = time.time()
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=30)
        # 10 s: the pieces sleep 120 s, so anything that waits for them fails; a loaded CI
        # machine needs a few seconds to reap two processes and write SUMMARY.md
        while True:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            assert time.time() - t_sig < 10, "a process of the run outlived it"
            time.sleep(0.05)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 130, err
    summary = (out / "SUMMARY.md").read_text()
    assert "| quick-one | first | 1.5 | instant |" in summary
    res = subprocess.run(
        cmd[:-2] + ["--list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    listed = {r["name"]: r["cached"] for r in json.loads(res.stdout)["figures"]}
    assert listed == {"quick-one": True, "slow-one": False, "slow-two": False}


@pytest.mark.slow
def test_sigkill_mid_piece_loses_no_finished_seed(tmp_path):
    """SIGKILL a real simulation piece while its seeds run; the rerun keeps every finished
    seed (the rows before the kill are a byte-identical prefix of the final store) and runs
    each missing seed once (as many rows as distinct keys), then finishes the piece."""
    import os
    import signal
    import subprocess
    import time

    piece = "sgd-fraction-positional"
    out = tmp_path / "figs"
    cmd = [sys.executable, "-m", "theory", "reproduce", "--quick", piece, "--out", str(out)]
    cmd.append("--no-progress")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.time()
    runs = None
    while runs is None or runs.read_bytes().count(b"\n") < 3:
        runs = next(iter((out / ".sgd-runs").glob("*.jsonl")), None)
        assert proc.poll() is None and time.time() - t0 < 600, proc.communicate()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = runs.read_bytes()
    before = before[: before.rfind(b"\n") + 1]  # a torn last line is not a finished seed
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-2000:]
    after = runs.read_bytes()
    assert after.startswith(before)
    keys = [json.loads(line)["_key"] for line in after.decode().splitlines() if line.strip()]
    assert len(keys) == len(set(keys)) > before.count(b"\n")


def test_pieces_run_on_any_executor_and_on_dask(fake):
    """The same pieces, run concurrently on a thread pool and on a Dask cluster, give the same
    numbers as in series; the second run reads everything from the cache."""
    import concurrent.futures as cf

    serial = rp.run_reproduce(out=fake["out"] / "a", progress=False, log=lambda m: None)
    with cf.ThreadPoolExecutor(2) as ex:
        pooled = rp.run_reproduce(
            out=fake["out"] / "b", progress=False, log=lambda m: None, executor=ex
        )
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
    ) as cluster:
        on_dask = rp.run_reproduce(
            out=fake["out"] / "c",
            progress=False,
            log=lambda m: None,
            scheduler=cluster.scheduler_address,
        )
        again = rp.run_reproduce(
            out=fake["out"] / "c",
            progress=False,
            log=lambda m: None,
            scheduler=cluster.scheduler_address,
        )

    def numbers(rep):
        return {o.name: (o.status, o.numbers) for o in rep.outcomes}

    assert numbers(serial) == numbers(pooled) == numbers(on_dask)
    assert {o.name: o.status for o in again.outcomes}["good"] == "cached"


def test_list_schedule_is_the_makespan_of_a_pool_taking_pieces_in_order():
    # by hand: 5 -> w1, 4 -> w2, 3 -> w2 (7), 3 -> w1 (8), 3 -> w2 (10)
    assert rp.list_schedule([5, 4, 3, 3, 3], 2) == 10
    assert rp.list_schedule([5, 4, 3, 3, 3], 1) == 18
    assert rp.list_schedule([1, 1, 1, 1], 3) == 2
    assert rp.list_schedule([], 2) == 0
    with pytest.raises(ValueError, match="workers"):
        rp.list_schedule([1.0], 0)


CUT = textwrap.dedent("""
    from pathlib import Path
    from theory.plotting import reproduces


    @reproduces("cui2024", "Fig. 9", "a cut piece", ["cut.png"], cut="2 of 10 seeds: +1 CPU-h")
    def cut(out_dir, quick):
        (Path(out_dir) / "cut.png").write_bytes(b"x")
        return dict(files=["cut.png"], numbers=[])


    @reproduces("beyond", "check", "an uncut piece", ["whole.png"], cost=500)
    def whole(out_dir, quick):
        (Path(out_dir) / "whole.png").write_bytes(b"x")
        return dict(files=["whole.png"], numbers=[])


    FIGURES = {"cut": cut, "whole": whole}
""")


def test_summary_states_the_compute_budget_and_each_cut(tmp_path, monkeypatch):
    name = f"fake_cut_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(CUT)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        rows = {r["name"]: r for r in rp.list_pieces(tmp_path / "o", False, modules=[name])}
        assert rows["cut"]["cut"] == "2 of 10 seeds: +1 CPU-h" and rows["whole"]["cut"] == ""
        for quick in (False, True):
            rep = rp.run_reproduce(
                out=tmp_path / str(quick),
                quick=quick,
                modules=[name],
                progress=False,
                log=lambda m: None,
            )
            text = (tmp_path / str(quick) / "SUMMARY.md").read_text()
            budget = text.split("## Compute budget", 1)[1].split("## Gallery", 1)[0]
            # full mode: a piece counts at least its stated cost from nothing (whole: 500 s)
            total = sum(max(o.seconds, 0.0 if quick else (o.cost or 0.0)) for o in rep.outcomes)
            assert total > 500 or quick
            assert f"sum to {total:.0f} s" in budget and "over 2 piece(s)" in budget
            assert ("| cut |" in budget and "2 of 10 seeds: +1 CPU-h" in budget) is not quick
            assert ("Target: about 3 h on 2 cores; these times are within it" in budget) is (
                not quick
            )
            assert "| whole |" not in budget
        # an earlier run of "cut" (other code) took 1000 s: the budget counts the longest run
        key = dict(name="cut", mode="full", version="0", source_hash="old")
        rp.open_cache(tmp_path / "False").put(key, dict(seconds=1000.0, result={}, finished="2026"))
        rep = rp.run_reproduce(
            out=tmp_path / "False",
            quick=False,
            modules=[name],
            progress=False,
            log=lambda m: None,
        )
        budget = (tmp_path / "False" / "SUMMARY.md").read_text().split("## Compute budget")[1]
        assert f"sum to {1000 + 500:.0f} s" in budget and "| cut | 1000 |" in budget
    finally:
        sys.modules.pop(name, None)


def test_a_pool_starts_the_longest_recorded_pieces_first(fake):
    import concurrent.futures as cf

    class Recording(cf.Executor):
        """Runs each job at submission and remembers the order."""

        def __init__(self):
            self.order = []

        def submit(self, fn, *args, **kwargs):
            fut = cf.Future()
            self.order.append(args[1])  # _run_named(module, name, out, quick)
            try:
                fut.set_result(fn(*args, **kwargs))
            except Exception as exc:
                fut.set_exception(exc)
            return fut

    out = fake["out"]
    cache = rp.open_cache(out)
    # times recorded by runs of other code: "other" took longer than "good"; the two pieces
    # that never finished have no time and go first, in their own order
    for name, secs in (("good", 1.0), ("other", 5.0)):
        key = dict(name=name, mode="quick", version="0", source_hash="old")
        cache.put(key, dict(module=fake["name"], seconds=secs, result={}, finished="2026"))
    ex = Recording()
    rp.run_reproduce(out=out, progress=False, log=lambda m: None, executor=ex)
    assert ex.order == ["broken", "liar", "other", "good"]


def test_pieces_never_run_in_the_folder_start_by_their_stated_cost():
    # from nothing (no record in the output folder) a full-mode pool orders by the cost each
    # @reproduces states, longest first; a longer recorded run overrides it, a shorter one (a
    # rerun that read stored work) does not -- the budget's rule; a piece with neither goes
    # first (unknown); quick mode ignores the stated (full-mode) cost
    from theory.plotting import Reproduces

    def piece(name, cost):
        meta = Reproduces("beyond", "Fig. 0", "x", ("x.png",), cost=cost)
        return rp.Piece(name, lambda out, quick: None, "m", "h", meta)

    todo = [piece("cheap", 10), piece("unknown", None), piece("dear", 4000), piece("mid", 300)]
    for quick, recorded, order in (
        (False, {}, ["unknown", "dear", "mid", "cheap"]),
        (False, {"cheap": 5000.0}, ["unknown", "cheap", "dear", "mid"]),
        (False, {"dear": 1.0}, ["unknown", "dear", "mid", "cheap"]),
        (True, {"cheap": 1.0}, ["unknown", "dear", "mid", "cheap"]),
    ):
        ranked = sorted(todo, key=lambda p: -rp._expected_seconds(p, recorded, quick))
        assert [p.name for p in ranked] == order


def test_every_registered_piece_states_its_full_cost():
    # so that a full run from nothing starts the long pieces first (the registry order would
    # leave the hour-long histogram pieces to the end)
    missing = [n for n, p in rp.discover().items() if p.meta is None or p.meta.cost is None]
    assert missing == []


def test_the_committed_full_folder_records_every_piece():
    # the record of finished pieces is what lets a fresh checkout rerun one piece and still
    # write every other piece's figure and numbers into SUMMARY.md: it must be in git (not
    # ignored) and hold a run of every registered piece whose files are committed
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    full = root / "figures" / "full"
    record = full / rp.CACHE_DIR / rp.CACHE_NAME
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(record.relative_to(root))], cwd=root
    ).returncode
    assert ignored == 1, f"{record} is ignored by .gitignore"
    cache = rp.open_cache(full)
    missing = [
        n for n, p in rp.discover().items() if rp._load_earlier(cache, full, p, quick=False) is None
    ]
    assert missing == []


def test_a_piece_runs_one_blas_thread_and_the_caller_keeps_its_own():
    # in this process (workers = 1), where the caller's OpenBLAS may run one thread per core:
    # the piece sees one thread, and the caller's count is restored after it
    from theory._util import _openblas_handles, blas_threads

    handles = _openblas_handles()
    if not handles:
        pytest.skip("no OpenBLAS found to query")
    seen = []

    def piece(out_dir, quick):
        seen.append([int(get()) for get, _ in handles])
        return dict(files=[], numbers=[])

    with blas_threads(2):  # the caller's count, whatever this machine's default
        rp._run_piece(piece, ".", True)
        after = [int(get()) for get, _ in handles]
    assert seen == [[1] * len(handles)]
    assert after == [2] * len(handles)
