"""The CSR vector kernel family and the software-cache kernel: kernel-specific checks.

The generic product suite covers every registered backend x dtype x awkward matrix; here:
every threads_per_row of every variant on the awkward matrices, the texture size limit,
grid-stride launches beyond 2^31 threads, a matrix of 50 million nonzeros, the bundled
SuiteSparse matrices, policy validation, and the registry of instantiations (CPU).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu import datasets
from sparsegpu.backends import csr_vector, swcache
from sparsegpu.backends.csr_vector import CsrVectorPolicy
from sparsegpu.backends.policy import THREADS_PER_ROW_CHOICES
from sparsegpu.backends.swcache import SoftwareCachePolicy
from sparsegpu.device import _compile
from sparsegpu.device import _occupancy as occupancy
from sparsegpu.device._dtypes import HALF_DTYPES
from sparsegpu.device._launch import CXX_INDEX_TYPES, CXX_VALUE_TYPES, name_expression
from sparsegpu.engine import _planning, _registry
from sparsegpu.linalg._vector import (
    LSQR_STATE,
    MINRES_ROTATE_STATE,
    STEP_SOURCES,
    STEPS,
    VectorOps,
    parameter_names,
    steps_of,
)
from sparsegpu.testing import assert_product_close, awkward_matrices, random_vector

KERNEL_BACKENDS = ("vector", "texture", "readonly", "shuffle", "swcache")
DTYPE_PAIRS = [
    pytest.param((np.float64, np.int32), id="float64-int32"),
    pytest.param((np.complex64, np.int64), id="complex64-int64"),
]
AWKWARD_NAMES = list(awkward_matrices())
BUNDLED = datasets.names()


def policy_for(backend_name: str, threads_per_row: int, block_size: int = 128):
    if backend_name == "swcache":
        return SoftwareCachePolicy(block_size, threads_per_row, line_size=32, num_lines=4)
    return CsrVectorPolicy(block_size, threads_per_row)


def check_product(A, backend_name, policy, cupy, seed=0):
    """A @ x on the GPU (cupy x) against scipy on the host."""
    x = random_vector(A.shape[1], A.dtype, seed=seed)
    expected = sp.csr_matrix(A) @ x
    got = sg.matvec(sg.csr_matrix(A), cupy.asarray(x), backend=backend_name, policy=policy)
    max_row = int(np.diff(A.indptr).max()) if A.shape[0] else 1
    assert_product_close(got, expected, A.dtype, max_row, what=f"{backend_name} {policy}")


# ------------------------------------------------------------------------- CPU checks
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_backend_is_registered(backend_name):
    assert backend_name in _registry.registered()


def test_every_backend_variant_is_an_instantiation():
    names = set(csr_vector.FAMILY.instantiations)
    for backend in csr_vector.BACKENDS:
        for value in CXX_VALUE_TYPES:
            for index in CXX_INDEX_TYPES:
                for threads in THREADS_PER_ROW_CHOICES:
                    expr = csr_vector.kernel_name(
                        value, index, threads, backend.load_path, backend.reduction
                    )
                    assert expr in names


def test_every_backend_that_takes_16_bit_values_has_their_instantiations():
    names = set(csr_vector.FAMILY.instantiations)
    for backend in csr_vector.BACKENDS:
        for value in HALF_DTYPES:
            expr = csr_vector.kernel_name(value, np.int32, 4, backend.load_path, backend.reduction)
            assert (expr in names) == (value in backend.value_dtypes), expr
    # the texture member has no 16-bit channel: it refuses them
    assert np.dtype(np.float16) not in _registry.registered()["texture"].value_dtypes
    assert np.dtype(np.float16) in _registry.registered()["shuffle"].value_dtypes


@pytest.mark.parametrize("source", ["csr_vector.cu", "delta16.cu", "merge_path.cu"])
def test_inlined_source_holds_each_header_once(source):
    """NVRTC sees one text: a header included twice (row_groups.cuh and half.cuh both
    include common.cuh) is inlined once, as its #pragma once asks."""
    text = _compile.source_text(source)
    assert text.count("struct __align__(8) complex64 {") == 1
    assert '#include "' not in text


