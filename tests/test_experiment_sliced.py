"""The sliced-ELL prototype (benchmarks/experiments): its layout decodes to the matrix
(CPU; the layout is built on the host and read here the way its kernel reads it)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from benchmarks import compressed_indices
from benchmarks.experiments import sliced_ell_prototype
from sparsegpu.datasets import synthetic

NUMPY_AS_CUPY = types.SimpleNamespace(asarray=np.asarray)


@pytest.fixture(scope="module")
def script():
    return sliced_ell_prototype


def product(layout, x, tpr):
    """y = A x read from the layout as the kernel does: lane l of slice s adds the entries
    at start[s] + l, + 32, ... into row s * 32 / tpr + l / tpr, written through perm."""
    rows_per_slice = 32 // tpr
    y = np.zeros(layout["n"])
    for s in range(layout["n_slices"]):
        first, last = layout["start"][s], layout["start"][s + 1]
        for lane in range(32):
            r = s * rows_per_slice + lane // tpr
            if r >= layout["n"]:
                continue
            k = np.arange(first + lane, last, 32)
            columns = layout["base"][s] + layout["offsets"][k].astype(np.int64)
            y[layout["perm"][r]] += layout["values"][k] @ x[columns]
    return y


@pytest.mark.parametrize("window", [0, 64])
@pytest.mark.parametrize("tpr", [1, 4])
def test_layout_decodes_to_the_matrix(script, tpr, window):
    S = synthetic.stencil_2d(23, points=9).tocsr()
    S.data = np.random.default_rng(0).standard_normal(S.nnz)
    layout = script.build(S, tpr, window, NUMPY_AS_CUPY)
    x = np.random.default_rng(1).standard_normal(S.shape[1])
    np.testing.assert_allclose(product(layout, x, tpr), S @ x, rtol=1e-12, atol=1e-12)
    assert layout["padding"] >= 1.0 and layout["span"] < S.shape[1]


def test_sorting_cuts_the_padding_of_irregular_rows(script):
    fem = compressed_indices.fem_p1(3000, "rcm")
    unsorted = script.build(fem, 1, 0, NUMPY_AS_CUPY)["padding"]
    assert script.build(fem, 1, 1024, NUMPY_AS_CUPY)["padding"] < unsorted


def test_a_slice_wider_than_16_bits_is_refused(script):
    S = synthetic.stencil_3d(42).tocsr()  # 42^2 = 1764 columns between neighbouring planes
    S.data = np.ones(S.nnz)
    S.indices[0] = S.shape[1] - 1  # row 0 now reaches the last column: a span of 74,087
    S.indices[: S.indptr[1]].sort()
    with pytest.raises(ValueError, match=r"a slice spans 74,087 columns"):
        script.build(S, 1, 0, NUMPY_AS_CUPY)


def test_the_committed_result_renders_its_table(script):
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "docs/benchmarks/results"
    results = json.loads((path / "sliced_ell_prototype_h200.json").read_text())
    text = script.markdown(results)
    assert text.count("\n| ") == 1 + len(results)  # the header row and one per matrix/dtype
    assert text == (path / "sliced_ell_prototype_h200.md").read_text()
