"""The CSR vector kernel family: the ``vector``, ``texture``, ``readonly`` and ``shuffle`` backends.

One templated CUDA source (``kernels/csr_vector.cu``: Bell & Garland, "Implementing Sparse
Matrix-Vector Multiplication on Throughput-Oriented Processors", SC'09, figure 22, with the
load paths and reductions of G-DEP's K20 tuning of that kernel); the four backends differ
only in two template arguments, the x-load path (plain global load, texture object,
read-only ``__ldg``) and the reduction of a row's partial sums (shared memory or warp
shuffles). Block size and threads per row come from a :class:`CsrVectorPolicy`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..device import _compile, _cuda
from ..device import _occupancy as occupancy
from ..device._dtypes import HALF_DTYPES, MIXED_PARTNERS, accumulator_itemsize
from ..device._launch import (
    CXX_HALF_TYPES,
    CXX_INDEX_TYPES,
    CXX_VALUE_TYPES,
    KernelLaunch,
    precision_name_expression,
)
from ..device._mirror import DeviceMatrix
from ._spmm import BLOCK_SIZE as SPMM_BLOCK_SIZE
from ._spmm import column_lanes, nonzero_lanes_for, spmm_supports
from .base import FLOAT_AND_COMPLEX, Backend, Plan
from .policy import THREADS_PER_ROW_CHOICES, UnrolledRowPolicy

SOURCE = "csr_vector.cu"

# Template arguments; the same numbers as the constants in kernels/common.cuh and csr_vector.cu.
LOAD_PLAIN, LOAD_TEXTURE, LOAD_READONLY = 0, 1, 2
REDUCE_SHARED, REDUCE_SHUFFLE = 0, 1

MAX_GRID_BLOCKS = 2**31 - 1
CANDIDATE_BLOCK_SIZES = (64, 128, 256, 512, 1024)
# Register caps the autotuner tries (kernel_family_h200_register_budget.txt: 40 lifted the
# 27-point stencil from 79% to 93% of copy bandwidth; the compiler's own 32 suits 5-point).
CANDIDATE_REGISTER_CAPS = (40, 48, 64)
# Load-shape knobs the autotuner tries (each at block size 512 and every nearby threads per
# row): on the H200 quad loads took the 27-point stencil in float32 from 83% to 94% of copy
# bandwidth (with a cap of 40), two loads per trip took it to 89% in float64, streamed
# loads helped scattered columns (knob_sweep_h200.jsonl).
LOAD_SHAPE_CANDIDATES = (
    {"unroll": 1},
    {"unroll": 2},
    {"unroll": 1, "vector_loads": True},
    {"unroll": 2, "vector_loads": True},
    {"unroll": 1, "vector_loads": True, "max_registers": 40},
    {"unroll": 1, "stream_matrix": True},
    {"unroll": 2, "stream_matrix": True, "vector_loads": True},
)


@dataclass(frozen=True)
class CsrVectorPolicy(UnrolledRowPolicy):
    """The CSR vector kernel family (``vector``, ``texture``, ``readonly``, ``shuffle``).

    Attributes
    ----------
    block_size, threads_per_row, max_registers, unroll, stream_matrix, vector_loads
        As in :class:`~sparsegpu.tuning.UnrolledRowPolicy`.
    """


def kernel_name(
    value_dtype, index_dtype, threads_per_row, load_path, reduction, matrix_dtype=None
) -> str:
    """The C++ name of one instantiation, e.g. ``csr_vector<double, int, 8, 2, 1>``; with
    a ``matrix_dtype`` other than ``value_dtype`` (mixed precision: float32 values, float64
    vectors), ``csr_vector_mixed_precision<double, float, int, 8, 2, 1>``."""
    parameters = (threads_per_row, load_path, reduction)
    return precision_name_expression(
        "csr_vector", value_dtype, index_dtype, *parameters, matrix_dtype=matrix_dtype
    )


def nearby_threads_per_row(threads_per_row: int) -> list[int]:
    """The allowed choices from half to twice ``threads_per_row`` (the untuned choice,
    which sits near the H200's winners: see ``occupancy.threads_per_row_for``)."""
    return [t for t in THREADS_PER_ROW_CHOICES if threads_per_row // 2 <= t <= threads_per_row * 2]


def sweep(untuned: UnrolledRowPolicy) -> list:
    """The autotuner's candidates of a row-group kernel around its untuned policy (same
    class): block sizes 64..1024 times threads per row next to the untuned choice; register
    caps (CANDIDATE_REGISTER_CAPS) at block size 256 for the smaller threads per row; and,
    at block size 512, the load-shape knobs that won somewhere in the H200 sweep
    (knob_sweep_h200.jsonl): fewer loads per trip, quad loads (with and without a cap of
    40 registers), and streamed matrix loads."""
    policy_type = type(untuned)
    nearby = nearby_threads_per_row(untuned.threads_per_row)
    out = [untuned]
    out += [
        policy_type(block_size, threads_per_row, source="candidate")
        for threads_per_row in nearby
        for block_size in CANDIDATE_BLOCK_SIZES
    ]
    out += [
        policy_type(256, threads_per_row, cap, source="candidate")
        for threads_per_row in nearby[:2]
        for cap in CANDIDATE_REGISTER_CAPS
    ]
    out += [
        policy_type(512, threads_per_row, source="candidate", **knobs)
        for threads_per_row in nearby
        for knobs in LOAD_SHAPE_CANDIDATES
    ]
    return list(dict.fromkeys(out))


class KernelPlan(Plan):
    """What the kernel plans share: the no-launch cases, the launch shape and the launch.

    Subclasses set ``kernel`` and ``shared_bytes`` (when the matrix has nonzeros), then call
    :meth:`_bind` with the kernel's arguments: arrays and numbers fixed for the plan, and
    the slot names ``"x"`` and ``"y"`` (and ``"x_texture"``) that each product fills.
    """

    def __init__(self, matrix: DeviceMatrix, policy, vector_dtype=None):
        super().__init__(matrix, policy, vector_dtype)
        # nothing to compute: no rows, or no nonzeros (all of y is zero)
        self.launches = matrix.shape[0] > 0 and matrix.nnz > 0
        self.kernel = None
        self.grid = 0
        self.block = policy.block_size
        self.shared_bytes = 0
        self._launch = None

    def _bind(self, rows_per_block: int, arguments) -> None:
        """The grid (one wave of resident blocks, fewer when the matrix is small: the kernels
        are grid-stride) and the bound launch."""
        resident = occupancy.resident_blocks(self.kernel, self.block, self.shared_bytes)
        if resident == 0:
            raise ValueError(
                f"{self.policy} cannot launch on this device (0 resident blocks of "
                f"{self.block} threads with {self.shared_bytes:,} bytes of shared memory); "
                "use a smaller block_size"
            )
        needed = -(-self.matrix.shape[0] // rows_per_block)
        self.grid = max(1, min(needed, resident, MAX_GRID_BLOCKS))
        self._launch = KernelLaunch(self.kernel, self.block, arguments, self.shared_bytes)

    @staticmethod
    def _check_quad_alignment(**arrays) -> None:
        """Raise ValueError unless each array starts where a quad of its entries is aligned
        (what ``vector_loads`` reads: 4 entries, 8 or 16 bytes, at a time)."""
        for name, array in arrays.items():
            alignment = min(16, 4 * array.dtype.itemsize)
            pointer = array.data.ptr
            if pointer % alignment:
                raise ValueError(
                    f"vector_loads=True needs the matrix's {name} array {alignment}-byte "
                    f"aligned, but it starts at {pointer:#x}; use vector_loads=False"
                )

    def _matvec(self, x, y):
        if not self.launches:
            y.fill(0)
            return y
        self._launch.xy(self.grid, x, y)
        return y


class TextureCache:
    """Texture objects over recent x buffers, keyed by (pointer, bytes, device).

    Solvers call a plan with the same few x buffers; keeping their texture objects saves
    creating one per call. An entry holds its x (the texture reads that memory), the texture
    and an event recorded after each of its launches, so an evicted texture is destroyed only
    after its kernels finished. :meth:`launch` holds the cache's lock from the lookup to the
    event's record, so no other thread can evict a texture between its launch and the
    record that protects it.
    """

    def __init__(self, value_dtype, capacity: int = 2):
        self.value_dtype = np.dtype(value_dtype)
        self.capacity = capacity
        self._entries: dict = {}
        self._lock = threading.Lock()
        self._cupy = _cuda.cupy_or_none()

    def _channel(self, cupy):
        runtime = cupy.cuda.runtime
        # textures have no 64-bit channels: double as int2, complex128 as int4
        signed, floating = runtime.cudaChannelFormatKindSigned, runtime.cudaChannelFormatKindFloat
        channels = {
            np.dtype(np.float32): (32, 0, 0, 0, floating),
            np.dtype(np.float64): (32, 32, 0, 0, signed),
            np.dtype(np.complex64): (32, 32, 0, 0, floating),
            np.dtype(np.complex128): (32, 32, 32, 32, signed),
        }
        return cupy.cuda.texture.ChannelFormatDescriptor(*channels[self.value_dtype])

    def _entry(self, x) -> list:
        """``[x, texture, event, texture handle]`` for ``x`` (the handle read once, for the
        launch's slot), made on first use, now the most recently used (the caller holds the
        lock)."""
        data = x.data
        key = (data.ptr, x.nbytes, data.device_id)
        entry = self._entries.pop(key, None)
        if entry is None:
            cupy = self._cupy
            texture_module = cupy.cuda.texture
            resource = texture_module.ResourceDescriptor(
                cupy.cuda.runtime.cudaResourceTypeLinear,
                arr=x,
                chDesc=self._channel(cupy),
                sizeInBytes=x.nbytes,
            )
            texture = texture_module.TextureObject(resource, texture_module.TextureDescriptor())
            entry = [x, texture, cupy.cuda.Event(disable_timing=True), texture.ptr]
        while len(self._entries) >= self.capacity:
            old = self._entries.pop(next(iter(self._entries)))  # the least recently used
            old[2].synchronize()  # its last launch has finished (an unrecorded event: none)
        self._entries[key] = entry
        return entry

    def launch(self, launch: KernelLaunch, grid: int, x, y) -> None:
        """Launch ``launch`` on ``x`` (through its texture object) and ``y``."""
        with self._lock:
            entry = self._entry(x)
            launch.xy(grid, x, y, entry[3])
            entry[2].record()


class RowGroupPlan(KernelPlan):
    """What the plans of the row-group kernels (``csr_vector``, ``delta16``) share: each is
    made by its backend's :meth:`RowGroupBackend.plan`, which hands itself over to compile
    the kernel. Subclasses compile and bind in :meth:`_prepare`."""

    values_by_reference = True  # its kernels are bound to the mirror's data array

    def __init__(self, matrix: DeviceMatrix, policy, backend: RowGroupBackend, vector_dtype=None):
        super().__init__(matrix, policy, vector_dtype)
        self._prepare(matrix, policy, backend)

    def _prepare(self, matrix: DeviceMatrix, policy, backend: RowGroupBackend) -> None:
        raise NotImplementedError


class CsrVectorPlan(RowGroupPlan):
    """A compiled ``csr_vector`` instantiation and its launch shape for one mirror."""

    def _prepare(
        self, matrix: DeviceMatrix, policy: CsrVectorPolicy, backend: CsrVectorBackend
    ) -> None:
        self.load_path = backend.load_path
        self.reduction = backend.reduction
        self.textures = None
        if backend.load_path == LOAD_TEXTURE:
            self.textures = TextureCache(matrix.dtype)
            self._texture_alignment = _cuda.device_info().texture_alignment
        if not self.launches:
            return
        if policy.vector_loads:
            self._check_quad_alignment(data=matrix.data, indices=matrix.indices)
        self.kernel = backend._kernel(matrix, policy, self._dtype)
        self.shared_bytes = backend.shared_bytes(policy.block_size, self._dtype)
        occupancy.allow_shared_memory(self.kernel, self.shared_bytes)
        texture = "x_texture" if self.textures is not None else 0  # 0: no texture object
        self._bind(
            policy.block_size // policy.threads_per_row,
            (matrix.indptr, matrix.indices, matrix.data, "x", texture, "y", matrix.shape[0]),
        )

    def _matvec(self, x, y):
        if self.textures is None or not self.launches:
            return super()._matvec(x, y)
        if x.data.ptr % self._texture_alignment:
            # a texture over linear memory must start at an aligned address; a view at an
            # odd offset (a column of a Krylov basis, say) is read through an aligned copy
            x = x.copy()
        self.textures.launch(self._launch, self.grid, x, y)
        return y

    def _spmm_shape(self) -> tuple:
        # the row-split SpMM with this policy's threads per row splitting a row's nonzeros
        # (within what X's column lanes leave of a warp): the vector family's shape
        return self.policy.threads_per_row, self.policy.block_size


class RowGroupBackend(Backend):
    """What the backends of the row-group kernels (``csr_vector``, ``delta16``) share: the
    untuned policy, the autotuner's sweep and the plan. Subclasses set ``policy_type`` (an
    :class:`~sparsegpu.tuning.UnrolledRowPolicy`), ``plan_type`` (a :class:`RowGroupPlan`)
    and ``_kernel(matrix, policy)``."""

    def shared_bytes(self, block_size: int, value_dtype) -> int:
        """Dynamic shared memory of one block (none unless the reduction needs it)."""
        return 0

    def _kernel(self, matrix: DeviceMatrix, policy):
        raise NotImplementedError

    def default_policy(self, matrix: DeviceMatrix):
        """Threads per row from the mean row length; block size from the occupancy API."""
        policy_type = self.policy_type
        if matrix.shape[0] == 0 or matrix.nnz == 0:
            return policy_type(source="default")
        threads_per_row = occupancy.threads_per_row_for(matrix.stats.mean)
        block_size = occupancy.occupancy_block_size(
            self._kernel(matrix, policy_type(threads_per_row=threads_per_row)),
            lambda block: self.shared_bytes(block, matrix.dtype),
        )
        return policy_type(block_size, threads_per_row, source="occupancy")

    def candidates(self, matrix: DeviceMatrix) -> list:
        """:func:`sweep` around the untuned policy."""
        return sweep(self.default_policy(matrix))

    def plan(self, matrix: DeviceMatrix, policy, vector_dtype=None) -> RowGroupPlan:
        return self.plan_type(matrix, policy, self, vector_dtype)


class CsrVectorBackend(RowGroupBackend):
    """One member of the CSR vector family: an x-load path and a reduction.

    Parameters
    ----------
    name, description : str
    load_path : int
        ``LOAD_PLAIN``, ``LOAD_TEXTURE`` or ``LOAD_READONLY``.
    reduction : int
        ``REDUCE_SHARED`` or ``REDUCE_SHUFFLE``.
    """

    policy_type = CsrVectorPolicy
    plan_type = CsrVectorPlan

    def __init__(self, name: str, description: str, load_path: int, reduction: int):
        self.name = name
        self.description = description
        self.load_path = load_path
        self.reduction = reduction
        # a texture object is made per x buffer, and waiting for the event of the one it
        # replaces is not allowed in a capture (cudaErrorCapturedEvent on the H200)
        self.capturable = load_path != LOAD_TEXTURE
        # planning "measure" times the shuffle member: within 3% of the best of the family
        # on every regular class on the H200 (see _rules.AUTO_PREFERENCE)
        self.planned = name == "shuffle"
        # 16-bit floats (float32 sums): every member but the texture one, whose fetches
        # have no 16-bit channel here
        self.value_dtypes = FLOAT_AND_COMPLEX + (HALF_DTYPES if load_path != LOAD_TEXTURE else ())
        # mixed precision (float32 values, float64 vectors and sums): not the texture
        # member (its texture objects are made for the values' dtype)
        self.mixed_pairs = tuple(MIXED_PARTNERS.items()) if load_path != LOAD_TEXTURE else ()

    def shared_bytes(self, block_size: int, value_dtype) -> int:
        """Dynamic shared memory of one block: a partial sum (an accumulator: float for the
        16-bit floats) per thread for the shared reduction."""
        if self.reduction == REDUCE_SHARED:
            return block_size * accumulator_itemsize(value_dtype)
        return 0

    def refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        if self.load_path != LOAD_TEXTURE or _cuda.cupy_or_none() is None:
            return None
        limit = _cuda.device_info().max_texture_1d_linear
        if matrix.shape[1] > limit:
            return (
                f"x has {matrix.shape[1]:,} elements but a 1-D texture over linear memory holds "
                f"at most {limit:,} on this device; use the 'readonly' or 'shuffle' backend"
            )
        return None

    def _kernel(self, matrix: DeviceMatrix, policy: CsrVectorPolicy, vector_dtype=None):
        return _compile.get_kernel(
            SOURCE,
            kernel_name(
                vector_dtype if vector_dtype is not None else matrix.dtype,
                matrix.index_dtype,
                policy.threads_per_row,
                self.load_path,
                self.reduction,
                matrix.dtype,
            ),
            policy.compile_options(),
        )

    def matmat_candidates(self, matrix: DeviceMatrix, columns: int, order: str) -> list:
        # the planned member's row-split SpMM with the rule's lanes per row for the row's
        # nonzeros, half and twice that (within what X's column lanes leave of a warp)
        if not self.planned or not spmm_supports(matrix.dtype):
            return []
        column = 1 if order == "F" else column_lanes(matrix.dtype, columns)
        rule = nonzero_lanes_for(matrix.stats.mean, 32 // column)
        lanes = [n for n in (rule // 2, rule, rule * 2) if 1 <= n <= 32 // column]
        return [
            CsrVectorPolicy(SPMM_BLOCK_SIZE, n, source="candidate") for n in dict.fromkeys(lanes)
        ]


BACKENDS = [
    CsrVectorBackend(
        "vector",
        "CSR vector kernel: plain loads, shared-memory reduction (Bell & Garland)",
        LOAD_PLAIN,
        REDUCE_SHARED,
    ),
    CsrVectorBackend(
        "texture",
        "CSR vector kernel, x through a texture object, shared-memory reduction",
        LOAD_TEXTURE,
        REDUCE_SHARED,
    ),
    CsrVectorBackend(
        "readonly",
        "CSR vector kernel, x through the read-only cache (__ldg), shared-memory reduction",
        LOAD_READONLY,
        REDUCE_SHARED,
    ),
    CsrVectorBackend(
        "shuffle",
        "CSR vector kernel, x through the read-only cache, warp-shuffle reduction",
        LOAD_READONLY,
        REDUCE_SHUFFLE,
    ),
]

FAMILY = _compile.register_family(
    _compile.KernelFamily(
        SOURCE,
        tuple(
            kernel_name(value, index, threads_per_row, backend.load_path, backend.reduction)
            for backend in BACKENDS
            for value in (*CXX_VALUE_TYPES, *CXX_HALF_TYPES)
            if value in backend.value_dtypes
            for index in CXX_INDEX_TYPES
            for threads_per_row in THREADS_PER_ROW_CHOICES
        )
        + tuple(
            kernel_name(wide, index, threads_per_row, b.load_path, b.reduction, narrow)
            for b in BACKENDS
            for narrow, wide in b.mixed_pairs
            for index in CXX_INDEX_TYPES
            for threads_per_row in THREADS_PER_ROW_CHOICES
        ),
    )
)
