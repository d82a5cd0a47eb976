"""Where sparsegpu's ALG1 first product spends its time beyond cuSPARSE's (issue 47).

``sg.spgemm(A, A, algorithm="alg1")`` at planning level ``estimate`` runs the same cuSPARSE
calls as cuSPARSE called directly (``benchmarks.common.DirectSpGEMM``) and cupyx; what it
adds is host work between them, and cuSPARSE's ALG1 waits for the device twice (the sizes
of its buffers and of C), so host work there leaves the device idle. On fit-class matrices
only (a 2-D 5-point stencil 550^2, about the held-out P1 mesh's 300k rows; the 3-D 7-point
stencil 64^3; the bundled SuiteSparse matrices) and a P1 mesh of another size and seed than
the held-out one (to see the path, not to fit anything), float64, this prints:

* CUDA-event medians, in alternation, of cuSPARSE direct, cupyx, ``alg1`` and the rule's
  first product;
* the host's own time per call (``perf_counter`` around the call with the device's work
  already drained, less the direct call's, which waits for the same kernels);
* a cProfile of ``--profile-calls`` calls of ``alg1``, the functions by own time.

``--first``: the host timeline of first products of new patterns (the calls mode's fit
matrices that run ALG1, and the P1 instance above), each function's entry and exit marked
(the hash rows' too: short rows first, the listing's host wait, each launch), beside
cupyx's own (its ``spgemm`` and descriptor making marked). ``--layers``: the same
first products through each layer of the path, wall clock, unmarked (``A @ A``; with
spare timing events given beforehand; with planning's stopwatch on the host clock;
``sg.spgemm`` at planning ``estimate``; the engine's ``multiply``; cuSPARSE called
directly, every descriptor made in the call; cupyx), and single host pieces' microseconds
from an idle device.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_alg1_overhead --out FILE.json
    python -m benchmarks.experiments.spgemm_alg1_overhead --layers --repeat 15 --out FILE.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pathlib
import pstats
import sys
import time

import numpy as np
import scipy.sparse as sp

from benchmarks import common


def matrices(xp) -> list:
    from sparsegpu import datasets
    from sparsegpu.datasets import synthetic

    out = [
        ("stencil2d5_550", lambda: synthetic.stencil_2d(550, xp=xp)),
        ("stencil3d7_64", lambda: synthetic.stencil_3d(64, points=7, xp=xp)),
        # an instance of the held-out P1 mesh's class (another size and seed), to see the
        # path's time on rows in random order; no threshold is read from it
        ("fem_p1_250k_random_seed11", lambda: common.fem_p1(250_000, "random", seed=11)),
    ]
    return out + [(n, lambda n=n: datasets.load(n)) for n in datasets.names()]


def host_ms(fn, cupy, repeat: int) -> float:
    """Median of ``repeat`` wall clocks of ``fn()`` (``spgemm_first.wall_ms``: from an
    idle device to its synchronized result)."""
    from benchmarks import spgemm_first

    return float(np.median([spgemm_first.wall_ms(fn, cupy)[0] for _ in range(repeat)]))


def profile(fn, calls: int, top: int, sort: str = "tottime") -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats(sort).print_stats(top)
    return text.getvalue()


MODULE = "benchmarks.experiments.spgemm_alg1_overhead"  # its result files' command
_CALLS = ("spGEMM_workEstimation", "spGEMM_compute", "spMatGetSize", "spGEMM_copy")


def _targets():
    """``(owner, attribute)`` of the functions :func:`host_phases` marks beside cuSPARSE's."""
    from cupy_backends.cuda.libs import cusparse as lib

    from sparsegpu.backends import cusparse as cusparse_backend
    from sparsegpu.backends import cusparse_spgemm, hash_spgemm, spgemm
    from sparsegpu.classes import _matrix, _products
    from sparsegpu.device import _host_words, _launch
    from sparsegpu.engine import _sparse_dispatch, _sparse_planning

    out = [(lib, name) for name in _CALLS]
    out += [(lib, "createCsr"), (lib, "spGEMM_createDescr"), (lib, "csrSetPointers")]
    out += [
        (_products._sparse_dispatch, "check_operands"),
        (_sparse_dispatch, "_on_device"),
        (_sparse_dispatch, "operands"),
        (_sparse_dispatch, "level_in_force"),
        (_sparse_dispatch._sparse_planning, "multiply_sparse"),
        (_sparse_planning.spgemm, "canonical"),
        (_sparse_planning, "Budget"),
        (_sparse_planning, "_pair"),
        (_sparse_planning.spgemm, "multiply"),
        (spgemm, "compute_operands"),
        (spgemm, "run_once"),
        (spgemm, "ResultSink"),
        (hash_spgemm.GpuSpgemm, "_multiply"),
        (cusparse_spgemm, "_Call"),
        (cusparse_spgemm, "thread_handle"),
        (cusparse_spgemm, "_operand"),
        (cusparse_spgemm.ResultSink, "allocate"),
        (cusparse_spgemm, "_nnz"),
        (cusparse_spgemm.ResultSink, "finish"),
        (cusparse_spgemm.CusparseSpgemm, "_multiply_into"),
        (cusparse_spgemm.CusparseSpgemm, "_compute"),
        (spgemm.Budget, "release"),
        (spgemm.DeviceMatrix, "__init__"),
        (cusparse_backend._Descriptor, "__del__"),
        (lib, "spGEMM_destroyDescr"),
        (lib, "destroySpMat"),
        (spgemm, "Outcome"),
        (hash_spgemm.GpuSpgemm, "rule"),
        (_sparse_planning._timing, "Stopwatch"),
        (_sparse_planning._Pair, "read_times"),
        (spgemm.DeviceMatrix, "settle"),
        (spgemm, "pattern_key"),
        (_sparse_dispatch, "_csr"),
        (spgemm, "mark_canonical"),
        (_sparse_planning, "_finished"),
        (spgemm.DeviceMatrix, "queued"),
        (spgemm, "describe_product"),
        (_sparse_dispatch, "_with_operands_index_dtype"),
        (_matrix._SparseGPUMixin, "_sg_on_device"),
        (_sparse_dispatch, "where"),
        (_sparse_dispatch._cuda, "ensure_context"),
        (hash_spgemm.GpuSpgemm, "products_ahead"),
        (hash_spgemm.GpuSpgemm, "_rule_path"),
        (hash_spgemm.GpuSpgemm, "rule_and_products"),
        (hash_spgemm.GpuSpgemm, "_rule"),
        (hash_spgemm._DeviceCount, "__init__"),
        (hash_spgemm._DeviceCount, "_read"),
        (_host_words.HostWords, "take"),
        (hash_spgemm._CountSlot, "launch"),
        (_launch.KernelLaunch, "__call__"),
        (spgemm.ResultSink, "before_launch"),
        (spgemm.Counted, "check"),
        (spgemm, "with_index_dtype"),
        (spgemm, "products_decide_indices"),
        (spgemm.SpgemmEngine, "check_algorithm"),
        (spgemm.SpgemmEngine, "multiply"),
        (_sparse_planning, "_rule_product"),
    ]
    # the hash rows' pieces (short rows first, the listing's host wait, each launch)
    out += [
        (hash_spgemm, name)
        for name in (
            "hash_multiply", "_short_first_multiply", "_short_first_symbolic", "_list_rows",
            "_classes", "_short_slotted", "_count_tables", "_short_first_numeric",
            "_short_numeric", "_fill_tables", "_launch",
        )
    ]  # fmt: skip
    return [(owner, name) for owner, name in out if name in owner.__dict__]


