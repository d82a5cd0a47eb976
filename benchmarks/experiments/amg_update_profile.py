"""Where multigrid's set-up and ``update`` spend their time (issue 46), on instances of
no result set (3-D Poisson 100^3, 3-D elasticity 24^3: neither fit nor held out).

For each: a warm process (``benchmarks.amg.warm_up``), the set-up's and the second
update's phases (``setup_seconds``), the time before the set-up's first phase, and a
cProfile of each (tottime).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.amg_update_profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

from benchmarks import amg


def profiled(fn, xp):
    amg._sync(xp)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    out = fn()
    amg._sync(xp)
    profiler.disable()
    seconds = time.perf_counter() - started
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(22)
    return out, seconds, text.getvalue()[-4200:]


def report(name: str, size: int, sg, cupy) -> None:
    """One problem's set-up and update, timed, phased and profiled."""
    A_host, B = amg.make_problem(name, size, "fit")
    A = sg.csr_matrix(A_host.tocsr())
    amg_input = sg.bsr_matrix(A_host) if A_host.format == "bsr" else A
    amg_input @ cupy.ones(A.shape[0])
    sg.linalg.amg(amg_input, B=B)  # this class's kernels compiled

    def setup():
        return sg.linalg.amg(amg_input, B=B)

    ml, seconds = amg._timed(setup, cupy)
    phases = dict(ml.setup_seconds)
    before = (seconds - phases["total"]) * 1e3
    listed = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in phases.items())
    print(f"{name} {size}: set-up {seconds * 1e3:.1f} ms, {before:.1f} before its phases; {listed}")
    _, seconds, text = profiled(setup, cupy)
    print(f"  profiled set-up {seconds * 1e3:.1f} ms\n{text}")
    A_new = amg._new_values(A_host)
    new = (sg.bsr_matrix(A_new.tobsr(blocksize=A_host.blocksize))
           if A_host.format == "bsr" else sg.csr_matrix(A_new))  # fmt: skip
    new @ cupy.ones(A.shape[0])
    ml.update(new)

    def update():
        return ml.update(new)

    _, seconds = amg._timed(update, cupy)
    listed = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in ml.setup_seconds.items())
    print(f"  update {seconds * 1e3:.1f} ms: {listed}")
    _, seconds, text = profiled(update, cupy)
    print(f"  profiled update {seconds * 1e3:.1f} ms\n{text}")
    listed = ", ".join(f"{k} {v:.2f}" for k, v in pieces(ml, update, cupy).items())
    print(f"  update's pieces (ms): {listed}")


def pieces(ml, update, cupy) -> dict:
    """Milliseconds in each piece of ``update()`` (each call synchronised before and
    after; inclusive of the pieces it calls)."""
    import functools

    from sparsegpu.engine import _planning, _sparse_planning
    from sparsegpu.linalg.multigrid import _aggregation, _hierarchy, _setup, _smoothing

    targets = [
        (_setup, "diagonal_of"), (_setup, "estimate_rho"), (_setup, "as_operator"),
        (_setup, "spectral_radius"), (_setup, "smoothed_prolongator"),
        (_setup, "_kept_pattern"), (_setup, "galerkin_product"), (_setup, "spgemm"),
        (_setup, "transpose"), (_setup, "with_values"), (_setup, "check_values"),
        (_aggregation, "jacobi_smoothing"), (_hierarchy, "coarse_inverse"),
        (_hierarchy, "prepare_smoother"), (_hierarchy, "_square_input"),
        (_hierarchy.AMGHierarchy, "_check_pattern"), (_smoothing, "_ritz_top"),
        (_smoothing, "_lanczos_device"), (_planning, "select"), (_planning, "with_plan"),
        (_planning, "from_memory"), (_planning, "plan_on"),
        (_sparse_planning, "multiply_sparse"),
    ]  # fmt: skip
    totals: dict = {}
    saved = []
    for owner, name in targets:
        original = owner.__dict__[name]

        def wrapped(*a, _f=original, _name=name, **k):
            cupy.cuda.Device().synchronize()
            begin = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                cupy.cuda.Device().synchronize()
                totals[_name] = totals.get(_name, 0.0) + (time.perf_counter() - begin) * 1e3

        functools.update_wrapper(wrapped, original)
        setattr(owner, name, wrapped)
        saved.append((owner, name, original))
    try:
        _, seconds = amg._timed(update, cupy)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    totals["update (synchronised pieces)"] = seconds * 1e3
    n = ml.levels[0].A.shape[0]
    for label, make in (
        ("RandomState(seed).normal(n)", lambda: cupy.random.RandomState(3).standard_normal(n)),
        ("zeros(n)", lambda: cupy.zeros(n)),
    ):
        make()
        cupy.cuda.Device().synchronize()
        begin = time.perf_counter()
        for _ in range(5):
            make()
        cupy.cuda.Device().synchronize()
        totals[label] = (time.perf_counter() - begin) * 1e3 / 5
    return totals


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    import sparsegpu as sg

    cupy = amg._device()
    amg.warm_up()
    for name, size in (("poisson3d", 100), ("elasticity3d", 24)):
        report(name, size, sg, cupy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
