"""Helpers for testing sparsegpu and its backends (also for plugin authors).

* :func:`awkward_matrices`: seeded scipy CSR matrices that break naive kernels.
* :func:`tolerance` / :func:`assert_product_close`: tolerances derived from the dtype.
* :class:`HostCopyBackend`: a test-only backend whose "upload" copies the arrays on the
  host, so that mirror invalidation is exercised on machines without a GPU.
* :class:`CountingBackend`: wraps a backend and counts the products that reach it,
  proving that a code path (a scipy solver, say) went through the dispatcher.
* :func:`no_gpu_reason`: the one skip reason of every test that needs a GPU.
* :class:`HostSpgemm`: a test-only SpGEMM engine for the host-copy residence (scipy's
  product with a modelled work space), so that sparse products kept "on the device",
  their planning, row blocks and memory errors run on machines without a GPU.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import scipy.sparse as sp

from .backends.base import Backend, Plan
from .backends.scipy_reference import ScipyBackend, ScipyPlan
from .backends.spgemm import (
    DoesNotFit,
    SpgemmEngine,
    mark_canonical,
    register_engine,
    row_products,
)
from .device import _cuda
from .device._dtypes import HALF_DTYPES, is_half
from .device._mirror import DeviceMatrix, Residence
from .engine._registry import register_backend
from .measure._oracle import random_values, random_vector, tolerance


def no_gpu_reason() -> str:
    """Why a test that needs a GPU skips here: one text for all of them, so that a CPU
    run's skip summary says it on one line."""
    return f"no GPU: {_cuda.unavailable_reason()}"


VALUE_DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
INDEX_DTYPES = (np.int32, np.int64)
# float16, and bfloat16 where ml_dtypes is installed (scipy computes in neither)
HALF_VALUE_DTYPES = HALF_DTYPES


def _csr(data, indices, indptr, shape, index_dtype):
    A = sp.csr_matrix(
        (data, np.asarray(indices, dtype=index_dtype), np.asarray(indptr, dtype=index_dtype)),
        shape=shape,
    )
    # scipy may narrow the index dtype; put back the one asked for
    A.indices = A.indices.astype(index_dtype)
    A.indptr = A.indptr.astype(index_dtype)
    return A


def from_row_lengths(lengths, n_cols, dtype, index_dtype, rng, sort=True):
    """A CSR matrix with the given row lengths and random distinct columns per row."""
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    nnz = int(indptr[-1])
    if n_cols == 0 or nnz == 0:
        return _csr(np.zeros(0, dtype), [], indptr, (len(lengths), n_cols), index_dtype)
    cols = np.empty(nnz, dtype=np.int64)
    for r in np.flatnonzero(lengths):
        k = int(lengths[r])
        row = rng.choice(n_cols, size=k, replace=False) if k < n_cols else rng.permutation(n_cols)
        cols[indptr[r] : indptr[r + 1]] = np.sort(row) if sort else row
    return _csr(random_values(rng, nnz, dtype), cols, indptr, (len(lengths), n_cols), index_dtype)


def random_sparse(shape, density, seed, dtype) -> sp.csr_matrix:
    """A seeded ``scipy.sparse.random`` CSR matrix; complex dtypes get a random imaginary part."""
    rng = np.random.default_rng(seed)
    K = sp.random(*shape, density=density, random_state=rng, format="csr")
    if np.dtype(dtype).kind == "c":
        K = K + 1j * sp.random(*shape, density=density, random_state=rng, format="csr")
    return K.astype(dtype)


