"""The protocol every backend implements: declared once here, implemented per module.

A backend is a small object: its name, where its mirror lives, which dtypes it takes,
whether it is usable here, its default policy, and ``plan``, which turns a validated
:class:`~sparsegpu.device._mirror.DeviceMatrix` and a policy into an immutable :class:`Plan`.
Choosing among backends is selection's (:mod:`sparsegpu.engine._select`) and planning's
(:mod:`sparsegpu.engine._planning`); the registry (:mod:`sparsegpu.engine._registry`) holds
them by name.
"""

from __future__ import annotations

import numpy as np

from ..device._mirror import CUPY, DeviceMatrix, PlanKey, Residence
from ..device._result_buffers import BlockResults, ResultBuffers
from ._spmm import RowSplitSpmm, is_fortran, spmm_supports
from .policy import Policy

FLOAT_AND_COMPLEX = tuple(
    np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)
)
INT32_AND_INT64 = (np.dtype(np.int32), np.dtype(np.int64))


# From this many columns a GPU plan without an SpMM of its own runs the row-split SpMM
# kernel instead of k matvecs: it reads A once, and its column lanes load 16 bytes of X's
# row at a time (the kernel it replaced, with one value per lane, lost to k matvecs below
# 16 columns: H200, 3-D Poisson 128^3, float64, 0.6x at k = 1..8; solvers_h200.json).
SPMM_MIN_COLUMNS = 2


