"""Sparse products of awkward operands, and results past 32-bit indices (issue 47).

A seeded fuzz of ``A @ B`` whose operands have empty rows, duplicate entries, unsorted
column indices, int64 indices, rectangular shapes and complex values, against scipy's
product (the oracle): on host copies everywhere ("host-copy", the driver, the canonical
copy and the index dtype rule on any machine) and on the GPU ("gpu", skipped without
one). Then the index dtype of a result whose intermediate products overflow 32 bits,
the error of an engine that refuses a product, and (GPU, slow) a result of 2^31
nonzeros or more: computed with 64-bit indices, or refused with a MemoryError naming its
size.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import spgemm
from sparsegpu.backends.spgemm import Budget, Refused, SpgemmError, register_engine
from sparsegpu.device import _cuda
from sparsegpu.engine import _sparse_dispatch
from sparsegpu.testing import HostSpgemm, assert_product_close, no_gpu_reason

FUZZ_CASES = 48


@pytest.fixture(params=["host-copy", "gpu"])
def engine(request):
    if request.param == "gpu" and _cuda.cupy_or_none() is None:
        pytest.skip(no_gpu_reason())
    return request.param


def _on(engine, S):
    A = sg.csr_matrix(S)
    A.backend = "host-copy" if engine == "host-copy" else None
    return A


def awkward_operand(rng, shape, dtype, index_dtype) -> sp.csr_matrix:
    """A random CSR matrix, not canonical on purpose: some rows empty, some entries
    repeated (summed by scipy), each row's column indices in random order."""
    m, n = shape
    lengths = rng.integers(0, min(n, 6) + 1, size=m) if n else np.zeros(m, dtype=np.int64)
    lengths[rng.random(m) < 0.3] = 0  # empty rows
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = rng.integers(0, max(n, 1), size=nnz)
    if nnz > 1:  # duplicates: some entries repeat the one before (in the same row or not)
        repeat = rng.random(nnz) < 0.15
        repeat[0] = False
        indices[repeat] = indices[np.flatnonzero(repeat) - 1]
        for i in range(m):  # unsorted rows (the repeats keep their row's bounds)
            rng.shuffle(indices[indptr[i] : indptr[i + 1]])
    data = rng.uniform(-1, 1, nnz)
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.uniform(-1, 1, nnz)
    S = sp.csr_matrix(
        (data.astype(dtype), indices.astype(index_dtype), indptr.astype(index_dtype)), shape=shape
    )
    S.indices, S.indptr = S.indices.astype(index_dtype), S.indptr.astype(index_dtype)
    return S


@pytest.mark.parametrize("case", range(FUZZ_CASES))
def test_awkward_products_equal_scipys(engine, case):
    rng = np.random.default_rng(1000 + case)
    m, k, n = (int(v) for v in rng.integers(0, 40, size=3))
    dtype = [np.float64, np.float32, np.complex128, np.complex64][case % 4]
    left_index, right_index = (np.int64 if rng.random() < 0.4 else np.int32 for _ in range(2))
    S = awkward_operand(rng, (m, k), dtype, left_index)
    T = awkward_operand(rng, (k, n), dtype, right_index)
    expected = (S @ T).toarray()
    C = _on(engine, S) @ _on(engine, T)
    assert C.shape == (m, n) and C.dtype == np.dtype(dtype)
    fresh = sp.csr_matrix((C.data, C.indices, C.indptr), shape=C.shape)
    assert fresh.has_canonical_format, "the result is not canonical (sorted, no duplicates)"
    assert_product_close(C.toarray(), expected, dtype, max_row_length=36)


def _mirrors(engine, S, T):
    A, B = _on(engine, S), _on(engine, T)
    engine_obj, residence, dtype, _ = _sparse_dispatch.where(A, B)
    left, right = _sparse_dispatch.operands(A, B, residence, dtype)
    return engine_obj, spgemm.canonical(left), spgemm.canonical(right)


