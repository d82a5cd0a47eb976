"""Does the hash SpGEMM's dense rows (and the first product's rule for skewed rows) change
multigrid set-up? (issue 47's fourth round, checked against issue 46's set-up.)

On the multigrid benchmark's fit problems (``benchmarks/amg.py``'s ``fit`` set and the
larger instances earlier rounds profiled on: Poisson 100^3, elasticity 24^3; none held
out), ``sg.linalg.amg`` set-up and ``update`` with dense rows on (the defaults) and off
(``_hash_kernels.DENSE_MIN_SHARE = 0``: no dense rows, no exact count of skewed rows'
products), in alternation, median of ``--repeat``; with how many products the rule
counted exactly and how many ran hash rows in each.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.amg_dense_rows --out FILE.json
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from benchmarks import amg, common

PROBLEMS = [
    ("poisson3d", 64),
    ("anisotropic2d", 400),
    ("jumping3d", 64),
    ("elasticity3d", 16),
    ("poisson3d", 100),
    ("elasticity3d", 24),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    import sparsegpu as sg
    from sparsegpu.backends import _hash_kernels, hash_spgemm

    amg.warm_up()
    default_share = _hash_kernels.DENSE_MIN_SHARE
    counts = {"counted": 0, "hash": 0}
    original_total = hash_spgemm.GpuSpgemm.total_products
    original_multiply = hash_spgemm.hash_multiply

    def total(self, left, right):
        counts["counted"] += 1
        return original_total(self, left, right)

    def multiply(left, right, sink):
        counts["hash"] += 1
        return original_multiply(left, right, sink)

    hash_spgemm.GpuSpgemm.total_products = total
    hash_spgemm.hash_multiply = multiply
    rows = []
    for name, size in PROBLEMS:
        A_host, B = amg.make_problem(name, size, "fit")
        A_new_host = amg._new_values(A_host)
        if A_host.format == "bsr":
            A_new_host = A_new_host.tobsr(blocksize=A_host.blocksize)
        wrap = sg.bsr_matrix if A_host.format == "bsr" else sg.csr_matrix
        row = {"problem": f"{name}_{size}", "unknowns": int(A_host.shape[0])}
        times = {}
        for _ in range(args.repeat):
            for label, share in (("dense", default_share), ("off", 0)):
                _hash_kernels.DENSE_MIN_SHARE = share
                A, A_new = wrap(A_host), wrap(A_new_host)
                ones = cupy.ones(A.shape[1])
                A_new @ ones, A @ ones  # resident on the device, as in benchmarks/amg.py
                counts.update(counted=0, hash=0)
                cupy.cuda.Device().synchronize()
                start = time.perf_counter()
                ml = sg.linalg.amg(A, B=B)
                cupy.cuda.Device().synchronize()
                setup = time.perf_counter() - start
                row[f"{label}_counted"], row[f"{label}_hash"] = counts["counted"], counts["hash"]
                start = time.perf_counter()
                ml.update(A_new)
                cupy.cuda.Device().synchronize()
                update = time.perf_counter() - start
                times.setdefault(f"{label}_setup_ms", []).append(setup * 1e3)
                times.setdefault(f"{label}_update_ms", []).append(update * 1e3)
        _hash_kernels.DENSE_MIN_SHARE = default_share
        row.update(common.medians(times))
        rows.append(row)
        print(
            f"{row['problem']}: set-up {row['dense_setup_ms']:.1f} (dense rows) vs "
            f"{row['off_setup_ms']:.1f} ms (off); update {row['dense_update_ms']:.1f} vs "
            f"{row['off_update_ms']:.1f}; counted {row['dense_counted']}, hash products "
            f"{row['dense_hash']} vs {row['off_hash']}"
        )
        common.save_partial({"rows": rows}, args.out)  # after every one: a cut run keeps them
    return 0


if __name__ == "__main__":
    sys.exit(main())
