"""Launch policies, their defaults, the autotuner and its on-disk cache.

:func:`sparsegpu.autotune` lives in :mod:`sparsegpu.tuning.autotune`. The cache it writes
(:class:`TuningCache`) is a plain store below selection (``sparsegpu._tuning_store``),
re-exported here.
"""

from .._tuning_store import (
    TunedEntry,
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    TuningContext,
)
from .policy import (
    AdaptivePolicy,
    CsrVectorPolicy,
    CusparsePolicy,
    NoPolicy,
    Policy,
    RowGroupPolicy,
    SoftwareCachePolicy,
)

__all__ = [
    "AdaptivePolicy",
    "CsrVectorPolicy",
    "CusparsePolicy",
    "NoPolicy",
    "Policy",
    "RowGroupPolicy",
    "SoftwareCachePolicy",
    "TunedEntry",
    "TuningCache",
    "TuningCacheError",
    "TuningCacheWarning",
    "TuningContext",
]
