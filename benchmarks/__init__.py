"""sparsegpu's benchmark scripts, run from the repository root as ``python -m
benchmarks.<script>`` (on a GPU machine; ``--help`` and ``--from-json`` run anywhere).

What they share lives in :mod:`benchmarks.common`; ``benchmarks/README.md`` says what each
script measures and which result file in ``docs/benchmarks/results/`` it wrote.
"""
