"""The distributed CSR matrix: PETSc's MPIAIJ layout on sparsegpu's local products."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import _cuda, _dispatch, _planning, _select
from .._matrix import csr_matrix as _local_csr
from . import _comm
from ._exchange import HostStaged, make_plan
from ._partition import balanced_offsets, check_offsets, even_offsets
from ._vector import DistributedVector, Layout, _mpi_type, _to_host

# the per-rank descriptor every rank allgathers at construction (int64 fields)
_FIELDS = ("failed", "n_cols", "dtype", "row_start", "n_rows", "nnz")


def _select_device(comm) -> str:
    """Make device ``local rank % device count`` current; say which (or why none)."""
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        return f"none ({_cuda.backend_reason()})"
    count = cupy.cuda.runtime.getDeviceCount()
    node_rank = _comm.local_rank(comm)
    device = node_rank % count
    cupy.cuda.Device(device).use()
    return f"GPU {device} (local rank {node_rank} % {count} devices)"


def _split(block, col_start: int, col_end: int, index_dtype):
    """(diagonal block in local columns, off-rank block in ghost numbering, ghost columns),
    both with indices of ``index_dtype``."""
    n_rows = block.shape[0]
    rows = np.repeat(np.arange(n_rows), np.diff(block.indptr))
    cols = block.indices.astype(np.int64)
    owned = (cols >= col_start) & (cols < col_end)

    def part(mask, columns, n_cols):
        counts = np.bincount(rows[mask], minlength=n_rows)
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(index_dtype)
        local = _local_csr((block.data[mask], columns, indptr), shape=(n_rows, n_cols))
        # scipy narrows int64 indices that fit in int32: keep the caller's index dtype
        local.indices = local.indices.astype(index_dtype, copy=False)
        local.indptr = local.indptr.astype(index_dtype, copy=False)
        return local

    ghosts = np.unique(cols[~owned])
    diag = part(owned, cols[owned] - col_start, col_end - col_start)
    offd = part(~owned, np.searchsorted(ghosts, cols[~owned]), ghosts.size)
    return diag, offd, ghosts


def _index_dtype(block) -> np.dtype:
    """The index dtype of a sparse block (int32 for anything else, scipy's default)."""
    if sp.issparse(block) and block.format == "csr":
        return np.promote_types(block.indices.dtype, block.indptr.dtype)
    return np.dtype(np.int32)


def _rows(S, lo, hi):
    """(rows lo:hi of CSR S with S's index dtype, lo): one rank's piece."""
    indptr = S.indptr[lo : hi + 1]
    piece = sp.csr_matrix((int(hi - lo), S.shape[1]), dtype=S.dtype)
    piece.data = S.data[indptr[0] : indptr[-1]]
    piece.indices = S.indices[indptr[0] : indptr[-1]]
    piece.indptr = indptr - indptr[0]
    return piece, int(lo)


def _dtype_of(num: int) -> np.dtype:
    """The numpy dtype whose ``dtype.num`` is ``num`` (how the descriptor carries it)."""
    for scalar_type in set(np.sctypeDict.values()):
        if np.dtype(scalar_type).num == num:
            return np.dtype(scalar_type)
    return np.dtype(f"V{num}")  # not a numeric dtype: shown as such in the error


def _check_descriptors(table: np.ndarray) -> None:
    """The same ValueError on every rank when the ranks' blocks do not fit together."""
    reference = table[0]
    for field, label in (("n_cols", "global columns"), ("dtype", "value dtype")):
        k = _FIELDS.index(field)
        bad = [r for r in range(len(table)) if table[r, k] != reference[k]]
        if bad:
            show = (lambda v: str(_dtype_of(int(v)))) if field == "dtype" else str
            raise ValueError(
                f"the ranks disagree on the {label}: rank 0 has {show(reference[k])}, "
                + ", ".join(f"rank {r} has {show(table[r, k])}" for r in bad)
                + f"; every rank's row block must have the same {label}"
            )
    start, rows = table[:, _FIELDS.index("row_start")], table[:, _FIELDS.index("n_rows")]
    expected = np.concatenate(([0], np.cumsum(rows)[:-1]))
    bad = np.flatnonzero(start != expected)
    if bad.size:
        r = int(bad[0])
        raise ValueError(
            f"rank {r} says its rows start at {start[r]}, but the blocks of the ranks before "
            f"it end at row {expected[r]}; rank r must hold the rows right after rank r-1's "
            "(contiguous blocks in rank order)"
        )


@dataclass
class RankReport:
    """One rank's line of :class:`DistributedReport`."""

    rank: int
    rows: int
    nnz: int
    diag_nnz: int
    ghosts: int
    neighbours: list
    recv_bytes: int
    send_bytes: int
    backend: str
    device: str


@dataclass
class DistributedReport:
    """What :meth:`csr_matrix.explain` returns (printing it shows a table).

    Attributes
    ----------
    shape : tuple of int
    nnz : int
    dtype : numpy.dtype
    transport : str
        How halo entries travel (``"host-staged"``).
    transport_reason : str
    ranks : list of RankReport
    """

    shape: tuple
    nnz: int
    dtype: np.dtype
    transport: str
    transport_reason: str
    ranks: list

    @property
    def halo_bytes(self) -> int:
        """Bytes received by all ranks together in one product."""
        return sum(r.recv_bytes for r in self.ranks)

    def __str__(self) -> str:
        lines = [
            f"distributed {self.shape[0]}x{self.shape[1]} {self.dtype} matrix, "
            f"{self.nnz:,} nonzeros on {len(self.ranks)} ranks",
            f"transport: {self.transport} ({self.transport_reason})",
            f"halo per product: {self.halo_bytes:,} bytes in all",
            f"{'rank':>4} {'rows':>10} {'nnz':>12} {'owned %':>8} {'ghosts':>8} "
            f"{'recv B':>10} {'send B':>10}  neighbours / backend / device",
        ]
        for r in self.ranks:
            owned = 100.0 * r.diag_nnz / r.nnz if r.nnz else 100.0
            lines.append(
                f"{r.rank:>4} {r.rows:>10,} {r.nnz:>12,} {owned:>8.1f} {r.ghosts:>8,} "
                f"{r.recv_bytes:>10,} {r.send_bytes:>10,}  {r.neighbours} / {r.backend} / "
                f"{r.device}"
            )
        return "\n".join(lines)


class csr_matrix:  # noqa: N801 - named like sparsegpu.csr_matrix, whose role it plays
    """A CSR matrix whose rows are split over the ranks of an MPI communicator.

    Each rank holds a contiguous block of rows (blocks balanced by nonzeros), split as in
    PETSc's MPIAIJ format into a *diagonal* block (the columns this rank owns, numbered
    locally) and a compressed *off-rank* block (only the columns its rows reference,
    numbered ``0..n_ghost-1``). A product posts the halo receives and sends (exactly the
    needed x entries, neighbour to neighbour), computes the diagonal block's product
    while they travel, then adds the off-rank block's. Local products are
    :class:`sparsegpu.csr_matrix` products, so they run on the backend each rank picks
    (``backend``, or ``auto``: the GPU when there is one).

    Parameters
    ----------
    S : sparse matrix, dense array or None
        The global matrix, on ``root`` only (ignored elsewhere; pass None). Rank
        ``root`` sends each rank its rows and keeps only its own.
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``. The matrix communicates on a duplicate of it.
    root : int, optional
        The rank holding ``S`` (default 0).
    row_offsets : sequence of int, optional
        A custom split: rank r gets rows ``row_offsets[r]:row_offsets[r + 1]`` (size + 1
        non-decreasing values from 0 to the row count; empty blocks are allowed). Only
        read on ``root``. Default: balanced by nonzeros.
    backend : str, optional
        The sparsegpu backend of every rank's local products (default: ``auto``).
    timeout : float, optional
        Seconds an operation waits for the other ranks before raising TimeoutError
        (default ``SPARSEGPU_MPI_TIMEOUT`` or 120; 0 waits forever).

    Attributes
    ----------
    shape : tuple of int
        The global shape.
    dtype : numpy.dtype
    nnz : int
        Stored entries over all ranks.
    comm : mpi4py communicator
        The communicator given (the matrix's own traffic uses a duplicate).
    row_layout, col_layout : Layout
        How result vectors and x vectors are split (the same object when square).

    Raises
    ------
    ValueError
        On every rank, when the ranks' blocks do not fit together.
    RankError
        On every rank, when the construction failed on some rank (naming it): the root
        could not convert ``S`` or read the file, a bad ``row_offsets``, a bad block.

    Notes
    -----
    Every method is collective: all ranks of the communicator must call it, in the same
    order. Vectors have one layout for the rows (results, right-hand sides) and one for
    the columns (x); for a square matrix they are the same.

    Examples
    --------
    Under ``mpiexec -n 4 python script.py``:

    >>> import numpy as np, sparsegpu as sg                       # doctest: +SKIP
    >>> import sparsegpu.distributed as sgd                       # doctest: +SKIP
    >>> from mpi4py import MPI                                    # doctest: +SKIP
    >>> root = MPI.COMM_WORLD.Get_rank() == 0                     # doctest: +SKIP
    >>> A = sgd.csr_matrix(sg.datasets.load("bcsstk13") if root else None)  # doctest: +SKIP
    >>> b = A.scatter(np.ones(A.shape[0]) if root else None)      # doctest: +SKIP
    >>> x, info = sgd.linalg.cg(A, b, rtol=1e-8)                  # doctest: +SKIP
    >>> x_global = x.gather(root=0)                               # doctest: +SKIP
    """

    def __init__(self, S=None, comm=None, *, root=0, row_offsets=None, backend=None,
                 timeout=None):  # fmt: skip
        self._from_root(lambda: S, comm, root, row_offsets, backend, timeout)

    def _from_root(self, read, comm, root, row_offsets, backend, timeout):
        """Build from the matrix ``read()`` returns on ``root`` (called there only)."""
        comm = _comm.resolve_comm(comm)
        timeout = _comm.resolve_timeout(timeout)
        size, rank = comm.Get_size(), comm.Get_rank()
        error, pieces, header = None, None, np.zeros(2, dtype=np.int64)
        # each rank's row block travels as one pickled message from the root
        if rank == root:
            try:
                S = read()
                S = sp.csr_matrix(_to_host(S) if _cuda.is_cupy_array(S) else S)
                if row_offsets is None:
                    offsets = balanced_offsets(S.indptr, size)
                else:
                    offsets = check_offsets(row_offsets, S.shape[0], size, "row_offsets")
                pieces = [_rows(S, offsets[r], offsets[r + 1]) for r in range(size)]
                header[1] = S.shape[1]
                del S
            except Exception as exc:
                error, header[0] = exc, 1
        _comm.wait_all([comm.Ibcast(header, root=root)], timeout, "csr_matrix: the root's matrix")
        _comm.raise_if_failed(comm, header[0], error, timeout, "reading the matrix on the root")
        if rank == root:
            requests = [comm.isend(pieces[r], dest=r, tag=18) for r in range(size) if r != root]
            block, row_start = pieces[root]
            _comm.wait_all(requests, timeout, "csr_matrix: sending the row blocks")
            del pieces
        else:
            block, row_start = comm.recv(source=root, tag=18)
        self._setup(block, row_start, int(header[1]), comm, backend, timeout)

    @classmethod
    def from_local_rows(cls, local_block, row_start: int, n_global_cols: int, comm=None, *,
                        backend=None, timeout=None):  # fmt: skip
        """Build from each rank's own block of rows (collective; nothing is sent around).

        Parameters
        ----------
        local_block : sparse matrix or dense array
            This rank's rows, shape (rows here, ``n_global_cols``), global column
            numbering. A rank with no rows passes a (0, ``n_global_cols``) matrix.
        row_start : int
            The global index of this rank's first row: rank r's rows follow rank r-1's.
        n_global_cols : int
            The global column count (the same on every rank).
        comm, backend, timeout
            As for :class:`csr_matrix`.

        Raises
        ------
        ValueError
            On every rank, naming the offending rank, when the ranks disagree on the
            column count or the value dtype, or when the blocks are not contiguous.

        Examples
        --------
        >>> import scipy.sparse as sp                                  # doctest: +SKIP
        >>> n = 100; lo, hi = rank * n // size, (rank + 1) * n // size  # doctest: +SKIP
        >>> block = sp.eye(n, format="csr")[lo:hi]                      # doctest: +SKIP
        >>> A = sgd.csr_matrix.from_local_rows(block, lo, n, comm)      # doctest: +SKIP
        """
        self = cls.__new__(cls)
        comm = _comm.resolve_comm(comm)
        self._setup(local_block, row_start, n_global_cols, comm, backend,
                    _comm.resolve_timeout(timeout))  # fmt: skip
        return self

    # ------------------------------------------------------------------ set up
    def _setup(self, block, row_start, n_cols, comm, backend, timeout):
        size, rank = comm.Get_size(), comm.Get_rank()
        self._timeout = timeout
        error = None
        mine = np.zeros(len(_FIELDS), dtype=np.int64)
        try:
            index_dtype = _index_dtype(block)
            block = sp.csr_matrix(_to_host(block) if _cuda.is_cupy_array(block) else block)
            if block.ndim != 2:
                raise ValueError(f"the local block must be 2-D, got shape {block.shape}")
            mine[:] = (0, block.shape[1], block.dtype.num, int(row_start), block.shape[0],
                       block.nnz)  # fmt: skip
            if int(n_cols) != block.shape[1]:
                raise ValueError(
                    f"n_global_cols is {n_cols} but the local block has {block.shape[1]} "
                    "columns; pass the global column count and a block in global columns"
                )
        except Exception as exc:
            error, mine[0] = exc, 1
        table = np.empty((size, len(_FIELDS)), dtype=np.int64)
        request = comm.Iallgather(mine, table)
        _comm.wait_all([request], timeout, "csr_matrix: the ranks' block descriptions")
        _comm.raise_if_failed(comm, table[:, 0].sum(), error, timeout, "csr_matrix")
        _check_descriptors(table)
        self._comm = comm.Dup()
        self.comm = comm
        row_offsets = np.concatenate(([0], np.cumsum(table[:, _FIELDS.index("n_rows")])))
        n_rows = int(row_offsets[-1])
        self.shape = (n_rows, int(n_cols))
        self.dtype = block.dtype
        self.nnz = int(table[:, _FIELDS.index("nnz")].sum())
        col_offsets = row_offsets if n_rows == n_cols else even_offsets(int(n_cols), size)
        error = None
        try:
            self._device = _select_device(comm)
            c0, c1 = int(col_offsets[rank]), int(col_offsets[rank + 1])
            self._diag, self._offd, ghosts = _split(block, c0, c1, index_dtype)
            for local in (self._diag, self._offd):
                local.backend = backend
            xp = self._module()
        except Exception as exc:
            error, ghosts = exc, np.zeros(0, dtype=np.int64)
        _comm.agree(self._comm, error, timeout, "csr_matrix: the local blocks")
        self._halo = make_plan(self._comm, ghosts, col_offsets)
        self._transports = {}
        self.row_layout = Layout(self._comm, row_offsets, xp, timeout)
        self.col_layout = (
            self.row_layout if n_rows == n_cols else Layout(self._comm, col_offsets, xp, timeout)
        )

    def _module(self):
        """numpy or cupy: where this rank's local products compute."""
        for local in (self._diag, self._offd):
            if local.nnz:
                return _planning.plan_for(local, self.dtype).matrix.xp
        return np

    # --------------------------------------------------------------- attributes
    @property
    def ndim(self) -> int:
        return 2

    @property
    def row_offsets(self) -> np.ndarray:
        """``size + 1`` offsets: rank r holds rows ``row_offsets[r]:row_offsets[r + 1]``."""
        return self.row_layout.offsets

    @property
    def local_rows(self) -> tuple[int, int]:
        """(first, one past the last) global row of this rank's block."""
        rank = self.row_layout.rank
        return int(self.row_offsets[rank]), int(self.row_offsets[rank + 1])

    @property
    def diag_block(self):
        """This rank's diagonal block (owned columns, local numbering), a sparsegpu matrix."""
        return self._diag

    @property
    def offdiag_block(self):
        """This rank's off-rank block (columns numbered by ghost), a sparsegpu matrix."""
        return self._offd

    def __repr__(self):
        return (
            f"<distributed {self.shape[0]}x{self.shape[1]} {self.dtype} CSR matrix with "
            f"{self.nnz} stored elements on {self.row_layout.size} ranks>"
        )

    # ----------------------------------------------------------------- vectors
    def scatter(self, v, root: int = 0) -> DistributedVector:
        """Split a global vector held on ``root`` over the ranks (collective).

        Parameters
        ----------
        v : array or None
            The global vector (NumPy or CuPy, length ``shape[0]`` or ``shape[1]``) on
            ``root``; ignored elsewhere.
        root : int, optional

        Returns
        -------
        DistributedVector
            In the row layout (length ``shape[0]``) or, for a rectangular matrix and a
            vector of length ``shape[1]``, the column layout; each block in the array
            module the local products use (CuPy on a GPU).
        """
        comm, timeout = self._comm, self._timeout
        header = np.zeros(3, dtype=np.int64)
        error = host = None
        if comm.Get_rank() == root:
            try:
                host = np.ascontiguousarray(_to_host(v).ravel())
                if host.dtype.kind not in "biufc":
                    raise TypeError(f"scatter needs a numeric vector, got dtype {host.dtype}")
                if host.size not in self.shape:
                    raise ValueError(
                        f"scatter: the matrix has shape {self.shape} but the vector has "
                        f"{host.size} entries; pass a vector of length {self.shape[0]} "
                        f"(rows) or {self.shape[1]} (columns)"
                    )
                header[:] = (0, host.size, host.dtype.num)
            except Exception as exc:
                error, header[0] = exc, 1
        _comm.wait_all([comm.Ibcast(header, root=root)], timeout, "scatter")
        _comm.raise_if_failed(comm, header[0], error, timeout, "scatter on the root")
        layout = self.row_layout if header[1] == self.shape[0] else self.col_layout
        out = np.empty(layout.n_local, dtype=_dtype_of(int(header[2])))
        counts, displs = np.diff(layout.offsets), layout.offsets[:-1]
        source = [host, counts, displs, _mpi_type(out)] if comm.Get_rank() == root else None
        _comm.wait_all([comm.Iscatterv(source, out, root=root)], timeout, "scatter")
        return DistributedVector(layout.xp.asarray(out), layout)

    def zeros(self, dtype=None, *, columns: bool = False) -> DistributedVector:
        """A zero vector in the row layout (the column layout with ``columns=True``)."""
        layout = self.col_layout if columns else self.row_layout
        return layout.zeros(self.dtype if dtype is None else dtype)

    def diagonal(self) -> DistributedVector:
        """The main diagonal of a square matrix, in the row layout (no communication)."""
        if self.shape[0] != self.shape[1]:
            raise ValueError(f"diagonal() needs a square matrix, got shape {self.shape}")
        local = np.asarray(self._diag.diagonal())
        return DistributedVector(self.row_layout.xp.asarray(local), self.row_layout)

    # ---------------------------------------------------------------- products
    def _transport(self, dtype) -> HostStaged:
        transport = self._transports.get(dtype)
        if transport is None:
            transport = HostStaged(self._comm, self._halo, self.col_layout.xp, dtype,
                                   self._timeout)  # fmt: skip
            self._transports[dtype] = transport
        return transport

    def _local_diag(self, x_local, dtype):
        """The diagonal block's product (the part overlapped with the exchange)."""
        xp = self.row_layout.xp
        if self._diag.nnz == 0:
            return xp.zeros(self._diag.shape[0], dtype=dtype)
        return _dispatch.product(self._diag, x_local).astype(dtype, copy=False)

    def _local_offd(self, y, ghosts):
        if self._offd.nnz:
            y += _dispatch.product(self._offd, ghosts)
        return y

    def matvec(self, x: DistributedVector) -> DistributedVector:
        """``A @ x`` for a DistributedVector in the column layout (collective).

        Posts the halo receives and sends, computes the diagonal block's product while
        they travel, waits (with the deadline), adds the off-rank block's product, and
        agrees with the other ranks on success (one small allreduce); an exception on
        any rank becomes the same :class:`RankError` on all of them.
        """
        if not isinstance(x, DistributedVector):
            raise TypeError(
                f"a distributed matrix multiplies DistributedVectors (from A.scatter), "
                f"got {type(x).__name__}"
            )
        if not self.col_layout.same_as(x.layout):
            raise ValueError(
                f"x is split as {x.layout.offsets.tolist()} but the matrix's columns as "
                f"{self.col_layout.offsets.tolist()}; make x with A.scatter or A @ ..."
            )
        dtype = _select.result_dtype(self.dtype, x.dtype)
        x_local = x.local if x.dtype == dtype else x.local.astype(dtype)
        transport = self._transport(dtype)
        requests, peers, error = transport.start(x_local)
        y = None
        if error is None:
            try:
                y = self._local_diag(x_local, dtype)
            except Exception as exc:
                error = exc
        ghosts = transport.finish(requests, peers)
        if error is None:
            try:
                y = self._local_offd(y, ghosts)
            except Exception as exc:
                error = exc
        _comm.agree(self._comm, error, self._timeout, "the product")
        return DistributedVector(y, self.row_layout)

    def __matmul__(self, x):
        return self.matvec(x)

    dot = matvec

    # ----------------------------------------------------------------- explain
    def explain(self) -> DistributedReport:
        """How the matrix is split and how a product communicates (collective).

        Returns
        -------
        DistributedReport
            The same on every rank: rows, nonzeros, ghosts, neighbours and halo bytes
            per rank, the transport and why, and each rank's backend and device.
        """
        dtype = _select.result_dtype(self.dtype, self.dtype)
        itemsize = np.dtype(dtype).itemsize
        recv, send = self._halo.bytes_per_product(itemsize)
        backend = "none (no nonzeros)"
        for local in (self._diag, self._offd):
            if local.nnz:
                chosen = _planning.estimate(local, dtype)
                name = chosen.requested
                backend = (
                    chosen.backend if name == chosen.backend else f"{chosen.backend} (via {name})"
                )
                break
        mine = RankReport(
            rank=self.row_layout.rank,
            rows=self._diag.shape[0],
            nnz=self._diag.nnz + self._offd.nnz,
            diag_nnz=self._diag.nnz,
            ghosts=self._halo.n_ghost,
            neighbours=self._halo.neighbours,
            recv_bytes=recv,
            send_bytes=send,
            backend=backend,
            device=self._device,
        )
        ranks = self._comm.allgather(mine)
        xp = self.col_layout.xp
        return DistributedReport(
            self.shape, self.nnz, np.dtype(dtype), HostStaged.name, HostStaged.reason(xp), ranks
        )
