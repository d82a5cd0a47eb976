"""Operators and systems for the solvers: products without per-iteration dispatch.

A solver works in one array module (NumPy or CuPy). For a sparsegpu matrix that is the
module of the plan planning picks (``plan_for`` once, then ``plan.matvec`` on every
iteration), so a NumPy right-hand side with a GPU backend is solved on the GPU with one
upload and one download. Any other operator (a ``LinearOperator``, a CuPy/cupyx or scipy
matrix, a dense array) is applied in the right-hand side's module.
"""

from __future__ import annotations

import numpy as np

from ..classes._matrix import _SparseGPUMixin
from ..device import _cuda
from ..engine import _planning
from ..measure._oracle import random_vector


def array_module(a):
    """numpy or cupy, whichever ``a`` lives in."""
    return _cuda.cupy_or_none() if _cuda.is_cupy_array(a) else np


def to_module(a, xp, dtype=None):
    """``a`` in module ``xp`` (copied across host and device only when needed)."""
    if xp is np:
        if _cuda.is_cupy_array(a):
            a = a.get()
        return np.asarray(a, dtype=dtype)
    return xp.asarray(a, dtype=dtype)


def _work_dtype(*dtypes) -> np.dtype:
    dtype = np.result_type(*[np.dtype(d) for d in dtypes if d is not None])
    if dtype.kind not in "fc":
        if dtype.kind not in "biu":
            raise TypeError(
                f"solvers need real or complex numbers, got dtype {dtype}; convert with "
                ".astype(numpy.float64)"
            )
        dtype = np.dtype(np.float64)
    return dtype


class Operator:
    """``y = A @ x`` (and ``A^H @ x``) computed where A lives, on arrays of one module.

    Attributes
    ----------
    shape : tuple of int
    dtype : numpy.dtype
        The dtype products are computed in.
    xp : module
        numpy or cupy: where the products run. Vectors from the other module are moved
        (each call: slow, but correct; it only happens when A and the vectors live apart).
    backend : str or None
        The backend a sparsegpu matrix's plan runs on (None for other operators).
    capturable : bool
        Whether a CUDA graph can hold the products (a sparsegpu matrix on a backend that
        allows capture; cuSPARSE does not).
    """

    def __init__(self, shape, dtype, xp, matvec, rmatvec=None, backend=None, capturable=False):
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = np.dtype(dtype)
        self.xp = xp
        self._matvec = matvec
        self._rmatvec = rmatvec
        self.backend = backend
        self.capturable = capturable

    def _here(self, x):
        if _cuda.is_cupy_array(x) == (self.xp is not np):
            return x
        return to_module(x, self.xp, self.dtype)

    def matvec(self, x, out=None):
        """``A @ x`` (into ``out`` when given, which must live where A does)."""
        y = self._matvec(self._here(x), out)
        if out is not None and y is not out:
            out[...] = y
            return out
        return y

    def rmatvec(self, x, out=None):
        """``A^H @ x`` (into ``out`` when given); raises TypeError when the operator has no
        adjoint."""
        if self._rmatvec is None:
            raise TypeError(
                "this operator has no adjoint product (rmatvec); pass a matrix or a "
                "LinearOperator with rmatvec"
            )
        y = self._rmatvec(self._here(x), out)
        if out is not None and y is not out:
            out[...] = y
            return out
        return y

    def adjoint(self):
        """``(backend, capturable)`` of the adjoint products (a sparsegpu matrix's
        transpose plan, made now), or ``(None, False)`` for other operators."""
        return self._adjoint() if hasattr(self, "_adjoint") else (None, False)


