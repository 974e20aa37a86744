"""Parameter sweeps on any ``concurrent.futures.Executor``, stored point by point.

>>> from theory.sweep import run_sweep
>>> rows = run_sweep(my_fn, {"alpha": [1.0, 2.0], "omega": [0.2, 0.3]},
...                  out="table.csv")                                    # doctest: +SKIP

``run_sweep`` calls ``fn(**point)`` for every point of the grid and appends one line per finished
point to the result table (CSV or JSON lines, chosen by the file suffix).  Each line is written
with a single ``write`` on a file opened in append mode and fsync'd, so after a crash or a
``kill -9`` the table holds every finished point exactly once, plus at most one partial trailing
line, which the next run discards.  Running the same sweep again skips the points already in the
table: an interrupted sweep resumes without losing or redoing points.

Where the points run:

* default: local processes (``theory._util.local_pool(workers)``: they die with this process);
  ``workers=1`` runs the points one after the other in this process (no pickling, easiest to debug);
* ``executor=``: any ``concurrent.futures.Executor`` (it is not shut down by ``run_sweep``);
* ``scheduler="tcp://host:8786"`` (or a ``dask.distributed.Client``): the same sweep on a Dask
  distributed cluster, through ``client.get_executor()``.  Dask is an optional extra:
  ``pip install 'theory[dask]'``.

``fn`` must be a top-level (picklable) function; it returns a dict (merged into the row), a
result object with ``row()``/``to_dict()``, or a scalar (stored in the column ``value``).

Table layout: the grid parameters, then the returned fields, then ``_key`` (the canonical JSON of
the point's identifying parameters, used to recognise finished points on resume).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from theory._util import (
    cpu_share,
    interrupt_flag,
    local_pool,
    parse_range,
    stop_pool,
    to_jsonable,
    wait_first,
)
from theory.store import KEY_COLUMN, ResultTable, point_key, read_table

__all__ = [
    "run_sweep",
    "expand_grid",
    "point_key",
    "read_table",
    "ResultTable",
    "SWEEPABLE",
    "Sweepable",
    "get_sweepable",
    "dask_executor",
]


# --------------------------------------------------------------------------------------------
# grids and keys
# --------------------------------------------------------------------------------------------
def _scalar(v):
    """Plain Python scalar for a grid value (numpy scalars → int/float)."""
    v = to_jsonable(v)
    return v


def expand_grid(grid) -> list[dict]:
    """A list of points (dicts) from a list of dicts or a dict of lists (cartesian product).

    The product runs over the keys in insertion order, the last key fastest; a scalar value in a
    dict of lists is a one-point axis.
    """
    if isinstance(grid, Mapping):
        names = list(grid)
        axes = []
        for name in names:
            vals = grid[name]
            if isinstance(vals, (str, bytes)) or not isinstance(vals, Iterable):
                vals = [vals]
            vals = [_scalar(v) for v in vals]
            if not vals:
                raise ValueError(f"the grid axis {name!r} is empty: give it at least one value")
            axes.append(vals)
        points = [dict(zip(names, combo)) for combo in itertools.product(*axes)]
    elif isinstance(grid, Iterable) and not isinstance(grid, (str, bytes)):
        points = []
        for p in grid:
            if not isinstance(p, Mapping):
                raise ValueError(
                    f"a grid given as a list must hold dicts of parameters, got {type(p).__name__}"
                )
            points.append({str(k): _scalar(v) for k, v in p.items()})
    else:
        raise ValueError("grid must be a dict of lists (cartesian product) or a list of dicts")
    if not points:
        raise ValueError("the grid is empty: give at least one point")
    for p in points:
        for k in p:
            if k == KEY_COLUMN:
                raise ValueError(f"{KEY_COLUMN!r} is reserved for the table; rename the parameter")
    return points


# --------------------------------------------------------------------------------------------
# executors
# --------------------------------------------------------------------------------------------
def _import_dask():
    try:
        import distributed  # noqa: F401
        from distributed import Client
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ValueError(
            "--scheduler needs Dask distributed, which is an optional extra: "
            "pip install 'theory[dask]'  (or pip install 'dask[distributed]')"
        ) from exc
    return Client


def dask_executor(scheduler):
    """``(executor, client_to_close)`` for a Dask scheduler address or an existing Client."""
    Client = _import_dask()
    if isinstance(scheduler, Client):
        return scheduler.get_executor(), None
    if not isinstance(scheduler, str) or not scheduler:
        raise ValueError(
            "scheduler must be a Dask scheduler address like 'tcp://127.0.0.1:8786' or a "
            "dask.distributed.Client"
        )
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"cannot reach the Dask scheduler at {scheduler!r}: {exc}") from None
    return client.get_executor(), client


class _SerialExecutor(cf.Executor):
    """Runs each submitted call immediately in this process (``workers=1``)."""

    def submit(self, fn, /, *args, **kwargs):
        fut = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            fut.set_exception(exc)
        return fut


def _call(fn, point):
    return fn(**point)


def _as_row(result) -> dict:
    if isinstance(result, Mapping):
        return dict(result)
    if hasattr(result, "row") and callable(result.row):
        return dict(result.row())
    if hasattr(result, "to_dict") and callable(result.to_dict):
        return dict(result.to_dict())
    return {"value": result}


# --------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------
def run_sweep(
    fn: Callable,
    grid,
    *,
    out=None,
    executor: cf.Executor | None = None,
    workers: int | None = None,
    scheduler=None,
    progress: bool = True,
    key=None,
    desc: str | None = None,
) -> list[dict]:
    """Map ``fn(**point)`` over ``grid``; return one row per point, in grid order.

    Parameters
    ----------
    fn : top-level function (picklable by reference) taking the grid parameters as keywords.
    grid : dict of lists (cartesian product, last key fastest) or a list of dicts.
    out : path of the result table (``.csv`` or ``.jsonl``).  Points already in it are not
        recomputed; every newly finished point is appended (one fsync'd line) as soon as it
        finishes.  ``None`` keeps the results in memory only.
    executor : a ``concurrent.futures.Executor`` to use (left running afterwards).
    workers : number of local processes when neither ``executor`` nor ``scheduler`` is given
        (default: the number of CPUs); ``1`` runs in this process.
    scheduler : a Dask scheduler address or ``dask.distributed.Client``.
    progress : show a tqdm progress bar (on stderr).
    key : which parameters identify a point in the table (``None``: all; a list of names; or a
        callable ``point -> str``).
    desc : label of the progress bar.

    Returns
    -------
    list of dicts: the point's parameters merged with the fields ``fn`` returned (for points
    read back from a CSV table, values are parsed back to numbers where they look like numbers).

    If ``fn`` raises for some point, the points not yet started are cancelled, those running are
    waited for and saved, and the exception is re-raised: rerunning resumes from the table.
    """
    if not callable(fn):
        raise ValueError("fn must be a callable taking the grid parameters as keyword arguments")
    given = sum(x is not None for x in (executor, scheduler))
    if given > 1:
        raise ValueError("give at most one of executor= and scheduler=")
    if workers is not None:
        workers = int(workers)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
    points = expand_grid(grid)
    keys = [point_key(p, key) for p in points]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"the grid has repeated points (key {dup}); make every point distinct")

    table = ResultTable(out) if out is not None else None
    done: dict[str, dict] = {}
    if table is not None:
        table.repair()
        for r in table.read():
            k = r.get(KEY_COLUMN)
            if k is not None:
                done[str(k)] = r
    index_of = {k: i for i, k in enumerate(keys)}
    rows: list[dict | None] = [None] * len(points)
    for k, r in done.items():
        i = index_of.get(k)
        if i is not None:
            r = dict(r)
            r.pop(KEY_COLUMN, None)
            r.update(points[i])  # exact grid values (CSV cells were parsed back)
            rows[i] = r
    todo = [i for i in range(len(points)) if rows[i] is None]

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(points),
            initial=len(points) - len(todo),
            desc=desc or "sweep",
            unit="pt",
            dynamic_ncols=True,
        )

    own_executor = None
    client = None
    if todo:
        if executor is None and scheduler is not None:
            executor, client = dask_executor(scheduler)
        elif executor is None:
            n = workers if workers is not None else cpu_share()
            n = max(1, min(n, len(todo)))
            own_executor = executor = _SerialExecutor() if n == 1 else local_pool(n)

    def finish(i: int, result) -> None:
        row = dict(points[i])
        for k, v in _as_row(result).items():
            if k in row and k != KEY_COLUMN:
                continue  # a returned field never overwrites a grid parameter
            row[k] = v
        row.pop(KEY_COLUMN, None)
        rows[i] = to_jsonable(row)
        if table is not None:
            table.append({**rows[i], KEY_COLUMN: keys[i]})
        if bar is not None:
            bar.update(1)

    first_error = None
    try:
        if todo:
            # bounded submission: a failure stops new submissions, and a huge grid does not
            # flood the executor's queue (external executors / Dask get everything at once)
            if isinstance(executor, _SerialExecutor):
                window = 1
            elif isinstance(executor, cf.ProcessPoolExecutor):
                window = 2 * executor._max_workers
            else:
                window = len(todo)
            queue = iter(todo)
            futures: dict[cf.Future, int] = {}
            pending: set = set()

            def top_up():
                while first_error is None and len(pending) < window:
                    i = next(queue, None)
                    if i is None:
                        return
                    fut = executor.submit(_call, fn, points[i])
                    futures[fut] = i
                    pending.add(fut)

            top_up()
            with interrupt_flag() as stop:
                while pending:
                    finished, pending = wait_first(pending, stop)
                    for fut in finished:
                        i = futures.pop(fut)
                        if fut.cancelled():
                            continue
                        exc = fut.exception()
                        if exc is not None:
                            if first_error is None:
                                first_error = (points[i], exc)
                                for other in pending:
                                    other.cancel()
                            continue
                        finish(i, fut.result())
                    top_up()
    except BaseException:  # Ctrl-C, SIGTERM: stop the workers now (finished points are stored)
        if own_executor is not None and not isinstance(own_executor, _SerialExecutor):
            stop_pool(own_executor)
            own_executor = None
        raise
    finally:
        if bar is not None:
            bar.close()
        if own_executor is not None:
            own_executor.shutdown(wait=True, cancel_futures=True)
        if client is not None:
            client.close()
    if first_error is not None:
        point, exc = first_error
        n_done = sum(r is not None for r in rows)
        note = (
            f"sweep point {point} failed ({n_done}/{len(points)} points saved"
            + (f" in {out}" if out is not None else "")
            + ")"
        )
        if hasattr(exc, "add_note"):
            exc.add_note(note)
            raise exc
        raise RuntimeError(f"{note}: {exc}") from exc
    return rows  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# sweepable functions (the `theory sweep NAME` registry)
# --------------------------------------------------------------------------------------------
class Sweepable:
    """A named function that ``theory sweep NAME`` maps over a grid.

    ``axes``: grid parameters as ``{name: (type, help)}`` given on the command line as ranges
    (``--<name>s START:STOP:N`` or ``a,b,c``; ``type`` int or float); ``options``: fixed
    parameters ``{name: (type, default, help)}`` (``--<name> VALUE``).
    """

    def __init__(self, name, fn, *, axes, options=None, help=""):
        self.name = name
        self.fn = fn
        self.axes = axes
        self.options = options or {}
        self.help = help


def demo_point(x: float, y: float = 1.0, delay: float = 0.0) -> dict:
    """A cheap deterministic function for trying the sweep machinery (and a cluster).

    Returns ``f = sin(x) * y`` and ``g = x**2 + y``; sleeps ``delay`` seconds first.
    """
    if delay:
        time.sleep(float(delay))
    return {"f": math.sin(float(x)) * float(y), "g": float(x) ** 2 + float(y), "pid": os.getpid()}


def erm_fixed_point_point(
    alpha: float,
    omega: float,
    branch: str = "semantic",
    sigma: float | None = None,
    lam: float | None = None,
) -> dict:
    """One replica fixed point of the positional–semantic ERM model on the given branch."""
    from theory import attention as ps

    kw = {k: v for k, v in (("omega", omega), ("sigma", sigma), ("lam", lam)) if v is not None}
    res = ps.fixed_point(alpha, ps.ERMParams(**kw), branch=branch)
    row = _as_row(res)
    keep = ("q", "m", "theta", "V", "eps_t", "eps_g", "branch", "status", "iterations")
    return {k: row.get(k) for k in keep if k in row}


def erm_transition_point(
    omega: float, sigma: float | None = None, lam: float | None = None
) -> dict:
    """α_c(ω) and α_l(ω) of the positional–semantic ERM model (one point of the phase diagram)."""
    from theory import attention as ps

    kw = {k: v for k, v in (("omega", omega), ("sigma", sigma), ("lam", lam)) if v is not None}
    row = _as_row(ps.transition(ps.ERMParams(**kw)))
    keep = (
        "alpha_c",
        "alpha_l",
        "eps_g_lin",
        "eps_g_sem_at_alpha_c",
        "eps_g_pos_at_alpha_c",
        "alpha_l_branch",
        "status",
        "message",
    )
    return {k: row.get(k) for k in keep if k in row}


def sgd_boundaries_point(a: float) -> dict:
    """ω values where the SGD regimes of the positional–semantic target switch on the line
    a = const (docs/ssi.md §8)."""
    from theory import ssi

    out = _as_row(ssi.boundaries(a))
    return {k: v for k, v in out.items() if k.startswith("omega_")}


def sgd_ode_point(omega: float, a: float = 1.0, lr: float = 0.05, d: int = 10_000) -> dict:
    """(e, m) ODE of the positional–semantic SGD model from the default small start:
    escape time and the minimum reached."""
    from theory import ssi

    res = ssi.integrate_ode(ssi.ps_model(a, omega), lr=lr, d=d)
    row = _as_row(res)
    keep = ("t_escape", "steps_escape", "final_e", "final_m", "minimum", "status")
    return {k: row.get(k) for k in keep if k in row}


def sie_point(target: str, L: int | None = None) -> dict:
    """SIE, tied contraction and gains of one target expression."""
    from theory import ssi

    res = ssi.analyze(target, L=L)
    row = _as_row(res)
    keep = (
        "sie",
        "tied_contraction",
        "op_norm",
        "gain_optimal",
        "gain_equal",
        "gain_optimal_published",
        "gain_equal_published",
        "tied_learnable",
        "even_sie",
        "exact",
    )
    return {k: row.get(k) for k in keep if k in row}


SWEEPABLE: dict[str, Sweepable] = {
    "demo": Sweepable(
        "demo",
        demo_point,
        axes={"x": (float, "x values"), "y": (float, "y values")},
        options={"delay": (float, 0.0, "seconds to sleep per point")},
        help="f = sin(x)·y, g = x²+y: a cheap function to try the machinery or a cluster",
    ),
    "erm-fixed-point": Sweepable(
        "erm-fixed-point",
        erm_fixed_point_point,
        axes={"alpha": (float, "sample ratios α = n/d"), "omega": (float, "mixing weights ω")},
        options={
            "branch": (str, "semantic", "semantic | positional | trivial"),
            "sigma": (float, None, "teacher σ (default: the model's)"),
            "lam": (float, None, "ridge λ (default: the model's)"),
        },
        help="replica fixed point of the positional–semantic ERM model at each (α, ω)",
    ),
    "erm-transition": Sweepable(
        "erm-transition",
        erm_transition_point,
        axes={"omega": (float, "mixing weights ω")},
        options={
            "sigma": (float, None, "teacher σ (default: the model's)"),
            "lam": (float, None, "ridge λ (default: the model's)"),
        },
        help="α_c(ω) and α_l(ω) of the ERM model (each ω is one point: the phase diagram)",
    ),
    "sgd-boundaries": Sweepable(
        "sgd-boundaries",
        sgd_boundaries_point,
        axes={"a": (float, "positional strengths a")},
        help="ω where each SGD regime of the positional–semantic target switches, per a",
    ),
    "sgd-ode": Sweepable(
        "sgd-ode",
        sgd_ode_point,
        axes={"omega": (float, "target ω values"), "a": (float, "target a values")},
        options={"lr": (float, 0.05, "step size γ"), "d": (int, 10_000, "dimension d")},
        help="(e, m) ODE of the SGD positional–semantic target: escape time and minimum",
    ),
    "sie": Sweepable(
        "sie",
        sie_point,
        axes={
            "target": (str, "target expressions (separate with ';')"),
            "L": (int, "sequence lengths"),
        },
        help="SIE, tied contraction and tied/untied gains of each target",
    ),
}


def get_sweepable(name: str) -> Sweepable:
    if name not in SWEEPABLE:
        raise ValueError(f"unknown sweep {name!r}: choose one of {', '.join(sorted(SWEEPABLE))}")
    return SWEEPABLE[name]


def parse_axis(text: str, typ) -> list:
    """Values of one grid axis from the command line."""
    if typ is str:
        vals = [v.strip() for v in text.split(";") if v.strip()]
        if not vals:
            raise ValueError(f"no values in {text!r}")
        return vals
    vals = parse_range(text, integer=(typ is int))
    if typ is int:
        return [int(v) for v in vals]
    return [float(v) for v in np.asarray(vals, dtype=float)]
