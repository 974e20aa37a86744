"""The result store: keyed rows survive a torn write, keys are canonical, arrays round-trip,
and processes sharing a folder split its items (claim, each_once)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from theory.store import ArrayStore, Store, point_key


def test_store_resumes_after_a_torn_last_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    s = Store(path)
    s.put(dict(alpha=2.0, seed=0), dict(eps_g=0.5))
    s.put(dict(alpha=2.0, seed=1), dict(eps_g=0.25))
    # a writer killed in the middle of a line leaves a partial trailing line
    with open(path, "ab") as fh:
        fh.write(b'{"alpha": 3.0, "seed": 0, "eps_')
    back = Store(path)
    assert len(back) == 2
    assert back.get(dict(seed=1, alpha=2.0)) == dict(alpha=2.0, seed=1, eps_g=0.25)
    assert back.get(dict(alpha=3.0, seed=0)) is None
    back.put(dict(alpha=3.0, seed=0), dict(eps_g=0.125))  # appends after repairing the file
    again = Store(path)
    assert len(again) == 3 and again.get(dict(alpha=3.0, seed=0))["eps_g"] == 0.125
    # the last row stored under a key wins
    again.put(dict(alpha=2.0, seed=0), dict(eps_g=0.75))
    assert Store(path).get(dict(alpha=2.0, seed=0))["eps_g"] == 0.75
    assert path.read_bytes().endswith(b"\n")


def test_keys_are_canonical():
    assert point_key(dict(a=0.1 + 0.2, b="x")) == point_key(dict(b="x", a=0.3))
    assert point_key(dict(a=0.3)) != point_key(dict(a=0.3000001))
    s = Store()  # in memory
    s.put(dict(a=0.1 + 0.2), dict(v=1))
    assert dict(a=0.3) in s and s.get(dict(a=0.3))["v"] == 1
    with pytest.raises(ValueError, match="jsonl"):
        Store("table.csv")


def test_array_store_round_trip_and_key_check(tmp_path):
    a = ArrayStore(tmp_path, prefix="tab")
    x = np.arange(6.0).reshape(2, 3)
    path = a.save(dict(k=1, name="x"), x=x, n=np.int64(3))
    assert path.name.startswith("tab-") and path.suffix == ".npz"
    got = a.load(dict(name="x", k=1))
    np.testing.assert_array_equal(got["x"], x)
    assert int(got["n"]) == 3
    assert a.load(dict(k=2, name="x")) is None
    # a file whose stored key is another one reads as missing (stale file, hash collision)
    other = ArrayStore(tmp_path, prefix="tab")
    path.write_bytes(path.read_bytes())  # unchanged copy is still valid
    assert other.load(dict(k=1, name="x")) is not None
    other.path(dict(k=9)).write_bytes(path.read_bytes())
    assert other.load(dict(k=9)) is None
    # a half-written file is never left behind: no temporary files remain
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match="reserved"):
        a.save(dict(k=3), _key=np.zeros(1))


def _split_work(args):
    """One worker of test_each_once_splits_items_between_processes: 'compute' each item (a
    file holding this worker's id, written after a pause) unless it is already there."""
    import time as _time

    from theory.store import each_once

    folder, worker, items = args
    folder = Path(folder)

    def do(item):
        out = folder / f"{item}.txt"
        if out.exists():  # another worker's output: load it, do not recompute
            return
        _time.sleep(0.3)
        out.write_text(worker)
        with open(folder / "log.txt", "a") as f:
            f.write(f"{item} {worker}\n")

    each_once(items, lambda item: folder / f"{item}.txt", do, poll=0.05)
    return sorted((folder / f"{i}.txt").read_text() for i in items)


def test_each_once_splits_items_between_processes(tmp_path):
    # two processes given the same 6 items: every item is computed exactly once, both end
    # with every output, and the work is shared (each computed some)
    import multiprocessing as mp

    items = [f"item{k}" for k in range(6)]
    with mp.get_context("spawn").Pool(2) as pool:
        outs = pool.map(_split_work, [(str(tmp_path), w, items) for w in ("a", "b")])
    log = (tmp_path / "log.txt").read_text().split()
    done = log[0::2]
    assert sorted(done) == items  # each item once
    assert outs[0] == outs[1] and len(outs[0]) == 6
    assert set(log[1::2]) == {"a", "b"}  # both workers computed some


def test_a_claim_is_exclusive_and_released(tmp_path):
    from theory.store import claim

    target = tmp_path / "x.npz"
    with claim(target) as first:
        with claim(target) as second:  # another descriptor: flock excludes it, as another
            assert (first, second) == (True, False)  # process would be
    with claim(target) as again:
        assert again
    assert not target.exists() and (tmp_path / ".locks" / "x.npz.lock").exists()