class Plan:
    """A ready-to-run product ``y = A @ x`` for one mirror and one policy.

    Immutable once made: compiled kernels, launch shape, descriptors, workspaces.
    :meth:`matvec` and :meth:`matmat` check ``x`` and ``out`` (:meth:`operands`) before any
    pointer reaches a kernel; subclasses implement :meth:`_matvec` (and may implement
    :meth:`_matmat`), which receive checked operands and a result buffer to fill.
    """

    #: Whether the plan reads the mirror's values where they are (its kernels bound to the
    #: ``data`` array), so that values rewritten in place keep it valid
    #: (:meth:`DeviceMatrix.rewrite_values`); False for plans that copy or convert them.
    values_by_reference = False

    def __init__(self, matrix: DeviceMatrix, policy: Policy, vector_dtype=None):
        self.matrix = matrix
        self.policy = policy
        # what a well-formed matvec looks like, for the one-comparison check of each call;
        # x and y are in the mirror's dtype, or in vector_dtype (a mixed-precision plan)
        self._array_type = matrix.xp.ndarray
        self._dtype = np.dtype(vector_dtype) if vector_dtype is not None else matrix.dtype
        self._y_shape = (matrix.shape[0],)
        self._n_cols = matrix.shape[1]
        # CuPy keeps contiguity as an attribute (``.flags`` builds an object per call); the
        # constructor, not ``empty``, saves a Python call per product
        self._on_device = matrix.xp is not np
        self._allocate = matrix.xp.ndarray if self._on_device else np.empty
        self._xp = matrix.xp
        # small results are taken back once their caller drops them (_result_buffers)
        nbytes = matrix.shape[0] * self._dtype.itemsize
        matrix_nbytes = matrix.nbytes
        self._results = (
            ResultBuffers(matrix.xp, self._y_shape, self._dtype)
            if ResultBuffers.wanted(self._on_device, nbytes, matrix_nbytes)
            else None
        )
        self._block_results = (
            BlockResults(matrix.xp, matrix.shape[0], self._dtype, matrix_nbytes)
            if self._on_device
            else None
        )
        # whether A @ X may run the row-split SpMM kernel (made on the first such product):
        # on the GPU, on CSR arrays, in the mirror's own dtype, one the kernel is
        # instantiated for
        self._spmm_kernels = (
            matrix.residence.name == CUPY.name
            and matrix.format == "csr"
            and self._dtype == matrix.dtype
            and spmm_supports(self._dtype)
        )
        self._row_split = None

    def operands(self, x, out, ndim: int):
        """``(x, y)`` checked for a product: ``y`` is ``out`` or a new result buffer.

        ``x`` must be an array of the mirror's module and the plan's vector dtype (the
        mirror's, unless mixed precision), C-contiguous, of shape
        ``(n_cols,)`` (``ndim`` 1) or ``(n_cols, k)`` (``ndim`` 2: C- or Fortran-contiguous);
        ``out`` likewise of shape ``(n_rows,)`` or ``(n_rows, k)`` (in x's memory order),
        and sharing no memory with ``x`` (a kernel would read what it has already
        overwritten). Anything else is a ValueError that says what was expected and what
        came.
        """
        m = self.matrix
        xp = m.xp
        n_rows, n_cols = m.shape
        k = x.shape[-1] if ndim == 2 and getattr(x, "ndim", 0) == 2 else None
        shape = (n_cols,) if ndim == 1 else (n_cols, k if k is not None else "k")
        order = "F" if k is not None and type(x) is xp.ndarray and is_fortran(x) else "C"
        _require("x", x, shape, xp, self._dtype, "CF" if ndim == 2 else "C")
        want = (n_rows,) if ndim == 1 else (n_rows, k)
        if out is None:
            return x, xp.empty(want, dtype=self._dtype, order=order)
        _require("out", out, want, xp, self._dtype, order)
        if out.size and x.size and _overlap(x, out, xp):
            raise ValueError(
                "out shares memory with x; a product cannot overwrite its own input: pass a "
                "separate out (or out=None)"
            )
        return x, out

    def matvec(self, x, out=None):
        """``A @ x`` for a 1-D x of length n_cols in the mirror's dtype, on the current stream.

        ``out``, when given, is a C-contiguous 1-D array of length n_rows in the mirror's
        dtype, sharing no memory with ``x``; it is filled and returned.
        """
        if (
            self._on_device
            and type(x) is self._array_type
            and x.dtype == self._dtype
            and x.ndim == 1
            and x.size == self._n_cols
            and x._c_contiguous
        ):  # the solvers' call: the full check of x below would say the same
            if out is None:
                results = self._results
                if results is not None:
                    return self._matvec(x, results.take())
                return self._matvec(x, self._allocate(self._y_shape, self._dtype))
            if self.takes_out(x, out):
                return self._matvec(x, out)
        x, y = self.operands(x, out, 1)
        return self._matvec(x, y)

    def takes_out(self, x, out) -> bool:
        """True when the device array ``out`` can receive ``A @ x`` as it is: this plan's
        array type and dtype, the product's shape (``(n_rows,)`` for a vector ``x``,
        ``(n_rows, k)`` for an ``X`` of k columns), C-contiguous (in X's memory order for
        an ``X``, C- or Fortran-contiguous), no bytes shared with the device ``x``. (The
        dispatcher asks before choosing between writing ``out`` directly and copying into
        it.)"""
        if type(out) is not self._array_type or out.dtype != self._dtype:
            return False
        if x.ndim == 1:
            fits = out.shape == self._y_shape and out._c_contiguous
        else:
            fits = out.shape == (self._y_shape[0], x.shape[1]) and (
                out._c_contiguous if x._c_contiguous else out._f_contiguous
            )
        return fits and not _overlap(x, out, self._xp)

    def matmat(self, X, out=None):
        """``A @ X`` for a 2-D X of shape (n_cols, k), C- or Fortran-contiguous; ``out``, when
        given, is (n_rows, k) in X's memory order (a new one is made in that order, or a
        small one its caller dropped is taken back: :mod:`sparsegpu.device._result_buffers`)."""
        if (
            self._on_device
            and type(X) is self._array_type
            and X.dtype == self._dtype
            and X.ndim == 2
            and X.shape[0] == self._n_cols
            and (X._c_contiguous or X._f_contiguous)
        ):  # a device X as it comes (the full check of operands would say the same)
            if out is None:
                return self._matmat(X, self._block_results.take(X.shape[1], not X._c_contiguous))
            if self.takes_out(X, out):
                return self._matmat(X, out)
        X, Y = self.operands(X, out, 2)
        return self._matmat(X, Y)

    def _matvec(self, x, y):
        """Fill ``y`` with ``A @ x`` (both checked by :meth:`operands`) and return it."""
        raise NotImplementedError

    def _matmat(self, X, Y):
        """Fill ``Y`` with ``A @ X`` (both checked, in one memory order).

        Default: on the GPU, from ``SPMM_MIN_COLUMNS`` columns on, the row-split SpMM
        kernel that reads A once for all k columns (:mod:`sparsegpu.backends._spmm`, its shape from
        :meth:`_spmm_shape`); below that, on the host, for the 16-bit floats (which
        that kernel is not instantiated for) and in mixed precision (it reads X in the
        values' dtype), one matvec per column.
        """
        if self._spmm_kernels and X.shape[1] >= SPMM_MIN_COLUMNS:
            row_split = self._row_split
            if row_split is None:
                row_split = self._row_split = RowSplitSpmm(self.matrix, *self._spmm_shape())
            return row_split(X, Y)
        xp = self.matrix.xp
        column = xp.empty(Y.shape[0], dtype=Y.dtype)
        for j in range(X.shape[1]):
            Y[:, j] = self._matvec(xp.ascontiguousarray(X[:, j]), column)
        return Y

    def _spmm_shape(self) -> tuple:
        """(lanes splitting a row's nonzeros or None for the rule, block size) of the
        row-split SpMM this plan runs; the vector family's plans take their policy's."""
        return None, 256