def _cupyx_targets():
    """``(owner, attribute)`` of cuSPARSE's calls and cupyx's own steps around them."""
    import cupyx.cusparse as cupyx_cusparse
    from cupy_backends.cuda.libs import cusparse as lib

    out = [(lib, name) for name in _CALLS]
    out += [(lib, "createCsr"), (lib, "spGEMM_createDescr"), (lib, "csrSetPointers")]
    out += [(cupyx_cusparse, "spgemm"), (cupyx_cusparse.SpMatDescriptor, "create")]
    return [(owner, name) for owner, name in out if name in owner.__dict__]


def host_phases(fn, calls: int, targets=None, by_occurrence: bool = False) -> dict:
    """Median host microseconds of ``fn()``'s stretches around its cuSPARSE calls:
    ``before`` (the call to the first ``spGEMM_workEstimation``), each library call and the
    gap after it, and ``after`` (``spGEMM_copy``'s return to ``fn``'s). Marks are keyed by
    their place among all marks, or (``by_occurrence``) by their name and how many of that
    name came before (``_operand> #1``), so that calls whose paths differ by a mark still
    line up."""
    from cupy_backends.cuda.libs import cusparse as lib

    marks = []
    targets = targets or [(lib, name) for name in _CALLS]
    originals = {(owner, name): owner.__dict__[name] for owner, name in targets}

    def wrapped(name, original):
        if isinstance(original, (staticmethod, classmethod)):
            return type(original)(wrapped(name, original.__func__))

        def call(*args, **kwargs):
            marks.append((name + ">", time.perf_counter_ns()))
            out = original(*args, **kwargs)
            marks.append((name + "<", time.perf_counter_ns()))
            return out

        return call

    samples: dict = {}
    try:
        for (owner, name), original in originals.items():
            setattr(owner, name, wrapped(name, original))
        for _ in range(calls):
            marks.clear()
            start = time.perf_counter_ns()
            fn()
            end = time.perf_counter_ns()
            points = [("start", start), *marks, ("end", end)]
            seen: dict = {}
            for i, (name, t) in enumerate(points):  # the i-th mark's time from the start
                seen[name] = seen.get(name, 0) + 1
                key = f"{name} #{seen[name]}" if by_occurrence else f"{i:02d} {name}"
                samples.setdefault(key, []).append((t - start) / 1e3)
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)
    return {k: float(np.median(v)) for k, v in samples.items()}


