"""``theory reproduce``: regenerate the figures and the headline numbers of the papers.

Every figure module listed in :data:`FIGURE_MODULES` exposes ``FIGURES: dict[str, callable]``;
each entry ``fn(out_dir: Path, quick: bool) -> dict(files=[...], numbers=[dict(name, value,
how)])`` writes its figure(s) into ``out_dir`` and returns the headline numbers it computed, each
with one sentence saying how (method, sizes, seeds).  This module

* discovers those entries; a figure module that fails to import, or has no ``FIGURES``, is an
  error (``ValueError``), never a silent skip;
* runs the requested ones (all by default) in this process or in ``workers`` processes, with a
  progress bar, isolating failures: a piece that raises is reported failed with its error and
  the others still run;
* keeps each finished piece's returned dict in the result store ``<out>/.cache/pieces.jsonl``
  (:class:`theory.store.Store`), keyed by the piece's name, the mode (quick/full), the package
  version and the source of EVERY module of the package the piece's module imports, directly or
  not (found by reading the import statements, including those inside functions), so editing a
  model invalidates the figures that use it.  A rerun reuses a cached piece if every file it
  lists still exists.  The committed ``figures/full`` keeps this record in git, so a checkout
  that reruns one piece still lists every other in its SUMMARY.md;
* writes ``<out>/SUMMARY.md`` (atomically): the table of headline numbers with their "how", the
  status and time of every piece.  A piece not run now and not cached for the current code,
  whose newest run with earlier code left its files, is listed with that run's figure and
  numbers under the status "earlier code (<date time>)", never passed off as current.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import fnmatch
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from theory import __version__
from theory._util import (
    atomic_write_text,
    blas_threads,
    interrupt_flag,
    local_pool,
    stop_pool,
    to_jsonable,
    wait_first,
)
from theory.plotting import Reproduces
from theory.store import Store

FIGURE_MODULES: tuple[str, ...] = (
    "theory.ssi.figures.sie",
    "theory.attention.figures.theory",
    "theory.attention.figures.simulation",
    "theory.attention.figures.metastability",
    "theory.attention.figures.small_omega",
    "theory.attention.figures.rank2",
    "theory.ssi.figures.phase",
    "theory.ssi.figures.sgd",
    "theory.ssi.figures.gain",
    "theory.ssi.figures.equal_gain",
    "theory.ssi.figures.injected",
    "theory.ssi.figures.overdriven",
    "theory.histogram.figures",
)

CACHE_DIR = ".cache"
#: the status of a piece not run now whose figure and numbers come from a run with other code
EARLIER = "earlier code"
CACHE_NAME = "pieces.jsonl"
SUMMARY_NAME = "SUMMARY.md"

__all__ = [
    "FIGURE_MODULES",
    "Piece",
    "Outcome",
    "Report",
    "discover",
    "select",
    "run_reproduce",
    "cache_key",
    "write_summary",
]


@dataclass(frozen=True)
class Piece:
    """One reproducible figure: its name, the function that makes it, where it is defined, and
    what it reproduces (:class:`theory.plotting.Reproduces`, set by the ``@reproduces``
    decorator; ``None`` for a user's figure that does not say)."""

    name: str
    fn: Callable
    module: str
    source_hash: str
    meta: Reproduces | None = None

    def describe(self) -> dict:
        """``name``, ``paper``, ``ref``, ``what``, ``files``, ``cut``, ``cost`` and ``module``
        of the piece."""
        m = self.meta
        return dict(
            name=self.name,
            paper=m.paper if m else None,
            ref=m.ref if m else None,
            what=m.what if m else None,
            files=list(m.files) if m else [],
            cut=m.cut if m else "",
            cost=m.cost if m else None,
            module=self.module,
        )


@dataclass
class Outcome:
    name: str
    module: str
    status: str  # "ok" | "cached" | "earlier code (<date time>)" | "failed" | "not run"
    seconds: float | None = None
    files: list = field(default_factory=list)
    numbers: list = field(default_factory=list)
    error: str | None = None
    cache_file: str | None = None
    paper: str | None = None
    ref: str | None = None
    what: str | None = None
    cut: str = ""
    cost: float | None = None  # the full-mode cost from nothing the piece states

    @property
    def has_result(self) -> bool:
        """A figure and numbers to show: run now, cached, or kept from earlier code."""
        return self.status in ("ok", "cached") or self.status.startswith(EARLIER)

    def to_dict(self) -> dict:
        return to_jsonable(
            dict(
                name=self.name,
                module=self.module,
                status=self.status,
                seconds=self.seconds,
                files=self.files,
                numbers=self.numbers,
                error=self.error,
                cache_file=self.cache_file,
                paper=self.paper,
                ref=self.ref,
                what=self.what,
                cut=self.cut,
                cost=self.cost,
            )
        )


@dataclass
class Report:
    out: Path
    quick: bool
    outcomes: list[Outcome]
    seconds: float
    summary: Path | None = None

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def to_dict(self) -> dict:
        return to_jsonable(
            dict(
                out=str(self.out),
                mode="quick" if self.quick else "full",
                seconds=self.seconds,
                summary=str(self.summary),
                pieces=[o.to_dict() for o in self.outcomes],
                failed=[o.name for o in self.failed],
            )
        )


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------
def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` found from its top-level package's folder without
    importing anything, or None (not a module: e.g. ``pkg.mod.function``)."""
    parts = name.split(".")
    try:
        top = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if top is None or not top.submodule_search_locations:
        return Path(top.origin) if top is not None and len(parts) == 1 and top.origin else None
    base = Path(next(iter(top.submodule_search_locations))).joinpath(*parts[1:])
    for cand in (base / "__init__.py", base.with_suffix(".py")):
        if cand.is_file():
            return cand
    return None


def _imported_modules(path: Path, name: str, packages: set[str]) -> set[str]:
    """Names under ``packages`` that the source of module ``name`` (at ``path``) imports, at
    any depth in the file (function-local imports count)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = name if path.name != "__init__.py" else name + ".__init__"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and here:  # relative import
                parts = here.split(".")[: -node.level]
                base = ".".join(parts + ([base] if base else []))
            # "from pkg import sub" may name a submodule or an attribute: try both
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] in packages)
    return found


def source_closure(modname: str) -> dict[str, str]:
    """``{module: sha256 of its source}`` for ``modname`` and every module of its own top-level
    package or of ``theory`` that it imports, transitively (parent packages' ``__init__``
    included)."""
    packages = {modname.split(".")[0], "theory"}
    seen: dict[str, str] = {}
    todo = [modname]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:  # an attribute ("from theory.x import f"), not a module
            seen[name] = ""
            continue
        seen[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        parts = name.split(".")
        todo += [".".join(parts[:k]) for k in range(1, len(parts))]
        todo += sorted(_imported_modules(path, name, packages) - set(seen))
    return {k: v for k, v in sorted(seen.items()) if v}


def discover(modules: Iterable[str] | None = None) -> dict[str, Piece]:
    """Every ``FIGURES`` entry of ``modules`` (default :data:`FIGURE_MODULES`), by name.

    A module that cannot be imported or has no non-empty ``FIGURES`` dict raises ``ValueError``.
    """
    modules = FIGURE_MODULES if modules is None else tuple(modules)
    pieces: dict[str, Piece] = {}
    for modname in modules:
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:
            raise ValueError(f"cannot import the figure module {modname!r}: {exc}") from exc
        figs = getattr(mod, "FIGURES", None)
        if not isinstance(figs, dict) or not figs:
            raise ValueError(f"the figure module {modname!r} has no FIGURES dict")
        closure = {}
        for name, fn in figs.items():
            if name in pieces:
                raise ValueError(
                    f"two figures are called {name!r} ({pieces[name].module} and {modname})"
                )
            if not callable(fn):
                raise ValueError(f"{modname}.FIGURES[{name!r}] is not callable")
            fn_mod = getattr(inspect.getmodule(fn), "__name__", modname)
            for m in {modname, fn_mod}:
                if m not in closure:
                    closure[m] = source_closure(m)
            blob = json.dumps({m: closure[m] for m in sorted({modname, fn_mod})}, sort_keys=True)
            src = hashlib.sha256(blob.encode()).hexdigest()
            meta = getattr(fn, "reproduces", None)
            if meta is not None and not isinstance(meta, Reproduces):
                raise ValueError(
                    f"{modname}.FIGURES[{name!r}].reproduces must come from "
                    "theory.plotting.reproduces"
                )
            pieces[str(name)] = Piece(str(name), fn, modname, src, meta)
    return pieces


def select(pieces: dict[str, Piece], names: Iterable[str] | None) -> list[Piece]:
    """The pieces named (exact names or shell patterns like ``erm-*``), in discovery order."""
    names = list(names or [])
    if not names:
        return list(pieces.values())
    chosen: list[str] = []
    for pat in names:
        hits = [n for n in pieces if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            avail = ", ".join(pieces)
            raise ValueError(
                f"no figure called {pat!r}: choose among {avail} (theory reproduce --list)"
            )
        chosen += [h for h in hits if h not in chosen]
    return [pieces[n] for n in pieces if n in chosen]


# --------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------
def cache_key(piece: Piece, quick: bool) -> dict:
    """What identifies a finished piece in the store: name, mode, package version, sources."""
    return dict(
        name=piece.name,
        mode="quick" if quick else "full",
        version=__version__,
        source_hash=piece.source_hash,
    )


def open_cache(out) -> Store:
    """The store of finished pieces of the output folder ``out``."""
    return Store(Path(out) / CACHE_DIR / CACHE_NAME)


def _file_in(out: Path, f) -> Path:
    p = Path(f)
    return p if p.is_absolute() else out / p


def _load_cache(cache: Store, out: Path, piece: Piece, quick: bool) -> dict | None:
    entry = cache.get(cache_key(piece, quick))
    if entry is None or not _files_kept(out, entry):
        return None  # never run, or a figure it made was deleted: recompute
    return entry


def _files_kept(out: Path, entry: dict) -> bool:
    """Every file a cached run lists is still there."""
    return all(_file_in(out, f).exists() for f in (entry.get("result") or {}).get("files", []))


def _recorded_seconds(cache: Store, quick: bool) -> dict[str, float]:
    """The longest recorded run time of each piece in this mode (any code), by name: roughly
    its cost from nothing -- a later run that reused the stored simulations of an earlier one
    is shorter."""
    mode = "quick" if quick else "full"
    out: dict[str, float] = {}
    for r in cache.rows():
        if r.get("mode") == mode and r.get("seconds") is not None:
            out[r["name"]] = max(out.get(r["name"], 0.0), float(r["seconds"]))
    return out


def _piece_cost(recorded: float | None, stated: float | None) -> float:
    """The one rule for what a piece costs (pool order and compute budget): the larger of its
    longest recorded run and the cost its ``@reproduces`` states (full mode); infinity if
    neither is known."""
    known = [float(x) for x in (recorded, stated) if x is not None]
    return max(known) if known else math.inf


def _expected_seconds(piece: Piece, recorded: dict[str, float], quick: bool) -> float:
    """What ``piece`` is expected to cost (:func:`_piece_cost`): unknown pieces (infinity)
    start first."""
    stated = None if quick or piece.meta is None else piece.meta.cost
    return _piece_cost(recorded.get(piece.name), stated)


def _load_earlier(cache: Store, out: Path, piece: Piece, quick: bool) -> dict | None:
    """The newest finished run of ``piece`` in this mode made with other code (another source
    hash or version) whose files are still there, or None: what a summary can still show, said
    to be from earlier code -- a full run spread over sittings keeps each piece's figure and
    numbers from the code that made them."""
    mode = "quick" if quick else "full"
    runs = [r for r in cache.rows() if r.get("name") == piece.name and r.get("mode") == mode]
    runs.sort(key=lambda r: str(r.get("finished", "")), reverse=True)
    return next((entry for entry in runs if _files_kept(out, entry)), None)


def _normalise_result(out: Path, result) -> dict:
    """Check the shape of a piece's return value; files stored relative to ``out``."""
    if not isinstance(result, dict):
        raise TypeError(f"returned {type(result).__name__}, expected dict(files=..., numbers=...)")
    files = []
    for f in result.get("files", []) or []:
        p = Path(f)
        if not p.is_absolute() and not p.exists() and (out / p).exists():
            p = out / p
        p = p.resolve()
        if not p.exists():
            raise FileNotFoundError(f"the piece lists {f} but did not write it")
        try:
            files.append(str(p.relative_to(out.resolve())))
        except ValueError:
            files.append(str(p))
    numbers = []
    for n in result.get("numbers", []) or []:
        if not isinstance(n, dict) or "name" not in n or "value" not in n:
            raise TypeError(f"each number must be dict(name=, value=, how=), got {n!r}")
        numbers.append(
            {"name": str(n["name"]), "value": to_jsonable(n["value"]), "how": str(n.get("how", ""))}
        )
    return {"files": files, "numbers": numbers}


def _run_piece(fn: Callable, out: str, quick: bool) -> tuple[dict, float]:
    """Run one piece (in this process or a worker); returns (raw result, seconds).

    OpenBLAS runs one thread inside a piece, whatever the number of workers (numba's parallel
    kernels keep theirs).  The pieces' linear algebra is matrix-vector work at d <= 3000, which a
    second BLAS thread slows: a rank-2 L-BFGS run at d = 1000 takes 1.16 s of wall and CPU at one
    thread, 1.57 s of wall and 3.1 s of CPU at two (BENCHMARKS.md, part E).  It also makes a
    piece's simulations the same to the last bit under ``--workers 1`` and ``--workers 2``."""
    from theory.plotting import use_agg

    use_agg()
    t0 = time.perf_counter()
    with blas_threads(1):
        res = fn(Path(out), quick)
    dt = time.perf_counter() - t0
    import matplotlib.pyplot as plt

    plt.close("all")
    return to_jsonable(res) if isinstance(res, dict) else res, dt


def _run_named(module: str, name: str, out: str, quick: bool) -> tuple[dict, float]:
    """:func:`_run_piece` of the piece ``name`` of the figure module ``module``, looked up in
    the worker: what a pool is sent, since a piece made by a factory (a closure, or a function
    not bound to its ``__name__`` in its module) cannot be pickled by reference."""
    return _run_piece(importlib.import_module(module).FIGURES[name], out, quick)


def _error_text(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}{where}"


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------
def run_reproduce(
    names: Iterable[str] | None = None,
    *,
    out=None,
    quick: bool = True,
    workers: int = 1,
    force: bool = False,
    progress: bool = True,
    modules: Iterable[str] | None = None,
    log: Callable[[str], None] | None = None,
    executor: cf.Executor | None = None,
    scheduler=None,
) -> Report:
    """Run the selected figure pieces, reuse cached ones, write ``<out>/SUMMARY.md``.

    ``out`` defaults to :func:`default_out` (``figures/quick`` or ``figures/full``).
    ``force=True`` ignores the cache.  The pieces run one after the other in this process, or
    concurrently on ``executor`` (any ``concurrent.futures.Executor``, left running), on a
    Dask cluster (``scheduler``: an address like ``"tcp://host:8786"`` or a
    ``dask.distributed.Client``; the workers must see ``out``), or in ``workers`` local
    processes.  Every piece keeps its finished seeds in its own store under ``out``, so an
    interrupted run resumes on any of them.
    """
    out = default_out(quick) if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    pieces = discover(modules)
    chosen = select(pieces, names)
    cache = open_cache(out)
    if log is None:

        def log(msg):
            print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    outcomes: dict[str, Outcome] = {}
    todo: list[Piece] = []
    for p in chosen:
        entry = None if force else _load_cache(cache, out, p, quick)
        if entry is not None:
            outcomes[p.name] = Outcome(
                p.name,
                p.module,
                "cached",
                entry.get("seconds"),
                entry["result"].get("files", []),
                entry["result"].get("numbers", []),
                cache_file=str(cache.path),
            )
        else:
            todo.append(p)
    mode = "quick" if quick else "full"
    if outcomes:
        log(f"reusing {len(outcomes)} cached piece(s): {', '.join(outcomes)}")

    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"reproduce ({mode})", unit="fig", dynamic_ncols=True)

    def record(p: Piece, raw, dt: float | None, exc: BaseException | None):
        if exc is None:
            try:
                res = _normalise_result(out, raw)
                declared = set(p.meta.files) if p.meta else set()
                missing = sorted(declared - {Path(f).name for f in res["files"]})
                if missing:
                    raise FileNotFoundError(
                        f"the piece declares {', '.join(missing)} (@reproduces) but did not "
                        "return it"
                    )
            except Exception as e:
                exc = e
        if exc is not None:
            o = Outcome(p.name, p.module, "failed", dt, error=_error_text(exc))
            msg = f"{p.name}: FAILED after {dt or 0:.1f} s: {o.error}"
        else:
            cache.put(
                cache_key(p, quick),
                dict(
                    module=p.module,
                    seconds=dt,
                    result=res,
                    finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                ),
            )
            o = Outcome(
                p.name, p.module, "ok", dt, res["files"], res["numbers"], cache_file=str(cache.path)
            )
            msg = (
                f"{p.name}: ok in {dt:.1f} s ({len(res['files'])} file(s), "
                f"{len(res['numbers'])} number(s))"
            )
        outcomes[p.name] = o
        if bar is not None:
            bar.write(msg, file=sys.stderr)
            bar.update(1)
        else:
            log(msg)

    client = own = None
    if todo and executor is None and scheduler is not None:
        from theory.sweep import dask_executor

        executor, client = dask_executor(scheduler)
    elif todo and executor is None and workers > 1 and len(todo) > 1:
        executor = own = local_pool(min(workers, len(todo)))
    try:
        if executor is None:
            for k, p in enumerate(todo, 1):
                if bar is not None:
                    bar.set_postfix_str(p.name)
                else:
                    log(f"[{k}/{len(todo)}] {p.name} ({mode}) ...")
                t0 = time.perf_counter()
                try:
                    raw, dt = _run_piece(p.fn, str(out), quick)
                except Exception as exc:
                    record(p, None, time.perf_counter() - t0, exc)
                else:
                    record(p, raw, dt, None)
        else:
            t0s = {}
            futs = {}
            # longest first, by the longest recorded run of each piece in this mode, else (full
            # mode) the cost its @reproduces states; pieces with neither lead: the pool's wall
            # time is then the budget section's projection
            recorded = _recorded_seconds(cache, quick)
            todo.sort(key=lambda p: -_expected_seconds(p, recorded, quick))
            for p in todo:
                futs[executor.submit(_run_named, p.module, p.name, str(out), quick)] = p
                t0s[p.name] = time.perf_counter()
            pending = set(futs)
            with interrupt_flag() as interrupted:
                while pending:
                    done, pending = wait_first(pending, interrupted)
                    for fut in done:
                        p = futs[fut]
                        try:
                            raw, dt = fut.result()
                        except Exception as exc:
                            record(p, None, time.perf_counter() - t0s[p.name], exc)
                        else:
                            record(p, raw, dt, None)
                    if interrupted.is_set():
                        raise KeyboardInterrupt
    except BaseException:  # Ctrl-C, SIGTERM (KeyboardInterrupt): stop the workers now
        if own is not None:
            stop_pool(own)
            own = None
        raise
    finally:
        if own is not None:
            own.shutdown(cancel_futures=True)
        if client is not None:
            client.close()
        if bar is not None:
            bar.close()
        # not-selected pieces with a valid cache entry still appear in the summary
        for name, p in pieces.items():
            if name in outcomes:
                continue
            entry = _load_cache(cache, out, p, quick)
            if entry is not None:
                outcomes[name] = Outcome(
                    name,
                    p.module,
                    "cached",
                    entry.get("seconds"),
                    entry["result"].get("files", []),
                    entry["result"].get("numbers", []),
                    cache_file=str(cache.path),
                )
            elif (entry := _load_earlier(cache, out, p, quick)) is not None:
                when = str(entry.get("finished", ""))[:16].replace("T", " ") or "date unknown"
                outcomes[name] = Outcome(
                    name,
                    p.module,
                    f"{EARLIER} ({when})",
                    entry.get("seconds"),
                    entry["result"].get("files", []),
                    entry["result"].get("numbers", []),
                    cache_file=str(cache.path),
                )
            else:
                outcomes[name] = Outcome(name, p.module, "not run")
        ordered = [outcomes[n] for n in pieces if n in outcomes]
        for o in ordered:
            described = pieces[o.name].describe()
            o.paper, o.ref, o.what = described["paper"], described["ref"], described["what"]
            o.cut, o.cost = described["cut"], described["cost"]
        report = Report(out, quick, ordered, time.perf_counter() - t_start)
        report.summary = write_summary(report)
    return report


# --------------------------------------------------------------------------------------------
# SUMMARY.md
# --------------------------------------------------------------------------------------------
def _fmt_value(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_value(x)}" for k, x in v.items())
    return str(v)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_summary(report: Report) -> Path:
    mode = "quick" if report.quick else "full"
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Reproduction summary",
        "",
        f"Written by `theory reproduce --{mode}` (theory {__version__}) on {now}; "
        f"this run took {report.seconds:.0f} s. "
        + (
            'Quick mode: reduced sizes (see each "how"), meant to finish in minutes.'
            if report.quick
            else "Full mode: the papers' sizes."
        ),
        "",
        "## Headline numbers",
        "",
        "| figure | quantity | value | how |",
        "|---|---|---|---|",
    ]
    n_numbers = 0
    for o in report.outcomes:
        if not o.has_result:
            continue
        for n in o.numbers:
            lines.append(
                f"| {_cell(o.name)} | {_cell(n['name'])} | {_cell(_fmt_value(n['value']))}"
                f" | {_cell(n.get('how', ''))} |"
            )
            n_numbers += 1
    if n_numbers == 0:
        lines.append("| — | no numbers yet | — | — |")
    lines += [
        "",
        "## Figures",
        "",
        "| figure | reproduces | module | status | time (s) | files |",
        "|---|---|---|---|---|---|",
    ]
    for o in report.outcomes:
        status = o.status if o.status != "failed" else f"**failed**: {o.error}"
        secs = "" if o.seconds is None else f"{o.seconds:.1f}"
        files = ", ".join(f"[{Path(f).name}]({f})" for f in o.files)
        ref = f"{o.paper} {o.ref}" if o.ref else ""
        lines.append(
            f"| {_cell(o.name)} | {_cell(ref)} | {o.module} | {_cell(status)} | {secs} | {files} |"
        )
    lines += _budget_lines(report)
    lines += ["", "## Gallery", ""]
    for o in report.outcomes:
        if not o.has_result:
            continue
        ref = f" ({o.paper} {o.ref})" if o.ref else ""
        lines += [f"### {o.name}{ref}", ""]
        if o.what:
            lines += [o.what[0].upper() + o.what[1:] + ".", ""]
        lines += [f"![{o.name}]({f})" for f in o.files if str(f).endswith(".png")]
        if o.numbers:
            lines += ["", "; ".join(f"{n['name']} = {_fmt_value(n['value'])}" for n in o.numbers)]
        lines.append("")
    path = report.out / SUMMARY_NAME
    atomic_write_text(path, "\n".join(lines))
    return path


#: the wall-time target of a whole full run on 2 cores (``--workers 2``)
FULL_BUDGET_S = 3 * 3600.0


def list_schedule(seconds: Sequence[float], workers: int) -> float:
    """Wall time of running jobs of the given ``seconds`` on ``workers`` workers that each take
    the next job in order when free (what a process pool does with the pieces submitted in
    order): the makespan of greedy list scheduling."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    free = [0.0] * int(workers)
    for s in seconds:
        i = min(range(len(free)), key=free.__getitem__)
        free[i] += float(s)
    return max(free)


def _budget_lines(report: Report) -> list[str]:
    """The "Compute budget" section: the summed piece times, the wall time of the same pieces
    on 2 workers, the target (full mode), and each piece's cut from the published protocol."""
    longest = _recorded_seconds(open_cache(report.out), report.quick)
    stated = {
        o.name: float(o.cost) for o in report.outcomes if not report.quick and o.cost is not None
    }
    cost = {}
    for o in report.outcomes:
        runs = [t for t in (longest.get(o.name), o.seconds) if t is not None]
        c = _piece_cost(max(runs) if runs else None, stated.get(o.name))
        if o.has_result and math.isfinite(c):
            cost[o.name] = c
    total = sum(cost.values())
    wall2 = list_schedule(sorted(cost.values(), reverse=True), 2)
    missing = [o.name for o in report.outcomes if o.name not in cost]
    lines = [
        "",
        "## Compute budget",
        "",
        f"The pieces' longest recorded runs sum to {total:.0f} s ({total / 3600:.2f} h) over "
        f"{len(cost)} piece(s); on 2 workers (`--workers 2`, which starts the longest first) "
        f"they would take {wall2:.0f} s ({wall2 / 3600:.2f} h) of wall time.",
    ]
    if not report.quick:
        verdict = "within" if wall2 <= FULL_BUDGET_S else "over"
        lines[-1] += (
            f" Target: about {FULL_BUDGET_S / 3600:.0f} h on 2 cores; these times are {verdict} it."
        )
    lines += [
        "",
        "Each piece counts its longest recorded run in this folder, roughly its cost from "
        "nothing (a later run that reuses the stored simulations and fixed points is shorter; "
        "the figure table above gives the run shown). A run made on a shared machine counts "
        "its slowdown."
        + (
            " In full mode a piece counts at least the cost from nothing that its "
            "`@reproduces(cost=...)` states, measured in a run from nothing on 2 cores "
            "(BENCHMARKS.md, 'Full run from nothing'), so that a folder whose runs reused "
            "stored work still gives the cost of the whole run."
            if not report.quick
            else " A piece whose every run reused an earlier store counts less than its cost "
            "from nothing."
        ),
    ]
    if missing:
        lines += ["", f"No time on record (not run): {', '.join(missing)}."]
    cuts = [o for o in report.outcomes if o.cut]
    if cuts and not report.quick:
        lines += [
            "",
            "What full mode runs less of than the published protocol (d, grids and step counts "
            "are the published ones), and what the published count would cost:",
            "",
            "| figure | time (s) | cut |",
            "|---|---|---|",
        ]
        for o in cuts:
            secs = f"{cost[o.name]:.0f}" if o.name in cost else ""
            lines.append(f"| {_cell(o.name)} | {secs} | {_cell(o.cut)} |")
    return lines


def list_pieces(out=None, quick: bool = True, modules=None) -> list[dict]:
    """Rows for ``theory reproduce --list``: :meth:`Piece.describe` and whether it is cached."""
    out = default_out(quick) if out is None else Path(out)
    pieces = discover(modules)
    cache = open_cache(out)
    return [
        dict(p.describe(), cached=_load_cache(cache, out, p, quick) is not None)
        for p in pieces.values()
    ]


def default_out(quick: bool) -> Path:
    """Where a run writes by default: ``figures/quick`` or ``figures/full``."""
    return Path("figures") / ("quick" if quick else "full")
