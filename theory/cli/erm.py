"""``theory erm``: replica theory of the positional-semantic attention model
(docs/attention.md) and its finite-d counterparts (gradient descent, GAMP)."""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from theory._util import atomic_write_text, parse_range
from theory.cli._common import add_json, emit

FP_FIELDS = (
    "q",
    "m",
    "theta",
    "V",
    "qhat",
    "mhat",
    "thetahat",
    "Vhat",
    "eps_t",
    "eps_g",
    "branch",
    "status",
    "iterations",
    "residual",
)


def _model_args(p, *, omega=True):
    if omega:
        p.add_argument(
            "--omega",
            type=float,
            required=True,
            help="teacher mixing ω in [0, 1] (0 semantic, 1 positional)",
        )
    p.add_argument("--sigma", type=float, default=0.5, help="token noise σ (default 0.5)")
    p.add_argument("--lam", type=float, default=0.01, help="ridge λ (default 0.01)")
    p.add_argument(
        "--A",
        default="0.6,0.4,0.4,0.6",
        help="teacher positional matrix A as a11,a12,a21,a22 (row-stochastic; "
        "default 0.6,0.4,0.4,0.6)",
    )


def _alpha_max_arg(p):
    from theory.attention.spinodal import ALPHA_MAX

    p.add_argument(
        "--alpha-max",
        type=float,
        default=ALPHA_MAX,
        help=f"search α up to this value (default {ALPHA_MAX:g}); none below it: status "
        "no_transition / no_spinodal",
    )


def _quad_args(p):
    p.add_argument(
        "--method",
        default="split",
        choices=("split", "gh", "qmc", "mc"),
        help="quadrature: 'split' (default; polar rule that splits every circle at "
        "the jumps of the prox), 'gh' (plain tensor Gauss-Hermite), 'qmc', 'mc'",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="split: Gauss-Hermite nodes per η component (selects --eta gh; the "
        "default η rule is the trapezoid); gh: nodes per dimension (default "
        "14); qmc/mc: number of points",
    )
    p.add_argument(
        "--eta",
        default=None,
        choices=("trap", "gh"),
        help="split: rule for the outer η integral, 'trap' (default: trapezoid with "
        "spacing --h, converges geometrically here) or 'gh' (Gauss-Hermite "
        "with --nodes)",
    )
    p.add_argument(
        "--h",
        type=float,
        default=None,
        help="split: trapezoid spacing in η (default 0.5; 0.35 for a reference)",
    )
    p.add_argument(
        "--n-r", type=int, default=None, help="split: radial Gauss-Legendre nodes (default 16)"
    )
    p.add_argument(
        "--n-phi", type=int, default=None, help="split: scan angles per circle (default 16)"
    )
    p.add_argument(
        "--n-arc",
        type=int,
        default=None,
        help="split: Gauss-Legendre nodes per arc between jumps (default 4)",
    )
    p.add_argument(
        "--mixing",
        type=float,
        default=0.5,
        help="damping of the fallback damped/Anderson iteration: weight of the new "
        "iterate, in (0, 1] (default 0.5)",
    )
    p.add_argument(
        "--tol",
        type=float,
        default=None,
        help="relative tolerance on the undamped residual (default 1e-6, below "
        "the default quadrature's ~4e-5 error)",
    )


def _theory_tail(p, func):
    """Options shared by the theory subcommands (quadrature, iteration, --json) and handler."""
    _quad_args(p)
    add_json(p)
    p.set_defaults(func=func)


def _params(args, omega=None):
    from theory.attention import ERMParams

    try:
        a = [float(x) for x in str(args.A).split(",")]
    except ValueError:
        raise ValueError(f"--A must be four numbers a11,a12,a21,a22, got {args.A!r}") from None
    if len(a) != 4:
        raise ValueError(f"--A must be four numbers a11,a12,a21,a22, got {args.A!r}")
    return ERMParams(
        sigma=args.sigma,
        lam=args.lam,
        omega=args.omega if omega is None else omega,
        A=[[a[0], a[1]], [a[2], a[3]]],
    )


def _fp_kwargs(args):
    kw = dict(mixing=args.mixing, rule=_rule(args))
    if args.tol is not None:
        kw["tol"] = args.tol
    return kw


