"""``theory erm general-fixed-point``, ``general-simulate``, ``general-fixed-m`` and
``general-transition``: the
general model of docs/attention.md §10 (any L, ranks r and r_t, any A and encodings).  Wired
into ``theory erm`` by ``theory.cli.erm`` through :func:`add_parsers`."""

from __future__ import annotations

import numpy as np

from theory.cli._common import add_json, emit


def _matrix(text, L, name):
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(
            f"--{name} must be {L * L} comma-separated numbers (row-major), got {text!r}"
        ) from None
    if len(vals) != L * L:
        raise ValueError(
            f"--{name} must have L*L = {L * L} comma-separated numbers (row-major), got {len(vals)}"
        )
    return np.array(vals).reshape(L, L)


def _model_args(p):
    p.add_argument("--L", type=int, default=2, help="sequence length L >= 2 (default 2)")
    p.add_argument("--r", type=int, default=1, help="student rank r (default 1)")
    p.add_argument("--r-t", type=int, default=1, help="teacher rank r_t (default 1)")
    p.add_argument(
        "--omega",
        type=float,
        default=0.3,
        help="teacher mixing ω in [0, 1] (0 semantic, 1 positional; default 0.3)",
    )
    p.add_argument("--sigma", type=float, default=0.5, help="token noise σ (default 0.5)")
    p.add_argument("--lam", type=float, default=0.01, help="ridge λ (default 0.01)")
    p.add_argument(
        "--A",
        default=None,
        help="teacher positional matrix, L*L comma-separated numbers row-major "
        "(row-stochastic; default 0.6 on the diagonal, 0.4/(L-1) elsewhere)",
    )
    p.add_argument(
        "--G",
        default=None,
        help="Gram matrix of the encodings G[l,l'] = p_l.p_l', L*L numbers "
        "row-major (symmetric PSD; default: unit encodings at the vertices of "
        "a regular simplex, L=2: 1,-1,-1,1)",
    )


def _params(args):
    from theory.attention.general import GeneralParams

    L = args.L
    if int(L) != L or L < 2:
        raise ValueError(f"--L must be an integer >= 2, got {L}")
    A = None if args.A is None else _matrix(args.A, L, "A")
    G = None if args.G is None else _matrix(args.G, L, "G")
    return GeneralParams(
        L=L, r=args.r, r_t=args.r_t, sigma=args.sigma, lam=args.lam, omega=args.omega, A=A, G=G
    )


def _fmt(a):
    return np.array2string(np.asarray(a), precision=5, separator=", ").replace("\n", "")


def cmd_fixed_point(args):
    from theory.attention.general import fixed_point

    p = _params(args)
    r = fixed_point(
        args.alpha,
        p,
        args.branch,
        mixing=args.mixing,
        tol=args.tol,
        max_iter=args.max_iter,
        n=args.n,
        n_rep=args.n_rep,
        method=args.method,
        rng=args.seed,
        error=not args.no_error,
    )
    d = r.to_dict()
    lines = [
        f"alpha={r.alpha:g} omega={r.omega:g} L={p.L} r={p.r} r_t={p.r_t} "
        f"branch={r.branch} (init {r.init}) status={r.status} "
        f"iterations={r.iterations}"
    ]
    if r.q is not None:
        for k in ("q", "m", "theta", "V"):
            err = getattr(r, f"{k}_err")
            e = f" ± {_fmt(err)}" if err is not None else ""
            lines.append(f"{k:6s} = {_fmt(getattr(r, k))}{e}")
        for k in ("eps_t", "eps_g"):
            err = getattr(r, f"{k}_err")
            e = f" ± {float(err):.2g}" if err is not None else ""
            lines.append(f"{k:6s} = {getattr(r, k):.6g}{e}")
    if r.message:
        lines.append(f"message: {r.message}")
    emit(args, d, "\n".join(lines))
    return 0 if r.converged else 1