def micro(A, cupy) -> dict:
    """Microseconds a call of each piece of the product's host path takes (timeit's best
    of 5 rounds of 2,000 calls), on ``A @ A``'s operands and its result."""
    import timeit

    from sparsegpu.backends import spgemm
    from sparsegpu.engine import _sparse_dispatch, _sparse_planning

    engine, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
    left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
    product = A @ A
    stored = product._sg_mirror(residence, value_dtype)
    stream = cupy.cuda.get_current_stream()
    pieces = {
        "where": lambda: _sparse_dispatch.where(A, A),
        "operands": lambda: _sparse_dispatch.operands(A, A, residence, value_dtype),
        "canonical": lambda: spgemm.canonical(left),
        "pair": lambda: _sparse_planning._pair(left, right),
        "Budget": lambda: spgemm.Budget(cupy),
        "compute_operands": lambda: spgemm.compute_operands(engine, left, right, None),
        "check_algorithm": lambda: engine.check_algorithm("alg1"),
        "DeviceMatrix": lambda: spgemm.DeviceMatrix(
            stored.data, stored.indices, stored.indptr, stored.shape, residence
        ),
        "describe_product": lambda: spgemm.describe_product(stored, left, right),
        "sg_on_device": lambda: type(A)._sg_on_device(stored, A.shape, A),
        "cupy.empty": lambda: cupy.empty(16, np.int32),
        "stream.record": lambda: stream.record(),
        "event_no_timing": lambda: cupy.cuda.Event(disable_timing=True).record(stream),
        "ctypes.data": lambda: np.ones(1).ctypes.data,
    }
    out = {}
    for name, fn in pieces.items():
        best = min(timeit.repeat(fn, number=2000, repeat=5))
        out[name] = best / 2000 * 1e6
    return out


