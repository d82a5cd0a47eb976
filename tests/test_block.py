"""The ``block`` backend: the BSR plan of device arrays, blocks found in CSR matrices, the
layout built from a mirror, planning's refusal and ``explain``. The awkward matrices of
every product form run on it in test_products (named, it takes any matrix)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.backends import block
from sparsegpu.backends._block_structure import (
    DETECTED_SIZES,
    MAX_BYTE_RATIO,
    BlockLayout,
    block_layout,
    block_structure,
    host_block_structure,
    min_fill,
)
from sparsegpu.backends.block import BLOCK_DIMENSIONS, FAMILY, BlockPolicy, block_plan
from sparsegpu.datasets import block_mesh
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import CUPY, HOST, DeviceMatrix
from sparsegpu.engine import _registry
from sparsegpu.testing import (
    INDEX_DTYPES,
    VALUE_DTYPES,
    assert_product_close,
    awkward_matrices,
    no_gpu_reason,
    random_vector,
)

DTYPE_IDS = [np.dtype(d).name for d in VALUE_DTYPES]
INDEX_IDS = [np.dtype(d).name for d in INDEX_DTYPES]
AWKWARD = list(awkward_matrices())
# square and rectangular, the smallest and the largest the kernel takes
BLOCK_SHAPES = [(1, 1), (2, 2), (3, 3), (2, 3), (3, 2), (4, 4), (6, 6), (1, 8), (8, 1), (5, 7)]


def _gpu():
    if _cuda.unavailable_reason() is not None:
        pytest.skip(no_gpu_reason())
    return _cuda.cupy_or_none()


def _mirror(S, residence):
    S = S.tocsr()
    return DeviceMatrix.from_host(S.data, S.indices, S.indptr, S.shape, residence)


def random_bsr(shape_in_blocks, blocksize, dtype, index_dtype, seed, trim=(0, 0)):
    """A seeded scipy BSR matrix with empty block rows, a long block row and random block
    columns; ``trim`` rows and columns cut from its shape (the last blocks padded)."""
    rng = np.random.default_rng(seed)
    n_block_rows, n_block_cols = shape_in_blocks
    lengths = rng.integers(0, 5, n_block_rows)
    lengths[rng.random(n_block_rows) < 0.3] = 0
    if n_block_rows > 3:
        lengths[3] = n_block_cols  # a block row with a block in every block column
    lengths = np.minimum(lengths, n_block_cols)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(index_dtype)
    indices = np.concatenate(
        [np.sort(rng.choice(n_block_cols, k, replace=False)) for k in lengths] or [[]]
    ).astype(index_dtype)
    R, C = blocksize
    values = rng.uniform(-1, 1, (indices.size, R, C))
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-1, 1, values.shape)
    full = (n_block_rows * R, n_block_cols * C)
    B = sp.bsr_matrix((values.astype(dtype), indices, indptr), shape=full)
    return B, (full[0] - trim[0], full[1] - trim[1])


def _padding(blocksize, padded: bool) -> tuple[int, int]:
    """Rows and columns to cut from the last blocks: all but one of each (the most
    padding a BSR shape can have), or none."""
    return (blocksize[0] - 1, blocksize[1] - 1) if padded else (0, 0)


# ------------------------------------------------------------------------------ CPU
def test_policy_validates():
    assert BlockPolicy(128, 4).threads_per_block_row == 4
    with pytest.raises(ValueError, match="threads_per_block_row=3"):
        BlockPolicy(256, 3)
    with pytest.raises(ValueError, match="block_size=100"):
        BlockPolicy(100, 4)
    with pytest.raises(ValueError, match="up to 512"):
        BlockPolicy(1024, 32)
    with pytest.raises(ValueError, match="unroll=3"):
        BlockPolicy(256, 32, unroll=3)
    with pytest.raises(ValueError, match="max_registers=16"):
        BlockPolicy(256, 32, max_registers=16)
    with pytest.raises(ValueError, match="whole_blocks=1"):
        BlockPolicy(256, 8, whole_blocks=1)
    with pytest.raises(ValueError, match="cache_blocks='yes'"):
        BlockPolicy(256, 8, whole_blocks=True, cache_blocks="yes")
    with pytest.raises(ValueError, match="cache_blocks=True is not allowed with whole_blocks"):
        BlockPolicy(256, 8, cache_blocks=True)
    assert BlockPolicy(256, 8, whole_blocks=True, cache_blocks=True).compile_options() == (
        "-DSPARSEGPU_BLOCK_CACHED",
    )
    assert BlockPolicy(256, 32).compile_options() == ()
    assert BlockPolicy(256, 32, 8, 48).compile_options() == (
        "-DSPARSEGPU_UNROLL=8",
        "-DSPARSEGPU_MAX_REGISTERS=48",
    )
    assert "BlockPolicy" in sg.tuning.__all__


@pytest.mark.parametrize(
    ("blocksize", "slots", "widths", "group_for_27_blocks"),
    [((1, 1), 1, (8, 16, 32), 32), ((2, 2), 1, (8, 16, 32), 16), ((3, 3), 2, (8, 16, 32), 32),
     ((2, 3), 3, (8, 16, 32), 8), ((6, 6), 4, (16, 32), 32), ((8, 8), 2, (32,), 32)],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v),
)  # fmt: skip
def test_tiles_of_whole_blocks(blocksize, slots, widths, group_for_27_blocks):
    """Positions per lane (the kernel's block_slots, same rule), the lanes per block row a
    shape takes, and the untuned choice for a 3-D mesh's 27 blocks per block row."""
    assert block.slots_per_lane(*blocksize) == slots
    assert block.group_widths(*blocksize) == widths
    assert block.default_group(*blocksize, 27) == group_for_27_blocks


def test_every_block_shape_is_registered():
    """tools/check_kernels.py compiles every instantiation: each shape, dtype, index dtype."""
    names = set(FAMILY.instantiations)
    for R in BLOCK_DIMENSIONS:
        for C in BLOCK_DIMENSIONS:
            for group in block.group_widths(R, C):
                assert block.kernel_name(np.complex128, np.int64, R, C, group) in names
    assert "block_spmv<double, int, 3, 3, 32>" in names
    assert "block_count<int>" in names and "block_count<long long>" in names
    assert not block.supports_blocksize(9, 3) and block.supports_blocksize(8, 1)


def test_whole_block_kernels_take_four_values_a_block():
    names = set(FAMILY.instantiations)
    for R, C in [(2, 2), (1, 4), (4, 1), (3, 3)]:
        assert block.takes_whole_blocks(R, C)
        for group in (1, 2, 4, 8, 16, 32):
            name = block.kernel_name(np.complex64, np.int32, R, C, group, whole=True)
            assert name in names and name.startswith("block_spmv_whole<")
    assert not block.takes_whole_blocks(2, 3) and not block.takes_whole_blocks(2, 1)
    assert "block_spmv_whole<double, int, 6, 6, 8>" not in names
    # lanes for one trip of 4 blocks each: 27 blocks (3-D mesh) 8, 9 (2-D) 4, 1 block 1
    assert [block.whole_group(m) for m in (27, 9, 1, 0, 500)] == [8, 4, 1, 1, 32]
    assert block.whole_group(27, unroll=8) == 4
    # blocks in flight: 256 bytes of values and x entries at most
    assert block.whole_in_flight(2, 2, 8) == 4 and block.whole_in_flight(3, 3, 8) == 2
    assert block.whole_in_flight(2, 2, 16) == 2 and block.whole_in_flight(2, 2, 4, unroll=8) == 8


def test_whole_blocks_refused_where_the_kernel_cannot_read_them():
    class Data:  # a layout's values: only the shape, dtype and address are read
        def __init__(self, blocksize, ptr):
            self.shape = (4, *blocksize)
            self.dtype = np.dtype(np.float64)
            self.data = type("Pointer", (), {"ptr": ptr})()

    def layout(blocksize, ptr=4096):
        R, C = blocksize
        return BlockLayout(None, None, Data(blocksize, ptr), (R * 4, C * 4))

    block._check_whole_blocks(layout((2, 2)))
    block._check_whole_blocks(layout((3, 3), ptr=4096 + 8))  # 72-byte blocks: 8-byte loads
    with pytest.raises(ValueError, match="blocks of 2x2, 1x4, 4x1, 3x3, not 2x3"):
        block._check_whole_blocks(layout((2, 3)))
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        block._check_whole_blocks(layout((2, 2), ptr=4096 + 8))
    with pytest.raises(ValueError, match="multiple of 8 bytes"):
        block._check_whole_blocks(layout((3, 3), ptr=4096 + 4))


def test_min_fill_is_where_the_layout_reads_the_byte_ratio():
    # 3x3 float64 int32: (72 + 4) / (9 * 0.9 * 12) = 0.78
    assert min_fill(3, 8, 4) == pytest.approx(76 / (9 * MAX_BYTE_RATIO * 12))
    assert min_fill(3, 4, 4) < min_fill(3, 8, 4) < min_fill(2, 8, 4)


@pytest.mark.parametrize("unknowns", [2, 3, 6])
@pytest.mark.parametrize("node_order", ["natural", "random"])
def test_mesh_blocks_are_found_full(unknowns, node_order):
    A = block_mesh(4, unknowns, node_order=node_order, seed=3)
    structure = host_block_structure(A)
    assert structure.size == unknowns
    assert structure.fill(unknowns) == 1.0
    assert structure.refuse_reason() is None
    assert f"{unknowns}x{unknowns} blocks, fill 100%" in str(structure)
    # a matrix with the same rows numbered at random loses its blocks
    scattered = host_block_structure(sg.datasets.permuted(A, seed=4))
    assert scattered.fill(scattered.size) < 0.5
    reason = scattered.refuse_reason()
    assert f"needs a fill of {min_fill(scattered.size, 8, 4):.0%}" in reason
    assert f"fill {scattered.fill(scattered.size):.0%}" in reason


def test_mesh_matches_scipy_bsr():
    """block_mesh's blocks are exactly those of scipy's BSR conversion of it."""
    A = block_mesh(3, 3, dimensions=2, seed=1)
    B = sp.bsr_matrix(A, blocksize=(3, 3))
    # 3x3 nodes, 9-point: 4 corners of 4 neighbours, 4 edges of 6, a centre of 9
    assert B.data.shape[0] * 9 == A.nnz == (4 * 4 + 4 * 6 + 9) * 9
    x = random_vector(A.shape[1], np.float64, 1)
    np.testing.assert_allclose(A @ x, B @ x, rtol=1e-12)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("matrix_name", AWKWARD)
def test_layout_from_a_host_mirror_holds_the_matrix(matrix_name, value_dtype, index_dtype):
    """The layout built from a mirror (here on the host: the same array code as on the
    GPU) is the matrix padded to whole blocks: duplicates summed, unsorted rows placed."""
    S = awkward_matrices(value_dtype, index_dtype, seed=2)[matrix_name]
    mirror = _mirror(S, HOST)
    x = random_vector(S.shape[1], value_dtype, 5)
    for b in DETECTED_SIZES:
        layout = block_layout(mirror, b)
        padded = (-(-S.shape[0] // b) * b, -(-S.shape[1] // b) * b)
        B = sp.bsr_matrix((layout.data, layout.indices, layout.indptr), shape=padded)
        assert layout.data.shape[0] == host_block_structure(S).blocks[b]
        y = B @ np.concatenate([x, np.zeros(padded[1] - S.shape[1], x.dtype)])
        expected = S @ x
        assert_product_close(y[: S.shape[0]], expected, expected.dtype, 64, what=f"b={b}")


def test_backend_unavailable_without_gpu_says_why():
    status = {b.name: b for b in sg.backends()}["block"]
    if _cuda.unavailable_reason() is not None:
        assert not status.available and status.reason


# ------------------------------------------------------------------------------ GPU
@pytest.mark.parametrize("blocksize", BLOCK_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    ("blocks", "padded"),
    [((40, 30), False), ((40, 30), True), ((1, 50), False), ((60, 1), False),
     ((7, 7), False), ((0, 3), False)],
    ids=["40x30", "40x30_padded", "one_block_row", "one_block_column", "7x7", "no_rows"],
)  # fmt: skip
def test_block_plan_matches_scipy(blocks, padded, value_dtype, index_dtype, blocksize):
    cupy = _gpu()
    trim = _padding(blocksize, padded)
    B, shape = random_bsr(
        blocks, blocksize, value_dtype, index_dtype, seed=sum(blocksize), trim=trim
    )
    plan = block_plan(cupy.asarray(B.indptr), cupy.asarray(B.indices), cupy.asarray(B.data), shape)
    S = B.tocsr()[: shape[0], : shape[1]]
    x = random_vector(shape[1], value_dtype, 1)
    expected = S @ x
    y = plan.matvec(cupy.asarray(x))
    assert_product_close(y, expected, expected.dtype, max(blocks[1], 1) * blocksize[1])
    X = np.stack([random_vector(shape[1], value_dtype, s) for s in (2, 3)], axis=1)
    Y = plan.matmat(cupy.asarray(X))
    assert_product_close(Y, S @ X, expected.dtype, max(blocks[1], 1) * blocksize[1])


@pytest.mark.parametrize(
    "policy",
    [BlockPolicy(128, 8), BlockPolicy(128, 16, unroll=2), BlockPolicy(256, 32, unroll=8),
     BlockPolicy(64, 16, max_registers=40)],
    ids=["8_lanes", "16_lanes_unroll2", "32_lanes_unroll8", "capped_40"],
)  # fmt: skip
def test_block_plan_every_knob(policy):
    cupy = _gpu()
    B, shape = random_bsr((50, 40), (3, 3), np.float64, np.int32, seed=9)
    plan = block_plan(
        cupy.asarray(B.indptr), cupy.asarray(B.indices), cupy.asarray(B.data), shape, policy
    )
    x = random_vector(shape[1], np.float64, 1)
    assert_product_close(plan.matvec(cupy.asarray(x)), B @ x, np.float64, 120)


@pytest.mark.parametrize(
    "blocksize", [(2, 2), (1, 4), (4, 1), (3, 3)], ids=lambda s: f"{s[0]}x{s[1]}"
)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "policy",
    [BlockPolicy(128, 4, whole_blocks=True), BlockPolicy(256, 1, unroll=8, whole_blocks=True),
     BlockPolicy(64, 32, unroll=2, whole_blocks=True),
     BlockPolicy(128, 8, whole_blocks=True, cache_blocks=True)],
    ids=["4_lanes", "1_lane_unroll8", "32_lanes_unroll2", "8_lanes_cached"],
)  # fmt: skip
@pytest.mark.parametrize(
    ("blocks", "padded"), [((40, 30), False), ((40, 30), True), ((7, 60), False)],
    ids=["40x30", "40x30_padded", "7x60"],
)  # fmt: skip
def test_whole_blocks_match_scipy(blocks, padded, policy, value_dtype, index_dtype, blocksize):
    """Whole blocks per lane: every lane count, rows longer and shorter than a trip, rows
    and columns of the last blocks past the shape."""
    cupy = _gpu()
    trim = _padding(blocksize, padded)
    B, shape = random_bsr(blocks, blocksize, value_dtype, index_dtype, seed=11, trim=trim)
    plan = block_plan(
        cupy.asarray(B.indptr), cupy.asarray(B.indices), cupy.asarray(B.data), shape, policy
    )
    S = B.tocsr()[: shape[0], : shape[1]]
    x = random_vector(shape[1], value_dtype, 1)
    expected = S @ x
    width = max(blocks[1], 1) * blocksize[1]
    assert_product_close(plan.matvec(cupy.asarray(x)), expected, expected.dtype, width)


def test_whole_blocks_on_a_csr_matrix_through_the_backend():
    """``A.policy`` with whole blocks on a CSR matrix of 2 x 2 blocks (the layout the
    backend builds), and planning timing the whole-block candidate."""
    cupy = _gpu()
    S = block_mesh(7, 2, seed=3, node_order="random")
    A = sg.csr_matrix(S)
    x = random_vector(S.shape[1], np.float64, 2)
    policy = BlockPolicy(128, 8, whole_blocks=True)
    y = sg.matvec(A, cupy.asarray(x), backend="block", policy=policy)
    assert_product_close(y, S @ x, np.float64, 54)
    choice = sg.choose(A, cupy.asarray(x))
    timed = [m.policy for m in choice.measurements if m.backend == "block"]
    assert any(p.whole_blocks for p in timed) and any(not p.whole_blocks for p in timed)
    with pytest.raises(ValueError, match="not 6x6"):
        sg.matvec(sg.csr_matrix(block_mesh(3, 6)), cupy.zeros(162), backend="block", policy=policy)
    # 3 x 3 blocks too: whole blocks untuned, the tiles' untuned policy timed beside them
    A3 = sg.csr_matrix(block_mesh(7, 3, seed=3))
    choice = sg.choose(A3, cupy.asarray(random_vector(A3.shape[1], np.float64, 2)))
    timed = [m.policy for m in choice.measurements if m.backend == "block"]
    assert timed[0].whole_blocks and any(not p.whole_blocks for p in timed)
    assert len({p.threads_per_block_row for p in timed if p.whole_blocks}) >= 2
    # blocks of several loads a lane are also read through L1; a 2 x 2 float32 block is
    # one 16-byte load, read evict-first only
    assert {p.cache_blocks for p in timed if p.whole_blocks} == {False, True}
    A2 = sg.csr_matrix(block_mesh(7, 2, seed=3).astype(np.float32))
    choice = sg.choose(A2, cupy.asarray(random_vector(A2.shape[1], np.float32, 2)))
    timed = [m.policy for m in choice.measurements if m.backend == "block"]
    assert any(p.whole_blocks for p in timed) and not any(p.cache_blocks for p in timed)


def test_a_policy_fits_only_blocks_it_can_read():
    """What planning asks before it reuses a policy measured on another matrix."""
    _gpu()
    backend = _registry.registered()["block"]
    whole, tiles8 = BlockPolicy(128, 8, whole_blocks=True), BlockPolicy(128, 8)
    for blocksize, fits in [((1, 1), (False, True)), ((2, 2), (True, True)),
                            ((3, 3), (True, True)), ((6, 6), (False, False))]:  # fmt: skip
        B, shape = random_bsr((6, 5), blocksize, np.float64, np.int32, seed=2)
        mirror = sg.bsr_matrix(B)._sg_mirror(CUPY, np.dtype(np.float64))
        assert (backend.policy_fits(mirror, whole), backend.policy_fits(mirror, tiles8)) == fits


def test_whole_blocks_are_the_untuned_policy_where_the_values_are_aligned():
    cupy = _gpu()
    B, shape = random_bsr((30, 20), (2, 2), np.float32, np.int32, seed=4)
    indptr, indices = cupy.asarray(B.indptr), cupy.asarray(B.indices)
    plan = block_plan(indptr, indices, cupy.asarray(B.data), shape)
    assert plan.policy.whole_blocks
    # the same values one float past an aligned address: the vector loads cannot read them
    raw = cupy.empty(B.data.size + 1, dtype=np.float32)
    raw[1:] = cupy.asarray(B.data.ravel())
    shifted = raw[1:].reshape(B.data.shape)
    plan = block_plan(indptr, indices, shifted, shape)
    assert not plan.policy.whole_blocks
    x = random_vector(shape[1], np.float32, 1)
    assert_product_close(plan.matvec(cupy.asarray(x)), B @ x, np.float32, 40)
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        block_plan(indptr, indices, shifted, shape, BlockPolicy(128, 4, whole_blocks=True))
    backend = _registry.registered()["block"]
    mirror = sg.csr_matrix(block_mesh(5, 2, seed=1))._sg_mirror(CUPY, np.dtype(np.float64))
    untuned = backend.default_policy(mirror)
    n_blocks, n_block_rows, _ = backend._blocks_and_block_rows(mirror)
    assert untuned.whole_blocks
    assert untuned.threads_per_block_row == block.whole_group(n_blocks / n_block_rows)


def test_block_plan_refuses_bad_arrays():
    cupy = _gpu()
    B, shape = random_bsr((6, 5), (2, 2), np.float64, np.int32, seed=1)
    indptr, indices, data = (cupy.asarray(a) for a in (B.indptr, B.indices, B.data))
    bad = indices.copy()
    bad[0] = 5
    with pytest.raises(ValueError, match="block column 5 is out of range"):
        block_plan(indptr, bad, data, shape)
    with pytest.raises(ValueError, match="indptr has shape"):
        block_plan(indptr[:-1], indices, data, shape)
    backwards = indptr.copy()
    backwards[2] = int(indptr[3]) + 1  # block row 2 ends before it starts
    with pytest.raises(ValueError, match="non-decreasing"):
        block_plan(backwards, indices, data, shape)
    with pytest.raises(TypeError, match="1..8"):
        block_plan(indptr, indices, cupy.zeros((data.shape[0], 9, 9)), (54, 45))
    with pytest.raises(TypeError, match="share one dtype"):
        block_plan(indptr.astype(np.int64), indices, data, shape)
    with pytest.raises(ValueError, match="shape"):
        plan = block_plan(indptr, indices, data, shape)
        plan.matvec(cupy.zeros(shape[1] + 1))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=INDEX_IDS)
@pytest.mark.parametrize("matrix_name", AWKWARD + ["mesh_2", "mesh_3_random", "mesh_6"])
def test_device_block_counts_match_host(matrix_name, index_dtype):
    """The counting kernel (unsorted rows sorted first, duplicates counted once) against
    numpy's unique."""
    _gpu()
    if matrix_name.startswith("mesh"):
        _, unknowns, *order = matrix_name.split("_")
        S = block_mesh(4, int(unknowns), node_order=order[0] if order else "natural")
        S = sp.csr_matrix((S.data, S.indices.astype(index_dtype), S.indptr.astype(index_dtype)))
    else:
        S = awkward_matrices(np.float64, index_dtype, seed=4)[matrix_name]
    device = block_structure(_mirror(S, CUPY))
    assert device.blocks == host_block_structure(S).blocks


@pytest.mark.parametrize("value_dtype", VALUE_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("unknowns", [2, 3, 6])
def test_auto_finds_and_times_the_block_layout(unknowns, value_dtype):
    _gpu()
    import cupy

    S = block_mesh(6, unknowns, dtype=value_dtype, seed=unknowns)
    A = sg.csr_matrix(S)
    x = random_vector(S.shape[1], value_dtype, 3)
    choice = sg.choose(A, cupy.asarray(x))
    assert "block" in {m.backend for m in choice.measurements}
    assert any(f"block: {unknowns}x{unknowns} blocks, fill 100%" in n for n in choice.structure)
    text = str(sg.explain(A))
    assert f"{unknowns}x{unknowns} blocks, fill 100%" in text
    with sg.use_backend("block"):
        assert_product_close(A @ x, S @ x, S.dtype, 27 * unknowns)


def test_auto_leaves_low_fill_out_and_says_why():
    _gpu()
    import cupy

    S = sg.datasets.permuted(block_mesh(6, 3, seed=1), seed=2)
    A = sg.csr_matrix(S)
    choice = sg.choose(A, cupy.asarray(random_vector(S.shape[1], np.float64, 3)))
    assert "block" not in {m.backend for m in choice.measurements}
    (note,) = [n for n in choice.structure if n.startswith("block:")]
    structure = host_block_structure(S)
    assert "not timed" in note
    assert f"needs a fill of {min_fill(structure.size, 8, 4):.0%}" in note
    assert f"fill {structure.fill(structure.size):.0%}" in note


def test_info_reports_block_size_and_fill(tmp_path, capsys):
    import json

    from sparsegpu.cli import main

    path = tmp_path / "mesh.mtx"
    sg.io.mmwrite(path, block_mesh(3, 3, seed=2))
    assert main(["info", "--json", str(path), "bcsstk13"]) == 0
    mesh, bcsstk13 = (d["blocks"] for d in json.loads(capsys.readouterr().out))
    assert (mesh["size"], mesh["fill"], mesh["planning_refusal"]) == (3, 1.0, None)
    assert bcsstk13["size"] == 2 and bcsstk13["fill"] == pytest.approx(0.62, abs=0.01)
    assert "needs a fill of" in bcsstk13["planning_refusal"]
    assert main(["info", str(path)]) == 0
    assert "3x3, fill 100%" in capsys.readouterr().out
