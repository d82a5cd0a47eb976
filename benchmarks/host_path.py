"""Host microseconds of a product's Python path (``A @ x``, ``A @ X``), without a GPU.

On a small matrix a product is bound by host time, and all of it but CuPy's and the
driver's own is sparsegpu's Python: the scipy operator, dispatch's cached choice, the
plan's operand checks, its result buffers and the launch. This script times that part on
any machine: it installs a stand-in CuPy before importing sparsegpu (arrays with CuPy's
attributes, a ``cuLaunchKernel`` and cuSPARSE calls that do nothing), puts a plan in a
matrix's choice cache, and times ``A @ x``, ``A @ X`` for k = 2, 8, 32 with X in C and in
Fortran order, with and without ``out=``, for two plans: a kernel plan (the row-split SpMM
for ``A @ X``, as the vector family's) and a cuSPARSE plan.

Not a speed claim (CuPy's arrays are C objects, cheaper than these stand-ins; the GPU's
numbers come from ``benchmarks/per_call.py``): it compares trees. Run it once from each
tree's root (``python -m`` imports the ``sparsegpu`` beside ``benchmarks/``), alternately,
on an idle machine::

    cd TREE && python -m benchmarks.host_path --label before --out before.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
import types

import numpy as np

KS = (2, 8, 32)
N_ROWS = 1000
# arrays 16 MiB apart: no two stand-in arrays share an address
_ADDRESSES = itertools.count(1 << 30, 1 << 24)


class _Memory:
    __slots__ = ("ptr",)

    def __init__(self):
        self.ptr = next(_ADDRESSES)


class _MemoryPointer:
    __slots__ = ("mem", "ptr")

    def __init__(self, mem):
        self.mem, self.ptr = mem, mem.ptr


class ndarray:  # noqa: N801 (CuPy's name: sparsegpu.device._cuda.is_cupy_array looks for it)
    """A CuPy array as a product reads it: shape, dtype, sizes, contiguity attributes and a
    pointer to memory (array -> pointer -> memory, as CuPy's; result buffers count the
    references along that chain)."""

    __slots__ = (
        "shape", "dtype", "ndim", "size", "itemsize", "nbytes", "data", "_c_contiguous",
        "_f_contiguous",
    )  # fmt: skip

    def __init__(self, shape, dtype=np.float64, memptr=None, strides=None, order="C"):
        shape = shape if type(shape) is tuple else (shape,)
        self.shape, self.ndim = shape, len(shape)
        self.dtype = dtype if type(dtype) is np.dtype else np.dtype(dtype)
        size = 1
        for n in shape:
            size *= n
        self.size, self.itemsize = size, self.dtype.itemsize
        self.nbytes = size * self.itemsize
        self.data = memptr if memptr is not None else _MemoryPointer(_Memory())
        flat = self.ndim < 2 or 1 in shape
        self._c_contiguous = order == "C" or flat
        self._f_contiguous = order == "F" or flat

    @property
    def flags(self):
        return types.SimpleNamespace(
            c_contiguous=self._c_contiguous, f_contiguous=self._f_contiguous
        )

    def fill(self, value):
        pass


ndarray.__module__ = "cupy._core.core"


def _empty(shape, dtype=np.float64, order="C"):
    return ndarray(shape, dtype, order=order)


def _module(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def install_standin() -> types.ModuleType:
    """Put the stand-in CuPy, its driver and its cuSPARSE in ``sys.modules`` (before
    sparsegpu is imported) and return the stand-in CuPy."""
    stream = types.SimpleNamespace(ptr=7, synchronize=lambda: None)
    runtime = types.SimpleNamespace(getDevice=lambda: 0, free=lambda ptr: None)
    runtime.getDeviceCount = lambda: 1
    cupy = _module(
        "cupy",
        __version__="stand-in",
        ndarray=ndarray,
        empty=_empty,
        zeros=_empty,
        may_share_memory=lambda a, b: a.data.mem is b.data.mem,
        ascontiguousarray=lambda a: a,  # (the stand-in arrays are always contiguous)
        asfortranarray=lambda a: a,
        cuda=types.SimpleNamespace(get_current_stream=lambda: stream, runtime=runtime),
    )
    handles = itertools.count(1)
    cusparse = _module("cupy_backends.cuda.libs.cusparse")
    for name in ("create", "createCsr", "createDnVec", "createDnMat"):
        setattr(cusparse, name, lambda *args: next(handles))
    for name in ("destroy", "destroySpMat", "destroyDnVec", "destroyDnMat", "setStream"):
        setattr(cusparse, name, lambda *args: None)
    for name in ("spMV", "spMM", "dnMatSetValues", "spMM_preprocess"):
        setattr(cusparse, name, lambda *args: None)
    cusparse.spMV_bufferSize = cusparse.spMM_bufferSize = lambda *args: 64
    driver = _module("cupy_backends.cuda.api.driver", launchKernel=lambda *args: None)
    _module("cupy_backends")
    _module("cupy_backends.cuda")
    _module("cupy_backends.cuda.api", driver=driver)
    _module("cupy_backends.cuda.libs", cusparse=cusparse)
    return cupy


def plans(cupy) -> dict:
    """``{name: plan}`` on one stand-in mirror of ``N_ROWS`` rows, float64."""
    from sparsegpu.backends import _spmm, cusparse
    from sparsegpu.backends.csr_vector import CsrVectorPolicy, KernelPlan
    from sparsegpu.device import _launch, _mirror

    kernel = types.SimpleNamespace(ptr=1)
    _spmm.get_kernel = lambda source, name, *options: kernel  # nothing to compile
    nnz = 8 * N_ROWS
    residence = _mirror.Residence("cupy", lambda: cupy, None, copies=True)
    mirror = _mirror.DeviceMatrix(
        ndarray((nnz,)), ndarray((nnz,), np.int32), ndarray((N_ROWS + 1,), np.int32),
        (N_ROWS, N_ROWS), residence,
    )  # fmt: skip

    class RowGroupPlan(KernelPlan):
        """A vector-family plan: one launch per A @ x, the row-split SpMM for A @ X."""

        def _spmm_shape(self):
            return 4, 256

    rows = RowGroupPlan(mirror, CsrVectorPolicy(threads_per_row=4))
    arguments = (mirror.indptr, mirror.indices, mirror.data, "x", 0, "y", N_ROWS)
    rows._launch = _launch.KernelLaunch(kernel, 256, arguments)
    rows.grid = 16
    return {
        "row_group": rows,
        "cusparse": cusparse.CusparsePlan(
            mirror, cusparse.CusparsePolicy(spmm_algorithm="csr_alg1")
        ),
    }


def put_in_cache(A, plan, x) -> None:
    """Make ``plan`` the one ``A``'s products with an operand like ``x`` run."""
    from sparsegpu.device import _mirror
    from sparsegpu.engine import _planning, _registry, _select

    key = _mirror.ChoiceKey(
        _select.AUTO, x.dtype, None, None, A._sg_policy, A._sg_planning,
        _registry.generation, _planning.operation_of(x),
    )  # fmt: skip
    A._sg_cache_dict().choices[key] = _planning.PlannedChoice(plan, x.dtype, False, None)


