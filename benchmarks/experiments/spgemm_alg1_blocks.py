"""Would a first ALG1 product gain from row blocks run side by side (issue 47)?

cuSPARSE ALG1's first product of power-law rows spends about a third of its wall clock with
the device idle (``spgemm_alg1_kernels_h200``: host work between its synchronizing calls),
and each part of a split by row products pays most of the whole's cost
(``spgemm_split_probe_h200``). This probe prices the other split: ``A @ A`` by ``k``
contiguous row blocks of about equal nonzeros of ``A``, each block's ALG1 product on its
own stream from its own host thread (every cuSPARSE call through ctypes, which lets go of
the interpreter lock while cuSPARSE waits), the blocks' results joined into one CSR
(``cupy.concatenate``: an upper bound on what writing into one result would cost).

Wall clock from the call to the synchronized result on fresh operands (made by a product,
as ``benchmarks.spgemm_first``'s calls mode makes them), medians of ``--repeat`` in turning
order with cupyx's ``A @ A``, sparsegpu's, cuSPARSE called through CuPy's bindings
(``DirectSpGEMM``) and the whole product through the ctypes calls in the calling thread
with ALG1 and with ``CUSPARSE_SPGEMM_DEFAULT`` (what cupyx asks for). A probe: nothing is
fitted on it. Found (``spgemm_alg1_blocks_h200``): two blocks took twice the whole's time
(cuSPARSE's calls do not overlap across streams), and DEFAULT is not reliably faster than
ALG1.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_alg1_blocks --out FILE.json [--heldout]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import queue
import threading

import numpy as np

from sparsegpu.backends.cusparse_spgemm import _library
from sparsegpu.datasets import synthetic

MODULE = "benchmarks.experiments.spgemm_alg1_blocks"

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_SZ = ctypes.POINTER(ctypes.c_size_t)
ALG1 = 3
INDEX = {np.dtype(np.int32): 2, np.dtype(np.int64): 3}
VALUE = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}
_CALL = [_P, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P, _P, ctypes.c_int, ctypes.c_int, _P]
SIGNATURES = {
    "cusparseCreate": [ctypes.POINTER(_P)],
    "cusparseSetStream": [_P, _P],
    "cusparseCreateCsr": [
        ctypes.POINTER(_P),
        _I64,
        _I64,
        _I64,
        _P,
        _P,
        _P,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
    ],  # fmt: skip
    "cusparseDestroySpMat": [_P],
    "cusparseSpGEMM_createDescr": [ctypes.POINTER(_P)],
    "cusparseSpGEMM_destroyDescr": [_P],
    "cusparseSpGEMM_workEstimation": [*_CALL, _SZ, _P],
    "cusparseSpGEMM_compute": [*_CALL, _SZ, _P],
    "cusparseSpGEMM_copy": _CALL,
    "cusparseSpMatGetSize": [_P, ctypes.POINTER(_I64), ctypes.POINTER(_I64), ctypes.POINTER(_I64)],
    "cusparseCsrSetPointers": [_P, _P, _P, _P],
}


class Lib:
    def __init__(self):
        lib = _library()
        for name, args in SIGNATURES.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ctypes.c_int
            setattr(self, name, self._checked(name, f))

    @staticmethod
    def _checked(name, f):
        def call(*args):
            status = f(*args)
            if status:
                raise RuntimeError(f"{name}: status {status}")

        return call


def alg1(lib, handle, indptr, indices, data, m, right, cupy, algorithm=ALG1):
    """ALG1 ``L @ right`` for L's rows given by (indptr from 0, indices, data)."""
    rp, ri, rd = right.indptr, right.indices, right.data
    itype, vtype = INDEX[indices.dtype], VALUE[data.dtype]
    a, b, c, d = _P(), _P(), _P(), _P()
    n = right.shape[1]
    lib.cusparseCreateCsr(
        ctypes.byref(a), m, right.shape[0], int(indices.size), indptr.data.ptr,
        indices.data.ptr, data.data.ptr, itype, itype, 0, vtype,
    )  # fmt: skip
    lib.cusparseCreateCsr(
        ctypes.byref(b), right.shape[0], n, int(ri.size), rp.data.ptr, ri.data.ptr,
        rd.data.ptr, itype, itype, 0, vtype,
    )  # fmt: skip
    c_indptr = cupy.empty(m + 1, dtype=indices.dtype)
    lib.cusparseCreateCsr(
        ctypes.byref(c), m, n, 0, c_indptr.data.ptr, None, None, itype, itype, 0, vtype
    )
    lib.cusparseSpGEMM_createDescr(ctypes.byref(d))
    one = np.ones(1, dtype=data.dtype)
    zero = np.zeros(1, dtype=data.dtype)
    args = (handle, 0, 0, one.ctypes.data, a, b, zero.ctypes.data, c, vtype, algorithm, d)
    size = ctypes.c_size_t(0)
    lib.cusparseSpGEMM_workEstimation(*args, ctypes.byref(size), None)
    buf1 = cupy.empty(size.value, dtype=np.int8)
    lib.cusparseSpGEMM_workEstimation(*args, ctypes.byref(size), buf1.data.ptr)
    size2 = ctypes.c_size_t(0)
    lib.cusparseSpGEMM_compute(*args, ctypes.byref(size2), None)
    buf2 = cupy.empty(size2.value, dtype=np.int8)
    lib.cusparseSpGEMM_compute(*args, ctypes.byref(size2), buf2.data.ptr)
    rows, cols, nnz = _I64(), _I64(), _I64()
    lib.cusparseSpMatGetSize(c, ctypes.byref(rows), ctypes.byref(cols), ctypes.byref(nnz))
    c_indices = cupy.empty(nnz.value, dtype=indices.dtype)
    c_data = cupy.empty(nnz.value, dtype=data.dtype)
    lib.cusparseCsrSetPointers(c, c_indptr.data.ptr, c_indices.data.ptr, c_data.data.ptr)
    lib.cusparseSpGEMM_copy(*args)
    for x in (a, b, c):
        lib.cusparseDestroySpMat(x)
    lib.cusparseSpGEMM_destroyDescr(d)
    del buf1, buf2
    return c_indptr, c_indices, c_data


