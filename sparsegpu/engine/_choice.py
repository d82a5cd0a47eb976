"""What selection and planning answer: the operand, the operation, the request, the choice.

Plain values handed between dispatch, planning and selection (:mod:`sparsegpu.engine._select`):
:class:`Operand` (a matrix as they see it), :class:`Operation` (``A @ x`` or ``A @ X`` by
k bucket and order: what dispatch tells planning of x, with its dtype), :class:`Request`
(what the caller named), :class:`Choice` (the backend and policy of one product, and why:
what ``explain`` shows) and :class:`Shortlist` (selection's one answer to planning's
question of what to time).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ._registry import AUTO
from ._rules import row_class


class Request(NamedTuple):
    """What the caller asked of one product: a backend name and a policy, either unset."""

    backend: str | None = None
    policy: Any = None
    planning: str | None = None


@dataclass(frozen=True)
class Operand:
    """A matrix as selection and planning see it, handed down by dispatch.

    Selection never calls up into the matrix: what it reads of one is here.

    Attributes
    ----------
    dtype, index_dtype : numpy.dtype
        Of the values and of the indices (the wider of ``indices`` and ``indptr``).
    backend, policy, planning : str, Policy, str or None
        ``A.backend``, ``A.policy`` and ``A.planning``.
    mixed : bool
        ``A.mixed_precision``.
    mirror : callable
        ``mirror(residence, value_dtype) -> DeviceMatrix``: the validated mirror where a
        backend computes (made once, on first request).
    cache : callable
        ``cache() -> MatrixCache``: where the matrix keeps its choices (planning's).
    format : str
        The format of its mirrors (``"csr"``, or ``"bsr"`` for the BSR classes): a backend
        named for it must list it in ``Backend.formats``.
    """

    dtype: np.dtype
    index_dtype: np.dtype
    backend: str | None = None
    policy: Any = None
    planning: str | None = None
    mixed: bool = False
    mirror: Callable = field(default=None, repr=False, compare=False)
    cache: Callable = field(default=None, repr=False, compare=False)
    format: str = "csr"


# Columns of X are rounded up to a power of two for planning (a plan measured with k = 24
# serves k = 17..32); past this many, one bucket.
LARGEST_BUCKET = 256


def k_bucket(k: int) -> int:
    """The bucket of ``k`` columns: the power of two at least ``k``, at most
    ``LARGEST_BUCKET`` (which stands for every k over half of it)."""
    bucket = 1
    while bucket < k and bucket < LARGEST_BUCKET:
        bucket *= 2
    return bucket


class Operation(NamedTuple):
    """The product a choice is for.

    ``kind`` is ``"A @ x"`` (one vector: ``A @ x``, ``A.T @ x``, and ``A @ X`` with one
    column) or ``"A @ X"`` (several right-hand sides: ``columns`` is the bucket of X's k
    columns, :func:`k_bucket`, and ``order`` X's memory order, ``"C"`` or ``"F"``). A
    product on ``A.T`` is one on the transpose's own mirror, so it is planned the same way.
    New kinds (sparse x sparse) add their own values of ``kind``.
    """

    kind: str = "A @ x"
    columns: int = 1
    order: str = "C"

    def __str__(self) -> str:
        if self.kind != "A @ X":
            return self.kind
        if self.columns >= LARGEST_BUCKET:
            k = f"k > {LARGEST_BUCKET // 2}"
        elif self.columns <= 2:
            k = f"k = {self.columns}"
        else:
            k = f"k = {self.columns // 2 + 1}..{self.columns}"
        return f"A @ X ({k}, {self.order} order)"


VECTOR = Operation()


@functools.lru_cache(maxsize=1024)
def matmat_operation(k: int, order: str) -> Operation:
    """The operation of ``A @ X`` for an X of ``k`` columns in memory order ``order``
    (one column is ``A @ x``); made once per k and order (each product asks)."""
    return VECTOR if k == 1 else Operation("A @ X", k_bucket(k), order)


def order_of(x) -> str:
    """The memory order of a product's right-hand side ``x`` and result: ``"F"`` for an X
    stored column by column, and not also row by row (a plan reads it as it is), else
    ``"C"`` (any other X is copied to C order)."""
    if x.ndim != 2:
        return "C"
    if hasattr(x, "_f_contiguous"):  # CuPy keeps both as attributes (.flags builds an object)
        return "F" if x._f_contiguous and not x._c_contiguous else "C"
    return "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"


def operation_of(x) -> Operation:
    """The operation of a product with right-hand side ``x``: ``A @ x`` for a vector or a
    single column, else ``A @ X`` by X's column bucket and memory order (what dispatch
    hands planning of x, with its dtype: never x itself)."""
    if x.ndim == 1:
        return VECTOR
    return matmat_operation(x.shape[1], order_of(x))


@dataclass(frozen=True)
class Choice:
    """The backend and policy of one product, and why (what :func:`explain` shows).

    Attributes
    ----------
    backend : str
        The backend's name.
    policy : Policy
        Its launch policy.
    reason : str
        Why this backend: the name asked for, or the rule or measurement of ``auto``.
    stats : RowLengthStats or None
        The row statistics the rules looked at (None where no rule ran).
    value_dtype : numpy.dtype
        The dtype the product computes in.
    requested : str
        The backend name in force (``"auto"`` or a backend's).
    override : str or None
        For :func:`explain`: a note when products of the matrix use another name now.
    level : str
        The planning level that decided: ``"estimate"`` (rules, a tuned entry, or the name
        asked for), ``"measure"`` or ``"exhaustive"`` (timed on the real operands).
    measurements : tuple of Measurement
        What planning timed (empty for an estimate).
    planning_ms : float or None
        Wall milliseconds the planning took (None for an estimate).
    storage_dtype : numpy.dtype or None
        The dtype the matrix's values stay in on the device when it is not
        ``value_dtype`` (mixed precision, ``A.mixed_precision``); None otherwise.
    implementation : Backend
        The backend object itself (what dispatch makes the plan with).
    operation : Operation
        The product this choice is for.
    structure : tuple of str
        What planning's backends found in the matrix's structure (``block``: its block
        size and fill, or why it was not timed); empty for an estimate.
    """

    backend: str
    policy: Any
    reason: str
    stats: Any
    value_dtype: np.dtype
    requested: str = AUTO
    override: str | None = None
    level: str = "estimate"
    measurements: tuple = ()
    planning_ms: float | None = None
    storage_dtype: np.dtype | None = None
    implementation: Any = field(default=None, repr=False, compare=False)
    operation: Operation = VECTOR
    structure: tuple = ()

    @property
    def row_class(self) -> str | None:
        return None if self.stats is None else row_class(self.stats)

    def __str__(self) -> str:
        lines = [
            f"{self.requested} -> backend {self.backend!r} with {self.policy!r}",
            f"  why: {self.reason}",
        ]
        if self.operation != VECTOR:
            lines.insert(1, f"  product: {self.operation}")
        s = self.stats
        if s is not None:
            lines.append(
                f"  rows: {s.n_rows:,} x {s.n_cols:,}, nnz {s.nnz:,}; row length mean "
                f"{s.mean:.1f}, std {s.std:.1f}, min {s.min}, max {s.max}, empty rows "
                f"{s.empty_rows:,}; imbalance (max/mean) {s.imbalance:.1f}, column spread "
                f"{s.column_spread:.3f}, class {row_class(s)!r}"
            )
        lines.append(f"  value dtype: {self.value_dtype}")
        if self.storage_dtype is not None:
            lines.append(
                f"  mixed precision: the values stay {self.storage_dtype} on the device "
                f"(A.mixed_precision), x, y and the sums are {self.value_dtype}"
            )
        lines.append(
            f"  planning: {self.level}"
            + (
                f" ({self.planning_ms:.1f} ms, {len(self.measurements)} candidates timed on the "
                "real operands)"
                if self.planning_ms is not None
                else ""
            )
        )
        for m in self.measurements:
            lines.append(f"    {m}")
        lines.extend(f"  structure: {note}" for note in self.structure)
        if self.override is not None:
            lines.append(f"  note: {self.override}")
        return "\n".join(lines)

    __repr__ = __str__


class Shortlist(NamedTuple):
    """What selection answers planning's one question, what to time for an estimate
    (:func:`sparsegpu.engine._select.short_list`).

    ``pairs``: the (backend, policy) pairs, the estimate's first; ``structure``: what the
    usable GPU backends found in the matrix's structure (``block``: its block size and
    fill, or why it was not timed), for ``auto``'s product; empty otherwise.
    """

    pairs: list
    structure: tuple = ()
