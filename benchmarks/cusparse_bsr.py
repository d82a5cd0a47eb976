"""cuSPARSE's BSR products (the ``cusparse_bsr`` backend) against cuSPARSE CSR and ``auto``.

Issue 35's measurement of the BSR classes' GPU backend. Two parts:

``support``
    which block shapes, value and index dtypes and block orders cuSPARSE's generic BSR
    SpMV and SpMM take on this device (``CusparseBsrPlan.refused`` / ``spmm_refused``),
    each product checked against scipy's on a small matrix.
``timing``
    meshes with ``b`` unknowns per node (a 3-D grid of nodes, each coupled to its 27
    neighbours, as trilinear hexahedra couple them: dense ``b x b`` blocks, the block
    pattern of elasticity with b = 3), generated on the device, float64 and float32, the
    median time (CUDA events, the one harness: ``sparsegpu.measure.measure.time_candidates``) of

    ``cusparse_bsr``
        :func:`sparsegpu.backends.cusparse_bsr.bsr_plan` of the blocks (default policy;
        ``cusparse_bsr_column``: blocks copied column-major), descriptors made once;
    ``cusparse_csr_alg1`` / ``_alg2``
        cuSPARSE CSR SpMV of the same matrix's CSR arrays (built on the device from the
        blocks), descriptors made once: cuSPARSE called directly;
    ``auto_csr``
        ``sparsegpu.csr_matrix`` of those CSR arrays, planned by measurement
        (``sparsegpu.choose``), then ``A @ x``: the best CSR path of ours;

    and ``A @ X`` with 8 columns (C order) for the two cuSPARSE formats. Every answer is
    checked against scipy's (float64) first. GB/s counts each format's own bytes once
    (values, indices, pointers, x, y); ``byte_bound`` is CSR's bytes over BSR's.

No matrix here took part in fitting anything: the backend has no tuned thresholds.

Usage (on a GPU machine; ``--from-json`` redraws the summary without one)::

    python -m benchmarks.cusparse_bsr --out cusparse_bsr.json --md cusparse_bsr.md
    python -m benchmarks.cusparse_bsr --from-json cusparse_bsr.json --md cusparse_bsr.md
"""

from __future__ import annotations

import functools
import json
import sys
import time

import numpy as np
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import common
from sparsegpu.backends.cusparse import CusparsePlan, CusparsePolicy
from sparsegpu.backends.cusparse_bsr import CusparseBsrPolicy, bsr_plan
from sparsegpu.device import _cuda
from sparsegpu.device._block_mirror import DeviceBlockMatrix
from sparsegpu.measure import spmv_bytes, time_candidates, tolerance

SUPPORT_BLOCKS = [(1, 1), (2, 2), (3, 3), (4, 4), (6, 6), (8, 8), (2, 3), (3, 2)]
# (unknowns per node, nodes per grid side): 7M to 17M stored values
MESHES = [(2, 48), (3, 40), (6, 26)]
COLUMNS = 8


def mesh(cupy, b: int, n: int, dtype, seed: int = 0) -> DeviceBlockMatrix:
    """A 3-D grid of n^3 nodes, each coupled to its (up to) 27 neighbours by a dense b x b
    block of seeded random values, as a block mirror on the device."""
    side = cupy.arange(n)
    i, j, k = (a.ravel() for a in cupy.meshgrid(side, side, side, indexing="ij"))
    steps = cupy.asarray([(a, c, d) for a in (-1, 0, 1) for c in (-1, 0, 1) for d in (-1, 0, 1)])
    ni, nj, nk = (coord[:, None] + steps[None, :, axis] for axis, coord in enumerate((i, j, k)))
    inside = (ni >= 0) & (ni < n) & (nj >= 0) & (nj < n) & (nk >= 0) & (nk < n)
    neighbours = (ni * n + nj) * n + nk
    indices = neighbours[inside].astype(np.int32)
    indptr = cupy.zeros(n**3 + 1, dtype=np.int32)
    indptr[1:] = cupy.cumsum(inside.sum(axis=1))
    rng = cupy.random.default_rng(seed)
    data = rng.standard_normal((indices.size, b, b)).astype(dtype)
    return DeviceBlockMatrix.from_device(indptr, indices, data, (n**3 * b, n**3 * b))


def _host_bsr(m: DeviceBlockMatrix) -> sp.bsr_matrix:
    return sp.bsr_matrix((m.data.get(), m.indices.get(), m.indptr.get()), shape=m.shape)


