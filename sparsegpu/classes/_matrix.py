"""The scipy subclasses: argument handling, the product hooks, the hooks of the mirrors.

``sparsegpu.csr_matrix`` / ``csr_array`` (and the ``csc`` classes that ``A.T`` returns)
are scipy classes in every respect but one: their products (``A @ x``, ``A.dot``,
``A * x`` for matrices, ``x @ A``, ``A.T @ x``, ``A.H @ x``, LinearOperator matvecs) go
through :mod:`sparsegpu.engine._dispatch` to the chosen backend. scipy's template method stays
in charge of argument handling (``_matmul_dispatch``); we override its hooks.

Never stale
-----------
A mirror that copies the arrays (a GPU upload, a dtype cast, a transpose) is dropped by
every path that changes the matrix: assignment to ``data``/``indices``/``indptr``/shape
(property setters) and every scipy method that changes the arrays in place (wrapped
below). The host arrays stay writable, as in scipy, by Python and compiled code alike: an
array handed out while a mirror holds it marks its buffer, and the next product compares
the arrays with the fingerprint taken then, dropping the mirrors if they were written.
Matrices sharing arrays (``A.T`` shares ``A``'s) drop their mirrors together. The mirror
state and those rules live in one :class:`~sparsegpu.classes._mirrors.MatrixMirrors` a
matrix holds; the methods here are the hooks that reach it.

Results kept on the device
--------------------------
A sparse product of GPU operands (``A @ B``) returns a matrix whose device copy is its
mirror and whose host arrays are made when the host first reads one of them
(:mod:`sparsegpu.device._pending`): ``A @ B @ C``, ``C @ x`` and a solve with ``C`` never copy it
to the host. Its shape, dtype, nnz and transposes need no host arrays either.
"""

from __future__ import annotations

import operator

import numpy as np
import scipy.sparse as sp

from ..device import _cuda
from ..device._block_mirror import DeviceBlockMatrix
from ..device._dtypes import is_half
from ..device._host_buffers import ARRAY_NAMES, MIRROR_LOCK
from ..device._mirror import DeviceMatrix, MatrixCache, Residence
from ..device._pending import PendingArrays
from ..engine import _dispatch, _planning, _registry, _sparse_dispatch
from ..engine._choice import Operand
from ._class_loss import adopting, warn_if_lost
from ._mirrors import MatrixMirrors, expose, invalidate, mirrors_of, reading_internally

# scipy >= 1.13 multiplies sparse operands through _matmul_sparse (older: _mul_sparse_matrix)
_SCIPY_MATMUL_SPARSE = hasattr(sp.csr_matrix, "_matmul_sparse")


def _half_target(dtype, arg1) -> np.dtype | None:
    """The 16-bit float dtype a new matrix is to hold (from ``dtype``, else from ``arg1``'s
    values), or None."""
    if dtype is not None:
        try:
            return np.dtype(dtype) if is_half(dtype) else None
        except TypeError:
            return None  # not a dtype: scipy says so
    values = arg1[0] if isinstance(arg1, tuple) and len(arg1) in (2, 3) else arg1
    found = getattr(values, "dtype", None)
    return found if found is not None and is_half(found) else None


_ATTRIBUTES: dict[type, dict] = {}


def _attributes_of(cls) -> dict:
    """The instance attributes scipy's constructor gives a ``cls`` besides its arrays, shape
    and flags (``maxprint``...), read once from an empty instance."""
    found = _ATTRIBUTES.get(cls)
    if found is None:
        empty = cls((np.empty(0), np.empty(0, np.int32), np.zeros(1, np.int32)), shape=(0, 0))
        skip = {*ARRAY_NAMES, "_shape", "_has_sorted_indices", "_has_canonical_format"}
        found = _ATTRIBUTES[cls] = {
            k: v for k, v in empty.__dict__.items() if k not in skip and not k.startswith("_sg_")
        }
    return found


