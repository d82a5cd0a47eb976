"""The shared base of the launch policies, re-exported for the tuning layer.

Each kernel family's policy lives beside its kernel, in its backend module
(:class:`~sparsegpu.backends.csr_vector.CsrVectorPolicy`, ...); the base and its
validation helpers live in :mod:`sparsegpu.backends.policy`, below the backends, so that
the backends never import tuning. :mod:`sparsegpu.tuning` re-exports every policy class.
"""

from ..backends.policy import (
    THREADS_PER_ROW_CHOICES,
    Policy,
    RowGroupPolicy,
    format_knobs,
)

__all__ = ["THREADS_PER_ROW_CHOICES", "Policy", "RowGroupPolicy", "format_knobs"]