def first_calls(args, cupy) -> int:
    """``--first``: the timeline of the first ``A @ A`` of a new pattern (the calls mode's
    fresh operands) on the calls mode's fit matrices that run ALG1, beside cupyx's first
    product on fresh operands (wall clock, medians)."""
    import cupyx.scipy.sparse as cupyx_sparse

    from benchmarks import spgemm_first

    out = []
    for name, base, identity, Acx in _first_operands(args, cupy, cupyx_sparse, FIRST_MATRICES):
        for _ in range(2):  # kernels compiled
            A = spgemm_first.fresh_sg(base, identity)
            A @ A
            B = spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
            B @ B
        ours, theirs = [], []
        timelines: dict = {}
        cupyx_timelines: dict = {}
        for _ in range(args.repeat):
            A = spgemm_first.fresh_sg(base, identity)
            ours.append(host_ms(lambda A=A: A @ A, cupy, 1))
            B = spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
            theirs.append(host_ms(lambda B=B: B @ B, cupy, 1))
            A = spgemm_first.fresh_sg(base, identity)
            cupy.cuda.Device().synchronize()
            marked = host_phases(lambda A=A: A @ A, 1, _targets(), by_occurrence=True)
            for key, value in marked.items():
                timelines.setdefault(key, []).append(value)
            B = spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
            cupy.cuda.Device().synchronize()
            for key, value in host_phases(lambda B=B: B @ B, 1, _cupyx_targets()).items():
                cupyx_timelines.setdefault(key, []).append(value)
        print(f"--- {name}: first A @ A {np.median(ours):.3f} ms, cupyx {np.median(theirs):.3f} "
              f"ms; timeline (us from the call, medians):")  # fmt: skip
        keys = [k for k, v in timelines.items() if len(v) == args.repeat]
        keys.sort(key=lambda k: np.median(timelines[k]))
        for key in keys:
            print(f"  {key:50s} {np.median(timelines[key]):9.1f}")
        print("  cupyx's timeline:")
        cupyx_keys = [k for k, v in cupyx_timelines.items() if len(v) == args.repeat]
        for key in cupyx_keys:
            print(f"  {key:50s} {np.median(cupyx_timelines[key]):9.1f}")
        out.append({"matrix": name, "first_ms": ours, "cupyx_ms": theirs,
                    "timeline": {k: float(np.median(timelines[k])) for k in keys},
                    "cupyx_timeline": {k: float(np.median(cupyx_timelines[k]))
                                       for k in cupyx_keys}})  # fmt: skip
        common.save_partial({**common.experiment_header(MODULE), "first": out}, args.out)
    return 0


# the calls mode's fit matrices that ``--first`` follows (with the P1 instance)
FIRST_MATRICES = {"stencil3d7_120", "powerlaw_1500k"}


def _first_operands(args, cupy, cupyx_sparse, chosen):
    """``(name, base, identity, cupyx copy)`` of each of the calls mode's fit matrices in
    ``chosen`` and of the P1 mesh's class on another size and seed than the held-out one
    (to see the path, not to fit anything), as ``spgemm_first.call_operands`` makes them
    (``--only``: those whose names contain it)."""
    from benchmarks import spgemm_first

    listed = [m for m in spgemm_first.call_matrices(cupy) if m[1] in chosen]
    p1 = ("fit", "fem_p1_250k_random_seed11", lambda: common.fem_p1(250_000, "random", seed=11))
    for group, name, build in [*listed, p1]:
        if args.only and args.only not in name:
            continue
        S = sp.csr_matrix(build())
        S.sum_duplicates()
        _, base, identity, Acx = spgemm_first.call_operands(group, name, S, np.float64,
                                                            cupyx_sparse)  # fmt: skip
        yield name, base, identity, Acx


def cold_pieces(A, cupy, repeat: int) -> dict:
    """Microseconds of single calls of the pieces of a first product's host path, each
    from an idle, synchronized device (medians of ``repeat``)."""
    from sparsegpu.backends import spgemm
    from sparsegpu.engine import _sparse_dispatch, _sparse_planning
    from sparsegpu.measure import _timing

    engine, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
    left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
    product = A @ A
    stored = product._sg_mirror(residence, value_dtype)
    pieces = {
        "Event()": lambda: cupy.cuda.Event(),
        "Stopwatch+stop": lambda: _timing.Stopwatch(on_host=False).stop(),
        "where": lambda: _sparse_dispatch.where(A, A),
        "_on_device": lambda: _sparse_dispatch._on_device(A, A),
        "operands": lambda: _sparse_dispatch.operands(A, A, residence, value_dtype),
        "canonical": lambda: spgemm.canonical(left),
        "_pair": lambda: _sparse_planning._pair(left, right),
        "rule_and_products": lambda: engine.rule_and_products(left, right),
        "total_products": lambda: engine.total_products(left, right),
        "compute_operands": lambda: spgemm.compute_operands(engine, left, right, None, 1),
        "Budget": lambda: spgemm.Budget(cupy),
        "queued": lambda: stored.queued(),
        "describe_product": lambda: spgemm.describe_product(stored, left, right),
        "sg_on_device": lambda: type(A)._sg_on_device(stored, A.shape, A),
    }
    out = {}
    for key, fn in pieces.items():
        samples = []
        for _ in range(repeat):
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e6)
        out[key] = float(np.median(samples))
    return out


