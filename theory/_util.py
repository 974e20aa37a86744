"""Small shared helpers: input validation, atomic file writes, range parsing, JSON."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np


def _as_float(name: str, value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def check_finite(name: str, value) -> float:
    """A finite number (not NaN or +-inf)."""
    value = _as_float(name, value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def check_positive(
    name: str, value: float, *, strict: bool = True, hi: float | None = None
) -> float:
    """A finite number > 0 (``strict``) or >= 0, at most ``hi`` when given."""
    value = _as_float(name, value)
    if not np.isfinite(value) or (value <= 0 if strict else value < 0):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be at most {hi:g}, got {value:g}")
    return value


def check_int(name: str, value, *, lo: int | None = None, hi: int | None = None) -> int:
    """An integer in [lo, hi] (either end optional); a float is accepted only if integral."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not isinstance(value, (int, np.integer)):
        x = _as_float(name, value)
        if not (np.isfinite(x) and x == int(x)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        value = int(x)
    value = int(value)
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be at most {hi}, got {value}")
    return value


def check_unit_interval(name: str, value: float) -> float:
    value = _as_float(name, value)
    if not (0.0 <= value <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return value


def check_row_stochastic(name: str, A, *, symmetric: bool = False) -> np.ndarray:
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {A.shape}")
    if np.any(A < 0) or not np.allclose(A.sum(axis=1), 1.0, atol=1e-10):
        raise ValueError(
            f"{name} must be row-stochastic (non-negative entries, rows summing to 1); "
            f"row sums are {A.sum(axis=1).tolist()}"
        )
    if symmetric and not np.allclose(A, A.T, atol=1e-12):
        raise ValueError(f"{name} must be symmetric, got {A.tolist()}")
    return A


MAX_RANGE_POINTS = 100_000  # points of one parsed range


def parse_range(text: str, *, integer: bool = False) -> np.ndarray:
    """Parse ``START:STOP:N`` (inclusive linspace), ``START:STOP`` (integers) or ``a,b,c``
    (finite numbers, at most ``MAX_RANGE_POINTS`` points)."""
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) == 3:
                start, stop, n = float(parts[0]), float(parts[1]), int(parts[2])
                if not (1 <= n <= MAX_RANGE_POINTS and np.isfinite(start) and np.isfinite(stop)):
                    raise ValueError
                out = np.linspace(start, stop, n)
            elif len(parts) == 2:
                start, stop = int(parts[0]), int(parts[1])
                if not 0 <= stop - start < MAX_RANGE_POINTS:
                    raise ValueError
                out = np.arange(start, stop + 1)
            else:
                raise ValueError
        else:
            items = [x for x in text.split(",") if x.strip()]
            if not 1 <= len(items) <= MAX_RANGE_POINTS:
                raise ValueError
            out = np.array([float(x) for x in items])
        if not np.all(np.isfinite(out)) or (integer and np.any(out != np.round(out))):
            raise ValueError
    except (ValueError, OverflowError):
        kind = "integers" if integer else "finite numbers"
        raise ValueError(
            f"cannot read the range {text!r}: write START:STOP:N (N points, both ends "
            f"included), START:STOP for integers, or a comma-separated list, of {kind} and "
            f"with at most {MAX_RANGE_POINTS} points"
        ) from None
    return out.astype(int) if integer else out


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _umask_mode()


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _FILE_MODE)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_savefig(fig, path: str | os.PathLike, **kwargs) -> Path:
    """``fig.savefig`` through a temporary file so an interrupted write leaves no broken figure."""
    import io

    path = Path(path)
    buf = io.BytesIO()
    fmt = kwargs.pop("format", path.suffix.lstrip(".") or "png")
    fig.savefig(buf, format=fmt, **kwargs)
    return atomic_write_bytes(path, buf.getvalue())


