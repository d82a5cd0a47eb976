"""Short rows of the hash SpGEMM (``kernels/spgemm_short.cu``): rows of few products gathered
in shared memory and ranked there, no table. Equal to scipy's product, canonical, with the
pattern of ``|A| @ |B|``, in every value and index dtype, on the awkward matrices, with every
group shape (``SHORT_SLOTS`` 32 to 256) and none (0); beside rows of tables; where ``C`` has
fewer columns than a short row's products; sums the same on every run.

The kernels run on the GPU only (those tests skip on CPU with the reason); which classes
run short rows, and the kernel family, are tested everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsegpu.backends import _hash_first, _hash_kernels, _hash_rows, hash_spgemm
from sparsegpu.backends.spgemm import Budget
from sparsegpu.device import _cuda
from sparsegpu.device._compile import FAMILIES
from sparsegpu.testing import INDEX_DTYPES, VALUE_DTYPES, awkward_matrices, no_gpu_reason

from .test_spgemm_hash import MATRIX_NAMES, _check, _hash_product, _mirror_of

gpu = pytest.mark.skipif(_cuda.cupy_or_none() is None, reason=no_gpu_reason())
SLOTS = [0, *_hash_kernels.SHORT_GROUPS]


def _two_passes(monkeypatch):
    """Short rows counted, then computed into C (as where their slots do not fit)."""
    monkeypatch.setattr(_hash_rows, "_short_slotted", lambda *args: None)


@gpu
@pytest.mark.parametrize("passes", ["slotted", "two_passes"])
@pytest.mark.parametrize("slots", SLOTS, ids=lambda s: f"short{s}")
@pytest.mark.parametrize("name", MATRIX_NAMES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_short_rows_equal_scipy(dtype, index_dtype, name, slots, passes, monkeypatch):
    monkeypatch.setattr(_hash_rows, "SHORT_SLOTS", slots)
    if passes == "two_passes":
        _two_passes(monkeypatch)
    S = awkward_matrices(dtype, index_dtype, seed=11)[name]
    S.sum_duplicates()
    T = S.T.tocsr()
    _check(_hash_product(S, T, dtype, index_dtype), S, T, dtype)


def _skewed(n_rows, n_cols, seed, dtype=np.float64):
    """Rows of 0 to 40 entries (a few of 300) over ``n_cols`` columns, random values."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, n_rows) ** 2 // 40
    lengths[rng.integers(0, n_rows, 3)] = min(300, n_cols)
    return _rows_of(lengths, n_cols, rng, dtype)


def _rows_of(lengths, n_cols, rng, dtype):
    """Rows of ``lengths`` entries in distinct random columns, random values (complex for
    a complex ``dtype``)."""
    indptr = np.r_[0, np.cumsum(lengths)]
    indices = np.concatenate([rng.choice(n_cols, k, replace=False) for k in lengths])
    values = rng.uniform(-1, 1, indices.size).astype(dtype)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-1, 1, indices.size)
    return sp.csr_matrix((values, indices, indptr), shape=(len(lengths), n_cols))


@gpu
@pytest.mark.parametrize("passes", ["slotted", "two_passes"])
@pytest.mark.parametrize("slots", [32, 64, 256], ids=lambda s: f"short{s}")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_short_rows_beside_rows_of_tables(dtype, index_dtype, slots, passes, monkeypatch):
    """Rows of 0 to a few hundred products: some short, some in tables of every size; C's
    nonzeros alone (the symbolic pass: short rows counted) equal too."""
    monkeypatch.setattr(_hash_rows, "SHORT_SLOTS", slots)
    if passes == "two_passes":
        _two_passes(monkeypatch)
    A = _skewed(3000, 2000, seed=1, dtype=dtype)
    B = _skewed(2000, 2500, seed=2, dtype=dtype)
    _check(_hash_product(A, B, dtype, index_dtype), A, B, dtype)
    left, right = _mirror_of(A, dtype, index_dtype), _mirror_of(B, dtype, index_dtype)
    budget = Budget(_cuda.cupy_or_none())
    expected = abs(A) @ abs(B)
    expected.sum_duplicates()
    assert _hash_rows.hash_count(left, right, budget) == expected.nnz
    assert budget.in_use == 0


