"""Distributed vectors: each rank holds one contiguous block (NumPy or CuPy)."""

from __future__ import annotations

import numbers

import numpy as np

from ..device import _cuda
from . import _comm


def _to_host(a) -> np.ndarray:
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


def mpi_type(dtype):
    from mpi4py.util.dtlib import from_numpy_dtype

    return from_numpy_dtype(np.dtype(dtype))


class Layout:
    """How a global vector is split over the ranks of a distributed matrix.

    Attributes
    ----------
    ctx : Context
        The matrix's communicator, deadline and error notices (``_comm``).
    offsets : numpy.ndarray
        ``size + 1`` int64 offsets: rank r holds entries ``offsets[r]:offsets[r + 1]``
        of the matrix's own numbering.
    xp : module
        numpy or cupy: where this rank's blocks live.
    transport : Transport
        How reductions travel (``_transport``).
    order : numpy.ndarray or None
        Under a graph partition, entry k of the matrix's numbering is entry ``order[k]``
        of the caller's; held by rank 0 only.
    order_key : int
        0 without such an order, else a number naming it (the same on every rank).
    """

    def __init__(self, ctx, offsets, xp, transport, order=None, order_key=0):
        self.ctx = ctx
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.xp = xp
        self.transport = transport
        self.order = order
        self.order_key = int(order_key)
        self.rank = ctx.rank
        self.size = ctx.size

    @property
    def comm(self):
        return self.ctx.comm

    @property
    def permuted(self) -> bool:
        return self.order_key != 0

    @property
    def timeout(self):
        return self.ctx.timeout

    @property
    def n(self) -> int:
        """The global length."""
        return int(self.offsets[-1])

    @property
    def start(self) -> int:
        """The first global index this rank holds."""
        return int(self.offsets[self.rank])

    @property
    def n_local(self) -> int:
        """How many entries this rank holds."""
        return int(self.offsets[self.rank + 1] - self.offsets[self.rank])

    def same_as(self, other: Layout) -> bool:
        """Whether vectors of ``other`` combine with this layout's: the same split of the
        same numbering over the same group of ranks."""
        if other is self:
            return True
        if other.order_key != self.order_key or not np.array_equal(other.offsets, self.offsets):
            return False
        MPI = _comm.mpi()
        return MPI.Comm.Compare(self.comm, other.comm) in (MPI.IDENT, MPI.CONGRUENT)

    def zeros(self, dtype) -> DistributedVector:
        """A zero vector of this layout (no communication)."""
        return DistributedVector(self.xp.zeros(self.n_local, dtype=dtype), self)

    def reduce(self, buffer) -> None:
        """Sum ``buffer`` (where the vectors live) over the ranks in place."""
        self.transport.allreduce(buffer)

    def to_host(self, a) -> np.ndarray:
        """A reduced value on the host: waits for the GPU within the deadline (it may be
        waiting on other ranks), raising errors other ranks sent."""
        if _cuda.is_cupy_array(a):
            cupy = _cuda.cupy_or_none()
            self.ctx.wait_device(cupy.cuda.get_current_stream(), "a reduction",
                                 " (the GPU is waiting on another rank)")  # fmt: skip
            return a.get()
        self.ctx.check()
        return np.asarray(a)

    # ---------------------------------------------------------- whole vectors
    def _order(self, root: int) -> np.ndarray:
        if self.order is None:
            raise ValueError(
                f"this matrix's graph-partition order is held by rank 0; use root=0, not {root}"
            )
        return self.order

    def gather(self, local, root: int | None) -> np.ndarray | None:
        """The global vector from every rank's ``local`` block (guarded collective)."""
        ctx = self.ctx
        ctx.enter("gather")
        host = np.ascontiguousarray(_to_host(local))
        counts, displs = np.diff(self.offsets), self.offsets[:-1]
        target = 0 if root is None else root
        mine = ctx.rank == target
        out = np.empty(self.n, dtype=host.dtype) if (mine or root is None) else None
        spec = [out, counts, displs, mpi_type(host.dtype)] if mine else None
        ctx.wait([ctx.comm.Igatherv(host, spec, root=target)], "gather")
        if mine and self.permuted:
            unpermuted = np.empty_like(out)
            unpermuted[self._order(target)] = out
            out = unpermuted
        if root is None:
            ctx.wait([ctx.comm.Ibcast(out, root=0)], "gather")
        return out


def scatter(v, root: int, layouts: list) -> DistributedVector:
    """Split the global vector ``v`` held on ``root`` (guarded collective) into the layout
    of ``layouts`` whose length it has (a rectangular matrix's rows or columns)."""
    ctx = layouts[0].ctx
    ctx.enter("scatter")
    header = np.zeros(2, dtype=np.int64)  # which layout, dtype
    error = host = None
    if ctx.rank == root:
        try:
            host = np.ascontiguousarray(_to_host(v).ravel())
            if host.dtype.kind not in "biufc":
                raise TypeError(f"scatter needs a numeric vector, got dtype {host.dtype}")
            lengths = [layout.n for layout in layouts]
            if host.size not in lengths:
                raise ValueError(
                    f"the vector has {host.size} entries; pass a vector of length "
                    + " or ".join(map(str, dict.fromkeys(lengths)))
                )
            header[:] = (lengths.index(host.size), host.dtype.num)
            if layouts[header[0]].permuted:
                host = host[layouts[header[0]]._order(root)]
        except Exception as exc:
            error = exc
    ctx.share(error, root, "scatter on the root")
    ctx.wait([ctx.comm.Ibcast(header, root=root)], "scatter")
    layout, dtype = layouts[int(header[0])], _dtype_of(int(header[1]))
    out = np.empty(layout.n_local, dtype=dtype)
    counts, displs = np.diff(layout.offsets), layout.offsets[:-1]
    source = [host, counts, displs, mpi_type(dtype)] if ctx.rank == root else None
    ctx.wait([ctx.comm.Iscatterv(source, out, root=root)], "scatter")
    return DistributedVector(layout.xp.asarray(out), layout)


