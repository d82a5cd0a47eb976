"""Compiling the CUDA sources in :mod:`sparsegpu.kernels`, once per device and instantiation.

A kernel family is one templated ``.cu`` file; its instantiations are C++ name
expressions (``"csr_vector<double, int, 32, 1, 0>"``). At run time each instantiation is
compiled by NVRTC through ``cupy.RawModule`` the first time it is needed on a device and
memoized (CuPy also caches the binary on disk). The solvers' fused elementwise kernels are
data too (:class:`ElementwiseSource`). In CI, ``tools/check_kernels.py`` compiles every
instantiation of every family, and every elementwise source, with nvcc for sm_90 and fails
on spills.
"""

from __future__ import annotations

import functools
import importlib.resources
import threading
from dataclasses import dataclass

from . import _cuda

_lock = threading.Lock()


def kernel_dir():
    """The directory (a Traversable) holding the ``.cu``/``.cuh`` sources."""
    return importlib.resources.files("sparsegpu.kernels")


@functools.cache
def source_text(name: str) -> str:
    """The text of kernel source ``name``, with local ``#include "x.cuh"`` lines inlined.

    Inlining keeps NVRTC independent of include paths inside installed packages
    (zip-safe); nvcc in CI compiles the files as they are. Each header is inlined once per
    source, where it is first included (what its ``#pragma once`` asks of a compiler).
    """
    return _inlined(name, set())


def _inlined(name: str, seen: set) -> str:
    lines = []
    for line in (kernel_dir() / name).read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith('#include "') and stripped.endswith('"'):
            header = stripped[len('#include "') : -1]
            if header not in seen:
                seen.add(header)
                lines.append(_inlined(header, seen))
        else:
            lines.append(line)
    return "\n".join(lines)


@dataclass(frozen=True)
class KernelFamily:
    """One templated ``.cu`` source and every instantiation sparsegpu may launch.

    Attributes
    ----------
    source : str
        File name in ``sparsegpu/kernels``.
    instantiations : tuple of str
        C++ name expressions (template arguments spelled as in the source).
    """

    source: str
    instantiations: tuple[str, ...]


# Every family, for the CI compile check; backend modules append theirs at import.
FAMILIES: list[KernelFamily] = []


def register_family(family: KernelFamily) -> KernelFamily:
    FAMILIES.append(family)
    return family


@dataclass(frozen=True)
class ElementwiseSource:
    """A fused elementwise kernel as data: what ``cupy.ElementwiseKernel`` takes.

    Registered (:func:`register_elementwise`) so that ``tools/check_kernels.py`` compiles
    its operation with nvcc too. ``T`` (and ``V``, a real type) in the parameters are its
    type parameters, set from the arrays by CuPy.
    """

    in_params: str
    out_params: str
    operation: str
    name: str
    preamble: str = ""

    def kernel(self):
        """The ``cupy.ElementwiseKernel`` (CuPy compiles it per dtype on first use)."""
        cupy = _cuda.cupy_or_none()
        if cupy is None:
            raise RuntimeError(f"no GPU: {_cuda.unavailable_reason()}")
        return cupy.ElementwiseKernel(
            self.in_params, self.out_params, self.operation, self.name, preamble=self.preamble
        )


# Every elementwise source with the value kinds it runs on ("f" real, "c" complex), for
# the CI compile check; the solver modules add theirs at import.
ELEMENTWISE: list[tuple[str, ElementwiseSource]] = []


def register_elementwise(kinds: str, *sources: ElementwiseSource) -> None:
    ELEMENTWISE.extend((kinds, source) for source in sources)


NVRTC_OPTIONS = ("-std=c++17",)


# (device id, source, name expression, options) -> compiled kernel
_kernels: dict[tuple, object] = {}


def get_kernel(source: str, name_expression: str, options: tuple[str, ...] = ()):
    """The compiled ``cupy.RawKernel`` for one instantiation on the current device.

    ``options`` are extra NVRTC options (a policy's register cap, say); each distinct set
    is its own compilation. Compiled once per process even when threads race for it
    (a plain memo would let each racing thread compile it again, one after another).
    """
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"no GPU: {_cuda.unavailable_reason()}")
    key = (cupy.cuda.Device().id, source, name_expression, tuple(options))
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                module = cupy.RawModule(
                    code=source_text(source),
                    options=NVRTC_OPTIONS + key[3],
                    name_expressions=[name_expression],
                )
                kernel = _kernels[key] = module.get_function(name_expression)
    return kernel
