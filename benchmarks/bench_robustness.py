"""Robustness sweep: random settings far outside the papers' ranges, each answered in bounded time.

Draws random settings and drives the command line with each, as a user exploring a new setting
would, in a forked child with a wall-clock bound (``--timeout``).  Records, per call: the exit
status, the result's ``status``, the wall time; and, for every converged ERM fixed point, two
checks computed here, independently of the solver:

* ``residual``: one more application of the state equations at the returned overlaps
  (``theory.attention.state_equations.state_map``), max relative change of q, m, θ, V;
* ``stationarity``: the free energy Φ(q, m, θ, V, q̂, m̂, θ̂, V̂)
  (``theory.attention.state_equations.phi_at``) differentiated by central differences in each of
  its eight variables at the returned point, each derivative times the variable's scale,
  relative to the sum of the magnitudes of Φ's terms -- zero at a stationary point up to the
  quadrature error and the solver tolerance, O(1) elsewhere.

ERM settings: α log-uniform in [0.05, 20], ω uniform in [0, 1], σ in [0.1, 2], λ log-uniform in
[1e-4, 1], A random row-stochastic (rows Dirichlet(1, 1)); both branches by ``theory erm
fixed-point``; every fifth setting also ``theory erm transition``.  SSI settings: random
polynomial targets (1-3 Hermite monomials, total degree <= 6, L <= 8) by ``theory sie``; the ODE
(``theory sgd ode``) with random γ, PE and start; ``theory sgd boundaries`` at random a.

Every call is stored as soon as it finishes (``--out``, a :class:`theory.store.Store`), so an
interrupted sweep resumes; ``--table`` prints the Markdown table of BENCHMARKS.md.

    python benchmarks/bench_robustness.py --n-erm 200 --n-ssi 120 --out /tmp/robust.jsonl
    python benchmarks/bench_robustness.py --out /tmp/robust.jsonl --table
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing as mp
import os
import signal
import time

import numpy as np

from theory.store import Store

HERMITE_ORDERS = (1, 2, 3, 4)
#: CPU seconds allowed to the independent checks of one converged ERM fixed point
CHECK_CPU = 300.0


# ------------------------------------------------------------------------------ settings
def erm_settings(n: int, rng: np.random.Generator) -> list[dict]:
    out = []
    for i in range(n):
        A = rng.dirichlet((1.0, 1.0), size=2)
        out.append(
            dict(
                i=i,
                alpha=float(math.exp(rng.uniform(math.log(0.05), math.log(20)))),
                omega=float(rng.uniform(0, 1)),
                sigma=float(rng.uniform(0.1, 2)),
                lam=float(math.exp(rng.uniform(math.log(1e-4), 0))),
                A=[float(x) for x in A.ravel()],
            )
        )
    return out


def random_target(rng: np.random.Generator) -> tuple[str, int]:
    """A sum of 1-3 Hermite monomials in z1..zL, total degree <= 6, L <= 8."""
    L = int(rng.integers(1, 9))
    terms = []
    for _ in range(int(rng.integers(1, 4))):
        budget, factors = 6, []
        for tok in rng.permutation(L)[: int(rng.integers(1, 4))]:
            if budget == 0:
                break
            k = int(rng.choice([o for o in HERMITE_ORDERS if o <= budget]))
            budget -= k
            factors.append(f"He{k}(z{tok + 1})")
        coef = round(float(rng.normal()), 3)
        terms.append(f"{coef}*" + "*".join(factors))
    return "+".join(terms).replace("+-", "-"), L


def ssi_settings(n: int, rng: np.random.Generator) -> list[dict]:
    out = []
    for i in range(n):
        target, L = random_target(rng)
        kind = ("sie", "ode", "boundaries")[i % 3]
        row = dict(i=i, kind=kind, target=target, L=L)
        if kind == "ode":
            row.update(
                lr=float(math.exp(rng.uniform(math.log(1e-3), math.log(0.5)))),
                d=float(10 ** rng.uniform(2, 4)),
                pe=str(rng.choice(["none", "orthonormal"])),
                m0=float(rng.uniform(0, 0.05)),
            )
        if kind == "boundaries":
            row.update(a=float(rng.uniform(0.05, 3)))
        out.append(row)
    return out


def commands(setting: dict) -> list[tuple[str, list[str]]]:
    """The CLI calls for one setting: (label, argv)."""
    if "alpha" in setting:
        common = [
            "--alpha",
            repr(setting["alpha"]),
            "--omega",
            repr(setting["omega"]),
            "--sigma",
            repr(setting["sigma"]),
            "--lam",
            repr(setting["lam"]),
            "--A",
            ",".join(repr(x) for x in setting["A"]),
        ]
        calls = [
            (f"erm fixed-point {b}", ["erm", "fixed-point", *common, "--branch", b, "--json"])
            for b in ("semantic", "positional")
        ]
        if setting["i"] % 5 == 0:
            argv = ["erm", "transition", *common[2:], "--no-progress", "--json"]
            calls.append(("erm transition", argv))
        return calls
    kind = setting["kind"]
    if kind == "sie":
        # "--" ends the options: a target may start with a minus sign
        return [("sie", ["sie", "--L", str(setting["L"]), "--json", "--", setting["target"]])]
    if kind == "ode":
        argv = ["sgd", "ode", f"--target={setting['target']}", "--L", str(setting["L"])]
        argv += ["--pe", setting["pe"], "--lr", repr(setting["lr"]), "--d", repr(setting["d"])]
        argv += ["--m0", repr(setting["m0"])]
        if setting["pe"] != "none":  # e0 is the positional encoding's start: none without one
            argv += ["--e0", repr(setting["m0"])]
        argv += ["--json"]
        return [("sgd ode", argv)]
    return [("sgd boundaries", ["sgd", "boundaries", "--a", repr(setting["a"]), "--json"])]


# ------------------------------------------------------------------------------ running
def _cpu_seconds() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (Linux /proc), None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _child(argv, setting, conn, cpu_limit):
    """Run the call; for a converged ERM fixed point also the independent checks (here, so the
    parent never starts numba's threads and can keep forking).  Sends the call's CPU seconds
    too: on a shared machine the wall time measures the load, the CPU time the work."""
    import resource

    cpu0 = _cpu_seconds()
    limit = int(math.ceil(cpu0 + cpu_limit))  # the kernel sends SIGXCPU past it
    resource.setrlimit(resource.RLIMIT_CPU, (limit, resource.getrlimit(resource.RLIMIT_CPU)[1]))
    from theory.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # a traceback is a finding, not a crash of the sweep
            code = -1
            err.write(f"{type(exc).__name__}: {exc}")
    cpu = _cpu_seconds() - cpu0
    conn.send((code, out.getvalue()[-200_000:], err.getvalue()[-2000:], dict(cpu=cpu)))
    # the checks are the sweep's, not the call's: their own CPU budget, sent apart, so a call
    # that answered is never recorded as a timeout because its checks ran long (18 default-rule
    # channel evaluations: up to ~2 min at sigma ~ 1.5)
    checks = {}
    if argv[:2] == ["erm", "fixed-point"] and code == 0:
        c0 = _cpu_seconds()
        limit = int(math.ceil(c0 + CHECK_CPU))
        resource.setrlimit(resource.RLIMIT_CPU, (limit, resource.getrlimit(resource.RLIMIT_CPU)[1]))
        try:
            res = json.loads(out.getvalue())
            if res.get("status") == "converged":
                checks = dict(erm_checks(setting, res), check_cpu=_cpu_seconds() - c0)
        except Exception as exc:  # recorded as a finding
            checks = dict(check_error=f"{type(exc).__name__}: {exc}")
    conn.send(checks)
    conn.close()


def run_call(
    argv: list[str], timeout: float, setting: dict | None = None, wall_factor: float = 6.0
) -> dict:
    """Run one CLI call in a forked child: it is stopped after ``timeout`` CPU seconds (status
    "timeout (cpu)"), or after ``wall_factor * timeout`` wall seconds (status "timeout": a
    sleeping hang, or a machine so loaded that the CPU bound was not reached).  The checks of a
    converged ERM fixed point run after the call's answer, on their own budget (``CHECK_CPU``),
    and are not part of its ``cpu`` or ``seconds``."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    t0 = time.perf_counter()
    args = (argv, setting or {}, child, timeout)
    proc = ctx.Process(target=_child, args=args, daemon=True)
    proc.start()
    child.close()
    code = out = err = None
    checks, crashed = {}, False
    if parent.poll(wall_factor * timeout):
        try:
            code, out, err, checks = parent.recv()
        except EOFError:  # the child died without answering (killed by the OS, a segfault)
            crashed = True
    answered = time.perf_counter() - t0  # the call's wall time, without the checks
    if code is not None:  # the call answered; then its checks, on their own budget
        try:
            if parent.poll(wall_factor * CHECK_CPU):
                checks.update(parent.recv())
            else:
                checks["check_error"] = (
                    f"the checks did not finish in {wall_factor * CHECK_CPU:g} s"
                )
        except EOFError:
            checks["check_error"] = f"the checks were stopped at their CPU bound ({CHECK_CPU:g} s)"
    proc.join(1 if code is None else 30)
    if code is None and proc.is_alive():  # the CPU it had used, read before killing it
        checks = dict(cpu=_proc_cpu_seconds(proc.pid))
    if proc.is_alive():
        proc.kill()
        proc.join()
    secs = time.perf_counter() - t0 if code is None else answered
    if code is None:
        status = f"crashed (exit code {proc.exitcode})" if crashed else "timeout"
        if proc.exitcode == -signal.SIGXCPU:
            status = "timeout (cpu)"
        return dict(exit=None, status=status, seconds=secs, stderr="", **checks)
    payload = {}
    with contextlib.suppress(ValueError):
        payload = json.loads(out) if out.strip() else {}
    status = payload.get("status") if isinstance(payload, dict) else None
    if code == -1:
        status = "traceback"
    elif status is None:
        status = "exit 2 (rejected)" if code == 2 else f"exit {code}"
    message = payload.get("message") if isinstance(payload, dict) else None
    row = dict(exit=code, status=status, seconds=secs, stderr=err.strip()[-300:], **checks)
    return dict(row, message=str(message)[:400]) if message else row


def erm_checks(setting: dict, res: dict) -> dict:
    """Residual of the state equations and stationarity of Φ at a converged fixed point."""
    from theory.attention import ERMParams
    from theory.attention.quadrature import make_rule
    from theory.attention.state_equations import phi_at, state_map

    if res["q"] == 0.0:
        # the Q = 0 point (theory.attention.state_equations.zero_point, a closed form): the state
        # map and Φ's central differences are defined for q > 0 only, so neither check applies
        return dict(q_zero=True)
    q = res["quadrature"]
    rule = make_rule("split", n_r=q["n_r"], n_phi=q["n_phi"], n_arc=q["n_arc"], h=q["h_eta"])
    A = np.array(setting["A"]).reshape(2, 2)
    p = ERMParams(omega=setting["omega"], sigma=setting["sigma"], lam=setting["lam"], A=A)
    alpha = setting["alpha"]
    ov = {k: res[k] for k in ("q", "m", "theta", "V")}
    hats = {k: res[k] for k in ("qhat", "mhat", "thetahat", "Vhat")}
    new, _, _, _ = state_map(alpha, ov, p, rule)
    # relative change; m and θ relative to at least their Cauchy-Schwarz scale sqrt(q),
    # sqrt(ρq) (the change of the cosine of Q with the encoding or the teacher): an invariant
    # m = 0 comes back as the quadrature's rounding of an exact symmetry -- ~1e-17 at the
    # reference, -8.7e-9 at sweep setting 11 (sigma = 1.79, non-symmetric A), which against
    # the former absolute floor 1e-8 read as a residual 0.87 (a cosine change of 1.3e-8)
    floor = dict(q=1e-8, V=1e-8, m=math.sqrt(ov["q"]), theta=math.sqrt(p.rho * ov["q"]))
    residual = max(abs(new[k] - ov[k]) / max(abs(ov[k]), floor[k]) for k in ov)
    if p.rho - ov["theta"] ** 2 / ov["q"] <= 1e-6 * p.rho:
        # θ² = ρq: the student aligned with the teacher, on the boundary of the channel's domain
        # (the solver clips θ there, theory.attention.state_equations.guard_theta); Φ is not
        # differentiable in θ there, so only the residual is checked
        return dict(residual=float(residual), at_guard=True)
    from theory.attention.state_equations import channel

    ch = channel(ov["q"], ov["m"], ov["theta"], ov["V"], p, rule)
    D = p.lam + p.s2 * hats["Vhat"]
    scale = (
        0.5 * (abs(hats["Vhat"] * ov["q"]) + abs(hats["qhat"] * ov["V"]))
        + abs(ov["m"] * hats["mhat"])
        + abs(ov["theta"] * hats["thetahat"])
        + 0.5
        * (p.s2 * abs(hats["qhat"]) + hats["mhat"] ** 2 + p.s2 * p.rho * hats["thetahat"] ** 2)
        / abs(D)
        + abs(alpha * ch["M"])
    )
    worst = 0.0
    for group, name in [(ov, k) for k in ov] + [(hats, k) for k in hats]:
        x0 = group[name]
        h = 1e-4 * abs(x0) if abs(x0) > 1e-8 else 1e-6
        vals = []
        for s in (1, -1):
            o2, h2 = dict(ov), dict(hats)
            (o2 if group is ov else h2)[name] = x0 + s * h
            vals.append(phi_at(alpha, o2, h2, p, rule))
        deriv = (vals[0] - vals[1]) / (2 * h)
        worst = max(worst, abs(deriv) * max(abs(x0), h) / scale)
    return dict(residual=float(residual), stationarity=float(worst))


def sweep(args) -> None:
    # one stream per side: a larger --n-erm or --n-ssi extends the settings already run
    erm = erm_settings(args.n_erm, np.random.default_rng(args.seed))
    settings = erm + ssi_settings(args.n_ssi, np.random.default_rng([args.seed, 1]))
    store = Store(args.out)
    todo = [(s, label, argv) for s in settings for label, argv in commands(s)]
    todo.sort(key=lambda t: t[0]["i"])  # ERM and SSI settings interleaved: a stopped sweep
    # (it resumes) has covered both sides
    k, n = args.shard
    todo = todo[k::n]  # shards share the store: each row is one O_APPEND write
    done = 0
    for s, label, argv in todo:
        key = dict(seed=args.seed, argv=json.dumps(argv))
        old = store.get(key)
        if old is not None and not (args.redo and str(old["status"]).startswith(args.redo)):
            continue
        row = run_call(argv, args.timeout, s)
        row.update(label=label, setting=s)
        store.put(key, row)
        done += 1
        if args.verbose:
            cpu = row.get("cpu", math.nan)
            line = f"{label:24s} {row['status']:22s} {row['seconds']:7.2f} s  cpu {cpu:6.2f} s"
            print(line, flush=True)
    print(f"{done} new calls, {len(todo)} in all, stored in {args.out}")


# ------------------------------------------------------------------------------ report
def table(path) -> str:
    rows = list(Store(path).rows())
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["label"], []).append(r)
    lines = [
        "| command | calls | statuses | CPU p50 / p90 / max (s) | wall p50 / p90 / max (s) | "
        "worst residual | worst stationarity |",
        "|---|---|---|---|---|---|---|",
    ]

    def q3(xs):
        xs = np.array(xs, dtype=float)
        if not xs.size:
            return "—"
        return f"{np.median(xs):.2f} / {np.quantile(xs, 0.9):.2f} / {xs.max():.2f}"

    for label in sorted(by):
        rs = by[label]
        counts: dict[str, int] = {}
        for r in rs:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        res = [r["residual"] for r in rs if "residual" in r]
        sta = [r["stationarity"] for r in rs if "stationarity" in r]
        lines.append(
            f"| `{label}` | {len(rs)} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
            + f" | {q3([r['cpu'] for r in rs if r.get('cpu') is not None])}"
            + f" | {q3([r['seconds'] for r in rs])} | "
            + (f"{max(res):.1e}" if res else "—")
            + " | "
            + (f"{max(sta):.1e}" if sta else "—")
            + " |"
        )
    return "\n".join(lines)


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes K/N, e.g. 0/2, not {text!r}") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard K/N needs 0 <= K < N, got {text!r}")
    return k, n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-erm", type=int, default=200, help="random ERM settings")
    ap.add_argument("--n-ssi", type=int, default=120, help="random SSI settings")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random settings")
    ap.add_argument(
        "--timeout", type=float, default=120.0, help="CPU-time bound per call (s); 6x on the wall"
    )
    ap.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        metavar="K/N",
        help="run every N-th call from the K-th (0-based): N processes on one store share a sweep",
    )
    ap.add_argument(
        "--redo",
        metavar="STATUS",
        help="run again the stored calls whose status starts with STATUS (e.g. 'timeout')",
    )
    ap.add_argument("--out", default="robustness.jsonl", help="result store (resumable)")
    ap.add_argument("--table", action="store_true", help="print the table of the stored calls")
    ap.add_argument("--verbose", action="store_true", help="one line per call")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.out))
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sweep(args)
    print(table(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
