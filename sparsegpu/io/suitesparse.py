"""The SuiteSparse Matrix Collection: its index, a download cache, and loading in one line.

>>> import sparsegpu as sg
>>> A = sg.io.suitesparse.load("HB/bcsstk13")  # doctest: +SKIP
>>> small_graphs = sg.io.suitesparse.search(kind="graph", nnz=(0, 1000), limit=3)  # doctest: +SKIP
>>> [m.full_name for m in small_graphs]  # doctest: +SKIP

Where things live
-----------------
* The collection: ``SPARSEGPU_SUITESPARSE_URL`` (default ``https://sparse.tamu.edu``);
  its index is ``<url>/files/ssstats.csv``, a matrix ``<url>/MM/<Group>/<Name>.tar.gz``.
* The cache: ``SPARSEGPU_DATA_DIR`` (default: the user cache directory of platformdirs,
  ``.../sparsegpu/suitesparse``). A fetched matrix is ``MM/<Group>/<Name>/<Name>.mtx``
  (auxiliary ``<Name>_*.mtx`` beside it) and ``<Name>.npz``, a binary copy of its CSR
  arrays made when it is first parsed, so loading again costs a fraction of parsing. The
  copy is optional: where it cannot be written (read-only or full disk) a warning says so
  and the matrix is returned all the same.
* The deadline: a download not complete after ``SPARSEGPU_DOWNLOAD_DEADLINE_S`` seconds
  (default :data:`DOWNLOAD_DEADLINE_S`, 4 hours: the largest archive at 1 MB/s) is
  abandoned with a :class:`DownloadError`, so a stalled or trickling server cannot hold
  the download lock forever.

Downloads go to a temporary folder (``.<Name>.XXXXXXXX/`` beside the entry) and are
renamed into place only once complete, checked (size against ``Content-Length``, archive
integrity), safely extracted and parsed, under a file lock: an interrupted or concurrent
fetch never leaves a corrupt entry, and the folders of killed fetches are removed by the
next fetch of the same matrix. Everything already in the cache works offline.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fnmatch
import gzip
import os
import re
import shutil
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._files import cache_dir as _cache_root
from .._files import create_beside
from .._version import __version__
from ..classes._matrix import csr_array, csr_matrix
from . import mmread
from ._archive import safe_extract

DEFAULT_URL = "https://sparse.tamu.edu"
URL_ENV = "SPARSEGPU_SUITESPARSE_URL"
DATA_DIR_ENV = "SPARSEGPU_DATA_DIR"
TIMEOUT_S = 60.0
DEADLINE_ENV = "SPARSEGPU_DOWNLOAD_DEADLINE_S"
# A whole download must be done within this (or $SPARSEGPU_DOWNLOAD_DEADLINE_S) seconds.
DOWNLOAD_DEADLINE_S = 4 * 3600.0
# Waiting longer than this for another process's fetch of the same matrix is an error.
LOCK_TIMEOUT_S = 3600.0
# The collection's largest archive is about 10 GB; anything far beyond is not a matrix.
MAX_DOWNLOAD_BYTES = 64 << 30
_BINARY_VERSION = 1
_CHUNK = 1 << 20
_NAME_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class DownloadError(OSError):
    """A download failed (no network, HTTP error, truncated transfer, lock timeout)."""


# ------------------------------------------------------------------------- places
def base_url() -> str:
    """The collection's address: ``$SPARSEGPU_SUITESPARSE_URL`` or ``https://sparse.tamu.edu``."""
    return os.environ.get(URL_ENV, "").rstrip("/") or DEFAULT_URL


def cache_dir(data_dir=None) -> Path:
    """The cache directory: ``data_dir`` if given, else ``$SPARSEGPU_DATA_DIR``, else the
    ``suitesparse`` in sparsegpu's cache directory (``$SPARSEGPU_CACHE_DIR`` or the
    platformdirs user cache)."""
    if data_dir is not None:
        return Path(data_dir)
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured)
    return _cache_root() / "suitesparse"