def _stored(name):
    """A property storing ``name`` in the instance dict; assignment drops the mirrors."""

    def fget(self):
        try:
            value = self.__dict__[name]
        except KeyError:
            if "_sg_pending" not in self.__dict__:
                raise
            self._sg_materialise()  # a result kept on the device: first host use
            value = self.__dict__[name]
        if name != "_shape":
            expose(value)
        return value

    def fset(self, value):
        # scipy re-assigns unchanged arrays and shapes (check_format): only a real change
        # drops this matrix's mirrors. Assignment never changes a shared buffer's contents,
        # so other matrices sharing the old array keep theirs.
        if "_sg_pending" in self.__dict__:
            self._sg_materialise()  # the other arrays must exist before one is replaced
        old = self.__dict__.get(name)
        if old is None or old is value or (name == "_shape" and old == value):
            self.__dict__[name] = value
            return
        # Assign, then drop, under the lock a mirror build holds: a build in another thread
        # either finished before (and is dropped here) or reads the new array.
        with MIRROR_LOCK:
            self.__dict__[name] = value
            self._sg_drop()

    return property(
        fget,
        fset,
        doc=f"scipy's ``{name}``; assigning it, or writing into it, drops the GPU mirror.",
    )


def _sorted_flag(d) -> bool:
    return d.get("_has_sorted_indices") is True


def _canonical_flag(d) -> bool:
    return d.get("_has_canonical_format") is True and d.get("_has_sorted_indices") is not False


# scipy's in-place methods that change nothing when scipy's cached flags say so (scipy
# reads the same flags first): then no mirror needs dropping (a product result is canonical)
_NO_OP_WHEN = {"sort_indices": _sorted_flag, "sum_duplicates": _canonical_flag}


def _invalidating(method_name):
    """Wrap scipy's method ``method_name``, which changes the arrays' contents in place, so
    that it first drops the mirrors of every matrix sharing them."""
    no_op = _NO_OP_WHEN.get(method_name)

    def method(self, *args, **kwargs):
        if no_op is None or not no_op(self.__dict__):
            self._sg_invalidate()
        return getattr(super(_SparseGPUMixin, self), method_name)(*args, **kwargs)

    method.__name__ = method_name
    method.__doc__ = f"scipy's ``{method_name}``; drops the GPU mirror first."
    return method


