"""The one answer check: a reference answer, the error each entry may have, seeded vectors.

:class:`AnswerCheck` compares an answer with a reference within a bound; :class:`Oracle`
is the check against scipy's product. The autotuner checks every candidate with an
oracle before and after timing, ``sparsegpu bench`` checks every contender with one,
planning checks each candidate against the estimate's answer with the
:class:`AnswerCheck` of a :class:`ProductBound` (scipy on the host would cost more than
the planning), and
:mod:`sparsegpu.testing` re-exports the pieces for the test suite, so all of them accept
answers by the same rule.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..device import _cuda
from ..device._compare import count_outside
from ..device._dtypes import eps, is_half


def random_values(rng, n, dtype):
    dtype = np.dtype(dtype)
    v = rng.uniform(-1.0, 1.0, n)
    if dtype.kind == "c":
        v = v + 1j * rng.uniform(-1.0, 1.0, n)
    return v.astype(dtype)


def random_vector(n, dtype, seed=0, xp=np):
    """A seeded random vector (complex for complex dtypes), never all zeros.

    Parameters
    ----------
    n : int
        Length.
    dtype : dtype
        Value dtype; entries uniform in [-1, 1) (real and imaginary parts alike).
    seed : int
        Seed of :func:`numpy.random.default_rng`: the same seed gives the same values
        on the host and on the GPU.
    xp : module
        ``numpy``, or ``cupy`` for a device copy of the same values.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
    """
    v = random_values(np.random.default_rng(seed), n, dtype)
    return v if xp is np else xp.asarray(v)


def tolerance(dtype, max_row_length: int = 1) -> float:
    """Relative tolerance for a product in ``dtype``: 16 eps sqrt(row length), at least 16 eps.

    For float16 and bfloat16, whose sums run in float32: the rounding of the result and of
    the reference to the 16-bit type (eps each) plus float32's tolerance.

    Parameters
    ----------
    dtype : dtype
        Value dtype of the product (0 for integer dtypes: exact).
    max_row_length : int
        The longest row's number of entries (the longest sum).

    Returns
    -------
    float
    """
    dtype = np.dtype(dtype)
    if is_half(dtype):
        return 2 * eps(dtype) + tolerance(np.float32, max_row_length)
    e = eps(dtype) if dtype.kind in "fc" else 0.0
    return float(16 * e * np.sqrt(max(int(max_row_length), 1)))


class AnswerCheck:
    """A reference answer and the error each of its entries may have.

    Parameters
    ----------
    reference : numpy.ndarray or cupy.ndarray
        The answer to compare with (1-D, or 2-D for several right-hand sides).
    bound : float or array
        How far each entry may be from the reference (broadcast against it).
    source : str
        What the reference is, for the messages ("scipy", "the estimate").
    """

    def __init__(self, reference, bound, source: str = "the reference"):
        self.y = reference
        self.bound = bound
        self.source = source
        self._half = is_half(reference.dtype)
        self._on_device: dict = {}

    def _reference(self, xp):
        if xp is np or _cuda.is_cupy_array(self.y):
            return self.y, self.bound
        key = xp.__name__
        if key not in self._on_device:
            self._on_device[key] = (xp.asarray(self.y), xp.asarray(self.bound))
        return self._on_device[key]

    def error(self, y) -> str | None:
        """Why ``y`` is not the reference answer, or None when it is.

        Parameters
        ----------
        y : numpy.ndarray or cupy.ndarray
            The answer; compared where it is (on the GPU for a CuPy array).

        Returns
        -------
        str or None
            The first entry out of bounds (or not finite) and by how much, or the shape or
            dtype that differs; None when every entry is within its bound.
        """
        if y.shape != self.y.shape or y.dtype != self.y.dtype:
            return (
                f"result has shape {y.shape} and dtype {y.dtype}, "
                f"expected {self.y.shape} and {self.y.dtype}"
            )
        if y.size == 0:
            return None
        xp = _cuda.cupy_or_none() if _cuda.is_cupy_array(y) else np
        reference, bound = self._reference(xp)
        if self._half:  # compare in float64, not in the 16-bit type
            y, reference = y.astype(np.float64), reference.astype(np.float64)
        outside = None if xp is np else count_outside(y, reference, bound)
        if outside is None:  # on the host, or a bound this kernel does not take
            within = bool((xp.abs(y - reference) <= bound).all())  # NaN compares False
        else:
            within = outside == 0  # NaN counts as outside
        if within:
            return None
        return self._describe(_host(y))

    def _describe(self, y: np.ndarray) -> str:
        y = y.astype(np.float64) if self._half else y
        if not np.all(np.isfinite(y)):
            at = _entry(y, int(np.argmax(~np.isfinite(y))))
            return f"{_name(at)} is {y[at]} (not written, or overflow)"
        reference = _host(self.y)
        reference = reference.astype(np.float64) if self._half else reference
        bound = np.broadcast_to(_host(self.bound), y.shape)
        at = _entry(y, int(np.argmax(np.abs(y - reference) - bound)))
        return (
            f"{_name(at)} is {y[at]} but {self.source} gives {reference[at]} "
            f"(error {abs(y[at] - reference[at]):.3e} > tolerance {bound[at]:.3e})"
        )


class ProductBound(NamedTuple):
    """How far the entries of ``A @ x`` may be off, as far as the operands tell before the
    product runs: the dtype's tolerance for the longest row, and the size of a row's terms
    (``max |A| * max |x|`` times the mean row length), which bounds the sums where the rows
    cancel. :meth:`check` adds the size of the answer itself."""

    relative_tolerance: float
    terms_size: float

    @classmethod
    def of_operands(cls, matrix, x, dtype) -> ProductBound:
        """The bound of ``A @ x``: ``matrix`` is A's mirror, ``x`` is anywhere, its size read
        in ``dtype``, the product's value dtype (as the products read it)."""
        terms_size = 0.0
        if matrix.nnz and x.size:
            x_size = float(abs(x.astype(dtype, copy=False)).max())
            terms_size = float(matrix.xp.abs(matrix.data).max()) * x_size
            terms_size *= max(matrix.stats.mean, 1.0)
        return cls(tolerance(matrix.dtype, max(matrix.stats.max, 1)), terms_size)

    def check(self, y, source: str = "the reference") -> AnswerCheck:
        """A check of other products against ``y``, this product's answer: each entry may be
        off by the tolerance times the larger of ``max |y|`` and the terms' size (at least
        1), four times over."""
        size = float(abs(y).max()) if y.size else 0.0
        bound = 4 * self.relative_tolerance * max(size, self.terms_size, 1.0)
        return AnswerCheck(y, bound, source)


