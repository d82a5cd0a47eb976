"""Matrices to try sparsegpu on: bundled real matrices and seeded synthetic generators.

Real: small matrices from the SuiteSparse collection (CC-BY 4.0, see ``data/README.md``),
``load("bcsstk13")``, ``names()``, ``info(name)``. Synthetic: stencils, uniform rows,
power-law rows, long rows, arrow-like rows, R-MAT graphs and
randomly renumbered matrices, vectorized and seeded (see :mod:`.synthetic`).
"""

from ._bundled import DatasetInfo, info, load, names, path
from .synthetic import (
    arrow,
    heldout_suite,
    long_rows,
    permuted,
    power_law,
    rmat,
    stencil_2d,
    stencil_3d,
    suite,
    uniform_random,
)

__all__ = [
    "DatasetInfo",
    "arrow",
    "heldout_suite",
    "info",
    "load",
    "long_rows",
    "names",
    "path",
    "permuted",
    "power_law",
    "rmat",
    "stencil_2d",
    "stencil_3d",
    "suite",
    "uniform_random",
]