# -------------------------------------------------------------------------- index
@dataclass(frozen=True)
class MatrixRecord:
    """One matrix of the collection, as its index (``ssstats.csv``) describes it.

    Attributes
    ----------
    id : int
        The collection's id (the row number in the index).
    group, name : str
        ``"HB"``, ``"bcsstk13"``.
    rows, cols, nnz : int
        Shape and nonzeros (symmetric matrices counted in full).
    is_real, is_binary, is_nd : bool
        Real (not complex) values; pattern only (all ones); from a 2-D/3-D discretization.
    spd : bool
        Symmetric positive definite.
    pattern_symmetry, numerical_symmetry : float
        Fraction of entries matched by a (numerically equal) transposed entry.
    kind : str
        The problem kind (``"structural problem"``, ``"undirected graph"``, ...).
    pattern_entries : int or None
        Entries including explicit zeros (newer indexes only).
    """

    id: int
    group: str
    name: str
    rows: int
    cols: int
    nnz: int
    is_real: bool
    is_binary: bool
    is_nd: bool
    spd: bool
    pattern_symmetry: float
    numerical_symmetry: float
    kind: str
    pattern_entries: int | None = None

    @property
    def full_name(self) -> str:
        """``"Group/Name"``."""
        return f"{self.group}/{self.name}"

    def url(self) -> str:
        """Where the Matrix Market archive of this matrix is downloaded from."""
        return archive_url(self.group, self.name)


def parse_index(text: str, source: str = "ssstats.csv") -> list[MatrixRecord]:
    """Parse the collection's index: a count line, a date line, then one CSV row per
    matrix (Group, Name, nrows, ncols, nnz, isReal, isBinary, isND, posdef,
    pattern_symmetry, numerical_symmetry, kind[, pattern_entries]); row k is id k.

    Raises
    ------
    ValueError
        A malformed line (the message names it) or a count that does not match.
    """
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError(f"{source}: too short to be the collection index ({len(lines)} lines)")
    try:
        declared = int(lines[0].split(",")[0])
    except ValueError:
        raise ValueError(f"{source}: line 1 is {lines[0][:40]!r}, not the matrix count") from None
    records = []
    for number, row in enumerate(csv.reader(lines[2:]), start=3):
        if not row:
            continue
        try:
            records.append(
                MatrixRecord(
                    id=len(records) + 1,
                    group=row[0],
                    name=row[1],
                    rows=int(row[2]),
                    cols=int(row[3]),
                    nnz=int(row[4]),
                    is_real=row[5].strip() == "1",
                    is_binary=row[6].strip() == "1",
                    is_nd=row[7].strip() == "1",
                    spd=row[8].strip() == "1",
                    pattern_symmetry=float(row[9]),
                    numerical_symmetry=float(row[10]),
                    kind=row[11].strip(),
                    pattern_entries=int(row[12]) if len(row) > 12 and row[12].strip() else None,
                )
            )
        except (IndexError, ValueError) as exc:
            raise ValueError(f"{source}: line {number} is malformed ({exc}): {row!r}") from None
    if len(records) != declared:
        raise ValueError(
            f"{source}: declares {declared} matrices but lists {len(records)}; "
            "the file is truncated or damaged"
        )
    return records


_index_memo: dict[tuple[str, int, int], list[MatrixRecord]] = {}


def index(*, refresh: bool = False, data_dir=None, progress: bool = False) -> list[MatrixRecord]:
    """The collection's index, downloaded once into the cache and read from there after.

    Parameters
    ----------
    refresh : bool, optional
        Download it again (new matrices appear in the collection now and then).
    data_dir : path, optional
        The cache directory (default: :func:`cache_dir`).
    progress : bool, optional
        Show a progress bar while downloading.

    Raises
    ------
    DownloadError
        Not cached and the collection cannot be reached.
    """
    path = cache_dir(data_dir) / "ssstats.csv"
    if refresh or not path.exists():
        _fetch_index(path, progress)
    try:
        return _read_index(path)
    except ValueError as exc:
        if refresh:
            raise
        warnings.warn(f"the cached collection index is damaged ({exc}); downloading it again")
        _fetch_index(path, progress)
        return _read_index(path)


