"""Launch policies, their defaults, the autotuner and its on-disk cache."""

from .policy import (
    AdaptivePolicy,
    CsrVectorPolicy,
    CusparsePolicy,
    NoPolicy,
    Policy,
    SoftwareCachePolicy,
)

__all__ = [
    "AdaptivePolicy",
    "CsrVectorPolicy",
    "CusparsePolicy",
    "NoPolicy",
    "Policy",
    "SoftwareCachePolicy",
]
