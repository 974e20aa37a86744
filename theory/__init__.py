"""theory: statistical-physics theory of learning in attention models.

Sub-modules
-----------
gauss      Gaussian expectations (Gauss-Hermite, scrambled Sobol QMC, numba Monte Carlo)
hermite    Hermite tensors of a target, sequence information exponent, tied/untied gain
models     model equations (positional-semantic ERM, sequence single-index SGD)
solve      damped fixed points, continuation, transitions, ODE integration
simulate   finite-d counterparts (GD, GAMP, online SGD, histogram task)
plots      theory-over-simulation figures
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("theory")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.1.0"

__all__ = ["__version__"]
