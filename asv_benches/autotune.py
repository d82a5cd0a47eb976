"""Time the autotuner takes on a regular and an irregular matrix (GPU only).

It tunes the backends whose winners ship with sparsegpu (shuffle, the merge-path kernel,
cuSPARSE), as the H200 defaults were tuned; every backend on every class took minutes,
more than a quick run of all suites may take (common.py).
"""

from __future__ import annotations

import os
import tempfile

import sparsegpu

from . import common

TUNED_BACKENDS = ["shuffle", "merge_path", "cusparse"]


class Autotune:
    """``sparsegpu.autotune(A)`` into a fresh cache directory (the user's stays untouched)."""

    params = (["stencil2d", "powerlaw"],)
    param_names = ["matrix"]
    timeout = 600
    number = 1
    repeat = 1
    warmup_time = 0

    def setup(self, matrix):
        self.cache = None  # teardown runs after a skipped setup too
        self.autotune = getattr(sparsegpu, "autotune", None)
        if not callable(self.autotune):
            raise NotImplementedError("this build of sparsegpu has no sparsegpu.autotune")
        common.require_gpu()
        self.A = sparsegpu.csr_matrix(common.matrix(matrix, "float64"))
        self.cache = tempfile.TemporaryDirectory()
        self.saved_env = os.environ.get("SPARSEGPU_CACHE_DIR")
        os.environ["SPARSEGPU_CACHE_DIR"] = self.cache.name

    def teardown(self, matrix):
        if self.cache is None:
            return
        if self.saved_env is None:
            os.environ.pop("SPARSEGPU_CACHE_DIR", None)
        else:
            os.environ["SPARSEGPU_CACHE_DIR"] = self.saved_env
        self.cache.cleanup()

    def time_autotune(self, matrix):
        self.autotune(self.A, backends=TUNED_BACKENDS)
