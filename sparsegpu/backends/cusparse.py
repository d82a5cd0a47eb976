"""The ``cusparse`` backend: cuSPARSE generic SpMV/SpMM without per-call set-up.

cupyx's ``A @ x`` creates the sparse and dense descriptors, asks for the workspace size
and allocates the workspace on every product. Here all of that happens once:

- per plan: the CSR descriptor, and ``cusparseSpMV_preprocess`` when the policy asks and
  the installed bindings have it;
- per stream: the workspace (concurrent products on different streams never share scratch
  memory);
- per x or y buffer: its dense-vector descriptor, kept in a small table keyed by the
  pointer (a solver's few vectors, or the memory pool handing the same block back), so a
  repeated product re-points nothing and takes no lock;
- per thread and device: a cuSPARSE handle of sparsegpu's own, whose stream is set only
  when the thread's current CuPy stream changes (nobody else sets it).

What is left per product is the cuSPARSE call itself: the same host work as a C program
that made its descriptors once (``benchmarks/auto_vs_cusparse.py`` times exactly that
program through the same bindings, as "cuSPARSE called directly").

CuPy's low-level bindings (``cupy_backends.cuda.libs.cusparse``) are used directly, the
way ``cupyx/cusparse.py`` uses them.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

from ..device import _cuda
from ..device._dtypes import BFLOAT16, FLOAT16, HALF_DTYPES, MIXED_PARTNERS
from ..device._mirror import DeviceMatrix
from .base import FLOAT_AND_COMPLEX, Backend, Plan
from .policy import Policy
from .spgemm import canonical

# cusparseSpMVAlg_t / cusparseSpMMAlg_t values (cusparse.h, CUDA 12 and 13); the names
# moved between CuPy releases, so the numbers are spelled out once here.
SPMV_ALGORITHM = {"default": 0, "csr_alg1": 2, "csr_alg2": 3}
SPMM_ALGORITHM = {"default": 0, "csr_alg1": 4, "csr_alg2": 6, "csr_alg3": 12}
OPERATION_NON_TRANSPOSE = 0
INDEX_BASE_ZERO = 0
ORDER_COL, ORDER_ROW = 1, 2
INDEX_TYPE = {np.dtype(np.int32): 2, np.dtype(np.int64): 3}  # CUSPARSE_INDEX_32I / _64I
# cudaDataType_t of each value dtype (library_types.h)
CUDA_DATA_TYPE = {
    np.dtype(np.float32): 0,
    np.dtype(np.float64): 1,
    np.dtype(np.complex64): 4,
    np.dtype(np.complex128): 5,
    FLOAT16: 2,  # CUDA_R_16F
}
if BFLOAT16 is not None:
    CUDA_DATA_TYPE[BFLOAT16] = 14  # CUDA_R_16BF
# SpMM algorithms cusparseSpMM_preprocess speeds up (the cusparseSpMM documentation)
SPMM_PREPROCESSED = (SPMM_ALGORITHM["csr_alg1"], SPMM_ALGORITHM["csr_alg3"])
# cuSPARSE computes 16-bit products in float32 (A, x and y in the 16-bit type, compute
# CUDA_R_32F, alpha and beta float32: the cusparseSpMV table of supported types)
COMPUTE_DTYPE = {dtype: np.dtype(np.float32) for dtype in HALF_DTYPES}


CUSPARSE_ALGORITHMS = tuple(SPMV_ALGORITHM)
SPMM_ALGORITHMS = tuple(SPMM_ALGORITHM)


@dataclass(frozen=True)
class CusparsePolicy(Policy):
    """cuSPARSE generic SpMV and SpMM.

    Attributes
    ----------
    algorithm : str
        SpMV's: ``"default"``, ``"csr_alg1"`` or ``"csr_alg2"`` (CUSPARSE_SPMV_CSR_ALG1/2).
    preprocess : bool
        Call ``cusparseSpMV_preprocess`` once per plan where the library has it.
    spmm_algorithm : str
        SpMM's (``A @ X``): ``"default"``, ``"csr_alg1"``, ``"csr_alg2"`` or ``"csr_alg3"``
        (CUSPARSE_SPMM_CSR_ALG1/2/3); ``cusparseSpMM_preprocess`` runs once per k and
        order for ALG1 and ALG3 where the library has it.
    """

    algorithm: str = "default"
    preprocess: bool = False
    spmm_algorithm: str = "default"

    def __post_init__(self):
        super().__post_init__()
        if self.algorithm not in CUSPARSE_ALGORITHMS:
            raise ValueError(
                f"algorithm={self.algorithm!r} is not allowed; "
                f"choose one of {list(CUSPARSE_ALGORITHMS)}"
            )
        if not isinstance(self.preprocess, bool):
            raise TypeError(f"preprocess must be a bool, got {self.preprocess!r}")
        if self.spmm_algorithm not in SPMM_ALGORITHMS:
            raise ValueError(
                f"spmm_algorithm={self.spmm_algorithm!r} is not allowed; "
                f"choose one of {list(SPMM_ALGORITHMS)}"
            )


@functools.cache  # a product asks several times: an import statement each costs a microsecond
def _bindings():
    from cupy_backends.cuda.libs import cusparse

    return cusparse


def unavailable_reason() -> str | None:
    """Why cuSPARSE cannot be called here (no GPU, or no CuPy bindings), or None."""
    reason = _cuda.backend_reason()
    if reason is not None:
        return reason
    try:
        _bindings()
    except ImportError as exc:
        return f"CuPy's cuSPARSE bindings cannot be imported: {exc}"
    return None


def has_preprocess(operation: str = "spMV") -> bool:
    """True when the installed CuPy exposes ``cusparseSpMV_preprocess`` (``"spMV"``) or
    ``cusparseSpMM_preprocess`` (``"spMM"``)."""
    try:
        return hasattr(_bindings(), f"{operation}_preprocess")
    except ImportError:
        return False


class _Descriptor:
    """Owns one cuSPARSE descriptor handle and destroys it with the plan."""

    __slots__ = ("handle", "_destroy")

    def __init__(self, handle: int, destroy):
        self.handle = handle
        self._destroy = destroy

    def __del__(self):
        try:
            self._destroy(self.handle)
        except Exception:  # interpreter shutdown: the library may already be gone
            pass


def device_pointer(a) -> int:
    """The device address of ``a``'s data, or 0 for an empty (or absent) array."""
    return a.data.ptr if a is not None and a.size else 0