def _sparsegpu_operator(A, b_dtype, b=None, capturable=False) -> Operator:
    """The operator of a sparsegpu matrix: its plan, bound once per solve (planned by
    measurement on ``b`` when ``auto`` is in force: a solve multiplies many times; among
    the backends a CUDA graph can hold when ``capturable``, for a solve that captures)."""
    planned = _planning.planned_choice(A, b_dtype, x=b, capturable=capturable)
    plan, backend = planned.plan, planned.choice.implementation
    dtype = plan.matrix.dtype
    xp = plan.matrix.xp
    transposed = []  # the transpose's PlannedChoice, made on the first adjoint product
    scratch = []  # conj(x) for complex adjoint products into out

    def adjoint():
        if not transposed:
            transposed.append(_planning.planned_choice(A.T, b_dtype, x=b, capturable=capturable))
        return transposed[0]

    def rmatvec(x, out=None):
        t_plan = adjoint().plan
        if dtype.kind != "c":
            return t_plan.matvec(x, out=out)
        # A^H x = conj(A^T conj(x)): two cheap passes instead of a conjugated copy
        if out is None:
            return t_plan.matvec(x.conj()).conj()
        if not scratch:
            scratch.append(xp.empty_like(x))
        xp.conj(x, out=scratch[0])
        t_plan.matvec(scratch[0], out=out)
        xp.conj(out, out=out)
        return out

    operator = Operator(A.shape, dtype, xp, lambda x, out: plan.matvec(x, out=out), rmatvec,
                        backend.name, bool(backend.capturable))  # fmt: skip
    operator._adjoint = lambda: (
        adjoint().choice.implementation.name,
        bool(adjoint().choice.implementation.capturable),
    )
    return operator


def _native_module(A, b_xp):
    """Where a foreign operator computes: CuPy/cupyx objects on the GPU, NumPy and scipy
    objects on the host, anything else in the right-hand side's module."""
    module = type(A).__module__
    if module.startswith(("cupy", "cupyx")):
        return _cuda.cupy_or_none()
    if isinstance(A, np.ndarray) or module.startswith(("scipy", "numpy")):
        return np
    return b_xp


def _generic_operator(A, b_dtype, b_xp) -> Operator:
    shape = getattr(A, "shape", None)
    if shape is None or len(shape) != 2:
        raise TypeError(
            f"expected a matrix or an operator with a 2-D shape and matvec, got {type(A).__name__}"
        )
    dtype = _work_dtype(getattr(A, "dtype", None), b_dtype)
    xp = _native_module(A, b_xp)
    if hasattr(A, "matvec") and callable(A.matvec):
        rmatvec = getattr(A, "rmatvec", None)
        return Operator(
            shape,
            dtype,
            xp,
            lambda x, out: A.matvec(x).ravel(),
            (lambda x, out: rmatvec(x).ravel()) if callable(rmatvec) else None,
        )
    if not hasattr(A, "__matmul__"):
        raise TypeError(f"cannot multiply by a {type(A).__name__}; give it matvec or @")
    adjoint = []

    def rmatvec(x, out=None):
        if not adjoint:
            adjoint.append(A.conj().T)
        return adjoint[0] @ x

    return Operator(shape, dtype, xp, lambda x, out: A @ x, rmatvec)


def as_operator(A, b_dtype, b_xp, what: str = "A", capturable=False) -> Operator:
    """The operator of ``A`` for a right-hand side of ``b_dtype`` living in ``b_xp``
    (``capturable``: auto plans among the backends a CUDA graph can hold). An object with
    a ``_solver_operator(b_dtype, b_xp, capturable)`` method (``AMGHierarchy``) makes its
    own."""
    if A is None:
        raise TypeError(f"{what} is None; pass a matrix or an operator")
    solver_operator = getattr(A, "_solver_operator", None)
    if callable(solver_operator):  # a preconditioner of sparsegpu's own (multigrid)
        return solver_operator(b_dtype, b_xp, capturable)
    if isinstance(A, _SparseGPUMixin):
        if A.ndim != 2:
            raise ValueError(f"{what} must be 2-D, got shape {A.shape}")
        return _sparsegpu_operator(A, b_dtype, capturable=capturable)
    return _generic_operator(A, b_dtype, b_xp)


