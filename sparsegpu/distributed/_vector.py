"""Distributed vectors: each rank holds one contiguous block (NumPy or CuPy)."""

from __future__ import annotations

import numbers

import numpy as np

from .. import _cuda
from . import _comm


def _to_host(a) -> np.ndarray:
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


class Layout:
    """How a global vector is split over the ranks of a communicator.

    Attributes
    ----------
    comm : mpi4py communicator
    offsets : numpy.ndarray
        ``size + 1`` int64 offsets: rank r holds entries ``offsets[r]:offsets[r + 1]``.
    xp : module
        numpy or cupy: where this rank's blocks live.
    timeout : float or None
        Seconds a collective operation may wait for the other ranks.
    """

    def __init__(self, comm, offsets, xp, timeout):
        self.comm = comm
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.xp = xp
        self.timeout = timeout
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

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
        return other is self or (
            other.comm is self.comm and np.array_equal(other.offsets, self.offsets)
        )

    def reduce(self, count: int, local_values, what: str) -> np.ndarray:
        """Sum ``count`` per-rank values over the ranks (collective).

        ``local_values`` is a callable returning them (on the host); an exception it
        raises on any rank becomes the same RankError on every rank. One reduction
        carries the values and the error flag (a failed rank contributes zeros).
        """
        error = None
        buffer = np.zeros(count + 1, dtype=np.complex128)
        try:
            buffer[:count] = np.asarray(local_values()).reshape(count)
        except Exception as exc:
            error = exc
            buffer[:count] = 0
        buffer[count] = 0.0 if error is None else 1.0
        total = _comm.allreduce_sum(self.comm, buffer, self.timeout, what)
        _comm.raise_if_failed(self.comm, total[count].real, error, self.timeout, what)
        return total[:count]

    def zeros(self, dtype) -> DistributedVector:
        """A zero vector of this layout."""
        return DistributedVector(self.xp.zeros(self.n_local, dtype=dtype), self)


class DistributedVector:
    """A vector split over the ranks: this rank's block is :attr:`local`.

    Made by :meth:`sparsegpu.distributed.csr_matrix.scatter` (or the matrix's products and solvers).
    Arithmetic is element-wise on the blocks (no communication); :meth:`vdot`,
    :meth:`dot` and :meth:`norm` are collective (one ``allreduce``); :meth:`gather`
    collects the global vector on one rank or all.

    Attributes
    ----------
    local : numpy.ndarray or cupy.ndarray
        This rank's block, entries ``layout.offsets[rank]:layout.offsets[rank + 1]``.
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
                    f"({self.layout.offsets.tolist()} vs {other.layout.offsets.tolist()}); "
                    "combine vectors of the same matrix layout"
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
    def vdot(self, other: DistributedVector):
        """``conj(self) . other`` over all ranks (collective); a Python scalar."""
        mine = self._operand(other)
        total = self.layout.reduce(
            1, lambda: _to_host(self.layout.xp.vdot(self.local, mine)), "vdot"
        )
        return _scalar(total[0], np.result_type(self.dtype, other.dtype))

    def dot(self, other: DistributedVector):
        """``self . other`` (no conjugation) over all ranks (collective)."""
        mine = self._operand(other)
        total = self.layout.reduce(1, lambda: _to_host(self.layout.xp.dot(self.local, mine)), "dot")
        return _scalar(total[0], np.result_type(self.dtype, other.dtype))

    def norm(self) -> float:
        """The global 2-norm (collective)."""
        total = self.layout.reduce(
            1, lambda: _to_host(self.layout.xp.vdot(self.local, self.local)).real, "norm"
        )
        return float(np.sqrt(max(total[0].real, 0.0)))

    # ----------------------------------------------------------- whole vector
    def gather(self, root: int | None = 0):
        """The global vector as NumPy on ``root`` (None on the other ranks), or on every
        rank with ``root=None`` (collective)."""
        layout = self.layout
        host = np.ascontiguousarray(_to_host(self.local))
        counts = np.diff(layout.offsets)
        displs = layout.offsets[:-1]
        out = np.empty(layout.n, dtype=host.dtype)
        if root is None:
            request = layout.comm.Iallgatherv(host, [out, counts, displs, _mpi_type(host)])
            _comm.wait_all([request], layout.timeout, "gather")
            return out
        mine = layout.rank == root
        target = [out, counts, displs, _mpi_type(host)] if mine else None
        request = layout.comm.Igatherv(host, target, root=root)
        _comm.wait_all([request], layout.timeout, "gather")
        return out if mine else None


def _mpi_type(a: np.ndarray):
    from mpi4py.util.dtlib import from_numpy_dtype

    return from_numpy_dtype(a.dtype)


def _scalar(value, dtype):
    """A reduced value as a Python scalar of the vectors' kind (real stays real)."""
    return complex(value) if np.dtype(dtype).kind == "c" else float(np.real(value))
