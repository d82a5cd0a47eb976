"""Every product form on every backend equals plain scipy's: value, dtype, shape, module.

Parametrized over backend x value dtype x index dtype x awkward matrix x product form
(and, for GPU backends, x as a numpy or a cupy array). Unavailable backends skip with
their reason, so this one suite runs on CI (scipy, host-copy) and on the GPU machine.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import sparsegpu as sg
from sparsegpu.device import _cuda
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    CountingBackend,
    assert_product_close,
    awkward_matrices,
    random_vector,
)

from .conftest import BACKEND_NAMES, GPU_BACKEND_NAMES, skip_unless_available

MATRIX_NAMES = list(awkward_matrices())


def _max_row(A) -> int:
    return int(np.diff(A.indptr).max()) if A.shape[0] else 1


def _max_col(A) -> int:
    return int(np.bincount(A.indices, minlength=1).max()) if A.nnz else 1


# Each form: (sparsegpu matrix, scipy oracle matrix, xp) -> (ours, expected, row length)
def _matvec(A, S, xp, rng_seed=1):
    x = random_vector(A.shape[1], A.dtype, rng_seed)
    return A @ xp.asarray(x), S @ x, _max_row(S)


def _column(A, S, xp):
    x = random_vector(A.shape[1], A.dtype, 2)[:, None]
    return A @ xp.asarray(x), S @ x, _max_row(S)


def _multivector(A, S, xp):
    X = np.stack([random_vector(A.shape[1], A.dtype, s) for s in (3, 4, 5)], axis=1)
    return A @ xp.asarray(X), S @ X, _max_row(S)


def _dot(A, S, xp):
    x = random_vector(A.shape[1], A.dtype, 6)
    return A.dot(xp.asarray(x)), S.dot(x), _max_row(S)


def _rmatmul(A, S, xp):
    x = random_vector(A.shape[0], A.dtype, 7)
    return xp.asarray(x) @ A, x @ S, _max_col(S)


def _transpose(A, S, xp):
    x = random_vector(A.shape[0], A.dtype, 8)
    return A.T @ xp.asarray(x), S.T @ x, _max_col(S)


def _adjoint(A, S, xp):
    x = random_vector(A.shape[0], A.dtype, 9)
    return A.conj().T @ xp.asarray(x), S.conj().T @ x, _max_col(S)


def _linop_matvec(A, S, xp):
    x = random_vector(A.shape[1], A.dtype, 10)
    return spla.aslinearoperator(A).matvec(x), spla.aslinearoperator(S).matvec(x), _max_row(S)


def _linop_rmatvec(A, S, xp):
    x = random_vector(A.shape[0], A.dtype, 11)
    return spla.aslinearoperator(A).rmatvec(x), spla.aslinearoperator(S).rmatvec(x), _max_col(S)


def _linop_matmat(A, S, xp):
    X = np.stack([random_vector(A.shape[1], A.dtype, s) for s in (12, 13)], axis=1)
    return spla.aslinearoperator(A).matmat(X), spla.aslinearoperator(S).matmat(X), _max_row(S)


def _np_matrix(A, S, xp):
    x = np.asmatrix(random_vector(A.shape[1], A.dtype, 14)).T
    return A @ x, S @ x, _max_row(S)


def _star(A, S, xp):
    x = random_vector(A.shape[1], A.dtype, 15)
    return A * x, S * x, _max_row(S)


FORMS = {
    "matvec": _matvec,
    "column": _column,
    "multivector": _multivector,
    "dot": _dot,
    "rmatmul": _rmatmul,
    "transpose": _transpose,
    "adjoint": _adjoint,
    "star": _star,
    "linop_matvec": _linop_matvec,
    "linop_rmatvec": _linop_rmatvec,
    "linop_matmat": _linop_matmat,
    "np_matrix": _np_matrix,
}
# forms that take a device array as it is (the others are host-only APIs)
CUPY_FORMS = ("matvec", "column", "multivector", "dot", "rmatmul", "transpose", "adjoint")


def _backend_xp_params():
    params = []
    for name in BACKEND_NAMES:
        params.append(pytest.param(name, "numpy", id=f"{name}-numpy"))
        if name in GPU_BACKEND_NAMES:
            params.append(pytest.param(name, "cupy", id=f"{name}-cupy"))
    return params


@pytest.fixture(scope="module")
def matrices():
    """awkward_matrices for every (value dtype, index dtype), built once."""
    return {
        (np.dtype(v), np.dtype(i)): awkward_matrices(v, i, seed=0)
        for v in VALUE_DTYPES
        for i in INDEX_DTYPES
    }


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("matrix_name", MATRIX_NAMES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("backend", "array_module"), _backend_xp_params())
def test_product_matches_scipy(
    backend, array_module, value_dtype, index_dtype, matrix_name, form, matrices
):
    skip_unless_available(backend)
    if array_module == "cupy":
        if form not in CUPY_FORMS:
            pytest.skip(f"{form} is a host-array API")
        xp = _cuda.cupy_or_none()
    else:
        xp = np
    S = matrices[(np.dtype(value_dtype), np.dtype(index_dtype))][matrix_name]
    A = sg.csr_matrix(S)
    A.backend = backend
    ours, expected, row_length = FORMS[form](A, S, xp)
    assert type(ours) is (type(expected) if xp is np else xp.ndarray), (
        f"{backend}/{form}: returned {type(ours).__name__}, scipy gives {type(expected).__name__}"
    )
    assert_product_close(
        ours, np.asarray(expected), expected.dtype, row_length, what=f"{backend}/{form}"
    )


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize(
    ("a_dtype", "x_dtype"),
    [
        (np.float32, np.float64),
        (np.float64, np.float32),
        (np.float32, np.complex64),
        (np.float64, np.complex128),
        (np.complex64, np.float64),
        (np.int64, np.float64),
        (np.float64, np.int32),
    ],
    ids=lambda d: np.dtype(d).name,
)
def test_mixed_dtypes_follow_scipy(backend, a_dtype, x_dtype):
    """The result dtype is scipy's upcast; a backend that can't compute it refuses clearly."""
    skip_unless_available(backend)
    S = awkward_matrices(np.float64, np.int32)["power_law"].astype(a_dtype)
    A = sg.csr_matrix(S)
    x = random_vector(S.shape[1], np.complex128 if np.dtype(x_dtype).kind == "c" else np.float64)
    x = (x * 10).astype(x_dtype)
    expected = S @ x
    backend_obj = sg.engine._registry.registered()[backend]
    if np.dtype(expected.dtype) not in backend_obj.value_dtypes:
        with pytest.raises(TypeError, match="supports"):
            sg.matvec(A, x, backend=backend)
        return
    assert_product_close(
        sg.matvec(A, x, backend=backend), expected, expected.dtype, _max_row(S), what=backend
    )


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("cls", [sg.csr_matrix, sg.csr_array], ids=["matrix", "array"])
def test_matrix_and_array_classes(backend, cls):
    """Both the csr_matrix and the csr_array class route their products the same way."""
    skip_unless_available(backend)
    S = awkward_matrices(np.float64, np.int32)["random_200x150"]
    A = cls(S)
    A.backend = backend
    x = random_vector(S.shape[1], np.float64)
    assert_product_close(A @ x, S @ x, np.float64, _max_row(S))
    assert_product_close(A.T @ (S @ x), S.T @ (S @ x), np.float64, 200)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_out_argument(backend):
    skip_unless_available(backend)
    S = awkward_matrices(np.float64, np.int32)["random_200x150"]
    A = sg.csr_matrix(S)
    x = random_vector(S.shape[1], np.float64)
    out = np.full(S.shape[0], np.nan)
    y = sg.matvec(A, x, backend=backend, out=out)
    assert y is out
    assert_product_close(out, S @ x, np.float64, _max_row(S))


def test_dimension_mismatch_uses_scipy_wording():
    A = sg.csr_matrix(sp.eye(4, 3, format="csr"))
    with pytest.raises(ValueError, match="dimension mismatch"):
        A @ np.ones(4)
    with pytest.raises(ValueError, match="dimension mismatch"):
        A @ np.ones((5, 2))
    with pytest.raises(ValueError, match="dimension mismatch"):
        sg.matvec(A, np.ones(2))


@pytest.mark.parametrize(
    "ours, theirs",
    [(sg.csr_matrix, sp.csr_matrix), (sg.csc_matrix, sp.csc_matrix), (sg.csr_array, sp.csr_array)],
)
@pytest.mark.parametrize("backend", ["scipy", None])
def test_a_sparse_product_answers_as_scipys_dispatch(ours, theirs, backend):
    """A @ B of sparse operands skips scipy's scalar checks (A.__matmul__) and keeps its
    sparse branch: the same error for a mismatch, the same result and class, with the
    right operand ours, scipy's, or a transpose (another layout)."""
    rng = np.random.default_rng(7)
    S = sp.random(30, 20, density=0.2, random_state=rng, format="csr")
    T = sp.random(20, 25, density=0.2, random_state=rng, format="csr")
    A, B = ours(S), ours(T)
    A.backend = backend
    for right, expected in ((B, S @ T), (theirs(T), S @ T), (ours(T.T).T, S @ T)):
        C = A @ right
        assert isinstance(C, ours) and C.shape == expected.shape
        assert_product_close(C.toarray(), expected.toarray(), np.float64, 20)
    with pytest.raises(ValueError) as ours_error:
        A @ ours(S)
    with pytest.raises(ValueError) as scipys_error:
        theirs(S) @ theirs(S)
    assert str(ours_error.value) == str(scipys_error.value)


def test_matvec_refuses_plain_scipy_matrix():
    with pytest.raises(TypeError, match="sparsegpu.csr_matrix"):
        sg.matvec(sp.eye(3, format="csr"), np.ones(3))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("cls", [sg.csr_matrix, sg.csr_array], ids=["matrix", "array"])
def test_every_form_goes_through_the_dispatcher(form, cls):
    """A correct answer is not enough: the product must have reached the backend."""
    if form in ("star", "np_matrix") and cls is sg.csr_array:
        pytest.skip("for sparse arrays * is element-wise and np.matrix is a matrix API")
    counting = CountingBackend(name="counting-forms")
    sg.register_backend(counting, replace=True)
    try:
        S = awkward_matrices(np.float64, np.int32)["random_200x150"]
        A = cls(S)
        A.backend = "counting-forms"
        FORMS[form](A, sp.csr_matrix(S), np)
        assert counting.matvecs + counting.matmats >= 1, f"{form} bypassed the dispatcher"
    finally:
        sg.unregister_backend("counting-forms")