class Worker(threading.Thread):
    def __init__(self, lib, cupy, device):
        super().__init__(daemon=True)
        self.lib, self.cupy, self.device = lib, cupy, device
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.start()

    def run(self):
        cupy = self.cupy
        cupy.cuda.Device(self.device).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        handle = _P()
        self.lib.cusparseCreate(ctypes.byref(handle))
        self.lib.cusparseSetStream(handle, _P(self.stream.ptr))
        while True:
            job, done = self.jobs.get()
            try:
                with self.stream:
                    out = job(handle)
                    self.stream.synchronize()
                done.put(out)
            except Exception as exc:  # reported to the caller
                done.put(exc)


def blocked(A, workers, cuts, cupy, lib):
    """``A @ A`` by the row blocks ``cuts`` (host row numbers, with 0 and m), one worker each."""
    done: queue.SimpleQueue = queue.SimpleQueue()
    starts = cupy.asnumpy(A.indptr[cupy.asarray(cuts)])  # one read of the blocks' offsets
    cupy.cuda.get_current_stream().synchronize()
    for k, w in enumerate(workers[: len(cuts) - 1]):
        r0, r1, e0, e1 = cuts[k], cuts[k + 1], int(starts[k]), int(starts[k + 1])

        def job(handle, k=k, r0=r0, r1=r1, e0=e0, e1=e1):
            indptr = A.indptr[r0 : r1 + 1] - A.indptr.dtype.type(e0)
            return k, alg1(lib, handle, indptr, A.indices[e0:e1], A.data[e0:e1], r1 - r0, A, cupy)

        w.jobs.put((job, done))
    parts = {}
    for _ in range(len(cuts) - 1):
        out = done.get()
        if isinstance(out, Exception):
            raise out
        parts[out[0]] = out[1]
    parts = [parts[k] for k in range(len(cuts) - 1)]
    sizes = np.array([p[1].size for p in parts], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    indptr = cupy.concatenate(
        [p[0][:-1] + p[0].dtype.type(o) for p, o in zip(parts, offsets[:-1], strict=True)]
        + [cupy.asarray([offsets[-1]], dtype=parts[0][0].dtype)]
    )
    return indptr, cupy.concatenate([p[1] for p in parts]), cupy.concatenate([p[2] for p in parts])


def nnz_cuts(A, k, cupy):
    targets = cupy.arange(1, k, dtype=np.int64) * int(A.nnz) // k
    rows = cupy.asnumpy(cupy.searchsorted(A.indptr, targets.astype(A.indptr.dtype)))
    return [0, *(int(r) for r in rows), A.shape[0]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--md")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--heldout", action="store_true")
    parser.add_argument("--blocks", default="", help="row blocks to try, e.g. 2,4 (none)")
    args = parser.parse_args()
    import cupy
    import cupyx.scipy.sparse as cxs
    import scipy.sparse as sp

    from benchmarks import spgemm_first
    from benchmarks.common import DirectSpGEMM
    from sparsegpu.backends import spgemm
    from sparsegpu.engine import _sparse_dispatch

    lib = Lib()
    blocks = [int(b) for b in args.blocks.split(",") if b]
    workers = [Worker(lib, cupy, cupy.cuda.Device().id) for _ in range(max(blocks, default=0))]
    handle = _P()
    lib.cusparseCreate(ctypes.byref(handle))
    lib.cusparseSetStream(handle, _P(cupy.cuda.get_current_stream().ptr))
    from benchmarks import common

    matrices = [
        ("fit", "powerlaw_1500k", lambda: synthetic.power_law(1_500_000, mean=3.0, seed=1)),
        ("fit", "fem_p1_250k_random_seed11", lambda: common.fem_p1(250_000, "random", seed=11)),
    ]
    if args.heldout:
        matrices.append(
            ("heldout", "powerlaw_2m", lambda: synthetic.power_law(2_000_000, mean=3.75, seed=2))
        )

    def whole(algorithm):
        def make(A):
            return lambda: alg1(
                lib, handle, A.indptr, A.indices, A.data, A.shape[0], A, cupy, algorithm
            )

        return make

    def direct(A):
        engine, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
        left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
        left, right = spgemm.canonical(left), spgemm.canonical(right)
        return lambda: DirectSpGEMM(left, right)()

    # (maker of the call from fresh operands, whose operands: cupyx's or sparsegpu's)
    variants = {
        "cupyx": (lambda A: lambda: A @ A, "cupyx"),
        "sparsegpu A @ A": (lambda A: lambda: A @ A, "sg"),
        "direct (CuPy's bindings)": (direct, "sg"),
        "ctypes ALG1": (whole(ALG1), "cupyx"),
        "ctypes DEFAULT": (whole(0), "cupyx"),
    }
    for k in blocks:
        variants[f"rows by nnz k={k}"] = (
            lambda A, k=k: lambda: blocked(A, workers, nnz_cuts(A, k, cupy), cupy, lib),
            "cupyx",
        )
    rows = []
    for kind, name, build in matrices:
        S = sp.csr_matrix(build())
        S.sum_duplicates()
        _, base, identity, Acx = spgemm_first.call_operands(kind, name, S, np.float64, cxs)
        ref = Acx @ Acx
        ref.sort_indices()

        def fresh(whose, Acx=Acx, base=base, identity=identity):
            if whose == "cupyx":
                return spgemm_first.fresh_cupyx(Acx, cxs)
            return spgemm_first.fresh_sg(base, identity)

        for label, (make, whose) in variants.items():  # each checked against cupyx
            out = make(fresh(whose))()
            if whose == "sg" and label != "direct (CuPy's bindings)":
                out = cxs.csr_matrix(sp.csr_matrix(out))
            if not isinstance(out, tuple):
                out = (out.indptr, out.indices, out.data)
            C = cxs.csr_matrix((out[2], out[1], out[0]), shape=Acx.shape)
            C.sort_indices()
            same = C.nnz == ref.nnz and bool(
                cupy.array_equal(C.indptr, ref.indptr)
                and cupy.array_equal(C.indices, ref.indices)
                and cupy.allclose(C.data, ref.data)
            )
            if not same:
                raise SystemExit(f"{name} {label}: differs from cupyx")
        times = {label: [] for label in variants}
        order = list(variants)
        for r in range(args.repeat + 2):
            turn = r % len(order)
            for label in order[turn:] + order[:turn]:
                make, whose = variants[label]
                fn = make(fresh(whose))
                ms = spgemm_first.wall_ms(fn, cupy)[0]
                if r >= 2:
                    times[label].append(ms)
        row = {"set": kind, "matrix": name, "nnz": int(Acx.nnz), "nnz_out": int(ref.nnz)}
        row.update({label: float(np.median(v)) for label, v in times.items()})
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump({**common.experiment_header(MODULE), "rows": rows}, f, indent=1)
    labels = list(variants)
    lines = [
        "| set | matrix | " + " | ".join(labels) + " |",
        "|---|---|" + "---:|" * len(labels),
    ]
    for row in rows:
        cells = " | ".join(f"{row[k]:.3f}" for k in labels)
        lines.append(f"| {row['set']} | {row['matrix']} | {cells} |")
    note = "Milliseconds, wall clock, medians in turning order."
    common.table_md(args.md, __doc__, common.experiment_header(MODULE), note, lines)


if __name__ == "__main__":
    main()
