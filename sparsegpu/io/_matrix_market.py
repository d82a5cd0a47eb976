"""Matrix Market read and write: ``.mtx``, ``.mtx.gz``, ``.mtx.bz2`` and SuiteSparse archives.

The body is parsed by :func:`scipy.io.mmread` (fast_matrix_market on scipy >= 1.12, its
own parser before). Around it: the header is read and checked first (:mod:`._header`),
so a bad file gets a ValueError naming the file and nothing is allocated before the
declared sizes are known to fit; every entry is checked against the header (:mod:`._body`:
scipy silently drops what it does not expect, and crashes on a NUL byte) before scipy's
parse of it is used; the symmetric triangle is checked and the result becomes a
:class:`sparsegpu.csr_matrix`. A plain file is parsed by scipy from its path (what
crashes the parser is looked for before) and checked a bounded chunk at a time on one
thread, from before the parse to after it, while the parse becomes CSR on another: scipy's
parser holds the GIL and uses every core, the conversion releases it on one. The file is
never held whole in memory.
A compressed file is checked while scipy parses it (:func:`_check_while_parsing`).
"""

from __future__ import annotations

import bz2
import concurrent.futures
import functools
import gzip
import inspect
import io
import mmap
import os
import re
import shutil
import tarfile
import zlib

import numpy as np
import scipy.io
import scipy.sparse as sp

from .._files import create_beside
from ..classes._matrix import csr_array, csr_matrix
from ..device._cuda import to_host
from ._body import INLINE, check_body
from ._header import MMInfo, bad_file, check_memory, read_header

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar")
_COMPRESSED = {".gz": gzip, ".bz2": bz2}
# What a damaged compressed stream or archive raises while being read.
_STREAM_ERRORS = (OSError, EOFError, zlib.error, tarfile.TarError)
# A compressed file or archive member whose text is longer is checked and parsed from
# its stream (decompressed twice) rather than from one copy in memory.
_IN_MEMORY_BYTES = 256 << 20


def _compression(path: str):
    """gzip, bz2 or None, from the file name."""
    for suffix, module in _COMPRESSED.items():
        if path.endswith(suffix):
            return module
    return None


def is_archive(path) -> bool:
    """Whether ``path`` names a tar archive (SuiteSparse ships ``<Name>.tar.gz``)."""
    return os.fspath(path).endswith(ARCHIVE_SUFFIXES)


def _open_binary(path: str):
    module = _compression(path)
    return module.open(path, "rb") if module is not None else open(path, "rb")


