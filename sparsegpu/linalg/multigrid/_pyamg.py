"""A PyAMG hierarchy moved onto sparsegpu matrices (PyAMG is imported by its caller)."""

from __future__ import annotations

from ._bridge import canonical
from ._setup import Level


def levels_of(ml) -> list[Level]:
    """The levels of a ``pyamg.multilevel.MultilevelSolver``: each A, and P, R where a
    coarser level follows, as sparsegpu CSR matrices (BSR blocks written out as CSR)."""
    levels = getattr(ml, "levels", None)
    if not levels:
        raise ValueError("amg: the PyAMG hierarchy has no levels")
    moved = []
    for i, level in enumerate(levels):
        A = canonical(level.A.tocsr())
        if A.shape[0] != A.shape[1]:
            raise ValueError(f"amg: level {i} of the PyAMG hierarchy is not square ({A.shape})")
        entry = Level(A=A)
        if i < len(levels) - 1:
            entry.P = A._sg_inherit(canonical(level.P.tocsr()))
            entry.R = A._sg_inherit(canonical(level.R.tocsr()))
        moved.append(entry)
    return moved