@pytest.mark.parametrize("family", ["csr_vector.cu", "swcache.cu"])
def test_family_is_registered_once_without_duplicates(family):
    found = [f for f in _compile.FAMILIES if f.source == family]
    assert len(found) == 1
    assert len(set(found[0].instantiations)) == len(found[0].instantiations)
    assert (_compile.kernel_dir() / family).is_file()


def test_kernel_name_spelling():
    expected = "csr_vector<double, int, 8, 2, 1>"
    assert csr_vector.kernel_name(np.float64, np.int32, 8, 2, 1) == expected
    assert (
        swcache.kernel_name(np.complex128, np.int64, 32) == "csr_swcache<complex128, long long, 32>"
    )
    assert name_expression("gather", np.float32) == "gather<float>"


@pytest.mark.parametrize(
    ("mean", "expected"),
    [(0.0, 1), (1.0, 1), (3.9, 1), (4.0, 2), (5.0, 2), (16.0, 8), (26.0, 8), (64.0, 32), (5e3, 32)],
)
def test_threads_per_row_from_mean_row_length(mean, expected):
    assert occupancy.threads_per_row_for(mean) == expected


@pytest.mark.parametrize(
    ("threads", "expected"), [(1, [1, 2]), (2, [1, 2, 4]), (8, [4, 8, 16]), (32, [16, 32])]
)
def test_nearby_threads_per_row(threads, expected):
    assert csr_vector.nearby_threads_per_row(threads) == expected


def test_swcache_shared_bytes_per_warp():
    # 256 threads = 8 warps, each 4 lines of 32 doubles plus a tag of 8 bytes per line
    assert swcache.shared_bytes(256, 32, 4, np.float64) == 8 * 4 * (32 * 8 + 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threads_per_row": 3}, "threads_per_row=3"),
        ({"threads_per_row": 64}, "threads_per_row=64"),
        ({"block_size": 100}, "block_size=100"),
        ({"block_size": 2048}, "block_size=2048"),
        ({"block_size": 16}, "block_size=16"),
        ({"max_registers": 8}, "max_registers=8"),
        ({"max_registers": 300}, "max_registers=300"),
        ({"max_registers": 40.0}, "max_registers=40.0"),
    ],
)
def test_csr_vector_policy_rejects_bad_knobs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CsrVectorPolicy(**kwargs)


def test_csr_vector_policy_rejects_non_int_block_size():
    with pytest.raises(TypeError, match="block_size must be an int"):
        CsrVectorPolicy(block_size=256.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"line_size": 3}, "line_size=3"),
        ({"line_size": 4096}, "line_size=4096"),
        ({"num_lines": 3}, "num_lines=3"),
        ({"num_lines": 0}, "num_lines=0"),
    ],
)
def test_software_cache_policy_rejects_bad_knobs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SoftwareCachePolicy(**kwargs)


@pytest.mark.gpu
def test_wrong_policy_type_is_a_type_error(cupy):
    A = sg.csr_matrix(sp.eye(3))
    backend = _registry.registered()["swcache"]
    with pytest.raises(TypeError, match="SoftwareCachePolicy"):
        _planning.plan_for(A, np.float64, backend=backend.name, policy=CsrVectorPolicy())


def test_check_kernels_parses_ptxas_and_flags_spills():
    from .scripts import load_script

    module = load_script(Path("tools") / "check_kernels.py")
    log = (
        "ptxas info    : Compiling entry function '_Z1aIdEvv' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1aIdEvv\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 0 barriers\n"
        "ptxas info    : Compiling entry function '_Z1bIdEvv' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1bIdEvv\n"
        "    40 bytes stack frame, 64 bytes spill stores, 68 bytes spill loads\n"
        "ptxas info    : Used 32 registers, used 0 barriers\n"
    )
    assert module.parse_ptxas(log) == [("_Z1aIdEvv", 40, 0, 0), ("_Z1bIdEvv", 32, 64, 68)]
    unit = module.translation_unit(Path("k.cu"), ["k<double, int, 8>"])
    assert '#include "k.cu"' in unit and "(void*)&k<double, int, 8>" in unit


