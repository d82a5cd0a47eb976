"""SpGEMM where every row of R holds at most one entry: ``"select"`` (``kernels/spgemm_select.cu``).

An aggregation's tentative prolongator ``P`` (one entry a row: the node's aggregate), a
selection or a permutation matrix: each entry ``(j, a)`` of a row of ``L`` makes at most
one product, with the one entry of ``R``'s row ``j``. A row of ``C = L @ R`` is then its row
of ``L`` with the columns mapped, sorted and equal ones summed, which a thread per row does
in registers in two passes (the rows' sizes, a scan, the rows): no hash table, no bound of
the products, one host synchronisation (``C``'s nonzeros). ``A @ P`` of a Galerkin product
``P.T @ (A @ P)`` with such a ``P`` is this product, and so is multigrid's ``A @ T``.

It takes operands whose rows of ``L`` have at most :data:`SELECT_MAX` entries (known without
a pass: the row statistics of an upload, a product's recorded bound); elsewhere it is
:class:`~.spgemm.Refused` and another algorithm runs.
"""

from __future__ import annotations

import numpy as np

from ..device import _cuda
from ..device._compile import KernelFamily, get_kernel, register_family
from ..device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, name_expression
from .spgemm import Budget, Refused, ResultSink

SELECT = "select"
SOURCE = "spgemm_select.cu"
SELECT_MAX = 32  # as the kernel's constant: entries a row of L
BLOCK = 128
BLOCKS_PER_SM = 16  # the grid-stride loops' blocks an SM


def _count_kernel(index_dtype) -> str:
    return f"spgemm_select_count<{CXX_INDEX_TYPES[np.dtype(index_dtype)]}>"


def _fill_kernel(value_dtype, index_dtype) -> str:
    return name_expression("spgemm_select_fill", value_dtype, index_dtype)


SELECT_FAMILY = register_family(
    KernelFamily(
        SOURCE,
        tuple(_count_kernel(index) for index in CXX_INDEX_TYPES)
        + tuple(
            _fill_kernel(value, index) for value in CXX_VALUE_TYPES for index in CXX_INDEX_TYPES
        ),
    )
)


def takes(left, right) -> bool:
    """Whether ``left @ right`` is a select product: every row of ``right`` at most one
    entry, every row of ``left`` at most :data:`SELECT_MAX` (bounds known without a pass
    where the operands carry them)."""
    return right.longest_row <= 1 and left.longest_row <= SELECT_MAX


def _refuse_unless_taken(left, right) -> None:
    if not takes(left, right):
        raise Refused(
            f"select needs rows of R of at most one entry (longest {right.longest_row:,}) and "
            f"rows of L of at most {SELECT_MAX} (longest {left.longest_row:,})"
        )


def _grid(rows: int) -> int:
    return max(1, min(-(-rows // BLOCK), BLOCKS_PER_SM * _cuda.device_info().multiprocessors))


def _launch(name: str, rows: int, arguments) -> None:
    if rows <= 0:
        return
    kernel = get_kernel(SOURCE, name)
    kernel((_grid(rows),), (BLOCK,), arguments)


def _sizes(left, right, budget: Budget, indptr) -> int:
    """Each row's entries, scanned into ``indptr``; ``C``'s nonzeros (one transfer)."""
    m, index = left.shape[0], left.index_dtype
    sizes = budget.empty(m, index, "the select SpGEMM's row sizes")
    try:
        arguments = (left.indptr, left.indices, right.indptr, right.indices, np.int64(m), sizes)
        _launch(_count_kernel(index), m, arguments)
        indptr[:1] = 0
        _cuda.cupy_or_none().cumsum(sizes, dtype=indptr.dtype, out=indptr[1:])
        return int(indptr[-1])
    finally:
        budget.release(sizes)


def select_multiply(left, right, sink: ResultSink):
    """``left @ right`` (canonical CSR mirrors on the GPU, one index dtype) into ``sink``;
    Refused unless :func:`takes`."""
    _refuse_unless_taken(left, right)
    nnz = _sizes(left, right, sink.budget, sink.indptr())
    indptr, indices, data = sink.allocate(nnz)
    arguments = (
        left.indptr, left.indices, left.data, right.indptr, right.indices, right.data,
        np.int64(left.shape[0]), indptr, indices, data,
    )  # fmt: skip
    _launch(_fill_kernel(left.dtype, left.index_dtype), left.shape[0], arguments)
    return sink.finish()


def select_count(left, right, budget: Budget) -> int:
    """Nonzeros of ``left @ right`` (the first pass alone); Refused unless :func:`takes`."""
    _refuse_unless_taken(left, right)
    indptr = budget.empty(left.shape[0] + 1, np.int64, "the row offsets")
    try:
        return _sizes(left, right, budget, indptr)
    finally:
        budget.release(indptr)