def test_a_result_is_counted_before_its_products_widen_its_indices(engine, monkeypatch):
    """Intermediate products beyond 32 bits (made small here) widen the indices on the GPU
    (cuSPARSE's 32-bit product cannot take them); where the engine narrows by the result,
    as scipy does (the host engine), its nonzeros are counted, and only a result past 32
    bits is computed with 64-bit indices."""
    dense = np.zeros((30, 30))
    dense[:10, :10] = 1.0
    dense[np.arange(10, 30), np.arange(20) % 10] = 2.0
    S = sp.csr_matrix(dense)  # 120 nonzeros; S @ S: 1,200 products, 300 nonzeros
    engine_obj, left, right = _mirrors(engine, S, S)
    counted = []
    count = engine_obj.result_nnz

    def counting(*args):
        counted.append(count(*args))
        return counted[-1]

    monkeypatch.setattr(engine_obj, "result_nnz", counting)
    monkeypatch.setattr(spgemm, "INT32_MAX", 500)
    assert engine_obj.total_products(left, right) == 1200
    *kept, nnz = spgemm.compute_operands(engine_obj, left, right, Budget(left.xp))
    narrows = engine_obj.narrows_by_result
    assert narrows == (engine == "host-copy")
    assert (nnz, counted) == ((300, [300]) if narrows else (None, []))
    kept_dtype = np.int32 if narrows else np.int64
    assert [m.index_dtype for m in kept] == [kept_dtype, kept_dtype]
    monkeypatch.setattr(spgemm, "INT32_MAX", 299)
    *wide, _ = spgemm.compute_operands(engine_obj, left, right, Budget(left.xp))
    assert [m.index_dtype for m in wide] == [np.int64, np.int64]
    C, _ = spgemm.multiply(engine_obj, *wide, "alg1", Budget(left.xp))
    assert C.index_dtype == np.int64
    got = sp.csr_matrix((_host(C.data), _host(C.indices), _host(C.indptr)), shape=C.shape)
    assert_product_close(got.toarray(), (S @ S).toarray(), np.float64, max_row_length=10)


def test_a_counted_result_that_cannot_fit_is_refused_before_any_work(engine, monkeypatch):
    dense = np.zeros((30, 30))
    dense[:10, :10] = 1.0
    dense[np.arange(10, 30), np.arange(20) % 10] = 2.0
    S = sp.csr_matrix(dense)  # S @ S: 1,200 products, 300 nonzeros
    engine_obj, left, right = _mirrors(engine, S, S)
    monkeypatch.setattr(spgemm, "INT32_MAX", 500)
    if hasattr(engine_obj, "bytes_per_product"):  # the host engine's count takes none
        monkeypatch.setattr(engine_obj, "bytes_per_product", 0)
    monkeypatch.setattr(engine_obj, "_multiply", lambda *a: pytest.fail("computed"))
    with pytest.raises(MemoryError, match=r"\(300 nonzeros\) needs [\d,]+ bytes"):
        spgemm.multiply(engine_obj, left, right, "alg1", Budget(left.xp, limit=3000))


def test_few_products_are_not_counted(engine, monkeypatch):
    S = sp.random(40, 40, density=0.1, random_state=3, format="csr")
    engine_obj, left, right = _mirrors(engine, S, S)
    monkeypatch.setattr(engine_obj, "total_products", lambda *a: pytest.fail("counted"))
    *kept, nnz = spgemm.compute_operands(engine_obj, left, right, Budget(left.xp))
    assert [m.index_dtype for m in kept] == [np.int32, np.int32] and nnz is None


def test_products_the_caller_counted_are_not_counted_again(engine, monkeypatch):
    """The rule's count (a skewed product's) reaches compute_operands: the same answer
    as its own count, and no second pass."""
    dense = np.zeros((30, 30))
    dense[:10, :10] = 1.0
    dense[np.arange(10, 30), np.arange(20) % 10] = 2.0
    S = sp.csr_matrix(dense)  # S @ S: 1,200 products
    engine_obj, left, right = _mirrors(engine, S, S)
    monkeypatch.setattr(spgemm, "INT32_MAX", 500)
    own = spgemm.compute_operands(engine_obj, left, right, Budget(left.xp))
    monkeypatch.setattr(engine_obj, "total_products", lambda *a: pytest.fail("counted again"))
    given = spgemm.compute_operands(engine_obj, left, right, Budget(left.xp), products=1200)
    assert [m.index_dtype for m in given[:2]] == [m.index_dtype for m in own[:2]]
    assert given[2] == own[2]
    C, _ = spgemm.multiply(engine_obj, left, right, "alg1", Budget(left.xp), products=1200)
    got = sp.csr_matrix((_host(C.data), _host(C.indices), _host(C.indptr)), shape=C.shape)
    assert_product_close(got.toarray(), (S @ S).toarray(), np.float64, max_row_length=10)


class Pending(spgemm.Counted):
    """A count still running (until read) that will find ``exact``."""

    def __init__(self, exact: int):
        super().__init__()
        self.exact = exact

    def _read(self) -> int:
        return self.exact


def _skewed_square():
    dense = np.zeros((30, 30))
    dense[:10, :10] = 1.0
    dense[np.arange(10, 30), np.arange(20) % 10] = 2.0
    return sp.csr_matrix(dense)  # S @ S: 1,200 products, 300 nonzeros