def per_call_us(fn, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the microseconds per call of ``fn``, after warming up."""
    for _ in range(min(calls, 200)):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def run(calls: int, repeats: int) -> dict:
    cupy = install_standin()
    import scipy.sparse as sp

    import sparsegpu as sg

    S = sp.random(N_ROWS, N_ROWS, density=8 / N_ROWS, format="csr", random_state=0)
    out = {}
    for name, plan in plans(cupy).items():
        A = sg.csr_matrix(S)
        x, y = ndarray((N_ROWS,)), ndarray((N_ROWS,))
        put_in_cache(A, plan, x)
        row = out[name] = {"A @ x": per_call_us(lambda A=A, x=x: A @ x, calls, repeats)}
        row["A @ x, out="] = per_call_us(
            lambda A=A, x=x, y=y: sg.matvec(A, x, out=y), calls, repeats
        )
        for k in KS:
            for order in ("C", "F"):
                X, Y = ndarray((N_ROWS, k), order=order), ndarray((N_ROWS, k), order=order)
                put_in_cache(A, plan, X)
                row[f"A @ X k={k} {order}"] = per_call_us(lambda A=A, X=X: A @ X, calls, repeats)
                row[f"A @ X k={k} {order}, out="] = per_call_us(
                    lambda A=A, X=X, Y=Y: sg.matvec(A, X, out=Y), calls, repeats
                )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="this tree", help="name of the tree measured")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    parser.add_argument("--repeats", type=int, default=15, help="timed loops per product")
    parser.add_argument("--out", help="JSON result file")
    args = parser.parse_args(argv)
    result = {"label": args.label, "calls": args.calls, "repeats": args.repeats}
    result["host_us"] = run(args.calls, args.repeats)
    for name, row in result["host_us"].items():
        for what, us in row.items():
            print(f"{name:10} {what:22} {us:6.2f} us")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
