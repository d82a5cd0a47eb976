"""The one C++ type map and the one way sparsegpu launches a compiled kernel.

Every kernel family spells its instantiations with :func:`name_expression` (the value and
index types as ``kernels/common.cuh`` names them) and launches through a
:class:`KernelLaunch`. A launch passes raw device pointers: the operands it is given must
already be checked, which :meth:`sparsegpu.backends.base.Plan.operands` does once per
product (``matvec``/``matmat`` -> ``operands`` -> ``_matvec``/``_matmat``).
"""

from __future__ import annotations

import threading

import numpy as np

from . import _cuda
from ._dtypes import BFLOAT16, FLOAT16

# C++ spellings of the value and index dtypes (kernels/common.cuh defines the complex ones).
CXX_VALUE_TYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "complex64",
    np.dtype(np.complex128): "complex128",
}
CXX_INDEX_TYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}
# The 16-bit floats (kernels/half.cuh, CUDA's cuda_fp16.h and cuda_bf16.h): only the
# row-group families (csr_vector, delta16) are instantiated for them.
CXX_HALF_TYPES = {FLOAT16: "__half"}
if BFLOAT16 is not None:
    CXX_HALF_TYPES[BFLOAT16] = "__nv_bfloat16"


def name_expression(template: str, value_dtype, index_dtype=None, *parameters) -> str:
    """The C++ name of one instantiation: ``name_expression("csr_vector", np.float64,
    np.int32, 8, 2, 1) == "csr_vector<double, int, 8, 2, 1>"``; without an index dtype,
    only the value type (``"gather<float>"``)."""
    value_dtype = np.dtype(value_dtype)
    arguments = [CXX_VALUE_TYPES.get(value_dtype) or CXX_HALF_TYPES[value_dtype]]
    if index_dtype is not None:
        arguments.append(CXX_INDEX_TYPES[np.dtype(index_dtype)])
    arguments += [str(p) for p in parameters]
    return f"{template}<{', '.join(arguments)}>"


def mixed_name_expression(
    template: str, vector_dtype, matrix_dtype, index_dtype, *parameters
) -> str:
    """The C++ name of a mixed-precision instantiation: the vectors' value type, then the
    stored values' (``"csr_vector_mixed_precision<double, float, int, 4, 2, 1>"``)."""
    inner = name_expression(template, vector_dtype, index_dtype, *parameters)
    head, rest = inner.split(", ", 1)
    return f"{head}, {CXX_VALUE_TYPES[np.dtype(matrix_dtype)]}, {rest}"


def precision_name_expression(
    template: str, value_dtype, index_dtype, *parameters, matrix_dtype=None
) -> str:
    """The C++ name of one instantiation of a family with a mixed-precision twin (the
    row-group families): :func:`name_expression`'s, or with a ``matrix_dtype`` other than
    ``value_dtype`` (float32 values, float64 vectors) the :func:`mixed_name_expression` of
    ``template + "_mixed_precision"``."""
    if matrix_dtype is not None and np.dtype(matrix_dtype) != np.dtype(value_dtype):
        return mixed_name_expression(
            f"{template}_mixed_precision", value_dtype, matrix_dtype, index_dtype, *parameters
        )
    return name_expression(template, value_dtype, index_dtype, *parameters)


def kernel_handle(kernel) -> int:
    """The ``CUfunction`` handle of a ``cupy.RawKernel`` (compiles it if needed)."""
    return getattr(kernel, "kernel", kernel).ptr


def _slot_value(argument) -> int:
    """An argument as the 8 bytes of its slot: a device array or texture object as its
    pointer, an integer as itself."""
    data = getattr(argument, "data", None)
    if data is not None and hasattr(data, "ptr"):
        return data.ptr
    if hasattr(argument, "ptr"):
        return argument.ptr
    return int(argument)