def _read_index(path: Path) -> list[MatrixRecord]:
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _index_memo:
        _index_memo.clear()
        _index_memo[key] = parse_index(
            path.read_text(encoding="utf-8", errors="replace"), str(path)
        )
    return _index_memo[key]


def _fetch_index(path: Path, progress: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    url = f"{base_url()}/files/ssstats.csv"
    with _locked(path.with_name(".ssstats.csv.lock"), url):
        fd, temp = create_beside(path.parent, ".ssstats.", ".csv")
        os.close(fd)
        try:
            _download(url, Path(temp), "ssstats.csv", progress)
            parse_index(Path(temp).read_text(encoding="utf-8", errors="replace"), url)
            os.replace(temp, path)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)


def _matches(value, wanted) -> bool:
    """``wanted``: None (anything), a number (equal) or a ``(lo, hi)`` range (inclusive,
    either bound None for open)."""
    if wanted is None:
        return True
    if isinstance(wanted, tuple):
        lo, hi = wanted
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    return value == wanted


def search(
    group: str | None = None,
    name: str | None = None,
    rows=None,
    cols=None,
    nnz=None,
    kind: str | None = None,
    spd: bool | None = None,
    limit: int | None = None,
    *,
    data_dir=None,
) -> list[MatrixRecord]:
    """Matrices of the collection matching every criterion given, by id.

    Parameters
    ----------
    group, name : str, optional
        Case-insensitive shell patterns (``"HB"``, ``"bcsstk*"``).
    rows, cols, nnz : int or (lo, hi), optional
        An exact value or an inclusive range; ``None`` in a range leaves it open
        (``nnz=(1_000_000, None)``).
    kind : str, optional
        A case-insensitive substring of the kind (``"graph"`` matches ``"undirected graph"``).
    spd : bool, optional
        Only symmetric positive definite matrices (True) or only the others (False).
    limit : int, optional
        At most this many results.
    data_dir : path, optional
        The cache directory holding the index.

    Examples
    --------
    >>> search(group="HB", name="bcsstk1*", nnz=(0, 50_000))    # doctest: +SKIP
    """
    for label, value in (("rows", rows), ("cols", cols), ("nnz", nnz)):
        if isinstance(value, tuple) and len(value) != 2:
            raise ValueError(f"{label}={value!r}: give a number or a (lo, hi) range")
    if limit is not None and limit < 0:
        raise ValueError(f"limit={limit} must be >= 0")
    found = []
    for record in index(data_dir=data_dir):
        if group is not None and not fnmatch.fnmatch(record.group.lower(), group.lower()):
            continue
        if name is not None and not fnmatch.fnmatch(record.name.lower(), name.lower()):
            continue
        if kind is not None and kind.lower() not in record.kind.lower():
            continue
        if spd is not None and record.spd != bool(spd):
            continue
        if not (
            _matches(record.rows, rows)
            and _matches(record.cols, cols)
            and _matches(record.nnz, nnz)
        ):
            continue
        found.append(record)
        if limit is not None and len(found) >= limit:
            break
    return found


# -------------------------------------------------------------------------- names
def archive_url(group: str, name: str) -> str:
    """``<base>/MM/<Group>/<Name>.tar.gz``."""
    return f"{base_url()}/MM/{group}/{name}.tar.gz"


def _check_part(part: str, full: str) -> None:
    if not _NAME_PART.match(part) or part in (".", ".."):
        raise ValueError(
            f"{full!r} is not a collection name: use 'Group/Name' (letters, digits, '_', '-', "
            "'.', '+'), like 'HB/bcsstk13'"
        )