@pytest.mark.parametrize("exact", [1200, 400])
def test_a_count_still_running_is_assumed_within_int32_until_the_launch(engine, monkeypatch, exact):
    """A count launched ahead (products_ahead) is not waited for: int32 is assumed and
    checked before the product's first launch; where it fails nothing was launched, the
    work space is given back, and the product decided again on the count (the planning
    driver, _rule_product) widens its indices as the count says."""
    from sparsegpu.engine import _sparse_planning

    S = _skewed_square()
    engine_obj, left, right = _mirrors(engine, S, S)
    monkeypatch.setattr(spgemm, "INT32_MAX", 500)
    budget = Budget(left.xp)
    pending = Pending(exact)
    if exact > 500:
        with pytest.raises(spgemm.Reconsider, match="1,200 products: not within 32-bit"):
            spgemm.multiply(engine_obj, left, right, "alg1", budget, products=pending)
        assert budget.in_use == 0
    pending = Pending(exact)
    C, outcome = _sparse_planning._rule_product(engine_obj, left, right, Budget(left.xp), pending)
    wide = exact > 500 and not engine_obj.narrows_by_result  # the host narrows by the result
    assert C.index_dtype == (np.int64 if wide else np.int32) and outcome.blocks == 1
    got = sp.csr_matrix((_host(C.data), _host(C.indices), _host(C.indptr)), shape=C.shape)
    assert_product_close(got.toarray(), (S @ S).toarray(), np.float64, max_row_length=10)


def test_a_finished_count_checks_the_rules_assumption_before_any_symbolic_pass(engine, monkeypatch):
    """A count that finished between the rule (which assumed on it) and the index dtype is
    checked first: a failed assumption reconsiders before the result's nonzeros are
    counted for the index dtype, a pass the retry would only repeat."""
    S = _skewed_square()
    engine_obj, left, right = _mirrors(engine, S, S)
    monkeypatch.setattr(spgemm, "INT32_MAX", 500)
    monkeypatch.setattr(engine_obj, "result_nnz", lambda *a: pytest.fail("counted"))
    pending = Pending(1200)
    pending.expect(lambda count: count < 1000, "a rule's assumption")
    pending.value()  # finished, not yet checked
    with pytest.raises(spgemm.Reconsider, match="not a rule's assumption"):
        spgemm.compute_operands(engine_obj, left, right, Budget(left.xp), pending)


def test_products_counted_ahead_on_the_gpu_decide_as_the_rules_own_count(monkeypatch):
    """On the GPU the count launched ahead is the device's sum (the rule's own count's
    answer), and a first product through planning that overflows the (lowered) int32
    bound on it is computed with 64-bit indices, equal to scipy's."""
    if _cuda.cupy_or_none() is None:
        pytest.skip(no_gpu_reason())
    S = _skewed_square()
    engine_obj, left, right = _mirrors("gpu", S, S)
    monkeypatch.setattr(spgemm, "INT32_MAX", 500)
    counted = engine_obj.products_ahead(left, right)
    assert counted is not None and counted.value() == engine_obj.total_products(left, right)
    assert counted.value() == 1200
    from sparsegpu.backends import hash_spgemm

    # never finished before it is read: the product runs on the assumption, then again
    monkeypatch.setattr(hash_spgemm._DeviceCount, "done", lambda self: self._exact is not None)
    A = _on("gpu", S)
    C = A @ A
    assert C.indices.dtype == np.int64 and sg.explain(A, A).last.algorithm == "alg1"
    assert_product_close(C.toarray(), (S @ S).toarray(), np.float64, max_row_length=10)
    monkeypatch.setattr(spgemm, "INT32_MAX", 1500)  # the assumption holds
    A = _on("gpu", S)
    C = A @ A
    assert C.indices.dtype == np.int32
    assert_product_close(C.toarray(), (S @ S).toarray(), np.float64, max_row_length=10)


def test_the_default_rule_counts_nothing(engine):
    S = sp.random(40, 40, density=0.1, random_state=3, format="csr")
    engine_obj, left, right = _mirrors(engine, S, S)
    assert engine_obj.rule_and_products(left, right) == (engine_obj.rule(left, right), None)


def _host(a):
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


def test_a_product_every_algorithm_refuses_raises_a_clear_error():
    class Refusing(HostSpgemm):
        def _multiply(self, left, right, algorithm, sink):
            raise Refused(f"status 7 from the library ({algorithm}, test)")

    register_engine("host-copy", Refusing())
    try:
        S = sp.random(30, 30, density=0.1, random_state=4, format="csr")
        A = _on("host-copy", S)
        with pytest.raises(SpgemmError, match=r"could not compute this \(30 x 30.*alg1: status 7"):
            A @ A
        with pytest.raises(SpgemmError, match="A.backend = 'scipy'"):
            sg.spgemm(A, A, algorithm="alg2")
    finally:
        register_engine("host-copy", HostSpgemm())
    assert_product_close((A @ A).toarray(), (S @ S).toarray(), np.float64, 30)


