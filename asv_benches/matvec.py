"""``y = A @ x`` per backend x matrix x dtype: GB/s of the median of 20 products.

One benchmark per combination, not a ``time_`` and a ``track_`` each: asv starts a process
per benchmark and combination, and the 80 combinations of one grid are most of a quick run
(common.py says what must fit).
"""

from __future__ import annotations

import statistics

import numpy as np

from sparsegpu import bench
from sparsegpu.measure._timing import gb_per_s, spmv_bytes

from . import common


class MatVec:
    """One product on a plan made once (the backend's default, i.e. best known, policy)."""

    params = (common.CONTENDERS, common.MATRICES, common.DTYPES)
    param_names = ["backend", "matrix", "dtype"]
    timeout = 300

    def setup(self, backend, matrix, dtype):
        self.A = common.matrix(matrix, dtype)
        self.prepared = common.prepared_contender(backend, self.A, dtype)
        self.bytes = spmv_bytes(
            self.A.shape[0],
            self.A.shape[1],
            self.A.nnz,
            np.dtype(dtype).itemsize,
            np.dtype(self.prepared.index_dtype).itemsize,
        )

    def track_gb_per_s(self, backend, matrix, dtype):
        samples = bench.measure(self.prepared, repeat=20)
        return gb_per_s(self.bytes, statistics.median(samples))

    track_gb_per_s.unit = "GB/s"