def awkward_matrices(dtype=np.float64, index_dtype=np.int32, seed=0) -> dict[str, sp.csr_matrix]:
    """Seeded scipy CSR matrices covering the shapes and structures that break kernels.

    0x0, empty rows, all rows empty, one very long row, power-law rows, unsorted indices,
    duplicates, more entries than positions, rectangular both ways, 1xn and nx1, a plain
    random one.
    """
    rng = np.random.default_rng(seed)
    out = {}
    out["random_200x150"] = from_row_lengths(rng.integers(0, 12, 200), 150, dtype, index_dtype, rng)
    out["0x0"] = _csr(np.zeros(0, dtype), [], [0], (0, 0), index_dtype)
    out["0x5"] = _csr(np.zeros(0, dtype), [], [0], (0, 5), index_dtype)
    out["5x0"] = _csr(np.zeros(0, dtype), [], [0] * 6, (5, 0), index_dtype)
    out["all_rows_empty"] = _csr(np.zeros(0, dtype), [], [0] * 41, (40, 30), index_dtype)
    lengths = rng.integers(0, 6, 300)
    lengths[rng.random(300) < 0.5] = 0
    out["half_rows_empty"] = from_row_lengths(lengths, 300, dtype, index_dtype, rng)
    lengths = np.ones(100, dtype=np.int64)
    lengths[37] = 5000
    out["one_long_row"] = from_row_lengths(lengths, 6000, dtype, index_dtype, rng)
    lengths = np.minimum((rng.pareto(1.2, 2000) * 3).astype(np.int64), 1999)
    out["power_law"] = from_row_lengths(lengths, 2000, dtype, index_dtype, rng)
    out["unsorted_indices"] = from_row_lengths(
        rng.integers(1, 20, 120), 100, dtype, index_dtype, rng, sort=False
    )
    n = 400
    rows = rng.integers(0, 50, n)
    cols = rng.integers(0, 40, n)
    # built by hand: scipy's coo->csr would sum the duplicates away
    order = np.lexsort((cols, rows))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=50))])
    values = random_values(rng, n, dtype)
    out["duplicates"] = _csr(values[order], cols[order], indptr, (50, 40), index_dtype)
    out["wide_30x500"] = from_row_lengths(rng.integers(0, 60, 30), 500, dtype, index_dtype, rng)
    out["tall_500x30"] = from_row_lengths(rng.integers(0, 8, 500), 30, dtype, index_dtype, rng)
    out["row_1x300"] = from_row_lengths([120], 300, dtype, index_dtype, rng)
    out["col_300x1"] = from_row_lengths(rng.integers(0, 2, 300), 1, dtype, index_dtype, rng)
    # more stored entries than the shape has positions (each repeated, rows unsorted),
    # which scipy allows (a kernel must not assume nnz <= rows * cols)
    rows = np.repeat(np.arange(6), 9)
    own = np.random.default_rng(seed + 1)  # the other matrices' draws stay as they were
    cols = own.integers(0, 4, rows.size)
    indptr = np.arange(0, rows.size + 1, 9)
    out["crowded_6x4"] = _csr(
        random_values(own, rows.size, dtype), cols, indptr, (6, 4), index_dtype
    )
    return out


