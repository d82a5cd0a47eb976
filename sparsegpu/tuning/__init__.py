"""Launch policies, the autotuner and its on-disk cache.

Every policy class is re-exported here; each is defined beside its kernel, in its backend
module.

:func:`sparsegpu.autotune` lives in :mod:`sparsegpu.tuning.autotune`. The cache it writes
(:class:`TuningCache`) is a plain store below selection (``sparsegpu.engine._tuning_store``),
re-exported here.
"""

from .._version import REMOVED_IN
from ..backends.block import BlockPolicy
from ..backends.csr_vector import CsrVectorPolicy
from ..backends.cusparse import CusparsePolicy
from ..backends.cusparse_bsr import CusparseBsrPolicy
from ..backends.delta16 import Delta16Policy
from ..backends.merge_path import MergePathPolicy
from ..backends.policy import Policy, RowGroupPolicy, UnrolledRowPolicy
from ..backends.scipy_reference import NoPolicy
from ..backends.swcache import SoftwareCachePolicy
from ..engine._tuning_store import (
    TunedEntry,
    TuningCache,
    TuningCacheError,
    TuningCacheWarning,
    TuningContext,
)

__all__ = [
    "BlockPolicy",
    "CsrVectorPolicy",
    "CusparseBsrPolicy",
    "CusparsePolicy",
    "Delta16Policy",
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
    "UnrolledRowPolicy",
]


def __getattr__(name: str):
    # the merge-path policy's former name, kept importable until REMOVED_IN
    if name == "AdaptivePolicy":
        import warnings

        warnings.warn(
            f"AdaptivePolicy is now called MergePathPolicy; the old name will be removed in "
            f"{REMOVED_IN}",
            DeprecationWarning,
            stacklevel=2,
        )
        return MergePathPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
