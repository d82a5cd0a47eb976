"""Time the distributed docs' example (docs/distributed.rst, every python block in order).

Run under ``mpiexec -n P``; rank 0 prints one JSON line: ranks, the least wall time of
``--repeat`` runs of the whole example (from the first block to the last, imports done
before), and of its ``cg`` alone. With more ranks than cores this measures how waits
share the cores (``sparsegpu/distributed/_comm.py``, ``Backoff``)::

    for n in 2 4; do mpiexec -n $n python tools/time_distributed_example.py; done
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpi4py import MPI  # noqa: E402

import sparsegpu as sg  # noqa: E402
from tests.test_snippets import rst_snippets  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    blocks = [snippet.code for snippet in rst_snippets(ROOT / "docs" / "distributed.rst")]
    solve_times, totals = [], []
    cg = sg.linalg.cg

    def timed_cg(*a, **k):
        start = time.perf_counter()
        try:
            return cg(*a, **k)
        finally:
            solve_times.append(time.perf_counter() - start)

    sg.linalg.cg = timed_cg
    os.chdir(tempfile.mkdtemp())
    for _ in range(args.repeat):
        comm.Barrier()
        start = time.perf_counter()
        namespace = {"__name__": "__example__", "print": lambda *a, **k: None}
        for code in blocks:
            exec(compile(code, "docs/distributed.rst", "exec"), namespace)  # noqa: S102
        totals.append(time.perf_counter() - start)
    if comm.Get_rank() == 0:
        result = {
            "ranks": comm.Get_size(),
            "cores": os.cpu_count(),
            "example_s": round(min(totals), 3),
            "cg_s": round(min(solve_times), 3),
        }
        print(json.dumps(result))


if __name__ == "__main__":
    main()
