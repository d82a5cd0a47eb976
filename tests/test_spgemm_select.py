"""Select products (``backends/select_spgemm.py``, ``kernels/spgemm_select.cu``): ``L @ R``
with at most one entry in each row of ``R`` (an aggregation's prolongator, a selection, a
permutation), equal to scipy's product, canonical, with the pattern of ``|L| @ |R|``
(entries that cancel stay stored), in every value and index dtype, on the awkward
matrices; the rule that takes them, and the Galerkin product that runs them.

The kernels run on the GPU only (those tests skip on CPU with the reason); the rule and
the refusal are tested everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import hash_spgemm, select_spgemm, spgemm
from sparsegpu.backends.hash_spgemm import GpuSpgemm
from sparsegpu.backends.select_spgemm import SELECT, SELECT_MAX
from sparsegpu.device import _cuda
from sparsegpu.testing import INDEX_DTYPES, VALUE_DTYPES, awkward_matrices, no_gpu_reason

from .test_spgemm_hash import _check, _mirror_of

ENGINE = GpuSpgemm()
gpu = pytest.mark.skipif(_cuda.cupy_or_none() is None, reason=no_gpu_reason())
# the awkward matrices whose rows are short enough (the others are refused: tested below)
SHORT = [
    name for name, S in awkward_matrices().items() if np.diff(S.indptr).max(initial=0) <= SELECT_MAX
]


def _one_a_row(n_rows, n_cols, dtype, seed, empty=0.0):
    """``n_rows x n_cols`` with one entry in each row (a random column and value), a
    share ``empty`` of the rows empty."""
    rng = np.random.default_rng(seed)
    taken = rng.random(n_rows) >= empty
    rows = np.flatnonzero(taken)
    columns = rng.integers(0, max(n_cols, 1), rows.size)
    values = rng.uniform(0.5, 2.0, rows.size).astype(dtype)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-1, 1, rows.size)
    return sp.csr_matrix((values, (rows, columns)), shape=(n_rows, n_cols), dtype=dtype)


def _select_product(S, T, dtype, index_dtype) -> sp.csr_matrix:
    cupy = _cuda.cupy_or_none()
    left, right = _mirror_of(S, dtype, index_dtype), _mirror_of(T, dtype, index_dtype)
    budget = spgemm.Budget(cupy)
    if spgemm.is_empty(left, right):
        C = spgemm.run_once(ENGINE, left, right, SELECT, budget)
    else:  # the engine called directly: the driver would narrow int64 indices to int32
        shape = (S.shape[0], T.shape[1])
        sink = spgemm.ResultSink(budget, shape, dtype, index_dtype, left.residence)
        C = ENGINE.multiply(left, right, SELECT, sink)
        assert C.indices.dtype == index_dtype
    assert budget.in_use == C.indptr.nbytes + C.indices.nbytes + C.data.nbytes  # scratch given back
    return sp.csr_matrix((C.data.get(), C.indices.get(), C.indptr.get()), shape=C.shape)


@gpu
@pytest.mark.parametrize("name", SHORT)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("empty", [0.0, 0.3], ids=["full", "empty_rows"])
def test_select_product_equals_scipy(dtype, index_dtype, name, empty):
    S = awkward_matrices(dtype, index_dtype, seed=4)[name]
    S.sum_duplicates()
    for n_cols in (max(S.shape[1] // 8, 1), 3):  # aggregates of about 8, and 3 wide columns
        P = _one_a_row(S.shape[1], n_cols, dtype, seed=5, empty=empty)
        _check(_select_product(S, P, dtype, index_dtype), S, P, dtype)


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_entries_that_cancel_stay_and_sums_are_the_same_every_run(index_dtype):
    """Two entries of a row mapped to one column with opposite products: a stored zero
    (the pattern of |L| @ |R|); a row of 32 entries all mapped to one column; equal sums
    on every run (a thread sums a column's products in L's order)."""
    L = sp.csr_matrix(
        (
            np.array([1.0, -1.0, 2.0] + [0.1] * 32),
            np.array([0, 1, 2] + list(range(3, 35))),
            np.array([0, 3, 35]),
        ),  # fmt: skip
        shape=(2, 40),
    )
    P = sp.csr_matrix((np.ones(40), (np.arange(40), np.r_[[0, 0, 1], np.zeros(37, int)])))
    C = _select_product(L, P, np.float64, index_dtype)
    _check(C, L, P, np.float64)
    assert C[0, 0] == 0.0 and C.nnz == 3
    again = _select_product(L, P, np.float64, index_dtype)
    assert np.array_equal(C.data, again.data)


def _operand(longest, known=True):
    fields = {"longest_row": longest, "known_longest_row": longest if known else None}
    return type("Operand", (), fields)()


def test_the_rule_takes_select_only_where_it_knows_the_rows_without_a_pass():
    assert ENGINE.rule(_operand(7), _operand(1)) == SELECT
    assert ENGINE.estimate(_operand(hash_spgemm.SELECT_RULE_MAX), _operand(0))[0] == SELECT
    # rows of 27 (2-D 3 x 3 blocks): select lost to ALG1 there; the kernel still takes them
    assert not hash_rule_selects(_operand(27), _operand(1))
    assert "select" in ENGINE.estimate(_operand(7), _operand(1))[1]
    assert select_spgemm.takes(_operand(SELECT_MAX), _operand(1))
    assert not select_spgemm.takes(_operand(SELECT_MAX + 1), _operand(1))
    assert not select_spgemm.takes(_operand(7), _operand(2))
    # rows not known without a pass: the rule does not read them (another rule decides)
    assert not hash_rule_selects(_operand(7, known=False), _operand(1))
    assert not hash_rule_selects(_operand(7), _operand(1, known=False))


def hash_rule_selects(left, right) -> bool:
    return hash_spgemm._selects(left, right)


def test_operands_it_cannot_take_are_refused_with_why():
    with pytest.raises(spgemm.Refused, match=r"at most one entry \(longest 2\)"):
        select_spgemm.select_multiply(_operand(3), _operand(2), None)
    with pytest.raises(spgemm.Refused, match=rf"at most {SELECT_MAX} \(longest 33\)"):
        select_spgemm.select_count(_operand(33), _operand(1), None)


@gpu
def test_a_galerkin_product_with_an_aggregation_runs_select_and_equals_scipy():
    """``P.T @ (A @ P)`` with aggregates of 8 of a 3-D stencil: ``A @ P`` is a select
    product (the rule's first choice, nothing counted), the answer scipy's."""
    from sparsegpu.datasets import synthetic

    A_host = sp.csr_matrix(synthetic.stencil_3d(16, points=7))
    P = _one_a_row(A_host.shape[0], A_host.shape[0] // 8, np.float64, seed=9)
    A = sg.csr_matrix(A_host)
    A.planning = "estimate"
    assert sg.explain(A, P).algorithm == SELECT
    G = sg.galerkin_product(A, P)
    expected = (P.T @ A_host @ P).toarray()
    np.testing.assert_allclose(sp.csr_matrix(G).toarray(), expected, rtol=1e-13, atol=1e-13)
    assert sg.explain(A, P).last.algorithm == SELECT