def _host(a) -> np.ndarray:
    return a.get() if _cuda.is_cupy_array(a) else np.asarray(a)


def _entry(y: np.ndarray, flat: int) -> tuple:
    return np.unravel_index(flat, y.shape)


def _name(at: tuple) -> str:
    return f"row {at[0]}" if len(at) == 1 else f"entry ({at[0]}, {at[1]})"


class Oracle(AnswerCheck):
    """scipy's answer to ``A @ x`` in one value dtype, and the error bound of each row.

    The reference is computed in double precision from the values rounded to ``dtype`` (the
    values every backend computes with); row i may differ by ``tolerance * (|A| |x|)_i``,
    the standard bound on a dot product's rounding error. The check runs where the answer
    is (one reduction and one scalar transfer on the GPU).

    Parameters
    ----------
    host_csr : scipy.sparse matrix
    dtype : dtype
        The value dtype of the product.
    x : numpy.ndarray, optional
        The x to multiply; default a seeded :func:`random_vector`.
    seed : int
    """

    def __init__(self, host_csr, dtype, x=None, seed: int = 0):
        dtype = np.dtype(dtype)
        host = host_csr.tocsr()
        if is_half(dtype):  # scipy computes in neither: values rounded, kept in float64
            host = host.astype(np.float64)
            host.data = host.data.astype(dtype).astype(np.float64)
        else:
            host = host.astype(dtype)
        self.x = random_vector(host.shape[1], dtype, seed=seed) if x is None else x
        wide = np.complex128 if dtype.kind == "c" or self.x.dtype.kind == "c" else np.float64
        x_wide = np.asarray(self.x).astype(wide)
        lengths = np.diff(host.indptr)
        tol = tolerance(dtype, int(lengths.max()) if lengths.size else 1)
        super().__init__(
            (host.astype(wide) @ x_wide).astype(dtype),
            tol * np.maximum(abs(host) @ np.abs(x_wide), 1.0),
            source="scipy",
        )
