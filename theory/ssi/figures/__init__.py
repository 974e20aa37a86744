"""Figures of the sequence single-index model."""