def turning_samples(variants, operands, cupy, repeat: int, measured=None, extra=None) -> dict:
    """``{variant: [ms]}``: each variant's call (``variants[key](A)`` gives it, ``A`` fresh
    operands made by a product) and cupyx's product on fresh operands (key ``"cupyx"``),
    wall clock from an idle device to the synchronized result, ``repeat`` samples after
    two unkept ones. The order turns by one each sample, so that no column always runs
    first: in a fixed order `A @ A`, first after cupyx, read 35-100 us over `spare
    events`. ``measured(key, fn)``: ``(ms, something else)`` instead of the wall clock,
    the something else kept in ``extra[key]``."""
    import cupyx.scipy.sparse as cupyx_sparse

    from benchmarks import spgemm_first

    base, identity, Acx = operands
    order = [*variants, "cupyx"]
    times: dict = {k: [] for k in order}
    for sample in range(repeat + 2):
        turn = sample % len(order)
        for key in order[turn:] + order[:turn]:
            if key == "cupyx":
                B = spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
                fn = lambda B=B: B @ B  # noqa: E731
            else:
                fn = variants[key](spgemm_first.fresh_sg(base, identity))
            if measured is None:
                ms, other = spgemm_first.wall_ms(fn, cupy)[0], None
            else:
                ms, other = measured(key, fn)
            if sample >= 2:
                times[key].append(ms)
                if extra is not None:
                    extra[key].append(other)
    return times


