"""Device plumbing: the one CuPy import and what every backend stands on.

``_cuda`` (the one place that imports CuPy), ``_compile`` (NVRTC compilation of the kernel
families by name), ``_launch`` (the one C++ type map and launch path), ``_occupancy``
(untuned launch shapes), ``_dtypes`` (value types, half precision), the mirrors
(``_mirror``, ``_block_mirror``: validated device copies and their row statistics),
``_pending`` (results whose host arrays are not made yet), ``_staging`` (operands moved to
where a product computes), ``_host_buffers`` and ``_result_buffers``. The bottom floor:
it imports nothing else of the package.
"""
