"""Select products against cuSPARSE ALG1 on ``A @ P`` of aggregation (issue 47, the rule's
fit for ``select``).

On the fit matrices of ``spgemm_first --mode calls`` whose rows are short enough (at most
``SELECT_MAX`` entries) and on the fit set's SuiteSparse matrices (held-out instances take
no part), ``A @ P`` with ``spgemm_first.aggregates_of_8``'s ``P``: the first product of a
new pattern (wall clock from the call to a synchronized result, operands resident, median
of ``--repeat`` in alternation) by ``sg.spgemm(algorithm="select")``, by
``algorithm="alg1"`` and by cupyx, each answer checked against cupyx; then the first
``sg.galerkin_product(A, P)`` (the rule's choices) against cupyx's ``P.T @ A @ P``.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_select_fit --out FILE.json
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
import scipy.sparse as sp

from benchmarks import common, spgemm_first
from benchmarks import spgemm as spgemm_bench
from sparsegpu import datasets

FIRST = spgemm_first


def matrices(xp) -> list:
    """``(name, builder)``: the calls mode's fit matrices, then the bundled SuiteSparse ones."""
    out = [(name, build) for group, name, build in FIRST.call_matrices(xp) if group == "fit"]
    out += [(name, lambda name=name: datasets.load(name)) for name in datasets.names()]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    import sparsegpu as sg
    from sparsegpu.backends.select_spgemm import SELECT_MAX

    rows = []
    for name, build in matrices(cupy):
        S = sp.csr_matrix(build())
        if S.shape[0] != S.shape[1]:
            continue
        S.sum_duplicates()
        if np.diff(S.indptr).max(initial=0) > SELECT_MAX:
            print(f"{name}: rows of up to {np.diff(S.indptr).max()} entries: not a select product")
            continue
        row, base, identity, Acx = FIRST.call_operands("fit", name, S, np.float64, cupyx_sparse)
        P = FIRST.aggregates_of_8(name, S.shape[0], np.float64)
        Psg, Pcx = sg.csr_matrix(P), cupyx_sparse.csr_matrix(P)
        Psg._sg_mirror(FIRST.CUPY, np.dtype(np.float64))
        fns = {
            "select": lambda A, P=Psg: sg.spgemm(A, P, algorithm="select"),
            "alg1": lambda A, P=Psg: sg.spgemm(A, P, algorithm="alg1"),
            "galerkin": lambda A, P=Psg: sg.galerkin_product(A, P),
        }
        for fn in fns.values():  # every kernel compiled
            fn(FIRST.fresh_sg(base, identity))
        reference = FIRST.fresh_cupyx(Acx, cupyx_sparse) @ Pcx
        Pcx.T @ FIRST.fresh_cupyx(Acx, cupyx_sparse) @ Pcx
        times = {}
        for _ in range(args.repeat):
            for key, fn in fns.items():
                A = FIRST.fresh_sg(base, identity)
                ms, C = FIRST.wall_ms(lambda A=A, fn=fn: fn(A), cupy)
                times.setdefault(key, []).append(ms)
                if key != "galerkin":
                    problem = spgemm_bench.agree(C, reference, np.float64, cupy)
                    assert problem is None, (name, key, problem)
            B = FIRST.fresh_cupyx(Acx, cupyx_sparse)
            times.setdefault("cupyx", []).append(FIRST.wall_ms(lambda B=B, P=Pcx: B @ P, cupy)[0])
            B = FIRST.fresh_cupyx(Acx, cupyx_sparse)
            ms = FIRST.wall_ms(lambda B=B, P=Pcx: P.T @ B @ P, cupy)[0]
            times.setdefault("cupyx_galerkin", []).append(ms)
        row.update(common.medians(times, "_ms"))
        rows.append(row)
        print(
            f"{name}: A @ P select {row['select_ms']:.3f}, alg1 {row['alg1_ms']:.3f}, cupyx "
            f"{row['cupyx_ms']:.3f} ms; galerkin {row['galerkin_ms']:.3f} vs cupyx "
            f"{row['cupyx_galerkin_ms']:.3f}"
        )
        common.save_partial({"rows": rows}, args.out)  # after every one: a cut run keeps them
    return 0


if __name__ == "__main__":
    sys.exit(main())
