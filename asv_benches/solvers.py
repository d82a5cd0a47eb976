"""Conjugate gradients on the 2-D Poisson matrix: a fixed 100 iterations per solve."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import scipy.sparse.linalg

import sparsegpu
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.testing import random_vector

from . import common

ITERATIONS = 100
# rtol far below reach, so every solve runs exactly ITERATIONS iterations
RTOL = 1e-30


def _poisson():
    n = 1024 if common.gpu_available() else 64
    return synthetic.stencil_2d(n)


def _tolerance_keyword(solver) -> str:
    """scipy < 1.12 calls the relative tolerance ``tol``; later versions ``rtol``."""
    return "rtol" if "rtol" in inspect.signature(solver).parameters else "tol"


class ScipyCG:
    """``scipy.sparse.linalg.cg`` on a sparsegpu matrix: every matvec on ``backend``."""

    params = ([name for name in common.CONTENDERS if name != "cupyx"],)
    param_names = ["backend"]
    timeout = 300

    def setup(self, backend):
        self.A = sparsegpu.csr_matrix(_poisson())
        try:
            self.A.backend = backend
        except sparsegpu.BackendUnavailableError as exc:
            raise NotImplementedError(str(exc).splitlines()[0]) from None
        self.b = random_vector(self.A.shape[0], np.float64, seed=0)
        self.keyword = _tolerance_keyword(scipy.sparse.linalg.cg)

    def time_cg(self, backend):
        scipy.sparse.linalg.cg(self.A, self.b, maxiter=ITERATIONS, **{self.keyword: RTOL})


class SparsegpuCG:
    """``sparsegpu.linalg.cg`` with x and b where the backend computes (no host copies)."""

    params = ([name for name in common.CONTENDERS if name != "cupyx"],)
    param_names = ["backend"]
    timeout = 300

    def setup(self, backend):
        try:
            self.cg = importlib.import_module("sparsegpu.linalg").cg
        except (ImportError, AttributeError):
            raise NotImplementedError("this build of sparsegpu has no sparsegpu.linalg") from None
        self.A = sparsegpu.csr_matrix(_poisson())
        try:
            self.A.backend = backend
        except sparsegpu.BackendUnavailableError as exc:
            raise NotImplementedError(str(exc).splitlines()[0]) from None
        xp = sparsegpu.engine._planning.plan_for(self.A, np.float64).matrix.xp
        self.b = random_vector(self.A.shape[0], np.float64, seed=0, xp=xp)
        self.keyword = _tolerance_keyword(self.cg)

    def time_cg(self, backend):
        self.cg(self.A, self.b, maxiter=ITERATIONS, **{self.keyword: RTOL})
        common.synchronize()


class CupyxCG:
    """The reference: ``cupyx.scipy.sparse.linalg.cg`` on a cupyx matrix."""

    timeout = 300

    def setup(self):
        common.require_gpu()
        import cupyx.scipy.sparse as csp
        import cupyx.scipy.sparse.linalg as cla

        cupy = _cuda.cupy_or_none()
        self.A = csp.csr_matrix(_poisson())
        self.b = random_vector(self.A.shape[0], np.float64, seed=0, xp=cupy)
        self.cg = cla.cg
        self.keyword = _tolerance_keyword(cla.cg)

    def time_cg(self):
        self.cg(self.A, self.b, maxiter=ITERATIONS, **{self.keyword: RTOL})
        common.synchronize()
