"""Backend modules: each declares a ``BACKENDS`` list of :class:`~.base.Backend` objects.

The registry in :mod:`sparsegpu._dispatch` loads the modules named in ``BUILTIN_MODULES``
in this order; the order is also the order of ``sparsegpu.backends()``.
"""

BUILTIN_MODULES = ("cpu", "csr_vector", "swcache", "cusparse", "adaptive")
