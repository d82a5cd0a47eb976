"""Dispatch: one product moved to where its backend computes, and run there.

:func:`apply` takes ``A @ x`` from the scipy classes, asks planning
(:mod:`sparsegpu.engine._planning`) once per matrix, operation, x dtype and request which plan
to run, moves x there and the result back into x's array module. Nothing here chooses:
the choice and its reasons are selection's and planning's.
"""

from __future__ import annotations

import numpy as np

from ..device import _cuda, _host_buffers
from ..device._mirror import ChoiceKey, DeviceMemoryError, is_out_of_memory, memory_error
from ..device._staging import from_residence, operands
from . import _registry
from ._choice import VECTOR, operation_of
from ._planning import decide, measure_now
from ._select import name_in_force


def apply(matrix_obj, x, *, backend: str | None = None, policy=None, out=None, planning=None):
    """``A @ x`` for a 1-D or 2-D x (numpy or cupy) through the chosen backend.

    The result is in x's array module with scipy's dtype. Shapes are the caller's job
    (``_matrix`` checks them the way scipy does).

    The choice (backend, mirror, plan) is cached in the matrix's mirror dict under the
    name in force, x's dtype, the policy, the registry generation and the operation, so a
    repeated product costs a few dictionary lookups; the cache goes wherever the mirror
    goes.
    """
    try:
        return _product(matrix_obj, x, backend, policy, out, planning)
    except DeviceMemoryError:
        raise
    except MemoryError as exc:  # CuPy's OutOfMemoryError is one; say what it needed
        if not is_out_of_memory(exc) or type(exc) is MemoryError:
            raise MemoryError(
                f"the product with this {matrix_obj.shape} matrix ran out of host memory "
                f"({exc or 'numpy could not allocate'}); free memory, or multiply fewer "
                "columns at a time"
            ) from exc
        nbytes = sum(a.nbytes for a in (matrix_obj.data, matrix_obj.indices, matrix_obj.indptr))
        nbytes += x.nbytes + matrix_obj.shape[0] * x.itemsize * (x.shape[1] if x.ndim == 2 else 1)
        raise memory_error(nbytes, f"the product with this {matrix_obj.shape} matrix") from exc


def _product(matrix_obj, x, backend, policy, out, planning=None):
    _cuda.ensure_context()
    if _host_buffers.exposed:  # its arrays were handed out: were they written?
        matrix_obj._sg_check_writes()
    operation = VECTOR
    if x.ndim == 2:
        if x.shape[1] == 1:  # one column is A @ x: the vector product's plan and choice
            return _one_column(matrix_obj, x, backend, policy, out, planning)
        operation = operation_of(x)  # what planning is told of x: its operation and dtype
    name = name_in_force(backend, matrix_obj._sg_backend)
    # A plain tuple finds the ChoiceKey it equals (same hash): cheaper per call to build.
    key = (
        name,
        x.dtype,
        policy,
        planning,
        matrix_obj._sg_policy,
        matrix_obj._sg_planning,
        _registry.generation,
        operation,
    )
    mirrors = matrix_obj.__dict__.get("_sg_mirrors")
    cache = mirrors.cache if mirrors is not None else None
    entry = cache.choices.get(key) if cache is not None else None
    if entry is None:
        # Into the cache that holds the mirrors this choice was made from: if another
        # thread drops them meanwhile (``A.data = new``), the choice goes with them.
        cache = matrix_obj._sg_cache_dict()
        operand = matrix_obj._sg_operand()
        entry = decide(operand, name, x.dtype, policy, planning, operation)
        cache.choices[ChoiceKey(*key)] = entry
    elif entry.measure_next:  # auto's second product of this matrix: plan by measurement
        entry = measure_now(matrix_obj._sg_operand(), cache, ChoiceKey(*key), entry, x)
    plan, value_dtype, on_host, _, _ = entry
    if on_host:
        if out is None and type(x) is np.ndarray:  # the CPU path: scipy's kernel takes x
            return plan.matvec(x)
    elif plan._on_device and type(x) is plan._array_type and x.dtype == value_dtype:
        if x.ndim == 1:
            # the GPU hot path: a device vector in the right dtype (Plan.matvec checks the rest)
            if not x._c_contiguous:
                x = x.copy()
            if out is None:
                return plan.matvec(x)
            if plan.takes_out(x, out):  # a device buffer the result can go into as it is
                return plan.matvec(x, out=out)
        elif x._c_contiguous or x._f_contiguous:  # a device X read as it is, in its order
            if out is None:
                return plan.matmat(x)
            if plan.takes_out(x, out):
                return plan.matmat(x, out=out)
    xr, out, target = operands(x, out, plan.matrix, value_dtype, operation.order)
    y = plan.matvec(xr, out=out) if xr.ndim == 1 else plan.matmat(xr, out=out)
    y = from_residence(y, _cuda.is_cupy_array(x))
    if target is not None:
        target[...] = from_residence(y, _cuda.is_cupy_array(target))
        return target
    return y


def _one_column(matrix_obj, X, backend, policy, out, planning):
    """``A @ X`` for an X of one column, as the vector product of that column."""
    if out is None:
        return _product(matrix_obj, X[:, 0], backend, policy, None, planning)[:, None]
    _check_column(out, matrix_obj.shape[0])
    _product(matrix_obj, X[:, 0], backend, policy, out[:, 0], planning)
    return out


def _check_column(out, n_rows: int) -> None:
    """Refuse an ``out`` for ``A @ X`` of one column that is not an (n_rows, 1) array (its
    dtype is checked with the column's product, :func:`~sparsegpu.device._staging.check_out`)."""
    if not (isinstance(out, np.ndarray) or _cuda.is_cupy_array(out)):
        raise TypeError(f"out must be a numpy or cupy array, got {type(out).__name__}")
    if out.shape != (n_rows, 1):
        raise ValueError(f"out has shape {out.shape} but the product has shape {(n_rows, 1)}")