def _entry(root: Path, group: str, name: str) -> Path:
    return root / "MM" / group / name


def cached(data_dir=None) -> list[str]:
    """``"Group/Name"`` of every matrix in the cache."""
    root = cache_dir(data_dir) / "MM"
    if not root.is_dir():
        return []
    return sorted(
        f"{entry.parent.name}/{entry.name}"
        for entry in root.glob("*/*")
        if entry.is_dir() and (entry / f"{entry.name}.mtx").is_file()
    )


def resolve(name: str, *, data_dir=None) -> tuple[str, str]:
    """``(group, name)`` for ``"Group/Name"``, or for a bare ``"Name"`` that is unique in the
    cache or, failing that, in the index.

    Raises
    ------
    ValueError
        A malformed name, or a bare name that is unknown or ambiguous (the message lists
        the candidates).
    """
    text = name.strip()
    if "/" in text:
        group, _, short = text.partition("/")
        _check_part(group, text)
        _check_part(short, text)
        return group, short
    _check_part(text, text)
    in_cache = [c for c in cached(data_dir) if c.split("/")[1] == text]
    if len(in_cache) == 1:
        return tuple(in_cache[0].split("/"))
    bundled = _bundled_name(text)
    if not in_cache and bundled is not None:  # known without the index (offline too)
        return tuple(bundled.split("/"))
    candidates = in_cache or [r.full_name for r in index(data_dir=data_dir) if r.name == text]
    if not candidates:
        candidates = [
            r.full_name for r in index(data_dir=data_dir) if r.name.lower() == text.lower()
        ]
    if len(candidates) == 1:
        return tuple(candidates[0].split("/"))
    if not candidates:
        raise ValueError(
            f"no matrix named {text!r} in the collection; search with "
            "sparsegpu.io.suitesparse.search(name=...)"
        )
    raise ValueError(f"{text!r} is ambiguous: {', '.join(candidates)}; give 'Group/Name'")


def download_deadline() -> float:
    """Seconds a whole download may take: ``$SPARSEGPU_DOWNLOAD_DEADLINE_S`` or
    :data:`DOWNLOAD_DEADLINE_S`.

    Raises
    ------
    ValueError
        The variable is set but is not a positive number.
    """
    text = os.environ.get(DEADLINE_ENV, "").strip()
    if not text:
        return DOWNLOAD_DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(
            f"{DEADLINE_ENV}={text!r}: give the download deadline as a positive number of "
            f"seconds (default {DOWNLOAD_DEADLINE_S:.0f})"
        )
    return value


def _disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


# ----------------------------------------------------------------------- download
def _progress_bar(label: str, total: int | None):
    from .._console import progress

    bar = progress(transient=True, transfer=True)
    return bar, bar.add_task(label, total=total)


def _offline_hint() -> str:
    return (
        f"check the network, or point {URL_ENV} at a mirror; matrices already in the cache "
        "load without a network"
    )


