"""The 16-bit floating-point value dtypes: numpy's float16 and ml_dtypes' bfloat16.

scipy.sparse computes in neither (it refuses float16 in its constructors and methods and
has no bfloat16), so sparsegpu handles them itself: a matrix may hold 16-bit values, its
products accumulate in float32 and return ``numpy.result_type(A.dtype, x.dtype)``
(float16 @ float16 -> float16, bfloat16 @ float32 -> float32), as numpy's dense products,
CuPy and torch do. bfloat16 is the ``ml_dtypes`` package's (what JAX, CuPy and TensorFlow
use); without it, only float16 exists.
"""

from __future__ import annotations

import numpy as np

FLOAT16 = np.dtype(np.float16)

try:
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is an optional dependency
    _ml_dtypes = None

BFLOAT16: np.dtype | None = np.dtype(_ml_dtypes.bfloat16) if _ml_dtypes is not None else None

# Every 16-bit float dtype this installation knows.
HALF_DTYPES: tuple = (FLOAT16,) + ((BFLOAT16,) if BFLOAT16 is not None else ())


def lacks_dtype(name) -> bool:
    """True for the name of a dtype this installation cannot make although sparsegpu knows
    it: ``"bfloat16"`` without ml_dtypes (``pip install ml_dtypes``)."""
    return name == "bfloat16" and BFLOAT16 is None


# Mixed precision (opt-in, ``A.mixed_precision``): values kept in the key's dtype for
# products computed in its partner's. (cuSPARSE 13 refuses complex64 values with complex128
# vectors, CUSPARSE_STATUS_NOT_SUPPORTED on the H200, so complex is not among them.)
MIXED_PARTNERS = {np.dtype(np.float32): np.dtype(np.float64)}


def is_half(dtype) -> bool:
    """True for float16 and bfloat16."""
    return np.dtype(dtype) in HALF_DTYPES


def accumulator_itemsize(dtype) -> int:
    """Bytes of the type a kernel's sums run in: float32 for the 16-bit floats, else the
    value dtype itself."""
    return 4 if is_half(dtype) else np.dtype(dtype).itemsize


def eps(dtype) -> float:
    """Machine epsilon of a float or complex dtype, bfloat16 included (2**-7)."""
    dtype = np.dtype(dtype)
    if BFLOAT16 is not None and dtype == BFLOAT16:
        return float(_ml_dtypes.finfo(BFLOAT16).eps)
    return float(np.finfo(dtype).eps)


def half_result_dtype(a_dtype, x_dtype) -> np.dtype:
    """The dtype of ``A @ x`` when either operand holds 16-bit floats: numpy's promotion.

    Raises
    ------
    TypeError
        For float16 with bfloat16, which numpy cannot promote (no common dtype): cast one
        of them first.
    """
    try:
        return np.result_type(a_dtype, x_dtype)
    except TypeError as exc:  # numpy's DTypePromotionError is a TypeError
        raise TypeError(
            f"cannot multiply a {np.dtype(a_dtype)} matrix by a {np.dtype(x_dtype)} vector: "
            "numpy has no common dtype for float16 and bfloat16; cast one operand "
            "(x.astype(A.dtype), or A.astype(numpy.float32))"
        ) from exc
