"""CUDA C++ kernel sources (package data), compiled at run time by :mod:`sparsegpu._compile`."""