class SystemBase:
    """What the systems of every vector space share (:class:`System` here, the distributed
    space's ``DistributedSystem`` on a rank's blocks): the square check, ``M @ r`` and the
    user's callback, through each one's ``M``, :meth:`_here` and :meth:`result`."""

    @staticmethod
    def _check_square(name, shape, square) -> None:
        if square and shape[0] != shape[1]:
            raise ValueError(
                f"{name} needs a square matrix, got shape {shape}; use "
                "sparsegpu.linalg.lsqr for least-squares problems"
            )

    def _here(self, y):
        """A product of M as the solver's vectors are (as it comes, unless overridden)."""
        return y

    def precondition(self, r):
        """``M @ r``, or r itself without a preconditioner."""
        if self.M is None:
            return r
        return self._here(self.M.matvec(r))

    def result(self, x):
        raise NotImplementedError

    def wrap_callback(self, callback):
        """The user's callback, called with x as :meth:`result` gives it."""
        if callback is None:
            return None
        return lambda x: callback(self.result(x))


class System(SystemBase):
    """A linear system ``A x = b`` set up in the operator's module and dtype.

    Attributes
    ----------
    A : Operator
    rows, cols : int
        The lengths of this process's result and x vectors (A's shape here; a rank's
        blocks in a distributed space).
    M : Operator or None
        The preconditioner (approximates ``inv(A)``), or None.
    b, x : arrays
        Right-hand side and starting guess (a fresh array the solver may overwrite).
    x0_given : bool

    ``capturable``: a solve that means to capture its iterations as CUDA graphs; ``auto``
    then plans A and M among the backends a graph can hold.
    """

    def __init__(self, name, A, b, x0=None, M=None, square=True, capturable=False):
        b_xp = array_module(b) if _cuda.is_cupy_array(b) else np
        if not (_cuda.is_cupy_array(b) or isinstance(b, np.ndarray)):
            b = np.asarray(b)
        self.out_xp = b_xp
        self.A = as_operator(A, _work_dtype(b.dtype), b_xp, capturable=capturable)
        m, n = self.A.shape
        self.rows, self.cols = m, n  # the lengths of this process's vectors
        self.space = None  # set by the space that made it (``_space``)
        self._check_square(name, self.A.shape, square)
        if b.shape not in ((m,), (m, 1)):
            raise ValueError(
                f"{name}: A has shape {self.A.shape} but b has shape {b.shape}; b must have "
                f"shape ({m},) or ({m}, 1)"
            )
        xp = self.A.xp
        self.xp = xp
        self.dtype = _work_dtype(self.A.dtype, b.dtype)
        self.b = to_module(b, xp, self.dtype).ravel()
        if isinstance(A, _SparseGPUMixin) and _cuda.is_cupy_array(self.b) and A.ndim == 2:
            # planned on b where it can multiply A; a least-squares A (not square) on a
            # seeded random vector of its columns
            probe = self.b
            if A.shape[1] != self.b.shape[0]:
                probe = random_vector(A.shape[1], self.dtype, seed=0, xp=xp)
            self.A = _sparsegpu_operator(A, self.dtype, probe, capturable)
        self.x0_given = x0 is not None
        if x0 is None:
            self.x = xp.zeros(n, dtype=self.dtype)
        else:
            if not (_cuda.is_cupy_array(x0) or isinstance(x0, np.ndarray)):
                x0 = np.asarray(x0)
            if x0.shape not in ((n,), (n, 1)):
                raise ValueError(
                    f"{name}: A has shape {self.A.shape} but x0 has shape {x0.shape}; x0 must "
                    f"have shape ({n},) or ({n}, 1)"
                )
            self.x = to_module(x0, xp, self.dtype).ravel().copy()
        self.M = None
        if M is not None:
            self.M = as_operator(M, self.dtype, xp, "M", capturable)
            if self.M.shape != (n, n):
                raise ValueError(
                    f"{name}: the preconditioner M has shape {self.M.shape}; it must be "
                    f"({n}, {n}) like A"
                )

    def _here(self, y):
        """``y`` in the operator's module and dtype."""
        return to_module(y, self.xp, self.dtype)

    def result(self, x):
        """x in the module the right-hand side came in."""
        return to_module(x, self.out_xp)

    def wrap_callback(self, callback):
        """The user's callback, called with x in the right-hand side's module."""
        if self.out_xp is self.xp:
            return callback
        return super().wrap_callback(callback)
