"""ODE integration with log-spaced output, a weak-recovery event and an adaptive horizon.

:func:`integrate_log_time` integrates ``dy/dt = fun(t, y)`` with scipy ``solve_ivp`` in chunks
``[t_k, 10 t_k]`` (dense output kept), so no fixed integration window is needed: it stops when the
caller's ``stop(t, y, dydt, escaped)`` says the trajectory has converged, or at ``t_max``.
The trajectory is then sampled on ``n_out`` log-spaced times between ``t_first`` and the final
time; the first upward crossing of ``event(y) = 0`` is located by the solver's event machinery.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp


@dataclass
class LogTimeSolution:
    t: np.ndarray  # (n_out,) log-spaced
    y: np.ndarray  # (n_out, dim)
    t_event: float | None
    t_final: float
    y_final: np.ndarray
    status: str  # "converged" | "max_iter" (also: the integrator could not go on) | "nan"
    message: str
    n_rhs: int


def _name(method) -> str:
    return method if isinstance(method, str) else getattr(method, "__name__", str(method))


def integrate_log_time(
    fun,
    y0,
    *,
    t_first: float,
    t_max: float | None = None,
    event=None,
    stop=None,
    n_out: int = 200,
    rtol: float = 1e-8,
    atol: float = 1e-13,
    method: str = "LSODA",
    t_chunk0: float | None = None,
    t_cap: float = 1e15,
    project=None,
    fallback=("Radau",),
) -> LogTimeSolution:
    """Integrate from t = 0 with log-spaced output.

    Parameters
    ----------
    fun : callable ``fun(t, y) -> dy/dt`` (y of shape (dim,)).
    y0 : initial state (dim,).
    t_first : first output time (> 0), e.g. the time of one SGD step.
    t_max : fixed horizon; ``None`` = adaptive (chunks of one decade until ``stop`` is true or
        ``t_cap`` is reached, then status "max_iter").
    event : ``event(y) -> float``; its first upward zero crossing is reported as ``t_event``.
    stop : ``stop(t, y, dydt, escaped) -> bool`` convergence test used in adaptive mode.
    project : ``project(y) -> y``, the map onto a set the exact flow leaves invariant (e.g. the
        unit ball of overlaps), applied to every output sample and to the final state, so the
        solver's O(rtol) error never takes a reported state out of the set.  The integration
        itself continues from the unprojected state: restarting a chunk from the projected one
        seeded an inward drift of 5e-4 on the γ = 0 sphere (tests/ssi/test_ssi_ode.py), where
        the unprojected error stays at 1e-6.
    fallback : solvers (``solve_ivp`` methods) that retry a chunk ``method`` failed on, from
        its last good state.  If they fail too, at a finite state, the result stops there:
        "converged" if ``stop`` holds at it, else "max_iter" with the solver's message; "nan"
        only for a state that became non-finite.
    """
    proj = (lambda v: v) if project is None else project
    y0 = np.asarray(y0, dtype=float)
    if t_first <= 0:
        raise ValueError(f"t_first must be > 0, got {t_first}")
    n_rhs = [0]

    def f(t, y):
        n_rhs[0] += 1
        return fun(t, y)

    events = None
    if event is not None:

        def ev(t, y):
            return event(y)

        ev.direction = 1.0
        ev.terminal = False
        events = [ev]
    pieces = []
    t0 = 0.0
    y = y0.copy()
    t_event = None
    if event is not None and event(y0) >= 0:
        t_event = 0.0
    status, message = "max_iter", ""
    t_end = t_chunk0 if t_chunk0 is not None else max(t_first * 1e3, 1e-2)
    if t_max is not None:
        t_end = min(t_end, t_max)

    def chunk(t_a, t_b, y_a, how):
        return solve_ivp(
            f, (t_a, t_b), y_a, method=how, rtol=rtol, atol=atol, dense_output=True, events=events
        )

    while True:
        sol = chunk(t0, t_end, y, method)
        tried = [_name(method)]
        for how in fallback:  # the chunk again, from the last good state, with a stiff solver
            if sol.success and np.all(np.isfinite(sol.y[:, -1])):
                break
            if sol.t[-1] > t0 and np.all(np.isfinite(sol.y[:, -1])):
                pieces.append(sol)  # keep the part that was integrated
                t0, y = float(sol.t[-1]), sol.y[:, -1].copy()
            sol = chunk(t0, t_end, y, how)
            tried.append(_name(how))
        if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
            finite = np.all(np.isfinite(sol.y[:, -1]))
            pieces.append(sol)
            where = f"at t = {sol.t[-1]:.3g} ({', '.join(tried)}): {sol.message}"
            if not finite:
                status, message = "nan", f"the state became non-finite {where}"
            else:
                # a finite state the integrators could not continue from: not a number to
                # distrust, but not a converged one either, unless it is stationary there
                t0, y = float(sol.t[-1]), sol.y[:, -1].copy()
                if stop is not None and stop(t0, y, fun(t0, y), t_event is not None):
                    status, message = "converged", f"stationary at t = {t0:.3g}"
                else:
                    status = "max_iter"
                    message = f"the integrator could not continue {where}; state finite"
                break
            t0 = sol.t[-1]
            y = sol.y[:, -1]
            break
        pieces.append(sol)
        if t_event is None and events is not None and len(sol.t_events[0]):
            t_event = float(sol.t_events[0][0])
        t0, y = float(sol.t[-1]), sol.y[:, -1].copy()
        if t_max is not None:
            if t0 >= t_max * (1 - 1e-12):
                status = (
                    "converged"
                    if (stop is None or stop(t0, y, fun(t0, y), t_event is not None))
                    else "max_iter"
                )
                message = f"integrated to the fixed horizon t_max = {t_max:.3g}"
                break
            t_end = min(t0 * 10, t_max)
            continue
        if stop is not None and stop(t0, y, fun(t0, y), t_event is not None):
            status, message = "converged", f"stationary at t = {t0:.3g}"
            break
        if t0 >= t_cap:
            status, message = "max_iter", f"not stationary by t = {t_cap:.3g}"
            break
        t_end = t0 * 10
    t_final = t0
    lo = min(t_first, t_final)
    ts = np.geomspace(lo, t_final, n_out) if t_final > lo else np.array([t_final])
    ys = np.empty((ts.size, y0.size))
    for i, t in enumerate(ts):
        for sol in pieces:
            if sol.t[0] <= t <= sol.t[-1] + 1e-300:
                ys[i] = proj(sol.sol(t) if sol.sol is not None else sol.y[:, -1])
                break
        else:
            ys[i] = proj(y)
    return LogTimeSolution(
        t=ts,
        y=ys,
        t_event=t_event,
        t_final=t_final,
        y_final=np.array(proj(y), dtype=float),
        status=status,
        message=message,
        n_rhs=n_rhs[0],
    )