def test_check_kernels_compiles_every_elementwise_source():
    """The solvers' fused CuPy kernels are compiled by the CI check too (issue 33: none
    of them was): one unit per value type holds every source that runs on it."""
    from sparsegpu.device import _compile

    from .scripts import load_script

    module = load_script(Path("tools") / "check_kernels.py")
    jobs = module.elementwise_jobs()
    registered = module.elementwise_sources()
    assert [label for label, _, _ in jobs] == [
        "elementwise<float>",
        "elementwise<double>",
        "elementwise<thrust::complex<float>>",
        "elementwise<thrust::complex<double>>",
    ]
    assert len(registered) == len(_compile.ELEMENTWISE)
    assert {source.name for source in STEP_SOURCES.values()} <= {s.name for _, s in registered}
    for label, unit, count in jobs:
        kind = "c" if "complex" in label else "f"
        names = {source.name for kinds, source in registered if kind in kinds}
        assert count == len(names) and all(f"void {name}(" in unit for name in names)


def test_every_solver_step_is_its_device_function():
    """Each fused step is read from its device function in ``kernels/solver_steps.cu``
    (references are outputs), runs as one call of it, and has a NumPy twin of its name."""
    assert len(STEPS) == 22
    assert STEPS["keep"] == ("T rho, bool active", "T rho_prev, int64 count")
    assert STEPS["lsqr_update"][1] == "T w, T x, V var"
    rotate, recurrences = STEPS["minres_rotate"][1], STEPS["lsqr_recurrences"][1]
    assert parameter_names(rotate)[: len(MINRES_ROTATE_STATE)] == list(MINRES_ROTATE_STATE)
    assert parameter_names(recurrences)[: len(LSQR_STATE)] == list(LSQR_STATE)
    for name, (inputs, outputs) in STEPS.items():
        arguments = ", ".join(parameter_names(inputs) + parameter_names(outputs))
        assert STEP_SOURCES[name].operation == f"solver_steps::{name}({arguments})"
        assert callable(getattr(VectorOps, name)), f"{name} has no NumPy twin"


def test_a_step_taking_an_input_after_its_outputs_is_refused():
    text = "template <typename T>\n__device__ void bad(T a, T& y, double b) {}"
    with pytest.raises(ValueError, match="bad takes input b after outputs"):
        steps_of(text)


def test_every_bundled_matrix_is_tested():
    assert len(BUNDLED) >= 15


# ------------------------------------------------------------------------- GPU checks
@pytest.mark.gpu
@pytest.mark.parametrize("matrix_name", AWKWARD_NAMES)
@pytest.mark.parametrize("threads_per_row", THREADS_PER_ROW_CHOICES)
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
@pytest.mark.parametrize("dtypes", DTYPE_PAIRS)
def test_every_variant_on_awkward_matrices(
    cupy, dtypes, backend_name, threads_per_row, matrix_name
):
    dtype, index_dtype = dtypes
    A = awkward_matrices(dtype, index_dtype, seed=1)[matrix_name]
    check_product(A, backend_name, policy_for(backend_name, threads_per_row), cupy)


