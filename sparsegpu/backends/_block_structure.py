"""The blocks of a CSR matrix: how many aligned b x b blocks its nonzeros touch, and its
BSR layout built from a mirror.

The ``block`` backend (``block.py``) runs on CSR matrices by finding their blocks: once per
mirror, :func:`block_structure` counts the aligned b x b blocks the nonzeros touch for b in
``DETECTED_SIZES`` (on the GPU, one counting pass of ``kernels/block.cu`` per b; on the
host, :func:`host_block_structure`, also what ``sparsegpu info`` shows), and
:func:`block_layout` builds the layout of the b that reads the fewest bytes (padded to
whole blocks, duplicates summed, dropped with the mirror). :func:`min_fill` says from which
fill a layout is worth timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..device import _compile
from ..device._launch import CXX_INDEX_TYPES, KernelLaunch
from ..device._mirror import DeviceMatrix, is_out_of_memory, memory_error
from ..device._rows import row_ids

# The block kernels' source; its counting pass (block_count) is launched from here.
SOURCE = "block.cu"
# Block sizes looked for in a CSR matrix.
DETECTED_SIZES = tuple(range(2, 9))
# Planning times the block layout of a CSR matrix only where it reads at most this share of
# the bytes CSR reads (values, indices, row pointers): below, the layout cannot win by
# enough to be worth building.
MAX_BYTE_RATIO = 0.9
# Threads per block of the counting pass (a warp per row).
COUNT_BLOCK = 256
MAX_COUNT_BLOCKS = 1 << 16


def layout_bytes(blocks: int, b: int, n_rows: int, value_itemsize: int, index_itemsize: int):
    """Bytes a product reads of a b x b block layout: values, block columns, block row
    pointers."""
    return (
        blocks * (b * b * value_itemsize + index_itemsize) + (-(-n_rows // b) + 1) * index_itemsize
    )


def csr_bytes(nnz: int, n_rows: int, value_itemsize: int, index_itemsize: int) -> int:
    """Bytes a CSR product reads of the matrix: values, column indices, row pointers."""
    return nnz * (value_itemsize + index_itemsize) + (n_rows + 1) * index_itemsize


def min_fill(b: int, value_itemsize: int, index_itemsize: int) -> float:
    """The fill ratio from which a b x b layout reads at most ``MAX_BYTE_RATIO`` of CSR's
    bytes (row pointers aside): 0.78 for 3 x 3 blocks in float64 with int32 indices, 0.62
    in float32."""
    return (b * b * value_itemsize + index_itemsize) / (
        b * b * MAX_BYTE_RATIO * (value_itemsize + index_itemsize)
    )


@dataclass(frozen=True)
class BlockStructure:
    """The aligned b x b blocks of a CSR matrix, for b in ``DETECTED_SIZES``.

    Attributes
    ----------
    nnz, n_rows : int
    blocks : dict of int to int
        Stored blocks for each b (blocks holding at least one stored entry).
    value_itemsize, index_itemsize : int
        What the layout's bytes are counted in.
    """

    nnz: int
    n_rows: int
    blocks: dict = field(compare=False)
    value_itemsize: int
    index_itemsize: int

    def fill(self, b: int) -> float:
        """nnz / (stored blocks x b^2) (1.0 for a matrix without entries)."""
        return self.nnz / (self.blocks[b] * b * b) if self.blocks[b] else 1.0

    def nbytes(self, b: int) -> int:
        """Bytes a product reads of the b x b layout."""
        return layout_bytes(
            self.blocks[b], b, self.n_rows, self.value_itemsize, self.index_itemsize
        )

    @property
    def size(self) -> int:
        """The b whose layout reads the fewest bytes (the smallest on a tie)."""
        return min(self.blocks, key=lambda b: (self.nbytes(b), b))

    @property
    def byte_ratio(self) -> float:
        """The best layout's bytes over CSR's."""
        csr = csr_bytes(self.nnz, self.n_rows, self.value_itemsize, self.index_itemsize)
        return self.nbytes(self.size) / csr

    def refuse_reason(self) -> str | None:
        """Why planning leaves the block layout out, or None where it times it."""
        if self.byte_ratio <= MAX_BYTE_RATIO:
            return None
        b = self.size
        needed = min_fill(b, self.value_itemsize, self.index_itemsize)
        return (
            f"its nonzeros fill {self.fill(b):.0%} of the {self.blocks[b]:,} aligned {b}x{b} "
            f"blocks they touch (the best of b = {DETECTED_SIZES[0]}..{DETECTED_SIZES[-1]}); "
            f"the block layout needs a fill of {needed:.0%}"
            f" to read at most {MAX_BYTE_RATIO:.0%} of CSR's bytes (it would read "
            f"{self.byte_ratio:.0%})"
        )

    def __str__(self) -> str:
        b = self.size
        return f"{b}x{b} blocks, fill {self.fill(b):.0%}, {self.byte_ratio:.0%} of CSR's bytes"


@dataclass(frozen=True)
class BlockLayout:
    """BSR arrays on the device: what the kernel reads.

    Attributes
    ----------
    indptr : device array of the index dtype, n_block_rows + 1 long
    indices : device array of the index dtype, one block column per block
    data : device array, shape (nblocks, R, C), C-contiguous
    shape : tuple of int
        The matrix's shape (rows and columns past it, in the last blocks, are padding).
    """

    indptr: object
    indices: object
    data: object
    shape: tuple

    @property
    def blocksize(self) -> tuple[int, int]:
        return int(self.data.shape[1]), int(self.data.shape[2])

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes


# ------------------------------------------------------------------ finding blocks in CSR
def _sorted_indices(matrix: DeviceMatrix):
    """The mirror's column indices with each row sorted (the mirror's own when they are)."""
    xp = matrix.xp
    indices, indptr, nnz = matrix.indices, matrix.indptr, matrix.nnz
    if nnz < 2:
        return indices
    row_starts = xp.zeros(nnz, dtype=bool)
    starts = indptr[1:-1]
    row_starts[starts[starts < nnz]] = True
    if not bool(((indices[1:] < indices[:-1]) & ~row_starts[1:]).any()):
        return indices
    rows = row_ids(matrix.indptr, xp, np.int64, matrix.nnz)
    keys = rows * np.int64(matrix.shape[1]) + indices.astype(np.int64)
    return (xp.sort(keys) % np.int64(matrix.shape[1])).astype(matrix.index_dtype)


def block_structure(matrix: DeviceMatrix) -> BlockStructure:
    """The :class:`BlockStructure` of a mirror, made once per mirror: on the GPU, one
    counting pass over the (row-sorted) indices for each b, and one transfer of each count
    (a host mirror: :func:`host_block_structure`)."""

    def make() -> BlockStructure:
        xp = matrix.xp
        if xp is np:
            return host_block_structure(
                sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape)
            )
        n_rows = matrix.shape[0]
        blocks = {}
        sorted_indices = _sorted_indices(matrix) if matrix.nnz else matrix.indices
        for b in DETECTED_SIZES:
            counts = xp.zeros(-(-n_rows // b), dtype=np.uint64)
            if matrix.nnz:
                _count_blocks(matrix, sorted_indices, b, counts)
            blocks[b] = int(counts.sum()) if counts.size else 0
        return BlockStructure(
            matrix.nnz, n_rows, blocks, matrix.dtype.itemsize, matrix.index_dtype.itemsize
        )

    return matrix.derived("block.structure", make)


def _count_blocks(matrix: DeviceMatrix, sorted_indices, b: int, counts) -> None:
    compiled = _compile.get_kernel(SOURCE, count_kernel_name(matrix.index_dtype))
    n_rows = matrix.shape[0]
    grid = max(1, min(-(-n_rows * 32 // COUNT_BLOCK), MAX_COUNT_BLOCKS))
    KernelLaunch(compiled, COUNT_BLOCK, (matrix.indptr, sorted_indices, n_rows, b, counts))(grid)


def count_kernel_name(index_dtype) -> str:
    return f"block_count<{CXX_INDEX_TYPES[np.dtype(index_dtype)]}>"


def host_block_structure(A) -> BlockStructure:
    """:class:`BlockStructure` of a scipy CSR matrix, on the host (``sparsegpu info``, and
    the reference the device counts are tested against)."""
    A = A.tocsr()
    rows = row_ids(A.indptr, np, np.int64)
    columns = A.indices.astype(np.int64)
    n_block_cols = {b: -(-A.shape[1] // b) for b in DETECTED_SIZES}
    blocks = {
        b: int(np.unique((rows // b) * n_block_cols[b] + columns // b).size) for b in DETECTED_SIZES
    }
    return BlockStructure(
        int(A.nnz), A.shape[0], blocks, A.dtype.itemsize, A.indices.dtype.itemsize
    )


def block_layout(matrix: DeviceMatrix, b: int) -> BlockLayout:
    """The b x b :class:`BlockLayout` of a mirror, made once per mirror and b: entries
    sorted by (block row, block column), each block's entries placed (duplicates summed),
    the rest of a block zero."""

    def make() -> BlockLayout:
        xp = matrix.xp
        n_rows, n_cols = matrix.shape
        n_block_rows, n_block_cols = -(-n_rows // b), -(-n_cols // b)
        try:
            rows = row_ids(matrix.indptr, xp, np.int64, matrix.nnz)
            columns = matrix.indices.astype(np.int64)
            within = (rows % b) * b + columns % b
            keys = ((rows // b) * n_block_cols + columns // b) * (b * b) + within
            order = xp.argsort(keys)
            keys = keys[order]
            block_keys = keys // (b * b)
            new_block = xp.ones(matrix.nnz, dtype=bool)
            new_block[1:] = block_keys[1:] != block_keys[:-1]
            block_of_entry = xp.cumsum(new_block) - 1
            firsts = block_keys[new_block]
            n_blocks = int(firsts.size)
            index_dtype = matrix.index_dtype
            if n_blocks * b * b >= 2**32:  # the kernel's 32-bit offsets would overflow
                index_dtype = np.dtype(np.int64)
            indices = (firsts % n_block_cols).astype(index_dtype)
            indptr = xp.searchsorted(
                firsts // n_block_cols, xp.arange(n_block_rows + 1), side="left"
            ).astype(index_dtype)
            data = xp.zeros(n_blocks * b * b, dtype=matrix.dtype)
            positions = block_of_entry * (b * b) + keys % (b * b)
            values = matrix.data[order]
            duplicates = matrix.nnz > 1 and bool((keys[1:] == keys[:-1]).any())
            if duplicates:
                _scatter_add(xp, data, positions, values)
            else:
                data[positions] = values
        except Exception as exc:
            if is_out_of_memory(exc):
                raise memory_error(
                    matrix.nnz * 40, f"the {b}x{b} block layout ({matrix.nnz:,} entries)"
                ) from exc
            raise
        return BlockLayout(indptr, indices, data.reshape(n_blocks, b, b), matrix.shape)

    return matrix.derived(f"block.layout{b}", make)


def _scatter_add(xp, data, positions, values) -> None:
    """``data[positions] += values`` with repeated positions summed (on the GPU, complex
    values as their real and imaginary parts)."""
    if xp is np:
        np.add.at(data, positions, values)
        return
    import cupyx

    if values.dtype.kind == "c":
        real = data.view(values.real.dtype)
        cupyx.scatter_add(real, 2 * positions, values.real)
        cupyx.scatter_add(real, 2 * positions + 1, values.imag)
    else:
        cupyx.scatter_add(data, positions, values)
