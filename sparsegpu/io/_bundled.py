"""Small real matrices from the SuiteSparse collection, shipped inside the package.

The files are the collection's own (gzipped Matrix Market), under CC-BY 4.0: the
attribution is ``sparsegpu/datasets/data/README.md`` beside them (Davis & Hu, ACM TOMS
38(1), 2011; https://sparse.tamu.edu). They are package data of :mod:`sparsegpu.datasets`,
which offers them to users; their catalog and reader live here, beside the collection's
own loader (:mod:`sparsegpu.io.suitesparse`), which uses them offline.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DatasetInfo:
    """What a bundled matrix is, without reading it.

    Attributes
    ----------
    name : str
        The name :func:`load` takes (the file name without ``.mtx.gz``).
    collection_name : str
        ``"Group/Name"`` in the SuiteSparse collection.
    rows, cols : int
        The shape.
    nnz : int
        Stored nonzeros once loaded (symmetric files expanded).
    kind : str
        The collection's problem kind.
    """

    name: str
    collection_name: str
    rows: int
    cols: int
    nnz: int
    kind: str

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)


_CATALOG = {
    info.name: info
    for info in (
        DatasetInfo(
            "bcsstk13", "HB/bcsstk13", 2003, 2003, 83_883, "computational fluid dynamics problem"
        ),
        DatasetInfo("cryg2500", "Bai/cryg2500", 2500, 2500, 12_349, "materials problem"),
        DatasetInfo("zenios", "HB/zenios", 2873, 2873, 27_191, "optimization problem"),
        DatasetInfo(
            "olm1000", "Bai/olm1000", 1000, 1000, 3_996, "computational fluid dynamics problem"
        ),
        DatasetInfo("jagmesh7", "HB/jagmesh7", 1138, 1138, 7_450, "2D/3D problem"),
        DatasetInfo("west0067", "HB/west0067", 67, 67, 294, "chemical process simulation problem"),
        DatasetInfo("lp_afiro", "LPnetlib/lp_afiro", 27, 51, 102, "linear programming problem"),
        DatasetInfo("karate", "Newman/karate", 34, 34, 156, "undirected graph"),
        DatasetInfo("LFAT5", "Oberwolfach/LFAT5", 14, 14, 46, "model reduction problem"),
        DatasetInfo("fe_4elt2", "DIMACS10/fe_4elt2", 11143, 11143, 65_636, "undirected graph"),
        DatasetInfo(
            "PGPgiantcompo", "Arenas/PGPgiantcompo", 10680, 10680, 48_632, "undirected multigraph"
        ),
        DatasetInfo(
            "cage10", "vanHeukelum/cage10", 11397, 11397, 150_645, "directed weighted graph"
        ),
        DatasetInfo("cs4", "DIMACS10/cs4", 22499, 22499, 87_716, "undirected graph"),
        DatasetInfo("cti", "DIMACS10/cti", 16840, 16840, 96_464, "undirected graph"),
        DatasetInfo("EX5", "JGD_SPG/EX5", 6545, 6545, 295_680, "combinatorial problem"),
    )
}


def names() -> list[str]:
    """The bundled matrices' names, sorted case-insensitively."""
    return sorted(_CATALOG, key=str.lower)


def _resolve(name: str) -> str:
    if name in _CATALOG:
        return name
    by_lower = {key.lower(): key for key in _CATALOG}
    short = name.rsplit("/", 1)[-1].lower()
    if short in by_lower and (
        "/" not in name or _CATALOG[by_lower[short]].collection_name.lower() == name.lower()
    ):
        return by_lower[short]
    raise ValueError(
        f"no bundled matrix named {name!r}; bundled: {', '.join(names())} "
        "(sparsegpu.io.suitesparse.load fetches any other from the collection)"
    )


def info(name: str) -> DatasetInfo:
    """Metadata of a bundled matrix (``name`` as in :func:`names`, or ``"Group/Name"``).

    Raises
    ------
    ValueError
        ``name`` is not bundled; the message lists what is.
    """
    return _CATALOG[_resolve(name)]


def path(name: str) -> Path:
    """The bundled ``.mtx.gz`` file of ``name`` (read it with :func:`sparsegpu.io.mmread`)."""
    resource = importlib.resources.files("sparsegpu.datasets") / "data" / f"{_resolve(name)}.mtx.gz"
    return Path(str(resource))


def load(name: str, *, array: bool = False):
    """A bundled real matrix as a :class:`sparsegpu.csr_matrix` (``csr_array`` if ``array``).

    Parameters
    ----------
    name : str
        One of :func:`names` (case-insensitive), or its collection name ``"Group/Name"``.
    array : bool, optional
        Return a ``csr_array``.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> A = sg.datasets.load("bcsstk13")
    >>> A.shape, A.nnz
    ((2003, 2003), 83883)
    """
    from ._matrix_market import mmread

    return mmread(path(name), array=array)
