"""float16 and bfloat16 matrices: construction and conversions (which scipy refuses), the
result dtypes, float32 accumulation and one rounding, every backend against the float64
reference of the rounded values, and the backends that refuse them.

bfloat16 cases run where ml_dtypes is installed (the test extra has it).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.device._dtypes import BFLOAT16, FLOAT16, HALF_DTYPES
from sparsegpu.measure._oracle import Oracle
from sparsegpu.testing import INDEX_DTYPES, awkward_matrices, random_vector
from tests.conftest import BACKEND_NAMES, GPU_BACKEND_NAMES, skip_unless_available
from tests.test_delta16 import mixed_chunks

HALF_IDS = [np.dtype(d).name for d in HALF_DTYPES]
INDEX_IDS = [np.dtype(d).name for d in INDEX_DTYPES]


def _takes(backend: str, dtype) -> bool:
    return np.dtype(dtype) in sg.engine._registry.registered()[backend].value_dtypes


@pytest.fixture(scope="module")
def half_matrices():
    return {
        (np.dtype(v), np.dtype(i)): awkward_matrices(v, i, seed=1)
        for v in HALF_DTYPES
        for i in INDEX_DTYPES
    }


# ------------------------------------------------------------------ the matrix itself
@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
@pytest.mark.parametrize("cls", [sg.csr_matrix, sg.csr_array], ids=["matrix", "array"])
def test_made_every_way_scipy_makes_a_matrix(cls, half):
    S = sp.random(30, 20, density=0.2, format="csr", random_state=np.random.default_rng(0))
    rounded = S.data.astype(half)
    made = {
        "dtype=": cls(S, dtype=half),
        "tuple": cls((rounded, S.indices, S.indptr), shape=S.shape),
        "dense": cls(S.toarray().astype(half)),
        "dense, dtype=": cls(S.toarray(), dtype=half),
        "from a 16-bit sparsegpu matrix": cls(cls(S, dtype=half)),
        "astype": cls(S).astype(half),
    }
    for how, A in made.items():
        assert type(A) is cls and A.dtype == half, how
        assert A.nnz == S.nnz, how
        np.testing.assert_array_equal(A.toarray(), S.toarray().astype(half), err_msg=how)


@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
def test_conversions_keep_the_16_bit_values(half):
    S = sp.random(25, 40, density=0.2, format="csr", random_state=np.random.default_rng(1))
    A = sg.csr_matrix(S, dtype=half)
    expected = S.toarray().astype(half)
    assert A.copy().dtype == half and A.copy().data is not A.data
    assert A.T.dtype == half and type(A.T) is sg.csc_matrix
    np.testing.assert_array_equal(A.T.toarray(), expected.T)
    np.testing.assert_array_equal((A * 2).toarray(), (expected.astype(np.float32) * 2).astype(half))
    assert A.astype(np.float32).dtype == np.float32
    np.testing.assert_array_equal(A.astype(np.float32).toarray(), expected.astype(np.float32))
    assert A.astype(half, copy=False) is A
    out = np.zeros(A.shape, dtype=half)
    assert A.toarray(out=out) is out and np.array_equal(out, expected)
    B = pickle.loads(pickle.dumps(A))
    assert B.dtype == half and np.array_equal(B.toarray(), expected)


def test_operations_scipy_cannot_do_in_16_bits_say_so():
    A = sg.csr_matrix(sp.eye(4), dtype=np.float16)
    with pytest.raises(ValueError, match="float16"):
        A.tocoo()


# ------------------------------------------------------------------ result dtypes
@pytest.mark.parametrize(
    ("a_dtype", "x_dtype", "want"),
    [
        (FLOAT16, FLOAT16, FLOAT16),
        (FLOAT16, np.float32, np.float32),
        (FLOAT16, np.float64, np.float64),
        (FLOAT16, np.int8, FLOAT16),
        (np.float32, FLOAT16, np.float32),
        (FLOAT16, np.complex64, np.complex64),
    ]
    + (
        [(BFLOAT16, BFLOAT16, BFLOAT16), (BFLOAT16, np.float32, np.float32)]
        if BFLOAT16 is not None
        else []
    ),
    ids=lambda d: np.dtype(d).name,
)
@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_products_return_numpys_result_dtype(backend, a_dtype, x_dtype, want):
    """numpy's promotion (float16 @ float16 is float16), the same on every backend."""
    skip_unless_available(backend)
    S = awkward_matrices(np.float64, np.int32, seed=2)["power_law"]
    A = sg.csr_matrix(S, dtype=a_dtype)
    x = (random_vector(S.shape[1], np.float64, seed=3) * 4).astype(x_dtype)
    if not _takes(backend, want):
        with pytest.raises(TypeError, match="supports"):
            sg.matvec(A, x, backend=backend)
        return
    y = sg.matvec(A, x, backend=backend)
    assert y.dtype == np.dtype(want)
    oracle = Oracle(sg.csr_matrix(S, dtype=a_dtype).astype(np.float64), want, x=x)
    assert oracle.error(y) is None


@pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed (no bfloat16)")
def test_float16_with_bfloat16_is_refused_with_what_to_do():
    A = sg.csr_matrix(sp.eye(3), dtype=np.float16)
    with pytest.raises(TypeError, match=r"no common dtype .* cast one operand"):
        A @ np.ones(3, dtype=BFLOAT16)


