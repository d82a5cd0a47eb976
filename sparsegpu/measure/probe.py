"""The device's memory bandwidth: the "100%" of every "% of peak" sparsegpu prints.

Three experiments, after Harris, "How to Access Global Memory Efficiently in CUDA C/C++
Kernels" (NVIDIA developer blog, 2013; how global-memory accesses coalesce):

* **copy**: one large device-to-device copy; GB/s counts the bytes read plus the bytes
  written. SpMV is bandwidth-bound, so this is the ceiling a kernel is measured against.
* **offset**: ``a[i + offset] += 1`` for offsets 0..32 elements (misaligned starts).
* **stride**: ``a[i * stride] += 1`` for strides 1..32 (scattered accesses); GB/s counts
  only the useful bytes, so it shows what uncoalesced reads cost.

Results are cached per device as a small JSON file in the user cache directory
(``SPARSEGPU_CACHE_DIR`` overrides it), so :func:`copy_bandwidth` measures once per
device and every later "% of peak" reads the file.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .._files import save_figure
from .._version import __version__
from ..device import _cuda
from ..device._compile import KernelFamily, get_kernel, register_family
from ..device._launch import KernelLaunch, name_expression
from ._timing import cuda_time, gb_per_s

SCHEMA = "sparsegpu-probe/1"
CACHE_ENV_VAR = "SPARSEGPU_CACHE_DIR"
MAX_OFFSET = 32
MAX_STRIDE = 32
BLOCK_SIZE = 256
DTYPES = ("float32", "float64")
EXPERIMENTS = ("copy", "offset", "stride")

PROBE_FAMILY = register_family(
    KernelFamily(
        "probe.cu",
        tuple(
            name_expression(kernel, dtype)
            for kernel in ("offset_increment", "stride_increment")
            for dtype in DTYPES
        ),
    )
)


class NoGPUError(RuntimeError):
    """Raised when a measurement needs a GPU and none is usable."""


def cache_dir() -> Path:
    """sparsegpu's cache directory: ``$SPARSEGPU_CACHE_DIR``, else the user cache dir."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("sparsegpu", appauthor=False))


@dataclass(frozen=True)
class BandwidthPoint:
    """One measurement: the experiment's parameter (offset or stride) and its bandwidth."""

    parameter: int
    median_ms: float
    gb_per_s: float