class _SparseGPUMixin:
    """What sparsegpu adds to scipy's CSR and CSC classes."""

    # Above CuPy's ndarray priority, so that ``cupy_x @ A`` defers to our __rmatmul__
    # (numpy already defers to scipy's 10.1; it defers to this just the same).
    __array_priority__ = 1000.0

    # Class-level defaults so objects made by scipy (``__dict__`` swaps, ``_with_data``)
    # need nothing extra in their dict.
    _sg_backend: str | None = None
    _sg_policy = None
    _sg_planning: str | None = None
    _sg_mixed: bool = False
    # what a mirror of this class's arrays is: CSR arrays, or BSR ones (_BSRMixin)
    _sg_mirror_type: type = DeviceMatrix

    data = _stored("data")
    indices = _stored("indices")
    indptr = _stored("indptr")
    _shape = _stored("_shape")

    def __init__(self, arg1, shape=None, dtype=None, copy=False, **kwargs):
        arg1 = _cuda.to_host(arg1)
        # scipy refuses 16-bit floats in its constructors: build in float32, keep the
        # 16-bit values (a (data, indices, indptr) tuple of them scipy takes as it is)
        half = _half_target(dtype, arg1)
        if half is not None and not isinstance(arg1, tuple):
            if isinstance(arg1, np.ndarray) or sp.issparse(arg1):
                arg1 = arg1.astype(np.float32)
            dtype = None
        elif half is not None:
            dtype = None
        super().__init__(arg1, shape=shape, dtype=dtype, copy=copy, **kwargs)
        if half is not None and self.data.dtype != half:
            self.data = self.data.astype(half)

    # ------------------------------------------------------------------ backend
    @property
    def backend(self) -> str | None:
        """This matrix's backend name, or None to defer to ``use_backend``, the
        ``SPARSEGPU_BACKEND`` environment variable, then ``"auto"``.

        Setting an unknown or unavailable name raises at once, listing the backends.
        """
        return self._sg_backend

    @backend.setter
    def backend(self, name: str | None):
        if name is not None:
            name = _registry.check_name(name)
        self._sg_backend = name

    @property
    def policy(self):
        """The launch policy for this matrix's backend, or None for the tuned default."""
        return self._sg_policy

    @policy.setter
    def policy(self, policy):
        from ..backends.policy import Policy

        if policy is not None and not isinstance(policy, Policy):
            raise TypeError(f"policy must be a sparsegpu Policy or None, got {policy!r}")
        self._sg_policy = policy

    @property
    def planning(self) -> str | None:
        """How ``auto`` plans this matrix's products: ``"estimate"`` (rules only),
        ``"measure"`` (time a few candidates on the second product) or ``"exhaustive"``
        (every backend and candidate policy); None defers to ``sparsegpu.planning``,
        ``SPARSEGPU_PLANNING``, then ``"measure"``."""
        return self._sg_planning

    @planning.setter
    def planning(self, level: str | None):
        self._sg_planning = None if level is None else _planning.check_level(level)

    @property
    def mixed_precision(self) -> bool:
        """Keep float32 values on the GPU for products with float64 vectors, computing in
        float64 (False by default: the values are widened to float64 on the device first).

        Each value is widened exactly in registers, so the sums are those of the widened
        product with the same kernel; the product reads 4 bytes a value instead of 8 and
        the mirror takes half the memory. Computed by ``vector``, ``readonly``,
        ``shuffle``, ``delta16`` and ``cusparse`` (``auto`` estimates and plans among
        them); another GPU backend named for such a product raises TypeError; on the host
        (``scipy``) and for complex products it changes nothing. Setting it takes effect
        on the next product.
        """
        return self._sg_mixed

    @mixed_precision.setter
    def mixed_precision(self, value: bool):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"mixed_precision must be True or False, got {value!r}")
        self._sg_mixed = bool(value)
        mirrors = self.__dict__.get("_sg_mirrors")
        if mirrors is not None and mirrors.cache is not None:  # choices made under the other
            mirrors.cache.choices.clear()

    def _sg_inherit(self, other):
        """Pass this matrix's backend choice on to a matrix derived from it."""
        if isinstance(other, _SparseGPUMixin):
            other._sg_backend = self._sg_backend
            other._sg_policy = self._sg_policy
            other._sg_planning = self._sg_planning
            other._sg_mixed = self._sg_mixed
        return other

    # ------------------------------------------------------------------- mirror
    def _sg_index_dtype(self) -> np.dtype:
        pending = self.__dict__.get("_sg_pending")
        if pending is not None:
            return pending.index_dtype
        d = self.__dict__
        return np.promote_types(d["indices"].dtype, d["indptr"].dtype)

    def _sg_layout(self):
        """(CSR shape of the stored arrays, True when they are this matrix's transpose)."""
        raise NotImplementedError

    def _sg_operand(self) -> Operand:
        """What selection and planning read of this matrix, its mirrors included."""
        self._sg_check_writes()
        return Operand(
            self.dtype, self._sg_index_dtype(), self._sg_backend, self._sg_policy,
            self._sg_planning, self._sg_mixed, self._sg_mirror, self._sg_cache_dict,
            self._sg_mirror_type.format,
        )  # fmt: skip

    # The mirror state and what keeps it fresh live in a MatrixMirrors (_mirrors); these
    # are the hooks the layers below call, each handing this matrix to it.
    def _sg_mirror(
        self, residence: Residence, value_dtype, transpose: bool = False
    ) -> DeviceMatrix:
        """The validated mirror for ``residence`` in ``value_dtype`` (made once); with
        ``transpose`` the mirror of ``self.T``, made from the device arrays this matrix
        shares with its views (no transpose on the host: ``A.T @ A`` and the Galerkin
        product's ``P.T``)."""
        mirrors = mirrors_of(self)
        mirrors.check_writes(self)
        return mirrors.mirror(self, residence, value_dtype, transpose)

    def _sg_cache_dict(self) -> MatrixCache:
        """The cache holding this matrix's mirrors and choices (made under the lock)."""
        mirrors = mirrors_of(self)
        mirrors.check_writes(self)
        return mirrors.cache_dict()

    def _sg_check_writes(self) -> None:
        """Before a product: were the arrays written since they were handed out?"""
        mirrors = self.__dict__.get("_sg_mirrors")
        if mirrors is not None:
            mirrors.check_writes(self)

    def _sg_materialise(self) -> None:
        """Make the host arrays of a result kept on the device (its first host use)."""
        if "_sg_pending" in self.__dict__:
            mirrors_of(self).materialise(self)

    def _sg_drop(self) -> None:
        """Drop this matrix's own mirrors (an attribute now refers to another array)."""
        mirrors = self.__dict__.get("_sg_mirrors")
        if mirrors is not None:
            mirrors.drop(self)

    def _sg_invalidate(self) -> None:
        """The arrays' contents are about to change: drop the mirrors of every matrix that
        shares a buffer with this one (``A.T`` shares ``A``'s)."""
        invalidate(self)

    def _sg_seed_copy(self, other, conjugate: bool) -> None:
        """Give ``other``, a fresh copy (or conjugate) of this matrix, its device arrays."""
        mirrors = self.__dict__.get("_sg_mirrors")
        if mirrors is not None and isinstance(other, _SparseGPUMixin):
            mirrors.seed_copy(other, conjugate)

    @classmethod
    def _sg_on_device(cls, stored: DeviceMatrix, shape, like, pending=None, shared=None):
        """A ``cls`` matrix of ``shape`` whose arrays are ``stored`` (canonical CSR of its
        stored layout), kept on the device until the host reads them; ``like``'s backend
        choice. ``pending`` and ``shared`` are given for a view sharing another's arrays.
        """
        matrix = cls.__new__(cls)
        d = matrix.__dict__
        d.update(_attributes_of(cls))
        d["_shape"] = (int(shape[0]), int(shape[1]))
        d["_has_sorted_indices"] = True
        d["_has_canonical_format"] = True
        MatrixMirrors.kept_on_device(matrix, stored, pending or PendingArrays(stored), shared)
        return like._sg_inherit(matrix)

    @property
    def shape(self):
        """The shape (rows, columns); setting it (matrices only) drops the GPU mirror."""
        return self.__dict__["_shape"]

    @shape.setter
    def shape(self, value):
        if not isinstance(self, sp.spmatrix):
            # scipy's own wording (a property without a setter), which its tests match
            raise AttributeError(
                f"property 'shape' of {type(self).__name__!r} object has no setter: the "
                "shape of a sparse array cannot be set; use reshape()"
            )
        self._sg_invalidate()
        sp.spmatrix.set_shape(self, value)

    @property
    def dtype(self):
        """The values' dtype (scipy's; known without host arrays for a result kept on the
        device)."""
        d = self.__dict__
        pending = d.get("_sg_pending")
        if pending is not None:
            return pending.dtype
        data = d.get("data")  # the stored array itself: no write-through view made to read it
        return data.dtype if data is not None else self.data.dtype

    @dtype.setter
    def dtype(self, newtype):
        self.data = self.data.view(newtype)

    @property
    def nnz(self) -> int:
        """Number of stored values, including explicit zeros (scipy's; known without host
        arrays for a result kept on the device)."""
        pending = self.__dict__.get("_sg_pending")
        if pending is not None:
            return pending.nnz
        with reading_internally():  # indptr[-1] is read, not handed out
            return super().nnz

    def __getstate__(self):
        self._sg_materialise()
        state = dict(self.__dict__)
        state.pop("_sg_mirrors", None)
        return state

    # in-place scipy methods: each drops the mirror before changing anything
    sort_indices = _invalidating("sort_indices")
    sum_duplicates = _invalidating("sum_duplicates")
    eliminate_zeros = _invalidating("eliminate_zeros")
    setdiag = _invalidating("setdiag")
    resize = _invalidating("resize")
    __setitem__ = _invalidating("__setitem__")
    __imul__ = _invalidating("__imul__")
    __itruediv__ = _invalidating("__itruediv__")
    __iadd__ = _invalidating("__iadd__")
    __isub__ = _invalidating("__isub__")

    # ----------------------------------------------------------------- products
    def _matmul_vector(self, other):
        if self.ndim != 2:
            return super()._matmul_vector(other)
        return _dispatch.apply(self, other)

    def _matmul_multivector(self, other):
        if self.ndim != 2:
            return super()._matmul_multivector(other)
        return _dispatch.apply(self, other)

    # scipy < 1.13 names the same hooks _mul_vector / _mul_multivector
    _mul_vector = _matmul_vector
    _mul_multivector = _matmul_multivector

    def _sg_cupy_matmul(self, other):
        """``A @ x`` for a CuPy x: shapes checked as scipy does, no host copy."""
        M, N = self.shape
        if other.ndim == 1 or (other.ndim == 2 and other.shape[1] == 1):
            if other.shape[0] != N:
                raise ValueError(
                    f"matmul: dimension mismatch with signature (n,k={N}),"
                    f"(k={other.shape[0]},1?)->(n,1?)"
                )
            if other.ndim == 1:
                return _dispatch.apply(self, other)
            return _dispatch.apply(self, other.ravel()).reshape(M, 1)
        if other.ndim == 2:
            if other.shape[0] != N:
                raise ValueError(
                    f"matmul: dimension mismatch with signature (n,k={N}),"
                    f"(k={other.shape[0]},m)->(n,m)"
                )
            return _dispatch.apply(self, other)
        raise ValueError(f"could not interpret dimensions: operand has shape {other.shape}")

    def __matmul__(self, other):
        # The per-call paths skip scipy's operand checks, which cost more than a small
        # product: a numpy vector of exactly n entries (scipy's answer: _matmul_vector),
        # and a CuPy x or X of n rows (solvers, block methods).
        shape = self.__dict__["_shape"]  # what scipy's ndim and shape read
        if (
            type(other) is np.ndarray
            and other.ndim == 1
            and (other.dtype.kind in "biufc" or is_half(other.dtype))
            and len(shape) == 2
            and other.shape[0] == shape[1]
        ):
            return _dispatch.apply(self, other)
        if _cuda.is_cupy_array(other) and len(shape) == 2:
            if other.ndim in (1, 2) and other.shape[0] == shape[1]:
                # a solver's x or a block method's X, shapes as scipy's
                return _dispatch.apply(self, other)
            return self._sg_cupy_matmul(other)
        if (
            _SCIPY_MATMUL_SPARSE
            and len(shape) == 2
            and sp.issparse(other)
            and other.ndim == 2
            and other.shape[0] == shape[1]
        ):
            # scipy's own sparse branch (_matmul_dispatch), without its scalar checks: a
            # first A @ B of a new pattern is a millisecond, and they took 5-10 us of it
            # (a mismatch goes to scipy, whose wording differs from version to version)
            return self._matmul_sparse(other)
        return super().__matmul__(other)

    def _matmul_dispatch(self, other):
        if _cuda.is_cupy_array(other) and self.ndim == 2:
            return self._sg_cupy_matmul(other)
        return super()._matmul_dispatch(other)

    def _mul_dispatch(self, other):  # scipy < 1.13
        if _cuda.is_cupy_array(other) and self.ndim == 2:
            return self._sg_cupy_matmul(other)
        return super()._mul_dispatch(other)

    def __rmatmul__(self, other):
        if _cuda.is_cupy_array(other) and self.ndim == 2:
            if other.ndim == 1:
                return self.transpose()._sg_cupy_matmul(other)
            return self.transpose()._sg_cupy_matmul(other.T).T
        return super().__rmatmul__(other)

    def transpose(self, axes=None, copy=False):
        pending = self.__dict__.get("_sg_pending")
        if pending is not None and axes is None:  # a view of the same arrays, on the device
            cls = self._csc_container if self.format == "csr" else self._csr_container
            shape = self.shape[::-1]
            if copy:
                return cls._sg_on_device(pending.device, shape, self)
            shared = mirrors_of(self).shared
            return cls._sg_on_device(pending.device, shape, self, pending, shared)
        with reading_internally():  # a view this matrix tracks (a sharer), or a copy
            result = self._sg_inherit(super().transpose(axes=axes, copy=copy))
        if not copy and isinstance(result, _SparseGPUMixin):
            mirrors_of(self).share_with(self, result)
        return result

    transpose.__doc__ = sp.csr_matrix.transpose.__doc__

    def copy(self):
        pending = self.__dict__.get("_sg_pending")
        if pending is not None:  # device arrays are never written: the copy may share them
            return type(self)._sg_on_device(pending.device, self.shape, self)
        with reading_internally():
            result = self._sg_inherit(super().copy())
        self._sg_seed_copy(result, conjugate=False)
        return result

    copy.__doc__ = sp.csr_matrix.copy.__doc__

    # ---- 16-bit floats, which scipy refuses: the conversions that make them usable
    def astype(self, dtype, casting="unsafe", copy=True):
        target = np.dtype(dtype) if is_half(dtype) else None
        if target is None:
            return super().astype(dtype, casting=casting, copy=copy)
        if target == self.dtype and not copy:
            return self
        return self._with_data(self.data.astype(target, casting=casting), copy=True)

    astype.__doc__ = sp.csr_matrix.astype.__doc__

    def toarray(self, order=None, out=None):
        if not is_half(self.dtype):
            return super().toarray(order=order, out=out)
        dense = super().astype(np.float32).toarray(order=order).astype(self.dtype)
        if out is None:
            return dense
        out[...] = dense
        return out

    toarray.__doc__ = sp.csr_matrix.toarray.__doc__

    # scipy builds derived matrices (``A * 2``, ``A - mu * I``, ``A.astype``, ``abs(A)``)
    # through these two hooks: the result keeps this matrix's backend choice, so code
    # like expm_multiply that shifts A still runs its products where the user asked.
    def _with_data(self, data, copy=True):
        return self._sg_inherit(super()._with_data(data, copy=copy))

    def _binopt(self, other, op):
        return self._sg_inherit(super()._binopt(other, op))

    def conjugate(self, copy=True):
        with reading_internally():  # a copy, or this matrix itself
            result = super().conjugate(copy=copy)
        if result is not self and self.dtype.kind == "c":
            self._sg_seed_copy(result, conjugate=True)
        return result

    conjugate.__doc__ = sp.csr_matrix.conjugate.__doc__

    # ---- results stay sparsegpu classes
    # scipy builds slices, format changes and sparse-sparse products through these hooks;
    # their results (scipy's CSR/CSC, or ours made by scipy without our attributes) come
    # back as sparsegpu classes with this matrix's backend choice. Issue 16.
    @staticmethod
    def _sg_class(format: str, array: bool):
        """The sparsegpu class for scipy format ``format`` ("csr", "csc" or "bsr") and
        kind, or None for a format sparsegpu has no class for."""
        return {
            ("csr", False): csr_matrix,
            ("csr", True): csr_array,
            ("csc", False): csc_matrix,
            ("csc", True): csc_array,
            ("bsr", False): bsr_matrix,
            ("bsr", True): bsr_array,
        }.get((format, array))

    @staticmethod
    def _sg_class_of(result):
        """``result``, a scipy CSR, CSC or BSR of either kind, as the matching sparsegpu
        class (sharing its arrays); anything else unchanged."""
        if isinstance(result, _SparseGPUMixin) or not sp.issparse(result):
            return result
        cls = _SparseGPUMixin._sg_class(result.format, not isinstance(result, sp.spmatrix))
        return result if cls is None else cls(result)

    def _sg_adopt(self, result):
        """``result`` as a sparsegpu class carrying this matrix's backend and policy."""
        return self._sg_inherit(self._sg_class_of(result))

    def __getitem__(self, key):
        return self._sg_adopt(super().__getitem__(key))

    # scipy's operators convert a right operand of another class through these: where the
    # left operand is scipy's, the result will be too (one warning, _class_loss)
    def asformat(self, format, copy=False):
        warn_if_lost(self)
        return super().asformat(format, copy=copy)

    asformat.__doc__ = sp.csr_matrix.asformat.__doc__

    def tocsr(self, copy=False):
        warn_if_lost(self)
        return self._sg_adopt(super().tocsr(copy=copy))

    tocsr.__doc__ = sp.csr_matrix.tocsr.__doc__

    def tocsc(self, copy=False):
        warn_if_lost(self)
        return self._sg_adopt(super().tocsc(copy=copy))

    tocsc.__doc__ = sp.csr_matrix.tocsc.__doc__

    def tobsr(self, *args, **kwargs):  # scipy's defaults (copy=True for CSR, False for BSR)
        warn_if_lost(self)
        return self._sg_adopt(super().tobsr(*args, **kwargs))

    tobsr.__doc__ = sp.csr_matrix.tobsr.__doc__

    def _matmul_sparse(self, other):
        stored = _sparse_dispatch.multiply(self, other)
        if stored is not None:  # computed on the GPU: kept there
            return type(self)._sg_on_device(stored, (self.shape[0], other.shape[1]), self)
        with reading_internally():  # scipy's product reads both and makes new arrays
            product = super()._matmul_sparse(other)
        return self._sg_adopt(product)

    def _mul_sparse_matrix(self, other):  # scipy < 1.13
        stored = _sparse_dispatch.multiply(self, other)
        if stored is not None:
            return type(self)._sg_on_device(stored, (self.shape[0], other.shape[1]), self)
        with reading_internally():
            product = super()._mul_sparse_matrix(other)
        return self._sg_adopt(product)

    # Python calls a reflected operator of the right operand first when its class is a
    # subclass of the left operand's and overrides it: ``S + A`` for a scipy S of A's
    # format and kind reaches these, and the result is ours. The sparse cases compute
    # what scipy would (``S - A`` is S's own subtraction), then adopt the result.
    def __radd__(self, other):  # other + self
        return self._sg_adopt(super().__radd__(other))

    def __rsub__(self, other):  # other - self
        if sp.issparse(other):
            with adopting():
                return self._sg_adopt(other.__sub__(self))
        return super().__rsub__(other)

    def __rmul__(self, other):  # other * self
        if sp.issparse(other):
            with adopting():
                return self._sg_adopt(other.__mul__(self))
        return super().__rmul__(other)

    # the classes scipy's own methods build their results with (tocsr, transpose, tobsr)
    @property
    def _csr_container(self):
        return csr_matrix if isinstance(self, sp.spmatrix) else csr_array

    @property
    def _csc_container(self):
        return csc_matrix if isinstance(self, sp.spmatrix) else csc_array

    @property
    def _bsr_container(self):
        return bsr_matrix if isinstance(self, sp.spmatrix) else bsr_array