def plan_on(matrix: DeviceMatrix, backend, policy, vector_dtype=None) -> Plan:
    """The plan of ``backend`` and ``policy`` on ``matrix`` (made once, kept on the mirror);
    with a ``vector_dtype``, the mixed-precision plan reading vectors of that dtype."""
    if vector_dtype is None:
        return matrix.get_plan(PlanKey(backend.name, policy), lambda: backend.plan(matrix, policy))
    return matrix.get_plan(
        PlanKey(backend.name, policy, vector_dtype),
        lambda: backend.plan(matrix, policy, vector_dtype=vector_dtype),
    )


_LAYOUTS = {"C": "C-contiguous", "F": "Fortran-contiguous", "CF": "C- or Fortran-contiguous"}


def _require(name: str, a, shape: tuple, xp, dtype, orders: str = "C") -> None:
    """Raise ValueError unless ``a`` is an array of module ``xp`` and ``dtype`` with
    exactly ``shape``, contiguous in one of ``orders`` (``"C"``, ``"F"`` or ``"CF"``)."""
    if (
        type(a) is not xp.ndarray
        or a.shape != shape
        or a.dtype != dtype
        or not (
            ("C" in orders and a.flags.c_contiguous) or ("F" in orders and a.flags.f_contiguous)
        )
    ):
        raise ValueError(
            f"{name} must be a {_LAYOUTS[orders]} {xp.__name__} array of shape "
            f"{_shape_text(shape)} and dtype {dtype}, got {_describe(a)}"
        )


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _describe(a) -> str:
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        return f"a {type(a).__name__}"
    layout = (
        "C-contiguous"
        if a.flags.c_contiguous
        else "Fortran-contiguous"
        if a.flags.f_contiguous
        else "not contiguous"
    )
    return f"a {type(a).__module__.split('.')[0]} {type(a).__name__} {a.shape} {a.dtype} ({layout})"


def _overlap(a, b, xp) -> bool:
    """True when two C-contiguous arrays of one module share bytes."""
    if xp is np:
        return np.may_share_memory(a, b)
    start_a, start_b = a.data.ptr, b.data.ptr
    return start_a < start_b + b.nbytes and start_b < start_a + a.nbytes


