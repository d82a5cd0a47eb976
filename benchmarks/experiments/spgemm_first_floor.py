"""How far below ``A @ A``'s first ALG1 product the host path could go (issue 47).

On the calls mode's fit matrices that run ALG1 (fresh operands, as ``spgemm_first --mode
calls`` makes them), wall clock from an idle device to the synchronized result, medians
in alternation (the order turning each sample):

* ``A @ A``: the product as a user calls it;
* ``flat``: the same primitives (mirrors, planning's pair, the products count, the
  budget, the result sink, cuSPARSE's calls, the result's wrapping) with the layers
  between them (dispatch's ``where``, the rule, ``compute_operands``, ``run_once``,
  ``check_algorithm``) left out: what the layering costs;
* ``bare``: the count and cuSPARSE's calls on the mirrors with nothing else (no pair, no
  budget, no sink, no queued event, no description of the product): the floor of a path
  that counts the products first;
* ``direct``: cuSPARSE ALG1 called directly, every descriptor made in the call;
* ``cupyx``.

Between ``A @ A`` and ``flat``, each layer cut in turn: ``dispatched`` (the dispatch's
``multiply``, no operator), ``known where`` (the engine and residence found beforehand),
``A @ A no gc`` (the cyclic collector off during the call), ``planned`` (planning's
``multiply_sparse`` on the mirrors), ``ruled`` (planning's first-product steps by hand);
between ``bare`` and ``flat``, one piece of ``flat`` at a time (``+pair``, ``+budget``,
``+sink``, ``+finished``). ``--variants`` picks some.

It also prints the container objects each call allocates (what the cyclic collector counts
towards a collection), times the products count alone from an idle device (CUDA events
around the kernel, and the host's wait for it), and times ``A @ A`` as
``((A.T) @ (A.T)).T``, piece by piece: power-law rows have short columns, so every row of
the transposed product is short. A probe of the path, not a result: nothing is fitted on
it.

Usage (on a GPU machine)::

    python -m benchmarks.experiments.spgemm_first_floor [--only NAME] [--repeat 15]
        [--variants "A @ A,flat,bare"] [--out FILE.json] [--md FILE.md]
    python -m benchmarks.experiments.spgemm_first_floor --from-json FILE.json --md FILE.md
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

from benchmarks import common

FLOOR_MATRICES = {"powerlaw_1500k"}


def variants(cupy):
    import sparsegpu as sg  # noqa: F401
    from benchmarks.common import DirectSpGEMM
    from sparsegpu.backends import cusparse_spgemm, hash_spgemm, spgemm
    from sparsegpu.device._mirror import CUPY, DeviceMatrix
    from sparsegpu.engine import _sparse_dispatch, _sparse_planning

    engine = _sparse_dispatch._GPU_ENGINE

    def mirrors(A):
        dtype = A.dtype
        left = spgemm.canonical(_sparse_dispatch._csr(A, CUPY, dtype))
        return left, left

    def new_pair(A):
        """The mirrors, a budget and planning's pair counted as seen once more."""
        left, right = mirrors(A)
        pair = _sparse_planning._pair(left, right)
        pair.seen += 1
        return left, right, spgemm.Budget(cupy), pair

    def flat(A):
        def call():
            left, right, budget, pair = new_pair(A)
            counted = hash_spgemm._DeviceCount(left, right, hash_spgemm.DEFAULT_PATH)
            counted.expect(lambda exact: exact <= spgemm.INT32_MAX, "within 32-bit indices")
            shape = (left.shape[0], right.shape[1])
            sink = spgemm.ResultSink(budget, shape, left.dtype, left.index_dtype, CUPY)
            sink.check = counted.check
            product = spgemm.mark_canonical(engine._multiply_into(left, right, "alg1", sink))
            pair.untimed += 1
            product = _sparse_planning._finished(product, left, right)
            return type(A)._sg_on_device(product, shape, A)

        return call

    def bare(A, pair=False, sink=False, finished=False, budget=False):
        def call():
            left, right = mirrors(A)
            if pair:
                p = _sparse_planning._pair(left, right)
                p.seen += 1
            counted = hash_spgemm._DeviceCount(left, right, hash_spgemm.DEFAULT_PATH)
            m, n = left.shape[0], right.shape[1]
            if sink:
                into = spgemm.ResultSink(
                    spgemm.Budget(cupy), (m, n), left.dtype, left.index_dtype, CUPY
                )
                into.check = counted.check
                counted.expect(lambda exact: exact <= spgemm.INT32_MAX, "within 32-bit indices")
                stored = engine._multiply_into(left, right, "alg1", into)
            else:
                b = spgemm.Budget(cupy) if budget else None
                empty = b.empty if budget else (lambda size, dtype, what: cupy.empty(size, dtype))
                indptr = empty(m + 1, left.index_dtype, "")
                c = cusparse_spgemm._Call(left, right, "alg1", indptr)
                if counted.value() > spgemm.INT32_MAX:
                    raise AssertionError("int32 only")
                lib, args = c.lib, c.args()
                size = lib.spGEMM_workEstimation(*args, 0, 0)
                b1 = empty(size, np.int8, "")
                lib.spGEMM_workEstimation(*args, size, b1.data.ptr)
                size = lib.spGEMM_compute(*args, 0, 0)
                b2 = empty(size, np.int8, "")
                lib.spGEMM_compute(*args, size, b2.data.ptr)
                nnz = cusparse_spgemm._nnz(lib, c.c)
                indices = empty(nnz, left.index_dtype, "")
                data = empty(nnz, left.dtype, "")
                lib.csrSetPointers(c.c.handle, indptr.data.ptr, indices.data.ptr, data.data.ptr)
                lib.spGEMM_copy(*args)
                del b1, b2, c
                stored = DeviceMatrix(data, indices, indptr, (m, n), CUPY)
            stored = spgemm.mark_canonical(stored)
            if finished:
                stored = _sparse_planning._finished(stored, left, right)
            return type(A)._sg_on_device(stored, (m, n), A)

        return call

    def dispatched(A):
        def call():
            stored = _sparse_dispatch.multiply(A, A)
            return type(A)._sg_on_device(stored, (A.shape[0], A.shape[1]), A)

        return call

    def known_where(A):
        found = _sparse_dispatch._on_device(A, A)

        def call():
            engine_, residence, value_dtype = found
            left, right = _sparse_dispatch.operands(A, A, residence, value_dtype)
            level = _sparse_dispatch.level_in_force(None, A._sg_planning)
            stored = _sparse_planning.multiply_sparse(left, right, engine_, level=level)
            stored = _sparse_dispatch._with_operands_index_dtype(A, stored, left, right)
            return type(A)._sg_on_device(stored, (A.shape[0], A.shape[1]), A)

        return call

    def no_gc(make):
        import gc

        def wrapped(A):
            fn = make(A)

            def call():
                gc.disable()
                try:
                    return fn()
                finally:
                    gc.enable()

            return call

        return wrapped

    def planned(A):
        def call():
            left, right = mirrors(A)
            stored = _sparse_planning.multiply_sparse(left, right, engine, level="measure")
            return type(A)._sg_on_device(stored, (A.shape[0], A.shape[1]), A)

        return call

    def ruled(A):
        def call():
            left, right, budget, pair = new_pair(A)
            counted = engine.products_ahead(left, right)
            product, outcome = _sparse_planning._rule_product(engine, left, right, budget, counted)
            pair.untimed += 1
            pair.last = outcome
            product = _sparse_planning._finished(product, left, right)
            return type(A)._sg_on_device(product, (A.shape[0], A.shape[1]), A)

        return call

    def direct(A):
        left, right = mirrors(A)
        cupy.cuda.Device().synchronize()
        return lambda: DirectSpGEMM(left, right)()

    return {
        "A @ A": lambda A: lambda: A @ A,
        "dispatched": dispatched,
        "known where": known_where,
        "A @ A no gc": no_gc(lambda A: lambda: A @ A),
        "planned": planned,
        "ruled": ruled,
        "flat": flat,
        "bare": bare,
        "+pair": lambda A: bare(A, pair=True),
        "+budget": lambda A: bare(A, budget=True),
        "+sink": lambda A: bare(A, sink=True),
        "+finished": lambda A: bare(A, finished=True),
        "direct": direct,
    }


