"""theory: the statistical-physics theory of learning in attention models, checked against
finite-d simulation.

One package per model, each with its theory and its simulations side by side:

attention   Cui, Behrens, Krzakala, Zdeborová: positional vs semantic learning by empirical
            risk minimisation (replica state equations, transition, GD, GAMP; general L/r)
ssi         Arnaboldi, Loureiro, Stephan, Krzakala, Zdeborová: online SGD in sequence
            single-index models (Hermite/SIE, risk, (e, m) ODE, flatness, phase diagram, SGD)
histogram   the counting task: one attention layer that counts positionally or semantically

Shared numerics: gauss (Gaussian expectations), rng (random streams), solve (the iteration
core, continuation, roots, ODE integration), results (the result contract), store (the
resumable result store), plotting (overlays), sweep and reproduce (grids and the figure
pipeline), cli (the ``theory`` command).  The mathematics as implemented is in docs/.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("theory")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.1.0"

__all__ = ["__version__"]
