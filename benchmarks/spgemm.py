"""sparsegpu ``A @ B`` (sparse times sparse) against cupyx, cuSPARSE called directly and scipy.

For each matrix and dtype, the time to a sparsegpu result whose device copy is kept
(``C = A @ B`` on sparsegpu matrices whose mirrors exist: what a chain ``A @ B @ C`` or a
solve on ``C`` pays), against:

- ``cupyx``: ``cupyx.scipy.sparse`` ``A @ B`` on the same device arrays;
- ``cusparse_alg1``: cuSPARSE SpGEMM ALG1 called directly, as a C program does it (the
  operands' descriptors made once; per product: C's descriptor, the SpGEMM descriptor,
  work estimation, compute, copy);
- ``scipy``: scipy's product on the host (float64; one sample, it takes seconds), against
  sparsegpu's time *including the host copy* of the result (``C.data`` read: all three
  arrays downloaded).

sparsegpu is timed twice: ``planned`` (``A @ B`` after warm-up: the first product ran
ALG1, the second planned the pair by measurement, the rest run the winner, which may be
``SpGEMMreuse`` since the benchmark multiplies the same patterns again) and ``alg1``
(``sg.spgemm(A, B, algorithm="alg1")``: the unplanned path, every product from scratch,
exactly cupyx's work).

Timing: the GPU columns in alternation (one sample of each per round, the order rotating;
median of ``--repeat``, CUDA events) after a warm-up; every answer checked first
(sparsegpu's and cuSPARSE's against cupyx's: same structure, values within the dtype's
tolerance; float64 also against scipy on the first rows). Peak device memory: the growth
of CuPy's pool over one product (work buffers and result), through an allocator that
records the pool's high-water mark; sparsegpu's ``planned`` adds what it keeps between
products (a reuse plan's buffers and structure).

Blocked completion: with CuPy's pool limited so that ALG1's buffers do not fit beside the
operands and the result, ``A @ B`` on the first matrix must complete (a lean algorithm or
row blocks) and agree; then again with the lean algorithms switched off (row blocks only).

Matrices: nothing was fitted or tuned for SpGEMM (planning has no thresholds); none of
these matrices took part in writing the code (which was tested on the small awkward
matrices of ``sparsegpu.testing`` only).

Usage (on a GPU machine)::

    python -m benchmarks.spgemm --out spgemm.json --md spgemm.md
    python -m benchmarks.spgemm --scale small              # a quick check
    python -m benchmarks.spgemm --from-json spgemm.json --md spgemm.md   # no GPU
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time

import numpy as np
import scipy
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common
from benchmarks.common import GALERKIN, DirectSpGEMM
from sparsegpu import measure
from sparsegpu.backends import spgemm
from sparsegpu.device import _cuda, _mirror
from sparsegpu.engine import _sparse_dispatch
from sparsegpu.measure import tolerance

# the bars of issue 34
CUPYX_BAR = 1.0
SCIPY_BAR = 10.0


matrices = common.spgemm_matrices
galerkin_matrices = common.galerkin_matrices


def aggregation(n: int) -> sp.csr_matrix:
    """Piecewise-constant prolongation of an n x n grid onto its 2 x 2 aggregates."""
    i, j = np.divmod(np.arange(n * n), n)
    coarse = (i // 2) * ((n + 1) // 2) + j // 2
    return sp.csr_matrix(
        (np.ones(n * n), (np.arange(n * n), coarse)), shape=(n * n, ((n + 1) // 2) ** 2)
    )


class PeakTracker:
    """An allocator over CuPy's pool recording the pool's high-water mark."""

    def __init__(self, pool):
        self.pool = pool
        self.peak = pool.used_bytes()

    def malloc(self, size):
        memory = self.pool.malloc(size)
        self.peak = max(self.peak, self.pool.used_bytes())
        return memory


def peak_of(fn, cupy):
    """``(bytes the pool grew by at most during fn(), fn's result)``."""
    pool = cupy.get_default_memory_pool()
    cupy.cuda.get_current_stream().synchronize()
    base = pool.used_bytes()
    tracker = PeakTracker(pool)
    cupy.cuda.set_allocator(tracker.malloc)
    try:
        result = fn()
        cupy.cuda.get_current_stream().synchronize()
    finally:
        cupy.cuda.set_allocator(pool.malloc)
    return tracker.peak - base, result


def device_csr(M):
    """(indptr, indices, data) of a sparsegpu result, a cupyx matrix or a direct result,
    on the device, without a host copy."""
    if hasattr(M, "_sg_pending") and "_sg_pending" in M.__dict__:
        d = M.__dict__["_sg_pending"].device
        return d.indptr, d.indices, d.data
    if isinstance(M, tuple):
        return M
    return M.indptr, M.indices, M.data


def agree(ours, reference, dtype, cupy) -> str | None:
    """None when ``ours`` has ``reference``'s structure and values within tolerance, else
    what differs."""
    a, b = device_csr(ours), device_csr(reference)
    if a[1].shape != b[1].shape:
        return f"{a[1].shape[0]:,} nonzeros against {b[1].shape[0]:,}"
    if not (bool(cupy.array_equal(a[0], b[0])) and bool(cupy.array_equal(a[1], b[1]))):
        return "another structure"
    scale = float(cupy.abs(b[2]).max()) if b[2].size else 0.0
    error = float(cupy.abs(a[2] - b[2]).max()) if b[2].size else 0.0
    tol = tolerance(dtype, 1000) * max(scale, 1e-300)
    return None if error <= tol else f"max error {error:.3e} > {tol:.3e}"


def agree_with_scipy(C, expected, dtype, rows=20_000) -> str | None:
    """None when the first ``rows`` rows of sparsegpu's (host) result match scipy's."""
    ours, theirs = sp.csr_matrix(C)[:rows], expected.tocsr()[:rows]
    difference = abs(ours - theirs).max() if ours.nnz or theirs.nnz else 0.0
    tol = tolerance(dtype, 1000) * max(abs(theirs).max() if theirs.nnz else 0.0, 1e-300)
    return (
        None if difference <= tol else f"max error {difference:.3e} > {tol:.3e} (first {rows} rows)"
    )


def aggregation_3d(n: int) -> sp.csr_matrix:
    """Piecewise-constant prolongation of an n x n x n grid onto its 2 x 2 x 2 aggregates."""
    i, j, k = np.unravel_index(np.arange(n**3), (n, n, n))
    m = (n + 1) // 2
    coarse = ((i // 2) * m + j // 2) * m + k // 2
    return sp.csr_matrix((np.ones(n**3), (np.arange(n**3), coarse)), shape=(n**3, m**3))


def random_aggregation(n: int, size: int, seed: int = 0) -> sp.csr_matrix:
    """Piecewise-constant prolongation onto n // size aggregates of random points (each
    aggregate nonempty)."""
    m = max(n // size, 1)
    coarse = np.random.default_rng(seed).permutation(n) % m
    return sp.csr_matrix((np.ones(n), (np.arange(n), coarse)), shape=(n, m))


def prolongation(form, S, dtype):
    """The aggregation of a Galerkin form (None for the others): ``P.T@A@P`` a 2-D grid's
    2 x 2 aggregates, ``P.T@A@P 3-D`` a 3-D grid's 2 x 2 x 2, ``P.T@A@P random`` random
    aggregates of 4 points."""
    if not form.startswith(GALERKIN):
        return None
    n = S.shape[0]
    kind = form[len(GALERKIN) :].strip()
    if kind == "3-D":
        P = aggregation_3d(int(round(n ** (1 / 3))))
    elif kind == "random":
        P = random_aggregation(n, 4)
    else:
        P = aggregation(int(round(math.sqrt(n))))
    if P.shape[0] != n:
        raise ValueError(f"{form}: the aggregation has {P.shape[0]} rows, A has {n}")
    return P.astype(dtype)


def scipy_product(form, S, P):
    """The product of ``form`` as a scipy user writes it."""
    if form == "A@A":
        return S @ S
    if form == "A.T@A":
        return S.T @ S
    return P.T @ S @ P


def product_fns(form, S, dtype, cupy, cupyx_sparse):
    """``{column: fn}`` of the GPU contenders and the sparsegpu matrices."""
    P = prolongation(form, S, dtype)
    A = sg.csr_matrix(S.astype(dtype))
    Acx = cupyx_sparse.csr_matrix(A)
    Acx.sum_duplicates()
    if form == "A@A":
        B, Bcx = A, Acx
        fns = {"planned": lambda: A @ B, "alg1": lambda: sg.spgemm(A, B, algorithm="alg1")}
        fns["cupyx"] = lambda: Acx @ Bcx
    elif form == "A.T@A":
        fns = {
            "planned": lambda: A.T @ A,
            "alg1": lambda: sg.spgemm(A.T, A, algorithm="alg1"),
            "cupyx": lambda: Acx.T @ Acx,
        }
    else:
        Psg = sg.csr_matrix(P)
        Pcx = cupyx_sparse.csr_matrix(P)
        fns = {
            "planned": lambda: sg.galerkin_product(A, Psg),
            "cupyx": lambda: Pcx.T @ Acx @ Pcx,
        }
    return fns, A, P


def run_matrix(name, form, builder, dtypes, repeat, cupy, cupyx_sparse, log) -> list:
    """The rows of one matrix (one per dtype)."""
    t0 = time.perf_counter()
    S = sp.csr_matrix(builder())
    S.sum_duplicates()
    log(f"{name}: {S.shape[0]:,} x {S.shape[1]:,}, {S.nnz:,} nonzeros, {form} "
        f"(built in {time.perf_counter() - t0:.1f} s)")  # fmt: skip
    rows = []
    for dtype in dtypes:
        rows.append(run_dtype(name, form, S, dtype, repeat, cupy, cupyx_sparse, log))
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def run_dtype(name, form, S, dtype, repeat, cupy, cupyx_sparse, log) -> dict:
    """The row of one matrix in one dtype."""
    row = {"matrix": name, "form": form, "dtype": np.dtype(dtype).name, "shape": S.shape}
    row["nnz"] = int(S.nnz)
    fns, A, P = product_fns(form, S, dtype, cupy, cupyx_sparse)
    planned = fns["planned"]
    for _ in range(3):  # the first product, the planned second, one on the plan
        planned()
    cupy.cuda.get_current_stream().synchronize()
    explain_args = (A, A) if form == "A@A" else (A.T, A) if form == "A.T@A" else None
    if explain_args is not None:
        plan = sg.explain(*explain_args)
        row["planned_algorithm"] = plan.algorithm
        row["plan"] = str(plan)
        row["held_bytes"] = plan.held_bytes
        mirrors = [m._sg_mirror(_mirror.CUPY, dtype) for m in explain_args]
        fns["cusparse_alg1"] = DirectSpGEMM(*[spgemm.canonical(m) for m in mirrors])
    reference = fns["cupyx"]()
    if reference.format != "csr":  # compared as CSR (timed as cupyx gives it)
        reference = reference.tocsr()
    row["result_nnz"] = int(reference.nnz)
    row["disagreements"] = {}
    for key, fn in fns.items():
        problem = None if key == "cupyx" else agree(fn(), reference, dtype, cupy)
        if problem is not None:
            row["disagreements"][key] = problem
    log(f"  {row['dtype']}: checked against cupyx ({row['result_nnz']:,} nonzeros): "
        f"{row['disagreements'] or 'all agree'}")  # fmt: skip
    for key, fn in fns.items():
        row[f"peak_{key}"] = int(peak_of(fn, cupy)[0])
    timings = measure.cuda_time_interleaved(fns, warmup=1, repeat=repeat)
    for key, timing in timings.items():
        row[f"{key}_ms"] = timing.median_ms
    row["planned_with_host_copy_ms"] = measure.host_time(
        lambda: planned().data, warmup=1, repeat=3
    ).median_ms
    if np.dtype(dtype) == np.float64:
        S64 = S.astype(dtype)
        start = time.perf_counter()
        expected = scipy_product(form, S64, P)
        row["scipy_ms"] = (time.perf_counter() - start) * 1e3
        problem = agree_with_scipy(planned(), expected, dtype)
        if problem is not None:
            row["disagreements"]["scipy"] = problem
    summary = ", ".join(f"{k} {row[f'{k}_ms']:.2f} ms" for k in fns)
    scipy_text = f", scipy {row['scipy_ms']:.0f} ms" if "scipy_ms" in row else ""
    log(f"  {row['dtype']}: {summary}{scipy_text}")
    return row


def blocked_completion(builder, cupy, log) -> dict:
    """``A @ A`` of the first matrix (float64) in a fresh CuPy pool limited to the operands,
    the result and a quarter of ALG1's work space: with the lean algorithms, then with row
    blocks only. A fresh pool, so that no free memory cached earlier escapes the limit."""
    S = sp.csr_matrix(builder())
    pool, previous = cupy.cuda.MemoryPool(), cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    engine = _sparse_dispatch.engine_for(_mirror.CUPY)
    lean = type(engine).lean_algorithms
    try:
        A = sg.csr_matrix(S)
        reference = sg.spgemm(A, A, algorithm="alg1")
        alg1_peak = sg.explain(A, A).peak_bytes
        result_bytes = sum(a.nbytes for a in device_csr(reference))
        out = {"alg1_peak": int(alg1_peak), "result_bytes": int(result_bytes), "runs": []}
        for label, lean_off in (("lean algorithms allowed", False), ("row blocks only", True)):
            pool.free_all_blocks()
            budget = result_bytes + (alg1_peak - result_bytes) // 4
            pool.set_limit(size=pool.total_bytes() + budget)
            if lean_off:
                type(engine).lean_algorithms = lambda self: ()
            run = {"how": label, "limit_over_operands": int(budget)}
            try:
                start = time.perf_counter()
                C = sg.spgemm(A, A, algorithm="alg1")
                cupy.cuda.get_current_stream().synchronize()
                run["ms"] = (time.perf_counter() - start) * 1e3
                last = sg.explain(A, A).last
                run.update(algorithm=last.algorithm, blocks=last.blocks, peak=last.peak_bytes)
            except MemoryError as exc:
                C, run["error"] = None, str(exc)
            finally:
                type(engine).lean_algorithms = lean
                pool.set_limit(size=0)
            if C is not None:  # checked without the limit (the check takes memory too)
                run["agrees"] = agree(C, reference, np.float64, cupy) is None
                del C
            log(f"  blocked completion ({label}): {run}")
            out["runs"].append(run)
        return out
    finally:
        cupy.cuda.set_allocator(previous)


def _ms(row, key) -> str:
    return f"{row[key]:.2f} ms" if key in row else "—"


def markdown(result: dict) -> str:
    lines = [
        "# sparsegpu `A @ B` against cupyx, cuSPARSE ALG1 called directly, and scipy",
        "",
        f"Device: {result.get('device', '?')}; CuPy {result.get('cupy', '?')}, "
        f"scipy {result.get('scipy', '?')}. Median of {result.get('repeat')} CUDA-event "
        "samples after warm-up, in alternation; answers checked against cupyx (and scipy "
        "for float64). Nothing was fitted or tuned on these matrices.",
        "",
        "| matrix | product | dtype | nnz in | nnz out | sparsegpu planned | sparsegpu ALG1 | "
        "cuSPARSE ALG1 | cupyx | x cupyx (planned / ALG1) | scipy (host) | "
        "x scipy incl. host copy | peak MiB: planned / ALG1 direct / cupyx | plan |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        ms = functools.partial(_ms, row)
        cupyx = row["cupyx_ms"]
        ratio = f"{cupyx / row['planned_ms']:.2f}x"
        if "alg1_ms" in row:
            ratio += f" / {cupyx / row['alg1_ms']:.2f}x"
        scipy_ratio = (
            f"{row['scipy_ms'] / row['planned_with_host_copy_ms']:.1f}x"
            if "scipy_ms" in row
            else "—"
        )
        held = row.get("held_bytes", 0)
        peaks = [row["peak_planned"] + held, row.get("peak_cusparse_alg1"), row["peak_cupyx"]]
        peak_text = " / ".join("—" if p is None else f"{p / 2**20:.0f}" for p in peaks)
        flag = (
            " (disagrees: " + ", ".join(row["disagreements"]) + ")" if row["disagreements"] else ""
        )
        lines.append(
            f"| {row['matrix']} | {row['form']} | {row['dtype']} | {row['nnz']:,} | "
            f"{row['result_nnz']:,} | {ms('planned_ms')} | {ms('alg1_ms')} | "
            f"{ms('cusparse_alg1_ms')} | {ms('cupyx_ms')} | {ratio} | "
            f"{ms('scipy_ms')} | {scipy_ratio} | {peak_text} | "
            f"{row.get('planned_algorithm', 'galerkin')}{flag} |"
        )
    blocked = result.get("blocked")
    if blocked:
        lines += ["", "Blocked completion (first matrix, float64, CuPy's pool limited to the "
                  f"operands + the result + a quarter of ALG1's work space; ALG1's peak "
                  f"{blocked['alg1_peak'] / 2**20:.0f} MiB, result "
                  f"{blocked['result_bytes'] / 2**20:.0f} MiB):", ""]  # fmt: skip
        for run in blocked["runs"]:
            lines.append(f"- {run['how']}: {json.dumps(run)}")
    lines += ["", "Planning (what `sg.explain(A, B)` printed for each):", ""]
    for row in result["rows"]:
        if "plan" in row:
            lines += [f"`{row['matrix']}` {row['dtype']}:", "", "```", row["plan"], "```", ""]
    return "\n".join(lines) + "\n"


def log(text) -> None:
    print(text, flush=True)


def start(args, render):
    """A benchmark's start: with ``--from-json``, its markdown (``--md``, by ``render``)
    and 0; without a GPU, why on stderr and 2; else ``(cupy, cupyx.scipy.sparse)``."""
    if args.from_json:
        result = json.loads(args.from_json.read_text())
        if args.md:
            args.md.write_text(render(result))
        return 0
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        print(f"no GPU: {_cuda.unavailable_reason()}", file=sys.stderr)
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    return cupy, cupyx_sparse


def finish(args, result, render) -> int:
    """A benchmark's end: ``result`` written (``--out``), rendered (``--md``) and printed."""
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    text = render(result)
    if args.md:
        args.md.write_text(text)
    print(text)
    return 0


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False, paths=True))
    parser.add_argument("--scale", choices=("full", "small"), default="full")
    parser.add_argument(
        "--set", choices=("main", "galerkin"), default="main",
        help="main: the products of matrices() and the blocked completion; galerkin: the "
        "Galerkin products of galerkin_matrices()",
    )  # fmt: skip
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", help="comma-separated matrix names")
    args = parser.parse_args(argv)
    started = start(args, markdown)
    if isinstance(started, int):
        return started
    cupy, cupyx_sparse = started
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    result = {
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "cupy": cupy.__version__,
        "scipy": scipy.__version__,
        "repeat": args.repeat,
        "scale": args.scale,
        "command": " ".join(sys.argv),
        "rows": [],
    }
    chosen = (matrices if args.set == "main" else galerkin_matrices)(args.scale, cupy)
    if args.only:
        keep = set(args.only.split(","))
        chosen = [m for m in chosen if m[0] in keep]
    for name, form, builder in chosen:
        result["rows"] += run_matrix(
            name, form, builder, dtypes, args.repeat, cupy, cupyx_sparse, log
        )
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))
    if args.set == "main":
        result["blocked"] = blocked_completion(chosen[0][2], cupy, log)
    return finish(args, result, markdown)


if __name__ == "__main__":
    sys.exit(main())