@pytest.mark.gpu
@pytest.mark.parametrize("block_size", [32, 64, 1024])
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_block_sizes(cupy, backend_name, block_size):
    A = awkward_matrices(np.float32, np.int32, seed=2)["power_law"]
    check_product(A, backend_name, policy_for(backend_name, 4, block_size), cupy)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("line_size", "num_lines"), [(8, 1), (16, 64), (256, 1), (1024, 2), (8, 512)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
def test_swcache_cache_shapes(cupy, dtype, line_size, num_lines):
    A = awkward_matrices(dtype, np.int32, seed=3)["power_law"]
    policy = SoftwareCachePolicy(64, 8, line_size=line_size, num_lines=num_lines)
    check_product(A, "swcache", policy, cupy)


def test_register_cap_becomes_a_compile_option():
    assert CsrVectorPolicy().compile_options() == ()
    assert CsrVectorPolicy(max_registers=40).compile_options() == ("--maxrregcount=40",)
    assert SoftwareCachePolicy(max_registers=64).compile_options() == ("--maxrregcount=64",)
    knobs = CsrVectorPolicy(128, 2, 48).knobs()
    assert knobs == {
        "block_size": 128,
        "threads_per_row": 2,
        "max_registers": 48,
        "unroll": 4,
        "stream_matrix": False,
        "vector_loads": False,
    }
    assert CsrVectorPolicy.from_knobs(knobs) == CsrVectorPolicy(128, 2, 48)
    # entries written before the unroll / stream_matrix knobs existed still load
    assert CsrVectorPolicy.from_knobs({"block_size": 128, "threads_per_row": 2}).unroll == 4


def test_unroll_and_streaming_become_compile_options():
    assert CsrVectorPolicy(unroll=8).compile_options() == ("-DSPARSEGPU_UNROLL=8",)
    policy = CsrVectorPolicy(max_registers=40, unroll=2, stream_matrix=True, vector_loads=True)
    assert policy.compile_options() == (
        "--maxrregcount=40",
        "-DSPARSEGPU_UNROLL=2",
        "-DSPARSEGPU_STREAM_MATRIX=1",
        "-DSPARSEGPU_VECTOR_LOADS=1",
    )
    # the software cache has neither knob
    assert "unroll" not in SoftwareCachePolicy.knob_names()


@pytest.mark.parametrize(
    ("knobs", "error", "match"),
    [
        ({"unroll": 3}, ValueError, r"unroll=3 is not allowed; choose one of \[1, 2, 4, 8\]"),
        ({"unroll": 4.0}, TypeError, "unroll must be an int"),
        ({"stream_matrix": 1}, TypeError, "stream_matrix must be a bool, got int 1"),
        ({"vector_loads": "yes"}, TypeError, "vector_loads must be a bool, got str 'yes'"),
    ],
)
def test_bad_unroll_and_streaming_are_clear_errors(knobs, error, match):
    with pytest.raises(error, match=match):
        CsrVectorPolicy(**knobs)


@pytest.mark.gpu
@pytest.mark.parametrize("max_registers", [32, 40, 64])
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_register_caps(cupy, backend_name, max_registers):
    A = awkward_matrices(np.complex128, np.int64, seed=4)["power_law"]
    policy = policy_for(backend_name, 4)
    policy = type(policy)(**{**policy.knobs(), "max_registers": max_registers})
    check_product(A, backend_name, policy, cupy)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("unroll", "stream_matrix", "vector_loads"),
    [
        (1, False, False),
        (2, True, False),
        (8, False, False),
        (8, True, False),
        (1, False, True),
        (2, True, True),
        (4, False, True),
    ],
)
@pytest.mark.parametrize("backend_name", [b for b in KERNEL_BACKENDS if b != "swcache"])
@pytest.mark.parametrize(
    "matrix_name",
    ["power_law", "one_long_row", "half_rows_empty", "unsorted_indices", "row_1x300", "col_300x1"],
)
def test_launch_knob_variants(cupy, backend_name, unroll, stream_matrix, vector_loads, matrix_name):
    pairs = [(np.float32, np.int32), (np.float64, np.int64), (np.complex128, np.int32)]
    for value_dtype, index_dtype in pairs:
        A = awkward_matrices(value_dtype, index_dtype, seed=5)[matrix_name]
        for threads_per_row in (1, 8, 32):
            policy = CsrVectorPolicy(
                128,
                threads_per_row,
                unroll=unroll,
                stream_matrix=stream_matrix,
                vector_loads=vector_loads,
            )
            check_product(A, backend_name, policy, cupy)