@gpu
@pytest.mark.parametrize("n_cols", [1, 7, 32, 64, 65])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rows_of_more_products_than_c_has_columns(index_dtype, n_cols, monkeypatch):
    """The listing caps a row's products at C's columns: a row of 200 products into 7
    columns is listed in the class of 32 slots, and must not run as a short row (which
    stores its products, not its columns)."""
    monkeypatch.setattr(_hash_rows, "SHORT_SLOTS", 64)
    assert not _hash_rows._is_short(32, 7) and not _hash_rows._is_short(64, 64)
    assert _hash_rows._is_short(64, 65) and not _hash_rows._is_short(128, 1000)
    A = _skewed(500, 400, seed=3)
    B = sp.random(400, n_cols, density=0.5, random_state=4, format="csr")
    _check(_hash_product(A, B, np.float64, index_dtype), A, B, np.float64)


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_entries_that_cancel_stay_and_sums_are_the_same_every_run(index_dtype):
    """Products that cancel leave a stored zero (the pattern of |A| @ |B|); a row's sums
    run in the row's order, so every run gives the same bits."""
    A = sp.csr_matrix(np.array([[1.0, -1.0, 0.5], [0.0, 2.0, 0.0]]))
    B = sp.csr_matrix(np.array([[3.0, 1.0, 0.0], [3.0, 0.0, 1.0], [0.0, 0.0, 4.0]]))
    C = _hash_product(A, B, np.float64, index_dtype)
    _check(C, A, B, np.float64)
    assert C[0, 0] == 0.0 and C.nnz == 5
    rng = np.random.default_rng(5)
    S = sp.random(2000, 2000, density=0.004, random_state=rng, format="csr")
    first = _hash_product(S, S, np.float64, index_dtype)
    assert all(
        np.array_equal(first.data, _hash_product(S, S, np.float64, index_dtype).data)
        for _ in range(3)
    )


@gpu
@pytest.mark.parametrize("passes", ["slotted", "two_passes"])
@pytest.mark.parametrize("listed", [0, 128, 256], ids=lambda s: f"listed{s}")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_short_rows_first_beside_listed_rows(dtype, index_dtype, listed, passes, monkeypatch):
    """Short rows first: the rows of at most SHORT_FIRST_SLOTS products from the fill over
    every row, the others listed by their products (short rows of up to
    SHORT_FIRST_LISTED_SLOTS, slotted or counted, then tables of every size), into C;
    equal to scipy, the budget given back (``_hash_product``)."""
    monkeypatch.setattr(_hash_first, "SHORT_FIRST_LISTED_SLOTS", listed)
    if passes == "two_passes":
        _two_passes(monkeypatch)
    A = _skewed(3000, 2000, seed=1, dtype=dtype)
    B = _skewed(2000, 2500, seed=2, dtype=dtype)
    _check(_hash_product(A, B, dtype, index_dtype, first="short"), A, B, dtype)
    B = sp.random(2000, 7, density=0.5, random_state=4, format="csr").astype(dtype)
    _check(_hash_product(A, B, dtype, index_dtype, first="short"), A, B, dtype)  # 7 columns


def _bounded(n_rows, n_cols, longest, seed, dtype=np.float64):
    """Rows of 0 to ``longest`` entries (every tenth row ``longest``), random values: a
    known longest row, so that short rows first bound every row's products by it."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, longest + 1, n_rows)
    lengths[::10] = longest
    return _rows_of(np.minimum(lengths, n_cols), n_cols, rng, dtype)


def _spy(monkeypatch, name):
    """Calls of the hash rows' function ``name`` (their number), the function still run."""
    calls = []
    module = hash_spgemm.module_of(name)
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