class _CSRMixin(_SparseGPUMixin):
    def _sg_layout(self):
        return self.shape, False


class _CSCMixin(_CSRMixin):
    def _sg_layout(self):
        return (self.shape[1], self.shape[0]), True


def _check_blocksize(blocksize) -> None:
    """Refuse a ``blocksize`` that is not two positive integers, saying what it was: a
    TypeError where it is no pair at all (as scipy's, e.g. a number passed where
    ``maxprint`` is keyword-only), else a ValueError."""
    wanted = "blocksize must be two positive integers (rows, columns of a block), got"
    try:
        rows, cols = blocksize
    except TypeError as exc:
        raise TypeError(f"{wanted} {blocksize!r} ({exc}); e.g. blocksize=(3, 3)") from None
    except ValueError:
        rows = cols = None
    try:
        ok = all(operator.index(b) > 0 for b in (rows, cols))
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"{wanted} {blocksize!r}; e.g. blocksize=(3, 3)")


class _BSRMixin(_SparseGPUMixin):
    """What sparsegpu adds to scipy's BSR classes: the block mirror (its blocks as scipy
    stores them, validated once) and products on the backends that read it."""

    _sg_mirror_type = DeviceBlockMatrix

    def __init__(self, arg1, shape=None, dtype=None, copy=False, blocksize=None, **kwargs):
        if blocksize is not None:
            _check_blocksize(blocksize)
            kwargs["blocksize"] = tuple(int(b) for b in blocksize)
        try:
            super().__init__(arg1, shape=shape, dtype=dtype, copy=copy, **kwargs)
        except ValueError as exc:
            if blocksize is None or "invalid blocksize" not in str(exc):
                raise
            whole = shape if shape is not None else getattr(arg1, "shape", None)
            raise ValueError(
                f"blocksize {tuple(blocksize)} does not divide the matrix's shape {whole}: "
                "the rows must be a whole number of block rows and the columns of block "
                "columns; pick a blocksize whose first number divides the rows and whose "
                "second divides the columns"
            ) from None

    def _sg_layout(self):
        return self.shape, False

    @property
    def blocksize(self) -> tuple:
        """``(R, C)``, the shape of a block (scipy's; read from the stored blocks' shape,
        which hands none of their values out: scipy reads ``self.data.shape``, which
        exposed the buffer and made every later product of the matrix fingerprint it)."""
        data = self.__dict__.get("data")
        if data is None:
            with reading_internally():
                return super().blocksize
        return data.shape[1:]

    # A @ B with a BSR left operand is scipy's (a BSR result for a BSR B, as scipy gives):
    # sparsegpu's SpGEMM engines multiply CSR mirrors.
    def _matmul_sparse(self, other):
        return self._sg_adopt(super(_SparseGPUMixin, self)._matmul_sparse(other))

    def _mul_sparse_matrix(self, other):  # scipy < 1.13
        return self._sg_adopt(super(_SparseGPUMixin, self)._mul_sparse_matrix(other))


