"""Smoothed-aggregation algebraic multigrid on the GPU (and on the host): ``amg``.

The set-up (strength, MIS-2 aggregation, tentative and smoothed prolongators, Galerkin
products, a dense coarse solve) is array code over NumPy or CuPy plus sparsegpu's own
SpGEMM; the V-cycle is planned products and fused elementwise steps on preallocated
buffers, so sparsegpu's Krylov solvers capture it in their CUDA graphs. See
``docs/multigrid.rst``.

Modules: ``_aggregation`` (strength, aggregates, T), ``_smoothing`` (smoothers, spectral
radius, their kernels), ``_setup`` (one level after another), ``_cycle`` (the V-cycle),
``_hierarchy`` (``amg`` and :class:`AMGHierarchy`), ``_pyamg`` (PyAMG hierarchies),
``_bridge`` (the only imports of sparsegpu's private core modules).
"""

from ._hierarchy import AMGHierarchy, amg

__all__ = ["AMGHierarchy", "amg"]
