"""Matrix Market files: read (plain, gzip, bzip2, SuiteSparse archives), check, write; and
``open_matrix``, a matrix from a file, a bundled name or a SuiteSparse name.

>>> import sparsegpu as sg
>>> info = sg.io.mminfo(sg.datasets.path("bcsstk13"))
>>> info.symmetry, info.suitesparse.full_name, info.suitesparse.kind
('symmetric', 'HB/bcsstk13', 'computational fluid dynamics problem')
"""

from ._header import MMInfo, SuiteSparseMetadata
from ._matrix_market import is_archive, mminfo, mmread, mmwrite
from ._open import MatrixSource, open_matrix, resolve_matrix

__all__ = [
    "MMInfo",
    "MatrixSource",
    "SuiteSparseMetadata",
    "is_archive",
    "mminfo",
    "mmread",
    "mmwrite",
    "open_matrix",
    "resolve_matrix",
]
