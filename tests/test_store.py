"""The result store: keyed rows survive a torn write, keys are canonical, arrays round-trip."""

from __future__ import annotations

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
