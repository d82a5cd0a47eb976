"""What copy-on-upload costs: the first GPU product of a matrix whose arrays are aliased.

A matrix built from arrays the caller keeps (``sg.csr_matrix((data, indices, indptr))``
with ``data`` still referenced) has its arrays copied on the host before the first upload,
so that no earlier alias can write what the GPU holds. This times the first product
(upload, validation, plan, product; wall clock around a synchronized call) of such a
matrix against one whose arrays nothing else refers to, median of repeats, on a random
matrix of ``--rows`` rows with ``--per-row`` nonzeros each.

``python -m benchmarks.copy_on_upload --out FILE.json``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import sparsegpu as sg


def first_product_ms(make, x, cupy) -> float:
    A = make()
    cupy.cuda.get_current_stream().synchronize()
    start = time.perf_counter()
    A @ x
    cupy.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - start) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6_000_000)
    parser.add_argument("--per-row", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    import cupy

    rng = np.random.default_rng(0)
    n, k = args.rows, args.per_row
    indptr = np.arange(0, n * k + 1, k, dtype=np.int32)
    indices = np.sort(rng.integers(0, n, (n, k), dtype=np.int32), axis=1).ravel()
    data = rng.uniform(-1, 1, n * k)
    x = cupy.asarray(rng.uniform(-1, 1, n))

    def aliased():  # the caller keeps data, indices, indptr: copied before the upload
        A = sg.csr_matrix((data, indices, indptr), shape=(n, n))
        A.backend = "shuffle"
        return A

    def owned():  # fresh arrays only the matrix refers to: uploaded as they are
        A = sg.csr_matrix((data.copy(), indices.copy(), indptr.copy()), shape=(n, n))
        A.backend = "shuffle"
        return A

    first_product_ms(owned, x, cupy)  # compile and warm up
    result = {"rows": n, "nnz": n * k, "dtype": "float64", "index_dtype": "int32"}
    for name, make in (("owned", owned), ("aliased", aliased)):
        result[f"{name}_first_product_ms"] = statistics.median(
            first_product_ms(make, x, cupy) for _ in range(args.repeat)
        )
    result["copy_cost_ms"] = result["aliased_first_product_ms"] - result["owned_first_product_ms"]
    result["host_bytes_copied"] = int(data.nbytes + indices.nbytes + indptr.nbytes)
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
