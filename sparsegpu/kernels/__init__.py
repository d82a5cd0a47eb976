"""CUDA C++ sources of the kernel families, shipped as package data.

Read as text by :mod:`sparsegpu.device._compile` (NVRTC at run time) and by
``tools/check_kernels.py`` (nvcc in CI); nothing here is imported as Python.
"""
