"""The CPU path: ``A @ x`` through sparsegpu's ``scipy`` backend beside scipy itself.

A small matrix (900 x 900, about 4,000 nonzeros), where a product costs microseconds and
what sparsegpu adds per call (argument handling, backend selection, dispatch) shows: the
two parameters are the two timings side by side.
"""

from __future__ import annotations

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

    def time_matvec(self, matrix):
        self.A @ self.x