# the value dtypes cusparseCsr2cscEx2 transposes here
TRANSPOSE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def transpose(matrix: DeviceMatrix) -> DeviceMatrix | None:
    """The CSR of ``matrix``'s transpose by ``cusparseCsr2cscEx2`` (what cupyx's ``tocsc``
    runs: no sort, 3.5x faster than a sort of the column indices on a 1.7M-row
    prolongation, H200), or None where it does not apply (int64 indices, 16-bit values, no
    entries): the caller sorts. Equal columns keep their rows in order (ALG1), so the
    transpose of a canonical matrix is canonical."""
    if (
        matrix.xp is np
        or unavailable_reason() is not None
        or matrix.nnz == 0
        or matrix.index_dtype != np.dtype(np.int32)
        or matrix.dtype not in TRANSPOSE_DTYPES
    ):
        return None
    cupy = _cuda.cupy_or_none()
    lib = _bindings()
    (m, n), nnz = matrix.shape, matrix.nnz
    handle = thread_handle(lib, cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
    data = cupy.empty(nnz, dtype=matrix.dtype)
    indices = cupy.empty(nnz, dtype=np.int32)
    indptr = cupy.empty(n + 1, dtype=np.int32)
    args = (
        handle, m, n, nnz, matrix.data.data.ptr, matrix.indptr.data.ptr,
        matrix.indices.data.ptr, data.data.ptr, indptr.data.ptr, indices.data.ptr,
        CUDA_DATA_TYPE[matrix.dtype], lib.CUSPARSE_ACTION_NUMERIC, INDEX_BASE_ZERO,
        lib.CUSPARSE_CSR2CSC_ALG1,
    )  # fmt: skip
    buffer = cupy.empty(max(int(lib.csr2cscEx2_bufferSize(*args)), 1), dtype=np.int8)
    lib.csr2cscEx2(*args, buffer.data.ptr)
    return DeviceMatrix(data, indices, indptr, (n, m), matrix.residence)


def csr_descriptor(lib, matrix: DeviceMatrix) -> _Descriptor:
    """A cuSPARSE CSR descriptor of ``matrix``'s arrays (destroyed with the object)."""
    index = INDEX_TYPE[matrix.index_dtype]
    return _Descriptor(
        lib.createCsr(
            matrix.shape[0],
            matrix.shape[1],
            matrix.nnz,
            matrix.indptr.data.ptr,
            device_pointer(matrix.indices),
            device_pointer(matrix.data),
            index,
            index,
            INDEX_BASE_ZERO,
            CUDA_DATA_TYPE[matrix.dtype],
        ),
        lib.destroySpMat,
    )


# Dense-vector descriptors kept per plan and per side (x, y); beyond this many distinct
# buffers the oldest is dropped (a descriptor is a few hundred bytes of host memory).
DENSE_DESCRIPTORS = 32

_thread = threading.local()


def thread_handle(lib, device_id: int, stream_ptr: int) -> int:
    """This thread's sparsegpu cuSPARSE handle on ``device_id``, set to ``stream_ptr``.

    Owned by sparsegpu (not CuPy's, which cupyx re-points on every call), so the stream is
    set only when it changes. Made on first use, with ``device_id`` current (the plan's
    device: its products run there); destroyed with the thread.
    """
    handles = getattr(_thread, "handles", None)
    if handles is None:
        handles = _thread.handles = {}
    entry = handles.get(device_id)
    if entry is None:
        entry = handles[device_id] = [_Descriptor(lib.create(), lib.destroy), None]
    if entry[1] != stream_ptr:
        lib.setStream(entry[0].handle, stream_ptr)
        entry[1] = stream_ptr
    return entry[0].handle


class CusparsePlan(Plan):
    """cuSPARSE SpMV/SpMM on one mirror with descriptors and workspaces made once.

    Attributes
    ----------
    workspace_bytes : int
        Size of the SpMV workspace cuSPARSE asked for.
    preprocessed : bool
        Whether ``cusparseSpMV_preprocess`` ran for this plan.
    """

    def __init__(self, matrix: DeviceMatrix, policy: CusparsePolicy, vector_dtype=None):
        if matrix.format == "csr" and matrix.nnz > matrix.shape[0] * matrix.shape[1]:
            # more entries than positions: only repeated (row, column) pairs make that, which
            # scipy allows and cuSPARSE refuses (CUSPARSE_STATUS_INVALID_VALUE; scipy's
            # non-canonical tests on the H200). cuSPARSE multiplies the repeats summed, made
            # once with the plan, in the vectors' type where that is wider (a mixed-precision
            # plan's answer is the wide product of the narrow values: summed narrow, it
            # would not be; such a matrix is no larger than dense, so nothing is saved)
            if vector_dtype is not None and np.dtype(vector_dtype) != matrix.dtype:
                matrix = matrix.astype(vector_dtype)
            matrix = canonical(matrix)
        super().__init__(matrix, policy, vector_dtype)
        cupy = _cuda.cupy_or_none()
        self._cupy = cupy
        self._lib = lib = _bindings()
        self._device_id = cupy.cuda.runtime.getDevice()
        self._current_stream = cupy.cuda.get_current_stream
        n_rows, n_cols = matrix.shape
        self._n_rows = n_rows
        self._n_cols = n_cols
        # the values' type, and the vectors' (wider in a mixed-precision plan: cuSPARSE
        # computes float32 values with float64 vectors in float64)
        self._cuda_type = CUDA_DATA_TYPE[matrix.dtype]
        self._vector_type = CUDA_DATA_TYPE[self._dtype]
        self._mixed = self._dtype != matrix.dtype
        compute = COMPUTE_DTYPE.get(self._dtype, self._dtype)
        self._compute_type = CUDA_DATA_TYPE[compute]
        self._algorithm = self._spmv_algorithms[policy.algorithm]
        self._spmm_algorithm = self._spmm_algorithms[policy.spmm_algorithm]
        # alpha = 1, beta = 0 as host scalars of the compute type (the handle's default
        # pointer mode)
        self._alpha = np.ones(1, dtype=compute)
        self._beta = np.zeros(1, dtype=compute)
        self._alpha_ptr = self._alpha.ctypes.data
        self._beta_ptr = self._beta.ctypes.data
        self._lock = threading.Lock()  # SpMM's descriptors and the tables' inserts
        self._workspaces: dict = {}  # stream pointer -> (workspace, its device pointer)
        self._x_vectors: dict = {}
        self._y_vectors: dict = {}
        self._spmm: dict = {}  # (k, Fortran order?, stream pointer) -> SpMM descriptors
        self.workspace_bytes = 0
        self.preprocessed = False
        # cuSPARSE refuses empty operands; a product with no nonzeros is zeros anyway
        self._empty = matrix.nnz == 0
        if self._empty:
            return
        self._mat = self._sparse_descriptor(lib, matrix, policy)
        self._mat_handle = self._mat.handle
        # placeholder vectors for the set-up calls (products use descriptors of their own)
        x0 = cupy.zeros(n_cols, dtype=self._dtype)
        y0 = cupy.zeros(n_rows, dtype=self._dtype)
        vec_x = _Descriptor(
            lib.createDnVec(n_cols, x0.data.ptr, self._vector_type), lib.destroyDnVec
        )
        vec_y = _Descriptor(
            lib.createDnVec(n_rows, y0.data.ptr, self._vector_type), lib.destroyDnVec
        )
        stream = cupy.cuda.get_current_stream()
        handle = thread_handle(lib, self._device_id, stream.ptr)
        # what bufferSize, preprocess and SpMV itself take before the workspace
        spmv = (handle, OPERATION_NON_TRANSPOSE, self._alpha_ptr, self._mat_handle,
                vec_x.handle, self._beta_ptr, vec_y.handle, self._compute_type,
                self._algorithm)  # fmt: skip
        self.workspace_bytes = int(lib.spMV_bufferSize(*spmv))
        workspace = self._workspace(stream.ptr)
        if policy.preprocess:
            if not has_preprocess():
                raise ValueError(
                    "CusparsePolicy(preprocess=True) needs cusparseSpMV_preprocess, which "
                    f"this CuPy ({_cuda.versions()['cupy']}) does not expose; "
                    "use preprocess=False"
                )
            lib.spMV_preprocess(*spmv, workspace)
            self.preprocessed = True
        stream.synchronize()  # the placeholders may go once set-up has run

    # the algorithm numbers of the policy's names (the BSR plan has its own)
    _spmv_algorithms = SPMV_ALGORITHM
    _spmm_algorithms = SPMM_ALGORITHM

    def _sparse_descriptor(self, lib, matrix: DeviceMatrix, policy) -> _Descriptor:
        """The descriptor of the matrix cuSPARSE multiplies: CSR, made once per plan."""
        return csr_descriptor(lib, matrix)

    def _dense(self, table: dict, ptr: int, size: int) -> _Descriptor:
        """The dense-vector descriptor of the buffer at ``ptr`` (made once; the oldest of
        ``DENSE_DESCRIPTORS`` is dropped). Products holding a dropped one keep it alive."""
        with self._lock:
            vector = table.get(ptr)
            if vector is None:
                if len(table) >= DENSE_DESCRIPTORS:
                    del table[next(iter(table))]
                vector = table[ptr] = _Descriptor(
                    self._lib.createDnVec(size, ptr, self._vector_type), self._lib.destroyDnVec
                )
            return vector

    def _workspace(self, stream_ptr: int) -> int:
        """The device pointer of one stream's workspace (made once; a preprocessed plan
        shares the one its preprocessing used)."""
        with self._lock:
            entry = self._workspaces.get(stream_ptr)
            if entry is None:
                if self.preprocessed:
                    entry = next(iter(self._workspaces.values()))
                else:
                    workspace = self._cupy.empty(max(self.workspace_bytes, 1), dtype=np.int8)
                    entry = (workspace, workspace.data.ptr)
                self._workspaces[stream_ptr] = entry
            return entry[1]

    def _matvec(self, x, y):
        if self._empty:
            y.fill(0)
            return y
        stream_ptr = self._current_stream().ptr
        x_ptr = x.data.ptr
        y_ptr = y.data.ptr
        vec_x = self._x_vectors.get(x_ptr) or self._dense(self._x_vectors, x_ptr, self._n_cols)
        vec_y = self._y_vectors.get(y_ptr) or self._dense(self._y_vectors, y_ptr, self._n_rows)
        workspace = self._workspaces.get(stream_ptr)
        workspace = workspace[1] if workspace is not None else self._workspace(stream_ptr)
        self._lib.spMV(
            thread_handle(self._lib, self._device_id, stream_ptr),
            OPERATION_NON_TRANSPOSE,
            self._alpha_ptr,
            self._mat_handle,
            vec_x.handle,
            self._beta_ptr,
            vec_y.handle,
            self._compute_type,
            self._algorithm,
            workspace,
        )
        return y

    def _matmat(self, X, Y):
        """``A @ X`` through cuSPARSE SpMM with the policy's algorithm, on X and Y as they
        are: row-major (C order) or column-major (Fortran order), the dense descriptors
        saying which, so nothing is copied (column by column through SpMV in mixed
        precision, which SpMM does not list)."""
        k = X.shape[1]
        if self._empty or k == 0:
            Y.fill(0)
            return Y
        if self._mixed:  # the base class's column loop
            return super()._matmat(X, Y)
        lib = self._lib
        stream_ptr = self._current_stream().ptr
        handle = thread_handle(lib, self._device_id, stream_ptr)
        key = (k, not X._c_contiguous, stream_ptr)  # (checked: C- or Fortran-contiguous)
        x_ptr, y_ptr = X.data.ptr, Y.data.ptr
        with self._lock:
            state = self._spmm.get(key) or self._spmm_state(handle, key, x_ptr, y_ptr)
            mat_b, mat_c, workspace_ptr, pointers, _ = state
            if pointers[0] != x_ptr:  # re-pointed only when X or Y is another buffer
                lib.dnMatSetValues(mat_b.handle, x_ptr)
                pointers[0] = x_ptr
            if pointers[1] != y_ptr:
                lib.dnMatSetValues(mat_c.handle, y_ptr)
                pointers[1] = y_ptr
            lib.spMM(
                handle,
                OPERATION_NON_TRANSPOSE,
                OPERATION_NON_TRANSPOSE,
                self._alpha_ptr,
                self._mat_handle,
                mat_b.handle,
                self._beta_ptr,
                mat_c.handle,
                self._compute_type,
                self._spmm_algorithm,
                workspace_ptr,
            )
        return Y

    def _spmm_state(self, handle, key: tuple, x_ptr: int, y_ptr: int) -> tuple:
        """Dense-matrix descriptors and workspace for ``key``: k right-hand sides in one
        memory order (Fortran when ``key[1]``) on one stream (``key[2]``), made once
        (preprocessed where that helps) with the descriptors pointing at X and Y."""
        k, fortran, _ = key
        lib = self._lib
        n_rows, n_cols = self._n_rows, self._n_cols
        if fortran:  # leading dimension: the rows of each column
            layout = ((n_cols, k, n_cols, ORDER_COL), (n_rows, k, n_rows, ORDER_COL))
        else:
            layout = ((n_cols, k, k, ORDER_ROW), (n_rows, k, k, ORDER_ROW))
        (rb, cb, ldb, order_b), (rc, cc, ldc, order_c) = layout
        mat_b = _Descriptor(
            lib.createDnMat(rb, cb, ldb, x_ptr, self._vector_type, order_b), lib.destroyDnMat
        )
        mat_c = _Descriptor(
            lib.createDnMat(rc, cc, ldc, y_ptr, self._vector_type, order_c), lib.destroyDnMat
        )
        arguments = (
            handle, OPERATION_NON_TRANSPOSE, OPERATION_NON_TRANSPOSE, self._alpha_ptr,
            self._mat_handle, mat_b.handle, self._beta_ptr, mat_c.handle,
            self._compute_type, self._spmm_algorithm,
        )  # fmt: skip
        size = lib.spMM_bufferSize(*arguments)
        workspace = self._cupy.empty(max(int(size), 1), dtype=np.int8)
        if self._spmm_algorithm in SPMM_PREPROCESSED and has_preprocess("spMM"):
            lib.spMM_preprocess(*arguments, workspace.data.ptr)
        # the buffers the descriptors point at now (X's and Y's), and the workspace kept
        state = self._spmm[key] = (mat_b, mat_c, workspace.data.ptr, [x_ptr, y_ptr], workspace)
        return state


class CusparseLibraryBackend(Backend):
    """What every backend calling cuSPARSE through CuPy shares: where it can run, and that
    its products cannot go into a CUDA graph."""

    # CuPy refuses cuSPARSE calls on a capturing stream (NotImplementedError, H200, CuPy 14)
    capturable = False

    def unavailable_reason(self):
        return unavailable_reason()


class CusparseBackend(CusparseLibraryBackend):
    """cuSPARSE generic SpMV (CSR ALG1/ALG2, optional preprocessing) and SpMM."""

    name = "cusparse"
    description = "cuSPARSE generic SpMV/SpMM; descriptors and workspace made once per plan"
    policy_type = CusparsePolicy
    # float16/bfloat16 with float32 compute, as cuSPARSE's SpMV supports them
    value_dtypes = FLOAT_AND_COMPLEX + HALF_DTYPES
    # cuSPARSE SpMV's mixed precision: A in CUDA_R_32F, X, Y and the compute type in
    # CUDA_R_64F (its complex row, C_32F with C_64F, answers NOT_SUPPORTED on the H200)
    mixed_pairs = tuple(MIXED_PARTNERS.items())

    def default_policy(self, matrix):
        # CSR ALG1: on the H200 (docs/benchmarks/results/auto_vs_cusparse_h200.json) it was
        # as fast as or faster than ALG2 and the library default on 11 of the 12 synthetic
        # runs, by up to 12% (long rows, float32)
        return CusparsePolicy(algorithm="csr_alg1", source="default")

    def candidates(self, matrix):
        preprocess = (False, True) if has_preprocess() else (False,)
        return CusparsePolicy.grid(algorithm=CUSPARSE_ALGORITHMS, preprocess=preprocess)

    def planning_candidates(self, matrix):
        # the algorithm is the one knob whose best value differs by matrix (arrow-like rows:
        # ALG2 0.22 ms against ALG1 0.28 on the H200; most others: ALG1 by 5-20%)
        return CusparsePolicy.grid(algorithm=CUSPARSE_ALGORITHMS)

    def matmat_candidates(self, matrix, columns, order):
        # SpMM's algorithms, each with the default SpMV policy (what A @ x keeps running)
        default = self.default_policy(matrix)
        return CusparsePolicy.grid(algorithm=(default.algorithm,), spmm_algorithm=SPMM_ALGORITHMS)

    def plan(self, matrix, policy, vector_dtype=None):
        return CusparsePlan(matrix, policy, vector_dtype)


BACKENDS = [CusparseBackend()]
