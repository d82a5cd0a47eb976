"""The ``cusparse`` backend: products against the scipy oracle, SpMM, streams, policies."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends.cusparse import (
    CUSPARSE_ALGORITHMS,
    DENSE_DESCRIPTORS,
    CusparsePlan,
    CusparsePolicy,
)
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
    random_vector,
)

AWKWARD_NAMES = list(awkward_matrices())
DTYPE_IDS = [np.dtype(d).name for d in VALUE_DTYPES]
INDEX_IDS = [np.dtype(d).name for d in INDEX_DTYPES]


def _matrix(name, dtype, index_dtype):
    return sg.csr_matrix(awkward_matrices(dtype, index_dtype, seed=1)[name])


def _max_row(A) -> int:
    return int(np.diff(A.indptr).max()) if A.shape[0] else 1


@pytest.mark.parametrize("algorithm", CUSPARSE_ALGORITHMS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", AWKWARD_NAMES)
def test_matvec_matches_scipy(cupy, name, dtype, index_dtype, algorithm):
    A = _matrix(name, dtype, index_dtype)
    x = random_vector(A.shape[1], dtype, seed=2)
    y = sg.matvec(A, cupy.asarray(x), backend="cusparse", policy=CusparsePolicy(algorithm))
    assert isinstance(y, cupy.ndarray)
    assert_product_close(y, sp.csr_matrix(A) @ x, dtype, _max_row(A), what=f"{name}")


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
def test_preprocessed_plan_matches_scipy(cupy, dtype, index_dtype):
    from sparsegpu.backends.cusparse import has_preprocess

    if not has_preprocess():
        pytest.skip("this CuPy does not expose cusparseSpMV_preprocess")
    A = _matrix("power_law", dtype, index_dtype)
    x = random_vector(A.shape[1], dtype, seed=3)
    policy = CusparsePolicy("csr_alg1", preprocess=True)
    y = sg.matvec(A, cupy.asarray(x), backend="cusparse", policy=policy)
    assert_product_close(y, sp.csr_matrix(A) @ x, dtype, _max_row(A))


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
def test_matmat_uses_spmm(cupy, dtype, index_dtype, k):
    A = _matrix("random_200x150", dtype, index_dtype)
    X = np.stack([random_vector(A.shape[1], dtype, seed=s) for s in range(k)], axis=1)
    Y = sg.matvec(A, cupy.asarray(X), backend="cusparse")
    assert Y.shape == (A.shape[0], k)
    assert_product_close(Y, sp.csr_matrix(A) @ X, dtype, _max_row(A))


@pytest.mark.parametrize("planning", ["estimate", "measure"])
def test_one_plan_serves_every_call(cupy, planning):
    A = _matrix("power_law", np.float64, np.int32)
    A.backend = "cusparse"
    A.planning = planning
    xs = [random_vector(A.shape[1], np.float64, seed=s) for s in range(5)]
    ys = [A @ cupy.asarray(x) for x in xs[:2]]  # under "measure" the second product plans
    plan = sg.engine._planning.plan_for(A)  # (ALG1 or ALG2, whichever measured faster)
    ys += [A @ cupy.asarray(x) for x in xs[2:]]  # descriptors re-pointed at each x and y
    assert sg.engine._planning.plan_for(A) is plan
    for x, y in zip(xs, ys, strict=True):
        assert_product_close(y, sp.csr_matrix(A) @ x, np.float64, _max_row(A))


def test_out_argument_is_written(cupy):
    A = _matrix("random_200x150", np.float32, np.int32)
    x = cupy.asarray(random_vector(A.shape[1], np.float32, seed=4))
    out = cupy.full(A.shape[0], np.nan, dtype=np.float32)
    y = sg.matvec(A, x, backend="cusparse", out=out)
    assert y is out
    assert_product_close(out, sp.csr_matrix(A) @ x.get(), np.float32, _max_row(A))


def test_runs_on_the_current_stream(cupy):
    A = _matrix("power_law", np.float64, np.int64)
    x = cupy.asarray(random_vector(A.shape[1], np.float64, seed=5))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        y = sg.matvec(A, x, backend="cusparse")
    stream.synchronize()
    assert_product_close(y, sp.csr_matrix(A) @ x.get(), np.float64, _max_row(A))


def test_more_buffers_than_the_descriptor_table_keeps(cupy):
    # each x and y at a new address until the table evicts, then the first ones again:
    # a descriptor never points at another buffer's memory
    A = _matrix("power_law", np.float64, np.int32)
    plan = sg.engine._planning.plan_for(A, backend="cusparse", policy=CusparsePolicy("csr_alg1"))
    assert isinstance(plan, CusparsePlan)
    n = DENSE_DESCRIPTORS + 8
    xs = [cupy.asarray(random_vector(A.shape[1], np.float64, seed=s)) for s in range(n)]
    outs = [cupy.full(A.shape[0], np.nan) for _ in range(n)]
    reference = sp.csr_matrix(A)
    for _ in range(2):
        for x, out in zip(xs, outs, strict=True):
            assert plan.matvec(x, out=out) is out
        for x, out in zip(xs, outs, strict=True):
            assert_product_close(out, reference @ x.get(), np.float64, _max_row(A))
        for out in outs:
            out.fill(np.nan)
    assert len(plan._x_vectors) <= DENSE_DESCRIPTORS
    assert len(plan._y_vectors) <= DENSE_DESCRIPTORS


def test_threads_on_their_own_streams_share_one_plan(cupy):
    # each thread has its own handle and stream; the descriptor tables are shared
    from concurrent.futures import ThreadPoolExecutor

    A = _matrix("power_law", np.float32, np.int64)
    A.backend = "cusparse"
    reference = sp.csr_matrix(A)
    xs = [random_vector(A.shape[1], np.float32, seed=10 + t) for t in range(6)]

    def work(x_host):
        stream = cupy.cuda.Stream(non_blocking=True)
        x = cupy.asarray(x_host)
        with stream:
            ys = [A @ x for _ in range(20)]
        stream.synchronize()
        return ys

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(work, xs))  # re-raises any thread's error
    for x_host, ys in zip(xs, results, strict=True):
        for y in ys:
            assert_product_close(y, reference @ x_host, np.float32, _max_row(A))


def test_integer_values_are_refused_with_a_type_error(cupy):
    A = sg.csr_matrix(sp.eye(4, dtype=np.int32, format="csr"))
    with pytest.raises(TypeError, match="cusparse.*int32.*float32"):
        sg.matvec(A, cupy.ones(4, dtype=np.int32), backend="cusparse")


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="csr_alg3"):
        CusparsePolicy("csr_alg3")


def test_candidates_cover_every_algorithm():
    backend = sg.engine._registry.registered()["cusparse"]
    algorithms = {p.algorithm for p in backend.candidates(None)}
    assert algorithms == set(CUSPARSE_ALGORITHMS)