@gpu
@pytest.mark.parametrize(
    "longest", [(10, 10), (14, 14), (22, 22), (73, 7)], ids=lambda t: f"{t[0]}x{t[1]}"
)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_short_rows_first_listed_on_the_device(dtype, longest, monkeypatch):
    """Short rows first where the longest rows bound every row's products by 100, 196,
    484 and 511 (32-bit indices): the rows the first slots leave are listed, counted and
    filled by classes read on the device (no host read of the listing's counts), every
    class up to the bound's; the last with 7 columns (rows of up to 511 products, at most 7
    entries). Equal to scipy's product, the budget given back."""
    a_longest, b_longest = longest
    n_cols = 7 if b_longest == 7 else 1500
    A = _bounded(2000, 1200, a_longest, seed=3, dtype=dtype)
    B = _bounded(1200, n_cols, b_longest, seed=4, dtype=dtype)
    on_device = _spy(monkeypatch, "_listed_on_device")
    read = _spy(monkeypatch, "_classes")
    _check(_hash_product(A, B, dtype, np.int32, first="short"), A, B, dtype)
    assert on_device == [1] and read == []


def test_the_device_listing_launches_the_classes_a_bound_reaches():
    """A class of ``slots`` holds rows of more than ``slots // 2`` products: a bound of 64
    leaves no row past the first slots, 65-128 reaches the class of 128, 129-256 also
    256's, and up to 512 all three; each runs the grid-stride loop's most blocks."""
    assert _hash_first._listed_slots(64) == ()
    assert _hash_first._listed_slots(65) == _hash_first._listed_slots(128) == (128,)
    assert _hash_first._listed_slots(129) == _hash_first._listed_slots(256) == (128, 256)
    assert _hash_first._listed_slots(257) == _hash_first._listed_slots(512) == (128, 256, 512)
    device = _cuda.DeviceInfo(0, "x", (9, 0), 7, 1, 1, 1, 1, 1)
    most = _hash_kernels._grid_of(_hash_kernels.SHORT_BLOCK // 32, 1 << 62, device)
    assert _hash_first._listed_grid(device) == most == _hash_kernels.SHORT_BLOCKS_PER_SM * 7


@gpu
@pytest.mark.parametrize("case", ["int64", "bound 529"])
def test_short_rows_first_list_on_the_host_past_the_device_classes(case, monkeypatch):
    """64-bit indices, or a bound past the largest device class (23 x 23 = 529 > 512): the
    listing is read by the host (short rows, then tables), as before."""
    index_dtype = np.int64 if case == "int64" else np.int32
    longest = 22 if case == "int64" else 23
    A = _bounded(2000, 1200, longest, seed=5)
    B = _bounded(1200, 1500, longest, seed=6)
    on_device = _spy(monkeypatch, "_listed_on_device")
    read = _spy(monkeypatch, "_classes")
    _check(_hash_product(A, B, np.float64, index_dtype, first="short"), A, B, np.float64)
    assert on_device == [] and read == [1]


def _power_rows(n_rows, n_cols, seed, dtype=np.float64, longest=400):
    """Rows of power-law lengths (most of 1 to 3 entries, a few of up to ``longest``) in
    distinct random columns, random values, and every 50th row empty."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(np.floor(1.2 * (1.0 - rng.random(n_rows)) ** (-1 / 1.5)), longest)
    lengths = np.minimum(lengths.astype(np.int64), n_cols)
    lengths[::50] = 0
    return _rows_of(lengths, n_cols, rng, dtype)


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_tiny_rows_first_beside_listed_rows(dtype, index_dtype, monkeypatch):
    """Tiny rows first on power-law rows: the rows of at most TINY_FIRST_SLOTS products a
    thread each from the running count of the entries' products, the others listed by
    their products (short rows, then tables counted in twice their class's slots), into
    C; equal to scipy, the budget given back; with 7 columns too (rows of hundreds of
    products into 7 entries)."""
    offsets = _spy(monkeypatch, "_entry_offsets")
    shifts = []
    count_tables = _hash_rows._count_tables
    monkeypatch.setattr(
        _hash_rows,
        "_count_tables",
        lambda *args: shifts.append(args[-1]) or count_tables(*args),
    )
    A = _power_rows(3000, 2000, seed=1, dtype=dtype)
    B = _power_rows(2000, 2500, seed=2, dtype=dtype)
    products = np.diff(B.indptr)[A.indices]
    per_row = np.add.reduceat(np.r_[products, 0], A.indptr[:-1])[: A.shape[0]]
    per_row[np.diff(A.indptr) == 0] = 0
    slots = _hash_kernels.TINY_FIRST_SLOTS
    assert (per_row <= slots).mean() > 0.5 and per_row.max() > 512  # tiny rows and tables
    _check(_hash_product(A, B, dtype, index_dtype, first="tiny"), A, B, dtype)
    assert offsets == [1] and shifts == [_hash_first.TINY_COUNT_SHIFT]
    B = sp.random(2000, 7, density=0.5, random_state=4, format="csr").astype(dtype)
    _check(_hash_product(A, B, dtype, index_dtype, first="tiny"), A, B, dtype)  # 7 columns


@gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_tiny_rows_at_their_bounds(dtype, index_dtype):
    """Rows of exactly TINY_FIRST_SLOTS products and of one more, columns met again (summed
    in place, one that cancels stored as a zero), rows that select empty rows of B, empty
    rows, and a row of one product: equal to scipy's product, the pattern of |A| @ |B|."""
    slots = _hash_kernels.TINY_FIRST_SLOTS
    rng = np.random.default_rng(7)
    # B's rows: empty, 1, 2, 3, slots - 3, slots, slots + 1 entries, over 12 columns
    b_rows = [[], [5], [5, 9], [0, 5, 11], list(range(slots - 3)), list(range(1, slots + 1))]
    b_rows.append(list(range(slots + 1)))
    a_rows = [
        [6],  # slots + 1 products alone: listed
        [5],  # exactly slots products: tiny
        [1, 2, 3],  # 6 products, columns 5 and 9 met again
        [0, 1, 2, 3, 4],  # (slots - 3) + 6 products: listed, or tiny where slots >= 9
        [0, 1],  # an empty row of B and one product
        [],
        [0],  # only an empty row of B
        [4, 3],  # slots - 3 + 3 products
    ]
    B = sp.csr_matrix(
        (
            rng.uniform(-1, 1, sum(map(len, b_rows))),
            np.concatenate([np.asarray(r, dtype=np.int64) for r in b_rows]),
            np.r_[0, np.cumsum([len(r) for r in b_rows])],
        ),
        shape=(len(b_rows), slots + 4),
    ).astype(dtype)
    A = sp.csr_matrix(
        (
            rng.uniform(-1, 1, sum(map(len, a_rows))),
            np.concatenate([np.asarray(r, dtype=np.int64) for r in a_rows]),
            np.r_[0, np.cumsum([len(r) for r in a_rows])],
        ),
        shape=(len(a_rows), len(b_rows)),
    ).astype(dtype)
    _check(_hash_product(A, B, dtype, index_dtype, first="tiny"), A, B, dtype)
    cancel_a = sp.csr_matrix(np.array([[1.0, -1.0]], dtype=dtype))
    cancel_b = sp.csr_matrix(np.array([[2.0, 1.0, 0.0], [2.0, 0.0, 3.0]], dtype=dtype))
    C = _hash_product(cancel_a, cancel_b, dtype, index_dtype, first="tiny")
    _check(C, cancel_a, cancel_b, dtype)
    assert C.nnz == 3 and C[0, 0] == 0


@gpu
@pytest.mark.parametrize("kind", ["short", "tiny"])
def test_short_rows_first_list_every_row_where_their_slots_do_not_fit(kind, monkeypatch):
    """Where the first slots (a slot of SHORT_FIRST_SLOTS a row, or TINY_FIRST_SLOTS) do
    not fit the budget, every row is listed instead, and nothing of the first try stays
    counted."""
    from sparsegpu.backends.spgemm import DoesNotFit

    first_slots = {"short": _hash_kernels.SHORT_FIRST_SLOTS, "tiny": _hash_kernels.TINY_FIRST_SLOTS}
    slot = 3000 * first_slots[kind]
    real = Budget.empty

    def empty(self, size, dtype, what):
        if size == slot and "short rows' slots" in what:
            raise DoesNotFit(size, 0, what)
        return real(self, size, dtype, what)

    answers = []
    first = _hash_first._short_first_symbolic

    def symbolic(*args):
        answers.append(first(*args))
        return answers[-1]

    monkeypatch.setattr(Budget, "empty", empty)
    monkeypatch.setattr(_hash_first, "_short_first_symbolic", symbolic)
    A = _skewed(3000, 2000, seed=1)
    _check(_hash_product(A, A.T.tocsr(), np.float64, np.int32, first=kind), A, A.T, np.float64)
    assert answers == [None]


@gpu
def test_tiny_rows_first_list_every_row_where_the_entries_products_do_not_fit(monkeypatch):
    """Where the running count of the entries' products does not fit the budget, every
    row is listed instead, and the first slots are given back."""
    from sparsegpu.backends.spgemm import DoesNotFit

    real = Budget.empty

    def empty(self, size, dtype, what):
        if "entries' products" in what:
            raise DoesNotFit(size, 0, what)
        return real(self, size, dtype, what)

    monkeypatch.setattr(Budget, "empty", empty)
    A = _power_rows(3000, 2000, seed=3)
    _check(_hash_product(A, A.T.tocsr(), np.float64, np.int32, first="tiny"), A, A.T, np.float64)


def test_short_rows_are_a_registered_family_of_every_group():
    family = next(f for f in FAMILIES if f.source == _hash_kernels.SHORT_SOURCE)
    names = set(family.instantiations)
    for slots, (lanes, cap) in _hash_kernels.SHORT_GROUPS.items():
        assert cap == slots and lanes in (8, 16, 32)
        assert f"spgemm_short_count<int, {lanes}, {cap}>" in names
        for slotted in ("true", "false"):
            for narrow in ("true", "false"):  # NARROW keys: 32-bit indices only
                assert (
                    f"spgemm_short_fill<double, int, {lanes}, {cap}, {slotted}, {narrow}>" in names
                )
            assert (
                f"spgemm_short_fill<double, long long, {lanes}, {cap}, {slotted}, false>" in names
            )
            assert (
                f"spgemm_short_fill<float, long long, {lanes}, {cap}, {slotted}, true>" not in names
            )
        assert f"spgemm_slot_move<complex64, int, {cap}, 32, true>" in names
    assert _hash_rows.SHORT_SLOTS in (0, *_hash_kernels.SHORT_GROUPS)
    lanes, cap = _hash_kernels.SHORT_GROUPS[_hash_kernels.SHORT_FIRST_SLOTS]
    for narrow in ("true", "false"):
        assert f"spgemm_short_first<complex128, int, {lanes}, {cap}, {narrow}>" in names
    assert f"spgemm_short_first<double, long long, {lanes}, {cap}, false>" in names
    assert f"spgemm_slot_move<float, long long, {cap}, 32, false>" in names
    tiny = _hash_kernels.TINY_FIRST_SLOTS
    for index in ("int", "long long"):
        assert f"spgemm_entry_products<{index}>" in names
        for value in ("float", "double", "complex64", "complex128"):
            assert f"spgemm_tiny_first<{value}, {index}, {tiny}>" in names
            assert f"spgemm_slot_move<{value}, {index}, {tiny}, 1, false>" in names
    for slots, (lanes, cap) in _hash_kernels.LISTED_GROUPS.items():  # 32-bit indices only
        assert cap == slots and lanes == 32
        assert f"spgemm_short_count_listed<int, {lanes}, {cap}>" in names
        assert f"spgemm_short_count_listed<long long, {lanes}, {cap}>" not in names
        for narrow in ("true", "false"):
            assert f"spgemm_short_fill_listed<complex128, int, {lanes}, {cap}, {narrow}>" in names


def test_narrow_keys_leave_the_pad_and_its_column_out():
    """NARROW keys (32-bit: a column above its place among the row's products) where C's
    columns stay below 2^(32 - log2 cap) - 1: no key is the sort's pad (all ones), and no
    column is the pad's; 64-bit indices never."""
    for cap in _hash_kernels.SHORT_GROUPS:
        bits = cap.bit_length() - 1
        limit = (1 << (32 - bits)) - 1
        assert _hash_kernels.narrow_keys(np.int32, limit - 1, cap)
        assert not _hash_kernels.narrow_keys(np.int32, limit, cap)
        assert not _hash_kernels.narrow_keys(np.int64, 10, cap)
        largest = ((limit - 2) << bits) | (cap - 1)  # the last column, the last place
        assert largest < 2**32 - 1 and (limit - 2) != (2**32 - 1) >> bits


def _top_columns(n_rows, n_cols, seed):
    """Rows of 0 to 6 entries among C's last 300 columns (the last one in every tenth)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_rows):
        k = int(rng.integers(0, 7))
        columns = set(rng.choice(300, k, replace=False).tolist())
        if i % 10 == 0:
            columns.add(299)
        rows.append(sorted(columns))
    indptr = np.r_[0, np.cumsum([len(r) for r in rows])]
    indices = np.array([c for r in rows for c in r], dtype=np.int64)
    values = rng.uniform(-1, 1, indices.size)
    compact = sp.csr_matrix((values, indices, indptr), shape=(n_rows, 300))
    wide = sp.csr_matrix((values, indices + (n_cols - 300), indptr), shape=(n_rows, n_cols))
    return compact, wide


@gpu
@pytest.mark.parametrize("first", ["listed", "short"])
@pytest.mark.parametrize(
    "n_cols", [2**24 - 2, 2**24 - 1, 2**25 - 1, 2**26 - 2, 2**26 - 1, 2**26 + 5]
)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_short_rows_at_the_narrow_keys_bounds(index_dtype, n_cols, first, monkeypatch):
    """C's columns just within and just past each short class's NARROW bound, B's entries
    in C's last 300 columns (the last one among them): rows of every short class (and
    tables) equal scipy's product, which is computed on the 300 columns and moved up."""
    monkeypatch.setattr(_hash_first, "SHORT_FIRST_LISTED_SLOTS", 256)
    A = _skewed(600, 400, seed=7)
    compact, wide = _top_columns(400, n_cols, seed=8)
    C = _hash_product(A, wide, np.float64, index_dtype, first=first)
    expected = (A @ compact).tocsr()
    pattern = abs(A) @ abs(compact)
    pattern.sum_duplicates()
    assert C.shape == (600, n_cols) and C.nnz == pattern.nnz
    assert np.array_equal(C.indptr, pattern.indptr)
    assert np.array_equal(C.indices.astype(np.int64) - (n_cols - 300), pattern.indices)
    moved = sp.csr_matrix((C.data, C.indices.astype(np.int64) - (n_cols - 300), C.indptr))
    assert abs(moved - expected).max() <= 1e-12 * max(abs(expected).max(), 1.0) * 300
