"""Host time per product on a small matrix, for every backend: what a call costs the CPU.

On a small matrix a product is latency-bound, so the host work of each call (argument
checks, the cached choice, the plan's launch) is what a solver's iteration pays. Measured
without synchronizing inside the loop (calls queue on the stream), median of repeats:

- every available backend's ``A @ x`` with a CuPy x, and ``plan.matvec(x)`` alone;
- cupyx's ``A @ x`` on the same matrix, for reference;
- the CPU path: ``A @ x`` with a numpy x on the ``scipy`` backend against scipy's own
  ``A @ x`` (900 x 900, about 4,000 nonzeros);
- where ``auto``'s time goes (``pieces``): CuPy's own floor (``cupy.cuda.get_current_stream``,
  allocating y, one bare ``cuLaunchKernel`` of the plan's kernel), taking back a dropped
  result (``sparsegpu.device._result_buffers``) against allocating one, and the plan's
  matvec with and without ``out=`` and the whole ``A @ x``;
- the ``cusparse`` backend's ``A @ x`` against the bare ``cusparseSpMV`` call it makes;
- ``A @ X`` (``blocks``: k = 2, 8, 32, X in C and in Fortran order) beside ``A @ x`` on the
  same matrix: ``auto`` planned on that X, with and without ``out=``, its plan's
  ``matmat`` alone, the ``cusparse`` backend's ``A @ X``, and cuSPARSE SpMM called
  directly (``benchmarks/spmm.py``'s ``DirectSpMM``: handle, descriptors bound to X and
  Y, and workspace made once, one ``cusparseSpMM`` per call).

Run from a checkout (``python -m benchmarks.per_call --out FILE.json``);
to compare two trees, run it once from each tree's root with ``--label``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common
from benchmarks.common import DirectSpMM
from sparsegpu.backends import _spmm
from sparsegpu.backends import cusparse as cusparse_backend
from sparsegpu.engine import _registry

# Few calls between synchronizations: more would fill the launch queue (about a thousand
# launches), after which each call waits for the GPU and the loop times kernels, not host.
CALLS = 200
REPEATS = 31


def per_call_us(fn, sync=None, calls=CALLS, repeats=REPEATS) -> float:
    """Median over ``repeats`` of the host microseconds per call of ``fn``."""
    for _ in range(100):
        fn()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    if sync:
        sync()
    return statistics.median(times)


def pieces(B, x, cupy, sync) -> dict:
    """Host microseconds of each step of ``auto``'s ``A @ x`` on ``B``, and of CuPy's floor."""
    plan = sg.engine._planning.plan_for(B, np.float64)
    out = {"backend": type(plan).__name__}
    y = cupy.empty(B.shape[0])
    out["get_current_stream_us"] = per_call_us(cupy.cuda.get_current_stream, sync)
    out["cupy_empty_us"] = per_call_us(lambda: cupy.empty(B.shape[0]), sync)
    out["cupy_ndarray_us"] = per_call_us(lambda: cupy.ndarray((B.shape[0],), np.float64), sync)
    results = getattr(plan, "_results", None)
    if results is not None:  # a result taken back once its caller dropped it
        out["result_buffers_take_us"] = per_call_us(results.take, sync)
    launch = getattr(plan, "_launch", None)
    if launch is not None and hasattr(launch, "xy"):
        out["bare_launch_us"] = per_call_us(
            lambda: launch._driver_launch(
                launch._function, plan.grid, 1, 1, launch.block, 1, 1, launch.shared_bytes,
                0, launch._params_ptr, 0,
            ),
            sync,
        )  # fmt: skip
        out["kernel_launch_xy_us"] = per_call_us(lambda: launch.xy(plan.grid, x, y), sync)
    out["plan_matvec_out_us"] = per_call_us(lambda: plan.matvec(x, out=y), sync)
    out["plan_matvec_us"] = per_call_us(lambda: plan.matvec(x), sync)
    out["sg_matvec_us"] = per_call_us(lambda: sg.matvec(B, x), sync)
    out["a_at_x_us"] = per_call_us(lambda: B @ x, sync)
    cupy_add = cupy.ElementwiseKernel("float64 a", "float64 b", "b = a", "sg_copy_probe")
    out["cupy_elementwise_us"] = per_call_us(lambda: cupy_add(x, y), sync)
    return out


def cusparse_pieces(B, x, cupy, sync) -> dict:
    """Host microseconds of the ``cusparse`` backend's ``A @ x`` against the one
    ``cusparseSpMV`` call it makes (same handle, descriptors and workspace): the part of a
    call that is cuSPARSE's own."""
    plan = sg.engine._planning.plan_for(B, np.float64, backend="cusparse")
    y = cupy.empty(B.shape[0])
    plan.matvec(x, out=y)  # makes the descriptors of x and y
    stream_ptr = cupy.cuda.get_current_stream().ptr
    lib = plan._lib
    args = (
        cusparse_backend.thread_handle(lib, plan._device_id, stream_ptr),
        cusparse_backend.OPERATION_NON_TRANSPOSE, plan._alpha_ptr, plan._mat_handle,
        plan._x_vectors[x.data.ptr].handle, plan._beta_ptr, plan._y_vectors[y.data.ptr].handle,
        plan._compute_type, plan._algorithm, plan._workspaces[stream_ptr][1],
    )  # fmt: skip
    return {
        "cusparse_spmv_call_us": per_call_us(lambda: lib.spMV(*args), sync),
        "plan_matvec_out_us": per_call_us(lambda: plan.matvec(x, out=y), sync),
        "plan_matvec_us": per_call_us(lambda: plan.matvec(x), sync),
        "a_at_x_us": per_call_us(lambda: B @ x, sync),
    }


