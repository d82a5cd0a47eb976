"""The ``delta16`` backend: CSR with 16-bit column offsets, for fewer bytes per nonzero.

A CSR product streams the values and the column indices once: 12 bytes per nonzero in
float64 with int32 indices, 8 in float32. On banded matrices (stencils, meshes in a good
ordering) the kernels already run at 86-96% of copy bandwidth on the H200, so the only way
to go faster is to read fewer bytes. This backend keeps, on the device only, each column as
an unsigned 16-bit offset from a base column shared by a chunk of ``CHUNK_ROWS`` rows,
wherever the chunk's columns span fewer than 65,536; the other chunks keep full-width
columns (see ``kernels/delta16.cu`` for the layout). Bytes per nonzero drop from 12 to 10
(float64) and from 8 to 6 (float32); from 16 to 10 with int64 indices.

The compressed columns are built from the mirror on the device (two passes over the
indices: each chunk's column span, then the encoding), once per mirror, and dropped with
it. The user's scipy arrays are untouched. A matrix where fewer than
``MIN_COMPRESSED_FRACTION`` of the nonzeros compress is refused (``supports`` is False,
and naming the backend says why): there the format would only add work.

``auto``'s rules never pick it on their own (whether a matrix compresses is a property of
its columns that the row statistics do not show, and building the format is not worth it
for a matrix multiplied once); planning by measurement times it on every matrix it
takes, and keeps it where it is fastest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device import _compile, _cuda
from ..device._dtypes import HALF_DTYPES, MIXED_PARTNERS
from ..device._launch import (
    CXX_HALF_TYPES,
    CXX_INDEX_TYPES,
    CXX_VALUE_TYPES,
    KernelLaunch,
    precision_name_expression,
)
from ..device._mirror import DeviceMatrix, is_out_of_memory, memory_error
from .base import FLOAT_AND_COMPLEX
from .csr_vector import RowGroupBackend, RowGroupPlan
from .policy import THREADS_PER_ROW_CHOICES, UnrolledRowPolicy

SOURCE = "delta16.cu"
# Rows sharing one base column; the same number as DELTA16_CHUNK_ROWS in kernels/delta16.cu.
# A warp's rows (32 / threads_per_row of them, aligned) always lie in one chunk.
CHUNK_ROWS = 32
# A chunk compresses when its columns lie in [base, base + OFFSET_RANGE).
OFFSET_RANGE = 1 << 16
# Below this share of compressed nonzeros the backend refuses a matrix.
MIN_COMPRESSED_FRACTION = 0.5
# Threads per block of the two passes that build the format (a warp per chunk).
BUILD_BLOCK = 256
MAX_BUILD_BLOCKS = 1 << 16


@dataclass(frozen=True)
class Delta16Policy(UnrolledRowPolicy):
    """The ``delta16`` kernel: the CSR vector kernel's knobs (read-only x loads and a
    warp-shuffle reduction, as the ``shuffle`` backend).

    Attributes
    ----------
    block_size, threads_per_row, max_registers, unroll, stream_matrix
        As in :class:`~sparsegpu.tuning.UnrolledRowPolicy`.
    """


def kernel_name(value_dtype, index_dtype, threads_per_row, mixed: bool, matrix_dtype=None) -> str:
    """The C++ name of one product instantiation, e.g. ``delta16_spmv<double, int, 4, 0>``
    (``mixed``: some chunks are kept full-width); with a ``matrix_dtype`` other than
    ``value_dtype`` (mixed precision), ``delta16_spmv_mixed_precision<double, float, ...>``."""
    parameters = (threads_per_row, int(mixed))
    return precision_name_expression(
        "delta16_spmv", value_dtype, index_dtype, *parameters, matrix_dtype=matrix_dtype
    )


def _build_kernel_name(kernel: str, index_dtype) -> str:
    return f"{kernel}<{CXX_INDEX_TYPES[np.dtype(index_dtype)]}>"


@dataclass(frozen=True)
class ChunkTable:
    """Which chunks of a mirror compress: the first pass of the format (no per-nonzero
    arrays, so a refused matrix costs a few bytes per 32 rows).

    Attributes
    ----------
    chunks : device array of the index dtype, one entry per chunk of ``CHUNK_ROWS`` rows
        ``>= 0``: the base column of a compressed chunk; ``< 0``: ``-(1 + shift)`` for a
        chunk kept full-width, whose columns sit at ``wide[k - shift]``.
    nnz : int
        Stored entries of the matrix.
    wide_nnz : int
        Entries in chunks kept full-width.
    """

    chunks: object
    nnz: int
    wide_nnz: int

    @property
    def fraction(self) -> float:
        """The share of nonzeros whose columns are 16-bit offsets (1.0 with none)."""
        return 1.0 - self.wide_nnz / self.nnz if self.nnz else 1.0


@dataclass(frozen=True)
class CompressedColumns:
    """The compressed columns of a mirror: what the product kernel reads instead of
    ``indices``.

    Attributes
    ----------
    table : ChunkTable
    offsets : device uint16 array, nnz long
        ``indices[k] - base`` for the entries of compressed chunks (unused elsewhere).
    wide : device array of the index dtype, ``table.wide_nnz`` long
        The columns of the chunks kept full-width.
    """

    table: ChunkTable
    offsets: object
    wide: object

    def column_bytes(self) -> int:
        """Bytes of column information one product reads: 2 per compressed nonzero, the
        full-width columns, and the chunk table (``indices`` holds 4 or 8 per nonzero)."""
        table = self.table
        return 2 * (table.nnz - table.wide_nnz) + self.wide.nbytes + table.chunks.nbytes


def _launch_per_chunk(matrix: DeviceMatrix, kernel: str, arguments) -> None:
    """One of the two build passes: a warp per chunk, grid-stride."""
    n_chunks = -(-matrix.shape[0] // CHUNK_ROWS)
    compiled = _compile.get_kernel(SOURCE, _build_kernel_name(kernel, matrix.index_dtype))
    grid = max(1, min(-(-n_chunks * 32 // BUILD_BLOCK), MAX_BUILD_BLOCKS))
    KernelLaunch(compiled, BUILD_BLOCK, arguments)(grid)


def chunk_table(matrix: DeviceMatrix) -> ChunkTable:
    """The :class:`ChunkTable` of a GPU mirror, made once per mirror (one pass over the
    indices and one transfer of a count)."""

    def make() -> ChunkTable:
        xp = matrix.xp
        n_rows = matrix.shape[0]
        index_dtype = matrix.index_dtype
        n_chunks = -(-n_rows // CHUNK_ROWS)
        try:
            lo = xp.zeros(n_chunks, dtype=index_dtype)
            hi = xp.full(n_chunks, -1, dtype=index_dtype)
            if matrix.nnz:
                _launch_per_chunk(
                    matrix, "delta16_chunk_span", (matrix.indptr, matrix.indices, n_rows, lo, hi)
                )
            starts = matrix.indptr[0:n_rows:CHUNK_ROWS].astype(np.int64)
            ends = xp.concatenate(
                (matrix.indptr[CHUNK_ROWS:n_rows:CHUNK_ROWS], matrix.indptr[n_rows:])
            )[:n_chunks].astype(np.int64)
            narrow = hi.astype(np.int64) - lo.astype(np.int64) < OFFSET_RANGE
            wide_counts = xp.where(narrow, 0, ends - starts)
            wide_before = xp.cumsum(wide_counts) - wide_counts
            chunks = xp.where(narrow, lo.astype(np.int64), -1 - (starts - wide_before))
            wide_nnz = int(wide_counts.sum()) if n_chunks else 0
        except Exception as exc:
            if is_out_of_memory(exc):
                what = f"delta16's chunk table ({n_chunks:,} chunks)"
                raise memory_error(n_chunks * 40, what) from exc
            raise
        return ChunkTable(chunks.astype(index_dtype), matrix.nnz, wide_nnz)

    return matrix.derived("delta16.chunks", make)


def compressed_columns(matrix: DeviceMatrix) -> CompressedColumns:
    """The :class:`CompressedColumns` of a GPU mirror, made once per mirror."""

    def make() -> CompressedColumns:
        table = chunk_table(matrix)
        xp = matrix.xp
        needed = 2 * matrix.nnz + table.wide_nnz * matrix.index_dtype.itemsize
        try:
            offsets = xp.zeros(matrix.nnz, dtype=np.uint16)
            wide = xp.empty(table.wide_nnz, dtype=matrix.index_dtype)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise memory_error(needed, "delta16's compressed columns") from exc
            raise
        if matrix.nnz:
            _launch_per_chunk(
                matrix,
                "delta16_encode",
                (matrix.indptr, matrix.indices, table.chunks, matrix.shape[0], offsets, wide),
            )
        return CompressedColumns(table, offsets, wide)

    return matrix.derived("delta16.columns", make)


class Delta16Plan(RowGroupPlan):
    """A compiled ``delta16_spmv`` instantiation over a mirror's compressed columns."""

    def _prepare(
        self, matrix: DeviceMatrix, policy: Delta16Policy, backend: Delta16Backend
    ) -> None:
        if not self.launches:
            return
        self.columns = columns = compressed_columns(matrix)
        if policy.vector_loads:
            self._check_quad_alignment(data=matrix.data, offsets=columns.offsets)
        self.kernel = backend._kernel(
            matrix, policy, mixed=columns.table.wide_nnz > 0, vector_dtype=self._dtype
        )
        self._bind(
            policy.block_size // policy.threads_per_row,
            (
                matrix.indptr,
                columns.offsets,
                columns.wide,
                columns.table.chunks,
                matrix.data,
                "x",
                "y",
                matrix.shape[0],
            ),
        )


