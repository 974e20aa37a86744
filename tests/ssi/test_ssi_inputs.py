"""Bad input to the SSI library: a ValueError that says what to change (the CLI prints the same
message as one line; tests/test_cli_hostile.py drives the commands)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from theory import ssi
from theory.ssi.sgd.seeds import seeds_from

TGT = "He2(z1)+He2(z2)"


@pytest.mark.parametrize(
    "build, fragment",
    [
        (lambda: ssi.PositionalSemanticTarget(0.5, A=[[0.5, 0.6], [0.5, 0.5]]), "row-stochastic"),
        (lambda: ssi.PositionalSemanticTarget(0.5, A=[[-1, 2], [0.5, 0.5]]), "row-stochastic"),
        (lambda: ssi.PositionalSemanticTarget(0.5, A=np.eye(3)), "2x2"),
        (lambda: ssi.PositionalSemanticTarget(0.5, A=[[np.nan, 1], [0.5, 0.5]]), "stochastic"),
        (lambda: ssi.PositionalSemanticTarget(math.nan, 1.0), "omega"),
        (lambda: ssi.PositionalSemanticTarget(0.5, math.inf), "a must be"),
        (lambda: ssi.AttentionModel(TGT, 2, pe=[[1, 2], [2, 1]]), "positive semi-definite"),
        (lambda: ssi.AttentionModel(TGT, 2, pe=np.eye(3)), "symmetric 2x2"),
        (lambda: ssi.AttentionModel(TGT, 2, pe=[[1, np.nan], [np.nan, 1]]), "symmetric"),
        (lambda: ssi.AttentionModel(TGT, 10**9, pe="orthonormal"), "L must be at most 64"),
        (lambda: ssi.TiedNetwork(TGT, L=-3), "L must be >= 1"),
        (lambda: ssi.parse_target("z1", L=2.5), "L must be an integer"),
    ],
)
def test_bad_model_input(build, fragment):
    with pytest.raises(ValueError, match=fragment):
        build()


def test_bad_run_input():
    model = ssi.TiedNetwork(TGT, L=2)
    for kw, fragment in [
        (dict(lr=math.nan), "lr must be finite"),
        (dict(lr=1e308), "lr must be at most"),
        (dict(d=-3), "d must be"),
        (dict(d=10**30), "d must be at most"),
        (dict(eta=2.0), "eta must be at most 1"),
        (dict(m0=1e308), r"m0 must lie in \[-1, 1\]"),
        (dict(e0=0.1), "this model has none"),
        (dict(t_max=math.inf), "t_max must be finite"),
    ]:
        args = dict(lr=0.05, d=1000) | kw
        with pytest.raises(ValueError, match=fragment):
            ssi.integrate_ode(model, **args)
    with pytest.raises(ValueError, match="number of seeds must be >= 1"):
        seeds_from(0, -3)
    with pytest.raises(ValueError, match="at least one seed"):
        ssi.simulate_seeds(model, 100, 0.05, [], progress=False)
    with pytest.raises(ValueError, match="steps must be >= 0"):
        ssi.simulate_seeds(model, 100, 0.05, [1], steps=-1, progress=False)
    with pytest.raises(ValueError, match="max_order must be at most 12"):
        ssi.analyze("z1*z2", max_order=10**6)
    with pytest.raises(ValueError, match="nodes must be at most"):
        ssi.boundaries(1.0, n=10**6)
    with pytest.raises(ValueError, match="omega must lie in"):
        ssi.phase_diagram([1.0], [math.nan])


def test_a_program_built_target_is_bounded_by_its_monomials_not_its_length():
    """(z1 + ... + z32)^2 / 32 expanded has 528 monomials: more terms than a typed target may
    have, but well inside the monomial limit, so the Fig. 8 family at L = 32 is accepted."""
    import sympy as sp

    from theory.ssi.targets import MAX_NODES, as_target

    z = sp.symbols("z1:33")
    expr = sp.expand(sum(z) ** 2 / 32)
    assert len(expr.args) > MAX_NODES
    assert as_target(expr, 32).L == 32