def to_jsonable(obj):
    """Recursively convert numpy scalars/arrays (and non-finite floats) to JSON-friendly values."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if np.isfinite(x) else None
    return obj


def dumps_json(obj) -> str:
    return json.dumps(to_jsonable(obj), allow_nan=False)


# ------------------------------------------------------------------------------ processes
def _openblas_handles() -> list:
    """(get, set) of the thread count of each OpenBLAS bundled with numpy and with scipy (their
    wheels ship one each; scipy's serves scipy.linalg and L-BFGS-B), loading it if need be
    (the same library scipy loads later); empty if none is found."""
    import ctypes
    import glob

    site = os.path.join(os.path.dirname(np.__file__), os.pardir)
    out = []
    for pkg in ("numpy", "scipy"):
        for lib in sorted(glob.glob(os.path.join(site, f"{pkg}.libs", "*openblas*.so*"))):
            try:
                cdll = ctypes.CDLL(lib)
            except OSError:
                continue
            for get, set_ in (
                ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                ("openblas_get_num_threads", "openblas_set_num_threads"),
            ):
                if hasattr(cdll, get) and hasattr(cdll, set_):
                    out.append((getattr(cdll, get), getattr(cdll, set_)))
                    break
    return out


class blas_threads(contextlib.ContextDecorator):
    """Context manager (or decorator) limiting the OpenBLAS of numpy and scipy to ``n`` threads
    (no-op for a library not found, or if ``n`` is None)."""

    def __init__(self, n: int | None = 1):
        self.n = n
        self.old = []

    def __enter__(self):
        self.old = []
        for get, set_ in _openblas_handles() if self.n is not None else []:
            self.old.append((set_, int(get())))
            set_(int(self.n))
        return self

    def __exit__(self, *exc):
        for set_, n in self.old:
            set_(n)
        self.old = []
        return False


def limit_threads(n: int) -> None:
    """Limit the OpenBLAS of numpy and scipy and numba's parallel kernels to ``n`` threads in
    this process (each where available)."""
    n = max(1, int(n))
    for _, set_ in _openblas_handles():
        set_(n)
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a core dependency
        return
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Process-pool initializer: on Linux, ask the kernel to SIGKILL this worker when the
    process that created it dies (``prctl(PR_SET_PDEATHSIG)``), so that killing a command --
    even with SIGKILL, which runs no cleanup -- does not orphan its workers.  ``parent_pid``
    closes the race where the parent died before the request: the worker then exits at once.
    Elsewhere (no prctl), a no-op."""
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no libc with prctl (an unusual Linux): no-op
        return
    if os.getppid() != parent_pid:
        os._exit(1)


#: set in a :func:`local_pool` worker: the cores it may use (cores // workers of its pool)
CPU_SHARE_ENV = "THEORY_CPU_SHARE"


def cpu_share() -> int:
    """The cores this process may use: all of them, or in a :func:`local_pool` worker its share
    (cores // workers), so that a piece that starts its own pool inside ``theory reproduce
    --workers 2`` uses one process, not one per core (4 busy processes on 2 cores)."""
    try:
        share = int(os.environ.get(CPU_SHARE_ENV, ""))
    except ValueError:
        share = 0
    return share if share >= 1 else (os.cpu_count() or 1)


def _pool_worker_init(parent_pid: int, threads: int) -> None:
    """Initializer of :func:`local_pool`'s workers: they die with the parent
    (:func:`die_with_parent`), SIGTERM kills them at once (a handler inherited from the parent,
    e.g. ``theory reproduce``'s SIGTERM -> KeyboardInterrupt, would hand the interruption back
    as the piece's result and keep the worker alive), SIGINT is the parent's to handle: a
    Ctrl-C to the terminal's process group stops the parent, which stops the pool
    (:func:`stop_pool`), and BLAS and numba use ``threads`` threads (:func:`limit_threads`):
    the workers share the cores instead of each spinning up one thread per core."""
    import signal

    die_with_parent(parent_pid)
    os.environ[CPU_SHARE_ENV] = str(threads)  # inherited by a pool this worker starts
    limit_threads(threads)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def local_pool(workers: int):
    """A ``concurrent.futures.ProcessPoolExecutor`` of ``workers`` local processes that die
    with this process (even SIGKILLed) and stop at once on SIGTERM: the one way this package
    starts a local pool (``theory.sweep``, ``theory.reproduce``, ``simulate_seeds``), each
    worker limited to :func:`cpu_share` // workers BLAS and numba threads.  Stop it on an
    interruption with :func:`stop_pool`."""
    import concurrent.futures as cf

    threads = max(1, cpu_share() // max(1, int(workers)))
    return cf.ProcessPoolExecutor(
        max_workers=workers, initializer=_pool_worker_init, initargs=(os.getpid(), threads)
    )


@contextlib.contextmanager
def interrupt_flag():
    """While a pool is waited on, SIGINT and SIGTERM set the yielded event instead of raising;
    :func:`wait_first` then raises KeyboardInterrupt between two waits.  Raised from a signal
    handler, a KeyboardInterrupt can land inside ``concurrent.futures`` while a future's lock is
    held (``as_completed`` takes every future's lock in turn), and :func:`stop_pool`'s
    cancellation then waits on that lock forever (a SIGINT test of ``theory reproduce`` hung
    so).  SIGINT is replaced even where it was ignored at start-up (a run started in the
    background), as a Ctrl-C must stop a pool; SIGTERM only where its handler is Python code
    (the CLI's SIGTERM -> KeyboardInterrupt), elsewhere it kills the process as before.  Inside
    a :func:`local_pool` worker nothing is replaced: there SIGINT is the parent's to handle and
    SIGTERM stops the worker at once.  Outside the main thread, where handlers cannot be set,
    the event never fires."""
    import signal
    import threading

    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread() or os.environ.get(CPU_SHARE_ENV):
        yield flag
        return

    def _set(signum, frame):
        flag.set()

    old = {signal.SIGINT: signal.signal(signal.SIGINT, _set)}
    if callable(signal.getsignal(signal.SIGTERM)):
        old[signal.SIGTERM] = signal.signal(signal.SIGTERM, _set)
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def wait_first(pending, flag, timeout: float = 0.2):
    """``concurrent.futures.wait(pending, return_when=FIRST_COMPLETED)`` in slices of
    ``timeout`` seconds, raising KeyboardInterrupt at a safe point (no future's lock held) once
    ``flag`` (:func:`interrupt_flag`) is set; returns ``(done, not_done)``."""
    import concurrent.futures as cf

    while True:
        if flag.is_set():
            raise KeyboardInterrupt
        done, pending = cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        if done or not pending:
            return done, pending


def stop_pool(executor, timeout: float = 5.0) -> None:
    """Stop a :func:`local_pool` now, without waiting for its running calls: cancel what has
    not started, SIGTERM the workers and reap them (``shutdown(wait=True)`` would wait for every
    running call: a Ctrl-C or SIGTERM of ``theory reproduce --workers 2`` then hung until the
    running figures had finished).  What the calls stored before stays stored."""
    procs = list((getattr(executor, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    executor.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(timeout)
