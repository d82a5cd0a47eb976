"""One way to open a matrix from what a user types: a file, a bundled name, a SuiteSparse name.

Every command that takes a matrix (``sparsegpu bench``, ``info``, ``autotune``) resolves
it here, with one rule, in this order:

1. an existing file: Matrix Market (``.mtx``, ``.mtx.gz``, ``.mtx.bz2``, a SuiteSparse
   archive) or scipy's ``.npz`` (:func:`scipy.sparse.save_npz`);
2. a file name that is not here (``bcsstk13.mtx.gz``, ``./m.mtx``): the bundled matrix of
   that name when there is one (the docs name the bundled files so), else
   FileNotFoundError;
3. a bundled matrix, by name or ``Group/Name`` (names are unique in the collection, so
   ``HB/cage10`` is the bundled ``vanHeukelum/cage10``): read offline;
4. a SuiteSparse ``Group/Name``: from the cache, else downloaded (when allowed);
5. a bare name of a matrix in the SuiteSparse cache.

>>> import sparsegpu as sg
>>> source = sg.io.resolve_matrix("bcsstk13.mtx.gz")
>>> source.name, source.origin
('bcsstk13', 'bundled (HB/bcsstk13)')
>>> sg.io.open_matrix("HB/bcsstk13").shape
(2003, 2003)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: What a matrix file's name ends with (archives too: ``is_archive``).
MATRIX_SUFFIXES = (".mtx", ".mtx.gz", ".mtx.bz2", ".npz")


@dataclass(frozen=True)
class MatrixSource:
    """A matrix resolved from a spec, not read yet.

    Attributes
    ----------
    name : str
        The file's name without its suffix, else the spec as given.
    origin : str
        Where it comes from, in words (the file's path, ``bundled (Group/Name)``,
        ``SuiteSparse``).
    path : pathlib.Path or None
        The Matrix Market file that :func:`sparsegpu.io.mminfo` describes, once it exists
        (None for ``.npz`` files and matrices not downloaded yet).
    load : callable
        ``load()`` reads it: a :class:`sparsegpu.csr_matrix`.
    """

    name: str
    origin: str
    path: Path | None
    load: Callable


def _strip_suffix(name: str) -> str:
    from ._matrix_market import ARCHIVE_SUFFIXES

    for suffix in MATRIX_SUFFIXES + ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _names_a_file(spec: str) -> bool:
    """Whether ``spec`` can only be a path (``/x``, ``./x``, ``~/x``, ``x.mtx``...)."""
    from ._matrix_market import is_archive

    return (
        spec.startswith(("/", "./", "../", "~"))
        or spec.lower().endswith(MATRIX_SUFFIXES)
        or is_archive(spec)
    )


def _read_file(path: Path):
    from ..classes._matrix import csr_matrix
    from ._matrix_market import mmread

    if path.name.endswith(".npz"):
        import scipy.sparse as sp

        try:
            return csr_matrix(sp.load_npz(path))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{path}: not a scipy .npz sparse matrix ({exc})") from exc
    return mmread(path)


def _file_source(path: Path) -> MatrixSource:
    header = None if path.name.endswith(".npz") else path
    return MatrixSource(_strip_suffix(path.name), str(path), header, lambda: _read_file(path))


def _bundled_source(name: str, shown: str) -> MatrixSource | None:
    """The bundled matrix ``name``, called ``shown``; None when there is none."""
    from . import _bundled

    try:
        info = _bundled.info(name)
    except ValueError:
        return None
    file = _bundled.path(info.name)
    return MatrixSource(
        shown, f"bundled ({info.collection_name})", file, lambda: _bundled.load(info.name)
    )


def resolve_matrix(spec, *, data_dir=None, download: bool = True) -> MatrixSource:
    """Where the matrix ``spec`` names comes from (see the module's rule), not read yet.

    Parameters
    ----------
    spec : str or os.PathLike
        A file path, a bundled name, or a SuiteSparse ``Group/Name``.
    data_dir : path, optional
        The SuiteSparse cache (as for :func:`sparsegpu.suitesparse.load`).
    download : bool, optional
        Whether a SuiteSparse matrix not in the cache may be downloaded when loaded.

    Raises
    ------
    FileNotFoundError
        ``spec`` can only be a file name, and there is no such file (nor a bundled matrix
        of that name).
    ValueError
        ``spec`` is none of the above; the message lists the bundled names.
    """
    from . import _bundled, suitesparse

    spec = os.fspath(spec)
    path = Path(spec).expanduser()
    if path.is_file():
        return _file_source(path)
    if _names_a_file(spec):
        if os.sep not in spec and "/" not in spec:  # bcsstk13.mtx.gz: the bundled file
            bundled = _bundled_source(_strip_suffix(spec), _strip_suffix(spec))
            if bundled is not None:
                return bundled
        raise FileNotFoundError(f"{spec}: no such file")
    bundled = _bundled_source(spec, spec)
    if bundled is None and "/" in spec:  # names are unique in the collection
        bundled = _bundled_source(spec.rsplit("/", 1)[1], spec)
    if bundled is not None:
        return bundled
    if "/" not in spec:
        spec = next((c for c in suitesparse.cached(data_dir) if c.endswith(f"/{spec}")), spec)
    if "/" in spec:
        cached = spec in suitesparse.cached(data_dir)
        if not (cached or download):
            raise ValueError(
                f"{spec}: not in the SuiteSparse cache {suitesparse.cache_dir(data_dir)}; "
                f"fetch it first: sparsegpu fetch {spec}"
            )
        return MatrixSource(
            spec,
            "SuiteSparse",
            suitesparse.path(spec, data_dir=data_dir) if cached else None,
            lambda: suitesparse.load(spec, data_dir=data_dir, download=download, progress=False),
        )
    raise ValueError(
        f"{spec!r} is not a file, a bundled matrix ({', '.join(_bundled.names())}) or a "
        "SuiteSparse 'Group/Name'"
    )


def open_matrix(spec, *, data_dir=None, download: bool = True):
    """The matrix ``spec`` names, read: a :class:`sparsegpu.csr_matrix`.

    ``resolve_matrix(spec, ...).load()``; see :func:`resolve_matrix` for the rule, the
    parameters and the errors (and :func:`sparsegpu.io.mmread`'s, naming the file and
    line, for a bad file).
    """
    return resolve_matrix(spec, data_dir=data_dir, download=download).load()