def _rule(args):
    from theory.attention import make_rule

    if args.method == "split":
        return make_rule(
            "split",
            args.nodes,
            n_r=args.n_r,
            n_phi=args.n_phi,
            n_arc=args.n_arc,
            h=args.h,
            eta=args.eta,
        )
    return make_rule(args.method, args.nodes)


# --------------------------------------------------------------------------- handlers


def cmd_fixed_point(args):
    from theory.attention import fixed_point

    p = _params(args)
    r = fixed_point(args.alpha, p, args.branch, **_fp_kwargs(args))
    d = r.to_dict()
    payload = {k: d[k] for k in FP_FIELDS}
    payload.update(
        alpha=r.alpha,
        omega=r.omega,
        init=r.init,
        theta_over_sigma2=r.theta_over_sigma2,
        message=r.message,
        quadrature=_rule(args).describe(),
    )
    if "alpha_spinodal" in r.metadata:  # the requested branch ended: where it begins
        payload["alpha_spinodal"] = r.metadata["alpha_spinodal"]
        # true: the cheap rule's estimate (α far from it), `theory erm spinodal` refines it
        payload["alpha_spinodal_cheap_rule"] = bool(r.metadata.get("alpha_spinodal_cheap_rule"))
    text = "\n".join(f"{k}: {v}" for k, v in payload.items())
    emit(args, payload, text)
    return 0 if r.converged else 1


CURVE_COLUMNS = (
    "kind",
    "alpha",
    "omega",
    "q",
    "m",
    "theta",
    "theta_over_sigma2",
    "V",
    "eps_t",
    "eps_g",
    "branch",
    "status",
    "iterations",
    "sweep",
)


def curve_rows(res, p, eps_lin):
    """The CSV/JSON rows of ``theory erm curve``: every point (kind = the branch it was started
    on), the global minimiser (kind "global": lowest ε_t among the converged points that stayed
    on their branch, any sweep direction) and the linear baseline (kind "baseline")."""
    from theory.attention.phases import point_row

    rows = [dict(r, kind=r["init"]) for r in res.rows()]
    rows += [dict(point_row(r), kind="global") for r in res.global_minimiser()]
    for a in sorted({r.alpha for r in res}):
        rows.append(
            dict(
                kind="baseline", alpha=a, omega=p.omega, eps_g=eps_lin, status="ok", branch="linear"
            )
        )
    return rows