class KernelLaunch:
    """One compiled kernel bound to its block size, shared memory and fixed arguments.

    Launches through ``cuLaunchKernel`` from a packed argument buffer: CuPy's generic launch
    converts every argument on every call (several microseconds for a dozen arguments, more
    than a whole small product); here each argument has a fixed 8-byte slot (pointers and
    integers, little-endian, so an ``int`` parameter reads its low four bytes) and a call
    only rewrites the slots named per call.

    Parameters
    ----------
    kernel : cupy.RawKernel
    block : int
        Threads per block.
    arguments : sequence
        The kernel's parameters in order: a device array (its pointer), a texture object
        (its handle), an integer, or a str naming a slot filled by each call.
    shared_bytes : int
        Dynamic shared memory per block.
    """

    def __init__(self, kernel, block: int, arguments, shared_bytes: int = 0):
        from cupy_backends.cuda.api import driver

        self._driver_launch = driver.launchKernel
        self._function = kernel_handle(kernel)
        self._cupy = _cuda.cupy_or_none()
        self.block = int(block)
        self.shared_bytes = int(shared_bytes)
        # one slot per parameter, and a spare one past them that cuLaunchKernel never reads:
        # xy() writes x (or y) there for a kernel without that parameter (a fix-up of y)
        self._n_params = len(arguments)
        self._args = np.zeros(self._n_params + 1, dtype=np.uint64)
        self._slots = {}
        for i, argument in enumerate(arguments):
            if isinstance(argument, str):
                self._slots[argument] = i
            else:
                self._args[i] = _slot_value(argument)
        self._pack()
        # cuLaunchKernel's arguments between the grid's x and the stream: grid y, z, the
        # block and the dynamic shared memory
        self._shape = (1, 1, self.block, 1, 1, self.shared_bytes)
        self._current_stream = self._cupy.cuda.get_current_stream
        self._x_slot = self._slots.get("x", self._n_params)
        self._y_slot = self._slots.get("y", self._n_params)
        self._texture_slot = self._slots.get("x_texture")

    def bind(self, **fixed) -> KernelLaunch:
        """A copy with the slots named in ``fixed`` filled for good (a plan's per-stream
        scratch buffers), so that its calls only write what changes per product."""
        other = object.__new__(KernelLaunch)
        other.__dict__.update(self.__dict__)
        other._args = self._args.copy()
        other._slots = dict(self._slots)
        for name, argument in fixed.items():
            other._args[other._slots.pop(name)] = _slot_value(argument)
        other._pack()
        return other

    def _pack(self) -> None:
        """The array of pointers to the slots that ``cuLaunchKernel`` reads, and the lock
        that keeps one launch's slots from another's (the launch copies them)."""
        self._params = self._args.ctypes.data + 8 * np.arange(self._n_params, dtype=np.uint64)
        self._params_ptr = self._params.ctypes.data
        self._lock = threading.Lock()

    def xy(self, grid: int, x, y, texture: int = 0) -> None:
        """Launch with the slots ``"x"`` and ``"y"`` set to two CuPy arrays (checked by the
        plan; one a kernel does not take is ignored), the slot ``"x_texture"``, if the
        kernel has one, to the handle ``texture``, and every other slot fixed: the
        per-product path, without keyword arguments or per-argument conversion."""
        stream_ptr = self._current_stream().ptr
        args = self._args
        with self._lock:
            args[self._x_slot] = x.data.ptr
            args[self._y_slot] = y.data.ptr
            if self._texture_slot is not None:
                args[self._texture_slot] = texture
            self._driver_launch(self._function, grid, *self._shape, stream_ptr, self._params_ptr, 0)

    def __call__(self, grid: int, **per_call) -> None:
        """Launch ``grid`` blocks on CuPy's current stream; ``per_call`` fills the named slots."""
        stream_ptr = self._current_stream().ptr
        with self._lock:  # the slots are shared; the launch copies them
            for name, argument in per_call.items():
                self._args[self._slots[name]] = _slot_value(argument)
            self._driver_launch(
                self._function, int(grid), *self._shape, stream_ptr, self._params_ptr, 0
            )