def cmd_simulate(args):
    from theory.attention.finite_d.general import make_problem, simulate

    p = _params(args)
    rows = []
    lines = []
    for seed in range(args.seed, args.seed + args.seeds):
        prob = make_problem(args.alpha, p, args.d, seed, n_test=args.n_test)
        for init in args.init.split(","):
            r = simulate(
                args.alpha,
                p,
                args.d,
                init.strip(),
                seed,
                problem=prob,
                tol=args.tol,
                steps=args.steps,
            )
            rows.append(r.to_dict())
            lines.append(
                f"seed={seed} init={r.init:10s} status={r.status} eps_t={r.eps_t:.6g} "
                f"eps_g={r.eps_g:.6g}±{r.eps_g_err:.1g} q={_fmt(r.q)} m={_fmt(r.m)} "
                f"theta={_fmt(r.theta)}"
            )
    emit(args, dict(runs=rows), "\n".join(lines))
    return 0


def cmd_fixed_m(args):
    from theory.attention.finite_d.general import simulate_fixed_m
    from theory.attention.general import fixed_m_point

    p = _params(args)
    try:
        m = np.array([float(x) for x in str(args.m).split(",") if x.strip()])
    except ValueError:
        raise ValueError(f"--m must be L comma-separated numbers, got {args.m!r}") from None
    r = fixed_m_point(
        args.alpha, m, p, q0=args.q0, V0=args.V0, n=args.n, n_rep=args.n_rep, rng=args.seed
    )
    payload = dict(theory=r.to_dict(), simulations=[])
    lines = [f"RS at fixed m={_fmt(m)} (theta = 0), alpha={r.alpha:g} L={p.L}: status={r.status}"]
    for k in ("q", "V", "eps_t", "eps_g"):
        err = getattr(r, f"{k}_err")
        e = f" ± {float(err):.2g}" if err is not None else ""
        lines.append(f"  {k:6s} = {getattr(r, k):.6g}{e}")
    lines.append(f"  d eps_t/dm = {_fmt(r.grad_m)}")
    if args.d:
        for seed in range(args.seed, args.seed + args.seeds):
            s = simulate_fixed_m(args.alpha, m, p, d=args.d, seed=seed, restarts=args.restarts)
            payload["simulations"].append(s.to_dict())
            lines.append(
                f"L-BFGS d={args.d} seed={seed} status={s.status} eps_t={_fmt(s.eps_t)} "
                f"q={_fmt(s.q)} mutual/self overlap={s.mutual_ratio:.3f}"
            )
    emit(args, payload, "\n".join(lines))
    return 0 if r.converged else 1


def cmd_transition(args):
    from theory.attention.general import transition

    p = _params(args)
    branches = tuple(b.strip() for b in str(args.branches).split(",") if b.strip())
    r = transition(
        p,
        branches,
        hint=args.hint,
        xtol=args.xtol,
        alpha_max=args.alpha_max,
        max_time=args.max_time,
        n=args.n,
        n_rep=args.n_rep,
        rng=args.seed,
        rs=not args.no_rs,
        rs_d=args.rs_d,
        rs_restarts=args.rs_restarts,
        progress=args.progress,
    )
    err = f" ± {r.alpha_c_err:.2g}" if r.alpha_c_err is not None else ""
    br = r.alpha_c_bracket
    br = f"  (bracket [{br[0]:.6g}, {br[1]:.6g}])" if br else ""
    lines = [
        f"L={p.L} r={p.r} r_t={p.r_t} omega={p.omega:g} branches {r.branches[0]} (above) / "
        f"{r.branches[1]} (below): status={r.status}",
        f"alpha_c   = {r.alpha_c:.6g}{err}{br}",
        f"alpha_l   = {r.alpha_l:.6g} ({r.alpha_l_branch or '-'})",
        f"eps_g_lin = {r.eps_g_lin:.6g} ± {r.eps_g_lin_err:.2g}",
    ]
    for b, fp in r.fixed_points.items():
        lines.append(
            f"at alpha_c, {b}: eps_t={fp['eps_t']:.6g} eps_g={fp['eps_g']:.6g} q={_fmt(fp['q'])} "
            f"m={_fmt(fp['m'])} theta={_fmt(fp['theta'])} RS stable={r.rs_stable.get(b)} "
            f"(q_ab/q={r.rs_overlap_ratio.get(b, float('nan')):.4g})"
        )
    if r.message:
        lines.append(f"message: {r.message}")
    emit(args, r.to_dict(), "\n".join(lines))
    return 0 if r.status in ("converged", "no_transition") else 1


