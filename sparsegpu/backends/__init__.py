"""Backend modules: each declares a ``BACKENDS`` list of :class:`~.base.Backend` objects.

The registry (:mod:`sparsegpu.engine._registry`) loads the modules named in ``BUILTIN_MODULES``
in this order; the order is also the order of ``sparsegpu.backends()``.
"""

from __future__ import annotations

import warnings

from .._version import REMOVED_IN

BUILTIN_MODULES = (
    "scipy_reference",
    "csr_vector",
    "swcache",
    "cusparse",
    "cusparse_bsr",
    "merge_path",
    "delta16",
    "block",
)

# Former backend names, still accepted (with a DeprecationWarning) until REMOVED_IN:
# old name -> name.
ALIASES = {"adaptive": "merge_path"}
# Former policy class names, as stored in tuning caches: old name -> name.
POLICY_ALIASES = {"AdaptivePolicy": "MergePathPolicy"}


def canonical_name(name: str) -> str:
    """The current name of backend ``name``: ``name`` itself unless it is a former name in
    :data:`ALIASES`, which warns (DeprecationWarning) and returns the new one."""
    new = ALIASES.get(name) if isinstance(name, str) else None
    if new is None:
        return name
    warnings.warn(
        f"backend {name!r} is now called {new!r}; the old name will be removed in {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=3,
    )
    return new