def _check_exists(path: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a Matrix Market file")


def _header_of_file(path: str) -> MMInfo:
    plain_size = os.path.getsize(path) if _compression(path) is None else None
    try:
        with _open_binary(path) as stream:
            return read_header(stream, path, plain_size)
    except _STREAM_ERRORS as exc:
        raise bad_file(path, f"cannot be read ({exc})") from exc


# ------------------------------------------------------------------------ archives
_MAIN_MEMBER = re.compile(r"^(?:\./)?([^/]+)/\1\.mtx$")


def _archive_stem(path: str) -> str:
    base = os.path.basename(path)
    for suffix in ARCHIVE_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def _open_archive(path: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except _STREAM_ERRORS as exc:
        raise bad_file(path, f"is not a readable tar archive ({exc})") from exc


def archive_members(tar: tarfile.TarFile, path: str):
    """The main ``<Name>/<Name>.mtx`` member and ``{suffix: member}`` for ``<Name>_*.mtx``.

    The archive's file name picks ``<Name>`` when it holds several candidates.
    """
    try:
        members = tar.getmembers()
    except _STREAM_ERRORS as exc:
        raise bad_file(path, f"is a damaged or truncated archive ({exc})") from exc
    candidates = {}
    for member in members:
        match = _MAIN_MEMBER.match(member.name)
        if match and member.isfile():
            candidates[match.group(1)] = member
    stem = _archive_stem(path)
    if stem in candidates:
        name, main = stem, candidates[stem]
    elif len(candidates) == 1:
        name, main = next(iter(candidates.items()))
    else:
        found = ", ".join(sorted(candidates)) or "none"
        raise bad_file(
            path,
            f"holds no single '<Name>/<Name>.mtx' member (candidates: {found}); "
            "a SuiteSparse archive holds exactly one",
        )
    directory = main.name.rsplit("/", 1)[0]
    prefix = f"{directory}/{name}_"
    aux = {
        member.name[len(prefix) : -len(".mtx")]: member
        for member in members
        if member.isfile() and member.name.startswith(prefix) and member.name.endswith(".mtx")
    }
    return main, dict(sorted(aux.items()))


def _member_source(path: str, member: tarfile.TarInfo) -> str:
    return f"{path}:{member.name}"


def _header_of_member(tar, path: str, member: tarfile.TarInfo) -> MMInfo:
    source = _member_source(path, member)
    try:
        return read_header(tar.extractfile(member), source, member.size)
    except _STREAM_ERRORS as exc:
        raise bad_file(source, f"cannot be read ({exc})") from exc


# ------------------------------------------------------------------------- reading
@functools.cache
def _mmread_kwargs() -> dict:
    # scipy >= 1.12 can return a coo_array; asking for it avoids the spmatrix default
    # that newer releases deprecate.
    return (
        {"spmatrix": False} if "spmatrix" in inspect.signature(scipy.io.mmread).parameters else {}
    )


def _parse_body(open_stream, source, info: MMInfo, convert):
    """``convert`` of scipy's parse of ``source`` (a path or a binary stream), errors named
    by file.

    Every entry is checked (:func:`._body.check_body`) against the header, and scipy's
    parse is used only when all of them pass: its parser silently drops what it does not
    expect. A plain file is checked from a stream, then parsed from its path. A compressed
    file or archive member of up to :data:`_IN_MEMORY_BYTES` is decompressed once, into
    memory, and checked while scipy parses it (and ``convert`` converts) on another thread;
    a NUL byte, which crashes scipy's parser, is looked for before it starts. A longer
    compressed text is checked from a stream of its own first, then parsed.
    """
    check_memory(info)
    if isinstance(source, str) and _compression(source) is None:
        return _parse_then_check(source, open_stream, info, convert)
    text = _read_whole(open_stream, info)
    if text is not None:
        return _check_while_parsing(text, io.BytesIO(text), info, convert)
    _check_entries(open_stream, info, _beside_parser())
    try:
        parsed = _scipy_parse(source, info)
    except ValueError:
        _check_entries(open_stream, info)  # names the line scipy refused, when it can
        raise
    return convert(parsed)


def _beside_parser() -> bool:
    """Whether scipy parses with fast_matrix_market, whose refusals the check leaves to it
    (:func:`._body._certain_entries`); scipy < 1.12's own parser gets the whole check."""
    return bool(_mmread_kwargs())


def _parse_then_check(path: str, open_stream, info: MMInfo, convert):
    """``convert`` of scipy's parse of the plain file ``path``, its entries checked from
    before the parse to after ``convert``.

    scipy's parser holds the GIL and uses every core; nothing runs beside it. The check
    (one thread, from a stream of bounded chunks: the file is never held whole in memory)
    starts first, on the core that the look for what crashes the parser (a NUL byte, a
    damaged last line without its line end; numpy, which releases the GIL) leaves free,
    stalls during the parse and goes on beside the conversion to CSR, which releases the
    GIL on the other core. One checking thread, not two: numpy calls on two threads hand
    the GIL back and forth more than the second core gives (measured: 0.95-1.3x one
    thread's throughput). A parse that fails is reported after the whole check, so a bad
    entry is named as such.
    """
    beside = _beside_parser()
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        checking = pool.submit(_check_entries, open_stream, info, beside, INLINE)
        may_crash = _may_crash_the_parser(path, info)
        if may_crash:
            checking.result()  # refuses the first bad line: the NUL's
        try:
            parsed = _scipy_parse(path, info, functools.partial(_mapped, path))
        except ValueError:
            concurrent.futures.wait([checking])  # its verdict may not name the first line
            _check_entries(open_stream, info)  # names the line scipy refused, when it can
            raise
        if may_crash:  # every entry passed before the parse: nothing to check beside it
            return convert(parsed)
        converted = pool.submit(convert, parsed)
        checking.result()
        return converted.result()
    finally:
        pool.shutdown(wait=False)  # a bad line is reported now, not after the conversion


# Bytes of a plain file mapped at a time to look for what crashes scipy's parser.
_SCAN_BYTES = 16 << 20


def _may_crash_the_parser(path: str, info: MMInfo) -> bool:
    """Whether the body of ``path`` holds a NUL byte or its last line has no line end: what
    crashes scipy's parser (fast_matrix_market reads past the end of its buffer).

    The file is mapped a window at a time (the page cache's pages, not a copy of them);
    numpy's minimum of each (a little faster than a memchr here) releases the GIL, so that
    the check started before runs beside it.
    """
    size = os.path.getsize(path)
    if size <= info.header_bytes:
        return False
    with open(path, "rb") as file:
        file.seek(size - 1)
        if file.read(1) != b"\n":
            return True
        first = info.header_bytes - info.header_bytes % mmap.ALLOCATIONGRANULARITY
        for offset in range(first, size, _SCAN_BYTES):
            length = min(_SCAN_BYTES, size - offset)
            with mmap.mmap(file.fileno(), length, offset=offset, access=mmap.ACCESS_READ) as view:
                body = np.frombuffer(view, np.uint8)[max(0, info.header_bytes - offset) :]
                nul = body.min() == 0
                del body  # the map closes only once no array holds it
                if nul:
                    return True
    return False


def _mapped(path: str) -> mmap.mmap:
    """A plain file's bytes, mapped read-only: only when an error message needs a line."""
    with open(path, "rb") as file:
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def _check_while_parsing(text, source, info: MMInfo, convert):
    """Check ``text`` (the whole file's bytes) while ``convert(scipy's parse of source)``
    runs on another thread; its result once every entry has passed."""
    if text.find(b"\0", info.header_bytes) >= 0:  # scipy's parser would crash on it
        check_body(text, info)  # refuses the first bad line: the NUL's, or one before it
        raise bad_file(info.source, "holds a NUL byte, which no Matrix Market entry has")
    pool = concurrent.futures.ThreadPoolExecutor(1)
    parsed = pool.submit(lambda: convert(_scipy_parse(source, info, text)))
    try:
        check_body(text, info, _beside_parser())
    finally:
        pool.shutdown(wait=False)  # a bad line is reported now, not after scipy's parse
    try:
        return parsed.result()
    except ValueError:
        check_body(text, info)  # names the line scipy refused, when it can
        raise


def _read_whole(open_stream, info: MMInfo) -> bytes | None:
    """The decompressed text, or None when it is longer than :data:`_IN_MEMORY_BYTES`."""
    try:
        with open_stream() as stream:
            text = stream.read(_IN_MEMORY_BYTES + 1)
    except _STREAM_ERRORS as exc:
        raise bad_file(info.source, f"cannot be read ({exc})") from exc
    return text if len(text) <= _IN_MEMORY_BYTES else None


def _check_entries(open_stream, info: MMInfo, beside_parser=False, pool=None) -> None:
    try:
        with open_stream() as stream:
            stream.seek(info.header_bytes)
            check_body(stream, info, beside_parser, pool)
    except _STREAM_ERRORS as exc:
        raise bad_file(info.source, f"cannot be read ({exc})") from exc


# scipy's (fast_matrix_market's) message for an index outside the declared shape
_OUT_OF_RANGE = re.compile(r"Line (\d+): (Row|Column) index out of bounds")


def _scipy_parse(source, info: MMInfo, text=None):
    """scipy's parse; its errors named by file, an index out of range with its value and
    bound when the file's bytes are at hand (``text``: the bytes, or a function that
    returns them)."""
    try:
        return scipy.io.mmread(source, **_mmread_kwargs())
    except MemoryError:
        raise
    except Exception as exc:  # the parser's message (line, problem) is the useful part
        found = _OUT_OF_RANGE.search(str(exc)) if text is not None else None
        if found is None:
            raise bad_file(info.source, f"bad entries: {exc}") from exc
        line, which = int(found[1]), found[2].lower()
        text = text() if callable(text) else text
        raise bad_file(info.source, _out_of_range(text, line, which, info)) from exc


def _out_of_range(text, line: int, which: str, info: MMInfo) -> str:
    """What is wrong with ``line`` (1-based) of ``text``, whose ``which`` index is out of
    range."""
    newlines = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == ord("\n"))
    end = int(newlines[line - 1]) if line <= newlines.size else len(text)
    words = bytes(text[int(newlines[line - 2]) + 1 : end]).split()
    column = 0 if which == "row" else 1
    bound = info.shape[column]
    return (
        f"line {line}: {which} index {words[column].decode()} is out of range: the size line "
        f"declares {bound} {which}s (indices 1 to {bound}); the entry or the size line is wrong"
    )


def _check_triangle(coo, info: MMInfo) -> None:
    """A symmetric file stores one triangle; scipy mirrors it without checking.

    scipy returns the file's own entries first (in file order), then the mirrored
    off-diagonal ones; the first ``info.entries`` are checked.
    """
    if info.symmetry == "general":
        return
    n = info.entries
    rows, cols = coo.row[:n], coo.col[:n]
    strict = info.symmetry == "skew-symmetric"
    bad = rows <= cols if strict else rows < cols
    if bad.any():
        k = int(np.argmax(bad))
        row, col = int(rows[k]) + 1, int(cols[k]) + 1
        where = "on" if row == col else "above"
        rule = "strictly below" if strict else "on or below"
        raise bad_file(
            info.source,
            f"entry {k + 1} (row {row}, column {col}) is {where} the diagonal, but a "
            f"{info.symmetry} file stores only the triangle {rule} the diagonal",
        )
    if info.symmetry == "hermitian":
        diagonal = coo.data[:n][rows == cols]
        if np.any(diagonal.imag != 0):
            value = diagonal[np.argmax(diagonal.imag != 0)]
            raise bad_file(
                info.source,
                f"a hermitian matrix has a real diagonal, but the file has diagonal value {value}",
            )


def _to_csr(result, info: MMInfo, array: bool):
    cls = csr_array if array else csr_matrix
    if isinstance(result, np.ndarray):
        return cls(sp.csr_matrix(result))
    _check_triangle(result, info)
    csr = sp.csr_matrix(result)
    if info.field == "pattern" and csr.dtype != np.float64:
        csr = csr.astype(np.float64)
    return cls(csr, copy=False)


def _read_aux(result, info: MMInfo, array: bool):
    """Auxiliary matrices: dense ones stay numpy arrays, sparse ones become CSR."""
    if isinstance(result, np.ndarray):
        return result
    return _to_csr(result, info, array)


def mminfo(path) -> MMInfo:
    """The checked header of a Matrix Market file, without reading its entries.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.mtx``, ``.mtx.gz`` or ``.mtx.bz2`` file, or a SuiteSparse ``.tar.gz``
        archive (its ``<Name>/<Name>.mtx`` member is described).

    Returns
    -------
    MMInfo
        Format, field, symmetry, shape, stored entries, comments and, for files from
        the SuiteSparse collection, :class:`SuiteSparseMetadata` (group, name, id, kind...).

    Raises
    ------
    ValueError
        The header is malformed; the message names the file and the problem.
    """
    path = os.fspath(path)
    _check_exists(path)
    if is_archive(path):
        with _open_archive(path) as tar:
            main, _ = archive_members(tar, path)
            return _header_of_member(tar, path, main)
    return _header_of_file(path)


def mmread(path, *, array: bool = False, aux: bool = False):
    """Read a Matrix Market file into a :class:`sparsegpu.csr_matrix`.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.mtx``, ``.mtx.gz`` or ``.mtx.bz2`` file, or a SuiteSparse archive
        (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar``) holding ``<Name>/<Name>.mtx``.
    array : bool, optional
        Return a :class:`sparsegpu.csr_array` instead of a ``csr_matrix``.
    aux : bool, optional
        Also return the archive's auxiliary matrices (``<Name>_b.mtx`` ...) as a dict
        ``{"b": ...}``: sparse ones as CSR, dense ones as numpy arrays. Empty for a
        plain file.

    Returns
    -------
    csr_matrix or csr_array, or (matrix, dict) when ``aux`` is true
        Symmetric, skew-symmetric and hermitian files are expanded (the diagonal once);
        ``pattern`` files get float64 ones; ``integer`` files int64 values; duplicate
        entries are summed; ``array`` files are stored without their zeros.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        The file is malformed (banner, field/format/symmetry combination, size line,
        entry count, indices out of range, non-numeric or truncated entries, entries
        above the diagonal of a symmetric file) or declares sizes needing more memory
        than this machine has; or an entry does not match the header: a line with more
        or fewer numbers than the field has, a number that is not whole (``0x1p3``,
        ``1.2.3``, ``2.5`` in an ``integer`` file, a non-integer index), a NUL or other
        byte no entry has. The message names the file, the line and the problem; the
        entries are checked before any of scipy's parse is used.

    Examples
    --------
    >>> import sparsegpu as sg
    >>> A = sg.io.mmread(sg.datasets.path("bcsstk13"))
    >>> A.shape, A.nnz
    ((2003, 2003), 83883)
    """
    path = os.fspath(path)
    _check_exists(path)
    if is_archive(path):
        return _read_archive(path, array, aux)
    info = _header_of_file(path)
    to_csr = functools.partial(_to_csr, info=info, array=array)
    matrix = _parse_body(lambda: _open_binary(path), path, info, to_csr)
    return (matrix, {}) if aux else matrix


def _read_archive(path: str, array: bool, aux: bool):
    with _open_archive(path) as tar:
        main, aux_members = archive_members(tar, path)
        info = _header_of_member(tar, path, main)
        matrix = _parse_member(tar, main, info, functools.partial(_to_csr, info=info, array=array))
        if not aux:
            return matrix
        extra = {}
        for suffix, member in aux_members.items():
            member_info = _header_of_member(tar, path, member)
            to_aux = functools.partial(_read_aux, info=member_info, array=array)
            extra[suffix] = _parse_member(tar, member, member_info, to_aux)
        return matrix, extra


def _parse_member(tar, member, info: MMInfo, convert):
    try:
        stream = tar.extractfile(member)
    except _STREAM_ERRORS as exc:
        raise bad_file(info.source, f"cannot be read ({exc})") from exc
    return _parse_body(lambda: tar.extractfile(member), stream, info, convert)


# ------------------------------------------------------------------------- writing
def mmwrite(path, A, *, comment: str = "", field=None, precision=None, symmetry=None) -> None:
    """Write ``A`` as a Matrix Market file (``.mtx``, ``.mtx.gz`` or ``.mtx.bz2``).

    The file is written beside its destination and renamed into place, so a failed
    write never leaves a partial file under ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        Destination; the suffix chooses the compression.
    A : sparse matrix or array, dense array (numpy or CuPy)
        Sparse input is written in ``coordinate`` format, dense in ``array`` format.
    comment : str, optional
        Comment lines for the header.
    field : {"real", "integer", "complex", "pattern"}, optional
        Defaults to the dtype's field.
    precision : int, optional
        Significant digits of the values (scipy's default otherwise).
    symmetry : {"general", "symmetric", "skew-symmetric", "hermitian"}, optional
        Defaults to what scipy detects.

    Raises
    ------
    ValueError
        ``path`` names an archive (write the ``.mtx`` and pack it yourself).
    """
    path = os.fspath(path)
    if is_archive(path):
        raise ValueError(
            f"{path}: mmwrite writes .mtx, .mtx.gz or .mtx.bz2 files, not tar archives"
        )
    A = to_host(A)
    A = sp.coo_matrix(A) if sp.issparse(A) else np.asarray(A)
    kwargs = {"comment": comment, "field": field, "precision": precision}
    if symmetry is not None:
        kwargs["symmetry"] = symmetry
    directory = os.path.dirname(os.path.abspath(path))
    module = _compression(path)
    temps = []
    try:
        plain = _temp_beside(path, directory, temps)
        # scipy writes a plain file (fast_matrix_market seeks while writing, which a
        # compressed stream cannot); it is compressed afterwards.
        scipy.io.mmwrite(plain, A, **kwargs)
        if module is not None:
            packed = _temp_beside(path, directory, temps)
            with open(plain, "rb") as source, module.open(packed, "wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
            plain = packed
        os.replace(plain, path)
    finally:
        for temp in temps:
            if os.path.exists(temp):
                os.unlink(temp)


def _temp_beside(path: str, directory: str, temps: list) -> str:
    fd, temp = create_beside(directory, f".{os.path.basename(path)}.", ".mtx")
    os.close(fd)
    temps.append(temp)
    return temp
