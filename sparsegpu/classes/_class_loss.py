"""One warning the first time a scipy left operand turns a sparsegpu matrix into scipy's class.

Python lets the right operand of ``S @ A``, ``S + A``, ``S - A`` and ``S * A`` answer first
only when its class is a subclass of the left operand's, that is, for a scipy ``S`` of
``A``'s format and kind (``sp.csr_array @ sg.csr_array``): sparsegpu's reflected methods
then return a sparsegpu class. Otherwise scipy's operator never returns NotImplemented for
a sparse operand: it converts ``A`` to its own class (``asformat``, ``tocsr``, ``tobsr``)
and returns its own. sparsegpu sees only that conversion: :func:`warn_if_lost`, called
from it, looks up the stack for scipy's binary operator on a non-sparsegpu left operand
and warns once per process, saying what keeps the class.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

import scipy.sparse as sp


class ScipyClassResultWarning(UserWarning):
    """A scipy operand on the left made a result of scipy's class from a sparsegpu matrix."""


# scipy's binary operators and the methods they reach before converting the right operand
_OPERATORS = frozenset(
    {
        "__matmul__",
        "__mul__",
        "__add__",
        "__sub__",
        "_matmul_dispatch",
        "_mul_dispatch",
        "_matmul_sparse",
        "_mul_sparse_matrix",
        "_add_sparse",
        "_sub_sparse",
        "_binopt",
        "multiply",
        "dot",
    }
)
_SCIPY_SPARSE = os.path.dirname(sp.__file__)
_FRAMES = 10  # scipy's operators reach the conversion within a few frames

_state = threading.local()
_warned = False


class adopting:
    """A sparsegpu reflected operator computing through scipy's forward one, whose result
    it adopts: no warning inside."""

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc):
        _state.depth -= 1


def _is_sparsegpu(obj) -> bool:
    return type(obj).__module__.startswith("sparsegpu.")


def warn_if_lost(matrix) -> None:
    """Warn (once) when ``matrix`` is being converted by a scipy operator of a scipy left
    operand, whose result will be scipy's class."""
    if _warned or getattr(_state, "depth", 0):
        return
    frame, left = sys._getframe(2), None
    for _ in range(_FRAMES):  # the operator nearest the conversion decides; the
        if frame is None:  # outermost names the class (sp.diags(d) @ A converts d first)
            break
        code = frame.f_code
        if code.co_name in _OPERATORS and code.co_filename.startswith(_SCIPY_SPARSE):
            operand = frame.f_locals.get("self")
            if not sp.issparse(operand) or _is_sparsegpu(operand):
                break
            left = operand
        elif left is not None:
            break
        frame = frame.f_back
    if left is not None:
        _warn(left, matrix)


def _warn(left, right) -> None:
    global _warned
    _warned = True
    kind = "array" if isinstance(left, sp.sparray) else "matrix"
    warnings.warn(
        f"scipy's {left.format}_{kind} on the left of an operator with a sparsegpu "
        f"{type(right).__name__} returns scipy's class (Python lets the right operand "
        "answer first only when it is a subclass of the left's: the same format and kind), "
        "so products with the result run in scipy on the host. Make the left operand a "
        "sparsegpu matrix too (sg.csr_array(S), sg.bsr_array(S)), or convert what was "
        "built: sg.as_sparsegpu(M); for a PyAMG hierarchy, sg.as_sparsegpu(ml) (every "
        "level, PyAMG's cycle) or sg.linalg.amg(ml) (the cycle on the device). This "
        "warning is shown once.",
        ScipyClassResultWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The stack level of the first frame outside scipy and sparsegpu (the user's line)."""
    frame, level = sys._getframe(1), 1
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while frame is not None and (frame.f_code.co_filename.startswith((_SCIPY_SPARSE, here))):
        frame, level = frame.f_back, level + 1
    return level
