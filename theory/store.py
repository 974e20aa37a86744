"""The result store: everything computed is kept on disk as soon as it is finished.

One mechanism serves the sweeps, the figure pipeline, the simulation and theory caches and the
long runs, so that an interrupted computation resumes from what is on disk:

* :class:`ResultTable` -- an append-only table (``.csv`` or ``.jsonl``).  Each row is one line,
  written with a single ``write`` on an ``O_APPEND`` descriptor and fsync'd; a partial trailing
  line left by a killed writer is dropped on the next read or append.  ``theory sweep`` writes
  its output through it.
* :class:`Store` -- a keyed store on top of a JSON-lines :class:`ResultTable`: ``put(key, row)``
  appends the key's fields and the row's, ``get(key)`` returns the last row written under
  ``key``.  Keys are dicts of the
  parameters that identify a computation, made canonical by :func:`point_key` (floats to 12
  significant digits, sorted names).
* :class:`ArrayStore` -- numpy arrays under a key, one ``.npz`` per key written atomically
  (temporary file + rename): tables of the SGD risk, training checkpoints.
* :func:`claim` and :func:`each_once` -- so that processes sharing an output folder (the
  workers of ``theory reproduce --full --workers N``) never compute the same item twice: a
  worker claims an item (an advisory lock on a file in ``.locks/`` beside its output), skips the
  items others hold, and loads those once they are done.

:func:`cache_dir` is the package's cache folder (``$THEORY_CACHE_DIR``, default
``~/.cache/theory``) for results that are not tied to one output folder.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from theory._util import atomic_write_bytes, atomic_write_text, to_jsonable

KEY_COLUMN = "_key"

__all__ = [
    "KEY_COLUMN",
    "ArrayStore",
    "ResultTable",
    "Store",
    "cache_dir",
    "claim",
    "each_once",
    "point_key",
    "read_table",
    "write_table",
]


def cache_dir() -> Path:
    """The package's cache folder: ``$THEORY_CACHE_DIR`` or ``~/.cache/theory``."""
    return Path(os.environ.get("THEORY_CACHE_DIR", Path.home() / ".cache" / "theory"))


