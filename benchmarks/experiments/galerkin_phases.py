"""Where the Galerkin product's first-product time goes, phase by phase (issue 34).

``spgemm_first_h100`` measured ``sg.galerkin_product(A, P)`` (planning level estimate) at
0.42x cupyx's ``P.T @ A @ P`` on the 2 x 2 aggregation of the 2-D 5-point stencil 2000^2
(6.2 ms against 2.6 ms, H100), where each of sparsegpu's single products is within a few
percent of cupyx. This times the pieces side by side, median of CUDA-event samples in
alternation, after checking that both sides' whole products agree:

* ``sg_galerkin``: the whole ``sg.galerkin_product(A, P)``;
* ``sg_A_P``: ``A @ P`` (a fresh result each time, as inside the Galerkin product);
* ``sg_PT_mirror``: ``P.transpose()`` and its device mirror (kept with ``P``'s: should
  cost nothing after the first);
* ``sg_PT_AP``: ``P.T @ AP`` with a fixed ``AP`` through ``_sparse_dispatch.product`` (the
  Galerkin product's second half as it runs), and ``sg_PT_AP_alg1`` the same through
  ``sg.spgemm(algorithm="alg1")`` (no planning);
* ``direct_A_P``, ``direct_PT_AP``: cuSPARSE SpGEMM ALG1 called directly on the same
  device arrays (operand descriptors made once);
* ``cupyx_galerkin`` (``Pcx.T @ Acx @ Pcx``, as users write it, which associates as
  ``(P.T @ A) @ P``), ``cupyx_galerkin_right`` (``Pcx.T @ (Acx @ Pcx)``, sparsegpu's
  association), ``cupyx_A_P`` and ``cupyx_PT_csr`` (cupyx's transpose to CSR).

Usage (on a GPU machine)::

    python -m benchmarks.experiments.galerkin_phases [--n 2000] [--dtype float64]
        [--repeat 9] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

import sparsegpu as sg
from benchmarks import spgemm as spgemm_bench
from sparsegpu import measure
from sparsegpu.backends import spgemm
from sparsegpu.datasets import synthetic
from sparsegpu.device import _cuda
from sparsegpu.device._mirror import CUPY
from sparsegpu.engine import _sparse_dispatch


def phases(n: int, dtype, repeat: int, cupy, cupyx_sparse) -> dict:
    bench = spgemm_bench
    S = synthetic.stencil_2d(n).astype(dtype)
    P = bench.prolongation(bench.GALERKIN, S, dtype)
    A, Psg = sg.csr_matrix(S), sg.csr_matrix(P)
    A.planning = Psg.planning = "estimate"  # every product a first product, by the rule
    Acx = cupyx_sparse.csr_matrix(A)
    Pcx = cupyx_sparse.csr_matrix(P)
    AP = A @ Psg  # kept on the device
    PT = Psg.transpose()
    AP_cx = Acx @ Pcx

    def pt_mirror():
        return Psg.transpose()._sg_mirror(CUPY, np.dtype(dtype))

    def mirror(M):
        return spgemm.canonical(M._sg_mirror(CUPY, np.dtype(dtype)))

    left_AP = (mirror(A), mirror(Psg))
    left_PT = (spgemm.canonical(pt_mirror()), mirror(AP))
    fns = {
        "sg_galerkin": lambda: sg.galerkin_product(A, Psg),
        "sg_A_P": lambda: A @ Psg,
        "sg_PT_mirror": pt_mirror,
        "sg_PT_AP": lambda: _sparse_dispatch.multiply(PT, AP, as_csr=True),
        "sg_PT_AP_alg1": lambda: sg.spgemm(PT, AP, algorithm="alg1"),
        "direct_A_P": bench.DirectSpGEMM(*left_AP),
        "direct_PT_AP": bench.DirectSpGEMM(*left_PT),
        "cupyx_galerkin": lambda: Pcx.T @ Acx @ Pcx,
        "cupyx_galerkin_right": lambda: Pcx.T @ AP_cx,
        "cupyx_A_P": lambda: Acx @ Pcx,
        "cupyx_PT_csr": lambda: Pcx.T.tocsr(),
    }
    reference = fns["cupyx_galerkin"]().tocsr()
    problem = bench.agree(fns["sg_galerkin"](), reference, dtype, cupy)
    if problem is not None:
        raise SystemExit(f"sparsegpu's Galerkin product disagrees with cupyx's: {problem}")
    timings = measure.cuda_time_interleaved(fns, warmup=2, repeat=repeat)
    return {
        "n": n,
        "dtype": np.dtype(dtype).name,
        "nnz_A": int(S.nnz),
        "nnz_P": int(P.nnz),
        "nnz_AP": int(AP.nnz),
        "nnz_result": int(reference.nnz),
        "ms": {key: timing.median_ms for key, timing in timings.items()},
        "explain_PT_AP": str(sg.explain(PT, AP)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="grid side of the 2-D stencil")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="JSON result file")
    args = parser.parse_args(argv)
    reason = _cuda.unavailable_reason()
    if reason is not None:
        print(f"galerkin_phases: needs a GPU ({reason})", file=sys.stderr)
        return 2
    cupy = _cuda.cupy_or_none()
    import cupyx.scipy.sparse as cupyx_sparse

    result = phases(args.n, np.dtype(args.dtype), args.repeat, cupy, cupyx_sparse)
    result["device"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['device']}, 2-D stencil {args.n}^2, {result['dtype']}: median ms")
    for key, ms in result["ms"].items():
        print(f"  {key:<22} {ms:8.3f}")
    print(result["explain_PT_AP"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
