"""Measure Matrix Market reading and the SuiteSparse cache (CPU; the figures of issue 6).

1. ``sparsegpu.io.mmread`` against ``scipy.io.mmread(...).tocsr()`` on a ~100 MB ``.mtx``
   (same speed expected: the body is scipy's parse; ours adds the header and triangle
   checks).
2. ``sparsegpu.suitesparse.load`` of a matrix served as a collection archive from a local
   HTTP server: the first load (download, extract, parse, write the binary copy) against
   the second (the binary copy only), as a fraction of the first parse.

Usage: ``python tools/bench_io.py [--nnz 2800000] [--repeat 3] [--json FILE]``
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import statistics
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import scipy.io

import sparsegpu as sg
from sparsegpu.datasets import synthetic


def best_of(repeat: int, fn) -> float:
    """Median wall time of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nnz", type=int, default=2_800_000, help="entries (~36 bytes each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        rows = args.nnz // 10
        A = synthetic.uniform_random(rows, 10, seed=0)
        mtx = work / "bench.mtx"
        scipy.io.mmwrite(str(mtx), A)
        size_mb = mtx.stat().st_size / 1e6

        scipy_s = best_of(args.repeat, lambda: scipy.io.mmread(str(mtx)).tocsr())
        ours_s = best_of(args.repeat, lambda: sg.io.mmread(mtx))

        site = work / "site" / "MM" / "Bench"
        site.mkdir(parents=True)
        with tarfile.open(site / "bench.tar.gz", "w:gz", compresslevel=1) as tar:
            tar.add(mtx, arcname="bench/bench.mtx")
        httpd = serve(work / "site")
        os.environ[sg.suitesparse.URL_ENV] = f"http://127.0.0.1:{httpd.server_address[1]}"
        cache = work / "cache"
        start = time.perf_counter()
        sg.suitesparse.fetch("Bench/bench", data_dir=cache, progress=False)
        fetch_s = time.perf_counter() - start
        start = time.perf_counter()
        first = sg.suitesparse.load("Bench/bench", data_dir=cache)
        first_load_s = time.perf_counter() - start
        cached_s = best_of(args.repeat, lambda: sg.suitesparse.load("Bench/bench", data_dir=cache))
        httpd.shutdown()
        A.sum_duplicates()  # the file lists them apart; every reader sums them
        assert first.nnz == A.nnz, "the cached load lost entries"

    figures = {
        "file_mb": round(size_mb, 1),
        "nnz": int(A.nnz),
        "scipy_mmread_tocsr_s": round(scipy_s, 3),
        "sparsegpu_mmread_s": round(ours_s, 3),
        "mmread_ratio": round(ours_s / scipy_s, 3),
        "fetch_s": round(fetch_s, 3),
        "first_load_s": round(first_load_s, 3),
        "cached_load_s": round(cached_s, 4),
        "cached_over_first_load": round(cached_s / first_load_s, 4),
    }
    for key, value in figures.items():
        print(f"{key:>24}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
