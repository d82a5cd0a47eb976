"""Where a small ``A @ X`` spends its time: the host's calls or the GPU's kernels (issue 34).

On the small SuiteSparse matrices ``A @ X`` ran at 0.78x the best of cuSPARSE (called
directly), cupyx and torch (``spmm_heldout_small_h100``): 9.4-10 us a product where
cuSPARSE's direct call takes 4.7-6 us. For each matrix, dtype, memory order and k this
measures, for ``A @ X`` (no ``out=``), ``auto``'s plan into one Y (``plan.matmat(X,
out=Y)``), the same without its operand checks (``plan._matmat(X, Y)``) and cuSPARSE's
SpMM called directly with each algorithm:

``host_us``
    the host's time per call over a loop of ``LOOP`` calls, before the synchronisation
    (what the host costs, whatever the GPU does);
``loop_us``
    CUDA events around the same loop, after a lead call (what a user's loop sees: the
    larger of the host's time and the GPU's);
``gpu_us``
    the calls captured into a CUDA graph and the graph launched (no host work per call:
    the GPU's own time per product, launch gaps included); not for ``A @ X``, which
    allocates.

Median of 9 samples each, the contenders in alternation. Matrices (not the held-out ones
the claims are made on): the ``fit`` set's 2-D 5-point stencil 60^2 and the bundled
SuiteSparse matrices outside ``spmm.py``'s held-out list with at least 1,000 rows
(``cryg2500``, ``cti``, ``jagmesh7``, ``zenios``).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spmm_host_path --out host_path.json --md host_path.md
"""

from __future__ import annotations

import functools
import statistics
import sys
import time

import numpy as np

import sparsegpu as sg
from benchmarks import common
from sparsegpu import datasets
from sparsegpu.backends import cusparse as cusparse_backend
from sparsegpu.engine import _planning, _registry

LOOP = 50
REPEAT = 9
KS = (2, 8, 32)
GRAPHED = ("plan(out=Y)",)


def matrices(which: str = "small") -> dict:
    """The small fit matrices, or (``"large"``) the ``fit`` set's R-MAT graph and
    1000^2 stencil, whose products the GPU's time decides (``common.spmm_set``'s)."""
    fit = common.spmm_synthetic("fit", quick=False)
    if which == "large":
        return {name: fit[name] for name in ("rmat_s17_e8", "stencil2d5_1000")}
    out = {"stencil2d5_60": fit["stencil2d5_60"]}
    for name in ("cryg2500", "cti", "jagmesh7", "zenios"):
        out[name] = lambda name=name: datasets.load(name).tocsr()
    return out


def _host_and_loop(fns: dict, cupy) -> dict:
    """``{name: (host_us, loop_us)}``: medians over REPEAT samples, in alternation."""
    stream = cupy.cuda.get_current_stream()
    samples = {name: ([], []) for name in fns}
    for _ in range(REPEAT):
        for name, fn in fns.items():
            fn()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            t0 = time.perf_counter()
            for _ in range(LOOP):
                fn()
            host = time.perf_counter() - t0
            stop.record(stream)
            stop.synchronize()
            samples[name][0].append(host * 1e6 / LOOP)
            samples[name][1].append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / LOOP)
    return {name: tuple(statistics.median(s) for s in pair) for name, pair in samples.items()}


def _graph_us(fn, cupy) -> float | None:
    """The GPU's time per call of ``fn`` captured LOOP times into a CUDA graph (None where
    the call cannot be captured)."""
    stream = cupy.cuda.get_current_stream()
    try:
        stream.begin_capture()
        try:
            for _ in range(LOOP):
                fn()
        finally:
            graph = stream.end_capture()
    except Exception:
        return None
    graph.launch(stream)
    times = []
    for _ in range(REPEAT):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        graph.launch(stream)
        stop.record(stream)
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / LOOP)
    return statistics.median(times)