def _to_numpy(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def assert_product_close(actual, desired, dtype, max_row_length=1, what="product"):
    """Assert ``actual`` matches ``desired`` within :func:`tolerance`, scaled by ``|desired|``.

    Compares ``|actual - desired| <= tol * (|A| |x|)``-like bound using the max norm of
    ``desired`` (and 1) so that cancellation in a row does not make the test flaky.
    """
    actual = _to_numpy(actual)
    desired = _to_numpy(desired)
    assert actual.shape == desired.shape, f"{what}: shape {actual.shape} != {desired.shape}"
    assert actual.dtype == desired.dtype, f"{what}: dtype {actual.dtype} != {desired.dtype}"
    if is_half(actual.dtype):  # compared in float64
        actual, desired = actual.astype(np.float64), desired.astype(np.float64)
    if actual.size == 0:
        return
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values in the result"
    scale = max(float(np.max(np.abs(desired))), 1.0)
    err = float(np.max(np.abs(actual.astype(np.complex128) - desired.astype(np.complex128))))
    tol = tolerance(dtype, max_row_length) * scale
    assert err <= tol, f"{what}: max error {err:.3e} > tolerance {tol:.3e} ({np.dtype(dtype)})"


HOST_COPY = Residence("host-copy", lambda: np, lambda a: np.array(a, copy=True), copies=True)


class HostCopyBackend(ScipyBackend):
    """The scipy backend on a *copied* mirror: stale mirrors show up as wrong answers.

    Test-only (register it with :func:`sparsegpu.register_backend`); it runs the same
    mirror, lock and invalidation code as the GPU backends, on any machine.
    """

    name = "host-copy"
    description = "test-only: scipy on host copies of the arrays (exercises mirrors)"
    residence = HOST_COPY


class HostSpgemm(SpgemmEngine):
    """Test-only SpGEMM on host-copy mirrors: scipy's product, sorted.

    Its work space is modelled (``bytes_per_product`` for each intermediate product under
    ``alg1``, a quarter of that under ``alg2``) and taken from the product's budget, so
    that a ``memory_limit`` drives the lean algorithm, the row blocks and the MemoryError
    exactly as device memory does on the GPU. ``reuse`` gives :class:`HostReusePlan`.
    :func:`register_host_copy` registers it with the host-copy backend.
    """

    name = "host"
    narrows_by_result = True  # scipy's rule

    def __init__(self, bytes_per_product: int = 16):
        self.bytes_per_product = bytes_per_product

    def algorithms(self):
        return ("alg1", "alg2")

    def lean_algorithms(self):
        return ("alg2",)

    def work_space(self, left, right, algorithm) -> int:
        per_product = self.bytes_per_product if algorithm == "alg1" else self.bytes_per_product // 4
        return int(row_products(left, right).sum()) * per_product

    def _multiply(self, left, right, algorithm, sink):
        work = sink.budget.reserve(self.work_space(left, right, algorithm), "modelled work space")
        try:
            product = _scipy_product(left, right)
            indptr, indices, data = sink.allocate(product.nnz)
            indptr[...], indices[...], data[...] = product.indptr, product.indices, product.data
        except DoesNotFit:
            sink.discard()
            raise
        finally:
            sink.budget.unreserve(work)
        return sink.finish()

    def _count(self, left, right, algorithm, budget):
        work = budget.reserve(self.work_space(left, right, algorithm), "modelled work space")
        budget.unreserve(work)
        return _scipy_product(left, right).nnz

    def reuse(self, left, right, budget):
        return HostReusePlan(left, right)


def register_host_copy() -> None:
    """Register the test-only ``host-copy`` backend and its sparse products
    (:class:`HostSpgemm`): what the test suite runs the GPU backends' mirror machinery on,
    and ``tools/scipy_suite.py --backend host-copy`` scipy's tests on."""
    register_backend(HostCopyBackend(), replace=True)
    register_engine(HOST_COPY.name, HostSpgemm())


def _scipy_product(left: DeviceMatrix, right: DeviceMatrix):
    def csr(m):
        return sp.csr_matrix((m.data, m.indices, m.indptr), shape=m.shape)

    product = csr(left) @ csr(right)
    product.sort_indices()
    return product


class HostReusePlan:
    """The reuse plan of :class:`HostSpgemm`: keeps the patterns it was made for (copies)
    and recomputes the whole product with scipy."""

    def __init__(self, left: DeviceMatrix, right: DeviceMatrix):
        self.patterns = [(m.indptr.copy(), m.indices.copy()) for m in (left, right)]
        self.held_bytes = sum(a.nbytes for pattern in self.patterns for a in pattern)

    def matches(self, left, right) -> bool:
        return all(
            np.array_equal(indptr, m.indptr) and np.array_equal(indices, m.indices)
            for (indptr, indices), m in zip(self.patterns, (left, right), strict=True)
        )

    def compute(self, left, right, budget):
        product = _scipy_product(left, right)
        arrays = []
        for source in (product.data, product.indices, product.indptr):
            arrays.append(budget.empty(source.size, source.dtype, "the result"))
            arrays[-1][...] = source
        shape = (left.shape[0], right.shape[1])
        return mark_canonical(DeviceMatrix(*arrays, shape, left.residence))


class CountingBackend(Backend):
    """Wraps another backend and counts products (``matvecs`` and ``matmats``).

    ``shapes`` counts the products per shape of the mirror they ran on, so that a test can
    tell products with A (m, n) from products with its transpose (n, m).
    """

    def __init__(self, inner: Backend | None = None, name: str = "counting"):
        self.inner = inner or HostCopyBackend()
        self.name = name
        self.description = f"test-only: counts products, computes with {self.inner.name!r}"
        self.residence = self.inner.residence
        self.value_dtypes = self.inner.value_dtypes
        self.index_dtypes = self.inner.index_dtypes
        self.policy_type = self.inner.policy_type
        self.matvecs = 0
        self.matmats = 0
        self.shapes: Counter = Counter()
        self._lock = threading.Lock()

    def unavailable_reason(self):
        return self.inner.unavailable_reason()

    def planning_candidates(self, matrix):
        return self.inner.planning_candidates(matrix)

    def matmat_candidates(self, matrix, columns, order):
        return self.inner.matmat_candidates(matrix, columns, order)

    def plan(self, matrix, policy):
        return _CountingPlan(self, self.inner.plan(matrix, policy))


class _CountingPlan(Plan):
    def __init__(self, owner: CountingBackend, inner: Plan):
        super().__init__(inner.matrix, inner.policy)
        self.owner = owner
        self.inner = inner

    def matvec(self, x, out=None):
        with self.owner._lock:
            self.owner.matvecs += 1
            self.owner.shapes[self.matrix.shape] += 1
        return self.inner.matvec(x, out=out)

    def matmat(self, X, out=None):
        with self.owner._lock:
            self.owner.matmats += 1
            self.owner.shapes[self.matrix.shape] += 1
        return self.inner.matmat(X, out=out)


__all__ = [
    "HALF_VALUE_DTYPES",
    "INDEX_DTYPES",
    "VALUE_DTYPES",
    "CountingBackend",
    "HostCopyBackend",
    "HostReusePlan",
    "HostSpgemm",
    "ScipyPlan",
    "assert_product_close",
    "awkward_matrices",
    "from_row_lengths",
    "random_sparse",
    "random_vector",
    "register_host_copy",
    "tolerance",
]