class csr_matrix(_CSRMixin, sp.csr_matrix):
    """A ``scipy.sparse.csr_matrix`` whose products run on a sparsegpu backend.

    Takes everything ``scipy.sparse.csr_matrix`` takes, plus CuPy arrays and
    ``cupyx.scipy.sparse`` matrices (copied to the host once).

    Attributes
    ----------
    backend : str or None
        The backend for this matrix's products (see :func:`sparsegpu.backends`).
    policy : Policy or None
        Launch policy for that backend; None uses the tuned default.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.random(100, 100, density=0.05, random_state=0))
    >>> y = A @ np.ones(100)            # numpy in, numpy out
    >>> isinstance(A, sp.csr_matrix), isinstance(A.T, sp.spmatrix)
    (True, True)
    """


class csr_array(_CSRMixin, sp.csr_array):
    """A ``scipy.sparse.csr_array`` whose products run on a sparsegpu backend.

    See :class:`csr_matrix`; ``*`` is element-wise, as for every scipy sparse array.
    """


class csc_matrix(_CSCMixin, sp.csc_matrix):
    """A ``scipy.sparse.csc_matrix`` whose products run on a sparsegpu backend.

    This is what ``sparsegpu.csr_matrix.T`` returns (sharing the arrays, as scipy does);
    on the GPU its products use the transpose built once on the device.
    """


