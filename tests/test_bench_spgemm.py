"""benchmarks/spgemm.py on the CPU: its matrices, its scipy products and --from-json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparsegpu as sg
from benchmarks import spgemm, spgemm_layers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    return spgemm


def test_small_matrices_build_on_the_host(script):
    chosen = script.matrices("small", np) + script.galerkin_matrices("small", np)
    assert sum(form.startswith(script.GALERKIN) for _, form, _ in chosen) == 3
    for name, form, builder in chosen:
        S = sp.csr_matrix(builder())
        assert S.nnz > 0, name
        P = script.prolongation(form, S, np.float64)
        if form.startswith(script.GALERKIN):
            # every fine point in exactly one aggregate, every aggregate used
            np.testing.assert_array_equal(P.sum(axis=1).A1, np.ones(S.shape[0]))
            assert (P.sum(axis=0).A1 > 0).all(), name
            expected_shape = (P.shape[1], P.shape[1])
        else:
            assert P is None and form in ("A@A", "A.T@A"), form
            expected_shape = (S.shape[int(form == "A.T@A")],) * 2
        assert script.scipy_product(form, S, P).shape == expected_shape, name


def test_3d_aggregation_joins_each_2x2x2_block(script):
    P = script.aggregation_3d(3)  # 27 points onto 2^3 aggregates (edges short)
    assert P.shape == (27, 8)
    np.testing.assert_array_equal(P.sum(axis=0).A1, [8, 4, 4, 2, 4, 2, 2, 1])
    assert P[0, 0] == 1 and P[1, 0] == 1 and P[9 + 3 + 1, 0] == 1 and P[26, 7] == 1


def test_a_prolongation_of_the_wrong_size_is_refused(script):
    with pytest.raises(ValueError, match="the aggregation has 9 rows, A has 10"):
        script.prolongation(script.GALERKIN, sp.eye(10, format="csr"), np.float64)


def test_aggregation_sums_each_2x2_block(script):
    P = script.aggregation(4)
    assert P.shape == (16, 4)
    np.testing.assert_array_equal(P.sum(axis=0).A1, [4, 4, 4, 4])
    np.testing.assert_array_equal(P.sum(axis=1).A1, np.ones(16))
    assert P[5, 0] == 1 and P[2, 1] == 1 and P[15, 3] == 1


def _fake_result():
    row = {
        "matrix": "stencil2d5_2000", "form": "A@A", "dtype": "float64", "shape": [4, 4],
        "nnz": 19_992_000, "result_nnz": 51_976_000, "planned_algorithm": "reuse",
        "plan": "A @ B: reuse (measure): ...", "held_bytes": 2**20, "disagreements": {},
        "planned_ms": 2.0, "alg1_ms": 4.1, "cusparse_alg1_ms": 4.0, "cupyx_ms": 4.2,
        "scipy_ms": 470.0, "planned_with_host_copy_ms": 40.0, "peak_planned": 2**29,
        "peak_alg1": 2**30, "peak_cusparse_alg1": 2**30, "peak_cupyx": 2**30,
    }  # fmt: skip
    blocked = {"alg1_peak": 2**30, "result_bytes": 2**29, "runs": [{"how": "row blocks only"}]}
    return {"device": "NVIDIA H200", "repeat": 7, "rows": [row], "blocked": blocked}


def test_markdown_has_the_ratios_and_the_plan(script):
    text = script.markdown(_fake_result())
    assert "| stencil2d5_2000 | A@A | float64 |" in text
    assert "2.10x / 1.02x" in text  # cupyx / planned, cupyx / ALG1
    assert "11.8x" in text  # scipy / (planned + host copy)
    assert "513 / 1024 / 1024" in text  # peak MiB, the reuse plan's held bytes included
    assert "row blocks only" in text and "reuse (measure)" in text


def test_from_json_writes_markdown_without_a_gpu(script, tmp_path):
    source = tmp_path / "result.json"
    source.write_text(json.dumps(_fake_result()))
    md = tmp_path / "result.md"
    assert script.main(["--from-json", str(source), "--md", str(md)]) == 0
    assert md.read_text() == script.markdown(_fake_result())


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_cusparse_spgemm_agrees_with_scipy(script, dtype, index_dtype):
    """The benchmark's cuSPARSE-called-directly column (the baseline every SpGEMM claim is
    measured against) computes the product scipy does."""
    from sparsegpu.backends import spgemm
    from sparsegpu.device import _cuda
    from sparsegpu.device._mirror import CUPY
    from sparsegpu.testing import no_gpu_reason, random_sparse

    if _cuda.cupy_or_none() is None:
        pytest.skip(no_gpu_reason())
    cupy = _cuda.cupy_or_none()
    S = random_sparse((300, 200), density=0.05, seed=11, dtype=dtype)
    T = random_sparse((200, 250), density=0.05, seed=12, dtype=dtype)

    def mirror(M):
        A = sg.csr_matrix(M)
        A.indices, A.indptr = A.indices.astype(index_dtype), A.indptr.astype(index_dtype)
        device = spgemm.canonical(A._sg_mirror(CUPY, np.dtype(dtype)))
        assert device.index_dtype == np.dtype(index_dtype)
        return device

    indptr, indices, data = script.DirectSpGEMM(mirror(S), mirror(T))()
    ours = sp.csr_matrix(
        (cupy.asnumpy(data), cupy.asnumpy(indices), cupy.asnumpy(indptr)), shape=(300, 250)
    )
    assert script.agree_with_scipy(ours, S @ T, dtype) is None


@pytest.fixture(scope="module")
def layers():
    return spgemm_layers


def _fake_layers():
    row = {"matrix": "fem", "form": "A@A", "dtype": "float64", "nnz": 10, "algorithm": "alg1"}
    row["disagreements"] = {}
    times = dict(op=1.0, spgemm=0.98, planning=0.96, driver=0.95, engine=0.94)
    row.update({f"{k}_ms": v for k, v in times.items()}, cusparse_alg1_ms=0.9, cupyx_ms=1.05)
    hashed = dict(row, matrix="stencil", algorithm="hash", cupyx_ms=4.0)
    del hashed["cusparse_alg1_ms"]
    return {"device": "NVIDIA H200", "cupy": "14", "repeat": 15, "rows": [row, hashed]}


def test_layers_markdown_has_every_layer_and_the_ratio(layers, tmp_path):
    text = layers.markdown(_fake_layers())
    assert "| fem | A@A | float64 | alg1 | 1.000 | 0.980 | 0.960 | 0.950 | 0.940 | 0.900 |" in text
    assert "| 1.050 | 1.05x |" in text
    assert "| stencil | A@A | float64 | hash |" in text and "| — | 4.000 | 4.00x |" in text
    source, md = tmp_path / "layers.json", tmp_path / "layers.md"
    source.write_text(json.dumps(_fake_layers()))
    assert layers.main(["--from-json", str(source), "--md", str(md)]) == 0
    assert md.read_text() == text


@pytest.mark.parametrize("form", ["A@A", "A.T@A"])
def test_every_layer_computes_the_product(layers, form):
    """Each layer the benchmark times computes the same product as cupyx (on the GPU)."""
    from sparsegpu.device import _cuda
    from sparsegpu.testing import no_gpu_reason, random_sparse

    cupy = _cuda.cupy_or_none()
    if cupy is None:
        pytest.skip(no_gpu_reason())
    import cupyx.scipy.sparse as cupyx_sparse

    S = random_sparse((300, 200), density=0.05, seed=13, dtype=np.float64)
    if form == "A@A":
        S = random_sparse((300, 300), density=0.05, seed=13, dtype=np.float64)
    row = layers.run_dtype("random", form, S, np.float64, 3, cupy, cupyx_sparse, lambda _: None)
    assert row["disagreements"] == {}
    assert {f"{k}_ms" for k in layers.LAYERS if k != "cusparse_alg1"} <= set(row)


def _fake_call(group, name, nnz, first, cupyx, galerkin=1.0, cupyx_galerkin=1.2):
    return {"set": group, "matrix": name, "nnz": nnz, "first_ms": first,
            "cupyx_first_ms": cupyx, "galerkin_first_ms": galerkin,
            "cupyx_galerkin_first_ms": cupyx_galerkin}  # fmt: skip


def test_calls_summary_is_set_by_set_and_shows_a_tie_under_one():
    from benchmarks import spgemm_first

    rows = [
        _fake_call("fit", "a", 600_000, 1.0, 4.0),
        _fake_call("heldout", "b", 600_000, 46.37, 46.28),  # 0.998x: not 1.00x
        _fake_call("heldout", "c", 600_000, 1.0, 4.0, 2.0, 2.0),
        _fake_call("heldout", "small", 1_000, 1.0, 0.5),  # under 0.5M: not in the first's
        {"set": "heldout", "matrix": "broken", "error": "x"},
    ]
    held, fit = [line for line in spgemm_first.calls_summary(rows) if line]
    assert held.startswith("Held out") and "min 0.998x" in held and "geomean 2.00x" in held
    assert "P.T @ A @ P: min 1.000x" in held  # every held-out matrix's Galerkin product
    assert fit.startswith("Fit") and "min 4.000x, geomean 4.00x" in fit


def test_calls_mode_runs_the_sets_asked_for_and_refuses_unknown_ones(monkeypatch):
    """``--mode calls`` runs only the matrices of ``--sets`` (it once ran every set), and a
    set it does not have is refused with the sets it has."""
    import argparse
    import types

    from benchmarks import spgemm_first

    ran = []
    matrices = [("fit", "f", lambda: sp.identity(3, format="csr")),
                ("heldout", "h", lambda: sp.identity(3, format="csr"))]  # fmt: skip
    monkeypatch.setattr(spgemm_first, "call_matrices", lambda xp: matrices)
    monkeypatch.setattr(spgemm_first, "warm_planning", lambda dtype: None)

    def run_calls(group, name, *args, **kwargs):
        ran.append(name)
        return {"matrix": name}

    monkeypatch.setattr(spgemm_first, "run_calls", run_calls)
    monkeypatch.setattr(spgemm_first.spgemm_bench, "finish", lambda args, result, render: 0)
    monkeypatch.setattr(spgemm_first.spgemm_bench, "log", lambda *a: None)
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: {"name": b"fake"})
    cupy = types.SimpleNamespace(__version__="0", cuda=types.SimpleNamespace(runtime=runtime),
                                 get_default_memory_pool=lambda: pool)  # fmt: skip

    def args(sets):
        return argparse.Namespace(sets=sets, only=None, dtypes="float64", samples=1, out=None)

    spgemm_first.main_calls(args("heldout"), cupy, None)
    assert ran == ["h"]
    spgemm_first.main_calls(args("fit,heldout"), cupy, None)
    assert ran == ["h", "f", "h"]
    with pytest.raises(SystemExit, match=r"unknown set\(s\) \['galerkin'\].*fit, heldout"):
        spgemm_first.main_calls(args("galerkin"), cupy, None)
