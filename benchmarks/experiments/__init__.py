"""One-off experiments, kept because a result file in ``docs/benchmarks/results/`` cites
each one (run as ``python -m benchmarks.experiments.<script>``)."""