def _csv(rows, columns) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(
            {
                k: ("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
                for k, v in r.items()
            }
        )
    return buf.getvalue()


def curve_table(args):
    """(params, rows, eps_g_lin) of the parsed ``theory erm curve`` options (:func:`curve_rows`;
    also the theory of ``theory overlay "erm curve ..."``)."""
    from theory.attention import curve, linear_baseline

    p = _params(args)
    alphas = parse_range(args.alphas)
    sweeps = {"both": ("forward", "backward"), "auto": None}.get(args.sweeps, (args.sweeps,))
    res = curve(
        alphas,
        p,
        ("semantic", "positional"),
        sweeps=sweeps,
        progress=not args.json and not args.no_progress,
        **_fp_kwargs(args),
    )
    eps_lin = linear_baseline(p)
    return p, curve_rows(res, p, eps_lin), eps_lin


def cmd_curve(args):
    p, rows, eps_lin = curve_table(args)
    if args.out:
        atomic_write_text(args.out, _csv(rows, CURVE_COLUMNS))
    if args.plot:
        from theory.attention.figures.theory import plot_curve

        plot_curve(rows, p, args.plot)
    lines = [
        f"{'kind':>10} {'alpha':>8} {'q':>10} {'m':>10} {'theta/s2':>9} {'V':>9} "
        f"{'eps_t':>11} {'eps_g':>11} {'branch':>10} status"
    ]
    for r in rows:
        if r["kind"] == "baseline":
            continue
        lines.append(
            f"{r['kind']:>10} {r['alpha']:8.4f} {r['q']:10.6f} {r['m']:10.6f} "
            f"{r['theta_over_sigma2']:9.5f} {r['V']:9.4f} {r['eps_t']:11.7f} "
            f"{r['eps_g']:11.7f} {r['branch']:>10} {r['status']}"
        )
    lines.append(f"linear baseline eps_g_lin = {eps_lin:.7f}")
    emit(args, dict(omega=p.omega, eps_g_lin=eps_lin, rows=rows), "\n".join(lines))


def cmd_transition(args):
    from theory.attention import transition

    p = _params(args)
    kw = _fp_kwargs(args)
    if args.alphas:
        kw["alphas"] = parse_range(args.alphas)
    t = transition(
        p, progress=not args.json and not args.no_progress, alpha_max=args.alpha_max, **kw
    )
    return _emit_result(args, t, TRANSITION_FIELDS, "no_transition")


TRANSITION_FIELDS = (
    "omega",
    "alpha_c",
    "alpha_l",
    "alpha_spinodal_semantic",
    "alpha_spinodal_positional",
    "alpha_max",
    "eps_g_lin",
    "eps_g_sem_at_alpha_c",
    "eps_g_pos_at_alpha_c",
    "eps_t_at_alpha_c",
    "alpha_l_branch",
    "status",
    "message",
)
SPINODAL_FIELDS = (
    "omega",
    "branch",
    "alpha_spinodal",
    "kind",
    "side",
    "alpha_pitchfork",
    "normal_form_a",
    "base",
    "alpha_max",
    "status",
    "message",
)


def _emit_result(args, res, fields, answer_status):
    """Emit the ``fields`` of a result; exit 0 when it converged or gave the answer that there
    is none (``answer_status``), 1 otherwise."""
    emit(args, {k: getattr(res, k) for k in fields})
    return 0 if res.status in ("converged", answer_status) else 1


def cmd_spinodal(args):
    from theory.attention import spinodal

    p = _params(args)
    s = spinodal(p, args.branch, alpha_max=args.alpha_max, rule=_rule(args), side=args.side)
    return _emit_result(args, s, SPINODAL_FIELDS, "no_spinodal")


def cmd_regions(args):
    from theory.attention import phases

    p = _params(args, omega=0.0)
    omegas = [float(w) for w in parse_range(args.omegas)]
    for w in omegas:
        p.replace(omega=w)  # validate every ω up front
    r = phases.regions(
        omegas,
        p,
        alpha_max=args.alpha_max,
        rule=_rule(args),
        progress=not args.json and not args.no_progress,
    )
    emit(
        args, dict(rows=r.rows(), regions=list(phases.REGIONS), status=r.status, message=r.message)
    )
    return 0 if r.converged else 1


PD_COLUMNS = ("omega", "alpha_c", "alpha_l", "eps_g_lin", "alpha_l_branch", "status", "message")


def cmd_phase_diagram(args):
    from theory.attention import phases

    p = _params(args, omega=0.0)
    omegas = parse_range(args.omegas)
    for w in omegas:
        p.replace(omega=float(w))  # validate every ω up front
    heat = _heatmap_setup(args, p)
    kw = _fp_kwargs(args)
    if args.alphas:
        kw["alphas"] = parse_range(args.alphas)

    def on_row(rows):  # rewritten atomically after every ω: an interruption keeps the done rows
        if args.out:
            atomic_write_text(args.out, _csv(rows, PD_COLUMNS))

    # one call: without --alphas each ω continues from the previous ω's α_c and fixed points
    rows = phases.phase_diagram(
        [float(w) for w in omegas],
        p,
        on_row=on_row,
        progress=not args.json and not args.no_progress,
        **kw,
    ).rows()
    on_row(rows)
    payload = dict(rows=rows)
    if heat is not None:
        from theory.attention.figures.simulation import simulated_delta_eps_t

        mean, sem = simulated_delta_eps_t(
            heat["alphas"],
            heat["omegas"],
            args.d,
            args.seeds,
            params=p,
            method=args.sim_method,
            store_path=args.sim_cache,
            progress=not args.json and not args.no_progress,
        )
        heat.update(
            delta_eps_t=mean,
            delta_eps_t_err=sem,
            d=args.d,
            seeds=args.seeds,
            method=args.sim_method,
        )
        payload["heatmap"] = heat
    if args.plot:
        if heat is not None:
            from theory.attention.figures.heatmap import plot_phase_heatmap

            plot_phase_heatmap(rows, heat, p, args.plot)
        else:
            from theory.attention.figures.theory import plot_phase_diagram

            plot_phase_diagram(rows, p, args.plot)
    text = "\n".join(
        f"omega={r['omega']:.4f} alpha_c={r['alpha_c']:.5f} "
        f"alpha_l={r['alpha_l']:.5f} ({r['status']})"
        for r in rows
    )
    if heat is not None:
        text += (
            f"\nsimulated Δε_t = ε_t(semantic init) − ε_t(positional init), d={args.d}, "
            f"{args.seeds} seed(s), rows ω, columns α = {heat['alphas']}:"
        )
        for w, line in zip(heat["omegas"], heat["delta_eps_t"]):
            text += f"\n  ω={w:.3f}: " + " ".join(f"{v:+.2e}" for v in line)
    emit(args, payload, text)


def _heatmap_setup(args, p):
    """Validate the heat-map options; ``None`` without ``--heatmap``."""
    if not args.heatmap:
        return None
    if np.abs(p.A_array - np.array([[0.6, 0.4], [0.4, 0.6]])).max() > 1e-12:
        raise ValueError("--heatmap simulates the reference A = 0.6,0.4,0.4,0.6 only; drop --A")
    if args.d < 2 or args.seeds < 1:
        raise ValueError("--heatmap needs --d >= 2 and --seeds >= 1")
    alphas = [float(a) for a in parse_range(args.heatmap_alphas)]
    omegas = [float(w) for w in parse_range(args.heatmap_omegas or args.omegas)]
    if min(alphas) <= 0:
        raise ValueError("--heatmap-alphas must be > 0")
    return dict(alphas=alphas, omegas=omegas)


SIM_FIELDS = ("q", "m", "theta", "eps_t", "eps_g", "status", "iterations")


def _summarise(results):
    out = {}
    for k in ("q", "m", "theta", "eps_t", "eps_g"):
        v = np.array([getattr(r, k, math.nan) for r in results], dtype=float)
        v = v[np.isfinite(v)]
        out[k] = float(v.mean()) if v.size else None
        out[f"{k}_err"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else None
    return out


def _sim_common(p):
    p.add_argument("--alpha", type=float, required=True, help="sample ratio α = n/d (> 0)")
    _model_args(p)
    p.add_argument("--d", type=int, default=400, help="token dimension d (default 400)")
    p.add_argument(
        "--init",
        default="semantic",
        choices=("semantic", "positional", "random"),
        help="initialisation (default semantic)",
    )
    p.add_argument("--seeds", type=int, default=3, help="number of seeds 0..S-1 (default 3)")
    p.add_argument(
        "--out",
        help="write one row per seed (alpha, omega, sigma, lam, d, init, q, m, theta, eps_t, "
        "eps_g, ..., seed) as CSV or JSON lines by the extension, for theory overlay",
    )
    add_json(p)


def _run_seeds(args, run, extra=()):
    """Run ``run(args, seed, params)`` for seeds 0..S-1; emit mean ± s.e. and every run."""
    if args.seeds < 1:
        raise ValueError("--seeds must be >= 1")
    p = _params(args)
    runs = [run(args, s, p) for s in range(args.seeds)]
    payload = dict(
        alpha=args.alpha,
        omega=args.omega,
        d=args.d,
        init=args.init,
        seeds=args.seeds,
        **_summarise(runs),
        runs=[{k: r.to_dict().get(k) for k in SIM_FIELDS + tuple(extra) + ("seed",)} for r in runs],
    )
    if args.out:  # one row per seed, named as the theory's fields (theory overlay reads it)
        from theory.store import write_table

        const = dict(alpha=args.alpha, omega=args.omega, sigma=p.sigma, lam=p.lam, d=args.d)
        write_table(args.out, [dict(const, init=args.init, **r) for r in payload["runs"]])
        payload["out"] = args.out
    emit(args, payload)


def _gd_run(args, seed, p):
    from theory.attention import simulate_gd

    return simulate_gd(
        args.alpha,
        p,
        args.d,
        args.init,
        seed,
        lr=args.lr,
        steps=args.steps,
        tol=args.tol,
        method=args.method,
    )


def _gamp_run(args, seed, p):
    from theory.attention import run_gamp

    return run_gamp(
        args.alpha,
        p,
        args.d,
        args.init,
        seed,
        max_iter=args.max_iter,
        mixing=args.mixing,
    )


def cmd_simulate(args):
    _run_seeds(args, _gd_run, ("method", "grad_rms"))


def cmd_gamp(args):
    _run_seeds(args, _gamp_run, ("V",))


# --------------------------------------------------------------------------- parser


def register(subparsers):
    erm = subparsers.add_parser(
        "erm",
        help="ERM of the positional-semantic attention model: replica theory, "
        "transition, GD / GAMP simulations",
        description="Replica-symmetric theory of empirical risk minimisation in the solvable "
        "dot-product attention model (Cui et al. 2024), L = 2, and its finite-d "
        "counterparts.",
    )
    sub = erm.add_subparsers(dest="erm_command", metavar="SUBCOMMAND")
    erm.set_defaults(func=lambda a: (erm.print_help(), 2)[1])

    p = sub.add_parser(
        "fixed-point",
        help="solve the state equations at one (α, ω) on a branch",
        description="One fixed point of the replica state equations; prints q, "
        "m, theta, V, eps_t, eps_g, branch, status, iterations.",
    )
    p.add_argument("--alpha", type=float, required=True, help="sample ratio α = n/d (> 0)")
    _model_args(p)
    p.add_argument(
        "--branch",
        default="semantic",
        choices=("semantic", "positional", "trivial"),
        help="initialisation / invariant subspace (default semantic); the reported "
        "branch is read from the converged order parameters",
    )
    _theory_tail(p, cmd_fixed_point)

    p = sub.add_parser(
        "curve",
        help="both branches over a range of α (+ global minimiser, linear baseline)",
        description="Follow the semantic and positional branches over α by "
        "continuation; rows per (kind, α) with kind in semantic, "
        "positional, global, baseline.",
    )
    _model_args(p)
    p.add_argument("--alphas", required=True, help="START:STOP:N (inclusive) or a,b,c")
    p.add_argument(
        "--sweeps",
        default="auto",
        choices=("auto", "forward", "backward", "both"),
        help="continuation direction(s); 'auto' (default): the semantic branch "
        "backward from the largest α (it disappears at small α), the "
        "positional one forward",
    )
    p.add_argument("--out", help="write the rows as CSV (atomically)")
    p.add_argument("--plot", help="write a figure (PNG) of the curves")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _theory_tail(p, cmd_curve)

    p = sub.add_parser(
        "transition",
        help="α_c (equal ε_t of both branches) and α_l (ε_g of "
        "the global minimiser = linear baseline)",
        description="Locate α_c(ω) by bracketing + Brent on ε_t(sem) - ε_t(pos) "
        "and α_l(ω) where the global minimiser's ε_g crosses the "
        "linear baseline.",
    )
    _model_args(p)
    p.add_argument(
        "--alphas",
        help="bracketing grid START:STOP:N or a,b,c (default: adaptive, "
        "geometric steps of 1.25 from α = 1)",
    )
    _alpha_max_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _theory_tail(p, cmd_transition)

    p = sub.add_parser(
        "spinodal",
        help="where a branch begins: the α at which it leaves the trivial fixed point",
        description="The spinodal α_s of the semantic (or positional) branch: the α where "
        "the trivial fixed point's eigenvalue in the θ (m) direction crosses 1, a pitchfork; "
        "the branch exists above it.  Its kind is checked from the branch's normal form "
        "(normal_form_a): a subcritical pitchfork is followed to its fold, reported as "
        "kind saddle-node with alpha_pitchfork beside it.",
    )
    _model_args(p)
    p.add_argument(
        "--branch",
        default="semantic",
        choices=("semantic", "positional"),
        help="the branch (default semantic)",
    )
    p.add_argument(
        "--side",
        default="lower",
        choices=("lower", "upper"),
        help="lower: where the branch begins (default); upper: where it returns to the "
        "trivial point at larger α (the positional branch at small ω)",
    )
    _alpha_max_arg(p)
    _theory_tail(p, cmd_spinodal)

    p = sub.add_parser(
        "regions",
        help="the theory regions of the (α, ω) plane: which branches exist, which is global",
        description="Per ω the boundaries of the regions (only positional / both, positional "
        "global / both, semantic global / only semantic / neither): the semantic spinodal, the "
        "positional branch's lower and upper spinodals and saddle-node, and α_c.  Slow: a "
        "transition and three spinodals per ω.",
    )
    p.add_argument("--omegas", required=True, help="START:STOP:N (inclusive) or a,b,c")
    _model_args(p, omega=False)
    _alpha_max_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _theory_tail(p, cmd_regions)

    p = sub.add_parser(
        "phase-diagram",
        help="α_c(ω) and α_l(ω) on a grid of ω",
        description="The (α, ω) phase diagram: α_c and α_l for every ω.",
    )
    p.add_argument("--omegas", required=True, help="START:STOP:N (inclusive) or a,b,c")
    _model_args(p, omega=False)
    p.add_argument(
        "--alphas",
        help="bracketing grid in α for every ω (default: adaptive, "
        "from the previous ω's α_c, continuation in ω)",
    )
    p.add_argument("--out", help="CSV of the rows (rewritten atomically after every ω)")
    p.add_argument("--plot", help="write the phase diagram (PNG)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--heatmap",
        action="store_true",
        help="also simulate Δε_t = ε_t(semantic init) − ε_t(positional init) at "
        "finite d on an (α, ω) grid; --plot then draws it as a heat map under "
        "the theory lines, --json adds it as 'heatmap'",
    )
    p.add_argument("--d", type=int, default=100, help="heat map: token dimension (default 100)")
    p.add_argument("--seeds", type=int, default=1, help="heat map: seeds 0..S-1 (default 1)")
    p.add_argument(
        "--heatmap-alphas",
        default="0.5:3:6",
        help="heat map α grid, START:STOP:N or a,b,c (default 0.5:3:6)",
    )
    p.add_argument("--heatmap-omegas", help="heat map ω grid (default: --omegas)")
    p.add_argument(
        "--sim-method",
        default="lbfgs",
        choices=("nesterov", "bb", "gd", "lbfgs"),
        help="heat map minimiser (default lbfgs, the figures' choice)",
    )
    p.add_argument(
        "--sim-cache",
        help="heat map: store of the runs (a .jsonl file, appended as they finish; an "
        "interrupted run resumes)",
    )
    _theory_tail(p, cmd_phase_diagram)

    p = sub.add_parser(
        "simulate",
        help="minimise the empirical risk at finite d (per seed)",
        description="Full-batch minimisation of the empirical risk at dimension "
        "d; mean ± standard error over seeds of q, m, theta, eps_t, "
        "eps_g, plus every run (status converged = RMS gradient "
        "below --tol).",
    )
    _sim_common(p)
    p.add_argument(
        "--method",
        default="nesterov",
        choices=("nesterov", "bb", "gd", "lbfgs"),
        help="'nesterov' (default: accelerated GD, backtracked Lipschitz step, "
        "adaptive restart; ~50-100 iterations at d=1000), 'bb' (Barzilai-"
        "Borwein, non-monotone line search), 'gd' (plain GD with --lr: the "
        "paper's protocol, thousands of steps), 'lbfgs' (scipy)",
    )
    p.add_argument(
        "--lr", type=float, default=0.15, help="learning rate of --method gd (default 0.15)"
    )
    p.add_argument("--steps", type=int, default=3000, help="maximal iterations (default 3000)")
    p.add_argument(
        "--tol",
        type=float,
        default=1e-6,
        help="stop when the RMS gradient |∇L|/√d < tol (default 1e-6)",
    )
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser(
        "gamp",
        help="GAMP at finite d (per seed)",
        description="GAMP for this model (state evolution = the replica "
        "equations); mean ± standard error over seeds.",
    )
    _sim_common(p)
    p.add_argument("--max-iter", type=int, default=200, help="GAMP iterations (default 200)")
    p.add_argument(
        "--mixing",
        type=float,
        default=0.2,
        help="damping, weight of the new iterate (default 0.2; the positional "
        "branch needs < 0.3, see run_gamp)",
    )
    p.set_defaults(func=cmd_gamp)

    # the general model (any L, ranks r, r_t, A, encodings): theory.cli.erm_general
    from theory.cli import erm_general

    erm_general.add_parsers(sub)