def _bsr_bytes(m: DeviceBlockMatrix, columns: int = 1) -> int:
    value, index = m.dtype.itemsize, m.index_dtype.itemsize
    n_rows, n_cols = m.shape
    return (
        m.n_blocks * (m.blocksize[0] * m.blocksize[1] * value + index)
        + (m.indptr.shape[0]) * index
        + columns * (n_rows + n_cols) * value
    )


def _check(name, y, expected, dtype, row_length):
    y = y.get() if hasattr(y, "get") else y
    scale = max(float(np.abs(expected).max()), 1.0)
    error = float(np.abs(y.astype(np.complex128) - expected).max()) if y.size else 0.0
    bound = tolerance(dtype, row_length) * scale
    if not error <= bound:
        raise AssertionError(f"{name}: error {error:.3e} > {bound:.3e}")
    return error


def support(cupy) -> list[dict]:
    rows = []
    rng = np.random.default_rng(1)
    for R, C in SUPPORT_BLOCKS:
        S = sp.random(10 * R, 8 * C, density=0.3, random_state=2, format="csr")
        for dtype in (np.float32, np.float64, np.complex64, np.complex128):
            B = sp.bsr_matrix(S.astype(dtype), blocksize=(R, C))
            x = rng.standard_normal(B.shape[1]).astype(dtype)
            X = rng.standard_normal((B.shape[1], 3)).astype(dtype)
            for index_dtype in (np.int32, np.int64):
                for order in ("row", "column"):
                    arrays = [cupy.asarray(a.astype(index_dtype)) for a in (B.indptr, B.indices)]
                    plan = bsr_plan(
                        *arrays, cupy.asarray(B.data), B.shape,
                        CusparseBsrPolicy(block_order=order, source="probe"),
                    )  # fmt: skip
                    row_length = 8 * C
                    _check("matvec", plan.matvec(cupy.asarray(x)), B @ x, dtype, row_length)
                    _check("matmat", plan.matmat(cupy.asarray(X)), B @ X, dtype, row_length)
                    rows.append(
                        {
                            "blocksize": [R, C],
                            "dtype": np.dtype(dtype).name,
                            "index_dtype": np.dtype(index_dtype).name,
                            "block_order": order,
                            "spmv": plan.refused or "bsr",
                            "spmm": plan.refused or plan.spmm_refused or "bsr",
                        }
                    )
    return rows


