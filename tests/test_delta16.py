"""The ``delta16`` backend: 16-bit column offsets, their full-width fallback, refusal,
planning, and the policy (CPU). The awkward matrices of every form run in test_products."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import delta16
from sparsegpu.backends.delta16 import (
    CHUNK_ROWS,
    FAMILY,
    OFFSET_RANGE,
    Delta16Policy,
    chunk_table,
    compressed_columns,
)
from sparsegpu.device._mirror import CUPY
from sparsegpu.testing import (
    HALF_VALUE_DTYPES,
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    from_row_lengths,
    random_values,
    random_vector,
)

DTYPE_IDS = [np.dtype(d).name for d in VALUE_DTYPES]
INDEX_IDS = [np.dtype(d).name for d in INDEX_DTYPES]


def _csr(rows, cols, shape, dtype, index_dtype, seed=0):
    """CSR from (row, column) pairs, entries kept in the given order within each row."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=shape[0]))])
    values = random_values(np.random.default_rng(seed), len(rows), dtype)
    A = sp.csr_matrix(
        (values, cols[order].astype(index_dtype), indptr.astype(index_dtype)), shape=shape
    )
    A.indices = A.indices.astype(index_dtype)
    A.indptr = A.indptr.astype(index_dtype)
    return A


def mixed_chunks(dtype=np.float64, index_dtype=np.int32):
    """Chunks of every kind, on 300,000 columns: banded chunks (compressed), a chunk whose
    columns span exactly OFFSET_RANGE - 1 (the widest that compresses) and one spanning
    OFFSET_RANGE (the narrowest that does not), scattered chunks (full width), empty rows
    and an empty chunk, unsorted columns, and a row count that is not a multiple of
    CHUNK_ROWS."""
    n_rows, n_cols = 32 * 12 + 7, 300_000
    rng = np.random.default_rng(11)
    rows, cols = [], []
    for r in range(n_rows):
        chunk = r // CHUNK_ROWS
        if chunk in (3, 8, 9) or r % 17 == 5:  # an empty chunk, empty rows, chunks 8 and 9
            continue
        center = r * 700
        if chunk in (1, 6):  # scattered: full width
            picked = rng.choice(n_cols, rng.integers(1, 40), replace=False)
        else:  # banded: compressed
            picked = np.unique(np.clip(center + rng.integers(-300, 300, 9), 0, n_cols - 1))
        rows += [r] * len(picked)
        cols += list(rng.permutation(picked))
    # chunk 8 spans OFFSET_RANGE - 1, chunk 9 OFFSET_RANGE (and nothing else)
    for chunk, span in ((8, OFFSET_RANGE - 1), (9, OFFSET_RANGE)):
        first = chunk * CHUNK_ROWS + 1
        rows += [first, first + 3]
        cols += [1000, 1000 + span]
    return _csr(rows, cols, (n_rows, n_cols), dtype, index_dtype)


def scattered(dtype=np.float64, index_dtype=np.int32):
    """Uniformly random columns over 2M columns: no chunk compresses."""
    rng = np.random.default_rng(5)
    return from_row_lengths(rng.integers(4, 12, 3000), 2_000_000, dtype, index_dtype, rng)


def _mirror(A):
    return A._sg_mirror(CUPY, A.dtype)


# ---------------------------------------------------------------------------------- CPU
def test_policy_validates_its_knobs():
    assert Delta16Policy(unroll=2, stream_matrix=True).compile_options() == (
        "-DSPARSEGPU_UNROLL=2",
        "-DSPARSEGPU_STREAM_MATRIX=1",
    )
    with pytest.raises(ValueError, match="unroll=3 is not allowed"):
        Delta16Policy(unroll=3)
    with pytest.raises(TypeError, match="stream_matrix must be a bool"):
        Delta16Policy(stream_matrix=1)
    with pytest.raises(ValueError, match="threads_per_row=3"):
        Delta16Policy(threads_per_row=3)


def test_listed_with_its_reason_and_every_instantiation_registered():
    status = {b.name: b for b in sg.backends()}["delta16"]
    assert status.available or status.reason
    names = set(FAMILY.instantiations)
    assert "delta16_spmv<double, int, 4, 0>" in names
    assert "delta16_spmv<complex64, long long, 32, 1>" in names
    assert "delta16_encode<long long>" in names and "delta16_chunk_span<int>" in names
    assert "delta16_spmv<__half, int, 8, 0>" in names
    assert "delta16_spmv_mixed_precision<double, float, int, 4, 1>" in names
    n_values = len(VALUE_DTYPES) + len(HALF_VALUE_DTYPES) + 1  # + float32 values, float64 x
    assert len(names) == n_values * len(INDEX_DTYPES) * 6 * 2 + 4


def test_rules_alone_never_pick_it():
    backend = sg.engine._registry.registered()["delta16"]
    assert backend.estimated is False and backend.planned is True
    A = sg.csr_matrix(sg.datasets.synthetic.stencil_2d(40))
    with sg.planning("estimate"):
        assert sg.explain(A).backend != "delta16"