def _download(url: str, destination: Path, label: str, progress: bool) -> int:
    """Copy ``url`` into ``destination`` (overwritten), checking the size; returns bytes.

    The whole transfer must end within :func:`download_deadline` (a read waits at most
    ``TIMEOUT_S`` more); a full disk is reported as such, with the bytes written.
    """
    # imported here: http.client pulls in ssl, a tenth of the time `import sparsegpu` took
    import http.client
    import urllib.error
    import urllib.request

    deadline = download_deadline()
    give_up = time.monotonic() + deadline
    request = urllib.request.Request(url, headers={"User-Agent": f"sparsegpu/{__version__}"})
    try:
        response = urllib.request.urlopen(request, timeout=min(TIMEOUT_S, deadline))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise DownloadError(
                f"{url}: HTTP 404 Not Found; is the name right? Search the collection with "
                "sparsegpu.io.suitesparse.search(name=...)"
            ) from None
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}; try again later") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"cannot download {url} ({reason}); {_offline_hint()}") from None
    with response:
        header = response.headers.get("Content-Length")
        expected = int(header) if header and header.isdigit() else None
        if expected is not None and expected > MAX_DOWNLOAD_BYTES:
            raise DownloadError(
                f"{url}: announces {expected} bytes, more than the {MAX_DOWNLOAD_BYTES} "
                "a collection archive can be; refusing"
            )
        received = 0
        bar, task = _progress_bar(label, expected) if progress else (None, None)
        try:
            if bar is not None:
                bar.start()
            with open(destination, "wb") as out:
                while True:
                    # read1: whatever has arrived, so a trickle cannot outlast the deadline
                    chunk = response.read1(_CHUNK)
                    if not chunk:
                        break
                    received += len(chunk)
                    if received > MAX_DOWNLOAD_BYTES:
                        raise DownloadError(
                            f"{url}: more than {MAX_DOWNLOAD_BYTES} bytes; refusing"
                        )
                    out.write(chunk)
                    if bar is not None:
                        bar.update(task, completed=received)
                    if time.monotonic() > give_up:
                        of = f" of {expected}" if expected is not None else ""
                        raise DownloadError(
                            f"{url}: not complete after the {deadline:g} s deadline "
                            f"({received}{of} bytes received): the server is stalled or too "
                            f"slow; try again later, or set {DEADLINE_ENV} to a longer "
                            "deadline (seconds)"
                        )
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, DownloadError):
                raise
            if isinstance(exc, OSError) and _disk_full(exc):
                raise OSError(
                    exc.errno,
                    f"{destination}: the disk is full ({exc.strerror}) after writing "
                    f"{received} bytes of {url}"
                    + (f" ({expected} bytes in all)" if expected is not None else "")
                    + f"; free some space, or point {DATA_DIR_ENV} at a larger disk",
                ) from None
            raise DownloadError(
                f"{url}: the download broke off after {received} bytes ({exc}); try again"
            ) from None
        finally:
            if bar is not None:
                bar.stop()
    if expected is not None and received != expected:
        raise DownloadError(
            f"{url}: the download is truncated: {received} of {expected} bytes; try again"
        )
    return received


