"""Sparse products ``A @ B`` where the GPU computes: equal to scipy's, canonical, kept on the
device until the host reads them, planned, blocked when their work space does not fit.

Two engines, one suite: "host-copy" (the test engine :class:`sparsegpu.testing.HostSpgemm`
on host copies: the residence machinery, planning, row blocks and memory errors on any
machine) and "gpu" (``auto`` with a usable GPU: cuSPARSE SpGEMM; skips without one).
scipy is the oracle.
"""

from __future__ import annotations

import functools
import gc
import pickle
import weakref

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import spgemm
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import CUPY, HOST, DeviceMatrix, DeviceMemoryError
from sparsegpu.engine import _sparse_dispatch, _sparse_planning
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
    no_gpu_reason,
    random_sparse,
    random_vector,
)

MATRIX_NAMES = list(awkward_matrices())
ENGINES = ["host-copy", "gpu"]
# M.T @ M of these is too large for a dense comparison (25M nonzeros for one_long_row)
NO_GRAM = {"one_long_row"}
# products of these with more than two factors cost seconds on the host oracle: on the
# CPU (host-copy engine) only their two-factor forms run
HEAVY = {"one_long_row", "power_law"}


@pytest.fixture(params=ENGINES)
def engine(request):
    if request.param == "gpu" and _cuda.cupy_or_none() is None:
        pytest.skip(no_gpu_reason())
    return request.param


def _on(engine, S, cls=sg.csr_matrix):
    """``S`` as a sparsegpu matrix whose products compute on ``engine``."""
    A = cls(S)
    A.backend = "host-copy" if engine == "host-copy" else None
    return A


def _pending(M) -> bool:
    return "_sg_pending" in M.__dict__


def _max_products(S, T) -> int:
    """Terms in the longest sum of ``S @ T`` (for the tolerance)."""
    S, T = sp.csr_matrix(S), sp.csr_matrix(T)
    if not S.nnz or not T.nnz:
        return 1
    pattern = abs(sp.csr_matrix((np.ones(S.nnz), S.indices, S.indptr), shape=S.shape))
    counts = pattern @ sp.csr_matrix((np.ones(T.nnz), T.indices, T.indptr), shape=T.shape)
    return max(int(counts.max()) if counts.nnz else 1, 1)


def check_product(ours, expected, dtype, terms=1, fmt=None, kind_of=None):
    """``ours`` is ``expected`` (scipy's): sparsegpu class of its format and kind, its
    dtype, shape and index dtype, values within the tolerance, canonical host arrays."""
    fmt = fmt or expected.format
    array = not isinstance(kind_of if kind_of is not None else expected, sp.spmatrix)
    want = {
        ("csr", False): sg.csr_matrix,
        ("csr", True): sg.csr_array,
        ("csc", False): sg.csc_matrix,
        ("csc", True): sg.csc_array,
    }[(fmt, array)]
    assert type(ours) is want, (type(ours), want)
    assert ours.shape == expected.shape
    assert ours.dtype == expected.dtype
    assert ours.indices.dtype == expected.indices.dtype
    fresh = type(expected)((ours.data, ours.indices, ours.indptr), shape=ours.shape)
    fresh = sp.csr_matrix(fresh) if fmt == "csr" else sp.csc_matrix(fresh)
    assert fresh.has_canonical_format, "the result is not canonical (sorted, no duplicates)"
    assert_product_close(ours.toarray(), expected.toarray(), dtype, max_row_length=terms)


@functools.cache
def _awkward(dtype, index_dtype):
    return awkward_matrices(dtype, index_dtype)


def _operands(name, dtype, index_dtype):
    """(S, T, L, P): an awkward matrix, a right operand, a left operand and a prolongation
    (scipy, seeded, ``index_dtype`` indices)."""
    S = _awkward(dtype, index_dtype)[name].copy()
    T = random_sparse((S.shape[1], 17), 0.2, 5, dtype)
    L = random_sparse((9, S.shape[0]), 0.3, 6, dtype)
    P = random_sparse((S.shape[1], 5), 0.4, 7, dtype)
    for M in (S, T, L, P):  # (copy() and scipy's constructors narrow them)
        M.indices, M.indptr = M.indices.astype(index_dtype), M.indptr.astype(index_dtype)
    return S, T, L, P


# Each form: (A on the engine, engine, S, T, L, P) -> (ours, expected, terms, format or None)
FORMS = {
    "A@B": lambda A, e, S, T, L, P: (A @ _on(e, T), S @ T, _max_products(S, T)),
    "A@S": lambda A, e, S, T, L, P: (A @ T, S @ T, _max_products(S, T)),
    "S@A": lambda A, e, S, T, L, P: (L @ A, L @ S, _max_products(L, S)),
    "A@A.T": lambda A, e, S, T, L, P: (A @ A.T, S @ S.T, _max_products(S, S.T)),
    "A.T@A": lambda A, e, S, T, L, P: (A.T @ A, S.T @ S, _max_products(S.T, S)),
    "P.T@A.T@A@P": lambda A, e, S, T, L, P: (
        _on(e, P).T @ (A.T @ A) @ _on(e, P),
        P.T @ (S.T @ S) @ P,
        _max_products(S.T, S) * _max_products(P.T, P) * 4,
    ),
    "galerkin(A,P)": lambda A, e, S, T, L, P: (
        sg.galerkin_product(A, P),
        (P.T @ S @ P).tocsr(),
        _max_products(P.T, S) * _max_products(S, P) * 4,
    ),
    "A@A.T@A": lambda A, e, S, T, L, P: (
        A @ A.T @ A,
        S @ S.T @ S,
        _max_products(S, S.T) * _max_products(S.T, S),
    ),
}
GRAM_FORMS = {"A.T@A", "P.T@A.T@A@P"}
LONG_FORMS = GRAM_FORMS | {"A@A.T@A"}


