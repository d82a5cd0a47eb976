"""Measurement: how every tool of sparsegpu times and checks a product.

``_timing`` (the one timing harness: CUDA events, host clocks, candidates timed in
alternation, the bytes a product moves), ``_oracle`` (the one answer check) and
:mod:`~sparsegpu.measure.probe` (the device's copy bandwidth). Planning, the autotuner,
``sparsegpu bench`` and the benchmarks all measure through here; it stands on
:mod:`sparsegpu.device` only.
"""