# ------------------------------------------------------------------ arithmetic
@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_sums_run_in_float32_and_round_once(backend, half):
    """A sum of 4096 ones is 4096 (16-bit sums stall at 2048 in float16, 256 in bfloat16),
    and each row's exact float32 sum is rounded to nearest even once, when y is written."""
    skip_unless_available(backend)
    if not _takes(backend, half):
        pytest.skip(f"{backend} does not take {np.dtype(half)}")
    n = 4096
    # row 0: n ones; rows 1..: sums 2048 + k / 4 (exact in float32, ties and non-ties in
    # the 16-bit type) as 2048 ones then k quarters
    rows = [np.ones(n)] + [np.concatenate([np.ones(2048), np.full(k, 0.25)]) for k in range(1, 40)]
    lengths = [len(r) for r in rows]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.arange(length) for length in lengths])
    A = sg.csr_matrix((np.concatenate(rows).astype(half), indices, indptr), shape=(len(rows), n))
    y = sg.matvec(A, np.ones(n, dtype=half), backend=backend)
    exact = np.array([float(r.sum()) for r in rows])
    np.testing.assert_array_equal(y, exact.astype(half))
    assert float(y[0]) == n


# ------------------------------------------------------------------ every backend
def _product(A, form, x_host, xp):
    x = xp.asarray(x_host)
    if form == "matvec":
        return A @ x, A
    if form == "transpose":
        return A.T @ x, A.T
    return A @ x, A  # multivector: x is 2-D


@pytest.mark.parametrize("form", ["matvec", "transpose", "multivector_3", "multivector_20"])
@pytest.mark.parametrize("matrix_name", list(awkward_matrices(np.float64, np.int32)))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_awkward_matrices_match_the_float64_reference(
    backend, half, index_dtype, matrix_name, form, half_matrices
):
    """Every backend that takes 16-bit values gives the float64 product of the rounded
    values to within their rounding (and on the GPU from a device x, no host copy);
    the others refuse with a TypeError naming what they take."""
    skip_unless_available(backend)
    S = half_matrices[(np.dtype(half), np.dtype(index_dtype))][matrix_name]
    A = sg.csr_matrix(S)
    A.backend = backend
    gpu = backend in GPU_BACKEND_NAMES
    xp = sg.device._cuda.cupy_or_none() if gpu else np
    n = S.shape[0] if form == "transpose" else S.shape[1]
    k = int(form.split("_")[1]) if form.startswith("multivector") else None
    x_host = random_vector(n * (k or 1), half, seed=5).reshape((n, k) if k else (n,))
    if not _takes(backend, half):
        with pytest.raises(TypeError, match="supports"):
            _product(A, form, x_host, xp)
        return
    y, op = _product(A, form, x_host, xp)
    assert type(y) is xp.ndarray and y.dtype == half
    host = (sg.csr_matrix(S).T if form == "transpose" else sg.csr_matrix(S)).astype(np.float64)
    columns = [x_host] if k is None else [x_host[:, j] for j in range(k)]
    results = [y] if k is None else [y[:, j] for j in range(k)]
    for x_col, y_col in zip(columns, results, strict=True):
        error = Oracle(host, half, x=np.ascontiguousarray(x_col)).error(y_col)
        assert error is None, f"{backend}/{form}: {error}"


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
def test_delta16_compressed_and_full_width_chunks(cupy, half, index_dtype):
    """16-bit values with 16-bit offsets, and chunks whose span forces full-width columns,
    under quad loads and plain ones."""
    S = mixed_chunks(half, index_dtype)
    A = sg.csr_matrix(S)
    x = random_vector(S.shape[1], half, seed=7)
    reference = Oracle(sg.csr_matrix(S).astype(np.float64), half, x=x)
    for policy in (
        sg.tuning.Delta16Policy(256, 4),
        sg.tuning.Delta16Policy(512, 1, vector_loads=True, unroll=1),
        sg.tuning.Delta16Policy(128, 8, stream_matrix=True, unroll=2),
    ):
        y = sg.matvec(A, cupy.asarray(x), backend="delta16", policy=policy)
        assert reference.error(y) is None, policy


@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
def test_auto_plans_among_the_backends_that_take_it(cupy, half):
    S = sg.datasets.synthetic.stencil_2d(200)
    A = sg.csr_matrix(S, dtype=half)
    x = cupy.asarray(random_vector(S.shape[1], half, seed=9))
    choice = sg.choose(A, x)
    assert np.dtype(half) in sg.engine._registry.registered()[choice.backend].value_dtypes
    timed = {m.backend for m in choice.measurements}
    assert timed and all(_takes(name, half) for name in timed)
    assert "delta16" in timed
    reference = Oracle(sg.csr_matrix(S, dtype=half).astype(np.float64), half, x=x.get())
    assert reference.error(A @ x) is None
    assert reference.error(A @ x) is None  # the measured plan


@pytest.mark.parametrize("half", HALF_DTYPES, ids=HALF_IDS)
def test_solver_products_and_writes_reach_the_gpu(cupy, half):
    """A write through A.data drops the 16-bit mirror like any other."""
    S = sg.datasets.synthetic.stencil_2d(30)
    A = sg.csr_matrix(S, dtype=half)
    x = cupy.ones(S.shape[1], dtype=half)
    before = (A @ x).get()
    A.data = A.data * np.asarray(2, dtype=half)
    after = (A @ x).get()
    np.testing.assert_array_equal(after.astype(np.float64), 2 * before.astype(np.float64))