@pytest.mark.parametrize("name", MATRIX_NAMES)
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda t: np.dtype(t).name)
def test_products_equal_scipy(engine, dtype, index_dtype, form, name):
    if name in NO_GRAM and form in GRAM_FORMS:
        pytest.skip(f"{form} of {name} is too large for a dense comparison")
    if engine == "host-copy" and name in HEAVY and form in LONG_FORMS:
        pytest.skip(f"{form} of {name}: on the GPU only (seconds on the host oracle)")
    S, T, L, P = _operands(name, dtype, index_dtype)
    if form.startswith("galerkin") and S.shape[0] != S.shape[1]:  # A square, as the
        n = max(S.shape)  # product needs: S and P grown by empty rows and columns
        S.resize((n, n))
        P.resize((n, P.shape[1]))
        for M in (S, P):
            M.indices, M.indptr = M.indices.astype(index_dtype), M.indptr.astype(index_dtype)
    A = _on(engine, S)
    ours, expected, terms = FORMS[form](A, engine, S, T, L, P)
    assert _pending(ours), "a product computed on the device keeps its result there"
    check_product(ours, expected, dtype, terms)


KIND_CLASSES = {"matrix": (sg.csr_matrix, sp.csr_matrix), "array": (sg.csr_array, sp.csr_array)}


@pytest.mark.parametrize("kind", list(KIND_CLASSES))
def test_result_kind_follows_the_left_operand(engine, kind):
    cls, scipy_cls = KIND_CLASSES[kind]
    S = scipy_cls(random_sparse((30, 20), 0.2, 1, np.float64))
    A = _on(engine, S, cls)
    check_product(A @ A.T, S @ S.T, np.float64, 20)
    check_product(A.T @ A, S.T @ S, np.float64, 30)


def _count_transposes(monkeypatch) -> list:
    """The classes whose CSR or CSC ``transpose`` runs from now on (until
    ``monkeypatch.undo``)."""
    transposes = []

    def counting(original):
        def transpose(self, *args, **kwargs):
            transposes.append(type(self))
            return original(self, *args, **kwargs)

        return transpose

    for cls in (sp.csr_matrix, sp.csc_matrix):
        monkeypatch.setattr(cls, "transpose", counting(cls.transpose))
    return transposes


def test_products_with_a_transpose_build_no_transpose_on_the_host(engine, monkeypatch):
    """``A.T @ A`` and ``A @ A.T`` multiply the transpose made once on the device: no
    scipy transpose per product (each cost about 0.2 ms on 3M nonzeros)."""
    S = random_sparse((50, 30), 0.1, 12, np.float64)
    A = _on(engine, S)
    AT, ATT = A.T, A.T.T
    check_product(AT @ A, S.T @ S, np.float64, 50)  # the device transpose, made once
    transposes = _count_transposes(monkeypatch)
    products = [(AT @ A, S.T @ S, 50), (A @ AT, S @ S.T, 30), (ATT @ AT, S @ S.T, 30)]
    ours = [t for t in transposes if issubclass(t, (sg.csr_matrix, sg.csc_matrix))]
    assert ours == [], ours
    monkeypatch.undo()
    for ours, expected, terms in products:
        check_product(ours, expected, np.float64, terms)


def test_galerkin_product_without_a_host_transpose(engine, monkeypatch):
    S = random_sparse((60, 60), 0.1, 2, np.float64)
    P = random_sparse((60, 8), 0.3, 3, np.float64)
    A = _on(engine, S)
    transposes = _count_transposes(monkeypatch)
    G = sg.galerkin_product(A, P)
    assert _pending(G)
    assert all(issubclass(t, sg.csr_matrix) for t in transposes), transposes
    monkeypatch.undo()
    expected = (P.T @ S @ P).tocsr()
    check_product(G, expected, np.float64, 60 * 8)


@pytest.mark.parametrize("kind", list(KIND_CLASSES))
@pytest.mark.parametrize("p_form", ["scipy", "csr", "csc", "result"])
@pytest.mark.parametrize("a_format", ["csr", "csc"])
def test_galerkin_product_of_every_operand_form(engine, kind, p_form, a_format):
    """A CSR or CSC ``A``; ``P`` from scipy, a sparsegpu CSR or CSC, or a product kept on
    the device: scipy's ``(P.T @ A @ P).tocsr()``, of ``A``'s kind."""
    cls, scipy_cls = KIND_CLASSES[kind]
    S = scipy_cls(random_sparse((50, 50), 0.1, 8, np.float64)).asformat(a_format)
    Q = scipy_cls(random_sparse((50, 7), 0.3, 9, np.float64))
    A = _on(
        engine,
        S,
        {"csr": cls, "csc": sg.csc_matrix if kind == "matrix" else sg.csc_array}[a_format],
    )
    identity = scipy_cls(sp.eye(50, format="csr"))
    P = {
        "scipy": lambda: Q,
        "csr": lambda: _on(engine, Q, cls),
        "csc": lambda: _on(engine, Q, cls).tocsc(),
        "result": lambda: _on(engine, identity, cls) @ _on(engine, Q, cls),
    }[p_form]()
    if p_form == "result":
        assert _pending(P)
    G = sg.galerkin_product(A, P)
    assert _pending(G)
    check_product(G, (Q.T @ S @ Q).tocsr(), np.float64, 50 * 7)