# ---------------------------------------------------------------------------------- GPU
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
def test_format_decodes_to_the_columns(cupy, index_dtype):
    A = mixed_chunks(np.float64, index_dtype)
    mirror = _mirror(sg.csr_matrix(A))
    columns = compressed_columns(mirror)
    chunks = columns.table.chunks.get()
    offsets, wide = columns.offsets.get(), columns.wide.get()
    assert chunks.dtype == np.dtype(index_dtype) and wide.dtype == np.dtype(index_dtype)
    decoded = np.empty(A.nnz, dtype=np.int64)
    n_wide = 0
    for c, entry in enumerate(chunks):
        lo = A.indptr[c * CHUNK_ROWS]
        hi = A.indptr[min((c + 1) * CHUNK_ROWS, A.shape[0])]
        if entry >= 0:
            decoded[lo:hi] = int(entry) + offsets[lo:hi].astype(np.int64)
        else:
            shift = -(int(entry) + 1)
            decoded[lo:hi] = wide[lo - shift : hi - shift]
            n_wide += hi - lo
    np.testing.assert_array_equal(decoded, A.indices)
    assert n_wide == columns.table.wide_nnz == len(wide)
    assert chunks[1] < 0 and chunks[6] < 0  # scattered
    assert chunks[8] >= 0 and chunks[9] < 0  # span OFFSET_RANGE - 1 fits, OFFSET_RANGE does not
    assert chunks[3] >= 0  # empty chunk
    assert 0.5 < columns.table.fraction < 1.0


@pytest.mark.parametrize("policy", [
    Delta16Policy(256, 1),
    Delta16Policy(128, 4, unroll=1),
    Delta16Policy(512, 8, stream_matrix=True, unroll=2),
    Delta16Policy(64, 32, max_registers=40, unroll=8),
    Delta16Policy(512, 1, vector_loads=True, unroll=1),
    Delta16Policy(256, 4, vector_loads=True, stream_matrix=True, unroll=2),
], ids=["t1", "t4u1", "t8stream", "t32cap", "t1quad", "t4quad"])  # fmt: skip
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=DTYPE_IDS)
def test_mixed_chunks_match_scipy(cupy, dtype, index_dtype, policy):
    S = mixed_chunks(dtype, index_dtype)
    A = sg.csr_matrix(S)
    x = random_vector(S.shape[1], dtype, seed=3)
    y = sg.matvec(A, cupy.asarray(x), backend="delta16", policy=policy)
    assert isinstance(y, cupy.ndarray) and y.dtype == np.dtype(dtype)
    assert_product_close(y, S @ x, dtype, int(np.diff(S.indptr).max()))
    # the transposed product builds its own mirror and its own compressed columns
    xt = random_vector(S.shape[0], dtype, seed=4)
    yt = sg.matvec(A.T, cupy.asarray(xt), backend="delta16", policy=policy)
    assert_product_close(yt, S.T @ xt, dtype, int(np.bincount(S.indices).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_same_bits_as_the_shuffle_kernel_of_the_same_shape(cupy, dtype):
    S = sg.datasets.synthetic.stencil_2d(120, points=9, dtype=dtype)
    A = sg.csr_matrix(S)
    x = cupy.asarray(random_vector(S.shape[1], dtype, seed=6))
    y = sg.matvec(A, x, backend="delta16", policy=Delta16Policy(256, 4))
    same = sg.matvec(A, x, backend="shuffle", policy=sg.tuning.CsrVectorPolicy(256, 4))
    assert cupy.array_equal(y.view(np.uint8), same.view(np.uint8))


def test_refuses_scattered_columns_and_says_why(cupy):
    A = sg.csr_matrix(scattered())
    backend = sg.engine._registry.registered()["delta16"]
    assert not backend.supports(_mirror(A))
    assert "delta16.columns" not in _mirror(A).formats  # refused on the chunk table alone
    with pytest.raises(ValueError, match=r"only 0% of its .* too scattered for 16-bit"):
        sg.matvec(A, cupy.ones(A.shape[1]), backend="delta16")
    choice = sg.choose(A, cupy.ones(A.shape[1]))
    assert "delta16" not in {m.backend for m in choice.measurements}


def test_planning_times_it_where_it_compresses(cupy):
    S = sg.datasets.synthetic.stencil_2d(300)
    A = sg.csr_matrix(S)
    x = cupy.asarray(random_vector(S.shape[1], np.float64, seed=8))
    choice = sg.choose(A, x)
    timed = {m.backend: m for m in choice.measurements}
    assert "delta16" in timed and timed["delta16"].ms is not None and timed["delta16"].agreed
    assert_product_close(A @ x, S @ x.get(), np.float64, 5)


def test_a_changed_matrix_is_compressed_again(cupy):
    S = sg.datasets.synthetic.stencil_2d(100)
    A = sg.csr_matrix(S)
    A.backend = "delta16"
    x = random_vector(S.shape[1], np.float64, seed=9)
    assert_product_close(A @ cupy.asarray(x), S @ x, np.float64, 5)
    A[0, S.shape[1] - 1] = 2.5  # row 0 now spans every column, still under OFFSET_RANGE
    S = S.tolil()
    S[0, S.shape[1] - 1] = 2.5
    assert_product_close(A @ cupy.asarray(x), S.tocsr() @ x, np.float64, 6)


def test_empty_and_zero_row_matrices(cupy):
    for shape in ((0, 5), (5, 0), (40, 70_000)):
        A = sg.csr_matrix(sp.csr_matrix(shape))
        y = sg.matvec(A, cupy.ones(shape[1]), backend="delta16")
        assert y.shape == (shape[0],) and not bool(y.any())


def test_chunk_table_made_once_per_mirror(cupy, monkeypatch):
    A = sg.csr_matrix(sg.datasets.synthetic.stencil_2d(50))
    mirror = _mirror(A)
    calls = []
    real = delta16._launch_per_chunk
    monkeypatch.setattr(delta16, "_launch_per_chunk", lambda *a: calls.append(a[1]) or real(*a))
    first = chunk_table(mirror)
    assert chunk_table(mirror) is first
    compressed_columns(mirror)
    compressed_columns(mirror)
    assert calls == ["delta16_chunk_span", "delta16_encode"]