class csc_array(_CSCMixin, sp.csc_array):
    """A ``scipy.sparse.csc_array`` whose products run on a sparsegpu backend."""


class bsr_matrix(_BSRMixin, sp.bsr_matrix):
    """A ``scipy.sparse.bsr_matrix`` whose products run on a sparsegpu backend.

    Takes everything ``scipy.sparse.bsr_matrix`` takes (``blocksize=`` included), plus CuPy
    arrays and ``cupyx.scipy.sparse`` matrices (copied to the host once). ``A @ x``,
    ``A @ X``, ``A.T @ x`` and the products of ``scipy.sparse.linalg`` and
    ``sparsegpu.linalg`` run on a backend that reads the blocks as they are stored
    (``cusparse_bsr`` on the GPU under ``auto``; ``scipy``, scipy's own BSR kernels, on
    the host); NumPy operands give NumPy results, CuPy operands CuPy results. Every other
    method is scipy's, and its BSR, CSR and CSC results are sparsegpu classes with this
    matrix's backend choice (``A.T``, ``A.tocsr()``, ``A * 2``, ``A + B``).

    The same rules as for :class:`csr_matrix` keep the GPU copy current: assigning
    ``A.data``/``A.indices``/``A.indptr``, writing into them (``A.data[0] = 0``) and
    scipy's in-place methods (``sum_duplicates``, ``sort_indices``, ``eliminate_zeros``,
    ``prune``) drop it; invalid arrays are refused before any kernel reads them.

    Attributes
    ----------
    backend : str or None
        The backend for this matrix's products: ``"auto"``, ``"cusparse_bsr"`` or
        ``"scipy"`` (a CSR backend named for a BSR matrix raises TypeError).
    policy : Policy or None
        Launch policy for that backend; None uses its default.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.bsr_matrix(sp.random(12, 12, density=0.3, random_state=0), blocksize=(3, 3))
    >>> y = A @ np.ones(12)             # numpy in, numpy out
    >>> A.blocksize, isinstance(A, sp.bsr_matrix), type(A.T).__name__
    ((3, 3), True, 'bsr_matrix')
    """


class bsr_array(_BSRMixin, sp.bsr_array):
    """A ``scipy.sparse.bsr_array`` whose products run on a sparsegpu backend.

    See :class:`bsr_matrix`; ``*`` is element-wise, as for every scipy sparse array.
    """