# ------------------------------------------------------------ past 2^31 nonzeros (GPU)
# L: one entry a row, in column 0; R: row 0 full. L @ R: every row is R's row 0, so
# N x N nonzeros, N^2 just over 2^31 (and as many products).
WIDE_N = 46_341


def _wide_operands():
    n = WIDE_N
    L = sp.csr_matrix(
        (np.arange(1, n + 1, dtype=np.float32), np.zeros(n, dtype=np.int32), np.arange(n + 1)),
        shape=(n, 2),
    )
    R = sp.csr_matrix(
        (np.linspace(-1, 1, n, dtype=np.float32), np.arange(n), np.array([0, n, n])),
        shape=(2, n),
    )
    return L, R


@pytest.mark.gpu
@pytest.mark.slow
def test_a_result_past_two_to_the_31_is_computed_or_refused_by_size(cupy):
    L, R = _wide_operands()
    nnz = WIDE_N * WIDE_N
    assert nnz > 2**31
    A, B = sg.csr_matrix(L), sg.csr_matrix(R)
    try:
        C = sg.spgemm(A, B)
    except MemoryError as exc:  # it did not fit: the message names what it needed
        assert f"{nnz:,} nonzeros" in str(exc) and "bytes" in str(exc), str(exc)
        return
    assert C.nnz == nnz and C.indptr.dtype == np.int64
    for row in (0, 1, WIDE_N // 2, WIDE_N - 1):
        start, stop = int(C.indptr[row]), int(C.indptr[row + 1])
        expected = (L[row] @ R).toarray().ravel()
        np.testing.assert_array_equal(C.indices[start:stop], np.arange(WIDE_N))
        np.testing.assert_allclose(C.data[start:stop], expected, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.slow
def test_a_result_past_two_to_the_31_beyond_its_memory_limit_is_refused_by_size(cupy):
    L, R = _wide_operands()
    nnz = WIDE_N * WIDE_N
    with pytest.raises(MemoryError, match=rf"{nnz:,} nonzeros\) needs [\d,]+ bytes"):
        sg.spgemm(sg.csr_matrix(L), sg.csr_matrix(R), memory_limit=4 * 2**30)


@pytest.mark.parametrize("case", range(8))
def test_a_transpose_on_the_device_is_the_sorted_transpose(engine, case):
    """cuSPARSE's transposition (GPU, int32) and the sort of the column indices give the
    same arrays, awkward operands included; on host copies the sort runs."""
    from sparsegpu.backends import cusparse

    rng = np.random.default_rng(2000 + case)
    dtype = [np.float64, np.complex64][case % 2]
    S = awkward_operand(rng, tuple(int(v) for v in rng.integers(1, 50, size=2)), dtype, np.int32)
    A = _on(engine, S)
    _, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
    mirror = A._sg_mirror(residence, value_dtype)
    fast = cusparse.transpose(mirror)
    assert (fast is None) == (engine == "host-copy")
    ours = _sparse_dispatch.transposed(mirror)
    sorted_ = mirror.transpose()
    for got, want in ((ours.indptr, sorted_.indptr), (ours.indices, sorted_.indices)):
        np.testing.assert_array_equal(_host(got), _host(want))
    assert ours.shape == S.shape[::-1]
    np.testing.assert_allclose(
        sp.csr_matrix(
            (_host(ours.data), _host(ours.indices), _host(ours.indptr)), ours.shape
        ).toarray(),
        S.T.toarray(),
    )


def test_the_transpose_of_p_takes_what_is_known_of_p(engine, monkeypatch):
    """The Galerkin product's P.T is canonical when P is, and keyed from P's key: no pass
    over it (checked here by counting the canonical checks)."""
    rng = np.random.default_rng(7)
    S = sp.random(60, 60, density=0.1, random_state=8, format="csr")
    P = sp.csr_matrix((np.ones(60), (np.arange(60), rng.integers(0, 8, 60))), shape=(60, 8))
    A, Psg = _on(engine, S), _on(engine, P)
    checked = []
    is_canonical = spgemm.is_canonical
    monkeypatch.setattr(
        spgemm, "is_canonical", lambda m: checked.append(m.shape) or is_canonical(m)
    )
    G = sg.galerkin_product(A, Psg)
    assert (8, 60) not in checked and (60, 8) in checked, checked
    _, residence, dtype, _ = _sparse_dispatch.where(A, Psg)
    PT = Psg._sg_mirror(residence, dtype, transpose=True)
    assert PT.formats["pattern_key"][3][0] == "T"
    assert_product_close(G.toarray(), (P.T @ S @ P).toarray(), np.float64, 60)