def _dtype_of(num: int) -> np.dtype:
    """The numpy dtype whose ``dtype.num`` is ``num`` (how headers carry dtypes)."""
    for scalar_type in set(np.sctypeDict.values()):
        if np.dtype(scalar_type).num == num:
            return np.dtype(scalar_type)
    return np.dtype(f"V{num}")  # not a numeric dtype: shown as such in an error


class DistributedVector:
    """A vector split over the ranks: this rank's block is :attr:`local`.

    Made by :meth:`csr_matrix.scatter` (or the matrix's products and solvers).
    Arithmetic is element-wise on the blocks (no communication); :meth:`vdot`,
    :meth:`dot` and :meth:`norm` are collective (one reduction, on the GPUs where the
    transport allows); :meth:`gather` collects the global vector on one rank or all.

    Attributes
    ----------
    local : numpy.ndarray or cupy.ndarray
        This rank's block: entries ``layout.offsets[rank]:layout.offsets[rank + 1]`` of
        the matrix's numbering (under a graph partition, not the caller's: ``gather``
        puts them back).
    layout : Layout
    """

    __array_priority__ = 2000.0  # numpy scalars defer to our __rmul__

    def __init__(self, local, layout: Layout):
        if local.ndim != 1 or local.shape[0] != layout.n_local:
            raise ValueError(
                f"rank {layout.rank} holds {layout.n_local} entries of the vector, got a "
                f"block of shape {local.shape}"
            )
        self.local = local
        self.layout = layout

    # --------------------------------------------------------------- attributes
    @property
    def shape(self) -> tuple[int]:
        return (self.layout.n,)

    @property
    def dtype(self) -> np.dtype:
        return self.local.dtype

    @property
    def comm(self):
        return self.layout.comm

    def __repr__(self):
        return (
            f"<DistributedVector of {self.layout.n} {self.dtype} on {self.layout.size} ranks; "
            f"rank {self.layout.rank} holds {self.layout.n_local}>"
        )

    def copy(self) -> DistributedVector:
        return DistributedVector(self.local.copy(), self.layout)

    def conj(self) -> DistributedVector:
        return DistributedVector(self.local.conj(), self.layout)

    def astype(self, dtype) -> DistributedVector:
        return DistributedVector(self.local.astype(dtype), self.layout)

    # ------------------------------------------------------------- arithmetic
    def _operand(self, other):
        if isinstance(other, DistributedVector):
            if not self.layout.same_as(other.layout):
                raise ValueError(
                    "the vectors are split differently over the ranks "
                    f"({self.layout.offsets.tolist()} vs {other.layout.offsets.tolist()}, or "
                    "a different numbering or communicator); combine vectors of one matrix "
                    "layout"
                )
            return other.local
        if isinstance(other, numbers.Number) or (np.ndim(other) == 0 and hasattr(other, "dtype")):
            return other
        raise TypeError(
            f"a DistributedVector combines with scalars and DistributedVectors of the same "
            f"layout, not {type(other).__name__}"
        )

    def _new(self, local) -> DistributedVector:
        return DistributedVector(local, self.layout)

    def __add__(self, other):
        return self._new(self.local + self._operand(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._new(self.local - self._operand(other))

    def __rsub__(self, other):
        return self._new(self._operand(other) - self.local)

    def __mul__(self, other):
        return self._new(self.local * self._operand(other))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._new(self.local / self._operand(other))

    def __neg__(self):
        return self._new(-self.local)

    def __iadd__(self, other):
        self.local += self._operand(other)
        return self

    def __isub__(self, other):
        self.local -= self._operand(other)
        return self

    def __imul__(self, other):
        self.local *= self._operand(other)
        return self

    def __itruediv__(self, other):
        self.local /= self._operand(other)
        return self

    # ------------------------------------------------------------- reductions
    def _reduced(self, other, conjugate: bool):
        layout = self.layout
        layout.ctx.check()
        mine = self._operand(other)
        dtype = np.result_type(self.dtype, other.dtype)
        value = layout.xp.vdot(self.local, mine) if conjugate else layout.xp.dot(self.local, mine)
        buffer = layout.xp.asarray(value, dtype=dtype).reshape(1)
        layout.reduce(buffer)
        return layout.to_host(buffer)[0]

    def vdot(self, other: DistributedVector):
        """``conj(self) . other`` over all ranks (collective); a Python scalar."""
        return _scalar(self._reduced(other, True), np.result_type(self.dtype, other.dtype))

    def dot(self, other: DistributedVector):
        """``self . other`` (no conjugation) over all ranks (collective)."""
        return _scalar(self._reduced(other, False), np.result_type(self.dtype, other.dtype))

    def norm(self) -> float:
        """The global 2-norm (collective)."""
        return float(np.sqrt(max(np.real(self._reduced(self, True)), 0.0)))

    # ----------------------------------------------------------- whole vector
    def gather(self, root: int | None = 0):
        """The global vector as NumPy on ``root`` (None on the other ranks), or on every
        rank with ``root=None`` (collective), in the caller's numbering."""
        return self.layout.gather(self.local, root)


def _scalar(value, dtype):
    """A reduced value as a Python scalar of the vectors' kind (real stays real)."""
    return complex(value) if np.dtype(dtype).kind == "c" else float(np.real(value))