@contextlib.contextmanager
def claim(path) -> Iterator[bool]:
    """Try to claim the item whose output is ``path`` for this process, without waiting.

    Yields True if claimed (an exclusive advisory lock on ``.locks/<name>.lock`` beside
    ``path``, held until the block ends and released if the process dies), False if another
    process holds it. Where advisory
    locks do not exist (not POSIX) every claim succeeds: the processes may then duplicate work,
    never corrupt it, since the outputs are written atomically.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    path = Path(path)
    lock = path.parent / ".locks" / f"{path.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def each_once(items: Iterable, path_of: Callable, do: Callable, *, poll: float = 5.0) -> None:
    """Call ``do(item)`` for every item, in a way that processes sharing the items' outputs
    split the work: each item is done under :func:`claim` of ``path_of(item)`` by whichever
    process gets it first; an item another process holds is skipped and retried every ``poll``
    seconds (``do`` must then load the other process's output rather than recompute it, e.g.
    by checking the output first)."""
    pending = list(items)
    while pending:
        for item in list(pending):
            with claim(path_of(item)) as mine:
                if mine:
                    do(item)
                    pending.remove(item)
        if pending:
            time.sleep(poll)


def point_digest(point: Mapping) -> str:
    """A short file-name-safe name of a point: 16 hex digits of the SHA-256 of its
    :func:`point_key`."""
    return hashlib.sha256(point_key(point).encode()).hexdigest()[:16]


def point_key(point: Mapping, key=None) -> str:
    """The identity of a point in the table: canonical JSON of its identifying parameters.

    ``key`` is ``None`` (all parameters), a sequence of parameter names, or a callable
    ``point -> str``.
    """
    if callable(key):
        return str(key(dict(point)))
    if key is None:
        sub = point
    else:
        names = [key] if isinstance(key, str) else list(key)
        missing = [n for n in names if n not in point]
        if missing:
            raise ValueError(f"key names {missing} are not parameters of the grid point {point}")
        sub = {n: point[n] for n in names}
    return json.dumps(_canonical(to_jsonable(dict(sub))), sort_keys=True, separators=(",", ":"))


def _canonical(v):
    """Floats rounded to 12 significant digits, so 0.1 + 0.1 and 0.2 name the same point
    (``--alphas 0.1:0.3:3`` and ``--alphas 0.1,0.2,0.3`` share their table rows)."""
    if isinstance(v, float):
        return float(f"{v:.12g}")
    if isinstance(v, dict):
        return {k: _canonical(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_canonical(x) for x in v]
    return v


def _cell(v) -> str:
    """A CSV cell: numbers by repr (round-trip exact), None empty, containers as JSON."""
    v = to_jsonable(v)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _parse_cell(s: str):
    """Inverse of :func:`_cell` (best effort: strings that look like numbers become numbers)."""
    if s == "":
        return None
    if s == "true":
        return True
    if s == "false":
        return False
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        pass
    if s[:1] in "[{":
        try:
            return json.loads(s)
        except ValueError:
            pass
    return s


class ResultTable:
    """An append-only result table (``.csv`` or ``.jsonl``/``.json``/``.ndjson``).

    Every appended row is one line written with a single ``os.write`` on an ``O_APPEND``
    descriptor and fsync'd.  A partial trailing line (a writer killed mid-write) is dropped by
    :meth:`repair` before the next append.
    """

    def __init__(self, path):
        self.path = Path(path)
        suf = self.path.suffix.lower()
        if suf == ".csv":
            self.format = "csv"
        elif suf in (".jsonl", ".ndjson", ".json"):
            self.format = "jsonl"
        else:
            raise ValueError(
                f"cannot tell the table format from {self.path.name!r}: use a .csv or .jsonl file"
            )
        self.columns: list[str] | None = None

    # -- reading ----------------------------------------------------------------------------
    def _complete_text(self) -> str:
        if not self.path.exists():
            return ""
        data = self.path.read_bytes()
        cut = data.rfind(b"\n")
        return data[: cut + 1].decode("utf-8") if cut >= 0 else ""

    def read(self) -> list[dict]:
        """All complete rows (a partial trailing line is ignored)."""
        text = self._complete_text()
        if not text:
            return []
        if self.format == "jsonl":
            rows = []
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # a corrupt line (should not happen: lines are written whole)
                if isinstance(obj, dict):
                    rows.append(obj)
            return rows
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader)
        except StopIteration:
            return []
        self.columns = header
        rows = []
        for rec in reader:
            if len(rec) != len(header):
                continue
            rows.append(
                {h: (c if h == KEY_COLUMN else _parse_cell(c)) for h, c in zip(header, rec)}
            )
        return rows

    # -- writing ----------------------------------------------------------------------------
    def repair(self) -> None:
        """Drop a partial trailing line left by a killed writer."""
        if not self.path.exists():
            return
        size = self.path.stat().st_size
        if size == 0:
            return
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if data.endswith(b"\n"):
                return
            cut = data.rfind(b"\n")
            fh.truncate(cut + 1 if cut >= 0 else 0)
            fh.flush()
            os.fsync(fh.fileno())

    def _append_bytes(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # one write in practice; loop only guards against short writes
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, row: Mapping) -> None:
        row = to_jsonable(dict(row))
        if self.format == "jsonl":
            self._append_bytes((json.dumps(row, separators=(",", ":")) + "\n").encode())
            return
        if self.columns is None:
            self.read()  # sets self.columns from the header of an existing table
            if self.columns is None:  # new or empty file: header and row in one write
                self.columns = list(row)
                buf = io.StringIO()
                w = csv.writer(buf, lineterminator="\n")
                w.writerow(self.columns)
                w.writerow([_cell(row.get(c)) for c in self.columns])
                self._append_bytes(buf.getvalue().encode())
                return
        new = [c for c in row if c not in self.columns]
        if new:
            self._widen(new)
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([_cell(row.get(c)) for c in self.columns])
        self._append_bytes(buf.getvalue().encode())

    def _widen(self, new_columns: list[str]) -> None:
        """A row brought new columns: rewrite the CSV with the wider header, atomically."""
        rows = self.read()
        cols = [c for c in self.columns if c != KEY_COLUMN] + new_columns
        if KEY_COLUMN in self.columns:
            cols.append(KEY_COLUMN)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in cols])
        atomic_write_text(self.path, buf.getvalue())
        self.columns = cols


def read_table(path) -> list[dict]:
    """Read a table into a list of dicts, dropping the ``_key`` column: CSV, JSON lines (also a
    ``.json`` file holding one JSON array of objects), or, if pandas is installed, any other file
    pandas reads (Excel, Parquet, ...).  A missing file raises OSError; an unreadable one
    ValueError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no table at {str(path)!r}")
    suf = path.suffix.lower()
    if suf == ".json" and path.read_text(encoding="utf-8").lstrip().startswith("["):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"cannot read {path.name!r} as JSON: {exc}") from None
        if not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{path.name!r} must hold a JSON array of objects (one per row)")
    elif suf in (".csv", ".jsonl", ".ndjson", ".json"):
        rows = ResultTable(path).read()
    else:
        rows = _read_pandas(path)
    for r in rows:
        r.pop(KEY_COLUMN, None)
    return rows


