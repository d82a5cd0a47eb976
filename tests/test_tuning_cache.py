"""The tuning cache: round trip, merge, corruption, foreign versions, concurrent writers,
key derivation and lookup order (user cache, shipped defaults, untuned policy)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import sparsegpu as sg
from sparsegpu.engine import _planning, _select
from sparsegpu.engine import _tuning_store as cache_mod
from sparsegpu.engine._tuning_store import (
    CACHE_FILE,
    TunedEntry,
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    TuningContext,
    kernel_sources_digest,
)
from sparsegpu.testing import HOST_COPY
from sparsegpu.tuning import CsrVectorPolicy
from tests.tuning_backends import UNTUNED, SweepBackend

CONTEXT = TuningContext(
    device="NVIDIA H200",
    compute_capability="9.0",
    multiprocessors=132,
    cuda_runtime="13.0",
    cuda_driver="13.0",
    sparsegpu="0.1.0",
    kernel_sources="ab" * 32,
)


def entry(backend="vector", value_dtype="float64", row_class="medium", block_size=128, **kw):
    values = dict(
        backend=backend,
        value_dtype=value_dtype,
        index_dtype="int32",
        row_class=row_class,
        policy_type="CsrVectorPolicy",
        knobs={"block_size": block_size, "threads_per_row": 8},
        time_ms=0.05,
        gb_per_s=3400.0,
        untuned_time_ms=0.07,
        matrix="stencil (100x100, 460 nnz)",
        tuned_at="2026-01-01T00:00:00+00:00",
    )
    values.update(kw)
    return TunedEntry(**values)


def lookup(cache, e=None, context=CONTEXT):
    e = e or entry()
    return cache.lookup(context, e.backend, e.value_dtype, e.index_dtype, e.row_class)


@pytest.fixture
def cache(tmp_path):
    return TuningCache(tmp_path / "cache")


def aside_files(cache):
    return sorted(p.name for p in cache.directory.iterdir() if p.name.startswith(CACHE_FILE + "."))


# ----------------------------------------------------------------------- round trip
def test_recorded_entry_is_found(cache):
    cache.record(CONTEXT, [entry()])
    found = lookup(cache)
    assert found == entry()
    assert found.origin == "tuned"


def test_file_is_versioned_json(cache):
    cache.record(CONTEXT, [entry()])
    doc = json.loads(cache.path.read_text())
    assert doc["format"] == "sparsegpu-tuning-cache"
    assert doc["schema"] == cache_mod.SCHEMA_VERSION
    record = doc["contexts"][CONTEXT.digest]
    assert record["context"]["device"] == "NVIDIA H200"
    assert record["entries"][0]["gb_per_s"] == 3400.0


def test_entry_policy_is_built_from_its_knobs(cache):
    cache.record(CONTEXT, [entry()])
    policy = lookup(cache).policy(CsrVectorPolicy)
    assert policy == CsrVectorPolicy(block_size=128, threads_per_row=8)
    assert policy.source == "tuned"


def test_entry_of_another_policy_type_is_refused():
    with pytest.raises(TypeError, match="holds a CsrVectorPolicy"):
        entry().policy(sg.tuning.SoftwareCachePolicy)


def test_gain_is_untuned_over_tuned_time():
    assert entry(time_ms=0.05, untuned_time_ms=0.1).gain == pytest.approx(2.0)
    assert entry(untuned_time_ms=None).gain is None


def test_missing_file_reads_as_empty(cache):
    assert cache.contexts() == {}
    assert lookup(cache) is None


def test_other_keys_are_not_found(cache):
    cache.record(CONTEXT, [entry()])
    assert lookup(cache, entry(value_dtype="float32")) is None
    assert lookup(cache, entry(row_class="long")) is None
    assert lookup(cache, entry(backend="shuffle")) is None


# ---------------------------------------------------------------------------- merge
def test_records_merge_with_what_is_on_disk(cache):
    cache.record(CONTEXT, [entry(backend="vector")])
    cache.record(CONTEXT, [entry(backend="shuffle")])
    assert lookup(cache, entry(backend="vector")) is not None
    assert lookup(cache, entry(backend="shuffle")) is not None


def test_a_new_winner_replaces_the_old_one_for_the_same_key(cache):
    cache.record(CONTEXT, [entry(block_size=128)])
    cache.record(CONTEXT, [entry(block_size=512)])
    assert lookup(cache).knobs["block_size"] == 512
    assert len(cache.entries()) == 1


def test_contexts_are_kept_apart(cache):
    other = dataclasses.replace(CONTEXT, device="NVIDIA A100", compute_capability="8.0")
    cache.record(CONTEXT, [entry(block_size=128)])
    cache.record(other, [entry(block_size=64)])
    assert lookup(cache).knobs["block_size"] == 128
    assert lookup(cache, context=other).knobs["block_size"] == 64


def test_a_write_by_another_cache_object_is_seen(cache):
    assert lookup(cache) is None
    TuningCache(cache.directory).record(CONTEXT, [entry()])
    assert lookup(cache) is not None


def test_no_temporary_files_are_left_behind(cache):
    cache.record(CONTEXT, [entry()])
    cache.record(CONTEXT, [entry(backend="shuffle")])
    leftovers = [p.name for p in cache.directory.iterdir() if p.suffix == ".tmp"]
    assert leftovers == []


def test_clear_deletes_the_file(cache):
    cache.record(CONTEXT, [entry()])
    assert cache.clear() is True
    assert not cache.path.exists()
    assert cache.clear() is False
    assert lookup(cache) is None


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write anywhere"
)
def test_unwritable_directory_is_a_clear_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(TuningCacheError, match="could not write the tuning cache"):
            TuningCache(locked).record(CONTEXT, [entry()])
    finally:
        locked.chmod(0o700)


def test_a_file_where_the_directory_should_be_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(TuningCacheError, match="SPARSEGPU_CACHE_DIR"):
        TuningCache(blocker).record(CONTEXT, [entry()])


# ------------------------------------------------------------------ concurrent writers
def _write_many(directory: str, writer: int, count: int, start_flag: str) -> None:
    """Runs in a child process: wait for the start flag, then record ``count`` entries."""
    while not os.path.exists(start_flag):
        time.sleep(0.001)
    cache = TuningCache(directory)
    for i in range(count):
        cache.record(CONTEXT, [entry(backend=f"writer{writer}-{i}")])


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    directory = tmp_path / "shared"
    flag = tmp_path / "go"
    count = 30
    ctx = multiprocessing.get_context("spawn")
    workers = [
        ctx.Process(target=_write_many, args=(str(directory), w, count, str(flag)))
        for w in range(2)
    ]
    for p in workers:
        p.start()
    flag.write_text("go")
    for p in workers:
        p.join(timeout=120)
    assert [p.exitcode for p in workers] == [0, 0]
    names = {e.backend for _, e in TuningCache(directory).entries()}
    assert names == {f"writer{w}-{i}" for w in range(2) for i in range(count)}


def test_threads_writing_at_once_lose_nothing(tmp_path):
    directory = tmp_path / "threads"

    def write(worker):
        cache = TuningCache(directory)
        for i in range(20):
            cache.record(CONTEXT, [entry(backend=f"thread{worker}-{i}")])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(TuningCache(directory).entries()) == 80


# ---------------------------------------------------------------- corruption / versions
GARBAGE = {
    "not_json": "{this is not json",
    "truncated": '{"format": "sparsegpu-tuning-cache", "schema": 1, "contexts": {"ab',
    "binary": "\x00\x01\x02",
    "a_list": "[1, 2, 3]",
    "other_format": '{"format": "someone-else", "schema": 1, "contexts": {}}',
    "contexts_not_object": '{"format": "sparsegpu-tuning-cache", "schema": 1, "contexts": []}',
    "deeply_nested": "[" * 100_000 + "]" * 100_000,
    "deeply_nested_contexts": '{"format": "sparsegpu-tuning-cache", "schema": 1, "contexts": '
    + '{"a": ' * 100_000
    + "}" * 100_001,
}


@pytest.mark.parametrize("text", GARBAGE.values(), ids=GARBAGE.keys())
def test_corrupt_file_is_reported_set_aside_and_reads_as_empty(cache, text):
    cache.directory.mkdir(parents=True)
    cache.path.write_text(text)
    with pytest.warns(TuningCacheWarning, match="moved it to"):
        assert lookup(cache) is None
    assert not cache.path.exists()
    [aside] = aside_files(cache)
    assert aside.startswith(CACHE_FILE + ".corrupt-")
    assert (cache.directory / aside).read_text() == text  # nothing the user had is lost


def _malformed_docs():
    good = {
        "format": "sparsegpu-tuning-cache",
        "schema": 1,
        "contexts": {
            CONTEXT.digest: {
                "context": dataclasses.asdict(CONTEXT),
                "entries": [entry().to_json()],
            }
        },
    }
    out = {}
    bad = json.loads(json.dumps(good))
    bad["contexts"][CONTEXT.digest]["entries"][0]["time_ms"] = "fast"
    out["entry_field_type"] = bad
    bad = json.loads(json.dumps(good))
    del bad["contexts"][CONTEXT.digest]["entries"][0]["knobs"]
    out["entry_field_missing"] = bad
    bad = json.loads(json.dumps(good))
    bad["contexts"][CONTEXT.digest]["entries"][0]["row_class"] = "huge"
    out["unknown_row_class"] = bad
    bad = json.loads(json.dumps(good))
    bad["contexts"][CONTEXT.digest]["context"]["device"] = "edited by hand"
    out["context_digest_mismatch"] = bad
    bad = json.loads(json.dumps(good))
    bad["contexts"][CONTEXT.digest]["entries"] = {"not": "a list"}
    out["entries_not_list"] = bad
    return out


MALFORMED = _malformed_docs()


@pytest.mark.parametrize("doc", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_document_is_treated_as_corrupt(cache, doc):
    cache.directory.mkdir(parents=True)
    cache.path.write_text(json.dumps(doc))
    with pytest.warns(TuningCacheWarning, match="malformed"):
        assert cache.contexts() == {}
    assert aside_files(cache)[0].startswith(CACHE_FILE + ".corrupt-")


def test_corrupt_file_is_rebuilt_by_the_next_record(cache):
    cache.directory.mkdir(parents=True)
    cache.path.write_text("garbage")
    with pytest.warns(TuningCacheWarning):
        cache.record(CONTEXT, [entry()])
    assert lookup(cache) == entry()
    assert len(aside_files(cache)) == 1


@pytest.mark.parametrize("schema", [0, "1", None], ids=["older", "text", "null"])
def test_foreign_version_is_reported_set_aside_and_rebuilt(cache, schema):
    cache.directory.mkdir(parents=True)
    foreign = json.dumps({"format": "sparsegpu-tuning-cache", "schema": schema, "contexts": {}})
    cache.path.write_text(foreign)
    with pytest.warns(TuningCacheWarning, match="format version"):
        assert lookup(cache) is None
    [aside] = aside_files(cache)
    assert aside.startswith(CACHE_FILE + ".foreign-")
    assert (cache.directory / aside).read_text() == foreign
    cache.record(CONTEXT, [entry()])
    assert lookup(cache) == entry()


def newer_document(schema=2) -> str:
    doc = {"format": "sparsegpu-tuning-cache", "schema": schema, "contexts": {"x": "new"}}
    return json.dumps(doc)


def test_newer_version_is_left_alone_and_read_as_empty_with_one_warning(cache):
    cache.directory.mkdir(parents=True)
    cache.path.write_text(newer_document())
    with pytest.warns(TuningCacheWarning, match="newer sparsegpu.*version 2") as caught:
        assert lookup(cache) is None
        assert lookup(cache) is None
        assert cache.contexts() == {}
    assert len(caught) == 1
    assert aside_files(cache) == []
    assert cache.path.read_text() == newer_document()


def test_newer_version_is_never_written_over(cache):
    cache.directory.mkdir(parents=True)
    cache.path.write_text(newer_document(7))
    with pytest.raises(TuningCacheError, match="newer sparsegpu.*not saved"):
        cache.record(CONTEXT, [entry()])
    assert cache.path.read_text() == newer_document(7)
    assert sorted(p.name for p in cache.directory.iterdir()) == [CACHE_FILE, "tuning.lock"]


def test_newer_version_falls_back_to_the_shipped_defaults(tmp_path):
    defaults = defaults_file(tmp_path, {CONTEXT.arch: [entry()]})
    cache = TuningCache(tmp_path / "cache", defaults=defaults)
    cache.directory.mkdir()
    cache.path.write_text(newer_document())
    with pytest.warns(TuningCacheWarning, match="shipped defaults apply"):
        assert lookup(cache).origin == "shipped"


@pytest.mark.parametrize(
    "text", ["{broken", "[" * 100_000 + "]" * 100_000], ids=["invalid", "deeply_nested"]
)
def test_corrupt_cache_never_breaks_a_product(tmp_path, monkeypatch, text):
    monkeypatch.setenv("SPARSEGPU_CACHE_DIR", str(tmp_path))
    (tmp_path / CACHE_FILE).write_text(text)
    backend = SweepBackend("sweep-corrupt")
    sg.register_backend(backend, replace=True)
    try:
        A = sg.csr_matrix(np.eye(6))
        with pytest.warns(TuningCacheWarning):
            y = sg.matvec(A, np.arange(6.0), backend="sweep-corrupt")
        np.testing.assert_allclose(y, np.arange(6.0))
        assert _planning.plan_for(A, backend="sweep-corrupt").policy.source == "default"
    finally:
        sg.unregister_backend("sweep-corrupt")


# ------------------------------------------------------------------------ key derivation
def write_tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


KERNELS = {"csr_vector.cu": "__global__ void k() {}", "common.cuh": "#pragma once"}


def test_kernel_digest_is_stable(tmp_path):
    a = kernel_sources_digest(write_tree(tmp_path / "a", KERNELS))
    b = kernel_sources_digest(write_tree(tmp_path / "b", KERNELS))
    assert a == b


CHANGES = {
    "edited": {**KERNELS, "csr_vector.cu": "__global__ void k() { }"},
    "added": {**KERNELS, "swcache.cu": "// new family"},
    "renamed": {"csr_vector2.cu": KERNELS["csr_vector.cu"], "common.cuh": KERNELS["common.cuh"]},
    "in_subdirectory": {**KERNELS, "detail/load.cuh": "#pragma once"},
}


@pytest.mark.parametrize("files", CHANGES.values(), ids=CHANGES.keys())
def test_kernel_digest_changes_when_sources_change(tmp_path, files):
    before = kernel_sources_digest(write_tree(tmp_path / "before", KERNELS))
    after = kernel_sources_digest(write_tree(tmp_path / "after", files))
    assert before != after


def test_kernel_digest_ignores_bytecode_caches(tmp_path):
    before = kernel_sources_digest(write_tree(tmp_path / "k", KERNELS))
    write_tree(tmp_path / "k", {"__pycache__/x.cpython-311.pyc": "bytes"})
    assert kernel_sources_digest(tmp_path / "k") == before


def test_package_kernel_digest_is_a_sha256():
    digest = kernel_sources_digest()
    assert len(digest) == 64 and int(digest, 16) >= 0


CONTEXT_CHANGES = {
    "device": "NVIDIA H100",
    "compute_capability": "8.9",
    "multiprocessors": 114,
    "cuda_runtime": "12.4",
    "cuda_driver": "12.8",
    "sparsegpu": "0.2.0",
    "kernel_sources": "cd" * 32,
}


@pytest.mark.parametrize("field_name", CONTEXT_CHANGES.keys())
def test_context_key_changes_with_each_field(field_name, cache):
    changed = dataclasses.replace(CONTEXT, **{field_name: CONTEXT_CHANGES[field_name]})
    assert changed.digest != CONTEXT.digest
    cache.record(CONTEXT, [entry()])
    assert lookup(cache, context=changed) is None


def test_context_key_of_the_same_fields_is_the_same():
    assert dataclasses.replace(CONTEXT).digest == CONTEXT.digest


def test_arch_names_the_compute_capability():
    assert CONTEXT.arch == "sm_90"
    assert cache_mod.host_context().arch == "host"


def test_host_context_carries_version_and_kernel_digest():
    context = cache_mod.host_context()
    assert context.sparsegpu == sg.__version__
    assert context.kernel_sources == kernel_sources_digest()


def test_host_residence_gets_the_host_context():
    assert cache_mod.current_context(HOST_COPY) == cache_mod.host_context()


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEGPU_CACHE_DIR", str(tmp_path / "here"))
    assert TuningCache().path == tmp_path / "here" / CACHE_FILE


def test_cache_dir_defaults_to_the_user_cache_dir(monkeypatch):
    platformdirs = pytest.importorskip("platformdirs")

    monkeypatch.delenv("SPARSEGPU_CACHE_DIR")
    expected = Path(platformdirs.user_cache_dir("sparsegpu", appauthor=False))
    assert sg._files.cache_dir() == expected


# ------------------------------------------------------------------------ lookup order
def defaults_file(tmp_path, entries_by_arch) -> Path:
    path = tmp_path / "defaults.json"
    doc = {
        "format": "sparsegpu-tuning-defaults",
        "schema": 1,
        "devices": {a: [e.to_json() for e in es] for a, es in entries_by_arch.items()},
    }
    path.write_text(json.dumps(doc))
    return path


def test_shipped_defaults_file_has_the_real_schema():
    import importlib.resources

    with importlib.resources.as_file(
        importlib.resources.files("sparsegpu.engine") / "tuning_defaults.json"
    ) as path:
        shipped = TuningCache(defaults=path).shipped()
    assert shipped["sm_90"], "the H200 autotune winners ship as sm_90 defaults"
    for entries in shipped.values():
        assert all(isinstance(e, TunedEntry) for e in entries.values())
        assert all(e.gb_per_s > 0 and e.matrix for e in entries.values())


def _shipped_entries():
    import importlib.resources

    with importlib.resources.as_file(
        importlib.resources.files("sparsegpu.engine") / "tuning_defaults.json"
    ) as path:
        return {a: dict(es) for a, es in TuningCache(defaults=path).shipped().items()}


def test_shipped_bfloat16_entries_are_skipped_without_ml_dtypes(monkeypatch):
    """A plain install (no ml_dtypes) keeps every other shipped entry (issue 33)."""
    from sparsegpu.device import _dtypes

    if _dtypes.BFLOAT16 is None:
        pytest.skip("ml_dtypes is not installed: the comparison needs both worlds")
    monkeypatch.setattr(cache_mod, "_defaults_memo", {})
    full = _shipped_entries()["sm_90"]
    assert any(e.value_dtype == "bfloat16" for e in full.values())
    monkeypatch.setattr(cache_mod, "_defaults_memo", {})
    monkeypatch.setattr(_dtypes, "BFLOAT16", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = _shipped_entries()["sm_90"]
    assert plain == {k: e for k, e in full.items() if e.value_dtype != "bfloat16"}
    assert len(plain) > 10


def test_user_cache_entries_in_bfloat16_are_skipped_without_ml_dtypes(cache, monkeypatch):
    from sparsegpu.device import _dtypes

    cache.record(CONTEXT, [entry(), entry(value_dtype="bfloat16", row_class="short")])
    monkeypatch.setattr(cache_mod, "_read_memo", {})
    monkeypatch.setattr(_dtypes, "BFLOAT16", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lookup(cache).knobs["block_size"] == 128
        assert lookup(cache, entry(value_dtype="bfloat16", row_class="short")) is None
    assert aside_files(cache) == []  # not taken for a corrupt file


def test_user_cache_comes_before_shipped_defaults(tmp_path):
    shipped = defaults_file(tmp_path, {"sm_90": [entry(block_size=64)]})
    cache = TuningCache(tmp_path / "user", defaults=shipped)
    cache.record(CONTEXT, [entry(block_size=512)])
    found = lookup(cache)
    assert found.knobs["block_size"] == 512 and found.origin == "tuned"


def test_shipped_defaults_come_next(tmp_path):
    shipped = defaults_file(tmp_path, {"sm_90": [entry(block_size=64)]})
    found = lookup(TuningCache(tmp_path / "user", defaults=shipped))
    assert found.knobs["block_size"] == 64 and found.origin == "shipped"
    assert found.policy(CsrVectorPolicy).source == "shipped"


def test_shipped_defaults_of_another_architecture_do_not_apply(tmp_path):
    shipped = defaults_file(tmp_path, {"sm_80": [entry(block_size=64)]})
    assert lookup(TuningCache(tmp_path / "user", defaults=shipped)) is None


def test_unusable_shipped_defaults_give_a_warning_and_nothing(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "sparsegpu-tuning-defaults", "schema": 1, "devices": 3}')
    with pytest.warns(TuningCacheWarning, match="shipped tuning defaults"):
        assert lookup(TuningCache(tmp_path / "user", defaults=broken)) is None


@pytest.fixture
def sweep_backend():
    backend = SweepBackend("sweep-lookup")
    sg.register_backend(backend, replace=True)
    yield backend
    sg.unregister_backend("sweep-lookup")


def medium_matrix():
    """A 100x100 matrix with 10 entries per row near the diagonal: row class 'medium'."""
    rng = np.random.default_rng(0)
    dense = np.zeros((100, 100))
    for i in range(100):
        first = min(max(i - 5, 0), 90)
        dense[i, first + rng.choice(10, 10, replace=False)] = rng.uniform(1, 2, 10)
    return sg.csr_matrix(dense)


def record_for(backend_name, **kw):
    TuningCache().record(
        cache_mod.host_context(),
        [entry(backend=backend_name, row_class="medium", **kw)],
    )


def test_default_policy_without_a_cache_entry_is_the_untuned_one(sweep_backend):
    policy = _planning.plan_for(medium_matrix(), backend="sweep-lookup").policy
    assert policy == UNTUNED and policy.source == "default"


def test_default_policy_comes_from_the_user_cache(sweep_backend):
    record_for("sweep-lookup", block_size=64)
    policy = _planning.plan_for(medium_matrix(), backend="sweep-lookup").policy
    assert policy == CsrVectorPolicy(block_size=64, threads_per_row=8)
    assert policy.source == "tuned"


def test_default_policy_comes_from_shipped_defaults_next(sweep_backend, tmp_path, monkeypatch):
    shipped = defaults_file(tmp_path, {"host": [entry(backend="sweep-lookup", block_size=32)]})
    monkeypatch.setattr(
        cache_mod, "default_cache", lambda: TuningCache(tmp_path / "empty", defaults=shipped)
    )
    policy = _planning.plan_for(medium_matrix(), backend="sweep-lookup").policy
    assert policy.block_size == 32 and policy.source == "shipped"


def test_default_policy_ignores_entries_of_another_row_class(sweep_backend):
    TuningCache().record(
        cache_mod.host_context(), [entry(backend="sweep-lookup", row_class="long")]
    )
    assert _planning.plan_for(medium_matrix(), backend="sweep-lookup").policy == UNTUNED


def test_unusable_entry_warns_and_falls_back_to_untuned(sweep_backend):
    record_for("sweep-lookup", knobs={"block_size": 128, "warps": 3})
    with pytest.warns(TuningCacheWarning, match="unusable"):
        policy = _planning.plan_for(medium_matrix(), backend="sweep-lookup").policy
    assert policy == UNTUNED


def test_explicit_policy_beats_the_cache(sweep_backend):
    record_for("sweep-lookup", block_size=64)
    explicit = CsrVectorPolicy(block_size=1024, threads_per_row=1)
    plan = _planning.plan_for(medium_matrix(), backend="sweep-lookup", policy=explicit)
    assert plan.policy is explicit


def test_missing_platformdirs_never_breaks_a_product(sweep_backend, monkeypatch):
    monkeypatch.delenv("SPARSEGPU_CACHE_DIR")
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    with pytest.warns(TuningCacheWarning, match="could not be read"):
        policy = _planning.plan_for(medium_matrix(), backend="sweep-lookup").policy
    assert policy == UNTUNED


def test_backends_without_knobs_never_read_the_cache(monkeypatch):
    def fail():
        raise AssertionError("the cache was read for a knob-less backend")

    monkeypatch.setattr(cache_mod, "default_cache", fail)
    A = sg.csr_matrix(np.eye(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(sg.matvec(A, np.ones(4), backend="host-copy"), np.ones(4))


def test_auto_lookup_names_the_fastest_measured_candidate(tmp_path):
    cache = TuningCache(tmp_path)
    cache.record(
        cache_mod.host_context(),
        [
            entry(backend="rank-a", row_class="medium", gb_per_s=10.0),
            entry(backend="rank-c", row_class="medium", gb_per_s=30.0),
            entry(backend="rank-d", row_class="medium", gb_per_s=50.0),
        ],
    )
    mirror = medium_matrix()._sg_mirror(HOST_COPY, np.float64)
    names = ["rank-a", "rank-b", "rank-c"]  # rank-d is not usable for this product
    assert _select.tuned_winner(mirror, np.float64, names, cache) == "rank-c"


def test_auto_lookup_defers_without_entries(tmp_path):
    mirror = medium_matrix()._sg_mirror(HOST_COPY, np.float64)
    assert _select.tuned_winner(mirror, np.float64, ["rank-a"], TuningCache(tmp_path)) is None