def test_galerkin_product_keeps_the_transpose_and_sees_a_change_of_p(engine, monkeypatch):
    S = random_sparse((40, 40), 0.15, 10, np.float64)
    Q = random_sparse((40, 6), 0.3, 11, np.float64)
    A, P = _on(engine, S), _on(engine, Q)
    expected = (Q.T @ S @ Q).tocsr()
    sg.galerkin_product(A, P)
    transposes = _count_transposes(monkeypatch)
    G = sg.galerkin_product(A, P)
    assert transposes == [], "the second product reused P.T's mirror"
    check_product(G, expected, np.float64, 40 * 6)
    monkeypatch.undo()
    P.data[:] *= 2.0  # seen: P.T's kept mirror is dropped with P's
    Q.data[:] *= 2.0
    check_product(sg.galerkin_product(A, P), (Q.T @ S @ Q).tocsr(), np.float64, 40 * 6)


@pytest.mark.parametrize("form", ["A@A", "A.T@A", "galerkin"])
def test_a_dropped_result_frees_its_device_arrays_at_once(engine, form):
    """No reference cycle keeps a result's device arrays: a loop of products holds one
    result at a time, not every result since Python's cycle collector last ran."""
    S = random_sparse((40, 40), 0.15, 13, np.float64)
    A, P = _on(engine, S), _on(engine, random_sparse((40, 6), 0.3, 14, np.float64))
    AT = A.T
    make = {
        "A@A": lambda: A @ A,
        "A.T@A": lambda: AT @ A,
        "galerkin": lambda: sg.galerkin_product(A, P),
    }[form]
    make()  # mirrors and plans made
    collecting = gc.isenabled()
    gc.disable()
    try:
        C = make()
        device = weakref.ref(C.__dict__["_sg_pending"].device)
        del C
        assert device() is None, "the result's device arrays outlived the result"
    finally:
        if collecting:
            gc.enable()


@pytest.mark.parametrize("use", ["host_copy", "spmv", "product"])
def test_a_result_is_used_right_from_another_stream(use):
    """A product returns without waiting for its last kernels; a use of its result on
    another (non-blocking) stream right away waits for them: its host copy, a matvec and
    a product with it see the finished result."""
    cupy = _cuda.cupy_or_none()
    if cupy is None:
        pytest.skip(no_gpu_reason())
    from sparsegpu.datasets import synthetic

    S = synthetic.stencil_2d(300)  # 90,000 rows: its square's copy runs a while
    A = sg.csr_matrix(S)
    expected = (S @ S).tocsr()
    x = np.linspace(0.0, 1.0, S.shape[0])

    def same(ours, theirs):  # without a dense copy (90,000 x 90,000)
        ours = sp.csr_matrix((ours.data, ours.indices, ours.indptr), shape=ours.shape)
        assert ours.has_canonical_format and ours.nnz == theirs.nnz
        assert abs(ours - theirs).max() <= 1e-12 * abs(theirs).max()

    for _ in range(2):  # the second time with every plan made
        first, second = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with first:
            C = A @ A
        with second:
            if use == "host_copy":
                same(C, expected)
            elif use == "spmv":
                got = cupy.asnumpy(C @ cupy.asarray(x))
                np.testing.assert_allclose(got, expected @ x, rtol=1e-12)
            else:
                same(C @ A, (expected @ S).tocsr())
        second.synchronize()


def test_a_widened_result_keeps_what_is_known_of_its_rows(engine):
    """``with_index_dtype`` (scipy's sparse arrays keep an operand's int64 indices) makes a
    matrix of the same rows: its statistics and recorded bound carry over."""
    S = random_sparse((40, 40), 0.15, 15, np.float64)
    A = _on(engine, S)
    residence = _sparse_dispatch.where(A, A)[1]
    C = _sparse_planning.multiply_sparse(
        *_sparse_dispatch.operands(A, A, residence, np.float64),
        _sparse_dispatch.where(A, A)[0],
        level="estimate",
    )
    stats = C.row_stats
    wide = spgemm.with_index_dtype(C, np.int64)
    assert wide.index_dtype == np.int64 and wide.data is C.data
    assert wide.row_stats is stats and wide.row_bound == C.row_bound
    assert wide.longest_row == C.longest_row
    np.testing.assert_array_equal(_cuda.to_host(wide.indices), _cuda.to_host(C.indices))


def test_a_product_with_a_fresh_result_reads_no_pass_over_it(engine):
    """A result records a bound of its longest row and its pattern's key (from its
    operands'), so multiplying it again computes no statistics of it first."""
    S = random_sparse((60, 60), 0.1, 12, np.float64)
    A = _on(engine, S)
    C = A @ A
    device = C.__dict__["_sg_pending"].device
    longest = int(np.diff((S @ S).indptr).max())
    assert longest <= device.row_bound <= 60
    assert device.formats["pattern_key"][3][0] == "product"
    D = C @ A
    assert device._stats is None and device._row_stats is None, "C's rows were read"
    check_product(D, S @ S @ S, np.float64, 60 * 60)
    again = (A @ A).__dict__["_sg_pending"].device
    assert again.formats["pattern_key"] == device.formats["pattern_key"]


def _awkward_rows(rng, index_dtype, complex_values):
    """Row offsets, columns and values of awkward rows: leading, inner and trailing empty
    rows, duplicates (three of one column in a row), unsorted, one long row."""
    lengths = np.array([0, 0, 3, 1, 0, 7, 2, 40, 0, 5, 0, 0])
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(index_dtype)
    indices = rng.integers(0, 9, size=int(indptr[-1]))
    indices[indptr[2] : indptr[2] + 3] = 4  # one column three times
    data = rng.random(indices.size) - 0.5
    if complex_values:
        data = data + 1j * (rng.random(indices.size) - 0.5)
    return indptr, indices.astype(index_dtype), data


