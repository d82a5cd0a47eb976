"""Matrices to try sparsegpu on: bundled real matrices and seeded synthetic generators.

Real: small matrices from the SuiteSparse collection (CC-BY 4.0, see ``data/README.md``),
``load("bcsstk13")``, ``names()``, ``info(name)``. Synthetic: stencils, uniform rows,
power-law rows and long rows, vectorized and seeded (see :mod:`.synthetic`).
"""

from ._bundled import DatasetInfo, info, load, names, path
from .synthetic import long_rows, power_law, stencil_2d, stencil_3d, suite, uniform_random

__all__ = [
    "DatasetInfo",
    "info",
    "load",
    "long_rows",
    "names",
    "path",
    "power_law",
    "stencil_2d",
    "stencil_3d",
    "suite",
    "uniform_random",
]
