"""Paper 1 (Cui, Behrens, Krzakala, Zdeborova): positional vs semantic learning in a tied
low-rank dot-product attention layer, by empirical risk minimisation."""

from theory.attention.model import ERMParams, fixed_point, transition

__all__ = ["ERMParams", "fixed_point", "transition"]