@pytest.mark.gpu
def test_vector_loads_refuse_a_misaligned_array(cupy):
    from sparsegpu.device._mirror import CUPY, DeviceMatrix

    A = awkward_matrices(np.float32, np.int32)["random_200x150"]
    shifted = cupy.asarray(np.concatenate([[0], A.data]).astype(np.float32))[1:]  # 4 bytes in
    mirror = DeviceMatrix(shifted, cupy.asarray(A.indices), cupy.asarray(A.indptr), A.shape, CUPY)
    with pytest.raises(ValueError, match=r"16-byte aligned, but it starts at 0x[0-9a-f]+4"):
        _registry.get_backend("shuffle").plan(mirror, CsrVectorPolicy(vector_loads=True))


@pytest.mark.gpu
def test_swcache_too_much_shared_memory_is_a_clear_error(cupy):
    A = sg.csr_matrix(awkward_matrices(np.complex128, np.int32)["power_law"])
    policy = SoftwareCachePolicy(1024, 8, line_size=1024, num_lines=1024)
    with pytest.raises(ValueError, match="shared memory"):
        sg.matvec(A, cupy.ones(A.shape[1], dtype=np.complex128), backend="swcache", policy=policy)


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_untuned_policy_and_candidates(cupy, backend_name):
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32)["random_200x150"])
    backend = _registry.registered()[backend_name]
    mirror = A._sg_mirror(backend.residence, np.float64)
    untuned = backend.default_policy(mirror)
    assert untuned.source == "occupancy"
    assert untuned.threads_per_row == occupancy.threads_per_row_for(mirror.stats.mean)
    candidates = backend.candidates(mirror)
    assert candidates[0] == untuned and len(set(candidates)) == len(candidates) > 1
    for policy in candidates[:: max(1, len(candidates) // 6)]:
        check_product(A, backend_name, policy, cupy)


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_out_argument_and_stream(cupy, backend_name):
    A = awkward_matrices(np.float64, np.int64)["half_rows_empty"]
    x = random_vector(A.shape[1], np.float64, seed=4)
    out = cupy.full(A.shape[0], np.nan)
    with cupy.cuda.Stream(non_blocking=True):
        got = sg.matvec(sg.csr_matrix(A), cupy.asarray(x), backend=backend_name, out=out)
        cupy.cuda.get_current_stream().synchronize()
    assert got is out
    assert_product_close(out, sp.csr_matrix(A) @ x, np.float64, 6)


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_plan_rejects_wrong_x(cupy, backend_name):
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32)["random_200x150"])
    plan = _planning.plan_for(A, np.float64, backend=backend_name)
    with pytest.raises(ValueError, match=r"shape \(150,\)"):
        plan.matvec(cupy.ones(149))
    with pytest.raises(ValueError, match="float64"):
        plan.matvec(cupy.ones(150, dtype=np.float32))


@pytest.mark.gpu
def test_texture_refuses_x_beyond_the_1d_linear_limit(cupy):
    from sparsegpu.device import _cuda

    limit = _cuda.device_info().max_texture_1d_linear
    n_cols = limit + 1
    A = sg.csr_matrix(
        (np.ones(1), np.array([n_cols - 1], dtype=np.int64), np.array([0, 1], dtype=np.int64)),
        shape=(1, n_cols),
    )
    with pytest.raises(ValueError, match=f"at most {limit:,}"):
        _planning.plan_for(A, np.float64, backend="texture")
    mirror = A._sg_mirror(_registry.registered()["texture"].residence, np.float64)
    assert not _registry.registered()["texture"].supports(mirror)
    assert _registry.registered()["readonly"].supports(mirror)
    assert sg.explain(A, np.float64).backend != "texture"


@pytest.mark.gpu
def test_texture_objects_are_reused_per_x_buffer(cupy):
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32)["random_200x150"])
    plan = _planning.plan_for(A, np.float64, backend="texture")
    xs = [cupy.asarray(random_vector(150, np.float64, seed=s)) for s in range(3)]
    expected = [sp.csr_matrix(A) @ x.get() for x in xs]
    for _ in range(2):
        for x, want in zip(xs, expected, strict=True):
            assert_product_close(plan.matvec(x), want, np.float64, 12)
    assert len(plan.textures._entries) == plan.textures.capacity


