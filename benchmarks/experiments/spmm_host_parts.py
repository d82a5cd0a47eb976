"""The host's time of each step of a small ``A @ X``, one by one (issue 34's host path).

``spmm_host_path`` showed a small ``A @ X`` bound by the host: 10-15 us a call, of which
the plan's own call (``plan.matmat(X, out=Y)``) is 7-11 us and its launch alone
(``plan._matmat``) 6-8 us, where cuSPARSE's direct call costs 5-7 us. This times each
step of that path alone, best and median of 7 runs of ``N`` calls (host time only), on a
2-D 5-point stencil of 60^2 (the ``fit`` set's small matrix), float64, k = 8, C order.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spmm_host_parts --out parts.json --md parts.md
    python -m benchmarks.experiments.spmm_host_parts --from-json parts.json --md parts.md
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import numpy as np

import sparsegpu as sg
from benchmarks import common
from sparsegpu.datasets import synthetic
from sparsegpu.engine import _dispatch, _planning, _registry

N = 2000
RUNS = 7


def _time(fn, cupy) -> tuple[float, float]:
    """(best, median) host us a call of ``fn`` over RUNS runs of N calls."""
    runs = []
    for _ in range(RUNS):
        cupy.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        runs.append((time.perf_counter() - t0) * 1e6 / N)
    return min(runs), statistics.median(runs)


def markdown(result) -> str:
    lines = [
        f"# The host's time of each step of a small A @ X — {result['device']}",
        "",
        f"{result['matrix']}, k = {result['k']}: host us a call (best and median of {RUNS} "
        f"runs of {N} calls), the path's steps from the innermost out.",
        "",
        "| step | best us | median us |",
        "|---|---:|---:|",
    ]
    for name, (best, median) in result["parts_us"].items():
        lines.append(f"| `{name}` | {best:.2f} | {median:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--profile", action="store_true", help="also cProfile N products")
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, lambda rows: None, markdown, None)
    if cupy is None:
        return status
    from cupy_backends.cuda.api import driver

    S = synthetic.stencil_2d(60)
    dtype, k = np.dtype(np.float64), 8
    A = sg.csr_matrix(S)
    X = cupy.asarray(np.random.default_rng(0).standard_normal((S.shape[1], k)))
    Y = cupy.empty((S.shape[0], k))
    sg.choose(A, X)
    plan = _planning.plan_for(A, dtype, x=X)
    A @ X
    plan._matmat(X, Y)
    row_split = plan._row_split
    (launch, grid), *_ = next(iter(row_split._launches.values()))
    args_array = np.zeros(12, dtype=np.uint64)
    lock = threading.Lock()
    mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, dtype)
    direct = common.DirectSpMM(mirror, X, Y, "csr_alg3")
    get_stream = cupy.cuda.get_current_stream
    parts = {
        "get_current_stream()": get_stream,
        "get_current_stream().ptr": lambda: get_stream().ptr,
        "X.data.ptr": lambda: X.data.ptr,
        "X._c_contiguous": lambda: X._c_contiguous,
        "X.shape[1]": lambda: X.shape[1],
        "X.dtype == dtype": lambda: X.dtype == dtype,
        "numpy uint64 item set": lambda: args_array.__setitem__(3, 12345),
        "lock": lambda: lock.acquire() and lock.release(),
        "empty lambda": lambda: None,
        "driver.launchKernel": lambda: driver.launchKernel(
            launch._function, grid, *launch._shape, get_stream().ptr, launch._params_ptr, 0
        ),
        "launch.xy": lambda: launch.xy(grid, X, Y),
        "row_split(X, Y)": lambda: row_split(X, Y),
        "plan._matmat(X, Y)": lambda: plan._matmat(X, Y),
        "plan.takes_out(X, Y)": lambda: plan.takes_out(X, Y),
        "plan.matmat(X, out=Y)": lambda: plan.matmat(X, out=Y),
        "plan._block_results.take": lambda: plan._block_results.take(k, False),
        "plan.matmat(X)": lambda: plan.matmat(X),
        "_dispatch.apply(A, X)": lambda: _dispatch.apply(A, X),
        "A @ X": lambda: A @ X,
        "cupy.empty((n, k))": lambda: cupy.empty((S.shape[0], k)),
        "cuSPARSE ALG3 direct": direct,
    }
    result = common.gpu_header("full")
    result["matrix"], result["k"] = "stencil2d5_60 float64 C", k
    result["parts_us"] = {}
    for name, fn in parts.items():
        result["parts_us"][name] = _time(fn, cupy)
        print(name, result["parts_us"][name], file=sys.stderr, flush=True)
    cupy.cuda.get_current_stream().synchronize()
    direct.close()
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(lambda: [A @ X for _ in range(N)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
