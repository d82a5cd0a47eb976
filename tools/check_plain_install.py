"""Check what a plain install gets of the shipped tuning (CI: ``.ci/run``).

The README's GPU install (``pip install -e ".[cuda13]"``) does not bring ml_dtypes, so the
shipped defaults' bfloat16 entries cannot be read there. They must be skipped while every
other entry loads and is used. Exits non-zero, saying what failed, unless:

1. ml_dtypes is not importable (with it, this would check nothing);
2. the shipped defaults load without a warning and keep exactly their entries other than
   bfloat16 (at least one of which ships, so the skip is exercised);
3. selection uses them: on an H200's tuning context, each GPU backend with a shipped entry
   for float64, int32 indices and the row class of a 2-D 5-point stencil gets that
   entry's policy as its default (source ``"shipped"``).

Run from the repository root: ``python tools/check_plain_install.py``.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import sys
import tempfile
import warnings


def main() -> int:
    if importlib.util.find_spec("ml_dtypes") is not None:
        print("ml_dtypes is installed: this check needs an install without it", file=sys.stderr)
        return 1
    warnings.simplefilter("error")  # a TuningCacheWarning is a failure here
    os.environ["SPARSEGPU_CACHE_DIR"] = tempfile.mkdtemp()  # no user cache: only what ships

    import sparsegpu as sg
    from sparsegpu.datasets import synthetic
    from sparsegpu.engine import _rules, _select, _tuning_store

    raw = json.loads(
        (importlib.resources.files("sparsegpu.engine") / _tuning_store.DEFAULTS_FILE).read_text(
            encoding="utf-8"
        )
    )["devices"]["sm_90"]
    kept = [e for e in raw if e["value_dtype"] != "bfloat16"]
    if len(kept) == len(raw):
        print("no bfloat16 entry ships: the skip this check is for is not exercised")
        return 1
    loaded = _tuning_store.default_cache().shipped().get("sm_90", {})
    if {e.key for e in loaded.values()} != {
        (e["backend"], e["value_dtype"], e["index_dtype"], e["row_class"]) for e in kept
    }:
        print(f"shipped sm_90 entries: {len(loaded)} loaded, {len(kept)} expected", file=sys.stderr)
        return 1

    h200 = _tuning_store.TuningContext(
        device="NVIDIA H200",
        compute_capability="9.0",
        multiprocessors=132,
        cuda_runtime="13.0",
        cuda_driver="13.0",
        sparsegpu=sg.__version__,
        kernel_sources=_tuning_store.kernel_sources_digest(),
    )
    _select.current_context = lambda residence: h200  # this machine may have no GPU
    A = sg.csr_matrix(synthetic.stencil_2d(64))
    mirror = A._sg_mirror(sg.engine._registry.get_backend("scipy").residence, A.dtype)
    row_class = _rules.row_class(mirror.stats)
    used = 0
    for backend in sg.engine._registry.registered().values():
        entry = loaded.get((backend.name, "float64", "int32", row_class))
        if entry is None or backend.residence.name != "cupy":
            continue
        policy = _select.default_policy(backend, mirror)
        if policy.source != "shipped" or policy != entry.policy(backend.policy_type):
            print(f"{backend.name}: got {policy}, shipped {entry.knobs}", file=sys.stderr)
            return 1
        used += 1
    if used == 0:
        print(f"no shipped float64 entry for the {row_class!r} class was tried", file=sys.stderr)
        return 1
    print(
        f"plain install: {len(loaded)} of {len(raw)} shipped sm_90 entries loaded (the "
        f"{len(raw) - len(kept)} bfloat16 ones skipped); {used} backends take their shipped "
        f"policy for a {row_class!r} float64 matrix"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
