"""The one place that imports CuPy and says whether a GPU is usable.

Everything GPU-facing asks :func:`cupy_or_none` or :func:`unavailable_reason`; nothing
else in the package imports CuPy at module level, so the package imports (and the scipy
backend works) on a machine with no GPU and no CuPy.
"""

from __future__ import annotations

import functools
import glob
import sys
import threading
from dataclasses import dataclass

NO_CUPY_HINT = 'pip install -e ".[cuda13]" (or ".[cuda12]" with a CUDA 12 driver)'


@functools.cache
def _probe():
    """Import CuPy and touch the current device once; return (cupy, cause, details): why
    the GPU cannot be used in a few words, and the rest (the error, what to do)."""
    try:
        import cupy
    except ImportError as exc:
        return None, "CuPy is not installed", f"({exc}); {NO_CUPY_HINT}"
    except Exception as exc:  # a broken CUDA install raises all sorts of things on import
        return None, "CuPy failed to import", f"({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        missing = _missing_driver(_driver_version(cupy), glob.glob("/dev/nvidia*"), sys.platform)
        if missing is not None:
            return None, "no NVIDIA driver/GPU found", f"({missing}; CuPy said {error})"
        return None, "no usable CUDA device", f"({error})"
    if count == 0:
        return None, "no CUDA device found", ""
    return cupy, None, None


def _driver_version(cupy) -> int | None:
    """``cudaDriverGetVersion``: 0 when no driver is installed, None when it cannot say."""
    try:
        return int(cupy.cuda.runtime.driverGetVersion())
    except Exception:
        return None


def _missing_driver(driver_version: int | None, device_files: list, platform: str) -> str | None:
    """Why there is no NVIDIA driver here, or None when one seems present.

    CuPy reports a machine without any driver as ``cudaErrorInsufficientDriver``, which
    reads as if a newer driver would help; the runtime's driver version 0 (its documented
    answer when no driver is installed) and, on Linux, no ``/dev/nvidia*`` device files
    tell the two apart.
    """
    if driver_version == 0:
        return "the CUDA runtime reports driver version 0, i.e. no driver installed"
    if platform.startswith("linux") and not device_files:
        return "no /dev/nvidia* device files"
    return None


def cupy_or_none():
    """CuPy when a CUDA device is usable, else None."""
    return _probe()[0]


def unavailable_reason() -> str | None:
    """Why the GPU cannot be used here, in full (the error, what to do), or None when it
    can. Said once wherever a list shows the GPU backends, which give
    :func:`backend_reason`."""
    _, cause, details = _probe()
    return None if cause is None else f"{cause} {details}".rstrip()


def backend_reason() -> str | None:
    """What each GPU backend says when the GPU cannot be used: a few words (``"no usable
    GPU: CuPy is not installed"``), the full story being :func:`unavailable_reason`'s."""
    cause = _probe()[1]
    return None if cause is None else f"no usable GPU: {cause}"


_thread_state = threading.local()


def ensure_context() -> None:
    """Make the current device's CUDA context current on this thread (once per thread).

    CuPy launches kernels through the driver API, which needs a context bound to the
    calling thread; only runtime API calls bind one, and a thread whose device memory all
    came from CuPy's pool may never have made one. Its first launch then fails with
    CUDA_ERROR_INVALID_CONTEXT (cupy/cupy#72; eight threads sharing one matrix hit it on the
    H200). A harmless runtime call binds the context; a thread-local flag makes later
    calls cost one attribute lookup.
    """
    if getattr(_thread_state, "bound", False):
        return
    cupy = cupy_or_none()
    if cupy is not None:
        cupy.cuda.runtime.free(0)
    _thread_state.bound = True


_CUPY_ARRAY_TYPES: set[type] = set()


def is_cupy_array(obj) -> bool:
    """True for a ``cupy.ndarray`` without importing CuPy when it is not loaded."""
    cls = type(obj)
    if cls in _CUPY_ARRAY_TYPES:
        return True
    if cls.__name__ == "ndarray" and cls.__module__.startswith("cupy"):
        _CUPY_ARRAY_TYPES.add(cls)
        return True
    return False


# CuPy reduces an array with a CUB kernel that it compiles (about 1.7 s on an H200; once a
# machine, then cached on disk) for each operation, dtype and size class of arrays under
# about 2,048 entries, whose block size follows the size. Such arrays are reduced on the
# host instead (:func:`reducible`), so that the sizes of a user's matrices (a multigrid
# hierarchy's coarse levels) never cost a compilation.
SMALL_REDUCTION = 2048


def reducible(a):
    """``a``, or its host copy when it is a CuPy array of fewer than
    :data:`SMALL_REDUCTION` entries: what to call a reduction (``.any()``, ``.sum()``) on
    (a transfer of a few KiB, where CuPy would compile a kernel for that size)."""
    if is_cupy_array(a) and a.size < SMALL_REDUCTION:
        return a.get()
    return a


def to_host(a):
    """CuPy arrays and cupyx sparse matrices as their numpy / scipy copies (tuples item by
    item); anything else unchanged. For handing GPU inputs to scipy's constructors and writers."""
    if is_cupy_array(a):
        return a.get()
    if type(a).__module__.startswith("cupyx.scipy.sparse") and hasattr(a, "get"):
        return a.get()
    if isinstance(a, tuple):
        return tuple(to_host(item) for item in a)
    return a


@dataclass(frozen=True)
class DeviceInfo:
    """What sparsegpu needs to know about one CUDA device."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    total_memory: int
    l2_cache_bytes: int
    shared_memory_per_block_optin: int
    max_texture_1d_linear: int
    texture_alignment: int

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


def device_info(index: int | None = None) -> DeviceInfo:
    """Properties of the current (or given) CUDA device; needs a usable GPU."""
    cupy = cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"no GPU: {unavailable_reason()}")
    if index is None:
        index = cupy.cuda.Device().id
    return _device_info(index)


@functools.cache
def _device_info(index: int) -> DeviceInfo:
    cupy = cupy_or_none()
    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"]
    if isinstance(name, bytes):
        name = name.decode()
    return DeviceInfo(
        index=index,
        name=name,
        compute_capability=(int(props["major"]), int(props["minor"])),
        multiprocessors=int(props["multiProcessorCount"]),
        total_memory=int(props["totalGlobalMem"]),
        l2_cache_bytes=int(props["l2CacheSize"]),
        shared_memory_per_block_optin=int(props.get("sharedMemPerBlockOptin", 49152)),
        max_texture_1d_linear=int(props.get("maxTexture1DLinear", 2**27)),
        texture_alignment=int(props.get("textureAlignment", 512)),
    )


def versions() -> dict[str, str]:
    """CuPy, CUDA runtime and driver versions, as strings ('-' where unknown)."""
    cupy = cupy_or_none()
    out = {"cupy": "-", "cuda_runtime": "-", "cuda_driver": "-"}
    try:
        import cupy as _cupy

        out["cupy"] = _cupy.__version__
    except Exception:
        return out
    if cupy is None:
        return out

    def fmt(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    out["cuda_runtime"] = fmt(cupy.cuda.runtime.runtimeGetVersion())
    out["cuda_driver"] = fmt(cupy.cuda.runtime.driverGetVersion())
    return out
