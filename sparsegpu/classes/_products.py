"""Products with options: ``sg.matvec``, ``sg.spgemm``, ``sg.galerkin_product``, ``sg.explain``.

``A @ B`` already runs on the GPU for sparsegpu operands (:mod:`sparsegpu.engine._sparse_dispatch`);
these functions add what an operator cannot take: the algorithm, a memory limit, the
planning level, and the Galerkin triple product without a transpose on the host.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..device import _cuda
from ..engine import _dispatch, _planning, _sparse_dispatch
from ._matrix import _SparseGPUMixin, csr_array, csr_matrix


def spgemm(A, B, *, algorithm=None, memory_limit=None, planning=None):
    """``A @ B`` for a sparsegpu ``A`` and a sparse ``B``, with the product's options.

    Parameters
    ----------
    A : sparsegpu matrix (CSR or CSC, matrix or array)
    B : scipy or sparsegpu sparse matrix
        ``A.shape[1]`` rows.
    algorithm : {"alg1", "alg2", "alg3"}, optional
        A cuSPARSE SpGEMM algorithm to use instead of the planned one: ``alg1`` (fastest,
        most work space), ``alg2``, ``alg3`` (least, in chunks). The product still falls
        back to leaner algorithms and row blocks where this one does not fit.
    memory_limit : int, optional
        Device bytes the product may take at once (work buffers and result); beyond it,
        leaner algorithms and then row blocks of ``A`` are used. Default: what the GPU
        (and CuPy's memory pool limit) allows.
    planning : {"estimate", "measure", "exhaustive"}, optional
        Default: ``A.planning``, ``sg.planning``, ``SPARSEGPU_PLANNING``, then ``"measure"``.

    Returns
    -------
    sparsegpu matrix
        ``A``'s class (CSR, or CSC for a CSC ``A``, as scipy's product), canonical. When
        the GPU computed it, its device copy is kept and its host arrays are made when the
        host first reads them. Where scipy computes (no GPU, ``A.backend = "scipy"``,
        integer values), scipy's product, and these options have no effect.

    Raises
    ------
    MemoryError
        When the result itself cannot fit in GPU memory (the message says how many bytes
        it needs and how many are free); A and B stay usable.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.random(50, 40, density=0.1, random_state=0))
    >>> C = sg.spgemm(A, A.T)
    >>> C.shape
    (50, 50)
    """
    _sparse_dispatch.check_operands(A, B)
    if planning is not None:
        _planning.check_level(planning)
    stored = _sparse_dispatch.multiply(
        A, B, algorithm=algorithm, memory_limit=memory_limit, planning=planning
    )
    if stored is None:
        return A @ B
    return type(A)._sg_on_device(stored, (A.shape[0], B.shape[1]), A)


def galerkin_product(A, P):
    """``P.T @ A @ P``, the Galerkin (coarse-grid) operator of multigrid, as CSR.

    On the GPU it runs as ``P.T @ (A @ P)``: ``A @ P`` first, then the CSR of ``P.T``
    (transposed once on the device and kept with ``P``'s mirrors) times it; nothing is
    transposed or copied on the host, and the result stays on the device.

    Parameters
    ----------
    A : sparsegpu matrix, (n, n)
    P : scipy or sparsegpu sparse matrix, (n, m)

    Returns
    -------
    sparsegpu CSR matrix (array when ``A`` is one), (m, m)

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.random(30, 30, density=0.2, random_state=1))
    >>> P = sp.random(30, 6, density=0.3, random_state=2, format="csr")
    >>> sg.galerkin_product(A, P).shape
    (6, 6)
    """
    _sparse_dispatch.check_operands(A, P)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square for P.T @ A @ P, got shape {A.shape}")
    kind = csr_matrix if isinstance(A, sp.spmatrix) else csr_array
    if not isinstance(P, _SparseGPUMixin):
        P = A._sg_inherit(kind(P))  # shares a CSR P's arrays; its mirror is kept with it
    stored = _sparse_dispatch.galerkin(A, P)
    if stored is None:
        return A._sg_adopt((P.transpose() @ (A @ P)).tocsr())
    return kind._sg_on_device(stored, (P.shape[1], P.shape[1]), A)


def explain(A, other=None):
    """Which backend and policy ``A @ x`` uses, or how ``A @ B`` runs, and why.

    Parameters
    ----------
    A : sparsegpu matrix
    other : dtype, array or sparse matrix, optional
        The dtype of ``x`` (default ``A.dtype``) or an ``x`` / ``X``: returns the
        ``Choice`` of ``A @ x`` (see :func:`sparsegpu.engine._planning.explain`). A sparse
        matrix ``B``: returns the :class:`~sparsegpu.engine._sparse_planning.SpgemmPlan` of
        ``A @ B``: the algorithm, the planning level that chose it, what planning measured (time and
        peak device memory of each candidate) and the last product's peak device memory.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.eye(4))
    >>> sg.explain(A, A).algorithm in ("scipy", "select")  # the host; the GPU: one entry a row
    True
    """
    if sp.issparse(other):
        _sparse_dispatch.check_operands(A, other)
        return _sparse_dispatch.explain(A, other)
    return _planning.explain(A, other)


def matvec(A, x, *, backend: str | None = None, policy=None, out=None, planning=None):
    """``A @ x`` with an explicit backend and policy (the top of the precedence).

    Parameters
    ----------
    A : sparsegpu.csr_matrix, csr_array, csc_matrix or csc_array
    x : numpy.ndarray or cupy.ndarray
        1-D of length ``A.shape[1]``, or 2-D with that many rows.
    backend : str, optional
        Backend name; default: ``A.backend``, then ``use_backend``, then env, then auto.
    policy : Policy, optional
        Launch policy of that backend's kernel family.
    out : array, optional
        Where to write the result (same module and dtype as the result).
    planning : {"estimate", "measure", "exhaustive"}, optional
        How ``auto`` plans this product (default: ``A.planning``, ``sparsegpu.planning``,
        ``SPARSEGPU_PLANNING``, then ``"measure"``).

    Returns
    -------
    y : array in x's array module, with scipy's result dtype.
    """
    if planning is not None:
        _planning.check_level(planning)
    if not isinstance(A, _SparseGPUMixin):
        raise TypeError(
            f"A must be a sparsegpu matrix, got {type(A).__name__}; wrap it with "
            "sparsegpu.csr_matrix(A)"
        )
    if not (_cuda.is_cupy_array(x) or isinstance(x, np.ndarray)):
        x = np.asarray(x)
    if x.ndim not in (1, 2) or x.shape[0] != A.shape[1]:
        raise ValueError(
            f"dimension mismatch: A has shape {A.shape} but x has shape {x.shape}; "
            f"x needs {A.shape[1]} rows"
        )
    return _dispatch.apply(A, x, backend=backend, policy=policy, out=out, planning=planning)
