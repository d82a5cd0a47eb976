"""The distributed CSR matrix: PETSc's MPIAIJ layout on sparsegpu's local products."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..classes._matrix import csr_matrix as _local_csr
from ..device import _cuda
from ..device._rows import row_ids
from ..engine import _planning, _select
from ..measure._oracle import random_vector
from . import _comm, _halo_kernels, _transport_choice
from ._comm import SETUP_TAG
from ._exchange import make_plan
from ._partition import (
    balanced_offsets,
    check_offsets,
    check_partition,
    even_offsets,
    graph_order,
    permute,
)
from ._vector import DistributedVector, Layout, _dtype_of, _to_host, scatter

# the per-rank descriptor every rank allgathers at construction (int64 fields)
_FIELDS = ("n_cols", "dtype", "row_start", "n_rows", "nnz")


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


def _csr(data, indices, indptr, shape, index_dtype):
    """A sparsegpu CSR matrix in ``index_dtype`` (scipy narrows int64 that fits)."""
    local = _local_csr((data, indices, indptr), shape=shape)
    local.indices = local.indices.astype(index_dtype, copy=False)
    local.indptr = local.indptr.astype(index_dtype, copy=False)
    return local


def _split(block, col_start: int, col_end: int, index_dtype):
    """This rank's rows as (diagonal block in local columns, off-rank block of only the rows
    that reference ghosts, those rows, the ghost columns): the off-rank block's columns are
    numbered by ghost, its rows by ``rows``."""
    n_rows = block.shape[0]
    rows = row_ids(block.indptr, np, np.int64)
    cols = block.indices.astype(np.int64)
    owned = (cols >= col_start) & (cols < col_end)

    def part(mask, columns, row_ids, n_part_rows, n_cols):
        counts = np.bincount(row_ids, minlength=n_part_rows)
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(index_dtype)
        return _csr(block.data[mask], columns, indptr, (n_part_rows, n_cols), index_dtype)

    ghosts = np.unique(cols[~owned])
    diag = part(owned, cols[owned] - col_start, rows[owned], n_rows, col_end - col_start)
    offd_rows = np.unique(rows[~owned])
    offd = part(~owned, np.searchsorted(ghosts, cols[~owned]),
                np.searchsorted(offd_rows, rows[~owned]), offd_rows.size, ghosts.size)  # fmt: skip
    return diag, offd, offd_rows, ghosts


def _index_dtype(block) -> np.dtype:
    """The index dtype of a sparse block (int32 for anything else, scipy's default)."""
    if sp.issparse(block) and block.format == "csr":
        return np.promote_types(block.indices.dtype, block.indptr.dtype)
    return np.dtype(np.int32)


def _rows(S, lo, hi):
    """Rows lo:hi of CSR S with S's index dtype (one rank's piece)."""
    indptr = S.indptr[lo : hi + 1]
    piece = sp.csr_matrix((int(hi - lo), S.shape[1]), dtype=S.dtype)
    piece.data = S.data[indptr[0] : indptr[-1]]
    piece.indices = S.indices[indptr[0] : indptr[-1]]
    piece.indptr = indptr - indptr[0]
    return piece


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


# ------------------------------------------------------- row blocks from the root
def _send_blocks(ctx, pieces, offsets, root) -> None:
    """Send rank r its CSR rows ``pieces[r]`` (global rows from ``offsets[r]``) as raw
    arrays: a header, then the arrays."""
    requests, peers, keep = [], [], []
    for rank, piece in enumerate(pieces):
        if rank == root:
            continue
        header = np.array([piece.shape[0], piece.nnz, piece.indptr.dtype.num,
                           piece.indices.dtype.num, piece.data.dtype.num, offsets[rank]],
                          dtype=np.int64)  # fmt: skip
        keep.append(header)
        for array in (header, piece.indptr, piece.indices, piece.data):
            requests.append(ctx.comm.Isend(np.ascontiguousarray(array), dest=rank, tag=SETUP_TAG))
            peers.append(rank)
    ctx.wait(requests, "csr_matrix: sending the row blocks", peers)


def _receive_block(ctx, root, n_cols):
    """(this rank's rows from the root, their first global row)."""
    header = np.empty(6, dtype=np.int64)
    ctx.wait([ctx.comm.Irecv(header, source=root, tag=SETUP_TAG)], "csr_matrix: a row block")
    n_rows, nnz = int(header[0]), int(header[1])
    arrays = [np.empty(n_rows + 1, dtype=_dtype_of(int(header[2]))),
              np.empty(nnz, dtype=_dtype_of(int(header[3]))),
              np.empty(nnz, dtype=_dtype_of(int(header[4])))]  # fmt: skip
    requests = [ctx.comm.Irecv(a, source=root, tag=SETUP_TAG) for a in arrays]
    ctx.wait(requests, "csr_matrix: a row block")
    indptr, indices, data = arrays
    block = sp.csr_matrix((n_rows, n_cols), dtype=data.dtype)
    block.data, block.indices, block.indptr = data, indices, indptr
    return block, int(header[5])


def _order_key(order) -> int:
    """A nonzero number naming a permutation (0 is reserved for none)."""
    if order is None:
        return 0
    digest = hashlib.sha256(np.ascontiguousarray(order, dtype=np.int64).tobytes()).digest()
    return (int.from_bytes(digest[:8], "little") >> 1) or 1


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
        How halo entries and reductions travel (``"nccl"``, ``"cuda-aware-mpi"``,
        ``"host"`` or ``"local"``).
    transport_reason : str
    partition : str
        How the rows were split.
    ranks : list of RankReport
    """

    shape: tuple
    nnz: int
    dtype: np.dtype
    transport: str
    transport_reason: str
    partition: str
    ranks: list

    @property
    def halo_bytes(self) -> int:
        """Bytes received by all ranks together in one product."""
        return sum(r.recv_bytes for r in self.ranks)

    @property
    def max_halo_bytes(self) -> int:
        """Bytes the busiest rank receives in one product."""
        return max((r.recv_bytes for r in self.ranks), default=0)

    @property
    def imbalance(self) -> float:
        """The busiest rank's nonzeros over the mean (1.0: perfectly balanced)."""
        mean = self.nnz / max(len(self.ranks), 1)
        return max((r.nnz for r in self.ranks), default=0) / mean if mean else 1.0

    def __str__(self) -> str:
        lines = [
            f"distributed {self.shape[0]}x{self.shape[1]} {self.dtype} matrix, "
            f"{self.nnz:,} nonzeros on {len(self.ranks)} ranks",
            f"transport: {self.transport} ({self.transport_reason})",
            f"partition: {self.partition}; nonzero imbalance {self.imbalance:.3f}",
            f"halo per product: {self.halo_bytes:,} bytes in all, "
            f"{self.max_halo_bytes:,} on the busiest rank",
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


class _Work:
    """What products in one dtype need, made on the first one: the local plans, the
    off-rank rows and a buffer for their sums, and the halo's buffers."""

    def __init__(self, matrix, dtype, probe, capturable):
        xp = matrix.row_layout.xp
        self.dtype = dtype
        self.diag = self.offd = None
        backends = []
        if matrix._diag.nnz:
            planned = _planning.planned_choice(matrix._diag, dtype, x=probe,
                                                capturable=capturable)  # fmt: skip
            self.diag = planned.plan
            backends.append(planned.choice.implementation)
        if matrix._offd.nnz:
            ghosts = random_vector(matrix._offd.shape[1], dtype, seed=0, xp=xp)
            planned = _planning.planned_choice(matrix._offd, dtype, x=ghosts,
                                                capturable=capturable)  # fmt: skip
            self.offd = planned.plan
            backends.append(planned.choice.implementation)
        self.backend = backends[0].name if backends else None
        self.capturable = all(bool(b.capturable) for b in backends)
        self.rows = xp.asarray(matrix._offd_rows)
        self.sums = xp.empty(matrix._offd.shape[0], dtype=dtype)
        self.halo = matrix._transport.halo(matrix._halo, dtype)
        self._transposed = None

    def transposed(self, matrix, probe):
        """(diagonal block's transpose plan or None, off-rank block's or None, gathered rows
        buffer): the plans of a transposed product, made on the first one."""
        if self._transposed is None:
            xp, dtype = matrix.row_layout.xp, self.dtype
            diag = offd = None
            if matrix._diag.nnz:
                diag = _planning.planned_choice(matrix._diag.T, dtype, x=probe).plan
            if matrix._offd.nnz:
                rows = random_vector(matrix._offd.shape[0], dtype, seed=0, xp=xp)
                offd = _planning.planned_choice(matrix._offd.T, dtype, x=rows).plan
            self._transposed = (diag, offd, xp.empty(matrix._offd.shape[0], dtype=dtype),
                                xp.empty(matrix._offd.shape[1], dtype=dtype))  # fmt: skip
        return self._transposed


class csr_matrix:  # noqa: N801 - named like sparsegpu.csr_matrix, whose role it plays
    """A CSR matrix whose rows are split over the ranks of an MPI communicator.

    Each rank holds a block of rows, split as in PETSc's MPIAIJ format into a *diagonal*
    block (the columns this rank owns, numbered locally) and a compressed *off-rank*
    block (only the rows and columns that reach other ranks). A product gathers the
    entries other ranks need and starts the exchange, computes the diagonal block's
    product while the halo travels, then adds the off-rank block's. With NCCL the
    exchange runs on a stream of its own and is ordered by CUDA events: the host never
    waits. Local products are :class:`sparsegpu.csr_matrix` plans, so they run on the
    backend each rank picks (``backend``, or ``auto``: the GPU when there is one).

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
        read on ``root``. Default: ``partition``.
    partition : {"rows", "graph"}, optional
        ``"rows"`` (default): contiguous row blocks balanced by nonzeros, PETSc's split,
        right for matrices numbered with locality (stencils, RCM-ordered meshes).
        ``"graph"``: a graph partition of a square matrix's pattern (METIS, through the
        optional pymetis: ``pip install -e ".[partition]"``) that cuts the halo of an
        irregularly numbered matrix; the rows are renumbered part by part, which
        ``scatter`` and ``gather`` undo (they need ``root=0``). Without pymetis it warns
        and splits by rows.
    transport : {"auto", "nccl", "cuda-aware-mpi", "host"}, optional
        How halos and reductions travel (default ``SPARSEGPU_TRANSPORT``, else
        ``"auto"``: the fastest that works on every rank; ``explain()`` says which and
        why).
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
    transport : str
        The transport in force (``explain()`` says why).

    Raises
    ------
    ValueError
        On every rank, when the ranks' blocks do not fit together, or a transport that
        was asked for cannot run.
    RankError
        On every rank, when the construction failed on some rank (naming it): the root
        could not convert ``S`` or read the file, a bad ``row_offsets``, a bad block.
    TimeoutError
        On the ranks that called it, naming those that did not within the deadline.

    Notes
    -----
    Every method is collective: all ranks of the communicator must call it, in the same
    order (see ``_comm`` for what happens when they do not). Vectors have one layout for
    the rows (results, right-hand sides) and one for the columns (x); for a square
    matrix they are the same.

    Examples
    --------
    Under ``mpiexec -n 4 python -m mpi4py script.py``:

    >>> import numpy as np, sparsegpu as sg                       # doctest: +SKIP
    >>> import sparsegpu.distributed as sgd                       # doctest: +SKIP
    >>> from mpi4py import MPI                                    # doctest: +SKIP
    >>> root = MPI.COMM_WORLD.Get_rank() == 0                     # doctest: +SKIP
    >>> A = sgd.csr_matrix(sg.datasets.load("bcsstk13") if root else None)  # doctest: +SKIP
    >>> b = A.scatter(np.ones(A.shape[0]) if root else None)      # doctest: +SKIP
    >>> x, info = sg.linalg.cg(A, b, rtol=1e-8)                   # doctest: +SKIP
    >>> x_global = x.gather(root=0)                               # doctest: +SKIP
    """

    def __init__(self, S=None, comm=None, *, root=0, row_offsets=None, partition="rows",
                 transport=None, backend=None, timeout=None):  # fmt: skip
        self._from_root(lambda: S, comm, root, row_offsets, partition, transport, backend,
                        timeout)  # fmt: skip

    def _from_root(self, read, comm, root, row_offsets, partition, transport, backend, timeout):
        """Build from the matrix ``read()`` returns on ``root`` (called there only)."""
        comm = _comm.resolve_comm(comm)
        timeout = _comm.resolve_timeout(timeout)
        transport = _transport_choice.resolve_name(transport)
        check_partition(partition)
        ctx = _comm.open_context(comm, timeout)
        size, rank = ctx.size, ctx.rank
        error, pieces, offsets = None, None, None
        order, note = None, "rows: contiguous blocks, by nonzeros"
        header = np.zeros(2, dtype=np.int64)  # global columns, order key
        if rank == root:
            try:
                S = read()
                S = sp.csr_matrix(_to_host(S) if _cuda.is_cupy_array(S) else S)
                if row_offsets is not None:
                    offsets = check_offsets(row_offsets, S.shape[0], size, "row_offsets")
                    note = "rows: the row_offsets given"
                elif partition == "graph":
                    order, offsets, note = graph_order(S, size)
                    if order is not None:
                        S = permute(S, order)
                else:
                    offsets = balanced_offsets(S.indptr, size)
                pieces = [_rows(S, offsets[r], offsets[r + 1]) for r in range(size)]
                header[:] = (S.shape[1], _order_key(order))
                del S
            except Exception as exc:
                error = exc
        ctx.share(error, root, "reading the matrix on the root")
        ctx.wait([ctx.comm.Ibcast(header, root=root)], "csr_matrix: the root's matrix")
        n_cols = int(header[0])
        if rank == root:
            _send_blocks(ctx, pieces, offsets, root)
            block, row_start = pieces[root], int(offsets[root])
            del pieces
        else:
            block, row_start = _receive_block(ctx, root, n_cols)
        self._setup(ctx, block, row_start, n_cols, backend, transport, order, int(header[1]),
                    note if rank == root else "")  # fmt: skip

    @classmethod
    def from_local_rows(cls, local_block, row_start: int, n_global_cols: int, comm=None, *,
                        transport=None, backend=None, timeout=None):  # fmt: skip
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
        comm, transport, backend, timeout
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
        timeout = _comm.resolve_timeout(timeout)
        transport = _transport_choice.resolve_name(transport)
        ctx = _comm.open_context(comm, timeout)
        self._setup(ctx, local_block, row_start, n_global_cols, backend, transport, None, 0,
                    "rows: each rank's own block" if ctx.rank == 0 else "")  # fmt: skip
        return self

    # ------------------------------------------------------------------ set up
    def _setup(self, ctx, block, row_start, n_cols, backend, transport, order, order_key, note):
        size, rank = ctx.size, ctx.rank
        error = None
        mine = np.zeros(len(_FIELDS), dtype=np.int64)
        try:
            index_dtype = _index_dtype(block)
            block = sp.csr_matrix(_to_host(block) if _cuda.is_cupy_array(block) else block)
            if block.ndim != 2:
                raise ValueError(f"the local block must be 2-D, got shape {block.shape}")
            mine[:] = (block.shape[1], block.dtype.num, int(row_start), block.shape[0],
                       block.nnz)  # fmt: skip
            if int(n_cols) != block.shape[1]:
                raise ValueError(
                    f"n_global_cols is {n_cols} but the local block has {block.shape[1]} "
                    "columns; pass the global column count and a block in global columns"
                )
        except Exception as exc:
            error = exc
        ctx.agree(error, "csr_matrix")
        table = np.empty((size, len(_FIELDS)), dtype=np.int64)
        ctx.wait([ctx.comm.Iallgather(mine, table)], "csr_matrix: the ranks' block descriptions")
        _check_descriptors(table)
        self._ctx = ctx
        self.comm = ctx.comm
        self._partition_note = note
        row_offsets = np.concatenate(([0], np.cumsum(table[:, _FIELDS.index("n_rows")])))
        n_rows = int(row_offsets[-1])
        self.shape = (n_rows, int(n_cols))
        self.dtype = block.dtype
        self.nnz = int(table[:, _FIELDS.index("nnz")].sum())
        col_offsets = row_offsets if n_rows == n_cols else even_offsets(int(n_cols), size)
        error, ghosts, xp = None, np.zeros(0, dtype=np.int64), np
        try:
            self._device = _select_device(ctx.comm)
            c0, c1 = int(col_offsets[rank]), int(col_offsets[rank + 1])
            self._diag, self._offd, self._offd_rows, ghosts = _split(block, c0, c1, index_dtype)
            for local in (self._diag, self._offd):
                local.backend = backend
            xp = self._module()
        except Exception as exc:
            error = exc
        ctx.agree(error, "csr_matrix: the local blocks")
        self._halo = make_plan(ctx, ghosts, col_offsets)
        self._transport = _transport_choice.choose(ctx, xp, transport)
        error = None
        try:
            self._transport.warm_up(self._halo)
        except Exception as exc:
            error = exc
        ctx.agree(error, "csr_matrix: setting up the transport")
        self._work = {}
        self.row_layout = Layout(ctx, row_offsets, xp, self._transport, order, order_key)
        self.col_layout = (
            self.row_layout if n_rows == n_cols else Layout(ctx, col_offsets, xp, self._transport)
        )

    def _module(self):
        """numpy or cupy: where this rank's local products compute (the module of the plan
        its diagonal block, or a stand-in when it has no nonzeros, would run)."""
        probe = self._diag
        if probe.nnz == 0:
            probe = _local_csr(sp.eye(1, dtype=self.dtype, format="csr"))
            probe.backend = self._diag.backend
        return _planning.plan_for(probe, self.dtype).matrix.xp

    # --------------------------------------------------------------- attributes
    @property
    def ndim(self) -> int:
        return 2

    @property
    def transport(self) -> str:
        return self._transport.name

    @property
    def row_offsets(self) -> np.ndarray:
        """``size + 1`` offsets: rank r holds rows ``row_offsets[r]:row_offsets[r + 1]``."""
        return self.row_layout.offsets

    @property
    def local_rows(self) -> tuple[int, int]:
        """(first, one past the last) global row of this rank's block (in the matrix's
        numbering: a graph partition renumbers the rows)."""
        rank = self.row_layout.rank
        return int(self.row_offsets[rank]), int(self.row_offsets[rank + 1])

    @property
    def diag_block(self):
        """This rank's diagonal block (owned columns, local numbering), a sparsegpu matrix."""
        return self._diag

    @property
    def offdiag_block(self):
        """This rank's off-rank block: a sparsegpu matrix of the rows in
        :attr:`offdiag_rows`, its columns numbered by ghost."""
        return self._offd

    @property
    def offdiag_rows(self) -> np.ndarray:
        """The local rows that reference other ranks' columns (ascending)."""
        return self._offd_rows

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
        return scatter(v, root, [self.row_layout, self.col_layout])

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
    def _planned(self, dtype, capturable=False) -> bool:
        """Whether products in ``dtype`` are planned already (:meth:`_work_for` then
        makes nothing, and needs no probe)."""
        return (np.dtype(dtype), bool(capturable)) in self._work

    def _work_for(self, dtype, probe, capturable=False) -> _Work:
        key = (np.dtype(dtype), bool(capturable))
        work = self._work.get(key)
        if work is None:
            work = self._work[key] = _Work(self, np.dtype(dtype), probe, capturable)
        return work

    def _product(self, x_local, out, capturable=False):
        """``out = A x`` on this rank's blocks (collective; the solvers' entry point):
        gather the halo, queue the diagonal block's product, then exchange (with NCCL the
        sends start only now: their host time overlaps the product) and add the off-rank
        rows' sums once the halo arrived. With NCCL nothing here waits on the host; a
        local error still lets the exchange happen (zeros are sent), then every rank
        hears of it."""
        ctx = self._ctx
        ctx.check()
        work = self._work_for(out.dtype, x_local, capturable)
        error = work.halo.start(x_local)
        if error is None:
            try:
                if work.diag is None:
                    out.fill(0)
                else:
                    work.diag.matvec(x_local, out=out)
            except Exception as exc:
                error = exc
        ghosts = work.halo.finish()
        if error is None and work.offd is not None:
            try:
                work.offd.matvec(ghosts, out=work.sums)
                _halo_kernels.add_rows(out, work.rows, work.sums)
            except Exception as exc:
                error = exc
        if error is not None:
            raise ctx.fail(error, "the product")
        return out

    def _rproduct(self, x_local, out):
        """``out = A^H x`` on this rank's blocks (collective): each rank sends the off-rank
        rows' contributions back to the owners of their columns, which add them up."""
        ctx = self._ctx
        ctx.check()
        work = self._work_for(out.dtype, None)
        conjugate = out.dtype.kind == "c"
        x = x_local.conj() if conjugate else x_local
        diag, offd, rows, contributions = work.transposed(self, x)
        error = None
        try:
            if offd is not None:
                _halo_kernels.gather(x, work.rows, rows)
                offd.matvec(rows, out=contributions)
        except Exception as exc:
            error = exc
            contributions.fill(0)
        work.halo.start_reverse(contributions)
        if error is None:
            try:
                if diag is None:
                    out.fill(0)
                else:
                    diag.matvec(x, out=out)
            except Exception as exc:
                error = exc
        returned = work.halo.finish_reverse()
        if error is None:
            try:
                _halo_kernels.add_at(out, work.halo.pack, returned)
                if conjugate:
                    self.row_layout.xp.conj(out, out=out)
            except Exception as exc:
                error = exc
        if error is not None:
            raise ctx.fail(error, "the transposed product")
        return out

    def _check_vector(self, x, layout, what):
        if not isinstance(x, DistributedVector):
            raise TypeError(
                f"a distributed matrix multiplies DistributedVectors (from A.scatter), "
                f"got {type(x).__name__}"
            )
        if not layout.same_as(x.layout):
            raise ValueError(
                f"x is split as {x.layout.offsets.tolist()} but the matrix's {what} as "
                f"{layout.offsets.tolist()} (or in another numbering or communicator); make "
                "x with A.scatter or A @ ..."
            )

    def matvec(self, x: DistributedVector) -> DistributedVector:
        """``A @ x`` for a DistributedVector in the column layout (collective).

        Returns at once where the transport queues everything on the GPU (NCCL); an
        error on another rank is raised by the next operation that waits.
        """
        self._check_vector(x, self.col_layout, "columns")
        dtype = _select.result_dtype(self.dtype, x.dtype)
        x_local = x.local if x.dtype == dtype else x.local.astype(dtype)
        out = self.row_layout.xp.empty(self.row_layout.n_local, dtype=dtype)
        return DistributedVector(self._product(x_local, out), self.row_layout)

    def rmatvec(self, x: DistributedVector) -> DistributedVector:
        """``A^H @ x`` for a DistributedVector in the row layout (collective)."""
        self._check_vector(x, self.row_layout, "rows")
        dtype = _select.result_dtype(self.dtype, x.dtype)
        x_local = x.local if x.dtype == dtype else x.local.astype(dtype)
        out = self.col_layout.xp.empty(self.col_layout.n_local, dtype=dtype)
        return DistributedVector(self._rproduct(x_local, out), self.col_layout)

    def __matmul__(self, x):
        return self.matvec(x)

    dot = matvec

    # ----------------------------------------------------------------- solvers
    def _solver_space(self):
        """The vector space ``sparsegpu.linalg`` solves in (``_space``)."""
        from ._space import DistributedSpace

        return DistributedSpace(self)

    # ----------------------------------------------------------------- explain
    def _backend_name(self, dtype) -> str:
        for work in self._work.values():
            if work.dtype == dtype and work.backend is not None:
                return work.backend
        for local in (self._diag, self._offd):
            if local.nnz:
                chosen = _planning.estimate(local, dtype)
                name = chosen.requested
                return (
                    chosen.backend if name == chosen.backend else f"{chosen.backend} (via {name})"
                )
        return "none (no nonzeros)"

    def explain(self) -> DistributedReport:
        """How the matrix is split and how a product communicates (guarded collective).

        Returns
        -------
        DistributedReport
            The same on every rank: rows, nonzeros, ghosts, neighbours and halo bytes
            per rank, the nonzero imbalance, the partition, the transport and why, and
            each rank's backend and device.

        Raises
        ------
        TimeoutError
            Naming the ranks that did not call it within the deadline: call it on every
            rank, then print on one.
        """
        self._ctx.enter("explain")
        dtype = _select.result_dtype(self.dtype, self.dtype)
        recv, send = self._halo.bytes_per_product(np.dtype(dtype).itemsize)
        mine = RankReport(
            rank=self.row_layout.rank,
            rows=self._diag.shape[0],
            nnz=self._diag.nnz + self._offd.nnz,
            diag_nnz=self._diag.nnz,
            ghosts=self._halo.n_ghost,
            neighbours=self._halo.neighbours,
            recv_bytes=recv,
            send_bytes=send,
            backend=self._backend_name(dtype),
            device=self._device,
        )
        everyone = self._ctx.allgather_objects((mine, self._partition_note), "explain")
        partition = next(note for _, note in everyone if note)
        return DistributedReport(self.shape, self.nnz, np.dtype(dtype), self._transport.name,
                                 self._transport.reason, partition,
                                 [report for report, _ in everyone])  # fmt: skip
