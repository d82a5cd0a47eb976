"""Launch policies, their defaults, the autotuner and its on-disk cache.

:func:`sparsegpu.autotune` lives in :mod:`sparsegpu.tuning.autotune`; the cache in
:mod:`sparsegpu.tuning.cache`.
"""

from .cache import TunedEntry, TuningCache, TuningCacheError, TuningCacheWarning, TuningContext
from .policy import (
    CsrVectorPolicy,
    CusparsePolicy,
    MergePathPolicy,
    NoPolicy,
    Policy,
    RowGroupPolicy,
    SoftwareCachePolicy,
)

__all__ = [
    "CsrVectorPolicy",
    "CusparsePolicy",
    "MergePathPolicy",
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


def __getattr__(name: str):
    # the merge-path policy's former name, kept importable for a while
    if name == "AdaptivePolicy":
        import warnings

        warnings.warn(
            "AdaptivePolicy is now called MergePathPolicy; the old name will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        return MergePathPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