@dataclass(frozen=True)
class ProbeResult:
    """What ``sparsegpu probe`` measured on one device.

    Attributes
    ----------
    device : dict
        Name, compute capability, multiprocessors and memory of the device.
    copy_bytes : int
        Bytes of one copy buffer (the copy moves twice that: read plus write).
    copy_ms, copy_gb_per_s : float
        Median time of the copy and its bandwidth (bytes read + written).
    dtype : str
        Element type of the offset and stride experiments.
    offset, stride : list of BandwidthPoint
        Harris's offset and stride experiments; empty when only the copy was measured.
    created : str
        ISO time of the measurement.
    """

    device: dict
    copy_bytes: int
    copy_ms: float
    copy_gb_per_s: float
    dtype: str = "float32"
    offset: list = field(default_factory=list)
    stride: list = field(default_factory=list)
    created: str = ""
    sparsegpu: str = __version__

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> ProbeResult:
        """Rebuild from :meth:`to_json` output; ValueError when the data is not one."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} record")
        try:
            return cls(
                device=dict(data["device"]),
                copy_bytes=int(data["copy_bytes"]),
                copy_ms=float(data["copy_ms"]),
                copy_gb_per_s=float(data["copy_gb_per_s"]),
                dtype=str(data.get("dtype", "float32")),
                offset=[BandwidthPoint(**p) for p in data.get("offset", [])],
                stride=[BandwidthPoint(**p) for p in data.get("stride", [])],
                created=str(data.get("created", "")),
                sparsegpu=str(data.get("sparsegpu", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed {SCHEMA} record: {exc}") from exc


def _require_cupy():
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise NoGPUError(f"no GPU: {_cuda.unavailable_reason()}")
    return cupy


def device_record() -> dict:
    """The current device as the probe records it (also its cache key)."""
    info = _cuda.device_info()
    return {
        "name": info.name,
        "compute_capability": "{}.{}".format(*info.compute_capability),
        "multiprocessors": info.multiprocessors,
        "memory_bytes": info.total_memory,
    }


def _cache_path(device: dict) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device["name"]).strip("-").lower()
    key = f"{slug}-sm{device['compute_capability'].replace('.', '')}-{device['multiprocessors']}"
    return cache_dir() / "probe" / f"{key}.json"


def load_cached(device: dict | None = None) -> ProbeResult | None:
    """The cached result for this (or the given) device, or None.

    A corrupt file is reported with a warning and set aside (renamed, not deleted), so
    that the next measurement rebuilds it.
    """
    if device is None:
        _require_cupy()
        device = device_record()
    path = _cache_path(device)
    if not path.exists():
        return None
    try:
        return ProbeResult.from_json(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        aside = path.with_suffix(f".corrupt-{datetime.datetime.now():%Y%m%d%H%M%S}")
        warnings.warn(
            f"probe cache {path} is unreadable ({exc}); moved to {aside.name}, measuring again",
            RuntimeWarning,
        )
        try:
            path.replace(aside)
        except OSError:
            pass
        return None


def save(result: ProbeResult) -> Path:
    """Write ``result`` to the cache atomically (temp file + rename, under a file lock)."""
    import filelock

    path = _cache_path(result.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(path) + ".lock"):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        os.replace(tmp, path)
    return path


def _free_bytes(cupy) -> int:
    free, _total = cupy.cuda.runtime.memGetInfo()
    return int(free) + cupy.get_default_memory_pool().free_bytes()


def _filled(cupy, n: int, dtype) -> object:
    """Non-zero values (0.5, 1.5, ... cycling), never time on zeros."""
    return (cupy.arange(n, dtype=np.int64) % 1024).astype(dtype) + dtype.type(0.5)


def measure_copy(nbytes: int = 2**30, repeat: int = 20) -> tuple[int, float, float]:
    """Bytes copied, median ms and GB/s (read + write) of a device-to-device copy.

    ``nbytes`` shrinks to a third of the free device memory when needed. The copy is
    checked (destination equals source) before it is timed.
    """
    cupy = _require_cupy()
    nbytes = min(int(nbytes), _free_bytes(cupy) // 3)
    n = nbytes // 8
    src = _filled(cupy, n, np.dtype(np.float64))
    dst = cupy.empty_like(src)
    nbytes = n * 8

    def copy():
        dst.data.copy_from_device_async(src.data, nbytes)

    copy()
    if not bool(cupy.array_equal(dst, src)):
        raise RuntimeError("device-to-device copy gave a wrong result; the GPU is unreliable")
    timing = cuda_time(copy, warmup=3, repeat=repeat)
    return nbytes, timing.median_ms, gb_per_s(2 * nbytes, timing.median_ms)


def _check_increment(cupy, values, base, touched) -> None:
    expected = base.copy()
    expected[touched] += 1
    if not bool(cupy.array_equal(values, expected)):
        raise RuntimeError("a probe kernel wrote wrong values; the GPU is unreliable")


def _experiment(kernel_name, parameters, n, span, dtype, repeat, touched_slice):
    """Time ``kernel_name`` over ``n`` elements of a ``span``-element buffer per parameter."""
    cupy = _require_cupy()
    dtype = np.dtype(dtype)
    kernel = get_kernel("probe.cu", name_expression(kernel_name, dtype))
    base = _filled(cupy, span, dtype)
    grid = (n + BLOCK_SIZE - 1) // BLOCK_SIZE
    points = []
    for parameter in parameters:
        values = base.copy()
        launch = KernelLaunch(kernel, BLOCK_SIZE, (values, n, parameter))
        launch(grid)
        _check_increment(cupy, values, base, touched_slice(parameter))
        timing = cuda_time(lambda launch=launch: launch(grid), repeat=repeat)
        points.append(
            BandwidthPoint(
                parameter, timing.median_ms, gb_per_s(2 * n * dtype.itemsize, timing.median_ms)
            )
        )
        del values
    return points


def measure_offset(nbytes: int = 2**28, dtype="float32", repeat: int = 20):
    """``a[i + offset] += 1`` over ``nbytes`` of elements for offsets 0..32."""
    dtype = np.dtype(dtype)
    n = nbytes // dtype.itemsize
    return _experiment(
        "offset_increment",
        list(range(MAX_OFFSET + 1)),
        n,
        n + MAX_OFFSET,
        dtype,
        repeat,
        lambda offset: slice(offset, offset + n),
    )


def measure_stride(nbytes: int = 2**26, dtype="float32", repeat: int = 20):
    """``a[i * stride] += 1`` over ``nbytes`` of useful elements for strides 1..32.

    The buffer spans 32 times ``nbytes``; the bandwidth counts the useful bytes only.
    """
    dtype = np.dtype(dtype)
    n = nbytes // dtype.itemsize
    return _experiment(
        "stride_increment",
        list(range(1, MAX_STRIDE + 1)),
        n,
        n * MAX_STRIDE,
        dtype,
        repeat,
        lambda stride: slice(0, n * stride, stride),
    )


def measure(
    copy_bytes: int = 2**30,
    experiment_bytes: int = 2**28,
    dtype="float32",
    repeat: int = 20,
    progress=None,
) -> ProbeResult:
    """Run the three experiments on the current device (and do not cache).

    Parameters
    ----------
    copy_bytes : int
        Size of each copy buffer; sized far above the L2 cache so DRAM is measured.
    experiment_bytes : int
        Useful bytes of the offset experiment; the stride one uses a quarter (its buffer
        spans 32 times as much).
    dtype : {"float32", "float64"}
        Element type of the offset and stride kernels.
    repeat : int
        Timed samples per point (the median is kept).
    progress : callable, optional
        Called with a short description before each experiment.
    """
    if str(np.dtype(dtype)) not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not probed; choose one of {list(DTYPES)}")
    cupy = _require_cupy()
    free = _free_bytes(cupy)
    experiment_bytes = min(int(experiment_bytes), free // 4)
    # base, working copy and expected values of the stride buffer: three spans of 32x
    stride_bytes = min(experiment_bytes // 4, free // (3 * MAX_STRIDE + 4))
    report = progress or (lambda _text: None)
    report("copy")
    copied, copy_ms, copy_gbs = measure_copy(copy_bytes, repeat)
    report("offset")
    offset = measure_offset(experiment_bytes, dtype, repeat)
    report("stride")
    stride = measure_stride(stride_bytes, dtype, repeat)
    cupy.get_default_memory_pool().free_all_blocks()
    return ProbeResult(
        device=device_record(),
        copy_bytes=copied,
        copy_ms=copy_ms,
        copy_gb_per_s=copy_gbs,
        dtype=str(np.dtype(dtype)),
        offset=offset,
        stride=stride,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def copy_bandwidth() -> float:
    """The current device's copy bandwidth in GB/s: cached, else measured once and cached.

    This is the 100% of every "% of peak" sparsegpu prints.

    Raises
    ------
    NoGPUError
        When no GPU is usable (there is no peak to speak of).
    """
    _require_cupy()
    return _copy_bandwidth(_cuda.device_info().index)


@functools.cache
def _copy_bandwidth(device_index: int) -> float:
    device = device_record()
    cached = load_cached(device)
    if cached is not None:
        return cached.copy_gb_per_s
    copied, copy_ms, copy_gbs = measure_copy()
    save(
        ProbeResult(
            device=device,
            copy_bytes=copied,
            copy_ms=copy_ms,
            copy_gb_per_s=copy_gbs,
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        )
    )
    return copy_gbs


def plot(result: ProbeResult, path) -> Path:
    """Draw the offset and stride curves (GB/s), with the copy bandwidth as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, points, label in (
        (axes[0], result.offset, "offset (elements)"),
        (axes[1], result.stride, "stride (elements)"),
    ):
        ax.plot([p.parameter for p in points], [p.gb_per_s for p in points], marker="o", ms=3)
        ax.axhline(result.copy_gb_per_s, color="grey", ls="--", label="copy (read + write)")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("GB/s")
    axes[0].legend(loc="lower left")
    fig.suptitle(f"{result.device.get('name', '?')}: memory bandwidth ({result.dtype})")
    return save_figure(fig, path)
