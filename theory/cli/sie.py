"""``theory sie EXPR``: Hermite expansion, sequence information exponent and tied/untied gain."""

from __future__ import annotations

import itertools

import numpy as np

from theory.cli._common import add_json, emit

#: entries of C_SIE written out in full in --json; above, only ``leading_tensor_nonzero`` (an
#: L = 7 target of SIE 6 has 7^6 = 117649 entries, 600 kB of JSON, almost all zeros)
MAX_DENSE_ENTRIES = 4096

JSON_FIELDS = (
    "expr",
    "L",
    "sie",
    "leading_tensor",
    "leading_tensor_nonzero",
    "tied_contraction",
    "op_norm",
    "op_norm_exact",
    "gain_optimal",
    "gain_equal",
    "gain_optimal_published",
    "gain_equal_published",
    "tied_learnable",
    "even_sie",
    "exact",
    "tolerance",
    "information_exponent",
    "max_order",
    "tied_contraction_exact",
    "hermite_energy",
    "status",
    "message",
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sie",
        help="sequence information exponent, leading Hermite tensor and tied/untied gain of a "
        "target g(z1..zL)",
        description="Hermite analysis of a target g(z1, ..., zL), z ~ N(0, I_L) (docs/ssi.md "
        "section 5): SIE = lowest order k >= 1 with a non-zero Hermite tensor C_k = E[g H_k]/k!, "
        "the leading tensor C_SIE, its contraction with the all-ones vector (the tied-network "
        "coefficient), its operator norm (the untied one), the SIE of the even part (what "
        "attention without positional encoding sees) and the predicted gain nu_untied/nu_tied "
        "(docs/ssi.md section 7), with r = contraction/op_norm: gain_optimal = r^2 L^(1-SIE) "
        "(each network at its optimal step size) and gain_equal = |r| L^(1-SIE/2) (equal small "
        "step sizes), the predictions of this package's ODE (the same numbers as theory sgd "
        "gain); beside them the published formulas gain_optimal_published = r^2 (x L if SIE = "
        "1), which assumes equal SGD noise in both networks, and gain_equal_published = |r| (x "
        "sqrt(L) if SIE = 1).  Why they differ: docs/findings.md §6.  --json gives C_SIE in full "
        f"(leading_tensor) up to {MAX_DENSE_ENTRIES} entries and always its non-zero entries "
        "(leading_tensor_nonzero: [[i_1 <= ... <= i_k], value], 0-based).",
        epilog="Examples: theory sie 'He2(z1)+He2(z2)';  theory sie 'z1-z2' --json;  "
        "theory sie 'relu(z1)+relu(z2)' --L 3;  theory sie 'softmax(1, z1*z1, z1*z2)'. "
        "Functions: He<k>(x), exp, log, sqrt, sin, cos, tanh, erf, abs, sign, relu, Max, Min, "
        "Heaviside, sigmoid, softmax(i, a1, ..., an) = exp(a_i)/sum_j exp(a_j). Polynomials and "
        "piecewise polynomials of one linear form are exact; other targets are integrated "
        "numerically and reported with exact = false and the tolerance.",
    )
    p.add_argument("expr", help="target expression in the variables z1..zL, e.g. 'z1*z2'")
    p.add_argument(
        "--L",
        type=int,
        default=None,
        help="sequence length L (default: the highest variable index in EXPR)",
    )
    p.add_argument(
        "--max-order",
        type=int,
        default=6,
        dest="max_order",
        help="highest Hermite order searched (default 6; raised to the degree for polynomials)",
    )
    p.add_argument(
        "--tol",
        type=float,
        default=1e-9,
        help="absolute tolerance of numerical Hermite coefficients (default 1e-9; "
        "used only for non-polynomial targets)",
    )
    add_json(p)
    p.set_defaults(func=handler)


def handler(args) -> int:
    from theory.ssi import analyze

    rep = analyze(args.expr, L=args.L, max_order=args.max_order, tol=args.tol)
    d = rep.to_dict()
    d["leading_tensor_nonzero"] = nonzero_entries(rep.leading_tensor)
    C = rep.leading_tensor
    if C is not None and np.size(C) > MAX_DENSE_ENTRIES:
        d["leading_tensor"] = None
        note = (
            f"leading_tensor omitted from the JSON ({np.size(C)} entries > "
            f"{MAX_DENSE_ENTRIES}): its non-zero entries are in leading_tensor_nonzero"
        )
        d["message"] = f"{d['message']}; {note}" if d.get("message") else note
    payload = {k: d.get(k) for k in JSON_FIELDS}
    emit(args, payload, rep.summary())
    return 0


def nonzero_entries(C) -> list | None:
    """The non-zero entries of the symmetric tensor C as [[i_1, ..., i_k], value] with
    i_1 <= ... <= i_k (0-based; every permutation of the indices has the same value)."""
    if C is None:
        return None
    C = np.asarray(C, dtype=float)
    if C.ndim == 0:
        return [[[], float(C)]] if C != 0 else []
    out = []
    for idx in zip(*np.nonzero(C)):
        if all(a <= b for a, b in itertools.pairwise(idx)):
            out.append([[int(i) for i in idx], float(C[idx])])
    return out