def bench_one(name, S, dtype, order, k, cupy) -> dict:
    A = sg.csr_matrix(S.astype(dtype))
    rng = np.random.default_rng(3)
    X = cupy.asarray(rng.standard_normal((S.shape[1], k)).astype(dtype), order=order)
    choice = sg.choose(A, X)
    plan = _planning.plan_for(A, np.dtype(dtype), x=X)
    Y = cupy.empty((S.shape[0], k), dtype=dtype, order=order)
    expected = A @ X
    fns = {
        "A @ X": lambda: A @ X,
        "plan(out=Y)": lambda: plan.matmat(X, out=Y),
        "plan._matmat": lambda: plan._matmat(X, Y),
        "plan.matmat(X)": lambda: plan.matmat(X),
    }
    mirror = A._sg_mirror(_registry.registered()["cusparse"].residence, np.dtype(dtype))
    directs = []
    for algorithm in cusparse_backend.SPMM_ALGORITHMS:
        try:
            direct = common.DirectSpMM(mirror, X, Y, algorithm)
            direct()
        except Exception:
            continue
        directs.append(direct)
        fns[f"cusparse {algorithm}"] = direct
    if directs:  # a new Y each call (CuPy's pool), as A @ X makes one, then cuSPARSE
        fns["new Y + cusparse"] = lambda: (cupy.empty_like(Y), directs[0]())
    for what, fn in fns.items():
        Y.fill(0)
        got = fn()
        got = Y if got is None else got
        got = got[0] if isinstance(got, tuple) else got
        if what != "new Y + cusparse" and not bool(
            cupy.allclose(got, expected, rtol=1e-4, atol=1e-4)
        ):
            raise AssertionError(f"{name} {dtype} {order} k={k}: {what} is wrong")
    timed = _host_and_loop(fns, cupy)
    gpu = {w: _graph_us(fn, cupy) for w, fn in fns.items() if w in GRAPHED or w.startswith("cusp")}
    for direct in directs:
        direct.close()
    return {
        "matrix": name, "dtype": np.dtype(dtype).name, "order": order, "k": k,
        "n_rows": S.shape[0], "nnz": int(S.nnz),
        "auto": f"{choice.backend} {choice.policy!r}",
        "host_us": {w: t[0] for w, t in timed.items()},
        "loop_us": {w: t[1] for w, t in timed.items()},
        "gpu_us": gpu,
    }  # fmt: skip


def _cell(host, loop, gpu, what) -> str:
    g = gpu.get(what)
    return f"{host[what]:.1f} / {loop[what]:.1f} / " + ("—" if g is None else f"{g:.1f}")


def markdown(result) -> str:
    lines = [
        f"# Where a small A @ X spends its time — {result['device']}",
        "",
        f"us a call: host = the host's time a call over {LOOP} calls; loop = CUDA events "
        "around that loop; gpu = the same calls captured in a CUDA graph. cuSPARSE = its "
        "fastest algorithm in the loop.",
        "",
        "| matrix | dtype | order | k | auto | A @ X host / loop | plan host / loop / gpu "
        "| _matmat host | cuSPARSE host / loop / gpu |",
        "|---|---|---|---:|---|---|---|---:|---|",
    ]
    for r in result["results"]:
        h, lo, g = r["host_us"], r["loop_us"], r["gpu_us"]
        best = min((w for w in lo if w.startswith("cusparse")), key=lo.get, default=None)
        cell = functools.partial(_cell, h, lo, g)
        lines.append(
            f"| {r['matrix']} | {r['dtype']} | {r['order']} | {r['k']} | "
            f"{r['auto'].split('(')[0]} | {h['A @ X']:.1f} / {lo['A @ X']:.1f} | "
            f"{cell('plan(out=Y)')} | {h['plan._matmat']:.1f} | "
            f"{cell(best) + ' ' + best[9:] if best else '—'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--matrices", choices=("small", "large"), default="small")
    args = parser.parse_args(argv)
    cupy, status = common.begin(args, lambda rows: None, markdown, None)
    if cupy is None:
        return status
    result = common.gpu_header("full")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for name, build in matrices(args.matrices).items():
            S = build()
            for dtype in (np.float64, np.float32):
                for order in ("C", "F"):
                    for k in KS:
                        print(f"{name} {np.dtype(dtype).name} {order} {k}", file=sys.stderr)
                        row = bench_one(name, S, dtype, order, k, cupy)
                        result["results"].append(row)
        stream.synchronize()
    common.write_outputs(result, args, markdown, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
