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

import inspect
import textwrap

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


# numpydoc sections several constructors share, filled in by @_shared_sections where a
# docstring line is ``{section}`` alone (``{name}`` in a section: the function's name)
_SECTIONS = {
    "format": """format : {"csr", "csc", "bsr"}, optional
    Format of the result; default "csr". Other formats raise ValueError.""",
    "blocks_dtype": """dtype : dtype, optional
    Value type of the result; default: the blocks' common type.""",
    "matrix_returns": """Returns
-------
sparsegpu.csr_matrix or csc_matrix
    A matrix, as scipy's ``{name}`` returns.""",
    "blocks_returns": """Returns
-------
sparsegpu.csr_matrix, csr_array, csc_matrix, csc_array, bsr_matrix or bsr_array
    An array when any block is a sparse array; with the first sparsegpu block's
    backend and policy.""",
}


def _shared_sections(function):
    """``function`` with each docstring line ``{section}`` (alone on its line, a key of
    ``_SECTIONS``) replaced by that section, indented as the line is, ``{name}`` in it by
    the function's name."""
    lines = []
    for line in function.__doc__.splitlines():
        key = line.strip()[1:-1] if line.strip().startswith("{") else None
        if key not in _SECTIONS:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        section = _SECTIONS[key].replace("{name}", function.__name__)
        lines += [indent + part for part in section.splitlines()]
    function.__doc__ = "\n".join(lines)
    return function


def _from_blocks(scipy_function, summary: str, blocks: str, example: str):
    """The sparsegpu twin of a scipy constructor that builds from blocks (``vstack``,
    ``hstack``, ``bmat``): ``summary`` the first line of its docstring, ``blocks`` the
    numpydoc entry of its first parameter, ``example`` its doctest after the import."""
    name = scipy_function.__name__

    def from_blocks(blocks, format=None, dtype=None):
        format = _checked_format(format, name)
        result = scipy_function(blocks, format=format, dtype=dtype)
        return _sparsegpu(result, format, _entries(blocks))

    from_blocks.__name__ = from_blocks.__qualname__ = name
    lines = [f"{summary}, as ``scipy.sparse.{name}``.", "", "Parameters", "-" * 10]
    lines += [*blocks.splitlines(), "{format}", "{blocks_dtype}", "", "{blocks_returns}", ""]
    lines += ["Examples", "-" * 8, ">>> import scipy.sparse as sp, sparsegpu as sg"]
    from_blocks.__doc__ = textwrap.indent("\n".join(lines), "    ").lstrip() + "\n    "
    from_blocks.__doc__ += textwrap.indent(inspect.cleandoc(example), "    ").lstrip() + "\n    "
    return _shared_sections(from_blocks)


vstack = _from_blocks(
    sp.vstack,
    "Stack sparse matrices vertically (row-wise)",
    "blocks : sequence of sparse matrices or arrays\n    With the same number of columns.",
    """>>> A = sg.csr_array(sp.eye(2))
    >>> B = sg.vstack([A, A])
    >>> type(B).__name__, B.shape
    ('csr_array', (4, 2))""",
)
hstack = _from_blocks(
    sp.hstack,
    "Stack sparse matrices horizontally (column-wise)",
    "blocks : sequence of sparse matrices or arrays\n    With the same number of rows.",
    """>>> A = sg.csr_matrix(sp.eye(2))
    >>> B = sg.hstack([A, A], format="csc")
    >>> type(B).__name__, B.shape
    ('csc_matrix', (2, 4))""",
)
bmat = _from_blocks(
    sp.bmat,
    "Build a sparse matrix from sparse blocks",
    "blocks : nested sequence of sparse matrices, arrays or None\n"
    "    Rows of blocks; None is an all-zero block.",
    """>>> A = sg.csr_matrix(sp.eye(2))
    >>> B = sg.bmat([[A, None], [None, A]])
    >>> type(B).__name__, B.nnz
    ('csr_matrix', 4)""",
)


@_shared_sections
def block_diag(mats, format=None, dtype=None):
    """Build a block-diagonal sparse matrix, as ``scipy.sparse.block_diag``.

    Parameters
    ----------
    mats : sequence of sparse or dense matrices
        The diagonal blocks, in order.
    {format}
    {blocks_dtype}

    {blocks_returns}

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


@_shared_sections
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
    {format}

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


@_shared_sections
def identity(n, dtype="d", format=None):
    """Sparse identity matrix, as ``scipy.sparse.identity``.

    Parameters
    ----------
    n : int
        Number of rows and columns.
    dtype : dtype, optional
        Value type; default float64.
    {format}

    {matrix_returns}

    Examples
    --------
    >>> import sparsegpu as sg
    >>> I = sg.identity(4, format="csc")
    >>> type(I).__name__, I.nnz
    ('csc_matrix', 4)
    """
    format = _checked_format(format, "identity")
    return _sparsegpu(sp.identity(n, dtype=dtype, format=format), format)


@_shared_sections
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
    {format}
    dtype : dtype, optional
        Value type; default: scipy's default for ``diags``.

    {matrix_returns}

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


@_shared_sections
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

    {matrix_returns}

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


def as_sparsegpu(obj, backend=None):
    """A scipy sparse matrix, or every matrix of a multigrid hierarchy, as sparsegpu classes.

    Parameters
    ----------
    obj : scipy sparse matrix or array, or a hierarchy
        A matrix comes back as the sparsegpu class of its format and kind, sharing its
        arrays (CSR, CSC and BSR as they are; other formats as CSR); a sparsegpu matrix
        comes back as it is. A hierarchy is an object with ``levels``, each holding its
        matrices as attributes (PyAMG's ``MultilevelSolver``: ``A``, ``P``, ``R`` and the
        strength and aggregation matrices): each sparse attribute of each level is
        replaced by its sparsegpu class, in place, and the hierarchy is returned, so that
        the products of every level's cycle run on sparsegpu's backends.
    backend : str, optional
        Set as ``backend`` of every matrix converted or returned.

    Returns
    -------
    The sparsegpu matrix, or ``obj`` itself for a hierarchy.

    Examples
    --------
    >>> import pyamg, sparsegpu as sg                                  # doctest: +SKIP
    >>> A = pyamg.gallery.poisson((100, 100), format="csr")            # doctest: +SKIP
    >>> ml = sg.as_sparsegpu(pyamg.smoothed_aggregation_solver(A))     # doctest: +SKIP
    >>> type(ml.levels[1].A).__name__, type(ml.levels[0].P).__name__  # doctest: +SKIP
    ('bsr_array', 'bsr_array')
    """
    if sp.issparse(obj):
        return _as_class(obj, backend)
    levels = getattr(obj, "levels", None)
    if levels is None:
        raise TypeError(
            "as_sparsegpu takes a scipy sparse matrix or a hierarchy with levels (PyAMG's "
            f"MultilevelSolver), got {type(obj).__name__}"
        )
    for level in levels:
        for name, value in vars(level).items():
            if sp.issparse(value) and value.ndim == 2:
                setattr(level, name, _as_class(value, backend))
    return obj


def _as_class(matrix, backend):
    if not isinstance(matrix, _SparseGPUMixin):
        if matrix.format not in _FORMATS:
            matrix = matrix.tocsr()
        matrix = _SparseGPUMixin._sg_class(matrix.format, isinstance(matrix, sp.sparray))(matrix)
    if backend is not None:
        matrix.backend = backend
    return matrix
