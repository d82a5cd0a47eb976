"""Reading a matrix once, on one rank, and sending each rank only its rows."""

from __future__ import annotations

import os

from .. import datasets, io
from ..io import suitesparse
from ._matrix import csr_matrix


def mmread(path, comm=None, *, root=0, row_offsets=None, partition="rows", transport=None,
           backend=None, timeout=None):  # fmt: skip
    """Read a Matrix Market file on ``root`` and distribute it by rows (collective).

    Rank ``root`` parses the file once (:func:`sparsegpu.io.mmread`), sends every other
    rank its block of rows and keeps its own; no other rank ever holds the whole matrix.

    Parameters
    ----------
    path : str or os.PathLike
        A Matrix Market file or SuiteSparse archive (only read on ``root``), or the name
        of a bundled matrix (:func:`sparsegpu.datasets.names`).
    comm, root, row_offsets, partition, transport, backend, timeout
        As for :class:`csr_matrix`.

    Returns
    -------
    csr_matrix

    Raises
    ------
    RankError
        On every rank when the root could not read the file (the message has the
        reader's error: a missing file, a malformed entry...).
    """

    def read():
        text = os.fspath(path)
        if not os.path.exists(text) and text in datasets.names():
            return io.mmread(datasets.path(text))
        return io.mmread(text)

    return _distribute(read, comm, root, row_offsets, partition, transport, backend, timeout)


def load(name, comm=None, *, root=0, row_offsets=None, partition="rows", transport=None,
         backend=None, timeout=None, download=True):  # fmt: skip
    """A matrix of the SuiteSparse collection, loaded on ``root`` and distributed by rows.

    ``name`` is ``"Group/Name"`` or a bare name (:func:`sparsegpu.io.suitesparse.load`;
    fetched on ``root`` if not cached and ``download``), or a bundled matrix's name.
    Other parameters and errors as :func:`mmread`.
    """

    def read():
        if name in datasets.names():
            return datasets.load(name)
        return suitesparse.load(name, download=download, progress=False)

    return _distribute(read, comm, root, row_offsets, partition, transport, backend, timeout)


def _distribute(read, comm, root, row_offsets, partition, transport, backend, timeout):
    matrix = csr_matrix.__new__(csr_matrix)
    matrix._from_root(read, comm, root, row_offsets, partition, transport, backend, timeout)
    return matrix
