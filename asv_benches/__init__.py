"""asv suites of sparsegpu (``asv.conf.json`` at the repository root points here).

GPU suites raise ``NotImplementedError`` in ``setup`` on a machine without a GPU (asv's
way of skipping a parameter combination), so ``asv run --python=same --quick`` works on
a CPU-only machine too, timing the scipy backend.
"""