@pytest.mark.gpu
def test_a_texture_entry_keeps_its_event_across_launches(cupy):
    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32)["random_200x150"])
    plan = _planning.plan_for(A, np.float64, backend="texture")
    x = cupy.asarray(random_vector(150, np.float64, seed=0))
    plan.matvec(x)
    (entry,) = plan.textures._entries.values()
    event = entry[2]
    plan.matvec(x)
    assert plan.textures._entries[next(iter(plan.textures._entries))][2] is event
    event.synchronize()
    assert event.done


@pytest.mark.gpu
def test_texture_eviction_under_threads_keeps_every_answer(cupy):
    # 8 threads, each with its own 3 x buffers, on one plan whose cache holds 2 textures:
    # nearly every launch evicts a texture another thread launched with
    import concurrent.futures

    A = sg.csr_matrix(awkward_matrices(np.float64, np.int32)["random_200x150"])
    plan = _planning.plan_for(A, np.float64, backend="texture")
    S = sp.csr_matrix(A)

    def work(seed):
        xs = [cupy.asarray(random_vector(150, np.float64, seed=seed * 3 + i)) for i in range(3)]
        want = [S @ x.get() for x in xs]
        for _ in range(20):
            for x, expected in zip(xs, want, strict=True):
                assert_product_close(plan.matvec(x), expected, np.float64, 12)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["vector", "shuffle", "swcache"])
def test_grid_stride_beyond_2_to_the_31_threads(cupy, backend_name):
    n_rows = 2**26 + 12_345  # times 32 threads per row > 2^31
    lengths = np.zeros(n_rows, dtype=np.int32)
    rows = np.array([0, 1, n_rows // 2, n_rows - 2, n_rows - 1])
    lengths[rows] = 3
    indptr = np.zeros(n_rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.tile(np.array([0, 7, 99], dtype=np.int32), len(rows))
    data = np.arange(1, 1 + 3 * len(rows), dtype=np.float64)
    A = sg.csr_matrix((data, indices, indptr), shape=(n_rows, 100))
    policy = policy_for(backend_name, 32, 256)
    plan = _planning.plan_for(A, np.float64, backend=backend_name, policy=policy)
    assert plan.grid * (256 // 32) < n_rows  # the grid-stride loop is exercised
    x = random_vector(100, np.float64, seed=5)
    got = plan.matvec(cupy.asarray(x)).get()
    expected = sp.csr_matrix((data, indices, indptr), shape=(n_rows, 100)) @ x
    np.testing.assert_allclose(got[rows], expected[rows], rtol=1e-14)
    assert np.count_nonzero(got) == np.count_nonzero(expected)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_fifty_million_nonzeros(cupy, backend_name):
    from sparsegpu.datasets import synthetic

    A = synthetic.uniform_random(3_200_000, 16, dtype=np.float64, xp=cupy, seed=6)
    assert A.nnz >= 50_000_000
    x = random_vector(A.shape[1], np.float64, seed=7)
    got = sg.matvec(A, cupy.asarray(x), backend=backend_name)
    assert_product_close(got, sp.csr_matrix(A) @ x, np.float64, 16)


def read_bundled(name: str) -> sp.csr_matrix:
    A = sp.csr_matrix(datasets.load(name))
    return A.astype(np.complex128 if A.dtype.kind == "c" else np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix_name", BUNDLED)
@pytest.mark.parametrize("backend_name", KERNEL_BACKENDS)
def test_bundled_suitesparse_matrices(cupy, backend_name, matrix_name):
    A = read_bundled(matrix_name)
    x = random_vector(A.shape[1], A.dtype, seed=8)
    got = sg.matvec(sg.csr_matrix(A), cupy.asarray(x), backend=backend_name)
    max_row = int(np.diff(A.indptr).max())
    assert_product_close(got, A @ x, A.dtype, max_row, what=f"{backend_name} {matrix_name}")


@pytest.mark.parametrize(
    ("mean", "limit", "expected"), [(64.0, 32, 32), (64.0, 4, 4), (5.0, 1, 1), (5.0, 8, 2)]
)
def test_threads_per_row_within_a_limit(mean, limit, expected):
    assert occupancy.threads_per_row_for(mean, limit=limit) == expected
