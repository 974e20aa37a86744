"""``theory sgd ...``: SGD in sequence single-index models (``theory.ssi``; docs/ssi.md).

Subcommands: ``ode`` (the (e, m) ODE to convergence), ``flatness`` (kappa and the Hessian at the
origin), ``boundaries`` (where each phase-diagram boolean flips on a line of any L = 2
teacher), ``phase-diagram`` (the six regions on an (a, omega) or (s, omega) grid),
``classify`` (the region of one point, any L), ``simulate`` (finite-d SGD over seeds) and
``gain`` (tied/untied gain vs L, predicted and optionally simulated).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from theory._util import atomic_write_text, check_int, check_positive, dumps_json, parse_range
from theory.cli._common import add_json, emit


def _add_model_args(p, *, default_L=None):
    g = p.add_argument_group("model")
    g.add_argument(
        "--target",
        default=None,
        help="target g(z1..zL) as an expression (e.g. 'He2(z1)+He2(z2)'); or use "
        "--omega/--a for the positional-semantic matrix target (docs/ssi.md eq. 3)",
    )
    g.add_argument(
        "--omega",
        type=float,
        default=None,
        help="positional weight omega in [0, 1] of y = (1-omega) softmax(z*z*^T) + omega A_a",
    )
    g.add_argument("--a", type=float, default=None, help="positional strength a of A_a")
    g.add_argument(
        "--model",
        choices=("attention", "tied", "untied"),
        default="attention",
        help="student: tied attention, tied network or untied network",
    )
    g.add_argument(
        "--L",
        type=int,
        default=default_L,
        help="sequence length (default: highest variable index of --target; 2 for "
        "the positional-semantic target)",
    )
    g.add_argument(
        "--pe",
        choices=("none", "opposite", "orthonormal"),
        default=None,
        help="positional encoding (attention): none, opposite (P_1 = -P_2, L = 2) "
        "or orthonormal rows (default: opposite for --omega/--a, else none)",
    )
    g.add_argument(
        "--pe-target",
        default=None,
        dest="pe_target",
        metavar="A1,...,AL",
        help="injected encoding (attention, scalar target): the components a_l of P_l along "
        "w*, P_l = a_l w*/sqrt(d) + P~_l (paper Fig. 6; docs/ssi.md section 4b)",
    )
    g.add_argument(
        "--reduction",
        choices=("identity", "trace"),
        default=None,
        help="attention output: identity (matrix, squared Frobenius loss) or trace "
        "(default: identity for --omega/--a, trace for a scalar --target)",
    )
    g.add_argument(
        "--trace-norm",
        choices=("sum", "sqrtL"),
        default="sum",
        dest="trace_norm",
        help="trace reduction = Tr A (sum) or Tr A / sqrt(L) (the authors' code)",
    )
    g.add_argument(
        "--activation",
        default="relu",
        help="activation of the tied/untied network: a name (relu, linear, tanh, erf, "
        "sigmoid, square, he2, abs, ...) or an expression in x in the target language "
        "(e.g. 'x**2+x', 'tanh(2*x)'); an expression's Hermite moments come from the targets' "
        "Hermite engine (exact or numerical, reported as activation_hermite); the simulators "
        "run it compiled to numba (a name keeps its own kernel)",
    )


def _add_out(p, what):
    p.add_argument(
        "--out",
        default=None,
        help=f"write {what} as a table, CSV or JSON lines by the extension (.csv, .jsonl, "
        ".json): one row per recorded time, columns t, steps, m, e (e_1..e_r for an encoding of "
        "rank r > 1), m_1..m_L (untied), risk, lr, d, eta (and seed), the same for `sgd ode` and "
        "`sgd simulate`, so `theory overlay` draws one over the other",
    )


def _activation_fields(model) -> dict:
    """The student activation and how its Hermite moments were computed (networks only)."""
    if not hasattr(model, "activation"):
        return {}
    return dict(activation=model.activation, activation_hermite=model.activation_hermite)


def _write_out(args, trajectories, payload):
    """``--out``: the rows of every trajectory in one table (theory.store.write_table)."""
    if args.out:
        from theory.store import write_table

        write_table(args.out, [row for tr in trajectories for row in tr.points()])
        payload["out"] = args.out


def _pe_target(args):
    """The --pe-target list a_1..a_L (None when not given)."""
    v = getattr(args, "pe_target", None)
    if v is None:
        return None
    try:
        return [float(x) for x in v.split(",")]
    except ValueError:
        raise ValueError(f"--pe-target must be L comma-separated numbers, got {v!r}") from None


def build_model(args):
    """The ``theory.ssi`` model described by the common options."""
    from theory import ssi

    ps = args.omega is not None or args.a is not None
    if ps and args.target is not None:
        raise ValueError("give either --target or --omega/--a, not both")
    if not ps and args.target is None:
        raise ValueError("give a target: --target EXPR or --omega W --a A")
    if getattr(args, "pe_target", None) is not None and (ps or args.model != "attention"):
        raise ValueError("--pe-target is for --model attention with a scalar --target")
    if ps:
        if args.omega is None or args.a is None:
            raise ValueError("the positional-semantic target needs both --omega and --a")
        if args.model != "attention":
            raise ValueError("the positional-semantic target is for --model attention")
        L = 2 if args.L is None else args.L
        tgt = ssi.PositionalSemanticTarget(args.omega, args.a, L=L)
        return ssi.AttentionModel(
            tgt, L=L, pe=args.pe or "opposite", reduction=args.reduction or "identity"
        )
    t = ssi.parse_target(args.target, args.L)
    if args.model == "attention":
        return ssi.AttentionModel(
            t,
            L=t.L,
            pe=args.pe or "none",
            reduction=args.reduction or "trace",
            trace_norm=args.trace_norm,
            pe_target=_pe_target(args),
        )
    if args.pe not in (None, "none"):
        raise ValueError("the tied/untied networks have no positional encoding: drop --pe")
    cls = ssi.TiedNetwork if args.model == "tied" else ssi.UntiedNetwork
    return cls(t, L=t.L, activation=args.activation)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sgd",
        help="SGD theory of sequence single-index models: ODE, flatness, phase diagram",
        description="Theory of one-pass spherical SGD in sequence single-index models and "
        "single-layer tied attention (docs/ssi.md): the (e, m) ODE, the "
        "flatness index, the semantic/positional phase diagram, finite-d SGD and tied/untied "
        "gains.",
    )
    sub = p.add_subparsers(dest="sgd_command", metavar="SUBCOMMAND")
    fmt = argparse.ArgumentDefaultsHelpFormatter

    q = sub.add_parser(
        "ode",
        formatter_class=fmt,
        help="integrate the (e, m) ODE until convergence",
        description="Integrate the d -> infinity ODE of (e, m) (docs/ssi.md eq. 18; the "
        "published signs corrected: drift -grad R, noise -(gamma/2) K) from m0 = 1/sqrt(d), "
        "e0 = 1/sqrt(d) per encoding coordinate until stationary; report the weak-recovery "
        "time (||(e, m)|| >= eta = 2 sqrt((1 + r)/d), twice the start's norm, r the rank of the "
        "encoding) as t and as SGD steps nu = t d / gamma, the final point and which minimum "
        "it is.",
        epilog="Examples: theory sgd ode --omega 0.67 --a 1 --lr 0.05 --d 1000 --json;  "
        "theory sgd ode --target 'He2(z1)+He2(z2)' --model tied --lr 0.05 --d 1000",
    )
    _add_model_args(q)
    q.add_argument("--lr", type=float, required=True, help="SGD step size gamma")
    q.add_argument("--d", type=float, required=True, help="dimension d (sets m0, eta, steps)")
    q.add_argument("--m0", type=float, default=None, help="initial m (default 1/sqrt(d))")
    q.add_argument("--e0", type=float, default=None, help="initial e (default 1/sqrt(d))")
    q.add_argument(
        "--eta",
        type=float,
        default=None,
        help="weak-recovery threshold (default 2 sqrt((1 + r)/d))",
    )
    q.add_argument(
        "--t-max",
        type=float,
        default=None,
        dest="t_max",
        help="fixed horizon in ODE time (default: until stationary)",
    )
    _add_out(q, "the whole trajectory")
    add_json(q)
    q.set_defaults(func=_ode)

    q = sub.add_parser(
        "flatness",
        formatter_class=fmt,
        help="flatness index kappa and Hessian at the origin",
        description="kappa = lowest order k > 0 with a non-zero derivative of R at (e, m) = "
        "(0, 0), and the Hessian there in the coordinates (e, m).  Exact zero pattern for "
        "polynomial targets (exact Hermite coefficients; student moments by Gauss-Hermite).",
        epilog="Example: theory sgd flatness --target '4/3 + He4(z1) + 2*He4(z2)' --L 2 --pe "
        "opposite --reduction trace --trace-norm sqrtL --json",
    )
    _add_model_args(q)
    q.add_argument(
        "--max-order",
        type=int,
        default=8,
        dest="max_order",
        help="highest derivative order searched",
    )
    add_json(q)
    q.set_defaults(func=_flatness)

    q = sub.add_parser(
        "boundaries",
        formatter_class=fmt,
        help="where the phase-diagram booleans flip for any L = 2 teacher",
        description="On one line of the phase diagram of the L = 2 teacher y = (1-omega) "
        "softmax(z*z*^T) + omega A (docs/ssi.md section 8): where (1) the steepest direction at "
        "the origin switches to positional, (2) the global minimum switches to positional, (3) "
        "the positional minimum appears, (4) the semantic minimum disappears (null where no "
        "flip).  The line is omega in [0, 1] at fixed A (--along omega), or the strength s of "
        "A(s) = softmax_row(s B) at fixed --omega (--along strength).  Brent roots of exact "
        "criteria (2-D integrals, Gauss-Hermite converged to ~1e-9).",
    )
    _add_teacher_args(q)
    q.add_argument(
        "--along",
        choices=("omega", "strength"),
        default="omega",
        help="the line: omega at fixed A, or the strength s of softmax_row(s B) at fixed --omega",
    )
    q.add_argument("--omega", type=float, default=None, help="the fixed omega of --along strength")
    q.add_argument(
        "--s-range",
        default="0:4",
        dest="s_range",
        help="S_MIN:S_MAX of --along strength (s = 1 is the teacher given)",
    )
    add_json(q)
    q.set_defaults(func=_boundaries)

    q = sub.add_parser(
        "phase-diagram",
        formatter_class=fmt,
        help="the (a, omega) or (s, omega) phase diagram of an L = 2 teacher",
        description="Classify every point of an (a, omega) grid (the A_a family) or, with "
        "--B/--A/--A-logits, of an (s, omega) grid on A(s) = softmax_row(s B) into the six "
        "regions of docs/ssi.md section 8 with the exact criteria; optionally plot it (with "
        "the boundaries overlaid) and save the arrays as JSON.",
    )
    q.add_argument("--grid", type=int, default=200, help="grid points per axis")
    q.add_argument(
        "--a-range", default="0.7:1", dest="a_range", help="A_MIN:A_MAX of the A_a family"
    )
    q.add_argument(
        "--s-range",
        default=None,
        dest="s_range",
        help="S_MIN:S_MAX of the strength axis with --B/--A/--A-logits (default 0:2)",
    )
    q.add_argument("--omega-range", default="0.4:1", dest="omega_range", help="W_MIN:W_MAX")
    _add_teacher_args(q, family=False)
    q.add_argument(
        "--check-global",
        action="store_true",
        dest="check_global",
        help="also scan R over the disk and flag cells where the global minimum is "
        "not one of the two candidates (P_1 = -P_2 only)",
    )
    q.add_argument("--plot", default=None, help="write the figure to this PNG file")
    q.add_argument("--out", default=None, help="write the grid and regions as JSON")
    add_json(q)
    q.set_defaults(func=_phase)

    about = (
        "The region of docs/ssi.md section 8 at one (A, omega): by the exact criteria at L = 2 "
        "with a rank-1 encoding (exact: true), otherwise (L > 2, or a rank-2 Gram matrix) by a "
        "stated numerical classification (exact: false; the message says how: constrained "
        "minimisation of the quadrature risk from the semantic corner and from positional "
        "starts, and the Hessian at the origin)."
    )
    q = sub.add_parser(
        "classify",
        formatter_class=fmt,
        help="the region of one (A, omega), any L",
        description=about,
    )
    q.add_argument("--omega", type=float, required=True, help="positional weight omega")
    _add_teacher_args(q)
    q.add_argument(
        "--quad-nodes",
        type=int,
        default=None,
        dest="quad_nodes",
        help="nodes of the numerical fallback's quadrature (None: the engine's default)",
    )
    q.add_argument("--starts", type=int, default=3, help="positional starts of the fallback")
    q.add_argument("--seed", type=int, default=0, help="seed of the QMC nodes and the starts")
    add_json(q)
    q.set_defaults(func=_classify)

    q = sub.add_parser(
        "simulate",
        formatter_class=fmt,
        help="finite-d online SGD over many seeds",
        description="Online spherical SGD at dimension d (full simulator, or the exact reduced "
        "chain with --reduced), one fresh sample per step; reports the weak-recovery step of "
        "each seed and the final (e, m).",
    )
    _add_model_args(q)
    q.add_argument("--lr", type=float, required=True, help="step size gamma")
    q.add_argument("--d", type=int, required=True, help="dimension d")
    q.add_argument("--seeds", type=int, default=8, help="number of seeds")
    q.add_argument("--seed", type=int, default=0, help="master seed")
    q.add_argument("--reduced", action="store_true", help="use the exact reduced chain")
    q.add_argument(
        "--start",
        choices=("random", "origin"),
        default="random",
        help="random start on the sphere, or exactly at (e, m) = (0, 0)",
    )
    q.add_argument(
        "--steps",
        type=int,
        default=None,
        help="number of steps (default: until recovery, then as many again)",
    )
    q.add_argument("--workers", type=int, default=None, help="processes (default: CPUs)")
    _add_out(q, "every seed's trajectory (a column seed)")
    add_json(q)
    q.set_defaults(func=_simulate)

    q = sub.add_parser(
        "gain",
        formatter_class=fmt,
        help="tied/untied gain vs L",
        description="Tied/untied gain nu_untied / nu_tied vs L (docs/ssi.md section 7).  Per L: "
        "this package's prediction from the leading Hermite tensor (gain_equal, gain_optimal: "
        "the same numbers as theory sie) beside the published formulas (gain_equal_published, "
        "gain_optimal_published: the latter assumes an untied row carries the noise of the "
        "whole tied network, while it carries 1/L of it), the closed form of the linearised "
        "ODE at --d, --eta, --lr (gain_equal_closed, gain_optimal_closed) and the full ODE "
        "(gain_equal_ode at --lr, gain_optimal_ode at each network's ODE-optimal step size); "
        "with --simulate the exact reduced SGD chain at dimension --d (mean +- SE over seeds).  "
        "--target is an expression or a family: sum_he2, sum_z, sum_he3.",
        epilog="Example: theory sgd gain --target sum_he2 --Ls 1:10 --json;  theory sgd gain "
        "--target sum_z --Ls 1,2,4 --simulate --d 300 --step-rule optimal --untied-norm rows,flat",
    )
    q.add_argument("--target", required=True, help="expression or family name")
    q.add_argument("--Ls", default="1:10", help="L values: A:B or a,b,c")
    q.add_argument("--simulate", action="store_true", help="also measure it by SGD")
    q.add_argument(
        "--d", type=int, default=1000, help="dimension (ODE start m0 ~ 1/sqrt(d) and --simulate)"
    )
    q.add_argument(
        "--lr",
        type=float,
        default=0.05,
        help="step size of the equal-step gain (ODE and --simulate)",
    )
    q.add_argument(
        "--eta",
        type=float,
        default=0.5,
        help="weak-recovery threshold on |m| (tied) and m_untied (untied)",
    )
    q.add_argument("--seeds", type=int, default=16, help="seeds per point for --simulate")
    q.add_argument(
        "--step-rule",
        choices=("equal", "optimal"),
        default="equal",
        dest="step_rule",
        help="--simulate: equal step sizes, or each network at its "
        "best step size of a grid around its ODE optimum (gain_predicted follows it)",
    )
    q.add_argument(
        "--untied-norm",
        default="rows",
        dest="untied_norm",
        help="--simulate: untied normalisation(s), comma-separated: rows (each row "
        "on its sqrt(d)-sphere, the theory's model) and/or flat (W renormalised as one vector of "
        "R^{L d} to norm sqrt(L d), the authors' code); flat adds *_flat fields",
    )
    q.add_argument(
        "--ode-start",
        choices=("typical", "fixed"),
        default="typical",
        dest="ode_start",
        help="ODE start: typical (geometric mean of random "
        "starts, matches --simulate) or fixed (every row at m0 = 1/sqrt(d))",
    )
    q.add_argument(
        "--no-ode",
        action="store_true",
        dest="no_ode",
        help="skip the numerical ODE minimisation (Hermite and closed-form gains only)",
    )
    q.add_argument(
        "--activation",
        default="relu",
        help="network activation: a name or an expression in x (see theory sgd ode --help)",
    )
    q.add_argument("--workers", type=int, default=None, help="processes (default: CPUs)")
    add_json(q)
    q.set_defaults(func=_gain)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


# --------------------------------------------------------------------------- handlers


def ode_run(args):
    """(model, :class:`theory.ssi.ODEResult`) of the parsed ``theory sgd ode`` options (also
    the theory of ``theory overlay "sgd ode ..."``)."""
    from theory import ssi

    model = build_model(args)
    res = ssi.integrate_ode(
        model, lr=args.lr, d=args.d, m0=args.m0, e0=args.e0, eta=args.eta, t_max=args.t_max
    )
    return model, res


def _ode(args):
    model, res = ode_run(args)
    payload = dict(
        t_escape=res.t_escape,
        steps_escape=res.steps_escape,
        final_e=res.final_e,
        final_m=res.final_m,
        minimum=res.minimum,
        status=res.status,
        message=res.message,
        final_risk=float(res.risk[-1]),
        t_final=float(res.t[-1]),
        lr=res.lr,
        d=res.d,
        eta=res.eta,
        engine=model.engine,
        **_activation_fields(model),
    )
    _write_out(args, [res], payload)
    text = (
        f"{model!r}\nweak recovery: t = {res.t_escape}  steps = {res.steps_escape}\n"
        f"final (e, m) = ({res.final_e}, {res.final_m:.6g}) -> {res.minimum}  "
        f"[{res.status}: {res.message}]"
    ) + (f"\ntrajectory: {args.out}" if args.out else "")
    emit(args, payload, text)
    return 0 if res.status != "nan" else 1


def _flatness(args):
    from theory import ssi

    model = build_model(args)
    res = ssi.flatness(model, max_order=args.max_order)
    payload = dict(
        kappa=res.kappa,
        hessian=res.hessian.tolist(),
        exact=res.exact,
        engine=res.engine,
        coordinates=res.coordinates,
        model=repr(model),
        status=res.status,
        message=res.message,
    )
    text = (
        f"{model!r}\nflatness index kappa = {res.kappa}\nHessian at (e, m) = 0 in "
        f"{res.coordinates}:\n{np.array2string(res.hessian, precision=8)}"
    )
    emit(args, payload, text)
    return 0


def _add_teacher_args(q, *, family=True):
    """The teacher, encoding and numerical options of ``boundaries`` and ``phase-diagram``."""
    g = q.add_argument_group("teacher and encoding (L = 2)")
    if family:
        g.add_argument("--a", type=float, default=None, help="A_a strength (the paper's family)")
    four = "4 numbers row-major (--X=-1,... when the first is negative)"
    options = (  # (flag, keywords): every option below defaults to None
        ("--A", dict(help=f"positional matrix A, {four} (row-stochastic)")),
        ("--A-logits", dict(dest="A_logits", help=f"logits of A = softmax_row(logits), {four}")),
        ("--B", dict(help=f"logits of the strength line softmax_row(s B), {four}; None: log A")),
        (
            "--pe",
            dict(
                choices=("none", "opposite", "orthonormal"),
                help="encoding (None: opposite at L = 2, else orthonormal)",
            ),
        ),
        (
            "--G",
            dict(
                help=f"Gram matrix of the encodings G[l,l'] = p_l.p_l', {four} (symmetric PSD, "
                "unit diagonal; the exact criteria need rank 1: 1,-1,-1,1 or 1,1,1,1)"
            ),
        ),
    )
    for flag, kw in options:
        g.add_argument(flag, default=None, **kw)
    g.add_argument(
        "--reduction",
        choices=("identity", "trace"),
        default="identity",
        help="attention output (the matrix target pairs with identity only)",
    )
    g.add_argument("--L", type=int, default=2, help="sequence length (the exact criteria need 2)")
    g.add_argument("--nodes", type=int, default=200, help="2-D Gauss-Hermite nodes per axis")


def _teacher(args, *, exact=True):
    """(pe, a, A, A_logits, B) from the teacher options, checked (ValueError: one line); with
    ``exact`` the problem must be one of the exact criteria (L = 2, rank-1 encoding)."""
    from theory.cli.erm_general import _matrix
    from theory.ssi.phase_diagram import pd_direction

    if args.pe is not None and args.G is not None:
        raise ValueError("give either --pe or --G, not both")
    L = check_int("--L", args.L, lo=2, hi=8)
    default_pe = "opposite" if L == 2 else "orthonormal"
    pe = _matrix(args.G, L, "G") if args.G is not None else (args.pe or default_pe)
    if exact:
        pd_direction(pe, args.reduction, L)
    mats = {
        k: None if getattr(args, k) is None else _matrix(getattr(args, k), L, k.replace("_", "-"))
        for k in ("A", "A_logits", "B")
    }
    return pe, getattr(args, "a", None), mats["A"], mats["A_logits"], mats["B"]


CLASSIFY_FIELDS = (
    "global_positional",
    "steepest_positional",
    "both_minima",
    "semantic_min",
    "positional_min",
)


def _classify(args):
    """One point: the exact criteria where they apply (L = 2, rank-1 encoding), else the stated
    numerical classification of ``theory.ssi.classify_numerical``."""
    from theory import ssi
    from theory.ssi.phase_diagram import pd_direction
    from theory.ssi.risk import _pe_basis

    pe, a, A, A_logits, _ = _teacher(args, exact=False)
    if args.B is not None:
        raise ValueError("--B is for strength lines (sgd boundaries / phase-diagram)")
    if args.reduction != "identity" or (isinstance(pe, str) and pe == "none"):
        pd_direction(pe, args.reduction, 2)  # the reason, as one line
    exact = args.L == 2 and _pe_basis(pe, 2).shape[1] == 1
    if a is not None or A_logits is not None:
        A = ssi.teacher_matrix(a, A, A_logits) if args.L == 2 else None
        if A is None:
            raise ValueError("--a and --A-logits are L = 2 teachers; give --A (L*L numbers)")
    if A is None:
        raise ValueError("give the teacher: --a A, --A (L*L numbers) or --A-logits")
    if exact:
        r = ssi.pd_booleans(omega=args.omega, A=A, n=args.nodes, pe=pe)
        payload = dict(exact=True, omega=args.omega, A=A.tolist(), region=int(r.region))
        payload.update({k: bool(getattr(r, k)) for k in CLASSIFY_FIELDS})
        payload["message"] = "exact criteria (docs/ssi.md eqs. 33-34)"
    else:
        r = ssi.classify_numerical(
            args.omega, A, L=args.L, pe=pe, n=args.quad_nodes, n_starts=args.starts, rng=args.seed
        )
        payload = dict(exact=False, omega=args.omega, A=A.tolist(), region=r.region)
        payload.update({k: getattr(r, k) for k in CLASSIFY_FIELDS})
        payload.update(R_semantic=r.R_semantic, R_positional=r.R_positional, message=r.message)
    reg = payload["region"]
    payload["region_name"] = ssi.REGIONS[reg] if reg >= 0 else "neither candidate is a minimum"
    payload["status"] = r.status  # the result's: every JSON answer carries status and message
    if r.message and r.message not in payload["message"]:
        payload["message"] = f"{payload['message']}; {r.message}"
    emit(args, payload)
    return 0


def _boundaries(args):
    from theory import ssi
    from theory.ssi.phase_diagram import FLIP_NAMES

    pe, a, A, A_logits, B = _teacher(args)
    if a is None and A is None and A_logits is None:
        raise ValueError("give the teacher: --a A, --A a11,a12,a21,a22 or --A-logits l11,..")
    if args.along == "omega" and (args.omega is not None or B is not None):
        raise ValueError("--omega and --B fix a strength line: use them with --along strength")
    kw = dict(A=A, A_logits=A_logits, pe=pe, reduction=args.reduction, L=args.L)
    if args.along == "strength":
        if args.omega is None:
            raise ValueError("--along strength needs the fixed --omega")
        kw.update(along="strength", omega=args.omega, B=B, s_range=_lims(args.s_range, "s-range"))
    b = ssi.boundaries(a, n=args.nodes, **kw)
    pre = "omega_" if b.along == "omega" else "s_"
    keys = ["along", "a", "A"]
    keys += ["B", "omega", "s_range"] if b.along == "strength" else []
    keys += [pre + k for k in FLIP_NAMES] + ["b", "nodes", "status", "message"]
    payload = {k: getattr(b, k) for k in keys}
    shown = {k: v for k, v in payload.items() if v or k not in ("a", "message")}
    text = "\n".join(f"{k}: {v}" for k, v in shown.items())
    emit(args, payload, text)
    return 0


def _lims(text, name):
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--{name} must be MIN:MAX (two numbers), got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"--{name} must be MIN:MAX with finite numbers, got {text!r}")
    if not lo < hi:
        raise ValueError(f"--{name} must be MIN:MAX with MIN < MAX, got {text!r}")
    return lo, hi


MAX_GRID = 2000  # points per axis of the phase diagram


def _phase(args):
    from theory import ssi
    from theory.ssi.phase_diagram import teacher_logits

    check_int("--grid", args.grid, lo=2, hi=MAX_GRID)
    pe, _, A, A_logits, B = _teacher(args)
    given = [x is not None for x in (A, A_logits, B)]
    w0, w1 = _lims(args.omega_range, "omega-range")
    wg = np.linspace(w0, w1, args.grid)
    if any(given):
        if B is None:
            B = A_logits if A_logits is not None else teacher_logits(A)
        x_name, (x0, x1) = "s", _lims(args.s_range or "0:2", "s-range")
    else:
        if args.s_range is not None:
            raise ValueError("--s-range is the strength axis of --B/--A/--A-logits")
        x_name, (x0, x1) = "a", _lims(args.a_range, "a-range")
    xg = np.linspace(x0, x1, args.grid)
    pdg = ssi.phase_diagram(xg, wg, n=args.nodes, B=B, pe=pe, check_global=args.check_global)
    counts = {name: int(np.sum(pdg.region == i)) for i, name in enumerate(ssi.REGIONS)}
    counts["none (neither candidate is a minimum)"] = int(np.sum(pdg.region < 0))
    payload = {
        "grid": args.grid,
        f"{x_name}_range": [x0, x1],
        "omega_range": [w0, w1],
        "counts": counts,
        "nodes": args.nodes,
        "status": pdg.status,
        "message": pdg.message,
    }
    if B is not None:
        payload["B"] = np.asarray(B).tolist()
    if args.check_global:
        payload["cells_global_not_candidate"] = int(np.sum(~pdg.global_check))
    if args.out:
        full = dict(
            payload,
            omega=wg,
            region=pdg.region,
            regions=list(ssi.REGIONS),
            global_positional=pdg.global_positional,
            steepest_positional=pdg.steepest_positional,
            both_minima=pdg.both_minima,
            global_check=pdg.global_check,
        )
        full[x_name] = xg
        atomic_write_text(args.out, dumps_json(full) + "\n")
        payload["out"] = args.out
    if args.plot:
        from theory.ssi.figures.phase import plot_phase_diagram

        plot_phase_diagram(pdg, path=args.plot)
        payload["plot"] = args.plot
    text = "\n".join(
        [f"{args.grid}x{args.grid} grid, {x_name} in [{x0}, {x1}], omega in [{w0}, {w1}]"]
        + [f"  {k}: {v} points" for k, v in counts.items()]
        + ([f"JSON: {args.out}"] if args.out else [])
        + ([f"figure: {args.plot}"] if args.plot else [])
    )
    emit(args, payload, text)
    return 0


def _seeds_status(res) -> dict:
    """status (the worst over the seeds: nan, diverged, max_iter, then the first seed's),
    message (the count of each status and the first message of a seed with the worst one) and
    status_per_seed of several runs: one JSON answer, one status."""
    statuses = [r.status for r in res]
    worst = next((s for s in ("nan", "diverged", "max_iter") if s in statuses), statuses[0])
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    first = next(r.message for r in res if r.status == worst)
    message = f"{len(res)} seed(s): {counts}" + (f"; {first}" if first else "")
    return dict(status=worst, message=message, status_per_seed=statuses)


def _simulate(args):
    from theory.ssi import seeds_from, simulate_seeds

    model = build_model(args)
    seeds = seeds_from(args.seed, args.seeds)
    res = simulate_seeds(
        model,
        int(args.d),
        args.lr,
        seeds,
        reduced=args.reduced,
        workers=args.workers,
        progress=not args.json,
        start=args.start,
        steps=args.steps,
    )
    steps = [r.steps_escape for r in res]
    kinds = [r.minimum for r in res]
    ok = [s for s in steps if s is not None]
    payload = dict(
        steps_escape=steps,
        final_e=[r.final_e for r in res],
        final_m=[r.final_m for r in res],
        minimum=kinds,
        seeds=seeds,
        d=int(args.d),
        lr=args.lr,
        reduced=args.reduced,
        mean_steps_escape=float(np.mean(ok)) if ok else None,
        sem_steps_escape=float(np.std(ok, ddof=1) / math.sqrt(len(ok))) if len(ok) > 1 else None,
        fraction_positional=float(np.mean([k == "positional" for k in kinds])),
        fraction_semantic=float(np.mean([k == "semantic" for k in kinds])),
        **_seeds_status(res),
    )
    _write_out(args, res, payload)
    text = (
        f"{model!r}, d = {args.d}, lr = {args.lr}, {len(res)} seeds "
        f"({'reduced chain' if args.reduced else 'full SGD'})\n"
        f"weak-recovery steps: mean {payload['mean_steps_escape']} +- "
        f"{payload['sem_steps_escape']}\nfinal minimum: positional "
        f"{payload['fraction_positional']:.2f}, semantic {payload['fraction_semantic']:.2f}"
    ) + (f"\ntrajectories: {args.out}" if args.out else "")
    emit(args, payload, text)
    return 0


def _gain(args):
    from theory.ssi import TiedNetwork, gain_curve
    from theory.ssi._kernels import activation, kernel_activation
    from theory.ssi.sgd.driver import MAX_D
    from theory.ssi.sgd.seeds import MAX_SEEDS, MAX_WORKERS
    from theory.ssi.targets import MAX_L
    from theory.ssi.trajectory import MAX_LR

    # gain_curve (theory.ssi.gain) is checked here with the library's validators
    Ls = [check_int("L", L, lo=1, hi=MAX_L) for L in parse_range(args.Ls, integer=True)]
    check_int("d", args.d, lo=8, hi=MAX_D)
    check_positive("lr", args.lr, hi=MAX_LR)
    check_positive("eta", args.eta, hi=1)
    check_int("seeds", args.seeds, lo=1, hi=MAX_SEEDS)
    if args.workers is not None:
        check_int("workers", args.workers, lo=0, hi=MAX_WORKERS)
    if args.simulate:
        kernel_activation(args.activation)  # compiled for the kernels before the theory runs
    else:
        activation(args.activation)
    norms = tuple(x.strip() for x in args.untied_norm.split(",") if x.strip())
    bad = [x for x in norms if x not in ("rows", "flat")] or ([] if norms else [""])
    if bad:
        raise ValueError(f"--untied-norm takes rows and/or flat (comma-separated), got {bad[0]!r}")
    curve = gain_curve(
        args.target,
        Ls,
        simulate=args.simulate,
        d=args.d,
        lr=args.lr,
        eta=args.eta,
        seeds=args.seeds,
        step_rule=args.step_rule,
        activation=args.activation,
        progress=not args.json,
        workers=args.workers,
        ode=not args.no_ode,
        ode_start=args.ode_start,
        untied_norms=norms,
    )
    rows = curve.rows
    payload = dict(
        target=args.target,
        step_rule=args.step_rule,
        d=args.d,
        lr=args.lr,
        eta=args.eta,
        **_activation_fields(TiedNetwork("z1", 1, activation=args.activation)),
        ode_start=args.ode_start,
        rows=rows,
        status=curve.status,
        message=curve.message,
    )

    def fmt(v):
        return "-" if v is None else f"{v:.4g}"

    lines = [
        f"target {args.target}, {args.activation}, d = {args.d}, eta = {args.eta}, "
        f"equal lr = {args.lr}, step rule {args.step_rule}",
        "gain nu_untied/nu_tied; 'package': this package's prediction (= theory sie), "
        "'published': the paper's formulas, 'ode': the full ODE at this d and eta",
        "     L  package:equal  package:opt  published:equal  published:opt  ode:equal  ode:opt",
    ]
    for r in rows:
        s = (
            f"  {r['L']:>4}  {fmt(r['gain_equal']):>13}  {fmt(r['gain_optimal']):>11}  "
            f"{fmt(r['gain_equal_published']):>15}  {fmt(r['gain_optimal_published']):>13}  "
            f"{fmt(r.get('gain_equal_ode')):>9}  {fmt(r.get('gain_optimal_ode')):>7}"
        )
        if "gain_sim" in r:
            s += f"   simulated {r['gain_sim']:.4g} +- {r['gain_sim_err']:.2g}"
        if "gain_sim_flat" in r:
            s += f"   flat {r['gain_sim_flat']:.4g} +- {r['gain_sim_flat_err']:.2g}"
        lines.append(s)
    emit(args, payload, "\n".join(lines))
    return 0
