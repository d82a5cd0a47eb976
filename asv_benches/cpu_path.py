"""The CPU path: ``A @ x`` through sparsegpu's ``scipy`` backend beside scipy itself.

A small matrix (900 x 900, about 4,000 nonzeros), where a product costs microseconds and
what sparsegpu adds per call (argument handling, backend selection, dispatch) shows: the
two parameters are the two timings side by side.
"""

from __future__ import annotations

import timeit

import numpy as np
import scipy.sparse as sp

import sparsegpu

N = 900
DENSITY = 0.005  # 4,050 nonzeros


class CpuMatVec:
    """``A @ x`` on a scipy matrix, and on the same matrix as a sparsegpu one on ``scipy``."""

    params = (["scipy", "sparsegpu"],)
    param_names = ["matrix"]

    def setup(self, matrix):
        A = sp.random(N, N, density=DENSITY, format="csr", random_state=0)
        if matrix == "sparsegpu":
            A = sparsegpu.csr_matrix(A)
            A.backend = "scipy"
        self.A = A
        self.x = np.random.default_rng(0).standard_normal(N)
        # the first product validates the arrays and makes the plan (and, on a machine
        # with CuPy, binds the CUDA context once per thread): not what a call costs
        A @ self.x

    def time_matvec(self, matrix):
        self.A @ self.x


class CpuMatVecRatio:
    """The CPU path's cost as a ratio to scipy's own ``A @ x`` (the target: at most 1.2).

    Both timed in the same process, best of 7 rounds of 2,000 calls each, so that even a
    ``--quick`` run (one sample) gives a steady number.
    """

    unit = "ratio"

    def setup(self):
        S = sp.random(N, N, density=DENSITY, format="csr", random_state=0)
        self.S = S
        self.A = sparsegpu.csr_matrix(S)
        self.A.backend = "scipy"
        self.x = np.random.default_rng(0).standard_normal(N)
        self.A @ self.x

    def track_ratio_to_scipy(self):
        def per_call(fn):
            return min(timeit.repeat(fn, number=2000, repeat=7))

        return per_call(lambda: self.A @ self.x) / per_call(lambda: self.S @ self.x)
