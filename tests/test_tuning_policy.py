"""Policies: validated on construction, plain data, round-trip through knobs()."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sparsegpu.tuning import (
    CsrVectorPolicy,
    CusparsePolicy,
    MergePathPolicy,
    NoPolicy,
    SoftwareCachePolicy,
)

EXAMPLES = {
    "CsrVectorPolicy": CsrVectorPolicy(block_size=128, threads_per_row=8, max_registers=40),
    "SoftwareCachePolicy": SoftwareCachePolicy(
        block_size=512, threads_per_row=4, line_size=64, num_lines=16
    ),
    "CusparsePolicy": CusparsePolicy(algorithm="csr_alg2", preprocess=True),
    "MergePathPolicy": MergePathPolicy(block_size=128, nnz_per_thread=4),
    "NoPolicy": NoPolicy(),
}


@pytest.mark.parametrize("policy", EXAMPLES.values(), ids=EXAMPLES.keys())
def test_knobs_round_trip_through_json(policy):
    knobs = json.loads(json.dumps(policy.knobs()))
    again = type(policy).from_knobs(knobs, source="tuned")
    assert again == policy
    assert again.source == "tuned"


@pytest.mark.parametrize("policy", EXAMPLES.values(), ids=EXAMPLES.keys())
def test_policies_are_frozen(policy):
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.source = "changed"


def test_source_takes_no_part_in_equality():
    a = CsrVectorPolicy(block_size=64, source="tuned")
    b = CsrVectorPolicy(block_size=64, source="default")
    assert a == b and hash(a) == hash(b)


def test_knob_names_leave_out_source():
    assert SoftwareCachePolicy.knob_names() == (
        "block_size",
        "threads_per_row",
        "max_registers",
        "line_size",
        "num_lines",
    )
    assert NoPolicy.knob_names() == ()


@pytest.mark.parametrize("block_size", [0, 16, 31, 48, 1056, 2048, -32])
def test_block_size_out_of_range_is_refused(block_size):
    with pytest.raises(ValueError, match=f"block_size={block_size} is not allowed"):
        CsrVectorPolicy(block_size=block_size)


@pytest.mark.parametrize("block_size", [256.0, "256", None, True])
def test_block_size_of_wrong_type_is_refused(block_size):
    with pytest.raises(TypeError, match="block_size must be an int"):
        CsrVectorPolicy(block_size=block_size)


@pytest.mark.parametrize("policy_type", [CsrVectorPolicy, MergePathPolicy])
def test_block_size_is_checked_in_every_family(policy_type):
    with pytest.raises(ValueError, match="multiple of 32"):
        policy_type(block_size=100)


@pytest.mark.parametrize("threads_per_row", [0, 3, 24, 64])
def test_threads_per_row_out_of_range_is_refused(threads_per_row):
    with pytest.raises(ValueError, match=f"threads_per_row={threads_per_row} is not allowed"):
        CsrVectorPolicy(threads_per_row=threads_per_row)


@pytest.mark.parametrize("threads_per_row", [True, 2.0, "4"])
def test_threads_per_row_of_wrong_type_is_refused(threads_per_row):
    with pytest.raises(TypeError, match="threads_per_row must be an int"):
        CsrVectorPolicy(threads_per_row=threads_per_row)


@pytest.mark.parametrize("line_size", [4, 12, 2048])
def test_line_size_out_of_range_is_refused(line_size):
    with pytest.raises(ValueError, match=f"line_size={line_size} is not allowed"):
        SoftwareCachePolicy(line_size=line_size)


@pytest.mark.parametrize("num_lines", [0, 3, 2048])
def test_num_lines_out_of_range_is_refused(num_lines):
    with pytest.raises(ValueError, match=f"num_lines={num_lines} is not allowed"):
        SoftwareCachePolicy(num_lines=num_lines)


def test_software_cache_policy_checks_its_vector_knobs_too():
    with pytest.raises(ValueError, match="threads_per_row"):
        SoftwareCachePolicy(threads_per_row=5)


def test_unknown_cusparse_algorithm_is_refused():
    with pytest.raises(ValueError, match="algorithm='csr_alg3' is not allowed"):
        CusparsePolicy(algorithm="csr_alg3")


def test_cusparse_preprocess_must_be_a_bool():
    with pytest.raises(TypeError, match="preprocess must be a bool"):
        CusparsePolicy(preprocess=1)


@pytest.mark.parametrize(
    "shape", [(256, 16), (1024, 8), (128, 0), (128, 65)], ids=lambda s: f"{s[0]}x{s[1]}"
)
def test_merge_path_shape_that_is_not_compiled_is_refused(shape):
    with pytest.raises(ValueError, match=r"\(block_size, nnz_per_thread\) = .* is not compiled"):
        MergePathPolicy(block_size=shape[0], nnz_per_thread=shape[1])


@pytest.mark.parametrize("nnz_per_thread", [2.5, True])
def test_merge_path_nnz_per_thread_of_wrong_type_is_refused(nnz_per_thread):
    with pytest.raises(TypeError, match="nnz_per_thread must be an int"):
        MergePathPolicy(nnz_per_thread=nnz_per_thread)


def test_numpy_integers_are_accepted_and_stored_as_int():
    policy = CsrVectorPolicy(
        block_size=np.int64(128), threads_per_row=np.int32(4), max_registers=np.int64(40)
    )
    assert type(policy.block_size) is int and type(policy.threads_per_row) is int
    assert type(policy.max_registers) is int
    json.dumps(policy.knobs())


@pytest.mark.parametrize("max_registers", [8, 256, 40.0, True, "40"])
def test_register_cap_out_of_range_or_type_is_refused(max_registers):
    with pytest.raises(ValueError, match="max_registers=.* is not allowed"):
        CsrVectorPolicy(max_registers=max_registers)


def test_source_must_be_a_string():
    with pytest.raises(TypeError, match="source must be a str"):
        CsrVectorPolicy(source=3)


def test_from_knobs_refuses_unknown_knobs_naming_them():
    with pytest.raises(ValueError, match=r"no field\(s\) \['warps'\]"):
        CsrVectorPolicy.from_knobs({"block_size": 64, "warps": 2})


def test_from_knobs_refuses_a_non_mapping():
    with pytest.raises(TypeError, match="takes a dict of knobs"):
        CsrVectorPolicy.from_knobs([("block_size", 64)])


def test_from_knobs_validates_values():
    with pytest.raises(ValueError, match="block_size=33"):
        CsrVectorPolicy.from_knobs({"block_size": 33})


def test_from_knobs_fills_missing_knobs_with_defaults():
    policy = SoftwareCachePolicy.from_knobs({"line_size": 32})
    assert policy == SoftwareCachePolicy(line_size=32)
