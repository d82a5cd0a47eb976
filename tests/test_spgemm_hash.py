"""Our hash-row SpGEMM (``backends/hash_spgemm.py``, ``kernels/spgemm_hash.cu``): equal to
scipy's product, canonical, with the pattern of ``|A| @ |B|`` (entries that cancel stay
stored, as cuSPARSE keeps them), in every value and index dtype, on the awkward matrices,
rows of thousands of products, tables in shared and in global memory.

The kernels run on the GPU only (those tests skip on CPU with the reason); the launch
shapes and the first product's rule are tested everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import _hash_first, _hash_kernels, _hash_rows, hash_spgemm, spgemm
from sparsegpu.backends._hash_kernels import table_launch
from sparsegpu.backends.hash_spgemm import HASH, GpuSpgemm
from sparsegpu.backends.spgemm import Budget, ResultSink
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda, _host_words, _mirror
from sparsegpu.device._cuda import DeviceInfo
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
    no_gpu_reason,
    random_sparse,
)

MATRIX_NAMES = list(awkward_matrices())
# S.T @ S of one_long_row has 25M entries: too many for the host oracle's dense compare
NO_GRAM = {"one_long_row"}
ENGINE = GpuSpgemm()

gpu = pytest.mark.skipif(_cuda.cupy_or_none() is None, reason=no_gpu_reason())


def _mirror_of(S, dtype, index_dtype):
    S = sp.csr_matrix(S)
    mirror = _mirror.DeviceMatrix.from_host(
        S.data.astype(dtype),
        S.indices.astype(index_dtype),
        S.indptr.astype(index_dtype),
        S.shape,
        _mirror.CUPY,
    )
    return spgemm.with_index_dtype(spgemm.canonical(mirror), index_dtype)


def _hash_product(S, T, dtype, index_dtype, first="listed") -> sp.csr_matrix:
    """``S @ T`` by the hash kernels on the GPU, in ``index_dtype`` (the engine called
    directly: the driver would narrow int64 indices that fit in int32), every row listed
    first (``"listed"``), every row tried as a short row first (``"short"``) or as a tiny
    row first (``"tiny"``), whatever
    :func:`~sparsegpu.backends._hash_first.takes_short_first` and
    :func:`~sparsegpu.backends._hash_first.takes_tiny_first` would say."""
    cupy = _cuda.cupy_or_none()
    left, right = _mirror_of(S, dtype, index_dtype), _mirror_of(T, dtype, index_dtype)
    budget = Budget(cupy)
    takes = _hash_first.takes_short_first, _hash_first.takes_tiny_first
    _hash_first.takes_short_first = lambda left, right: first == "short"
    _hash_first.takes_tiny_first = lambda left, right: first == "tiny"
    try:
        if spgemm.is_empty(left, right):
            C = spgemm.run_once(ENGINE, left, right, HASH, budget)
        else:
            shape = (S.shape[0], T.shape[1])
            sink = ResultSink(budget, shape, dtype, index_dtype, _mirror.CUPY)
            C = ENGINE.multiply(left, right, HASH, sink)
    finally:
        _hash_first.takes_short_first, _hash_first.takes_tiny_first = takes
    assert budget.in_use == C.indptr.nbytes + C.indices.nbytes + C.data.nbytes  # scratch given back
    arrays = (C.data.get(), C.indices.get(), C.indptr.get())
    assert arrays[1].dtype == index_dtype or spgemm.is_empty(left, right)
    return sp.csr_matrix(arrays, shape=C.shape)


def _check(C, S, T, dtype):
    expected = (S @ T).astype(dtype)
    pattern = abs(S) @ abs(T)  # no cancellation: the entries the product stores
    pattern.sum_duplicates()
    assert C.shape == expected.shape
    assert C.nnz == pattern.nnz
    assert np.array_equal(C.indptr, pattern.indptr)
    assert np.array_equal(C.indices, pattern.indices)  # sorted, no duplicates
    terms = int(np.diff(sp.csr_matrix(S).indptr).max(initial=1))
    assert_product_close(C.toarray(), expected.toarray(), dtype, max_row_length=terms)


@gpu
@pytest.mark.parametrize("name", MATRIX_NAMES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("form", ["S@S.T", "S.T@S"])
@pytest.mark.parametrize("first", ["listed", "short", "tiny"])
def test_hash_product_equals_scipy(first, form, dtype, index_dtype, name):
    if form == "S.T@S" and name in NO_GRAM:
        pytest.skip(f"{form} of {name}: too large for the dense host oracle")
    S = awkward_matrices(dtype, index_dtype, seed=3)[name]
    S.sum_duplicates()
    left, right = (S, S.T.tocsr()) if form == "S@S.T" else (S.T.tocsr(), S)
    _check(_hash_product(left, right, dtype, index_dtype, first), left, right, dtype)


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_an_empty_result_from_operands_with_entries(dtype, index_dtype):
    """A's columns select only B's empty rows: nothing to compute, nothing stored."""
    A = sp.csr_matrix(np.array([[0, 1.0, 0], [0, 2.0, 0]], dtype=dtype))
    B = sp.csr_matrix(np.array([[3.0, 0, 1.0], [0, 0, 0], [1.0, 0, 0]], dtype=dtype))
    C = _hash_product(A, B, dtype, index_dtype)
    assert C.shape == (2, 3) and C.nnz == 0 and np.array_equal(C.indptr, [0, 0, 0])


@gpu
@pytest.mark.parametrize("dense", [False, True], ids=["tables", "dense"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rows_whose_tables_are_in_global_memory(index_dtype, dense, monkeypatch):
    """A row of 3,000 entries selecting rows of 30 from 200,000 columns: about 90,000
    products and distinct columns, a table beyond shared memory in both phases (or, as
    the default takes it, a dense row: its table would hold half the columns); beside it
    short rows, and rows of a few hundred products (a block per row)."""
    slots = _hash_kernels.table_slots(90_000)
    if not dense:
        monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SHARE", 0)
    taken = _hash_kernels.dense_launch(slots, 200_000, 1, _cuda.device_info())
    assert (taken is not None) == dense
    rng = np.random.default_rng(7)
    B = sp.random(3000, 200_000, density=30 / 200_000, random_state=rng, format="csr")
    lengths = np.array([3000, 1, 0, 12, 2, 300])
    rows = np.repeat(np.arange(lengths.size), lengths)
    columns = np.concatenate([rng.choice(3000, n, replace=False) for n in lengths])
    A = sp.csr_matrix((rng.uniform(-1, 1, rows.size), (rows, columns)), shape=(6, 3000))
    _check(_hash_product(A, B, np.float64, index_dtype), A, B, np.float64)


@gpu
@pytest.mark.parametrize("merge_slots", [0, 2048, 8192], ids=lambda s: f"merge{s}")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_merged_rows_equal_scipy(dtype, index_dtype, merge_slots, monkeypatch):
    """Rows of about 1,100, 3,000, 5,000 and 14,500 entries (a block per row; the last's
    table in global memory), their tables merged where they have at least
    ``merge_slots`` slots (0: never; 2,048: all; 8,192: the two longest), odd and even
    numbers of merges (runs of 64: 5 to 8 merges), beside empty and short rows: equal to
    scipy's product, canonical."""
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SHARE", 0)
    monkeypatch.setattr(_hash_rows, "MERGE_SLOTS", merge_slots)
    rng = np.random.default_rng(17)
    B = sp.random(2000, 60_000, density=10 / 60_000, random_state=rng, format="csr")
    lengths = np.array([115, 0, 310, 1, 530, 7, 1650, 0])
    rows = np.repeat(np.arange(lengths.size), lengths)
    columns = np.concatenate([rng.choice(2000, n, replace=False) for n in lengths])
    values = rng.uniform(-1, 1, rows.size)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-1, 1, rows.size)
    A = sp.csr_matrix((values, (rows, columns)), shape=(lengths.size, 2000))
    B = B.astype(dtype)
    C = _hash_product(A, B, dtype, index_dtype)
    entries = np.diff(C.indptr)
    assert entries[6] > 13_000 and 1_000 < entries[0] < 1_300  # a global table; 2,048 slots
    _check(C, A, B, dtype)