@contextlib.contextmanager
def _locked(path: Path, what: str):
    """Hold the file lock ``path`` (another process fetching ``what`` holds it too)."""
    import filelock

    lock = filelock.FileLock(str(path), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise DownloadError(
            f"waited {LOCK_TIMEOUT_S:.0f} s for another process fetching {what} (lock {path}); "
            "if none is running, delete the lock file"
        ) from None
    try:
        yield
    finally:
        lock.release()


def fetch(name: str, *, data_dir=None, refresh: bool = False, progress: bool = True) -> Path:
    """Download a matrix's Matrix Market archive into the cache (once) and extract it.

    A matrix shipped with sparsegpu (:func:`sparsegpu.datasets.names`) is copied into the
    cache from the package instead, without a network (the collection's own file, without
    the archive's auxiliary matrices; ``refresh=True`` downloads the archive).

    Parameters
    ----------
    name : str
        ``"Group/Name"`` (``"HB/bcsstk13"``), or a bare name unique in the collection.
    data_dir : path, optional
        The cache directory (default: :func:`cache_dir`).
    refresh : bool, optional
        Download again even when cached; the old copy is kept until the new one is
        complete.
    progress : bool, optional
        Show a progress bar on stderr.

    Returns
    -------
    Path
        The extracted ``<Name>.mtx``.

    Raises
    ------
    ValueError
        A malformed name, or an archive that is damaged, unsafe (absolute paths, ``..``,
        links, devices, too large once extracted) or holds no valid ``<Name>/<Name>.mtx``
        (the whole file is parsed before it is installed: see :func:`sparsegpu.io.mmread`).
    DownloadError
        No network, HTTP error (404: no such matrix), truncated download, or a download
        not complete within :func:`download_deadline`.
    OSError
        The cache's disk is full (the message names the path and the bytes written).
    """
    root = cache_dir(data_dir)
    group, short = resolve(name, data_dir=root)
    entry = _entry(root, group, short)
    main = entry / f"{short}.mtx"
    if main.is_file() and not refresh:
        return main
    entry.parent.mkdir(parents=True, exist_ok=True)
    url = archive_url(group, short)
    bundled = None if refresh else _bundled_name(f"{group}/{short}")
    with _locked(entry.parent / f".{short}.lock", f"{group}/{short}"):
        if main.is_file() and not refresh:
            return main  # another process fetched it while we waited
        _remove_stale_work(entry.parent, short)
        work = Path(tempfile.mkdtemp(prefix=f".{short}.", dir=entry.parent))
        try:
            unpacked = work / "unpacked"
            unpacked.mkdir()
            if bundled is not None:
                extracted = _copy_bundled(bundled, unpacked / short)
            else:
                archive = work / f"{short}.tar.gz"
                _download(url, archive, f"{group}/{short}", progress)
                extracted = safe_extract(archive, unpacked, short, source=url)
            mtx = extracted / f"{short}.mtx"
            if not mtx.is_file():
                raise ValueError(f"{url}: the archive holds no {short}/{short}.mtx")
            # parsed (every entry checked) before it is installed; the parse is kept
            _save_binary(mmread(mtx), mtx, _binary_path(extracted, short))
            _install(extracted, entry, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return main


def _bundled_name(name: str) -> str | None:
    """``"Group/Name"`` of a matrix shipped with sparsegpu (``sparsegpu.datasets``) that
    ``name`` (``"Group/Name"`` or a bare name) names, or None."""
    from . import _bundled

    try:
        return _bundled.info(name).collection_name
    except ValueError:
        return None


def _copy_bundled(name: str, folder: Path) -> Path:
    """The bundled copy of ``name`` ("Group/Name") as ``folder/<Name>.mtx``: the
    collection's own file, without its archive's auxiliary files."""
    from . import _bundled

    folder.mkdir()
    with (
        gzip.open(_bundled.path(name), "rb") as source,
        open(folder / f"{folder.name}.mtx", "wb") as target,
    ):
        shutil.copyfileobj(source, target, 1 << 20)
    return folder


def _remove_stale_work(directory: Path, name: str) -> None:
    """Remove the ``.<name>.XXXXXXXX/`` folders of fetches that were killed.

    Called under ``name``'s lock: no live fetch of ``name`` can own one of them.
    """
    pattern = re.compile(rf"^\.{re.escape(name)}\.[A-Za-z0-9_]{{8}}$")
    for child in directory.iterdir():
        if pattern.match(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)


def _install(extracted: Path, entry: Path, work: Path) -> None:
    """Rename ``extracted`` to ``entry``; an older entry is moved aside first and
    restored if the rename fails."""
    previous = work / "previous"
    if entry.exists():
        os.replace(entry, previous)
    try:
        os.replace(extracted, entry)
    except OSError:
        if previous.exists():
            os.replace(previous, entry)
        raise


# -------------------------------------------------------------------------- load
def _binary_path(entry: Path, name: str) -> Path:
    return entry / f"{name}.npz"


def _source_stamp(path: Path) -> np.ndarray:
    stat = path.stat()
    return np.array([stat.st_size, stat.st_mtime_ns], dtype=np.int64)


def _save_binary(matrix, mtx: Path, binary: Path) -> None:
    """Write the optional binary copy; where it cannot be written, warn and go on."""
    try:
        fd, temp = create_beside(binary.parent, f".{binary.name}.")
    except OSError as exc:
        _binary_not_saved(binary, exc)
        return
    try:
        with os.fdopen(fd, "wb") as out:
            np.savez(
                out,
                version=np.array(_BINARY_VERSION),
                source=_source_stamp(mtx),
                shape=np.array(matrix.shape, dtype=np.int64),
                data=matrix.data,
                indices=matrix.indices,
                indptr=matrix.indptr,
            )
        os.replace(temp, binary)
    except OSError as exc:
        os.unlink(temp)
        _binary_not_saved(binary, exc)
    except BaseException:
        os.unlink(temp)
        raise


def _binary_not_saved(binary: Path, exc: OSError) -> None:
    full = " (the disk is full)" if _disk_full(exc) else ""
    warnings.warn(
        f"{binary}: the binary copy could not be written{full}: {exc}; the matrix is "
        "returned, but the next load parses the .mtx again (make the cache writable, or "
        f"point {DATA_DIR_ENV} at a writable directory)",
        stacklevel=4,
    )


def _load_binary(mtx: Path, binary: Path, array: bool):
    """The cached CSR arrays, or None when missing, stale (the ``.mtx`` changed) or damaged."""
    if not binary.is_file():
        return None
    try:
        with np.load(binary, allow_pickle=False) as stored:
            if int(stored["version"]) != _BINARY_VERSION or not np.array_equal(
                stored["source"], _source_stamp(mtx)
            ):
                return None
            shape = tuple(int(n) for n in stored["shape"])
            arrays = (stored["data"], stored["indices"], stored["indptr"])
        cls = csr_array if array else csr_matrix
        # scipy's constructor checks the array lengths; zipfile checked their CRCs
        return cls(arrays, shape=shape, copy=False)
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, EOFError) as exc:
        warnings.warn(f"{binary}: damaged binary copy ({exc}); reading the .mtx again")
        return None


def load(
    name: str, *, array: bool = False, data_dir=None, download: bool = True, progress: bool = True
):
    """A matrix of the collection as a :class:`sparsegpu.csr_matrix`, fetched if needed.

    The first parse of the ``.mtx`` keeps a binary copy of the CSR arrays beside it;
    later loads read that copy (a small fraction of the parse time). Where the copy cannot
    be written (read-only or full cache), a warning says so and the matrix is returned.

    Parameters
    ----------
    name : str
        ``"Group/Name"`` or a bare name unique in the collection.
    array : bool, optional
        Return a ``csr_array``.
    data_dir : path, optional
        The cache directory (default: :func:`cache_dir`).
    download : bool, optional
        Fetch when not cached (default); False raises FileNotFoundError instead.
    progress : bool, optional
        Show a progress bar while downloading.

    Raises
    ------
    FileNotFoundError
        Not cached and ``download`` is False.
    ValueError, DownloadError
        As :func:`fetch`; ValueError also for a bad ``.mtx`` (see :func:`sparsegpu.io.mmread`).
    """
    root = cache_dir(data_dir)
    group, short = resolve(name, data_dir=root)
    entry = _entry(root, group, short)
    mtx = entry / f"{short}.mtx"
    if not mtx.is_file():
        if not download:
            raise FileNotFoundError(
                f"{group}/{short} is not in the cache {root}; fetch it first "
                f"(sparsegpu fetch {group}/{short})"
            )
        fetch(f"{group}/{short}", data_dir=root, progress=progress)
    binary = _binary_path(entry, short)
    matrix = _load_binary(mtx, binary, array)
    if matrix is None:
        matrix = mmread(mtx, array=array)
        _save_binary(matrix, mtx, binary)
    return matrix


def path(name: str, *, data_dir=None) -> Path:
    """The cached ``<Name>.mtx`` of ``name`` (which need not exist yet)."""
    root = cache_dir(data_dir)
    group, short = resolve(name, data_dir=root)
    return _entry(root, group, short) / f"{short}.mtx"


__all__ = [
    "DEFAULT_URL",
    "DownloadError",
    "MatrixRecord",
    "archive_url",
    "base_url",
    "cache_dir",
    "cached",
    "download_deadline",
    "fetch",
    "index",
    "load",
    "parse_index",
    "path",
    "resolve",
    "search",
]