BLOCK_KS = (2, 8, 32)


def block_products(S, cupy, sync) -> dict:
    """Host microseconds per ``A @ X`` for each k of ``BLOCK_KS`` and memory order of X,
    beside ``A @ x`` on the same matrix (see the module docstring)."""
    rng = np.random.default_rng(2)
    x = cupy.asarray(rng.uniform(-1, 1, S.shape[1]))
    B = sg.csr_matrix(S)  # auto, planned on each X in turn
    C = sg.csr_matrix(S)
    C.backend = "cusparse"
    C.policy = cusparse_backend.CusparsePolicy(spmm_algorithm="default")
    out = {
        "a_at_x_us": per_call_us(lambda: B @ x, sync),
        "cusparse_a_at_x_us": per_call_us(lambda: C @ x, sync),
    }
    for k in BLOCK_KS:
        for order in ("C", "F"):
            X = cupy.asarray(rng.uniform(-1, 1, (S.shape[1], k)), order=order)
            out[f"k={k} {order}"] = _block_row(B, C, X, cupy, sync)
    return out


def _block_row(B, C, X, cupy, sync) -> dict:
    """One (k, order) of :func:`block_products`: ``B`` is auto's matrix, ``C`` the
    cusparse backend's."""
    Y = cupy.empty((B.shape[0], X.shape[1]), order="F" if _spmm.is_fortran(X) else "C")
    choice = sg.choose(B, X)
    plan = sg.engine._planning.plan_for(B, np.float64, x=X)
    row = {"auto_backend": choice.backend, "auto_policy": repr(choice.policy)}
    row["auto_us"] = per_call_us(lambda: B @ X, sync)
    row["auto_out_us"] = per_call_us(lambda: sg.matvec(B, X, out=Y), sync)
    row["auto_plan_matmat_us"] = per_call_us(lambda: plan.matmat(X), sync)
    row["cusparse_us"] = per_call_us(lambda: C @ X, sync)
    row["cusparse_out_us"] = per_call_us(lambda: sg.matvec(C, X, out=Y), sync)
    mirror = C._sg_mirror(_registry.registered()["cusparse"].residence, np.dtype(np.float64))
    direct = DirectSpMM(mirror, X, Y, "default")
    row["cusparse_spmm_call_us"] = per_call_us(direct, sync)
    direct.close()
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON result file")
    parser.add_argument("--label", default="this tree", help="name of the tree measured")
    args = parser.parse_args(argv)

    result = {"label": args.label, "calls": CALLS, "repeats": REPEATS, "gpu": {}, "cpu": {}}
    S = sp.random(900, 900, density=4000 / 900**2, format="csr", random_state=0)
    x_host = np.random.default_rng(0).uniform(-1, 1, 900)
    A = sg.csr_matrix(S)
    A.backend = "scipy"
    A_default = sg.csr_matrix(S)  # auto: the scipy backend on a machine without a GPU
    cpu = result["cpu"] = {"n_rows": 900, "nnz": int(S.nnz)}
    cpu["scipy_us"] = per_call_us(lambda: S @ x_host)
    cpu["sparsegpu_scipy_backend_us"] = per_call_us(lambda: A @ x_host)
    cpu["sparsegpu_default_backend_us"] = per_call_us(lambda: A_default @ x_host)
    cpu["ratio"] = cpu["sparsegpu_scipy_backend_us"] / cpu["scipy_us"]

    try:
        import cupy
        import cupyx.scipy.sparse as cupyx_sparse
    except ImportError:
        cupy = None
    if cupy is not None:
        sync = cupy.cuda.get_current_stream().synchronize
        S = sp.random(1000, 1000, density=0.01, format="csr", random_state=1)
        x = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, 1000))
        Acx = cupyx_sparse.csr_matrix(S)
        result["gpu"]["cupyx_us"] = per_call_us(lambda: Acx @ x, sync)
        for status in sg.backends():
            if not status.available or status.name == "scipy":
                continue
            B = sg.csr_matrix(S)
            B.backend = status.name
            result["gpu"][f"{status.name}_us"] = per_call_us(lambda B=B: B @ x, sync)
            plan = sg.engine._planning.plan_for(B, np.float64)
            result["gpu"][f"{status.name}_plan_only_us"] = per_call_us(
                lambda plan=plan: plan.matvec(x), sync
            )
        B = sg.csr_matrix(S)
        result["gpu"]["auto_us"] = per_call_us(lambda: B @ x, sync)
        result["gpu"]["pieces"] = pieces(B, x, cupy, sync)
        if any(b.name == "cusparse" and b.available for b in sg.backends()):
            B = sg.csr_matrix(S)
            B.backend = "cusparse"
            result["gpu"]["cusparse_pieces"] = cusparse_pieces(B, x, cupy, sync)
            result["gpu"]["blocks"] = block_products(S, cupy, sync)

    print(json.dumps(result, indent=1))
    blocks = result["gpu"].get("blocks")
    if blocks:
        print(
            f"A @ x: auto {blocks['a_at_x_us']:.1f} us, cusparse {blocks['cusparse_a_at_x_us']:.1f}"
            " us\nA @ X    auto   out=   plan   cusparse  out=  direct SpMM  (host us per call)"
        )
        for key, row in blocks.items():
            if isinstance(row, dict):
                print(
                    f"{key:8} {row['auto_us']:5.1f} {row['auto_out_us']:5.1f} "
                    f"{row['auto_plan_matmat_us']:5.1f}   {row['cusparse_us']:5.1f}  "
                    f"{row['cusparse_out_us']:5.1f}  {row['cusparse_spmm_call_us']:5.1f}  "
                    f"({row['auto_backend']})"
                )
    common.save_partial(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