@gpu
@pytest.mark.parametrize("name", MATRIX_NAMES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dense_rows_equal_scipy(dtype, index_dtype, name, monkeypatch):
    """Every row a dense row (a bitmap of all the columns and a dense row of values in
    both phases), on the awkward matrices: columns not a multiple of 32, empty rows,
    entries that cancel (kept, as the tables keep them)."""
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SHARE", 2**40)
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SLOTS", 0)
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_FILL_SLOTS", 0)
    S = awkward_matrices(dtype, index_dtype, seed=8)[name]
    S.sum_duplicates()
    T = S.T.tocsr()
    if 4 * -(-T.shape[1] // 32) > _cuda.device_info().shared_memory_per_block_optin - 1024:
        pytest.skip(f"{name}: a bitmap of {T.shape[1]:,} columns is beyond shared memory")
    _check(_hash_product(S, T, dtype, index_dtype), S, T, dtype)


@gpu
def test_dense_rows_whose_values_do_not_fit_keep_their_tables(monkeypatch):
    """Where the dense rows of values do not fit the product's budget, the rows keep their
    tables (same answer; no work space left counted)."""
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SHARE", 2**40)
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SLOTS", 0)
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_FILL_SLOTS", 0)
    refused = []
    original = Budget.empty

    def empty(self, size, dtype, what):
        if "dense rows" in what:
            refused.append(what)
            raise spgemm.DoesNotFit(size, None, what)
        return original(self, size, dtype, what)

    monkeypatch.setattr(Budget, "empty", empty)
    S = random_sparse((300, 500), 0.05, 6, np.float64)
    T = random_sparse((500, 700), 0.05, 7, np.float64)
    _check(_hash_product(S, T, np.float64, np.int32), S, T, np.float64)
    assert refused


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_block_per_row_whose_rows_have_fewer_entries_than_its_lanes(index_dtype):
    """3-D 3 x 3 blocks: rows of up to 81 entries and 6,561 products, a table of 8,192
    slots and a block of 1,024 threads per row in the symbolic phase (its warps share the
    row's entries evenly, a few each), a warp and a table of 512 slots (1.25 times the
    entries) in the numeric phase; and a row of a single entry among them."""
    S = sp.csr_matrix(synthetic.block_mesh(5, 3, 3, seed=4))
    S.sum_duplicates()
    rows = sp.lil_matrix(S)
    rows[7, :] = 0
    rows[7, 3] = 2.0
    S = sp.csr_matrix(rows)
    bound = int(np.diff(S.indptr).max()) ** 2
    assert table_launch(_hash_kernels.table_slots(bound), 4, 1, _cuda.device_info()).whole_block
    _check(_hash_product(S, S, np.float64, index_dtype), S, S, np.float64)


@gpu
@pytest.mark.parametrize("dense", [False, True], ids=["tables", "dense"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_entries_selecting_hub_rows_share_a_block(dtype, index_dtype, dense, monkeypatch):
    """Entries whose row of B alone holds a block of products (hub rows, as power-law and
    R-MAT columns select): queued and their products shared over the whole block; past the
    queue's 16 a row, a warp takes them as any other. A row of one such entry (tables in
    shared memory), one of 40 of them among short ones (more than the queue; tables in
    global memory, or dense rows), one of a few, and short rows."""
    if not dense:
        monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SHARE", 0)
    rng = np.random.default_rng(11)
    n_cols = 300_000
    b_lengths = np.where(np.arange(80) % 2 == 0, rng.integers(1100, 5000, 80), 3)
    b_rows = np.repeat(np.arange(80), b_lengths)
    b_columns = np.concatenate([rng.choice(n_cols, n, replace=False) for n in b_lengths])
    B = sp.csr_matrix((rng.uniform(-1, 1, b_rows.size), (b_rows, b_columns)), shape=(80, n_cols))
    picks = [
        [0],  # one hub entry
        list(range(0, 80, 2)) + [1, 3, 5, 7],  # 40 hub entries and short ones
        [2, 9, 11, 40],  # a few
        [13, 15],  # short
        [],
        [17],
    ]
    rows = np.repeat(np.arange(len(picks)), [len(p) for p in picks])
    A = sp.csr_matrix(
        (rng.uniform(-1, 1, rows.size), (rows, np.concatenate(picks).astype(int))),
        shape=(len(picks), 80),
    )
    if np.dtype(dtype).kind == "c":
        A = A + 1j * A
        B = B - 0.5j * B
    _check(_hash_product(A, B, dtype, index_dtype), A, B, dtype)


@gpu
@pytest.mark.parametrize("name", [*MATRIX_NAMES, "hub"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_total_products_counts_every_product(name, index_dtype):
    """The products of L @ R (a thread per entry of L, one 64-bit sum) as the host counts
    them: on the awkward matrices, and with a hub row of 20,000 entries; again and again
    on one slot (the kernel's last block zeroes its counters), with the other index dtype
    on the right, and two counts at once."""
    if name == "hub":
        rng = np.random.default_rng(2)
        S = sp.random(20_000, 20_000, density=5e-4, random_state=rng, format="lil")
        S[3, :] = 1.0
        S = sp.csr_matrix(S)
    else:
        S = awkward_matrices(np.float64, index_dtype, seed=5)[name]
    S.sum_duplicates()
    T = S.T.tocsr()
    expected = int(np.diff(T.indptr)[S.indices].sum())
    left = _mirror_of(S, np.float64, index_dtype)
    right = _mirror_of(T, np.float64, index_dtype)
    assert [ENGINE.total_products(left, right) for _ in range(3)] == [expected] * 3
    other = np.int32 if np.dtype(index_dtype) == np.int64 else np.int64
    mixed = _mirror_of(T, np.float64, other)  # the kernel reads both in one index type
    assert ENGINE.total_products(left, mixed) == expected
    if S.nnz:  # two counts launched (two slots), read in the other order
        first = hash_spgemm._DeviceCount(left, right)
        second = hash_spgemm._DeviceCount(right, left)
        assert second.value() == int(np.diff(S.indptr)[T.indices].sum())
        assert first.value() == expected


@gpu
def test_hash_rows_complete_in_row_blocks_where_their_work_space_does_not_fit(monkeypatch):
    S = random_sparse((400, 400), 0.02, 11, np.float64)
    A = sg.csr_matrix(S)
    whole = sg.spgemm(A, A, algorithm=HASH)
    peak = sg.explain(A, A).peak_bytes
    result = whole.nnz * (8 + whole.indices.dtype.itemsize) + whole.indptr.nbytes
    assert sg.explain(A, A).last.algorithm == HASH and peak > result
    monkeypatch.setattr(GpuSpgemm, "lean_algorithms", lambda self: ())
    limit = result + (peak - result) // 6
    C = sg.spgemm(A, A, algorithm=HASH, memory_limit=limit)
    last = sg.explain(A, A).last
    assert last.algorithm == HASH and last.blocks > 1, last
    assert last.peak_bytes <= limit
    _check(sp.csr_matrix(C), S, S, np.float64)


def test_launch_shapes_keep_tables_within_shared_memory():
    device = DeviceInfo(0, "test", (9, 0), 132, 80 * 2**30, 50 * 2**20, 227 * 1024, 2**27, 512)
    short = table_launch(32, 12, 1000, device)  # 8 lanes a row, 32 rows a block
    assert (short.lanes, short.whole_block, short.block, short.grid) == (8, False, 256, 32)
    assert short.shared_bytes == 32 * 32 * 12 and short.global_slots == 0
    medium = table_launch(64, 12, 1000, device)  # 16 lanes a row, 16 rows a block
    assert (medium.lanes, medium.whole_block, medium.block) == (16, False, 256)
    warp = table_launch(256, 4, 1000, device)  # a warp a row, eight rows a block
    assert (warp.lanes, warp.block, warp.grid, warp.shared_bytes) == (32, 256, 125, 8 * 1024)
    few = table_launch(1024, 12, 3, device)  # 12 KiB tables: two a block (32 KiB at most)
    assert (few.block, few.grid, few.shared_bytes) == (64, 2, 2 * 1024 * 12)
    one = table_launch(256, 12, 1, device)  # no more rows a block than there are
    assert (one.block, one.grid, one.shared_bytes) == (32, 1, 256 * 12)
    block = table_launch(8192, 12, 10, device)  # 96 KiB: a block per row (opt-in)
    assert (block.whole_block, block.grid, block.global_slots) == (True, 10, 0)
    assert block.block == 1024 and block.shared_bytes == 8192 * 12
    big = table_launch(2**17, 12, 1000, device)  # beyond shared memory: global tables
    assert (big.whole_block, big.shared_bytes, big.global_slots) == (True, 0, 2**17)
    assert big.grid == _hash_kernels.GLOBAL_BLOCKS_PER_SM * 132


def test_dense_rows_take_tables_of_a_large_share_of_the_columns(monkeypatch):
    device = DeviceInfo(0, "test", (9, 0), 132, 80 * 2**30, 50 * 2**20, 227 * 1024, 2**27, 512)
    settings = (("DENSE_MIN_SHARE", 64), ("DENSE_MIN_SLOTS", 2048), ("DENSE_MIN_FILL_SLOTS", 4096))
    for name, value in settings:
        monkeypatch.setattr(_hash_kernels, name, value)
    monkeypatch.setattr(_hash_kernels, "DENSE_MAX_BYTES", 2**30)
    # R-MAT 17's hubs: tables of 2^11 slots or more of 131,072 columns
    blocks = _hash_kernels.DENSE_BLOCKS_PER_SM * 132
    assert _hash_kernels.dense_launch(2**11, 131_072, 5000, device, 8) is None  # numeric: 4,096
    dense = _hash_kernels.dense_launch(2**12, 131_072, 5000, device, 8)
    assert dense is not None and (dense.block, dense.shared_bytes) == (1024, 131_072 // 8)
    assert (dense.grid, dense.global_slots) == (blocks, 131_072)
    symbolic = _hash_kernels.dense_launch(2**11, 131_072, 5000, device)  # no values
    assert (symbolic.grid, symbolic.global_slots) == (blocks, 0)
    assert _hash_kernels.dense_launch(2**10, 131_072, 5000, device) is None  # 1/128: a table
    assert _hash_kernels.dense_launch(2**10, 2_000, 5000, device) is None  # < 2,048 slots
    assert _hash_kernels.dense_launch(2**13, 131_072, 3, device, 8).grid == 3
    # the blocks' rows of values within DENSE_MAX_BYTES: 1.8M complex128 columns, 37 rows
    assert _hash_kernels.dense_launch(2**20, 1_800_000, 10**4, device, 16).grid == 37
    # a bitmap of 2M columns (256 KiB) is beyond 227 KiB: global tables
    assert _hash_kernels.dense_launch(2**20, 2_000_000, 10, device) is None
    monkeypatch.setattr(_hash_kernels, "DENSE_MIN_SHARE", 0)  # never
    assert _hash_kernels.dense_launch(2**17, 131_072, 10, device) is None


def _operand(n_rows, nnz, mean, longest, dtype=np.float64):
    """What the rule reads of an operand: its dtype, rows, nonzeros and row lengths."""
    from sparsegpu.device._mirror import RowLengthStats

    stats = RowLengthStats(n_rows, n_rows, nnz, mean, 0.0, 0, longest, 0)
    fields = {"nnz": nnz, "row_stats": stats, "longest_row": longest, "column_bound": None}
    fields["known_longest_row"] = longest
    fields.update(shape=(n_rows, n_rows), dtype=np.dtype(dtype))
    return type("Operand", (), fields)()


@pytest.fixture
def compression(monkeypatch):
    """The sampled products an entry the rule reads (set ``.value``), and its calls."""

    class Sampled:
        value = 1.0
        calls = 0

        def __call__(self, left, right, bound):
            self.calls += 1
            return self.value

    sampled = Sampled()
    monkeypatch.setattr(hash_spgemm, "sampled_compression", sampled)
    return sampled


H200 = DeviceInfo(0, "test", (9, 0), 132, 140 * 2**30, 50 * 2**20, 227 * 1024, 2**27, 512)


@pytest.fixture
def counted(monkeypatch):
    """The exact products the rule counts for skewed rows (set ``.value``), its calls, on
    an H200's shared memory."""

    class Counted:
        value = 0
        calls = 0

        def __call__(self, left, right):
            self.calls += 1
            return self.value

    exact = Counted()
    monkeypatch.setattr(GpuSpgemm, "total_products", lambda self, left, right: exact(left, right))
    monkeypatch.setattr(_cuda, "device_info", lambda index=None: H200)
    return exact


@pytest.mark.parametrize(
    "n_rows, mean, longest, dtype, folds, expected, sampled",
    [
        (100**3, 27.0, 27, np.float64, 5.6, HASH, True),  # 3-D 27-point: 729 a row
        (100**3, 27.0, 27, np.float32, 5.6, HASH, True),
        (100**3, 27.0, 27, np.float64, 1.2, "alg1", True),  # products hardly fold
        (100**3, 27.0, 27, np.complex128, 5.6, "alg1", False),
        (2000**2, 5.0, 5, np.float64, 5.6, HASH, False),  # 25 a row: all short rows
        (300_000, 7.0, 20, np.float64, 2.4, HASH, False),  # P1 mesh: 49 a row, <= 400
        (300_000, 7.0, 40, np.float64, 2.4, "alg1", False),  # rows of up to 1,600
        (2000**2, 9.0, 9, np.float64, 5.6, "alg1", False),  # 81 a row: tables, no sample
        (2000**2, 5.0, 5, np.complex128, 5.6, "alg1", False),  # short rows: float64 only
        (2000**2, 5.0, 5, np.float32, 5.6, "alg1", False),
        (44_000, 5.0, 5, np.float64, 5.6, "alg1", False),  # 1.1M products: too few
        (1000, 27.0, 27, np.float64, 5.6, "alg1", False),  # 729,000 products
        # rows of up to 25M products: no sample; 10,000 a row counted exactly: hash rows
        (10**6, 100.0, 5000, np.float64, 5.6, HASH, False),
        (140_000, 81.0, 81, np.float64, 17.5, HASH, True),  # 3-D 3 x 3 blocks: 6,561 a row
    ],
    ids=[
        "stencil27",
        "float32",
        "no_folding",
        "complex",
        "short_rows",
        "short_rows_first",
        "rows_beyond_the_bound",
        "rows_of_tables",
        "complex_short_rows",
        "float32_short_rows",
        "few_short_rows",
        "small",
        "long_rows",
        "blocks3_3d",
    ],
)
def test_the_first_products_rule(
    compression, counted, n_rows, mean, longest, dtype, folds, expected, sampled
):
    compression.value = folds
    counted.value = int(n_rows * mean * mean)  # rows of even length: no skew
    operand = _operand(n_rows, int(n_rows * mean), mean, longest, dtype)
    algorithm, reason = ENGINE.estimate(operand, operand)
    assert algorithm == expected, reason
    assert compression.calls == int(sampled), "the sample is read only where it decides"
    skewed = longest * longest > hash_spgemm.HASH_MAX_ROW_PRODUCTS and mean >= 24
    assert counted.calls == int(skewed) and (", exactly " in reason) == skewed
    assert ENGINE.rule(operand, operand) == algorithm  # what a product reads, no text
    products = int(int(n_rows * mean) * mean)
    assert reason.startswith("rule: ") and f"{products:,} products" in reason
    assert f"at most {longest * longest:,}" in reason
    assert (f"{folds:.2f} an entry" in reason) == sampled


@pytest.mark.parametrize(
    "n_rows, nnz, longest, exact, expected, counts",
    [
        # R-MAT 17: 1.94M entries, rows of up to 10,043; 1,089M products (8,305 a row)
        (131_072, 1_942_939, 10_043, 1_088_536_389, HASH, True),
        # R-MAT 15 with a = 0.45: 701 products a row
        (32_768, 522_010, 512, 22_967_327, "alg1", True),
        # power-law rows of a few entries, a longest of 10,218: 2M rows x 2,400 products
        # are beyond 6.4M entries x 10,218, nothing counted
        (2_000_000, 6_393_209, 10_218, 20_391_554, "alg1", False),
        # PGPgiantcompo: 0.22M products estimated, nothing counted
        (10_680, 48_632, 205, 918_226, "alg1", False),
        # many products a row, but under HASH_MIN_PRODUCTS in all
        (4_000, 400_000, 20_000, 12_000_000, "alg1", True),
    ],
    ids=["rmat17", "rmat15", "powerlaw", "pgp", "few"],
)
def test_skewed_rows_are_counted_exactly_where_they_could_take_hash_rows(
    compression, counted, n_rows, nnz, longest, exact, expected, counts
):
    counted.value = exact
    operand = _operand(n_rows, nnz, nnz / n_rows, longest)
    algorithm, reason = ENGINE.estimate(operand, operand)
    assert algorithm == expected, reason
    assert counted.calls == int(counts), reason
    assert (", exactly " in reason) == counts
    assert compression.calls == 0  # no sample: rows beyond shared memory's tables


class Pending(spgemm.Counted):
    """A count still running (until read) that will find ``exact``."""

    def __init__(self, exact: int):
        super().__init__()
        self.exact, self.reads = exact, 0

    def _read(self) -> int:
        self.reads += 1
        return self.exact


@pytest.mark.parametrize("exact, decided", [(1_088_536_389, HASH), (22_967_327, "alg1")])
def test_a_count_still_running_is_assumed_few_a_row_until_the_launch(
    compression, counted, exact, decided
):
    """The rule does not wait for a count launched ahead (products_ahead): skewed rows take
    ALG1 on the assumption of few products a row, checked before the first launch; a
    count already read decides at once, as the rule's own count does."""
    operand = _operand(131_072, 1_942_939, 1_942_939 / 131_072, 10_043)  # R-MAT 17's rows
    pending = Pending(exact)
    algorithm, products = ENGINE.rule_and_products(operand, operand, pending)
    assert (algorithm, products, pending.reads, counted.calls) == ("alg1", pending, 0, 0)
    if decided == HASH:
        with pytest.raises(spgemm.Reconsider, match=r"1,088,536,389 products: not few products"):
            pending.check()
    else:
        pending.check()
    assert pending.reads == 1
    pending.check()  # checked once
    assert ENGINE.rule_and_products(operand, operand, pending.value()) == (decided, exact)
    read = Pending(exact)
    read.value()
    assert ENGINE.rule_and_products(operand, operand, read) == (decided, exact)
    assert counted.calls == 0


def test_a_count_dropped_unread_gives_its_slot_back_alive(monkeypatch):
    """A count launched ahead and never read (an error before its read), collected as
    cyclic garbage, gives its slot back only once its copy has written it, and never a
    slot whose event CuPy's own __del__ freed in the same collection: the next count
    records on a live event (a freed one segfaulted the stopwatch's record, 47feb89)."""
    import gc
    import sys
    import threading
    import types

    freed, synchronized = set(), []

    class Event:
        serials = iter(range(10**6))

        def __init__(self, disable_timing=False):
            self.serial, self.done = next(Event.serials), False

        def __del__(self):  # CuPy's Event frees its handle here
            freed.add(self.serial)

        def record(self, stream=None):
            assert self.serial not in freed, "a freed event was recorded"

        def synchronize(self):
            assert self.serial not in freed, "a freed event was waited for"
            synchronized.append(self.serial)

    array = types.SimpleNamespace(data=types.SimpleNamespace(ptr=8))
    runtime = types.SimpleNamespace(
        getDevice=lambda: 0, pointerGetAttributes=lambda p: types.SimpleNamespace(devicePointer=p)
    )
    cuda = types.SimpleNamespace(
        Event=Event, runtime=runtime, get_current_stream=lambda: types.SimpleNamespace(ptr=0)
    )
    fake = types.SimpleNamespace(cuda=cuda, asarray=lambda *a, **k: array)
    monkeypatch.setitem(
        sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=lambda *a, **k: np.zeros(1))
    )
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: fake)
    monkeypatch.setattr(_cuda, "device_info", lambda index=None: H200)
    monkeypatch.setattr(_hash_kernels, "_kernel", lambda *a, **k: None)
    monkeypatch.setattr(hash_spgemm, "KernelLaunch", lambda *a, **k: lambda *a, **k: None)
    monkeypatch.setattr(_host_words, "_pools", threading.local())
    operand = types.SimpleNamespace(nnz=10, index_dtype=np.dtype(np.int32), indices=0, indptr=0)
    count = hash_spgemm._DeviceCount(operand, operand)
    serial = count._slot.event.serial  # (the slot itself not held here: only the count)
    holder = {"count": count}
    holder["self"] = holder  # a cycle: only the collector frees it
    del count, holder
    gc.collect()
    assert synchronized == [serial] and serial not in freed
    again = hash_spgemm._DeviceCount(operand, operand)
    assert again._slot.event.serial == serial  # given back, and reused on a live event
    free = _host_words.free_slots(hash_spgemm._CountSlot.KIND, 0)
    assert again.value() == 0 and len(free) == 1


def test_what_the_rule_will_count_is_known_before_it_runs(compression, counted):
    """products_ahead launches the count only where the rule counts skewed rows or the
    index dtype waits for the products (never where a sample decides first)."""
    rmat = _operand(131_072, 1_942_939, 1_942_939 / 131_072, 10_043)
    assert ENGINE._rule_path(rmat, rmat) == hash_spgemm.SKEWED_PATH
    assert spgemm.products_decide_indices(rmat, rmat)  # 1.9M entries x 10,043 > 2^31
    stencil = _operand(100**3, 27 * 100**3, 27.0, 27)  # a sample decides first
    assert ENGINE._rule_path(stencil, stencil) is None
    assert not spgemm.products_decide_indices(stencil, stencil)  # 27M x 27 < 2^31
    powerlaw = _operand(2_000_000, 6_393_209, 3.2, 10_218)  # no bitmap of 2M columns
    assert ENGINE._rule_path(powerlaw, powerlaw) == hash_spgemm.DEFAULT_PATH
    assert spgemm.products_decide_indices(powerlaw, powerlaw)  # 6.4M x 10,218 > 2^31
    for operand in (rmat, stencil, powerlaw):  # host operands: never launched
        operand.xp = np
        assert ENGINE.products_ahead(operand, operand) is None


@pytest.mark.parametrize("exact", [22_967_327, 1_088_536_389])
def test_the_rules_path_known_at_the_count_is_the_rules_own(compression, counted, exact):
    """A count launched ahead carries where the rule goes (products_ahead worked it out:
    skewed rows counted, the default with nothing to decide, or unknown), and the rule
    given it answers as the rule working it out again."""
    rmat = _operand(131_072, 1_942_939, 1_942_939 / 131_072, 10_043)
    stencil = _operand(100**3, 27 * 100**3, 27.0, 27)
    powerlaw = _operand(2_000_000, 6_393_209, 3.2, 10_218)
    paths = ((rmat, hash_spgemm.SKEWED_PATH), (powerlaw, hash_spgemm.DEFAULT_PATH))
    for operand, path in (*paths, (stencil, None)):
        assert ENGINE._rule_path(operand, operand) == path
        known, unknown = Pending(exact), Pending(exact)
        known.rule_path = path
        answer = ENGINE.rule_and_products(operand, operand, known)
        assert answer[0] == ENGINE.rule_and_products(operand, operand, unknown)[0]
        known_again, unknown_again = Pending(exact), Pending(exact)
        known_again.rule_path = path
        found = ENGINE._rule(operand, operand, known_again)
        _same_rule(found, known_again, ENGINE._rule(operand, operand, unknown_again), unknown_again)
        for pending in (known, unknown):  # the same assumption checked: the same decision
            try:
                pending.check()
                decided = answer[0]
            except spgemm.Reconsider:
                decided = "reconsidered"
            if pending is known:
                first = decided
        assert decided == first


def _same_rule(found, counted, expected, expected_counted) -> None:
    """The rule's whole answer equal, the count it returns being each call's own."""
    assert found[:5] == expected[:5], (found, expected)
    if found[5] is counted:
        assert expected[5] is expected_counted, (found, expected)
    else:
        assert found[5] == expected[5], (found, expected)


class _ReadOnce:
    """An operand whose longest row is known only once read (a pass over a fresh one)."""

    def __init__(self, n_rows, nnz, longest, dtype=np.float64):
        from sparsegpu.device._mirror import RowLengthStats

        self.nnz, self.shape, self.dtype = nnz, (n_rows, n_rows), np.dtype(dtype)
        self.column_bound, self._longest, self.read = None, longest, False
        self.row_stats = RowLengthStats(n_rows, n_rows, nnz, nnz / n_rows, 0.0, 0, longest, 0)

    @property
    def known_longest_row(self):
        return self._longest if self.read else None

    @property
    def longest_row(self):
        self.read = True
        return self._longest


def test_the_rules_path_reads_what_the_rule_would_read_after_it(compression, counted):
    """Where working out the path reads the longest rows (a pass), short rows first may
    hold on them: the path is then left to the rule, which answers as it did when it
    worked everything out again after the count's launch."""
    first = _ReadOnce(20_000_000, 120_000_000, 32)
    path = ENGINE._rule_path(first, first)
    assert first.read and path is None  # short rows first, on the rows just read
    known = Pending(10**9)
    known.rule_path = path
    again = _ReadOnce(20_000_000, 120_000_000, 32)
    ENGINE._rule_path(again, again)  # the same reads, then the rule with no path
    unknown = Pending(10**9)
    found = ENGINE._rule(first, first, known)
    _same_rule(found, known, ENGINE._rule(again, again, unknown), unknown)
    assert found[0] == HASH


@gpu
@pytest.mark.parametrize("per_row, decided", [(10, HASH), (10**6, "alg1")])
def test_skewed_rows_assumed_few_a_row_take_hash_rows_where_the_count_says(
    monkeypatch, per_row, decided
):
    """A first product of skewed rows (R-MAT, thresholds lowered) runs ALG1's host work on
    the assumption of few products a row while the count launched ahead runs; where the
    count says many, nothing was launched for ALG1 and hash rows compute it."""
    S = sp.csr_matrix(synthetic.rmat(10, 16, seed=4).astype(np.float64))
    S.sum_duplicates()
    for name, value in (
        ("HASH_MIN_ROW_PRODUCTS", 10**9),  # no sample: the skewed rows' count decides
        ("HASH_MIN_SKEWED_ESTIMATE", 1),
        ("HASH_MIN_PRODUCTS", 1),
        ("HASH_MAX_ROW_PRODUCTS", 16),
        ("HASH_MIN_SKEWED_ROW_PRODUCTS", per_row),
    ):
        monkeypatch.setattr(hash_spgemm, name, value)
    # the count never finished before it is read: the rule assumes, the launch checks
    monkeypatch.setattr(hash_spgemm._DeviceCount, "done", lambda self: self._exact is not None)
    A = sg.csr_matrix(S)
    C = A @ A
    assert sg.explain(A, A).last.algorithm == decided
    expected = (S @ S).toarray()
    assert_product_close(C.toarray(), expected, np.float64, max_row_length=S.shape[1])


def test_a_transpose_of_one_entry_a_row_is_never_counted(compression, counted):
    """P.T @ (A @ P) of aggregates of 8 on power-law rows: P.T's rows have 8 entries and A
    @ P's up to 21,905, but P has one entry a row, so each column of P.T one: the products
    are at most A @ P's entries, far under 2,400 a row. Nothing counted, no pass."""
    counted.value = 3_500_000  # what a count would find: A @ P's entries
    PT = _operand(187_500, 1_500_000, 8.0, 8)
    PT.column_bound = 1
    PT.shape = (187_500, 1_500_000)
    AP = _operand(1_500_000, 3_500_000, 2.3, 21_905)
    AP.shape = (1_500_000, 187_500)
    AP.row_stats = None  # a fresh product's: reading it would be a pass
    assert ENGINE.estimate(PT, AP)[0] == "alg1" and counted.calls == 0
    PT.column_bound = None  # unknown: L's entries x R's longest row could reach it
    assert ENGINE.rule(PT, AP) == "alg1" and counted.calls == 1


def test_skewed_rows_keep_alg1_where_no_bitmap_of_the_columns_fits(compression, counted):
    """A bitmap of 2M columns is beyond 227 KiB: no dense rows, so ALG1, nothing counted."""
    counted.value = 10**10
    operand = _operand(2_000_000, 40_000_000, 20.0, 50_000)
    assert ENGINE.estimate(operand, operand)[0] == "alg1" and counted.calls == 0


def test_the_rule_reads_a_recorded_bound_then_the_exact_rows(compression):
    """A product's result carries a bound of its longest row; where that bound alone would
    turn hash rows down, the rule reads the exact rows and decides as before."""
    compression.value = 5.6
    exact = _operand(100**3, 27 * 100**3, 27.0, 27)
    loose = _operand(100**3, 27 * 100**3, 27.0, 27)
    loose.longest_row = 1_000_000  # what a product may record: far above the truth
    assert ENGINE.estimate(exact, loose)[0] == HASH
    small = _operand(50**2, 5 * 50**2, 5.0, 5)
    small.row_stats = None  # too few products for hash rows: no need to read the rows
    small.longest_row = 1_000_000
    algorithm, reason = ENGINE.estimate(small, small)
    assert algorithm == "alg1" and f"at most {10**12:,}" in reason


def test_no_sample_where_its_tables_do_not_fit_in_shared_memory(monkeypatch):
    """On a GPU of 99 KiB of shared memory a block, a table of 16,384 int64 keys does not
    fit: the rule samples nothing (launches nothing) and keeps ALG1."""
    small = DeviceInfo(0, "test", (8, 6), 84, 24 * 2**30, 6 * 2**20, 99 * 1024, 2**27, 512)
    monkeypatch.setattr(_cuda, "device_info", lambda index=None: small)
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: pytest.fail("nothing is launched"))
    operand = _operand(100**3, 27 * 100**3, 27.0, 27)
    operand.index_dtype = np.dtype(np.int64)
    limit = hash_spgemm.HASH_MAX_ROW_PRODUCTS
    assert hash_spgemm.sampled_compression(operand, operand, limit) is None
    operand.longest_row = 128  # 16,384 products a row at most: the rule's limit
    assert ENGINE.estimate(operand, operand)[0] == "alg1"


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("name", ["stencil27", "tall", "one_row", *MATRIX_NAMES])
def test_sampled_compression_counts_the_sampled_rows_exactly(name, index_dtype):
    """Products an entry over the sampled rows: their products, then their distinct
    columns, as scipy's product of those rows has them."""
    from sparsegpu.datasets import synthetic

    made = {
        "stencil27": lambda: synthetic.stencil_3d(12, points=27),
        "tall": lambda: synthetic.uniform_random(3000, 8, n_cols=300, seed=4).T,
        "one_row": lambda: np.ones((1, 40)),
    }
    S = sp.csr_matrix(made[name]() if name in made else awkward_matrices()[name], dtype=float)
    S.sum_duplicates()
    S.data[:] = 1.0  # the pattern: no entry of the products cancels
    T = sp.csr_matrix(S.T) if S.shape[0] != S.shape[1] else S
    left, right = _mirror_of(S, np.float64, index_dtype), _mirror_of(T, np.float64, index_dtype)
    bound = int(left.row_stats.max) * int(right.row_stats.max)
    if bound > hash_spgemm.HASH_MAX_ROW_PRODUCTS or S.nnz == 0:
        pytest.skip("the rule samples only rows whose tables fit in shared memory")
    rows = hash_spgemm.sample_rows(S.shape[0])
    assert len(set(rows.tolist())) == min(S.shape[0], hash_spgemm.SAMPLE_ROWS)
    sampled = S[rows]
    products = int(np.diff(T.indptr)[sampled.indices].sum())
    entries = (sampled @ T).nnz
    expected = products / entries if entries else 1.0
    assert hash_spgemm.sampled_compression(left, right, bound) == pytest.approx(expected)


def test_the_hash_family_is_registered_for_every_dtype():
    names = _hash_kernels.HASH_FAMILY.instantiations
    for value in ("float", "double", "complex64", "complex128"):
        for index in ("int", "long long"):
            for lanes, whole in (("8", "false"), ("16", "false"), ("32", "false"), ("32", "true")):
                assert f"spgemm_hash_fill<{value}, {index}, {lanes}, {whole}>" in names


def test_short_rows_first_only_where_the_longest_rows_are_known():
    """takes_short_first reads the longest rows only where known (no pass over an operand):
    an unknown one, a bound past SHORT_FIRST_MAX_BOUND or more than SHORT_FIRST_SLOTS
    products a row on average, and the rows are listed first."""
    operand = _operand(300_000, 2_100_000, 7.0, 20)
    assert _hash_first.takes_short_first(operand, operand)
    unknown = _operand(300_000, 2_100_000, 7.0, 20)
    unknown.known_longest_row = None
    assert not _hash_first.takes_short_first(unknown, operand)
    assert not _hash_first.takes_short_first(operand, unknown)
    assert not _hash_first.takes_short_first(*[_operand(300_000, 2_100_000, 7.0, 33)] * 2)
    assert not _hash_first.takes_short_first(*[_operand(300_000, 2_700_000, 9.0, 9)] * 2)


def test_short_rows_first_in_float32_only_where_no_row_is_listed_and_rows_are_long():
    """The first product's rule takes short rows first in float64 as takes_short_first
    says (at least SHORT_MIN_PRODUCTS products); in float32 only where the known longest
    rows bound every row by SHORT_FIRST_SLOTS (no listing) and the rows average at least
    SHORT_FLOAT32_ROW_PRODUCTS products (a 3-D 7-point stencil's 49, not a 2-D 5-point's
    25 nor a P1 mesh's, whose longest rows bound some past 64)."""
    rule = hash_spgemm._short_first_rule

    def pair(n_rows, mean, longest, dtype):
        operand = _operand(n_rows, int(n_rows * mean), mean, longest, dtype)
        return operand, operand, int(n_rows * mean * mean)

    stencil3d = pair(1_728_000, 7.0, 7, np.float32)  # 49 a row, bound 49
    assert rule(*stencil3d)
    assert rule(*pair(1_728_000, 7.0, 7, np.float64))
    assert not rule(*pair(1_000_000, 5.0, 5, np.float32))  # 25 a row
    assert rule(*pair(1_000_000, 5.0, 5, np.float64))
    assert not rule(*pair(300_000, 7.0, 20, np.float32))  # bound 400: rows listed
    assert rule(*pair(300_000, 7.0, 20, np.float64))
    assert not rule(*pair(1_728_000, 7.0, 7, np.complex128))
    assert not rule(*pair(20_000, 7.0, 7, np.float32))  # under SHORT_MIN_PRODUCTS
    unknown = _operand(1_728_000, 12_096_000, 7.0, 7, np.float32)
    unknown.known_longest_row = None
    assert not rule(unknown, stencil3d[1], stencil3d[2])
