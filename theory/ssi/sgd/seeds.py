"""Many SGD runs, one per seed, in processes, kept in a :class:`theory.store.Store`.

A list of seeds is a protocol: each run is identified by its seed and its parameters, stored as
soon as it finishes (one JSON line, fsync'd) and not run again, so an interrupted sweep resumes
from what is on disk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from theory._util import (
    check_int,
    cpu_share,
    interrupt_flag,
    local_pool,
    stop_pool,
    wait_first,
)
from theory.rng import as_rng, seed_int
from theory.ssi.risk import SSIModel
from theory.ssi.sgd.driver import SGDResult, check_run
from theory.ssi.sgd.full import simulate_sgd
from theory.ssi.sgd.reduced import simulate_reduced
from theory.store import Store

__all__ = ["simulate_seeds", "load_results", "seeds_from"]

MAX_SEEDS = 100_000  # runs of one simulate_seeds call
MAX_WORKERS = 1024  # processes


def _job(args):
    model, d, lr, seed, reduced, kw = args
    f = simulate_reduced if reduced else simulate_sgd
    return seed, f(model, d, lr, seed, **kw)


def _result_from_row(row: dict) -> SGDResult:
    # a stored row holds its key's fields too (theory.store.Store): keep the result's own
    fields = {f.name for f in dataclasses.fields(SGDResult)} - {"history"}
    row = {k: v for k, v in row.items() if k in fields}
    for key in ("t", "e", "m", "risk", "m_rows"):
        if row.get(key) is not None:
            row[key] = np.array(row[key], dtype=float)  # JSON null (a NaN) -> NaN
    if row.get("steps") is not None:
        row["steps"] = np.asarray(row["steps"], dtype=np.int64)
    return SGDResult(**row)


def _as_store(store) -> Store | None:
    if store is None or isinstance(store, Store):
        return store
    return Store(store)


def _key(model, d, lr, seed, reduced, kw) -> dict:
    return dict(
        model=model.key(),
        d=int(d),
        lr=float(lr),
        seed=int(seed),
        backend="reduced" if reduced else "full",
        **{k: kw[k] for k in sorted(kw)},
    )


def load_results(store: Store | str | Path) -> dict[int, SGDResult]:
    """The runs kept in a store written by :func:`simulate_seeds` (a :class:`theory.store.Store`
    or its path) -> {seed: SGDResult} (the last run per seed: meant for a store that holds one
    configuration)."""
    if not isinstance(store, Store) and not Path(store).exists():
        return {}
    out = {}
    for row in _as_store(store).rows():
        res = _result_from_row(row)
        out[res.seed] = res
    return out


def simulate_seeds(
    model: SSIModel,
    d: int,
    lr: float,
    seeds: Iterable[int],
    *,
    reduced: bool = False,
    workers: int | None = None,
    progress: bool = True,
    store: Store | str | Path | None = None,
    **kwargs: Any,
) -> list[SGDResult]:
    """Run :func:`theory.ssi.simulate_sgd` (or the exact reduced chain with ``reduced=True``)
    for every seed.

    seeds: iterable of ints.  workers: processes (None -> number of CPUs, capped by the number
    of seeds; 0 or 1 -> in this process).  progress: tqdm bar.  store: a
    :class:`theory.store.Store` or the path of its JSON-lines file; each finished run is stored
    at once under (model, d, lr, seed, backend, keyword arguments) and runs already there are
    read back instead of run.  Other keyword arguments go to the simulator.  Returns the results
    in the order of ``seeds``.
    """
    from tqdm.auto import tqdm

    seeds = [check_int("seed", s, lo=0) for s in seeds]
    if not seeds:
        raise ValueError("give at least one seed")
    if workers is not None:
        workers = check_int("workers", workers, lo=0, hi=MAX_WORKERS)
    check_run(model, d, lr, **kwargs)  # before any run or progress bar
    store = _as_store(store)
    results = {}
    if store is not None:
        for s in seeds:
            row = store.get(_key(model, d, lr, s, reduced, kwargs))
            if row is not None:
                results[s] = _result_from_row(row)
    todo = [s for s in dict.fromkeys(seeds) if s not in results]
    if workers is None:
        workers = min(len(todo), cpu_share())
    bar = tqdm(
        total=len(seeds),
        initial=len(seeds) - len(todo),
        desc=f"SGD seeds (d={d})",
        leave=False,
        # only an explicit no: otherwise TQDM_DISABLE (theory reproduce --no-progress) decides
        **({} if progress else {"disable": True}),
    )

    def _store(seed, res):
        results[seed] = res
        if store is not None:
            store.put(_key(model, d, lr, seed, reduced, kwargs), res.to_dict())
        bar.update(1)

    try:
        if workers <= 1 or len(todo) <= 1:
            for s in todo:
                _store(*_job((model, d, lr, s, reduced, kwargs)))
        else:
            # the workers die with this process, even when it is SIGKILLed
            ex = local_pool(workers)
            try:
                pending = {ex.submit(_job, (model, d, lr, s, reduced, kwargs)) for s in todo}
                with interrupt_flag() as stop:
                    while pending:
                        done, pending = wait_first(pending, stop)
                        for f in done:
                            _store(*f.result())
            except BaseException:  # Ctrl-C, SIGTERM: stop now; finished seeds are stored
                stop_pool(ex)
                raise
            ex.shutdown()
    finally:
        bar.close()
    return [results[s] for s in seeds]


def seeds_from(rng: int | np.random.Generator, n: int) -> list[int]:
    """n independent integer seeds drawn from ``rng``."""
    n = check_int("the number of seeds", n, lo=1, hi=MAX_SEEDS)
    g = as_rng(rng)
    return [seed_int(g) for _ in range(n)]
