"""scipy.sparse's construction functions, returning sparsegpu classes.

Each function is a thin wrapper over its namesake in :mod:`scipy.sparse`: scipy builds the
matrix, and the result comes back as :class:`sparsegpu.csr_matrix` / ``csr_array`` (the
default, ``format="csr"``), ``csc_matrix`` / ``csc_array`` (``format="csc"``) or
``bsr_matrix`` / ``bsr_array`` (``format="bsr"``, and ``kron``'s default where scipy's
builds blocks), sharing scipy's arrays. Other formats raise ``ValueError`` rather than hand
back a scipy class whose products would silently run on the CPU; ``cupyx.scipy.sparse``
likewise fails for a format it has no GPU class for (its ``asformat`` raises). Call
scipy's function for those.

The kind follows the inputs: a sparse array among them makes the result an array (as
scipy >= 1.12 does; scipy 1.11 returned a matrix there), otherwise a matrix. The result
takes the backend and policy of the first sparsegpu input.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._matrix import _SparseGPUMixin

_FORMATS = ("csr", "csc", "bsr")


def _checked_format(format: str | None, function: str) -> str:
    if format is None:
        return "csr"
    if format not in _FORMATS:
        raise ValueError(
            f"sparsegpu.{function} builds 'csr', 'csc' or 'bsr' matrices, got "
            f"format={format!r}; "
            f"use scipy.sparse.{function} for other formats"
        )
    return format


def _sparsegpu(result, format: str, inputs=()):
    """scipy's ``result`` (in ``format``) as the sparsegpu class of the inputs' kind."""
    array = not isinstance(result, sp.spmatrix) or any(isinstance(m, sp.sparray) for m in inputs)
    matrix = _SparseGPUMixin._sg_class(format, array)(result)
    source = next((m for m in inputs if isinstance(m, _SparseGPUMixin)), None)
    return matrix if source is None else source._sg_inherit(matrix)


def _entries(blocks) -> list:
    """The blocks of a (nested) sequence, as scipy reads it."""
    return list(np.asarray(blocks, dtype=object).flat)


def vstack(blocks, format=None, dtype=None):
    """Stack sparse matrices vertically (row-wise), as ``scipy.sparse.vstack``.

    Parameters
    ----------
    blocks : sequence of sparse matrices or arrays
        With the same number of columns.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.
    dtype : dtype, optional
        Value type of the result; default: the blocks' common type.

    Returns
    -------
    sparsegpu.csr_matrix, csr_array, csc_matrix, csc_array, bsr_matrix or bsr_array
        An array when any block is a sparse array; with the first sparsegpu block's
        backend and policy.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_array(sp.eye(2))
    >>> B = sg.vstack([A, A])
    >>> type(B).__name__, B.shape
    ('csr_array', (4, 2))
    """
    format = _checked_format(format, "vstack")
    return _sparsegpu(sp.vstack(blocks, format=format, dtype=dtype), format, _entries(blocks))


def hstack(blocks, format=None, dtype=None):
    """Stack sparse matrices horizontally (column-wise), as ``scipy.sparse.hstack``.

    Parameters
    ----------
    blocks : sequence of sparse matrices or arrays
        With the same number of rows.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.
    dtype : dtype, optional
        Value type of the result; default: the blocks' common type.

    Returns
    -------
    sparsegpu.csr_matrix, csr_array, csc_matrix, csc_array, bsr_matrix or bsr_array
        An array when any block is a sparse array; with the first sparsegpu block's
        backend and policy.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.eye(2))
    >>> B = sg.hstack([A, A], format="csc")
    >>> type(B).__name__, B.shape
    ('csc_matrix', (2, 4))
    """
    format = _checked_format(format, "hstack")
    return _sparsegpu(sp.hstack(blocks, format=format, dtype=dtype), format, _entries(blocks))


def bmat(blocks, format=None, dtype=None):
    """Build a sparse matrix from sparse blocks, as ``scipy.sparse.bmat``.

    Parameters
    ----------
    blocks : nested sequence of sparse matrices, arrays or None
        Rows of blocks; None is an all-zero block.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.
    dtype : dtype, optional
        Value type of the result; default: the blocks' common type.

    Returns
    -------
    sparsegpu.csr_matrix, csr_array, csc_matrix, csc_array, bsr_matrix or bsr_array
        An array when any block is a sparse array; with the first sparsegpu block's
        backend and policy.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> A = sg.csr_matrix(sp.eye(2))
    >>> B = sg.bmat([[A, None], [None, A]])
    >>> type(B).__name__, B.nnz
    ('csr_matrix', 4)
    """
    format = _checked_format(format, "bmat")
    return _sparsegpu(sp.bmat(blocks, format=format, dtype=dtype), format, _entries(blocks))


def block_diag(mats, format=None, dtype=None):
    """Build a block-diagonal sparse matrix, as ``scipy.sparse.block_diag``.

    Parameters
    ----------
    mats : sequence of sparse or dense matrices
        The diagonal blocks, in order.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.
    dtype : dtype, optional
        Value type of the result; default: the blocks' common type.

    Returns
    -------
    sparsegpu.csr_matrix, csr_array, csc_matrix, csc_array, bsr_matrix or bsr_array
        An array when any block is a sparse array; with the first sparsegpu block's
        backend and policy.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> B = sg.block_diag([sg.csr_array(sp.eye(2)), sg.csr_array(sp.eye(3))])
    >>> type(B).__name__, B.shape
    ('csr_array', (5, 5))
    """
    format = _checked_format(format, "block_diag")
    return _sparsegpu(sp.block_diag(mats, format=format, dtype=dtype), format, _entries(mats))


def kron(A, B, format=None):
    """Kronecker product of two sparse matrices, as ``scipy.sparse.kron``.

    Parameters
    ----------
    A, B : sparse or dense matrices
    format : {"csr", "csc", "bsr"}, optional
        Format of the result. Default: what scipy builds, BSR with blocks of ``B``'s shape
        where at least half of ``B`` is stored (a mesh's couplings of several unknowns),
        else CSR. Other formats raise ValueError.

    Returns
    -------
    sparsegpu.csr_matrix, csr_array, csc_matrix, csc_array, bsr_matrix or bsr_array
        An array when ``A`` or ``B`` is a sparse array; with the backend and policy of
        ``A``, or else ``B``, when it is a sparsegpu matrix.

    Examples
    --------
    >>> import scipy.sparse as sp, sparsegpu as sg
    >>> K = sg.kron(sg.csr_matrix(sp.eye(2)), sp.csr_matrix([[1, 2], [3, 4]]))
    >>> type(K).__name__, K.shape, K.blocksize
    ('bsr_matrix', (4, 4), (2, 2))
    >>> type(sg.kron(sg.csr_matrix(sp.eye(2)), sp.eye(3))).__name__
    'csr_matrix'
    """
    if format is None:  # scipy's choice: blocks of B's shape where B is mostly filled
        result = sp.kron(A, B)
        format = "bsr" if result.format == "bsr" else "csr"
        return _sparsegpu(result, format, (A, B))
    format = _checked_format(format, "kron")
    return _sparsegpu(sp.kron(A, B, format=format), format, (A, B))


def eye(m, n=None, k=0, dtype=float, format=None):
    """Sparse matrix with ones on the ``k``-th diagonal, as ``scipy.sparse.eye``.

    Parameters
    ----------
    m : int
        Number of rows.
    n : int, optional
        Number of columns; default ``m``.
    k : int, optional
        Diagonal holding the ones: 0 the main one, > 0 above, < 0 below.
    dtype : dtype, optional
        Value type; default float64.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.

    Returns
    -------
    sparsegpu.csr_matrix or csc_matrix
        A matrix, as scipy's ``eye`` returns; wrap it in ``sparsegpu.csr_array`` for an
        array.

    Examples
    --------
    >>> import numpy as np, sparsegpu as sg
    >>> I = sg.eye(3)
    >>> type(I).__name__, (I @ np.arange(3.0)).tolist()
    ('csr_matrix', [0.0, 1.0, 2.0])
    """
    format = _checked_format(format, "eye")
    return _sparsegpu(sp.eye(m, n, k=k, dtype=dtype, format=format), format)


def identity(n, dtype="d", format=None):
    """Sparse identity matrix, as ``scipy.sparse.identity``.

    Parameters
    ----------
    n : int
        Number of rows and columns.
    dtype : dtype, optional
        Value type; default float64.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.

    Returns
    -------
    sparsegpu.csr_matrix or csc_matrix
        A matrix, as scipy's ``identity`` returns.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> I = sg.identity(4, format="csc")
    >>> type(I).__name__, I.nnz
    ('csc_matrix', 4)
    """
    format = _checked_format(format, "identity")
    return _sparsegpu(sp.identity(n, dtype=dtype, format=format), format)


def diags(diagonals, offsets=0, shape=None, format=None, dtype=None):
    """Sparse matrix from diagonals, as ``scipy.sparse.diags``.

    Parameters
    ----------
    diagonals : sequence of array_like
        The values of each diagonal (a scalar is broadcast when ``shape`` is given).
    offsets : int or sequence of int, optional
        Diagonal of each entry of ``diagonals``: 0 the main one, > 0 above, < 0 below.
    shape : tuple of int, optional
        Shape of the result; default: square, just large enough.
    format : {"csr", "csc", "bsr"}, optional
        Format of the result; default "csr". Other formats raise ValueError.
    dtype : dtype, optional
        Value type; default: scipy's default for ``diags``.

    Returns
    -------
    sparsegpu.csr_matrix or csc_matrix
        A matrix, as scipy's ``diags`` returns.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> T = sg.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(4, 4))
    >>> type(T).__name__, T.nnz
    ('csr_matrix', 10)
    """
    format = _checked_format(format, "diags")
    # scipy >= 1.17 tells an omitted dtype from dtype=None: forward only one that was given
    given = {} if dtype is None else {"dtype": dtype}
    return _sparsegpu(sp.diags(diagonals, offsets, shape=shape, format=format, **given), format)


def random(m, n, density=0.01, format=None, dtype=None, random_state=None, data_rvs=None):
    """Sparse matrix with random values at random positions, as ``scipy.sparse.random``.

    Parameters
    ----------
    m, n : int
        Shape of the result.
    density : float, optional
        Fraction of entries that are stored, in [0, 1].
    format : {"csr", "csc"}, optional
        Format of the result; default "csr" (scipy's default is "coo"). Other formats
        raise ValueError.
    dtype : dtype, optional
        Value type; default float64.
    random_state : int, numpy.random.Generator or RandomState, optional
        Seed or generator, as scipy's ``random_state``.
    data_rvs : callable, optional
        Draws the stored values: called with a count, returns that many values.

    Returns
    -------
    sparsegpu.csr_matrix or csc_matrix
        A matrix, as scipy's ``random`` returns.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> R = sg.random(10, 8, density=0.25, random_state=0)
    >>> type(R).__name__, R.shape, R.nnz
    ('csr_matrix', (10, 8), 20)
    """
    format = _checked_format(format, "random")
    result = sp.random(
        m,
        n,
        density=density,
        format=format,
        dtype=dtype,
        random_state=random_state,
        data_rvs=data_rvs,
    )
    return _sparsegpu(result, format)
