"""Matrices to try sparsegpu on: seeded synthetic generators (and bundled real ones)."""

from .synthetic import power_law, stencil_2d, stencil_3d, suite, uniform_random

__all__ = ["power_law", "stencil_2d", "stencil_3d", "suite", "uniform_random"]
