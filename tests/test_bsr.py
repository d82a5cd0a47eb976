"""sparsegpu.bsr_matrix / bsr_array: scipy's BSR classes with their products on a backend.

Products are parametrized over backend x value dtype x index dtype x block shape x awkward
matrix x product form (and, on a GPU, x as a NumPy or a CuPy array), against scipy's own
product of the same matrix; the rest checks what the CSR classes promise too: results
stay sparsegpu classes, writes reach the GPU copy, invalid arrays are refused first.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import sparsegpu as sg
from sparsegpu.device import _cuda
from sparsegpu.device._block_mirror import DeviceBlockMatrix
from sparsegpu.device._mirror import HOST
from sparsegpu.engine import _registry
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    HostCopyBackend,
    assert_product_close,
    random_vector,
)

from .conftest import skip_unless_available
from .test_products import FORMS
from .test_retention import check_retained, dispatched  # noqa: F401 (a fixture)

BSR_BACKENDS = ["scipy", "cusparse_bsr", "block", "auto"]
GPU_BSR_BACKENDS = ["cusparse_bsr", "block", "auto"]
BLOCKS = [(2, 2), (3, 3), (6, 6), (2, 3)]
BSR_FORMS = ("matvec", "column", "multivector", "transpose", "adjoint", "rmatmul", "linop_matvec")
CUPY_BSR_FORMS = ("matvec", "column", "multivector", "multivector_fortran", "transpose", "adjoint")


def _multivector_fortran(A, S, xp):
    X = np.stack([random_vector(A.shape[1], A.dtype, s) for s in (3, 4, 5)], axis=1)
    return A @ xp.asfortranarray(xp.asarray(X)), S @ X, _max_row(S)


def _max_row(S) -> int:
    return int(np.diff(S.indptr).max()) if S.shape[0] else 1


FORMS = {**{name: FORMS[name] for name in BSR_FORMS}, "multivector_fortran": _multivector_fortran}


def block_matrix(name: str, blocksize, dtype, index_dtype, seed=0) -> sp.bsr_matrix:
    """An awkward BSR matrix of ``blocksize`` blocks on a 7 x 5 grid of blocks (scipy's)."""
    R, C = blocksize
    rng = np.random.default_rng(seed)
    n_block_rows, n_block_cols = 7, 5
    pattern = rng.random((n_block_rows, n_block_cols)) < 0.45
    if name == "empty":
        pattern[:] = False
    elif name == "empty_block_rows":
        pattern[::2] = False
    elif name == "one_block":
        pattern[:] = False
        pattern[3, 2] = True
    rows, cols = np.nonzero(pattern)
    data = rng.standard_normal((rows.size, R, C))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal((rows.size, R, C))
    indptr = np.concatenate([[0], np.cumsum(pattern.sum(axis=1))])
    S = sp.bsr_matrix(
        (data.astype(dtype), cols, indptr), shape=(n_block_rows * R, n_block_cols * C)
    )
    S.indices = S.indices.astype(index_dtype)
    S.indptr = S.indptr.astype(index_dtype)
    return S


MATRIX_NAMES = ["random", "empty", "empty_block_rows", "one_block"]


def non_canonical(S) -> tuple:
    """``S``'s BSR arrays (data, indices, indptr) with block row 0 reversed and its first
    block repeated: scipy's non-canonical BSR (repeated blocks are summed)."""
    first, last, n_blocks = S.indptr[0], S.indptr[1], S.indptr[-1]
    assert last - first >= 2
    order = np.concatenate([[first], np.arange(last - 1, first - 1, -1), np.arange(last, n_blocks)])
    indptr = S.indptr.copy()
    indptr[1:] += 1
    return S.data[order], S.indices[order], indptr


def _ours(S, backend) -> sg.bsr_matrix:
    A = sg.bsr_matrix(S, copy=True)
    A.indices = S.indices.copy()  # the index dtype as built (scipy may narrow int64)
    A.indptr = S.indptr.copy()
    A.backend = None if backend == "auto" else backend
    return A


def _backend_xp_form_params():
    params = []
    for name in BSR_BACKENDS:
        params += [pytest.param(name, "numpy", f, id=f"{name}-numpy-{f}") for f in BSR_FORMS]
        if name in GPU_BSR_BACKENDS:
            params += [pytest.param(name, "cupy", f, id=f"{name}-cupy-{f}") for f in CUPY_BSR_FORMS]
    return params


def _skip_unless_gpu(backend, array_module):
    if backend == "auto" and array_module == "numpy":
        return
    skip_unless_available("cusparse_bsr" if backend == "auto" else backend)


@pytest.mark.parametrize("matrix_name", MATRIX_NAMES)
@pytest.mark.parametrize("blocksize", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("backend", "array_module", "form"), _backend_xp_form_params())
def test_product_matches_scipy(
    backend, array_module, form, value_dtype, index_dtype, blocksize, matrix_name
):
    _skip_unless_gpu(backend, array_module)
    xp = _cuda.cupy_or_none() if array_module == "cupy" else np
    S = block_matrix(matrix_name, blocksize, value_dtype, index_dtype)
    A = _ours(S, backend)
    ours, expected, _ = FORMS[form](A, S, xp)
    assert type(ours) is (type(expected) if xp is np else xp.ndarray), (
        f"{backend}/{form}: returned {type(ours).__name__}, scipy gives {type(expected).__name__}"
    )
    assert_product_close(
        ours,
        np.asarray(expected),
        expected.dtype,
        max(_max_row(S.tocsr()), 1),
        what=f"{backend}/{form}",
    )


@pytest.mark.parametrize("blocksize", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
def test_auto_on_the_gpu_reads_the_blocks(blocksize):
    """``auto`` multiplies a BSR matrix with a backend that reads BSR mirrors, and
    ``explain`` says which."""
    S = block_matrix("random", blocksize, np.float64, np.int32)
    A = sg.bsr_matrix(S)
    choice = sg.explain(A)
    if _cuda.unavailable_reason() is not None:
        assert choice.backend == "scipy"
        return
    assert "bsr" in _registry.get_backend(choice.backend).formats


def test_planning_times_both_block_orders():
    """Planning by measurement times cuSPARSE reading the blocks in place and from a
    column-major copy, every answer agreeing, and keeps one for the matrix."""
    skip_unless_available("cusparse_bsr")
    S = block_matrix("random", (3, 3), np.float64, np.int32)
    A = sg.bsr_matrix(S)
    x = _cuda.cupy_or_none().asarray(random_vector(S.shape[1], np.float64, 1))
    choice = sg.choose(A, x)
    # the block kernel competes too: whichever wins, cuSPARSE was timed in both orders
    assert choice.level == "measure" and choice.backend in {"cusparse_bsr", "block"}
    timed = {
        m.policy.block_order
        for m in choice.measurements
        if m.backend == "cusparse_bsr" and m.ms is not None
    }
    assert timed == {"row", "column"} and all(m.agreed for m in choice.measurements)
    assert_product_close(A @ x, S @ x.get(), np.float64, 15)


def test_cusparse_bsr_candidates_agree():
    """Every policy the autotuner would sweep (SpMV algorithm x block order, SpMM
    algorithm) gives scipy's answer."""
    skip_unless_available("cusparse_bsr")
    cupy = _cuda.cupy_or_none()
    S = block_matrix("random", (3, 3), np.float64, np.int32)
    backend = _registry.get_backend("cusparse_bsr")
    mirror = sg.bsr_matrix(S)._sg_mirror(backend.residence, np.float64)
    x = random_vector(S.shape[1], np.float64, 1)
    X = np.stack([random_vector(S.shape[1], np.float64, s) for s in (2, 3)], axis=1)
    policies = backend.candidates(mirror) + backend.matmat_candidates(mirror, 2, "C")
    for policy in policies:
        plan = backend.plan(mirror, policy)
        assert_product_close(plan.matvec(cupy.asarray(x)), S @ x, np.float64, 15, str(policy))
        assert_product_close(plan.matmat(cupy.asarray(X)), S @ X, np.float64, 15, str(policy))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_bsr_plan_of_device_arrays(index_dtype):
    """The function API (what a block kernel's benchmark times it with) takes device
    arrays as they are and checks them first."""
    skip_unless_available("cusparse_bsr")
    from sparsegpu.backends.cusparse_bsr import bsr_plan

    cupy = _cuda.cupy_or_none()
    S = block_matrix("random", (2, 3), np.float32, index_dtype)
    arrays = [cupy.asarray(a) for a in (S.indptr, S.indices, S.data)]
    plan = bsr_plan(*arrays, S.shape)
    x = random_vector(S.shape[1], np.float32, 4)
    assert_product_close(plan.matvec(cupy.asarray(x)), S @ x, np.float32, 15)
    bad = arrays[1].copy()
    bad[0] = 99
    with pytest.raises(ValueError, match="block column index out of range"):
        bsr_plan(arrays[0], bad, arrays[2], S.shape)


# ------------------------------------------------------------------- validation
@pytest.mark.parametrize("backend", ["scipy", "cusparse_bsr"])
def test_block_column_out_of_range_is_refused_before_any_kernel(backend):
    skip_unless_available(backend)
    S = block_matrix("random", (2, 2), np.float64, np.int32)
    indices = S.indices.copy()
    indices[3] = 5  # 5 block columns: 0..4
    A = sg.bsr_matrix((S.data, indices, S.indptr), shape=S.shape)
    A.backend = backend
    with pytest.raises(ValueError, match=r"block column index out of range: indices\[3\] = 5"):
        A @ np.ones(S.shape[1])


def test_blocksize_that_does_not_divide_the_shape():
    with pytest.raises(ValueError, match=r"blocksize \(5, 5\) does not divide the matrix's "
                       r"shape \(12, 12\).*pick a blocksize"):  # fmt: skip
        sg.bsr_matrix(np.eye(12), blocksize=(5, 5))
    with pytest.raises(ValueError, match=r"blocksize \(3, 2\) does not divide the shape"):
        DeviceBlockMatrix.from_host(np.ones((1, 3, 2)), [0], [0, 1], (3, 3), HOST)


@pytest.mark.parametrize("blocksize", [(0, 3), (3,), (2, -1), (2.0, 2), "ab", (1, 2, 3), 4])
def test_a_blocksize_that_is_not_two_positive_integers_is_refused(blocksize):
    # a number is no pair at all: a TypeError, as scipy's (its own tests pass one where
    # the keyword-only maxprint would go)
    error = TypeError if isinstance(blocksize, int) else ValueError
    with pytest.raises(error, match=r"blocksize must be two positive integers.*got"):
        sg.bsr_matrix(np.eye(6), blocksize=blocksize)


def test_mismatched_vector_names_the_shapes():
    A = sg.bsr_matrix(block_matrix("random", (2, 2), np.float64, np.int32))
    with pytest.raises(ValueError, match="dimension mismatch"):
        A @ np.ones(A.shape[1] + 1)


class CsrOnlyBackend(HostCopyBackend):
    """A CSR backend that runs everywhere (host-copy, which reads both, made CSR-only)."""

    name = "csr-only"
    formats = ("csr",)


@pytest.fixture
def csr_only():
    sg.register_backend(CsrOnlyBackend(), replace=True)
    yield CsrOnlyBackend.name
    sg.unregister_backend(CsrOnlyBackend.name)


def test_a_csr_backend_named_for_blocks_says_what_to_use(csr_only):
    A = sg.bsr_matrix(block_matrix("random", (2, 2), np.float64, np.int32))
    A.backend = csr_only
    with pytest.raises(TypeError, match=r"'csr-only' computes CSR matrices, not this BSR one"):
        A @ np.ones(A.shape[1])
    with (
        sg.use_backend(csr_only),
        pytest.raises(TypeError, match="use 'scipy', .*'host-copy' or 'auto'"),
    ):
        sg.bsr_matrix(A) @ np.ones(A.shape[1])


def test_a_dtype_cusparse_does_not_take_is_refused_by_name():
    skip_unless_available("cusparse_bsr")
    A = sg.bsr_matrix(block_matrix("random", (2, 2), np.int64, np.int32))
    A.backend = "cusparse_bsr"
    with pytest.raises(TypeError, match="does not support value dtype int64; it supports float32"):
        A @ np.ones(A.shape[1], dtype=np.int64)


# ------------------------------------------------------------- never stale
# host-copy (tests/conftest) copies the arrays as a GPU backend does, on any machine
@pytest.mark.parametrize("backend", ["scipy", "host-copy", "cusparse_bsr"])
@pytest.mark.parametrize(
    "change",
    [
        "write_data",
        "assign_data",
        "imul",
        "sum_duplicates",
        "eliminate_zeros",
        "sort_indices",
        "prune",
    ],
)
def test_changes_reach_the_next_product(backend, change):
    skip_unless_available(backend)
    S = block_matrix("random", (3, 3), np.float64, np.int32, seed=3)
    A = sg.bsr_matrix(non_canonical(S), shape=S.shape)
    A.backend = backend
    x = random_vector(A.shape[1], np.float64, 1)
    A @ x  # a mirror now holds the arrays
    if change == "write_data":
        A.data[1, 0, 0] = 7.0
    elif change == "assign_data":
        A.data = A.data * 3
    elif change == "imul":
        A *= 2
    elif change == "prune":
        A.indptr[-1] -= 1
        A.prune()
    else:
        if change == "eliminate_zeros":
            A.data[0] = 0
        getattr(A, change)()
    expected = sp.bsr_matrix((A.data.copy(), A.indices.copy(), A.indptr.copy()), shape=A.shape)
    assert_product_close(A @ x, expected @ x, np.float64, 30, f"{backend}/{change}")


def test_a_copy_keeps_its_values_when_the_original_changes():
    A = sg.bsr_matrix(block_matrix("random", (2, 3), np.float64, np.int32))
    x = random_vector(A.shape[1], np.float64, 2)
    B = A.copy()
    before = B @ x
    A @ x
    A.data[:] = 0
    # within rounding, not bitwise: the second product may run on the plan that planning
    # measured fastest (the block kernel sums in another order than cuSPARSE)
    assert_product_close(B @ x, before, np.float64, 30, "the copy")
    assert not np.any(A @ x)


# ----------------------------------------------------------- kept as ours
@pytest.fixture
def block_operands(kind):
    """(A, B, S, T): A a sparsegpu BSR with backend "scipy", B a scipy BSR operand of the
    same block shape; S, T their scipy twins."""
    matrix_cls, scipy_cls = {
        "matrix": (sg.bsr_matrix, sp.bsr_matrix),
        "array": (sg.bsr_array, sp.bsr_array),
    }[kind]
    S = scipy_cls(block_matrix("random", (2, 2), np.float64, np.int32, seed=5))
    T = scipy_cls(block_matrix("random", (2, 2), np.float64, np.int32, seed=6))
    A = matrix_cls(S.copy())
    A.backend = "scipy"
    return A, T.copy(), S, T


@pytest.fixture(params=["matrix", "array"])
def kind(request):
    return request.param


KEPT = {
    "transpose": lambda A, B: A.T,
    "tocsr": lambda A, B: A.tocsr(),
    "tocsc": lambda A, B: A.tocsc(),
    "tobsr_other_blocks": lambda A, B: A.tobsr(blocksize=(1, 2)),
    "copy": lambda A, B: A.copy(),
    "astype": lambda A, B: A.astype(np.float32),
    "times_scalar": lambda A, B: A * 2,
    "negate": lambda A, B: -A,
    "abs": lambda A, B: abs(A),
    "plus": lambda A, B: A + B,
    "minus": lambda A, B: A - B,
    "multiply": lambda A, B: A.multiply(B),
    "B_plus_A": lambda A, B: B + A,
    "B_minus_A": lambda A, B: B - A,
    "A_matmul_BT": lambda A, B: A @ B.T,
    "B_matmul_A": lambda A, B: B.T @ A,
}


@pytest.mark.parametrize("op", list(KEPT))
def test_results_stay_sparsegpu_classes(op, kind, block_operands, dispatched):  # noqa: F811
    A, B, S, T = block_operands
    check_retained(KEPT[op](A, B), KEPT[op](S, T), kind, dispatched)


def test_round_trip_through_csr_keeps_values_and_blocks():
    S = block_matrix("random", (3, 3), np.float64, np.int32)
    C = sg.csr_matrix(S.tocsr())
    A = C.tobsr(blocksize=(3, 3))
    assert type(A) is sg.bsr_matrix and A.blocksize == (3, 3)
    assert type(A.tocsr()) is sg.csr_matrix
    np.testing.assert_array_equal(A.toarray(), S.toarray())


def test_kron_with_a_dense_block_builds_blocks_as_scipy_does():
    P = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(5, 5), format="csr")
    block = np.array([[4.0, 1.0], [1.0, 3.0]])
    K = sg.kron(sg.csr_matrix(P), block)
    assert type(K) is sg.bsr_matrix and K.blocksize == (2, 2)
    np.testing.assert_array_equal(K.toarray(), sp.kron(P, block).toarray())
    assert type(sg.bmat([[K, None], [None, K]], format="bsr")) is sg.bsr_matrix


# ------------------------------------------------------------------ drop-in
def _spd_blocks(n=40) -> sg.bsr_matrix:
    P = sp.diags([-1.0, 2.1, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    return sg.kron(sg.csr_matrix(P), np.array([[4.0, 1.0, 0.0], [1.0, 4.0, 1.0], [0.0, 1.0, 4.0]]))


def test_scipy_cg_on_blocks_matches_scipy():
    A = _spd_blocks()
    b = random_vector(A.shape[0], np.float64, 3)
    x, info = spla.cg(A, b, rtol=1e-10)
    expected, _ = spla.cg(sp.bsr_matrix(A), b, rtol=1e-10)
    assert info == 0
    np.testing.assert_allclose(x, expected, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("array_module", ["numpy", "cupy"])
def test_sparsegpu_cg_on_blocks_solves(array_module):
    A = _spd_blocks()
    b = random_vector(A.shape[0], np.float64, 4)
    if array_module == "cupy":
        skip_unless_available("cusparse_bsr")
        b = _cuda.cupy_or_none().asarray(b)
    x, info = sg.linalg.cg(A, b, rtol=1e-10)
    assert info == 0
    assert type(x) is type(b)
    residual = np.asarray(_cuda.to_host(A @ x - b))
    assert np.linalg.norm(residual) <= 1e-9 * np.linalg.norm(_cuda.to_host(b))


def test_to_csr_of_the_block_mirror_is_scipy_tocsr():
    for blocksize in BLOCKS:
        S = block_matrix("empty_block_rows", blocksize, np.float32, np.int64)
        csr = DeviceBlockMatrix.from_host(S.data, S.indices, S.indptr, S.shape, HOST).to_csr()
        M = sp.csr_matrix((csr.data, csr.indices, csr.indptr), shape=csr.shape)
        np.testing.assert_array_equal(M.toarray(), S.toarray())
        assert csr.index_dtype == np.int64


@pytest.mark.parametrize("blocksize", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
def test_non_canonical_blocks_are_found_and_their_csr_form_sorted(blocksize):
    """Unsorted and repeated blocks (scipy's non-canonical BSR) are what cuSPARSE's BSR
    routines are not given: the check finds them, and the sorted CSR form of the blocks
    is the same matrix with each row's columns in increasing order."""
    S = block_matrix("random", blocksize, np.float64, np.int32)
    canonical = DeviceBlockMatrix.from_host(S.data, S.indices, S.indptr, S.shape, HOST)
    assert canonical.has_sorted_blocks()
    M = DeviceBlockMatrix.from_host(*non_canonical(S), S.shape, HOST)
    assert not M.has_sorted_blocks()
    csr = M.to_csr(sort_columns=True)
    rows = np.repeat(np.arange(S.shape[0]), np.diff(csr.indptr))
    assert np.all((np.diff(csr.indices) >= 0) | (np.diff(rows) != 0))
    expected = sp.bsr_matrix((M.data, M.indices, M.indptr), shape=S.shape).toarray()
    got = sp.csr_matrix((csr.data, csr.indices, csr.indptr), shape=S.shape).toarray()
    np.testing.assert_allclose(got, expected, rtol=1e-15)


@pytest.mark.parametrize("blocksize", [(1, 1), (3, 3)], ids=lambda b: f"{b[0]}x{b[1]}")
def test_non_canonical_products_on_the_gpu(blocksize):
    """Non-canonical blocks, which cuSPARSE's BSR routines are not given (and 1x1 blocks,
    which they refuse), are multiplied through the sorted CSR form: scipy's answers."""
    skip_unless_available("cusparse_bsr")
    from sparsegpu.backends.cusparse_bsr import bsr_plan

    cupy = _cuda.cupy_or_none()
    S = block_matrix("random", blocksize, np.float64, np.int32)
    arrays = non_canonical(S)
    expected = sp.bsr_matrix(arrays, shape=S.shape)
    x = random_vector(S.shape[1], np.float64, 1)
    X = np.stack([random_vector(S.shape[1], np.float64, s) for s in (2, 3)], axis=1)
    plan = bsr_plan(*(cupy.asarray(a) for a in arrays[::-1]), S.shape)
    assert plan.refused is not None
    A = sg.bsr_matrix(arrays, shape=S.shape)
    A.backend = "cusparse_bsr"
    for y in (plan.matvec(cupy.asarray(x)), A @ cupy.asarray(x), A @ x):
        assert_product_close(y, expected @ x, np.float64, 30)
    assert_product_close(A @ cupy.asarray(X), expected @ X, np.float64, 30)


# ------------------------------------------------------------------ A @ B
@pytest.mark.parametrize("backend", ["host-copy", "cusparse"])
@pytest.mark.parametrize("blocksize", [(2, 2), (3, 3), (2, 3)], ids=lambda b: f"{b[0]}x{b[1]}")
def test_a_block_right_operand_leaves_no_mirror(backend, blocksize):
    """A BSR right operand of a CSR ``A @ B`` on the GPU is multiplied as its CSR form,
    made for the product: scipy's answer, a change to the blocks reaching the next
    product, and no device mirror kept on ``B`` (scipy's ``getrow`` of a BSR matrix is
    such a product)."""
    skip_unless_available(backend)
    T = block_matrix("random", blocksize, np.float64, np.int32, seed=5)
    S = sp.random(T.shape[1], T.shape[0], density=0.2, format="csr", random_state=6)
    A, B = sg.csr_matrix(S), sg.bsr_matrix(T.copy())
    A.backend = backend
    C = A @ B
    assert type(C) is sg.csr_matrix
    np.testing.assert_allclose(C.toarray(), (S @ T).toarray(), rtol=1e-13, atol=1e-13)
    assert "_sg_mirrors" not in B.__dict__
    B.data[0] *= 2
    T = T.copy()
    T.data[0] *= 2
    np.testing.assert_allclose((A @ B).toarray(), (S @ T).toarray(), rtol=1e-13, atol=1e-13)


def test_explain_of_a_block_left_operand_says_scipy_computes_it():
    """``A @ B`` with a BSR ``A`` is scipy's (a BSR result, as scipy gives): explain says so
    rather than naming a GPU algorithm that does not run."""
    S = block_matrix("random", (3, 3), np.float64, np.int32)
    A, B = sg.bsr_matrix(S), sg.bsr_matrix(S.T.tobsr(blocksize=(3, 3)))
    plan = sg.explain(A, B)
    assert plan.algorithm == "scipy" and "BSR" in plan.reason
    assert type(A @ B) is sg.bsr_matrix