def _read_pandas(path: Path) -> list[dict]:
    try:
        import pandas as pd
    except ImportError:
        raise ValueError(
            f"cannot read {path.name!r}: give a .csv or .jsonl file (other formats need pandas, "
            "which is not installed)"
        ) from None
    readers = {
        ".xlsx": pd.read_excel,
        ".xls": pd.read_excel,
        ".parquet": pd.read_parquet,
        ".feather": pd.read_feather,
        ".tsv": lambda p: pd.read_csv(p, sep="\t"),
        ".txt": lambda p: pd.read_csv(p, sep=None, engine="python"),
        ".pkl": pd.read_pickle,
        ".pickle": pd.read_pickle,
    }
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise ValueError(
            f"cannot tell the table format of {path.name!r}: use .csv, .jsonl, .json or one of "
            f"{sorted(readers)} (with pandas)"
        )
    try:
        frame = reader(path)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"cannot read {path.name!r} with pandas: {exc}") from None
    return [to_jsonable(r) for r in frame.to_dict(orient="records")]


def write_table(path, rows) -> Path:
    """Write ``rows`` (dicts) atomically as a table whose format follows the extension: CSV
    (``.csv``; the columns in order of first appearance, numbers exact, None empty) or JSON
    lines (``.jsonl``, ``.ndjson``, ``.json``) -- the formats :func:`read_table` reads back."""
    fmt = ResultTable(path).format  # ValueError for an unknown extension
    rows = [to_jsonable(dict(r)) for r in rows]
    if fmt == "jsonl":
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    else:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in cols])
        text = buf.getvalue()
    return atomic_write_text(path, text)


class Store:
    """A keyed, append-only store of result rows (JSON lines), resumable after a kill.

    >>> store = Store("runs.jsonl")                                      # doctest: +SKIP
    >>> row = store.get(dict(alpha=2.0, seed=0))                         # doctest: +SKIP
    >>> if row is None:                                                  # doctest: +SKIP
    ...     row = store.put(dict(alpha=2.0, seed=0), simulate(...).row())

    ``path=None`` keeps the rows in memory only (same interface).  The file is read once, when
    the store is opened; rows appended later by another process are not seen.
    """

    def __init__(self, path=None):
        self.table = None if path is None else ResultTable(path)
        if self.table is not None and self.table.format != "jsonl":
            raise ValueError(f"a Store is a JSON-lines file (.jsonl), got {path!r}")
        self._rows: dict[str, dict] = {}
        if self.table is not None:
            self.table.repair()
            for r in self.table.read():
                k = r.pop(KEY_COLUMN, None)
                if k is not None:
                    self._rows[str(k)] = r

    @property
    def path(self) -> Path | None:
        return None if self.table is None else self.table.path

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key) -> bool:
        return point_key(key) in self._rows

    def get(self, key: Mapping, default=None):
        """The last row stored under ``key`` (a dict of identifying parameters), or ``default``."""
        return self._rows.get(point_key(key), default)

    def put(self, key: Mapping, row: Mapping) -> dict:
        """Store ``row`` under ``key`` (appended and fsync'd at once).  The stored row holds the
        key's fields followed by the row's (a row field of the same name wins); it is returned."""
        k = point_key(key)
        row = to_jsonable({**dict(key), **dict(row)})
        self._rows[k] = row
        if self.table is not None:
            self.table.append({**row, KEY_COLUMN: k})
        return row

    def rows(self) -> list[dict]:
        """Every stored row (the last one per key), in the order first stored."""
        return list(self._rows.values())


class ArrayStore:
    """Named numpy arrays under a key: one ``.npz`` file per key in ``folder``, written
    atomically, so a half-written file never replaces a good one.

    File names are ``<prefix>-<hash of the canonical key>.npz``; the key itself is stored in the
    file and checked on load (a hash collision or a stale file reads as missing).
    """

    def __init__(self, folder, prefix: str = "arrays"):
        self.folder = Path(folder)
        self.prefix = prefix

    def path(self, key: Mapping) -> Path:
        return self.folder / f"{self.prefix}-{point_digest(key)}.npz"

    def load(self, key: Mapping) -> dict[str, np.ndarray] | None:
        """The arrays stored under ``key``, or None (missing, unreadable or another key)."""
        try:
            with np.load(self.path(key), allow_pickle=False) as z:
                if str(z[KEY_COLUMN]) != point_key(key):
                    return None
                return {k: z[k] for k in z.files if k != KEY_COLUMN}
        except (OSError, KeyError, ValueError):
            return None

    def save(self, key: Mapping, **arrays) -> Path:
        """Store ``arrays`` under ``key``; returns the file written."""
        if KEY_COLUMN in arrays:
            raise ValueError(f"{KEY_COLUMN!r} is reserved: rename that array")
        buf = io.BytesIO()
        np.savez(
            buf,
            **{KEY_COLUMN: np.array(point_key(key))},
            **{k: np.asarray(v) for k, v in arrays.items()},
        )
        return atomic_write_bytes(self.path(key), buf.getvalue())
