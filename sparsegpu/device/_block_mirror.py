"""Validated copies of a BSR matrix's arrays where a backend computes (block mirrors).

A :class:`DeviceBlockMatrix` is to ``sparsegpu.bsr_matrix`` what
:class:`~sparsegpu.device._mirror.DeviceMatrix` is to the CSR classes: its block row pointers,
block column indices and blocks (``data`` of shape ``(n_blocks, R, C)``, each block
row-major as scipy stores it), in one array module and value dtype, validated once when
it is made, so that no invalid block index ever reaches a kernel. Its ``format`` is
``"bsr"``: only backends listing that format (``Backend.formats``) are given it.
"""

from __future__ import annotations

import numpy as np

from . import _cuda
from ._mirror import CUPY, DeviceMatrix, Residence, RowLengthStats, _validate, upload_arrays

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


class DeviceBlockMatrix(DeviceMatrix):
    """Validated BSR arrays of one matrix in one array module and value dtype.

    Attributes
    ----------
    data : array of shape (n_blocks, R, C)
        The blocks, each row-major (C order), as ``scipy.sparse.bsr_matrix.data``.
    indices, indptr : array
        Block column of each block, and where each block row's blocks start (int32 or
        int64, the same dtype); ``indptr`` has ``n_rows // R + 1`` entries.
    blocksize : tuple of int
        ``(R, C)``.
    shape : tuple of int
        In scalar rows and columns (multiples of R and C).

    Everything else is :class:`~sparsegpu.device._mirror.DeviceMatrix`'s; ``nnz`` counts the
    stored values (``n_blocks * R * C``), as scipy's ``bsr_matrix.nnz`` does.
    """

    format = "bsr"

    def __init__(self, data, indices, indptr, shape, residence: Residence):
        super().__init__(data, indices, indptr, shape, residence)
        self.blocksize = (int(data.shape[1]), int(data.shape[2]))

    @property
    def n_blocks(self) -> int:
        return int(self.data.shape[0])

    @property
    def nnz(self) -> int:
        return int(self.data.size)

    @property
    def stats(self) -> RowLengthStats:
        """Statistics of the scalar rows (each row of a block row holds its blocks times C
        values), computed on first use on the device, one transfer."""
        if self._stats is None:
            with self._lock:
                if self._stats is None:
                    xp = self.xp
                    R, C = self.blocksize
                    lengths = xp.repeat(xp.diff(self.indptr).astype(np.int64) * C, R)
                    rows = xp.zeros(self.shape[0] + 1, dtype=np.int64)
                    if self.shape[0]:
                        rows[1:] = xp.cumsum(lengths)
                    self._stats = RowLengthStats.from_indptr(rows, self.shape[1], xp)
        return self._stats

    # ------------------------------------------------------------------ building
    @classmethod
    def from_host(cls, data, indices, indptr, shape, residence: Residence, value_dtype=None):
        """Check the BSR arrays' shapes on the host, upload, validate on the device.

        Raises
        ------
        ValueError
            Naming what is inconsistent (block shape, lengths, a decreasing block row
            pointer, a block column out of range); nothing is launched on invalid arrays.
        MemoryError
            When the arrays do not fit in device memory, with the bytes needed and free.
        """
        indptr = np.asarray(indptr)
        indices = np.asarray(indices)
        data = np.asarray(data)
        n_blocks, n_block_cols = _check_shapes(data, indices, indptr, shape)
        index_dtype = np.promote_types(indptr.dtype, indices.dtype)
        value_dtype = np.dtype(value_dtype or data.dtype)
        host = (
            data[:n_blocks],
            indices[:n_blocks].astype(index_dtype, copy=False),
            indptr.astype(index_dtype, copy=False),
        )
        what = f"the device mirror of this BSR matrix ({n_blocks:,} blocks, {value_dtype})"
        dev = upload_arrays(host, residence, value_dtype, what)
        _validate(dev[2], dev[1], n_block_cols, residence.xp, unit="block column")
        return cls(dev[0], dev[1], dev[2], shape, residence)

    @classmethod
    def from_device(cls, indptr, indices, data, shape) -> DeviceBlockMatrix:
        """A block mirror of CuPy arrays already on the GPU (validated there, not copied).

        Parameters
        ----------
        indptr, indices : cupy.ndarray
            Block row pointers and block column indices (int32 or int64).
        data : cupy.ndarray of shape (n_blocks, R, C)
            The blocks, C-contiguous.
        shape : tuple of int
            Scalar rows and columns, multiples of R and C.
        """
        cupy = _cuda.cupy_or_none()
        for name, a in (("indptr", indptr), ("indices", indices), ("data", data)):
            if cupy is None or type(a) is not cupy.ndarray:
                raise TypeError(
                    f"{name} must be a cupy.ndarray on the GPU, got {type(a).__name__}; "
                    "use DeviceBlockMatrix.from_host for host arrays"
                )
        if not data.flags.c_contiguous:
            raise ValueError("data must be C-contiguous (blocks row-major); pass data.copy()")
        index_dtype = np.promote_types(indptr.dtype, indices.dtype)
        _check_shapes(data, indices, np.array([0, indices.shape[0]]), shape, lengths_only=True)
        if indptr.shape[0] != int(shape[0]) // int(data.shape[1]) + 1:
            raise ValueError(
                f"indptr has length {indptr.shape[0]}, expected the block rows + 1 = "
                f"{int(shape[0]) // int(data.shape[1]) + 1}"
            )
        if index_dtype not in _INDEX_DTYPES:
            raise TypeError(f"index arrays must be int32 or int64, got {index_dtype}")
        indptr, indices = indptr.astype(index_dtype), indices.astype(index_dtype)
        if int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0]:
            raise ValueError(
                f"indptr runs from {int(indptr[0])} to {int(indptr[-1])}, expected 0 to the "
                f"number of blocks, {indices.shape[0]}"
            )
        _validate(indptr, indices, int(shape[1]) // int(data.shape[2]), cupy, "block column")
        return cls(data, indices, indptr, shape, CUPY)

    def has_sorted_blocks(self) -> bool:
        """True when the block columns of every block row strictly increase (canonical
        BSR: no repeated block); one reduction where the mirror lives."""
        if self.n_blocks < 2:
            return True
        xp = self.xp
        first = self.indptr[:-1]
        row_starts = xp.zeros(self.n_blocks, dtype=bool)
        row_starts[first[first < self.n_blocks]] = True
        return bool((row_starts[1:] | (self.indices[1:] > self.indices[:-1])).all())

    def to_csr(self, sort_columns: bool = False) -> DeviceMatrix:
        """The CSR arrays of the same matrix, built where the mirror lives (every stored
        value of every block, explicit zeros included, rows in block order; with
        ``sort_columns``, each row's columns in increasing order, repeats kept)."""
        xp = self.xp
        R, C = self.blocksize
        index_dtype = self.index_dtype
        per_block_row = xp.diff(self.indptr).astype(np.int64)
        indptr = xp.zeros(self.shape[0] + 1, dtype=np.int64)
        if self.shape[0]:
            indptr[1:] = xp.cumsum(xp.repeat(per_block_row * C, R))
        # the block row of each block (CuPy's repeat takes no array of counts)
        block = xp.arange(self.n_blocks, dtype=np.int64)
        block_row = xp.searchsorted(self.indptr.astype(np.int64), block, side="right") - 1
        block = block[:, None, None]
        r = xp.arange(R, dtype=np.int64)[None, :, None]
        c = xp.arange(C, dtype=np.int64)[None, None, :]
        first = self.indptr.astype(np.int64)[block_row][:, None, None]
        # value (k, r, c) goes to row block_row * R + r, after that row's earlier blocks
        where = indptr[block_row[:, None, None] * R + r] + (block - first) * C + c
        data = xp.empty(self.nnz, dtype=self.dtype)
        columns = xp.empty(self.nnz, dtype=index_dtype)
        data[where.ravel()] = self.data.reshape(-1)
        columns[where.ravel()] = xp.broadcast_to(
            self.indices.astype(np.int64)[:, None, None] * C + c, where.shape
        ).ravel()
        if sort_columns and self.nnz:
            rows = xp.searchsorted(indptr, xp.arange(self.nnz, dtype=np.int64), side="right") - 1
            order = xp.argsort(rows * max(self.shape[1], 1) + columns.astype(np.int64))
            data, columns = data[order], columns[order]
        return DeviceMatrix(data, columns, indptr.astype(index_dtype), self.shape, self.residence)

    def transpose(self) -> DeviceMatrix:
        raise NotImplementedError(
            "a BSR mirror is not transposed on the device: scipy builds A.T of a bsr_matrix "
            "as a new bsr_matrix, which has a mirror of its own"
        )


def _check_shapes(data, indices, indptr, shape, lengths_only=False) -> tuple[int, int]:
    """(blocks, block columns) of consistent BSR arrays; ValueError naming what is not."""
    if getattr(data, "ndim", 0) != 3:
        raise ValueError(
            f"BSR data must be 3-D (blocks, R, C), got shape {getattr(data, 'shape', None)}"
        )
    n_rows, n_cols = int(shape[0]), int(shape[1])
    R, C = int(data.shape[1]), int(data.shape[2])
    if R < 1 or C < 1 or n_rows % R or n_cols % C:
        raise ValueError(
            f"blocksize ({R}, {C}) does not divide the shape {(n_rows, n_cols)}; each block "
            "dimension must be at least 1 and divide the matrix's"
        )
    if indices.ndim != 1 or indptr.ndim != 1:
        raise ValueError(
            f"indices and indptr must be 1-D, got shapes {indices.shape} and {indptr.shape}"
        )
    if lengths_only:
        if indices.shape[0] != data.shape[0]:
            raise ValueError(
                f"indices has {indices.shape[0]} entries but data has {data.shape[0]} blocks; "
                "they must match"
            )
        return int(data.shape[0]), n_cols // C
    if indptr.shape[0] != n_rows // R + 1:
        raise ValueError(
            f"indptr has length {indptr.shape[0]}, expected the block rows + 1 = {n_rows // R + 1}"
        )
    if indptr[0] != 0:
        raise ValueError(f"indptr[0] is {indptr[0]}, expected 0")
    n_blocks = int(indptr[-1])
    if n_blocks < 0 or n_blocks > min(indices.shape[0], data.shape[0]):
        raise ValueError(
            f"indptr[-1] = {n_blocks} but indices has {indices.shape[0]} and data has "
            f"{data.shape[0]} blocks; indptr[-1] is the number of stored blocks and must fit "
            "in both"
        )
    index_dtype = np.promote_types(indptr.dtype, indices.dtype)
    if index_dtype not in _INDEX_DTYPES:
        raise TypeError(f"index arrays must be int32 or int64, got {index_dtype}")
    return n_blocks, n_cols // C