def timing(cupy) -> list[dict]:
    rows = []
    for b, n in MESHES:
        for dtype in (np.float64, np.float32):
            row = _time_mesh(cupy, b, n, dtype)
            rows.append(row)
            print(
                f"{row['matrix']:42s} {row['dtype']:8s} "
                + " ".join(f"{k}={v:.3f}" for k, v in row["ms"].items())
                + f"  bsr/best-csr {row['bsr_vs_best_csr']:.2f}x (bound {row['byte_bound']:.2f})",
                flush=True,
            )
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _time_mesh(cupy, b: int, n: int, dtype) -> dict:
    """One mesh in one dtype: every contender checked against scipy, then timed."""
    blocks = mesh(cupy, b, n, dtype)
    csr = blocks.to_csr()
    host = _host_bsr(blocks).astype(np.float64)
    rng = np.random.default_rng(3)
    x = cupy.asarray(rng.standard_normal(blocks.shape[1]), dtype)
    X = cupy.asarray(rng.standard_normal((blocks.shape[1], COLUMNS)), dtype)
    y = cupy.empty(blocks.shape[0], dtype)
    Y = cupy.empty((blocks.shape[0], COLUMNS), dtype)
    expected, expected_X = host @ x.get().astype(np.float64), host @ X.get().astype(np.float64)
    row_length = 27 * b
    column = CusparseBsrPolicy(block_order="column", source="benchmark")
    plans = {
        "cusparse_bsr": bsr_plan(blocks.indptr, blocks.indices, blocks.data, blocks.shape),
        "cusparse_bsr_column": bsr_plan(
            blocks.indptr, blocks.indices, blocks.data, blocks.shape, column
        ),
        "cusparse_csr_alg1": CusparsePlan(csr, CusparsePolicy(algorithm="csr_alg1")),
        "cusparse_csr_alg2": CusparsePlan(csr, CusparsePolicy(algorithm="csr_alg2")),
    }
    A = sg.csr_matrix((csr.data.get(), csr.indices.get(), csr.indptr.get()), shape=csr.shape)
    started = time.perf_counter()
    choice = sg.choose(A, x)
    planning_s = time.perf_counter() - started
    calls = {name: functools.partial(p.matvec, x, out=y) for name, p in plans.items()}
    calls["auto_csr"] = functools.partial(A.__matmul__, x)
    errors = {name: _check(name, c(), expected, dtype, row_length) for name, c in calls.items()}
    matmat = {
        f"{name}_X{COLUMNS}": functools.partial(plans[name].matmat, X, out=Y)
        for name in ("cusparse_bsr", "cusparse_csr_alg1")
    }
    errors.update(
        {name: _check(name, c(), expected_X, dtype, row_length) for name, c in matmat.items()}
    )
    ms = {name: t.median_ms for name, t in time_candidates({**calls, **matmat}, repeat=15).items()}
    bsr_bytes = _bsr_bytes(blocks)
    csr_bytes = spmv_bytes(*csr.shape, csr.nnz, csr.dtype.itemsize, csr.index_dtype.itemsize)
    best_csr = min(ms["cusparse_csr_alg1"], ms["cusparse_csr_alg2"], ms["auto_csr"])
    return {
        "matrix": f"mesh 27-point {n}^3 nodes, {b}x{b} blocks",
        "dtype": np.dtype(dtype).name,
        "rows": blocks.shape[0],
        "nnz": blocks.nnz,
        "blocks": blocks.n_blocks,
        "bsr_refused": plans["cusparse_bsr"].refused,
        "bsr_spmm_refused": plans["cusparse_bsr"].spmm_refused,
        "auto_csr_choice": f"{choice.backend} {choice.policy!r}",
        "auto_planning_s": planning_s,
        "ms": ms,
        "max_error": errors,
        "gb_per_s": {
            name: (bsr_bytes if "bsr" in name else csr_bytes) / (t * 1e-3) / 1e9
            for name, t in ms.items()
            if "_X" not in name
        },
        "byte_bound": csr_bytes / bsr_bytes,
        "bsr_vs_best_csr": best_csr / min(ms["cusparse_bsr"], ms["cusparse_bsr_column"]),
    }


def markdown(result: dict) -> str:
    """The Markdown summary of a result: the support table by block shape, the timings."""
    lines = [f"# cuSPARSE BSR on {result['device']}", "", "## Which blocks run as BSR", ""]
    lines += ["| block | SpMV | SpMM |", "|---|---|---|"]
    shapes: dict = {}
    for r in result["support"]:
        spmv, spmm = shapes.setdefault("x".join(map(str, r["blocksize"])), (set(), set()))
        spmv.add("BSR" if r["spmv"] == "bsr" else "CSR fallback")
        spmm.add(f"BSR ({r['block_order']}-major)" if r["spmm"] == "bsr" else "")
    for shape, (spmv, spmm) in shapes.items():
        lines.append(
            f"| {shape} | {', '.join(sorted(spmv))} | {', '.join(sorted(spmm - {''})) or '-'} |"
        )
    lines += ["", "## Products (median ms)", ""]
    names = list(result.get("timing", [{}])[0].get("ms", {}))
    lines += ["| matrix | dtype | " + " | ".join(names) + " | BSR / best CSR | bound |"]
    lines += ["|---" * (len(names) + 4) + "|"]
    for r in result.get("timing", []):
        cells = " | ".join(f"{r['ms'][n]:.3f}" for n in names)
        lines.append(
            f"| {r['matrix']} | {r['dtype']} | {cells} | {r['bsr_vs_best_csr']:.2f}x "
            f"| {r['byte_bound']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = common.parser(__doc__, common.output_arguments(plot=False))
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(result))
        return 0
    if not args.out:
        parser.error("--out is needed to measure (or --from-json to summarise)")
    reason = _cuda.unavailable_reason()
    if reason is not None:
        print(f"needs a GPU: {reason}", file=sys.stderr)
        return 2
    cupy = _cuda.cupy_or_none()
    result = {
        "device": _cuda.device_info().name,
        "versions": _cuda.versions(),
        "support": support(cupy),
    }
    refused = [r for r in result["support"] if r["spmv"] != "bsr" or r["spmm"] != "bsr"]
    print(f"support: {len(result['support'])} combinations, {len(refused)} not fully BSR")
    for r in refused:
        print(f"  {r}")
    if not args.skip_timing:
        result["timing"] = timing(cupy)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
