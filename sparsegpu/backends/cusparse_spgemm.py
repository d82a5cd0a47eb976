"""cuSPARSE SpGEMM (``C = A @ B``, both CSR) as a :class:`~.spgemm.SpgemmEngine`.

Three algorithms of ``cusparseSpGEMM`` (``cusparseSpGEMMAlg_t``, cusparse.h of CUDA 12
and 13: DEFAULT 0, CSR_ALG_DETERMINITIC 1, CSR_ALG_NONDETERMINITIC 2, ALG1 3, ALG2 4,
ALG3 5):

- ``alg1``: the fastest, with the largest work buffers (what cupyx runs);
- ``alg2``: less work space, sized by ``cusparseSpGEMM_estimateMemory``;
- ``alg3``: the least, processing the intermediate products in chunks (a fraction of them
  at a time, :data:`ALG3_CHUNK_FRACTION`, halved while the buffers do not fit).

and ``cusparseSpGEMMreuse``: the structure of ``C`` computed once for a pair of patterns,
then only the values for each product (:class:`ReusePlan`).

CuPy's bindings (``cupy_backends.cuda.libs.cusparse``) have the ALG1 calls
(``spGEMM_workEstimation``, ``spGEMM_compute``, ``spGEMM_copy``) but not
``cusparseSpGEMM_estimateMemory``, ``cusparseSpGEMM_getNumProducts`` nor the
``SpGEMMreuse`` functions; those are called through ctypes in the library CuPy loaded
(found in ``/proc/self/maps``), with the handles and descriptors CuPy made. Where that
library cannot be found, only ``alg1`` runs (and the row blocks of
:func:`~.spgemm.multiply` stand in for the lean algorithms).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading

import numpy as np

from ..device import _cuda
from ..device._compare import arrays_equal
from ..device._mirror import DeviceMatrix
from .cusparse import (
    CUDA_DATA_TYPE,
    INDEX_BASE_ZERO,
    INDEX_TYPE,
    OPERATION_NON_TRANSPOSE,
    _bindings,
    _Descriptor,
    csr_descriptor,
    device_pointer,
    thread_handle,
    unavailable_reason,
)
from .spgemm import Budget, DoesNotFit, Refused, ResultSink, SpgemmEngine, mark_canonical

ALGORITHM = {"default": 0, "alg1": 3, "alg2": 4, "alg3": 5}
# The fraction of the intermediate products ALG3 takes at a time (NVIDIA's sample's 0.2);
# halved, down to one product, while its buffers do not fit.
ALG3_CHUNK_FRACTION = 0.2
# cusparseStatus_t answers that mean "not enough memory" (cusparse.h)
STATUS_ALLOC_FAILED = 2
STATUS_INSUFFICIENT_RESOURCES = 11
_OUT_OF_MEMORY = (STATUS_ALLOC_FAILED, STATUS_INSUFFICIENT_RESOURCES)


class CusparseCallError(Refused):
    """A cuSPARSE function called through ctypes answered an error status."""

    def __init__(self, function: str, status: int):
        super().__init__(f"{function} failed with cusparseStatus_t {status}")
        self.status = status


@functools.cache
def _library():
    """The cuSPARSE library CuPy loaded, as a ctypes CDLL, or None."""
    try:
        _bindings()  # loads it
        with open("/proc/self/maps") as maps:
            path = next((ln.split()[-1] for ln in maps if "libcusparse.so" in ln), None)
    except (ImportError, OSError):
        return None
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


_P = ctypes.c_void_p
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_INT = ctypes.c_int
# handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, spgemmDescr
_CALL = [_P, _INT, _INT, _P, _P, _P, _P, _P, _INT, _INT, _P]
# handle, opA, opB, matA, matB, matC, alg, spgemmDescr
_REUSE = [_P, _INT, _INT, _P, _P, _P, _INT, _P]
_BUFFER = [_SIZE_P, _P]  # its size (in/out) and the buffer
# name -> argument types, as cusparse.h declares them
_EXTRA_SIGNATURES = {
    "cusparseSpGEMM_getNumProducts": [_P, ctypes.POINTER(ctypes.c_int64)],
    "cusparseSpGEMM_estimateMemory": [*_CALL, ctypes.c_float, *_BUFFER, _SIZE_P],
    "cusparseSpGEMMreuse_workEstimation": [*_REUSE, *_BUFFER],
    "cusparseSpGEMMreuse_nnz": [*_REUSE, *_BUFFER, *_BUFFER, *_BUFFER],
    "cusparseSpGEMMreuse_copy": [*_REUSE, *_BUFFER],
    "cusparseSpGEMMreuse_compute": _CALL,
}


@functools.cache
def _extra(name: str):
    """The ctypes function ``name`` of :data:`_EXTRA_SIGNATURES`, or None."""
    lib = _library()
    function = getattr(lib, name, None) if lib is not None else None
    if function is None:
        return None
    function.argtypes = _EXTRA_SIGNATURES[name]
    function.restype = ctypes.c_int
    return function


def _call(name: str, *args) -> None:
    status = _extra(name)(*args)
    if status in _OUT_OF_MEMORY:
        raise DoesNotFit(0, None, f"{name} (cusparseStatus_t {status})")
    if status != 0:
        raise CusparseCallError(name, status)


def has_lean_algorithms() -> bool:
    """True when ALG2/ALG3 can run (``cusparseSpGEMM_estimateMemory`` was found)."""
    return _extra("cusparseSpGEMM_estimateMemory") is not None


def has_reuse() -> bool:
    """True when the ``cusparseSpGEMMreuse`` functions were found."""
    return all(_extra(n) is not None for n in _EXTRA_SIGNATURES if "reuse" in n)


def _operand(lib, matrix: DeviceMatrix) -> _Descriptor:
    """The descriptor of an operand, made once per mirror (SpGEMM only reads it)."""
    return matrix.derived("cusparse_spgemm_csr", lambda: csr_descriptor(lib, matrix), queues=False)


def _nnz(lib, descriptor: _Descriptor) -> int:
    sizes = getattr(_sizes, "buffer", None)
    if sizes is None:  # this thread's: rows, columns, nonzeros and their addresses
        array = np.zeros(3, dtype=np.int64)
        address = array.ctypes.data
        sizes = _sizes.buffer = (array, address, address + 8, address + 16)
    lib.spMatGetSize(descriptor.handle, *sizes[1:])
    return int(sizes[0][2])


# each thread's spMatGetSize output (numpy's ctypes.data costs a microsecond or two a read)
_sizes = threading.local()


@functools.cache
def _scalar_arrays(dtype: np.dtype) -> tuple:
    # kept for the process: the host scalars every product of ``dtype`` points cuSPARSE at
    # (cuSPARSE reads them during the call; nothing writes them)
    return np.ones(1, dtype=dtype), np.zeros(1, dtype=dtype)


@functools.cache
def _scalars(dtype: np.dtype) -> tuple[int, int]:
    """The host addresses of ``alpha = 1`` and ``beta = 0`` in ``dtype`` (read once: numpy's
    ``ctypes.data`` costs a microsecond or two, and each product passed them three
    times)."""
    alpha, beta = _scalar_arrays(dtype)
    return alpha.ctypes.data, beta.ctypes.data


class _Call:
    """The descriptors and scalars of one ``left @ right`` through cuSPARSE."""

    def __init__(self, left, right, algorithm: str, c_indptr, own_descriptors=False):
        cupy = _cuda.cupy_or_none()
        self.lib = lib = _bindings()
        self.handle = thread_handle(
            lib, cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr
        )
        self.dtype = left.dtype
        self.cuda_type = CUDA_DATA_TYPE[left.dtype]
        self.algorithm = ALGORITHM[algorithm]
        self.alpha, self.beta = _scalars(left.dtype)
        # a plan that re-points its operands' descriptors owns them; a product shares the
        # mirrors' own
        describe = csr_descriptor if own_descriptors else _operand
        self.a = describe(lib, left)
        self.b = describe(lib, right)
        index = INDEX_TYPE[left.index_dtype]
        # C's row offsets are given from the start (as cupyx does), its entries once
        # their number is known
        self.c = _Descriptor(
            lib.createCsr(
                left.shape[0], right.shape[1], 0, c_indptr.data.ptr, 0, 0, index, index,
                INDEX_BASE_ZERO, self.cuda_type,
            ),
            lib.destroySpMat,
        )  # fmt: skip
        self.descr = _Descriptor(lib.spGEMM_createDescr(), lib.spGEMM_destroyDescr)

    def args(self) -> tuple:
        """The arguments every SpGEMM call starts with, up to the SpGEMM descriptor."""
        return (
            self.handle,
            OPERATION_NON_TRANSPOSE,
            OPERATION_NON_TRANSPOSE,
            self.alpha,
            self.a.handle,
            self.b.handle,
            self.beta,
            self.c.handle,
            self.cuda_type,
            self.algorithm,
            self.descr.handle,
        )

    def c_args(self) -> list:
        """:meth:`args` for a ctypes call (handles and pointers as ``c_void_p``)."""
        a = self.args()
        return [_P(a[0]), a[1], a[2], *(_P(v) for v in a[3:8]), a[8], a[9], _P(a[10])]

    def reuse_args(self) -> list:
        """The arguments every ``cusparseSpGEMMreuse`` call but compute starts with."""
        op = OPERATION_NON_TRANSPOSE
        descriptors = (_P(d.handle) for d in (self.a, self.b, self.c))
        return [_P(self.handle), op, op, *descriptors, self.algorithm, _P(self.descr.handle)]


def _out_of_memory(lib, exc) -> bool:
    return isinstance(exc, lib.CuSparseError) and getattr(exc, "status", None) in _OUT_OF_MEMORY


@contextlib.contextmanager
def _statuses(what: str):
    """cuSPARSE's errors inside as this module's: DoesNotFit for a memory status, Refused
    for any other (a raw ``CuSparseError`` never reaches the user)."""
    lib = _bindings()
    try:
        yield
    except lib.CuSparseError as exc:
        if _out_of_memory(lib, exc):
            raise DoesNotFit(0, None, f"{what} ({exc})") from exc
        raise Refused(f"{what}: {exc}") from exc


class CusparseSpgemm(SpgemmEngine):
    """cuSPARSE SpGEMM on the GPU mirrors (see the module docstring)."""

    name = "cusparse"
    checks_before_launch = True  # _compute checks, once the descriptors are made

    def unavailable_reason(self):
        return unavailable_reason()

    def algorithms(self):
        return ("alg1", "alg2", "alg3") if has_lean_algorithms() else ("alg1",)

    def lean_algorithms(self):
        return ("alg2", "alg3") if has_lean_algorithms() else ()

    def planning_algorithms(self):
        # ALG2 and ALG3 trade time for memory: slower than ALG1 wherever ALG1 fits (H200,
        # spgemm_first_phases_h200.json: 1.2-2.5x), and run by themselves where it does not
        return ("alg1",)

    def _multiply(self, left, right, algorithm, sink: ResultSink):
        lib = _bindings()
        try:  # _statuses spelled out: a product's host work runs cold, and a context
            # manager's enter and exit cost it 10-15 us there
            return self._multiply_into(left, right, algorithm, sink)
        except lib.CuSparseError as exc:
            sink.discard()
            what = f"cuSPARSE SpGEMM {algorithm}"
            if _out_of_memory(lib, exc):
                raise DoesNotFit(0, None, f"{what} ({exc})") from exc
            raise Refused(f"{what}: {exc}") from exc
        except DoesNotFit:
            sink.discard()
            raise

    def _multiply_into(self, left, right, algorithm, sink: ResultSink):
        try:
            call, buffers = self._compute(
                left, right, algorithm, sink.budget, sink.indptr(), sink.before_launch
            )
            try:
                indptr, indices, data = sink.allocate(_nnz(call.lib, call.c))
                call.lib.csrSetPointers(
                    call.c.handle, indptr.data.ptr, device_pointer(indices), device_pointer(data)
                )
                call.lib.spGEMM_copy(*call.args())
            finally:
                sink.budget.release(*buffers)
        except DoesNotFit:
            sink.discard()
            raise
        return sink.finish()

    def _count(self, left, right, algorithm, budget: Budget) -> int:
        indptr = budget.empty(left.shape[0] + 1, left.index_dtype, "the row offsets")
        try:
            with _statuses(f"cuSPARSE SpGEMM {algorithm}"):
                call, buffers = self._compute(left, right, algorithm, budget, indptr)
                budget.release(*buffers)
                return _nnz(call.lib, call.c)
        finally:
            budget.release(indptr)

    def _compute(self, left, right, algorithm, budget: Budget, c_indptr, before_launch=None):
        """``(call, work buffers)`` after ``cusparseSpGEMM_compute``: C's nonzeros are
        known, its entries wait in the buffers for ``cusparseSpGEMM_copy``.
        ``before_launch``: called after the descriptors are made (host work only), before
        the first SpGEMM call."""
        call = _Call(left, right, algorithm, c_indptr)
        if before_launch is not None:
            before_launch()
        lib, args = call.lib, call.args()
        buffers = []

        def buffer(nbytes, what):
            buffers.append(budget.empty(nbytes, np.int8, f"cuSPARSE SpGEMM {what}"))
            return buffers[-1].data.ptr if nbytes else 0

        try:
            size = lib.spGEMM_workEstimation(*args, 0, 0)
            lib.spGEMM_workEstimation(*args, size, buffer(size, "work estimation buffer"))
            if algorithm == "alg1":
                size = lib.spGEMM_compute(*args, 0, 0)
            else:
                size = self._estimate_memory(call, budget, algorithm)
            lib.spGEMM_compute(*args, size, buffer(size, "compute buffer"))
        except Exception as exc:
            budget.release(*buffers)
            if _out_of_memory(lib, exc):
                raise DoesNotFit(0, budget.free(), f"cuSPARSE SpGEMM ({exc})") from exc
            if isinstance(exc, lib.CuSparseError):
                raise Refused(f"cuSPARSE SpGEMM {algorithm}: {exc}") from exc
            raise
        return call, buffers

    @staticmethod
    def _estimate_memory(call: _Call, budget: Budget, algorithm: str) -> int:
        """The compute buffer's size for ALG2/ALG3 (``cusparseSpGEMM_estimateMemory``; for
        ALG3 the chunk of products is halved while its buffers do not fit)."""
        head = call.c_args()
        fraction, products = 1.0, 1
        if algorithm == "alg3":
            count = ctypes.c_int64(0)
            _call("cusparseSpGEMM_getNumProducts", _P(call.descr.handle), ctypes.byref(count))
            fraction, products = ALG3_CHUNK_FRACTION, max(int(count.value), 1)

        def smaller() -> bool:  # a smaller chunk, while ALG3 has one
            nonlocal fraction
            if algorithm != "alg3" or fraction * products <= 1:
                return False
            fraction /= 2
            return True

        while True:
            size3, size2 = ctypes.c_size_t(0), ctypes.c_size_t(0)
            chunk = ctypes.c_float(fraction)
            _call("cusparseSpGEMM_estimateMemory", *head, chunk, ctypes.byref(size3), None, None)
            try:
                scratch = budget.empty(size3.value, np.int8, "cuSPARSE SpGEMM estimation buffer")
            except DoesNotFit:
                if smaller():
                    continue
                raise
            try:
                _call(
                    "cusparseSpGEMM_estimateMemory",
                    *head,
                    chunk,
                    ctypes.byref(size3),
                    _P(device_pointer(scratch)),
                    ctypes.byref(size2),
                )
            finally:
                budget.release(scratch)
                del scratch
            free = budget.free()
            if free is not None and size2.value > free and smaller():
                continue
            return int(size2.value)

    def reuse(self, left, right, budget: Budget):
        int32 = np.dtype(np.int32)
        if not has_reuse() or int32 != left.index_dtype or int32 != right.index_dtype:
            return None
        with _statuses("cuSPARSE SpGEMMreuse"):
            return ReusePlan(left, right, budget)


class ReusePlan:
    """``cusparseSpGEMMreuse`` for one pair of patterns: the structure of ``C`` computed
    once; each :meth:`compute` recomputes the values only.

    Holds the work buffers the value computation needs, C's row offsets and column
    indices (shared by every result it returns: device arrays are never written), and the
    operands' index arrays, which later operands are compared with (exactly).

    Attributes
    ----------
    held_bytes : int
        Device memory the plan keeps between products.
    """

    def __init__(self, left: DeviceMatrix, right: DeviceMatrix, budget: Budget):
        self.left_pattern = (left.indptr, left.indices)
        self.right_pattern = (right.indptr, right.indices)
        self.shape = (left.shape[0], right.shape[1])
        self.residence = left.residence
        self._lock = threading.Lock()
        index = left.index_dtype
        self.indptr = budget.empty(self.shape[0] + 1, index, "the result")
        call = self._call = _Call(left, right, "default", self.indptr, own_descriptors=True)
        lib = call.lib
        head = call.reuse_args()
        buffers = {}

        def sized(name, size):
            buffers[name] = budget.empty(size.value, np.int8, f"cuSPARSE SpGEMMreuse {name}")
            return _P(device_pointer(buffers[name]))

        s1, s2, s3, s4, s5 = (ctypes.c_size_t(0) for _ in range(5))
        _call("cusparseSpGEMMreuse_workEstimation", *head, ctypes.byref(s1), None)
        _call("cusparseSpGEMMreuse_workEstimation", *head, ctypes.byref(s1), sized("buffer1", s1))
        sizes = (ctypes.byref(s2), None, ctypes.byref(s3), None, ctypes.byref(s4), None)
        _call("cusparseSpGEMMreuse_nnz", *head, *sizes)
        _call(
            "cusparseSpGEMMreuse_nnz",
            *head,
            ctypes.byref(s2),
            sized("buffer2", s2),
            ctypes.byref(s3),
            sized("buffer3", s3),
            ctypes.byref(s4),
            sized("buffer4", s4),
        )
        budget.release(buffers.pop("buffer1"), buffers.pop("buffer2"))
        nnz = _nnz(lib, call.c)
        self.indices = budget.empty(nnz, index, "the result")
        first = budget.empty(nnz, left.dtype, "the result")
        lib.csrSetPointers(
            call.c.handle, self.indptr.data.ptr, device_pointer(self.indices), device_pointer(first)
        )
        _call("cusparseSpGEMMreuse_copy", *head, ctypes.byref(s5), None)
        _call("cusparseSpGEMMreuse_copy", *head, ctypes.byref(s5), sized("buffer5", s5))
        budget.release(buffers.pop("buffer3"), first)
        self._buffers = buffers  # 4 and 5: what each value computation needs
        self.nnz = nnz
        self.held_bytes = sum(b.nbytes for b in buffers.values())
        self.held_bytes += self.indptr.nbytes + self.indices.nbytes

    def matches(self, left: DeviceMatrix, right: DeviceMatrix) -> bool:
        """True when ``left`` and ``right`` have exactly the patterns this plan was made
        for (the same arrays, or equal ones: one comparison on the device)."""
        if not (
            _same_pattern(self.left_pattern, left) and _same_pattern(self.right_pattern, right)
        ):
            return False
        # equal arrays found: compare with these from now on (a loop that rebuilds an
        # operand of this pattern with new values keeps its index arrays: an identity)
        self.left_pattern = (left.indptr, left.indices)
        self.right_pattern = (right.indptr, right.indices)
        return True

    def compute(self, left: DeviceMatrix, right: DeviceMatrix, budget: Budget) -> DeviceMatrix:
        """``left @ right`` (patterns as :meth:`matches` checked): the values only."""
        data = budget.empty(self.nnz, left.dtype, "the result")
        call = self._call
        lib = call.lib
        with self._lock, _statuses("cuSPARSE SpGEMMreuse"):
            call.handle = thread_handle(
                lib,
                _cuda.cupy_or_none().cuda.runtime.getDevice(),
                _cuda.cupy_or_none().cuda.get_current_stream().ptr,
            )
            for descriptor, m in ((call.a, left), (call.b, right)):
                lib.csrSetPointers(
                    descriptor.handle,
                    m.indptr.data.ptr,
                    device_pointer(m.indices),
                    device_pointer(m.data),
                )
            lib.csrSetPointers(
                call.c.handle,
                self.indptr.data.ptr,
                device_pointer(self.indices),
                device_pointer(data),
            )
            _call("cusparseSpGEMMreuse_compute", *call.c_args())
        result = DeviceMatrix(data, self.indices, self.indptr, self.shape, self.residence)
        return mark_canonical(result)


def _same_pattern(pattern, matrix: DeviceMatrix) -> bool:
    indptr, indices = pattern
    if indptr.dtype != matrix.indptr.dtype:  # the plan holds cuSPARSE's index type
        return False
    return arrays_equal(indptr, matrix.indptr) and arrays_equal(indices, matrix.indices)