@pytest.mark.parametrize("complex_values", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("where", ["host", "gpu"])
def test_a_canonical_copy_is_scipys_sum_duplicates(where, index_dtype, complex_values):
    """The canonical copy (sorted rows, duplicates summed, row offsets read off the sort)
    equals scipy's ``sum_duplicates`` on awkward rows, in the operands' index dtype, and on
    a matrix of no entries."""
    if where == "gpu" and _cuda.cupy_or_none() is None:
        pytest.skip(no_gpu_reason())
    residence = CUPY if where == "gpu" else HOST
    xp = residence.xp
    rng = np.random.default_rng(21)
    for shape, (indptr, indices, data) in (
        ((12, 9), _awkward_rows(rng, index_dtype, complex_values)),
        ((3, 4), (np.zeros(4, index_dtype), np.zeros(0, index_dtype), np.zeros(0))),
    ):
        matrix = DeviceMatrix(xp.asarray(data), xp.asarray(indices), xp.asarray(indptr),
                              shape, residence)  # fmt: skip
        copy = spgemm.canonical_copy(matrix)
        expected = sp.csr_matrix((data, indices, indptr), shape=shape)
        expected.sum_duplicates()
        assert copy.indptr.dtype == index_dtype and copy.indices.dtype == index_dtype
        np.testing.assert_array_equal(_cuda.to_host(copy.indptr), expected.indptr)
        np.testing.assert_array_equal(_cuda.to_host(copy.indices), expected.indices)
        np.testing.assert_allclose(_cuda.to_host(copy.data), expected.data, rtol=1e-14)


def test_a_canonical_copy_keeps_a_bound_of_its_rows(engine):
    """An operand with unsorted rows and duplicates is multiplied through its canonical
    copy: the copy keeps the operand's longest row as a bound (summing duplicates never
    lengthens a row), so neither the copy nor a product of it is read for its rows first,
    and the product is still scipy's."""
    rng = np.random.default_rng(3)
    rows = np.repeat(np.arange(50), 6)
    cols = rng.integers(0, 50, size=rows.size)  # duplicates within rows, unsorted
    S = sp.csr_matrix((rng.random(rows.size) + 1, (rows, cols)), shape=(50, 50))
    S.has_canonical_format = False
    raw = sp.csr_matrix((S.data, S.indices, S.indptr), shape=S.shape)
    A = _on(engine, raw)
    _, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
    left, _ = _sparse_dispatch.operands(A, A, residence, value_dtype)
    copy = spgemm.canonical_copy(left)
    assert copy.row_bound == left.known_longest_row
    if copy.row_bound is not None:
        exact = int(np.diff(_cuda.to_host(copy.indptr)).max())
        assert exact <= copy.row_bound
        assert copy._stats is None and copy._row_stats is None, "the copy's rows were read"
    expected = raw.toarray() @ raw.toarray()
    np.testing.assert_allclose((A @ A).toarray(), expected, rtol=1e-12)


def test_a_product_of_a_product_stays_on_the_device(engine):
    S = random_sparse((40, 40), 0.2, 4, np.float64)
    A = _on(engine, S)
    C = A @ A
    D = C @ A @ C
    assert _pending(C) and _pending(D)
    x = random_vector(40, np.float64, 1)
    xp = np if engine == "host-copy" else _cuda.cupy_or_none()
    y = D @ xp.asarray(x)
    assert _pending(D), "D @ x ran on D's device copy"
    assert_product_close(y, (S @ S @ S @ S @ S) @ x, np.float64, 40**4)
    assert D.nnz == (S @ S @ S @ S @ S).nnz
    assert D.dtype == np.float64 and D.shape == (40, 40) and _pending(D)


def test_a_solve_on_a_result_stays_on_the_device(engine):
    S = random_sparse((80, 80), 0.05, 5, np.float64)
    B = _on(engine, sp.vstack([S, 0.5 * sp.eye(80)]).tocsr())
    K = B.T @ B  # S.T S + I / 4: symmetric positive definite, kept on the device
    assert _pending(K)
    xp = np if engine == "host-copy" else _cuda.cupy_or_none()
    b = xp.asarray(random_vector(80, np.float64, 2))
    x, info = sg.linalg.cg(K, b, rtol=1e-10, maxiter=2000)
    assert _pending(K), "the solve multiplied with the device copy"
    expected = (S.T @ S + 0.25 * sp.eye(80)).toarray()
    assert np.abs(expected @ _to_host(x) - _to_host(b)).max() < 1e-6


def _to_host(a):
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


def test_host_arrays_are_made_on_first_use_and_shared_with_the_transpose(engine):
    S = random_sparse((30, 25), 0.2, 6, np.complex128)
    A = _on(engine, S)
    C = A @ A.T
    CT = C.T
    assert _pending(C) and _pending(CT) and type(CT) is sg.csc_matrix
    C.sum_duplicates()
    C.sort_indices()
    assert _pending(C), "scipy's no-op methods on a canonical result download nothing"
    data = CT.data
    assert not _pending(C) and not _pending(CT)
    assert np.shares_memory(data, C.data), "a result and its transpose share their arrays"
    expected = S @ S.conj().T.conj()
    np.testing.assert_allclose(C.toarray(), expected.toarray(), rtol=1e-12, atol=1e-12)


def test_a_result_behaves_as_scipy(engine):
    S = random_sparse((30, 30), 0.2, 7, np.float64)
    A = _on(engine, S)
    E = S @ S
    cases = {
        "copy": lambda M: M.copy(),
        "transpose_copy": lambda M: M.transpose(copy=True),
        "pickle": lambda M: pickle.loads(pickle.dumps(M)),
        "astype": lambda M: M.astype(np.float32),
        "sum": lambda M: M + M,
        "multiply": lambda M: M.multiply(M),
        "slice": lambda M: M[3:11],
        "tocoo": lambda M: M.tocoo(),
        "tocsc": lambda M: M.tocsc(),
        "abs": lambda M: abs(M),
        "diagonal": lambda M: sp.diags(M.diagonal()),
    }
    for what, f in cases.items():
        ours, expected = f(A @ A), f(E)
        np.testing.assert_allclose(
            _dense(ours), _dense(expected), rtol=1e-6, atol=1e-12, err_msg=what
        )
    C = A @ A
    C.eliminate_zeros()
    np.testing.assert_allclose(C.toarray(), E.toarray(), rtol=1e-12, atol=1e-12)
    assert C.count_nonzero() == E.count_nonzero()
    assert repr(A @ A).startswith("<")


def _dense(M):
    return M.toarray() if sp.issparse(M) else np.asarray(M)


def test_a_write_after_first_use_reaches_the_next_product(engine):
    S = random_sparse((20, 20), 0.3, 8, np.float64)
    A = _on(engine, S)
    C = A @ A
    x = random_vector(20, np.float64, 3)
    xp = np if engine == "host-copy" else _cuda.cupy_or_none()
    C @ xp.asarray(x)
    C.data[:] = 2.0  # through the write-through view: drops the device copy
    expected = sp.csr_matrix((np.full((S @ S).nnz, 2.0), C.indices, C.indptr), shape=C.shape)
    assert_product_close(C @ xp.asarray(x), expected @ x, np.float64, 20)
    copy = (A @ A).copy()
    other = copy.copy()
    copy.data[:] = 0.0
    assert other.toarray().any(), "a copy of a result has arrays of its own"


def test_scipy_backend_is_scipys_product(engine):
    S = random_sparse((30, 20), 0.2, 9, np.float64)
    A = _on(engine, S)
    with sg.use_backend("scipy"):
        scoped = A.T @ A if A.backend is None else None
    A.backend = "scipy"
    expected = S.T @ S
    for C in (A.T @ A, scoped):
        if C is None:  # a named backend is not overridden by use_backend
            continue
        assert not _pending(C) and type(C) is sg.csc_matrix
        np.testing.assert_array_equal(C.indptr, expected.indptr)
        np.testing.assert_array_equal(C.indices, expected.indices)
        np.testing.assert_array_equal(C.data, expected.data)


def test_auto_without_a_gpu_stays_on_scipy(monkeypatch):
    monkeypatch.setattr(_sparse_dispatch._cuda, "unavailable_reason", lambda: "no GPU (test)")
    S = random_sparse((30, 20), 0.2, 10, np.float64)
    A = sg.csr_matrix(S)
    C = A @ A.T
    assert not _pending(C) and type(C) is sg.csr_matrix
    np.testing.assert_allclose(C.toarray(), (S @ S.T).toarray(), rtol=1e-12)
    assert sg.explain(A, A.T).algorithm == "scipy"


def test_integer_values_stay_on_scipy(engine):
    S = sp.csr_matrix(np.arange(12).reshape(3, 4) % 3)
    A = _on(engine, S)
    C = A @ A.T
    assert not _pending(C)
    np.testing.assert_array_equal(C.toarray(), (S @ S.T).toarray())


# ------------------------------------------------------------------- memory and blocks
def _big(engine, seed=11, n=400):
    S = random_sparse((n, n), 0.02, seed, np.float64)
    return S, _on(engine, S)


def _result_bytes(C) -> int:
    return C.nnz * (C.dtype.itemsize + C.indices.dtype.itemsize) + C.indptr.nbytes


def test_a_product_whose_work_space_does_not_fit_runs_in_row_blocks(engine, monkeypatch):
    S, A = _big(engine)
    whole = sg.spgemm(A, A, planning="estimate")
    peak = sg.explain(A, A).peak_bytes
    result = _result_bytes(whole)
    assert peak > result
    monkeypatch.setattr(type(_sparse_dispatch.where(A, A)[0]), "lean_algorithms", lambda self: ())
    limit = result + (peak - result) // 6
    C = sg.spgemm(A, A, memory_limit=limit, planning="estimate")
    last = sg.explain(A, A).last
    assert last.blocks > 1, last
    assert last.peak_bytes <= limit
    check_product(C, S @ S, np.float64, 400)


def test_a_capped_cupy_pool_makes_the_product_complete_in_row_blocks(cupy, monkeypatch):
    """CuPy's memory pool limited below what ALG1 needs beside the operands and the
    result (a fresh pool, so that no free memory of earlier tests escapes the limit)."""
    S = random_sparse((2000, 2000), 0.01, 20, np.float64)
    pool, previous = cupy.cuda.MemoryPool(), cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    try:
        A = _on("gpu", S)
        whole = sg.spgemm(A, A, algorithm="alg1")
        peak, result = sg.explain(A, A).peak_bytes, _result_bytes(whole)
        engine = type(_sparse_dispatch.where(A, A)[0])
        monkeypatch.setattr(engine, "lean_algorithms", lambda self: ())
        pool.free_all_blocks()
        pool.set_limit(size=pool.total_bytes() + result + (peak - result) // 4)
        C = sg.spgemm(A, A, algorithm="alg1")
        last = sg.explain(A, A).last
        assert last.blocks > 1, last
        check_product(C, S @ S, np.float64, 2000)
    finally:
        cupy.cuda.set_allocator(previous)


def test_a_lean_algorithm_runs_where_the_default_does_not_fit(engine):
    S, A = _big(engine, 12)
    whole = sg.spgemm(A, A, planning="estimate")
    peak = sg.explain(A, A).peak_bytes
    limit = _result_bytes(whole) + (peak - _result_bytes(whole)) // 2
    C = sg.spgemm(A, A, memory_limit=limit, planning="estimate")
    last = sg.explain(A, A).last
    assert (last.algorithm, last.blocks) != ("alg1", 1), last
    assert last.peak_bytes <= limit
    check_product(C, S @ S, np.float64, 400)


def test_a_result_that_cannot_fit_raises_memory_error(engine):
    S, A = _big(engine, 13)
    whole = sg.spgemm(A, A)
    with pytest.raises(MemoryError, match=r"needs [\d,]+ bytes .* only [\d,]+ bytes are free") as e:
        sg.spgemm(A, A, memory_limit=_result_bytes(whole) // 2)
    assert isinstance(e.value, DeviceMemoryError)
    check_product(A @ A, S @ S, np.float64, 400)  # A and the process stay usable


@pytest.mark.parametrize("algorithm", ["alg1", "alg2", "alg3", "hash"])
def test_each_algorithm_by_name(engine, algorithm):
    engine_obj = _sparse_dispatch.where(*(2 * [_on(engine, sp.eye(2))]))[0]
    if algorithm not in engine_obj.algorithms() + engine_obj.lean_algorithms():
        pytest.skip(f"{engine_obj.name} has no {algorithm}")
    S = random_sparse((300, 200), 0.03, 14, np.complex64)
    A = _on(engine, S)
    check_product(sg.spgemm(A, A.T, algorithm=algorithm), S @ S.T, np.complex64, 200)


def test_an_unknown_algorithm_is_refused(engine):
    A = _on(engine, random_sparse((10, 10), 0.3, 15, np.float64))
    with pytest.raises(ValueError, match="algorithm 'alg9'"):
        sg.spgemm(A, A, algorithm="alg9")


def test_memory_limit_is_checked(engine):
    A = _on(engine, random_sparse((10, 10), 0.3, 15, np.float64))
    with pytest.raises(ValueError, match="memory_limit"):
        sg.spgemm(A, A, memory_limit=-1)


def test_spgemm_checks_its_operands():
    A = sg.csr_matrix(sp.eye(3))
    with pytest.raises(TypeError, match="sparsegpu matrix"):
        sg.spgemm(sp.eye(3), A)
    with pytest.raises(TypeError, match="2-D scipy or sparsegpu"):
        sg.spgemm(A, np.ones((3, 3)))
    with pytest.raises(ValueError, match="B needs 3 rows"):
        sg.spgemm(A, sp.eye(4))


# ------------------------------------------------------------------------- planning
class ScriptedClock:
    """Planning's clock, scripted: each product by the rule costs ``product`` ms, each run
    of a candidate its entry of ``runs`` (``"reuse plan"``: making the reuse plan);
    ``running``: a product's time is read only by waiting for it (still running)."""

    def __init__(self, monkeypatch, product=10.0, running=False, **runs):
        clock = self

        class Stopwatch:
            def __init__(self, on_host):
                clock.watches += 1

            def stop(self):
                return self

            def ms(self, wait=True):
                return None if running and not wait else clock.product

        def run_timed(name, fn, on_host):
            clock.runs.append(name)
            return fn(), clock.costs.get(name.replace(" ", "_"), 10.0)

        self.product, self.costs, self.runs, self.watches = product, runs, [], 0
        monkeypatch.setattr(_sparse_planning._timing, "Stopwatch", Stopwatch)
        monkeypatch.setattr(_sparse_planning, "_run_timed", run_timed)


def test_planning_waits_until_the_products_have_paid_for_it(engine, monkeypatch):
    clock = ScriptedClock(monkeypatch, product=10.0, reuse_plan=10.0, reuse=2.0, alg2=15.0)
    S = random_sparse((200, 200), 0.05, 16, np.float64)
    A = _on(engine, S)
    costs = []
    for step in range(12):  # new values, same pattern: a Newton step
        A.data[:] = np.arange(A.nnz) % 7 + step + 1.0
        C = A @ A
        expected = sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape) @ sp.csr_matrix(
            (A.data, A.indices, A.indptr), shape=A.shape
        )
        check_product(C, expected, np.float64, 200)
        plan = sg.explain(A, A)
        costs.append((plan.planning_ms, plan.products_ms))
        # nothing is timed until the products before have paid for a candidate's bound
        paid = step * clock.product >= _sparse_planning.CANDIDATE_COST * clock.product
        assert bool(clock.runs) == paid, (step, clock.runs)
    # planning never cost more than the products before it
    assert all(planning <= products for planning, products in costs), costs
    names = [m.algorithm for m in plan.measurements]
    assert names == ["alg1", "reuse"], names  # reuse won clearly: alg2 was not timed
    assert plan.algorithm == "reuse" and plan.level == "measure", plan
    assert "cost: planning" in str(plan) and plan.product_ms == 10.0
    assert all(m.peak_bytes for m in plan.measurements if m.ms is not None)
    assert "peak device memory" in str(plan) and plan.peak_bytes > 0
    done = len(clock.runs)
    A @ A
    assert len(clock.runs) == done, "a planned pair times nothing more"


def test_a_pairs_product_time_is_the_median_of_those_timed():
    """The time planning judges candidates against: the median of the timed products (the
    mean of the middle two of an even count), and their cost with the untimed ones counted
    at it; none before one is read."""
    pair = _sparse_planning._Pair()
    assert pair.product_ms is None and pair.products_ms == 0.0
    pair.product_times = [4.0, 1.0, 3.0]
    assert pair.product_ms == 3.0 and isinstance(pair.product_ms, float)
    pair.product_times.append(2.0)
    pair.untimed = 1
    assert pair.product_ms == 2.5 and pair.products_ms == 10.0 + 2.5


def test_a_pairs_first_product_is_not_timed_but_counted(engine, monkeypatch):
    """Most pairs are multiplied once: the first product makes no stopwatch, and the
    products' cost counts it at the median of the timed ones from the second on."""
    clock = ScriptedClock(monkeypatch, product=10.0)
    S = random_sparse((150, 150), 0.05, 23, np.float64)
    A = _on(engine, S)
    check_product(A @ A, S @ S, np.float64, 150)
    plan = sg.explain(A, A)
    assert clock.watches == 0 and plan.products_ms == 0.0 and plan.product_ms is None
    for n in (2, 3):
        check_product(A @ A, S @ S, np.float64, 150)
        plan = sg.explain(A, A)
        assert clock.watches == n - 1
        assert plan.product_ms == 10.0 and plan.products_ms == 10.0 * n, plan


def test_repeating_plans_on_the_second_product(engine, monkeypatch):
    """A caller that says its patterns come again (multigrid's update) plans the pair on
    its second product, among measure's candidates; outside the block, measure waits."""
    clock = ScriptedClock(monkeypatch, product=10.0, reuse_plan=10.0, reuse=2.0, alg2=15.0)
    S = random_sparse((160, 160), 0.05, 19, np.float64)
    A = _on(engine, S)
    A @ A
    A @ A
    assert not clock.runs and not sg.explain(A, A).measurements  # not paid for yet
    other = random_sparse((170, 170), 0.05, 20, np.float64)
    B = _on(engine, other)
    B @ B
    with _sparse_planning.repeating(), _sparse_planning.repeating():  # nests
        C = B @ B
    assert not _sparse_planning._repeats_expected()  # the block ended
    check_product(C, other @ other, np.float64, 170)
    plan = sg.explain(B, B)
    assert plan.level == "measure" and plan.algorithm == "reuse", plan
    assert [m.algorithm for m in plan.measurements] == ["alg1", "reuse"], plan
    # timed before the products paid a candidate's bound (8 products): the caller's bet
    assert plan.products_ms < _sparse_planning.CANDIDATE_COST * clock.product
    runs = len(clock.runs)
    B @ B
    assert len(clock.runs) == runs and sg.explain(B, B).last.algorithm == "reuse"


def test_exhaustive_judges_its_candidates_against_the_second_products_time(engine, monkeypatch):
    """The first product is not timed, so exhaustive's second product waits for its own
    time before the candidates run: each candidate hopeless next to it runs once."""
    clock = ScriptedClock(monkeypatch, product=1.0, running=True, reuse_plan=1.0)
    S = random_sparse((130, 130), 0.05, 24, np.float64)
    A = _on(engine, S)
    A.planning = "exhaustive"
    A @ A
    assert not clock.runs
    check_product(A @ A, S @ S, np.float64, 130)
    plan = sg.explain(A, A)
    timed = [m for m in plan.measurements if m.ms is not None and m.algorithm != "alg1"]
    assert timed and all(m.note.startswith("timed once: hopeless") for m in timed), plan
    runs = [name for name in clock.runs if name != "reuse plan"]
    assert len(runs) == len(set(runs)), clock.runs  # none run twice


def test_exhaustive_times_every_algorithm_on_the_second_product(engine):
    S = random_sparse((120, 120), 0.05, 15, np.float64)
    A = _on(engine, S)
    A.planning = "exhaustive"
    A @ A
    assert not sg.explain(A, A).measurements
    check_product(A @ A, S @ S, np.float64, 120)
    plan = sg.explain(A, A)
    engine_obj = _sparse_dispatch.where(A, A)[0]
    names = {m.algorithm for m in plan.measurements}
    assert names == {*engine_obj.algorithms(), "reuse"}, names
    assert plan.level == "exhaustive" and plan.algorithm in names


def test_a_hopeless_candidate_is_run_once(engine, monkeypatch):
    clock = ScriptedClock(monkeypatch, product=1.0, reuse_plan=1.0, reuse=0.5, alg2=50.0)
    A = _on(engine, random_sparse((80, 80), 0.05, 14, np.float64))
    A.planning = "exhaustive"
    A @ A
    A @ A
    assert clock.runs.count("alg2") == 1 and clock.runs.count("reuse") == 2, clock.runs
    notes = {m.algorithm: m.note for m in sg.explain(A, A).measurements}
    assert "hopeless" in notes["alg2"]


def test_estimate_measures_nothing(engine):
    S = random_sparse((100, 100), 0.05, 17, np.float64)
    A = _on(engine, S)
    A.planning = "estimate"
    for _ in range(3):
        A @ A
    plan = sg.explain(A, A)
    engine_obj, residence, dtype, _ = _sparse_dispatch.where(A, A)
    ruled, reason = engine_obj.estimate(*_sparse_dispatch.operands(A, A, residence, dtype))
    assert plan.algorithm == ruled and not plan.measurements and plan.level == "estimate"
    assert reason in plan.reason and sg.explain(A, A).last.algorithm == ruled


def test_the_reuse_plan_recomputes_values_only_for_the_same_patterns(engine, monkeypatch):
    S = random_sparse((150, 150), 0.05, 18, np.float64)
    A = _on(engine, S)
    A.planning = "exhaustive"
    ScriptedClock(monkeypatch, product=5.0, reuse=1.0, alg2=5.0, hash=5.0)
    A @ A
    A @ A
    assert sg.explain(A, A).algorithm == "reuse"
    A.data[:] = 3.0
    C = A @ A
    assert sg.explain(A, A).last.algorithm == "reuse"
    S3 = sp.csr_matrix((np.full(A.nnz, 3.0), A.indices, A.indptr), shape=A.shape)
    check_product(C, S3 @ S3, np.float64, 150)
    assert sg.explain(A, A).held_bytes > 0


def test_reuse_plans_compare_patterns_exactly(engine):
    S = random_sparse((60, 60), 0.1, 19, np.float64)
    A = _on(engine, S)
    engine_obj, residence, dtype, _ = _sparse_dispatch.where(A, A)
    left, right = _sparse_dispatch.operands(A, A, residence, dtype)
    from sparsegpu.backends.spgemm import Budget

    plan = engine_obj.reuse(left, right, Budget(left.xp))
    if plan is None:
        pytest.skip(f"{engine_obj.name} has no reuse here")
    assert plan.matches(left, right)
    other = _on(engine, S + sp.eye(60))
    o_left, o_right = _sparse_dispatch.operands(other, other, residence, dtype)
    assert not plan.matches(o_left, o_right)
    product = plan.compute(left, right, Budget(left.xp))
    assert product.nnz == (S @ S).nnz


def test_explain_of_a_sparse_product_on_the_host():
    A = sg.csr_matrix(sp.eye(4))
    A.backend = "scipy"
    plan = sg.explain(A, A)
    assert plan.algorithm == "scipy" and "host" in str(plan)
    assert isinstance(sg.explain(A), sg.engine._choice.Choice)


def test_a_refused_allocation_is_not_counted_in_the_peak():
    from sparsegpu.backends.spgemm import Budget, DoesNotFit

    budget = Budget(np, limit=1000)
    kept = budget.empty(100, np.float64, "kept")  # 800 bytes
    with pytest.raises(DoesNotFit, match="too much"):
        budget.empty(100, np.float64, "too much")
    with pytest.raises(DoesNotFit):
        budget.reserve(300, "modelled")
    assert (budget.in_use, budget.peak) == (800, 800)
    budget.release(kept)
    assert (budget.in_use, budget.peak) == (0, 800)


def test_reuse_plans_are_kept_within_their_count_and_memory(engine, monkeypatch):
    monkeypatch.setattr(_sparse_planning, "REUSE_PLANS", 2)
    plans = []
    for seed in range(4):
        A = _on(engine, random_sparse((50, 50), 0.1, 30 + seed, np.float64))
        pair = _sparse_planning._pair(
            *_sparse_dispatch.operands(A, A, *_sparse_dispatch.where(A, A)[1:3])
        )
        pair.reuse = type("Plan", (), {"held_bytes": 10})()
        plans.append(pair)
        _sparse_planning._drop_reuse_plans(_sparse_planning.REUSE_PLANS)
    assert [p.reuse is not None for p in plans] == [False, False, True, True]
    monkeypatch.setattr(_sparse_planning, "_reuse_memory_cap", lambda: 15)
    assert _sparse_planning._drop_reuse_plans(2) == 1
    assert [p.reuse is not None for p in plans] == [False, False, False, True]


def test_a_refused_reuse_plan_falls_back_to_the_default(monkeypatch):
    """An engine that refuses SpGEMMreuse for these operands (a library error other than
    memory): planning leaves it out, and a plan decided for it falls back to ALG1."""
    from sparsegpu.backends.spgemm import Refused, register_engine
    from sparsegpu.testing import HostSpgemm

    class Refusing(HostSpgemm):
        def reuse(self, left, right, budget):
            raise Refused("not for these operands (test)")

    register_engine("host-copy", Refusing())
    try:
        S = random_sparse((80, 80), 0.05, 40, np.float64)
        A = _on("host-copy", S)
        A.planning = "exhaustive"  # planned on the second product
        for _ in range(3):
            check_product(A @ A, S @ S, np.float64, 80)
        plan = sg.explain(A, A)
        notes = {m.algorithm: m.note for m in plan.measurements}
        assert notes["reuse"].startswith("refused: not for these operands")
        assert plan.algorithm in ("alg1", "alg2")
    finally:
        register_engine("host-copy", HostSpgemm())


@pytest.mark.parametrize("size", [0, 1, 7, 1000])
def test_running_count_reads_the_kept_entries_offsets(size):
    """0, then the kept entries up to each place; read at a CSR matrix's row offsets, the
    offsets of the rows' kept entries (as scipy's rows of the kept entries count them)."""
    rng = np.random.default_rng(size)
    keep = rng.random(size) < 0.4
    counts = spgemm.running_count(keep, np)
    assert counts.dtype == np.int64 and counts.shape == (size + 1,)
    assert counts[0] == 0 and np.array_equal(np.diff(counts), keep.astype(np.int64))
    cuts = np.sort(rng.integers(0, size + 1, 5))
    indptr = np.r_[0, cuts, size]
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    expected = np.r_[0, np.cumsum(np.bincount(rows[keep], minlength=indptr.size - 1))]
    assert np.array_equal(counts[indptr], expected)