def transpose_probe(A, cupy, repeat: int) -> dict:
    """``A @ A`` as ``((A.T) @ (A.T)).T`` (power-law rows have short columns: every row of
    the transposed product has few products), piece by piece from an idle device: the
    transpose (cuSPARSE csr2csc), the transposed product at planning ``estimate`` (the
    rule), the transpose back; wall clock medians (ms), and the rule's algorithm."""
    from sparsegpu.backends import cusparse, spgemm
    from sparsegpu.device._mirror import CUPY
    from sparsegpu.engine import _sparse_dispatch, _sparse_planning

    engine = _sparse_dispatch._GPU_ENGINE
    pieces: dict = {"transpose": [], "product": [], "back": [], "total": []}
    ran = None
    for _ in range(repeat):
        left = spgemm.canonical(_sparse_dispatch._csr(A, CUPY, A.dtype))
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        t = spgemm.mark_canonical(cusparse.transpose(left))
        t.column_bound = left.known_longest_row
        t.row_stats  # noqa: B018 - what the rule reads (its longest row), one pass
        cupy.cuda.Device().synchronize()
        t1 = time.perf_counter()
        product = _sparse_planning.multiply_sparse(t, t, engine, level="estimate")
        product.settle()
        cupy.cuda.Device().synchronize()
        t2 = time.perf_counter()
        cusparse.transpose(product)
        cupy.cuda.Device().synchronize()
        t3 = time.perf_counter()
        for key, value in zip(pieces, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
            value_ms = value * 1e3
            pieces[key].append(value_ms)
        ran = _sparse_planning.explain_sparse(t, t, engine, level="estimate")
    out = {k: float(np.median(v)) for k, v in pieces.items()}
    out["rule"] = str(ran).splitlines()[0] if ran is not None else None
    out["t_longest_row"] = int(t.longest_row)
    return out


def count_alone(A, cupy, repeat: int) -> dict:
    """The products count from an idle device: its kernel's CUDA-event time, the host's
    time to launch it, and to its result (medians, microseconds)."""
    from sparsegpu.backends import hash_spgemm, spgemm
    from sparsegpu.device._mirror import CUPY
    from sparsegpu.engine import _sparse_dispatch

    left = spgemm.canonical(_sparse_dispatch._csr(A, CUPY, A.dtype))
    kernel, launch, total = [], [], []
    for _ in range(repeat):
        cupy.cuda.Device().synchronize()
        time.sleep(0.002)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        begin = time.perf_counter()
        start.record()
        count = hash_spgemm._DeviceCount(left, left, hash_spgemm.DEFAULT_PATH)
        end.record()
        launched = time.perf_counter()
        count.value()
        done = time.perf_counter()
        end.synchronize()
        kernel.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
        launch.append((launched - begin) * 1e6)
        total.append((done - begin) * 1e6)
    return {
        "kernel_us": float(np.median(kernel)),
        "launch_us": float(np.median(launch)),
        "to_result_us": float(np.median(total)),
    }


def allocations(made, Acx, base, identity, cupyx_sparse) -> dict:
    """Net container objects (what Python's cyclic collector counts towards a collection)
    one call of each variant and of cupyx's product allocates, the collector off."""
    import gc

    from benchmarks import spgemm_first

    out = {}
    for key in [*made, "cupyx"]:
        deltas = []
        for _ in range(5):
            if key == "cupyx":
                B = spgemm_first.fresh_cupyx(Acx, cupyx_sparse)
                fn = lambda B=B: B @ B  # noqa: E731
            else:
                fn = made[key](spgemm_first.fresh_sg(base, identity))
            gc.collect()
            gc.disable()
            try:
                before = gc.get_count()[0]
                kept = fn()
                deltas.append(gc.get_count()[0] - before)
            finally:
                gc.enable()
            del kept
        out[key] = int(np.median(deltas))
    return out


def markdown(result: dict) -> str:
    """The result file's summary: each round's medians, then the probes."""
    lines = [
        "# How far below `A @ A`'s first ALG1 product the host path can go (issue 47)",
        "",
        f"Device: {result.get('device', '?')}. Command: `{result.get('command', '?')}`. Wall "
        "clock from an idle device to the synchronized result, fresh operands made by a "
        "product, medians in turning order (module docstring: what each variant leaves "
        "out). A probe of the path: nothing is fitted on it.",
    ]
    for row in result["rows"]:
        rounds = row["medians_ms"]
        keys = list(rounds[0])
        lines += ["", f"## {row['matrix']}", "", "| variant | " + " | ".join(
            f"round {i + 1} (ms)" for i in range(len(rounds))) + " |",
            "|---|" + "---:|" * len(rounds)]  # fmt: skip
        lines += [f"| {k} | " + " | ".join(f"{r[k]:.3f}" for r in rounds) + " |" for k in keys]
        t = row["via_transpose_ms"]
        lines += [
            "",
            f"`((A.T) @ (A.T)).T`: transpose {t['transpose']:.3f} ms (with the row "
            f"statistics the rule reads), the transposed product {t['product']:.3f} "
            f"(longest row of `A.T`: {t['t_longest_row']}), the transpose back "
            f"{t['back']:.3f}, in all {t['total']:.3f}.",
            "",
            "Container objects a call allocates: "
            + ", ".join(f"{k} {v}" for k, v in row["allocations"].items())
            + ".",
            "",
            "The products count alone from an idle device: "
            + ", ".join(f"{k} {v:.1f}" for k, v in row["count_alone"].items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--only", help="the matrices whose names contain this")
    parser.add_argument("--variants", help="','-separated variants to run (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of the alternation")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--md", type=pathlib.Path)
    parser.add_argument("--from-json", type=pathlib.Path, help="only write --md from this file")
    args = parser.parse_args(argv)
    if args.from_json:  # no GPU needed
        return common.markdown_again(args.from_json, args.md, markdown)
    cupy = common.require_gpu()
    if cupy is None:
        return 2
    import cupyx.scipy.sparse as cupyx_sparse

    import sparsegpu as sg
    from benchmarks import spgemm_first
    from benchmarks.experiments.spgemm_alg1_overhead import _first_operands, turning_samples

    made = variants(cupy)
    out = []
    if args.variants:
        made = {k: v for k, v in made.items() if k in args.variants.split(",")}
    for name, base, identity, Acx in _first_operands(args, cupy, cupyx_sparse, FLOOR_MATRICES):
        if name.startswith("fem_p1"):
            continue
        for fn in made.values():  # compiled, and checked against A @ A
            A = spgemm_first.fresh_sg(base, identity)
            C = fn(A)()
        reference = (spgemm_first.fresh_sg(base, identity) @ A).tocsr()
        print(f"  {name}: A @ A ran {sg.explain(A, A).last.algorithm}")
        for key in [k for k in made if k not in ("A @ A", "direct")]:
            C = made[key](spgemm_first.fresh_sg(base, identity))().tocsr()
            error = abs(C - reference).max() if C.nnz == reference.nnz else None
            assert error is not None and error <= 1e-12 * abs(reference).max(), (key, error)
        rounds = []
        for _ in range(args.rounds):
            times = turning_samples(made, (base, identity, Acx), cupy, args.repeat)
            medians = {k: float(np.median(v)) for k, v in times.items()}
            rounds.append(medians)
            print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()) + " ms")
        row = {"matrix": name, "medians_ms": rounds}
        row["via_transpose_ms"] = transpose_probe(spgemm_first.fresh_sg(base, identity), cupy, 9)
        print(f"  via transpose: {row['via_transpose_ms']}")
        row["allocations"] = allocations(made, Acx, base, identity, cupyx_sparse)
        print(f"  container allocations a call (gc.get_count()[0] deltas): {row['allocations']}")
        row["count_alone"] = count_alone(spgemm_first.fresh_sg(base, identity), cupy, args.repeat)
        print(f"  count alone: {row['count_alone']}")
        out.append(row)
        header = common.experiment_header("benchmarks.experiments.spgemm_first_floor")
        common.save_partial({**header, "rows": out}, args.out)
    if args.md and out:
        args.md.write_text(markdown({**header, "rows": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
