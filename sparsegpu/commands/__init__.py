"""Subcommands of the ``sparsegpu`` command line (see :mod:`sparsegpu.cli`)."""
