"""Safe extraction of downloaded tar archives.

An archive from the network is untrusted: every member must be a regular file or a
directory under the one top-level directory expected, with no absolute path, no ``..``
and no link or device; the total size is bounded (a small archive cannot fill the disk).
Members are copied by hand, so the rules hold whatever ``tarfile`` version is installed.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import posixpath
import shutil
import tarfile
import zlib
from pathlib import Path

# An archive may expand to at most this many times its own size (text Matrix Market
# compresses 3-6x), and never less than MIN_EXTRACT_LIMIT bytes.
MAX_EXPANSION_RATIO = 100
MIN_EXTRACT_LIMIT = 64 << 20
_CHUNK = 1 << 20


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return f"an entry of tar type {member.type!r}"


def _check_name(member: tarfile.TarInfo, top: str, source: str) -> str:
    name = member.name
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ValueError(f"{source}: member {name!r} has an absolute path; refusing to extract")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{source}: member {name!r} climbs out with '..'; refusing to extract")
    if not parts or parts[0] != top:
        raise ValueError(
            f"{source}: member {name!r} is outside the expected directory {top + '/'!r}; "
            "refusing to extract"
        )
    return posixpath.join(*parts)


def verify_compression(archive: Path, source: str) -> None:
    """Decompress ``archive`` to its end, so the gzip/bzip2 checksum is checked.

    ``tarfile`` stops at the end-of-archive marker without reading the compressed
    stream's trailer, so a damaged archive could otherwise extract without complaint.
    """
    with open(archive, "rb") as raw:
        magic = raw.read(3)
    module = gzip if magic[:2] == b"\x1f\x8b" else bz2 if magic == b"BZh" else None
    if module is None:
        return
    try:
        with module.open(archive, "rb") as stream:
            while stream.read(_CHUNK):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{source}: damaged or truncated archive ({exc})") from exc


def extraction_limit(archive: Path) -> int:
    """Most bytes ``archive`` may expand to: a multiple of its size (more is a bomb)."""
    return max(MIN_EXTRACT_LIMIT, MAX_EXPANSION_RATIO * archive.stat().st_size)


def _disk_full(destination: Path, source: str, needed: int, written: int, free: int):
    """The OSError (ENOSPC) for a disk too full to extract ``source`` into ``destination``."""
    return OSError(
        errno.ENOSPC,
        f"{destination}: the disk is full: extracting {source} needs {needed} bytes "
        f"({written} written so far) but {free} are free; free some space, or extract "
        "to a larger disk",
    )


def safe_extract(archive: Path, destination: Path, top: str, source: str | None = None) -> Path:
    """Extract ``archive`` (members under ``top/`` only) into ``destination``.

    Parameters
    ----------
    archive : Path
        A tar file (any compression ``tarfile`` reads).
    destination : Path
        An existing, empty directory.
    top : str
        The one top-level directory the archive may hold (SuiteSparse: ``<Name>``).
    source : str, optional
        The name used in messages (the URL it came from, say).

    Returns
    -------
    Path
        ``destination / top``.

    Raises
    ------
    ValueError
        A member breaks a rule above, the archive expands past
        :func:`extraction_limit`, or the archive is damaged or truncated (its
        compression checksum is verified first). Files already
        written stay under ``destination``, which the caller discards.
    OSError
        ``errno.ENOSPC``: the disk holding ``destination`` is too full for the members
        (the message names it and the bytes needed, written and free).
    """
    source = source or str(archive)
    verify_compression(archive, source)
    limit = extraction_limit(archive)
    free = shutil.disk_usage(destination).free
    written = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                relative = _check_name(member, top, source)
                target = destination / relative
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise ValueError(
                        f"{source}: member {member.name!r} is {_kind(member)}; an archive may "
                        "hold only regular files and directories; refusing to extract"
                    )
                if written + member.size > limit:
                    raise ValueError(
                        f"{source}: expands to more than {limit} bytes (member {member.name!r} "
                        f"is {member.size} bytes); refusing to extract"
                    )
                if written + member.size > free:
                    raise OSError(errno.ENOSPC, "not enough free space")  # reported below
                target.parent.mkdir(parents=True, exist_ok=True)
                stream = tar.extractfile(member)
                with open(target, "xb") as out:
                    remaining = member.size
                    while remaining:
                        chunk = stream.read(min(_CHUNK, remaining))
                        if not chunk:
                            raise ValueError(
                                f"{source}: member {member.name!r} is truncated; the archive "
                                "is damaged"
                            )
                        out.write(chunk)
                        remaining -= len(chunk)
                written += member.size
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, FileExistsError):
            raise ValueError(f"{source}: holds {exc.filename!r} twice; refusing") from exc
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(destination, source, written + member.size, written, free) from exc
        raise ValueError(f"{source}: cannot be extracted: {exc}") from exc
    top_dir = destination / top
    if not top_dir.is_dir():
        raise ValueError(f"{source}: the archive holds nothing under {top + '/'!r}")
    return top_dir