def layer_calls(args, cupy) -> int:
    """``--layers``: the first ``A @ A`` of a new pattern through each layer of sparsegpu's
    path, on fresh operands (the calls mode's), wall clock from an idle device to the
    synchronized result, medians, in alternation (the order turning by one column each
    sample): ``A @ A``; ``sg.spgemm`` at planning
    ``estimate`` (no planning's bookkeeping); the engine's ``multiply`` on the mirrors
    (``alg1``: no dispatch, no rule); cuSPARSE ALG1 called directly with every descriptor
    made for the call (``DirectSpGEMM`` made inside the stopwatch); cupyx."""
    import cupyx.scipy.sparse as cupyx_sparse

    import sparsegpu as sg
    from benchmarks import spgemm_first
    from benchmarks.common import DirectSpGEMM
    from sparsegpu.backends import spgemm
    from sparsegpu.engine import _sparse_dispatch

    header = common.experiment_header(MODULE)
    out = []
    for name, base, identity, Acx in _first_operands(args, cupy, cupyx_sparse, {"powerlaw_1500k"}):

        def mirrors(A):
            engine, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
            left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
            return engine, spgemm.canonical(left), spgemm.canonical(right)

        def engine_call(A):
            engine, left, right = mirrors(A)
            cupy.cuda.Device().synchronize()
            return lambda: spgemm.multiply(engine, left, right, "alg1", spgemm.Budget(cupy))

        def direct_call(A):
            _, left, right = mirrors(A)
            cupy.cuda.Device().synchronize()
            return lambda: DirectSpGEMM(left, right)()

        def spare_events(A):
            from sparsegpu.measure import _timing

            device = cupy.cuda.runtime.getDevice()
            _timing._give_back(device, *(cupy.cuda.Event() for _ in range(2)))
            return lambda: A @ A

        def host_watch(A):
            from sparsegpu.engine import _sparse_planning

            real = _sparse_planning._timing.Stopwatch

            def call():
                _sparse_planning._timing.Stopwatch = lambda on_host: real(True)
                try:
                    return A @ A
                finally:
                    _sparse_planning._timing.Stopwatch = real

            return call

        variants = {
            "A @ A": lambda A: lambda: A @ A,
            "spare events": spare_events,
            "host watch": host_watch,
            "estimate": lambda A: lambda: sg.spgemm(A, A, planning="estimate"),
            "engine alg1": engine_call,
            "direct": direct_call,
        }
        grew: dict = {k: [] for k in [*variants, "cupyx"]}  # CuPy's pool growth, MB
        pool = cupy.get_default_memory_pool()

        def measured(key, fn, pool=pool):
            held = pool.total_bytes()
            ms = spgemm_first.wall_ms(fn, cupy)[0]
            return ms, (pool.total_bytes() - held) / 1e6

        times = turning_samples(variants, (base, identity, Acx), cupy, args.repeat, measured, grew)
        medians = {k: float(np.median(v)) for k, v in times.items()}
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()) + " ms")
        growth = ", ".join(f"{k} {np.mean(v):.0f}" for k, v in grew.items())
        print(f"  pool grew (MB, mean): {growth}")
        cold = cold_pieces(spgemm_first.fresh_sg(base, identity), cupy, args.repeat)
        print("  cold pieces (us): " + ", ".join(f"{k} {v:.1f}" for k, v in cold.items()))
        out.append(
            {"matrix": name, "medians_ms": medians, "samples_ms": times, "cold_us": cold,
             "pool_grew_mb": grew}
        )  # fmt: skip
        common.save_partial({**header, "layers": out}, args.out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--profile-calls", type=int, default=40)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--only", help="the matrices whose names contain this")
    parser.add_argument("--sort", default="tottime", help="the profile's order (pstats keys)")
    parser.add_argument("--first", action="store_true", help="first products of new patterns")
    parser.add_argument("--layers", action="store_true", help="first products by layer")
    args = parser.parse_args(argv)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    if args.first:
        return first_calls(args, cupy)
    if args.layers:
        return layer_calls(args, cupy)
    import cupyx.scipy.sparse as cupyx_sparse

    import sparsegpu as sg
    from benchmarks.common import DirectSpGEMM
    from sparsegpu import measure
    from sparsegpu.backends import spgemm
    from sparsegpu.engine import _sparse_dispatch

    rows = []
    for name, build in matrices(cupy):
        if args.only and args.only not in name:
            continue
        S = sp.csr_matrix(build())
        if S.shape[0] != S.shape[1]:
            continue
        S.sum_duplicates()
        A = sg.csr_matrix(S)
        A.planning = "estimate"
        Acx = cupyx_sparse.csr_matrix(A)
        engine, residence, value_dtype, _ = _sparse_dispatch.where(A, A)
        left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
        left = spgemm.canonical(left)
        direct = DirectSpGEMM(left, left)
        fns = {
            "direct": direct,
            "cupyx": lambda Acx=Acx: Acx @ Acx,
            "alg1": lambda A=A: sg.spgemm(A, A, algorithm="alg1"),
            "first": lambda A=A: A @ A,
        }
        timing = measure.cuda_time_interleaved(fns, warmup=2, repeat=args.repeat)
        row = {"matrix": name, "nnz": int(S.nnz), "rows": int(S.shape[0])}
        row.update({f"{k}_ms": t.median_ms for k, t in timing.items()})
        row.update({f"{k}_wall_ms": host_ms(fn, cupy, args.repeat) for k, fn in fns.items()})
        row["ran"] = sg.explain(A, A).last.algorithm
        row["phases"] = {k: host_phases(fns[k], 50) for k in ("direct", "cupyx", "alg1")}
        row["timeline"] = host_phases(fns["alg1"], 50, _targets())
        row["micro"] = micro(A, cupy)
        row["profile_alg1"] = profile(fns["alg1"], args.profile_calls, args.top, args.sort)
        row["profile_direct"] = profile(direct, args.profile_calls, 12)
        rows.append(row)
        print(
            f"{name}: " + ", ".join(f"{k} {row[f'{k}_ms']:.3f}/{row[f'{k}_wall_ms']:.3f}"
                                    for k in fns) + f" ms (events/wall); ran {row['ran']}",
            flush=True,
        )  # fmt: skip
        common.save_partial({"rows": rows}, args.out)
    for row in rows[:2]:
        print(f"--- {row['matrix']}: alg1, {args.profile_calls} calls")
        print(row["profile_alg1"])
        print(f"--- {row['matrix']}: direct")
        print(row["profile_direct"])
    for row in rows:
        print(f"--- {row['matrix']}: host microseconds between the cuSPARSE calls (medians)")
        keys = list(row["phases"]["alg1"])
        for key in keys:
            cells = "  ".join(
                f"{k} {row['phases'][k].get(key, float('nan')):8.1f}" for k in row["phases"]
            )
            print(f"  {key:58s} {cells}")
        print(f"--- {row['matrix']}: host microseconds a call, by piece")
        for key, value in row["micro"].items():
            print(f"  {key:30s} {value:8.2f}")
        print(f"--- {row['matrix']}: alg1's timeline (microseconds from the call, medians)")
        for key, value in row["timeline"].items():
            print(f"  {key:50s} {value:8.1f}")
    print("| matrix | direct | cupyx | alg1 | first | (events; wall) | ran |")
    for r in rows:
        cells = " | ".join(f"{r[f'{k}_ms']:.3f}; {r[f'{k}_wall_ms']:.3f}" for k in fns)
        print(f"| {r['matrix']} | {cells} | {r['ran']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
