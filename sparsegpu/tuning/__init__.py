"""Launch policies, their defaults, the autotuner and its on-disk cache.

:func:`sparsegpu.autotune` lives in :mod:`sparsegpu.tuning.autotune`; the cache in
:mod:`sparsegpu.tuning.cache`.
"""

from .cache import TunedEntry, TuningCache, TuningCacheError, TuningCacheWarning, TuningContext
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