def add_parsers(erm_subparsers) -> None:
    """Add ``general-fixed-point``, ``general-simulate``, ``general-fixed-m`` and
    ``general-transition`` to the ``theory erm`` subparsers."""
    p = erm_subparsers.add_parser(
        "general-fixed-point",
        help="generalised replica state equations (any L, r, r_t, A, encodings)",
        description="Solve the generalised replica state equations of the positional-semantic "
        "model (docs/attention.md §10) by a damped Anderson iteration with QMC expectations; "
        "prints the "
        "order parameters (matrices), eps_t, eps_g and QMC standard errors.",
    )
    p.add_argument("--alpha", type=float, required=True, help="sample ratio α = n/d")
    p.add_argument(
        "--branch",
        default="semantic",
        choices=("semantic", "positional", "free"),
        help="semantic (m = 0 imposed), positional (θ = 0 imposed) or free",
    )
    _model_args(p)
    p.add_argument(
        "--n", type=int, default=2**13, help="QMC points per scrambling (power of 2; default 8192)"
    )
    p.add_argument(
        "--n-rep",
        type=int,
        default=4,
        help="independent scramblings (error bar from their spread; default 4)",
    )
    p.add_argument(
        "--method",
        default="qmc",
        choices=("qmc", "mc"),
        help="expectations by scrambled Sobol (default) or plain Monte Carlo",
    )
    p.add_argument(
        "--mixing",
        type=float,
        default=0.2,
        help="damping: weight of the new iterate, in (0, 1] (default 0.2)",
    )
    p.add_argument(
        "--tol",
        type=float,
        default=1e-6,
        help="relative tolerance on the undamped residual (default 1e-6)",
    )
    p.add_argument("--max-iter", type=int, default=300, help="maximal iterations (default 300)")
    p.add_argument("--seed", type=int, default=0, help="seed of the QMC scramblings (default 0)")
    p.add_argument(
        "--no-error",
        action="store_true",
        help="skip the per-scrambling re-solves that give the error bars",
    )
    add_json(p)
    p.set_defaults(func=cmd_fixed_point)

    s = erm_subparsers.add_parser(
        "general-simulate",
        help="finite-d L-BFGS on the empirical risk of the generalised model",
        description="Minimise the exact finite-d empirical risk of the generalised model by "
        "L-BFGS from the given initialisations; prints eps_t, eps_g (fresh samples) "
        "and the overlaps q, m, theta per run.",
    )
    s.add_argument("--alpha", type=float, required=True, help="sample ratio α = n/d")
    s.add_argument("--d", type=int, default=200, help="token dimension d (default 200)")
    s.add_argument(
        "--init",
        default="semantic,positional",
        help="comma-separated initialisations among semantic, positional, random",
    )
    s.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    s.add_argument("--seeds", type=int, default=1, help="number of seeds (default 1)")
    s.add_argument("--n-test", type=int, default=5000, help="fresh samples for eps_g")
    s.add_argument("--tol", type=float, default=1e-7, help="L-BFGS gradient tolerance")
    s.add_argument("--steps", type=int, default=5000, help="maximal L-BFGS iterations")
    _model_args(s)
    add_json(s)
    s.set_defaults(func=cmd_simulate)

    f = erm_subparsers.add_parser(
        "general-fixed-m",
        help="RS training loss at a fixed positional overlap m (theta = 0), optionally with "
        "finite-d L-BFGS restricted to the same m",
        description="RS state equations with the positional overlap m held fixed (theta = 0, "
        "rank 1): q, V, eps_t(m), eps_g and d eps_t/dm; with --d also L-BFGS on "
        "the finite-d risk restricted to the same m from several random restarts "
        "per data set, and the mean mutual/self overlap of the minima found (1 for a "
        "unique minimum).",
    )
    f.add_argument("--alpha", type=float, required=True, help="sample ratio α = n/d")
    f.add_argument(
        "--m",
        required=True,
        help="positional overlaps m_1,...,m_L (comma-separated; in the range of G, "
        "e.g. summing to 0 for simplex encodings)",
    )
    _model_args(f)
    f.add_argument(
        "--n", type=int, default=2**12, help="QMC points per scrambling (power of 2; default 4096)"
    )
    f.add_argument("--n-rep", type=int, default=2, help="scramblings (default 2)")
    f.add_argument("--q0", type=float, default=0.1, help="initial q (default 0.1)")
    f.add_argument("--V0", type=float, default=10.0, help="initial V (default 10)")
    f.add_argument("--seed", type=int, default=0, help="QMC / first data seed (default 0)")
    f.add_argument(
        "--d",
        type=int,
        default=0,
        help="also run L-BFGS at this dimension d (default 0: theory only)",
    )
    f.add_argument("--seeds", type=int, default=1, help="data sets for --d (default 1)")
    f.add_argument(
        "--restarts", type=int, default=3, help="random restarts per data set for --d (default 3)"
    )
    add_json(f)
    f.set_defaults(func=cmd_fixed_m)

    t = erm_subparsers.add_parser(
        "general-transition",
        help="alpha_c between two branches and alpha_l of the general model, with an RS check",
        description="First-order transition of the general model (docs/attention.md §10.1): "
        "alpha_c where the two branches' training losses cross (bracket + Brent on frozen QMC "
        "nodes, QMC error bar), alpha_l where the global minimiser's eps_g crosses the general "
        "linear baseline, and a finite-d L-BFGS restarts check of replica symmetry on each "
        "branch's fixed point at alpha_c.  Exit 0 when converged or no_transition, 1 otherwise "
        "(max_iter: no bracket or no convergence; max_time: the time bound was spent, the "
        "bracket of alpha_c found so far is printed and is in --json's alpha_c_bracket).",
    )
    t.add_argument(
        "--branches",
        default="semantic,positional",
        help="ABOVE,BELOW: the branch that wins above alpha_c, then the one below, among "
        "semantic, positional, free (default semantic,positional)",
    )
    _model_args(t)
    t.add_argument("--hint", type=float, default=None, help="a guess of alpha_c (default 1)")
    t.add_argument(
        "--xtol", type=float, default=1e-3, help="Brent tolerance in alpha (default 1e-3)"
    )
    t.add_argument(
        "--alpha-max", type=float, default=20.0, help="end of the search in alpha (default 20)"
    )
    t.add_argument(
        "--max-time",
        type=float,
        default=3600.0,
        help="wall-clock bound in seconds: each fixed point gets the time left and stops at it; "
        "when spent, status max_time and exit 1, with what was found (default 3600)",
    )
    t.add_argument(
        "--n", type=int, default=2**11, help="QMC points per scrambling (power of 2; default 2048)"
    )
    t.add_argument("--n-rep", type=int, default=4, help="scramblings (default 4)")
    t.add_argument("--seed", type=int, default=0, help="seed of the QMC scramblings (default 0)")
    t.add_argument(
        "--rs-d", type=int, default=400, help="dimension d of the RS restarts check (default 400)"
    )
    t.add_argument(
        "--rs-restarts", type=int, default=3, help="L-BFGS restarts of the RS check (default 3)"
    )
    t.add_argument("--no-rs", action="store_true", help="skip the RS restarts check")
    t.add_argument("--progress", action="store_true", help="progress bar on stderr")
    add_json(t)
    t.set_defaults(func=cmd_transition)