class Delta16Backend(RowGroupBackend):
    """CSR SpMV over 16-bit column offsets (see the module docstring)."""

    name = "delta16"
    description = (
        "CSR with 16-bit column offsets from a base per 32 rows (fewer bytes per nonzero); "
        "full-width columns where a chunk spans too many"
    )
    policy_type = Delta16Policy
    plan_type = Delta16Plan
    # float16/bfloat16 with 16-bit offsets: 4 bytes per nonzero
    value_dtypes = FLOAT_AND_COMPLEX + HALF_DTYPES
    # mixed precision: float32 values (with 16-bit offsets, 6 bytes a nonzero), float64
    # vectors and sums
    mixed_pairs = tuple(MIXED_PARTNERS.items())
    estimated = False
    planned = True

    def refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        if matrix.nnz == 0 or matrix.xp is np or _cuda.cupy_or_none() is None:
            return None
        table = chunk_table(matrix)
        if table.fraction >= MIN_COMPRESSED_FRACTION:
            return None
        return (
            f"only {table.fraction:.0%} of its {table.nnz:,} nonzeros lie in chunks of "
            f"{CHUNK_ROWS} rows whose columns span fewer than {OFFSET_RANGE:,} (delta16 needs "
            f"{MIN_COMPRESSED_FRACTION:.0%}); its columns are too scattered for 16-bit "
            "offsets: use another backend, or order the matrix first (sparsegpu.reorder)"
        )

    def _kernel(
        self, matrix: DeviceMatrix, policy: Delta16Policy, mixed: bool = True, vector_dtype=None
    ):
        value = vector_dtype if vector_dtype is not None else matrix.dtype
        return _compile.get_kernel(
            SOURCE,
            kernel_name(value, matrix.index_dtype, policy.threads_per_row, mixed, matrix.dtype),
            policy.compile_options(),
        )


BACKENDS = [Delta16Backend()]

FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            kernel_name(value, index, threads_per_row, mixed)
            for value in (*CXX_VALUE_TYPES, *CXX_HALF_TYPES)
            for index in CXX_INDEX_TYPES
            for threads_per_row in THREADS_PER_ROW_CHOICES
            for mixed in (False, True)
        )
        + tuple(
            kernel_name(wide, index, threads_per_row, mixed, narrow)
            for narrow, wide in MIXED_PARTNERS.items()
            for index in CXX_INDEX_TYPES
            for threads_per_row in THREADS_PER_ROW_CHOICES
            for mixed in (False, True)
        )
        + tuple(
            _build_kernel_name(kernel, index)
            for kernel in ("delta16_chunk_span", "delta16_encode")
            for index in CXX_INDEX_TYPES
        ),
    )
)
