"""Matrices to try sparsegpu on: bundled real matrices and seeded synthetic generators.

Real: small matrices from the SuiteSparse collection (CC-BY 4.0, see ``data/README.md``),
``load("bcsstk13")``, ``names()``, ``info(name)``. Synthetic: stencils, uniform rows,
power-law rows, long rows (evenly placed, or one among rows of a spread of lengths),
arrow-like rows, R-MAT graphs, meshes of dense node blocks, randomly renumbered matrices
and 3-D meshes, vectorized and seeded (see :mod:`.synthetic`).
"""

from ..io._bundled import DatasetInfo, info, load, names, path
from .synthetic import (
    arrow,
    block_mesh,
    class_check_suite,
    heldout_suite,
    long_row_mix,
    long_rows,
    permuted,
    power_law,
    random_mesh_3d,
    rmat,
    stencil_2d,
    stencil_3d,
    suite,
    uniform_random,
)

__all__ = [
    "DatasetInfo",
    "arrow",
    "block_mesh",
    "class_check_suite",
    "heldout_suite",
    "info",
    "load",
    "long_row_mix",
    "long_rows",
    "names",
    "path",
    "permuted",
    "power_law",
    "random_mesh_3d",
    "rmat",
    "stencil_2d",
    "stencil_3d",
    "suite",
    "uniform_random",
]
