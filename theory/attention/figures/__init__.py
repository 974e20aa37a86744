"""Figures of the attention model: theory over finite-d simulation."""