class Backend:
    """Base class of the backends; subclasses set the class attributes and ``plan``.

    Attributes
    ----------
    name : str
        What users pass to ``A.backend`` / ``use_backend``.
    description : str
        One line for ``sparsegpu.backends()`` and ``sparsegpu info``.
    residence : Residence
        Where the mirror this backend reads lives.
    value_dtypes, index_dtypes : tuple of numpy.dtype
        What it computes with; anything else is refused with a TypeError.
    policy_type : type
        The policy dataclass of its kernel family.
    capturable : bool
        Whether its products can be captured into a CUDA graph (a solver's block of
        iterations replayed at once).
    estimated : bool
        Whether ``auto``'s rules (planning ``estimate``) may pick it. False for a backend
        that builds a format of its own from the mirror (``delta16``): a matrix multiplied
        once would pay for it, and whether it pays off is found by measurement.
    planned : bool
        Whether planning ``measure`` times its default policy on every matrix it takes
        (besides the short list of :meth:`planning_candidates`), with its tuned policy and
        its :meth:`planned_policies`.
    mixed_pairs : tuple of (numpy.dtype, numpy.dtype)
        (values, vectors) dtype pairs it computes in mixed precision (values kept in the
        first, x, y and the sums in the second: ``A.mixed_precision``); its ``plan`` then
        takes ``vector_dtype``.
    formats : tuple of str
        The mirror formats its plans read: ``"csr"``
        (:class:`~sparsegpu.device._mirror.DeviceMatrix`, the CSR classes' mirrors) and/or ``"bsr"``
        (:class:`~sparsegpu.device._block_mirror.DeviceBlockMatrix`, the BSR classes').
    """

    name: str = ""
    description: str = ""
    residence: Residence = CUPY
    value_dtypes: tuple = FLOAT_AND_COMPLEX
    index_dtypes: tuple = INT32_AND_INT64
    policy_type: type = Policy
    capturable: bool = True
    estimated: bool = True
    planned: bool = False
    mixed_pairs: tuple = ()
    formats: tuple = ("csr",)

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here (no GPU, no library), or None; in a few words
        when the GPU is the reason (:func:`sparsegpu.device._cuda.backend_reason`)."""
        from ..device import _cuda

        return _cuda.backend_reason()

    def refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        """Why this backend cannot take this particular matrix (a size limit), or None."""
        return None

    def planning_refuse_reason(self, matrix: DeviceMatrix) -> str | None:
        """Why planning by measurement does not time this backend on this matrix although
        it could run it (a format of its own that would not pay here: ``block`` below
        its fill), or None. Naming the backend still runs it."""
        return None

    def structure_note(self, matrix: DeviceMatrix) -> str | None:
        """What this backend found in the matrix's structure, for ``explain`` (``block``:
        the block size, the fill and the share of CSR's bytes), or None."""
        return None

    def check_dtypes(self, value_dtype, index_dtype) -> None:
        """Raise TypeError naming what is supported when a dtype is not."""
        if np.dtype(value_dtype) not in self.value_dtypes:
            raise TypeError(
                f"backend {self.name!r} does not support value dtype {np.dtype(value_dtype)}; "
                f"it supports {', '.join(str(d) for d in self.value_dtypes)}"
            )
        if np.dtype(index_dtype) not in self.index_dtypes:
            raise TypeError(
                f"backend {self.name!r} does not support index dtype {np.dtype(index_dtype)}; "
                f"it supports {', '.join(str(d) for d in self.index_dtypes)}"
            )

    def supports(self, matrix: DeviceMatrix) -> bool:
        """True when this backend can compute with this mirror (format, dtypes and limits)."""
        return (
            matrix.format in self.formats
            and matrix.dtype.newbyteorder("=") in self.value_dtypes
            and matrix.index_dtype.newbyteorder("=") in self.index_dtypes
            and self.refuse_reason(matrix) is None
        )

    def policy_fits(self, matrix: DeviceMatrix, policy: Policy) -> bool:
        """True when a plan with ``policy`` can be made on this mirror (planning asks
        before it reuses a policy measured on another matrix); every policy by default."""
        return True

    def default_policy(self, matrix: DeviceMatrix) -> Policy:
        """The policy derived from the device and the matrix alone (occupancy, row lengths).

        Tuned policies are not looked up here: the tuning store sits above the backends and
        is consulted by selection (:func:`sparsegpu.engine._select.default_policy`).
        """
        return self.policy_type(source="default")

    def candidates(self, matrix: DeviceMatrix) -> list[Policy]:
        """The policies the autotuner sweeps for this matrix (the default one included)."""
        return [self.default_policy(matrix)]

    def planning_candidates(self, matrix: DeviceMatrix) -> list[Policy]:
        """The few policies planning by measurement times for this backend (a short list,
        each a few products' worth); empty when the default policy is the only sensible
        one without a full sweep."""
        return []

    def planned_policies(self, matrix: DeviceMatrix) -> list[Policy]:
        """Policies a ``planned`` backend has timed for ``auto`` besides its tuned and untuned
        ones (a few whose best differs by matrix); none by default."""
        return []

    def matmat_candidates(self, matrix: DeviceMatrix, columns: int, order: str) -> list[Policy]:
        """The policies planning times for ``A @ X`` with X of about ``columns`` columns
        (a bucket: a power of two) in memory order ``order`` (``"C"`` or ``"F"``), when
        this backend's plans run an SpMM of their own that the policy shapes (cuSPARSE's
        algorithms, the row-split kernel's lanes, the merge-path teams); empty otherwise."""
        return []

    def plan(self, matrix: DeviceMatrix, policy: Policy) -> Plan:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<sparsegpu backend {self.name!r}>"
