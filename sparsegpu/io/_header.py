"""The Matrix Market header: banner, comments and size line, read and checked by hand.

The body is parsed by scipy (fast_matrix_market on scipy >= 1.12); the header is read
here first so that a bad file is refused with a message naming the file and the problem,
and so that the declared sizes are checked before anything is allocated for them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

FORMATS = ("coordinate", "array")
FIELDS = ("real", "integer", "complex", "pattern")
SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")

# A header line longer than this is not a Matrix Market header (binary data, say).
MAX_HEADER_LINE_BYTES = 1 << 20
MAX_HEADER_BYTES = 64 << 20

# The shortest text one stored entry can take ("i j\n", "i j v\n", "i j re im\n"; "v\n"
# for arrays): a file with fewer bytes than entries x this is truncated or lies.
_MIN_ENTRY_BYTES = {
    ("coordinate", "pattern"): 4,
    ("coordinate", "real"): 6,
    ("coordinate", "integer"): 6,
    ("coordinate", "complex"): 8,
    ("array", "real"): 2,
    ("array", "integer"): 2,
    ("array", "complex"): 4,
}

_VALUE_BYTES = {"real": 8, "integer": 8, "complex": 16, "pattern": 8}


@dataclass(frozen=True)
class SuiteSparseMetadata:
    """What the SuiteSparse collection writes into the comments of its Matrix Market files.

    Attributes
    ----------
    group, name : str
        The collection's group and matrix name (``"HB"``, ``"bcsstk13"``).
    id : int or None
        The collection's matrix id.
    title : str
        The one-line title (``[...]`` in the header), without brackets.
    kind : str
        The problem kind (``"structural problem"``, ``"undirected graph"``, ...).
    date, author, editor : str
        Provenance, as the collection records it (may be empty).
    aux : tuple of str
        Names of the auxiliary matrices shipped beside the main one (``b``, ``c``, ...).
    notes : str
        The free-text notes, one line per line.
    """

    group: str
    name: str
    id: int | None = None
    title: str = ""
    kind: str = ""
    date: str = ""
    author: str = ""
    editor: str = ""
    aux: tuple[str, ...] = ()
    notes: str = ""

    @property
    def full_name(self) -> str:
        """``"Group/Name"``, the collection's key for this matrix."""
        return f"{self.group}/{self.name}"

    @classmethod
    def from_comments(cls, comments: tuple[str, ...]) -> SuiteSparseMetadata | None:
        """Parse the ``% key: value`` lines of a SuiteSparse header; None if it is not one."""
        values: dict[str, str] = {}
        title = ""
        notes: list[str] = []
        in_notes = False
        for line in comments:
            text = line.strip()
            if in_notes:
                if text.strip("-"):  # the collection closes the notes with a rule
                    notes.append(line.rstrip())
                continue
            if text.startswith("[") and text.endswith("]"):
                title = text[1:-1].strip()
                continue
            key, sep, value = text.partition(":")
            if not sep or " " in key:
                continue
            if key == "notes":
                in_notes = True
                continue
            values.setdefault(key, value.strip())
        group, sep, name = values.get("name", "").partition("/")
        if not sep or not group or not name:
            return None
        matrix_id = values.get("id", "")
        return cls(
            group=group,
            name=name,
            id=int(matrix_id) if matrix_id.isdigit() else None,
            title=title,
            kind=values.get("kind", ""),
            date=values.get("date", ""),
            author=values.get("author", ""),
            editor=values.get("ed", ""),
            aux=tuple(values.get("aux", "").split()),
            notes="\n".join(notes).strip("\n"),
        )


@dataclass(frozen=True)
class MMInfo:
    """The checked header of a Matrix Market file.

    Attributes
    ----------
    source : str
        The file (for an archive member, ``"archive.tar.gz:Name/Name.mtx"``).
    format : str
        ``"coordinate"`` (sparse) or ``"array"`` (dense, column-major).
    field : str
        ``"real"``, ``"integer"``, ``"complex"`` or ``"pattern"``.
    symmetry : str
        ``"general"``, ``"symmetric"``, ``"skew-symmetric"`` or ``"hermitian"``.
    shape : tuple of int
        Declared rows and columns.
    entries : int
        Entries stored in the file (one triangle of a symmetric matrix); for ``array``
        files, the values stored.
    comments : tuple of str
        The comment lines, without their leading ``%``.
    suitesparse : SuiteSparseMetadata or None
        The collection's metadata when the comments carry it.
    header_bytes : int
        Bytes taken by banner, comments and size line.
    header_lines : int
        Lines taken by banner, comments and size line (the first entry is on the next).
    """

    source: str
    format: str
    field: str
    symmetry: str
    shape: tuple[int, int]
    entries: int
    comments: tuple[str, ...] = field(default=(), repr=False)
    suitesparse: SuiteSparseMetadata | None = None
    header_bytes: int = field(default=0, repr=False)
    header_lines: int = field(default=0, repr=False)

    @property
    def value_bytes(self) -> int:
        """Bytes per value once read (pattern entries become float64 ones)."""
        return _VALUE_BYTES[self.field]

    @property
    def max_nnz(self) -> int:
        """An upper bound on the nonzeros once the symmetry is expanded."""
        return self.entries if self.symmetry == "general" else 2 * self.entries

    def bytes_needed(self) -> int:
        """Peak bytes to read this file and build its CSR matrix (an estimate from above).

        Coordinate files: triplets (two index arrays and the values) for the expanded
        entries, twice (the parser's arrays and the CSR conversion), plus ``indptr``.
        Array files: the dense array plus a CSR copy with every cell nonzero.
        """
        rows, cols = self.shape
        if self.format == "array":
            return rows * cols * (2 * self.value_bytes + 8) + 8 * (rows + 1)
        index_bytes = 4 if max(rows, cols, self.max_nnz) < 2**31 else 8
        per_entry = 2 * index_bytes + self.value_bytes
        return 2 * self.max_nnz * per_entry + 8 * (rows + 1)


def bad_file(source: str, problem: str) -> ValueError:
    """The ValueError for a malformed file: ``'<file>: <problem>'``."""
    return ValueError(f"{source}: {problem}")


def _readline(stream, source: str, line_number: int) -> bytes:
    line = stream.readline(MAX_HEADER_LINE_BYTES + 1)
    if len(line) > MAX_HEADER_LINE_BYTES:
        raise bad_file(
            source,
            f"line {line_number} is longer than {MAX_HEADER_LINE_BYTES} bytes: "
            "not a Matrix Market file",
        )
    return line


def _decode(line: bytes) -> str:
    # headers are ASCII by the standard; old files carry latin-1 comments
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line.decode("latin-1")


_BANNER = "'%%MatrixMarket matrix <format> <field> <symmetry>'"


def _binary_byte(line: bytes) -> tuple[int, int] | None:
    """(1-based column, value) of the first byte of ``line`` that no text has (a control
    byte other than tab and line ends, or a byte past ASCII), or None."""
    for column, byte in enumerate(line, 1):
        if (byte < 32 and byte not in (9, 10, 13)) or byte > 126:
            return column, byte
    return None


def _parse_banner(text: str, source: str, raw: bytes) -> tuple[str, str, str]:
    tokens = text.split()
    if not tokens or tokens[0].lower() != "%%matrixmarket":
        binary = _binary_byte(raw[:256])
        if binary is not None:  # say so, rather than print the bytes as text
            column, byte = binary
            raise bad_file(
                source,
                f"is not a text file (line 1, column {column} holds byte 0x{byte:02x}): not "
                f"a Matrix Market file, which starts with {_BANNER}",
            )
        shown = text.strip()[:60]
        raise bad_file(source, f"line 1 is {shown!r}, not a Matrix Market banner ({_BANNER})")
    if len(tokens) != 5:
        raise bad_file(
            source,
            f"banner {text.strip()!r} has {len(tokens)} words; expected 5: "
            "'%%MatrixMarket matrix <format> <field> <symmetry>'",
        )
    obj, fmt, fld, sym = (t.lower() for t in tokens[1:])
    if obj != "matrix":
        raise bad_file(source, f"banner object {obj!r} is not supported; only 'matrix' is")
    for value, allowed, what in (
        (fmt, FORMATS, "format"),
        (fld, FIELDS, "field"),
        (sym, SYMMETRIES, "symmetry"),
    ):
        if value not in allowed:
            raise bad_file(
                source, f"banner has unknown {what} {value!r}; expected one of {', '.join(allowed)}"
            )
    invalid = None
    if fmt == "array" and fld == "pattern":
        invalid = "an 'array' file cannot have field 'pattern' (there are no values to omit)"
    elif sym == "hermitian" and fld != "complex":
        invalid = f"symmetry 'hermitian' needs field 'complex', not {fld!r}"
    elif sym == "skew-symmetric" and fld == "pattern":
        invalid = "symmetry 'skew-symmetric' needs values; field 'pattern' has none"
    if invalid:
        raise bad_file(source, f"invalid banner {text.strip()!r}: {invalid}")
    return fmt, fld, sym


def _parse_size(text: str, fmt: str, source: str, line_number: int) -> list[int]:
    tokens = text.split()
    expected = 3 if fmt == "coordinate" else 2
    what = "rows columns entries" if fmt == "coordinate" else "rows columns"
    if len(tokens) != expected:
        raise bad_file(
            source,
            f"size line {line_number} is {text.strip()!r}; a {fmt} file needs '{what}'",
        )
    try:
        numbers = [int(t) for t in tokens]
    except ValueError:
        raise bad_file(
            source,
            f"size line {line_number} is {text.strip()!r}: '{what}' must be integers",
        ) from None
    if any(n < 0 for n in numbers):
        raise bad_file(source, f"size line {line_number} has a negative size: {text.strip()!r}")
    return numbers


def _max_entries(rows: int, cols: int, symmetry: str) -> int:
    if symmetry == "general":
        return rows * cols
    if symmetry == "skew-symmetric":
        return rows * (rows - 1) // 2
    return rows * (rows + 1) // 2


def read_header(stream, source: str, body_bytes: int | None = None) -> MMInfo:
    """Read and check the header from a binary ``stream`` positioned at the start.

    Parameters
    ----------
    stream : binary file object
        The file (decompressed); left positioned after the size line.
    source : str
        The name used in error messages.
    body_bytes : int, optional
        Total size of the (decompressed) file when known: a file too short to hold the
        declared entries is refused before anything is allocated.

    Raises
    ------
    ValueError
        Naming ``source`` and what is wrong.
    """
    first = _readline(stream, source, 1)
    if not first:
        raise bad_file(source, "the file is empty; expected a '%%MatrixMarket' banner")
    fmt, fld, sym = _parse_banner(_decode(first), source, first)
    consumed = len(first)
    comments: list[str] = []
    line_number = 1
    while True:
        line_number += 1
        raw = _readline(stream, source, line_number)
        consumed += len(raw)
        if not raw:
            raise bad_file(
                source, f"the file ends after {line_number - 1} lines, before the size line"
            )
        if consumed > MAX_HEADER_BYTES:
            raise bad_file(source, f"the header is longer than {MAX_HEADER_BYTES} bytes")
        text = _decode(raw)
        if text.startswith("%"):
            comments.append(text[1:].rstrip("\r\n"))
        elif text.strip():
            break
    numbers = _parse_size(text, fmt, source, line_number)
    rows, cols = numbers[0], numbers[1]
    if sym != "general" and rows != cols:
        raise bad_file(
            source, f"a {sym} matrix must be square, but the size line says {rows}x{cols}"
        )
    if fmt == "coordinate":
        entries = numbers[2]
        limit = _max_entries(rows, cols, sym)
        if entries > limit:
            raise bad_file(
                source,
                f"declares {entries} entries, more than a {sym} {rows}x{cols} matrix can hold "
                f"({limit})",
            )
    else:
        entries = _max_entries(rows, cols, sym)
    if body_bytes is not None:
        available = body_bytes - consumed
        minimum = entries * _MIN_ENTRY_BYTES[(fmt, fld)]
        if minimum > available:
            raise bad_file(
                source,
                f"declares {entries} entries (at least {minimum} bytes) but only {available} "
                "bytes follow the size line: the file is truncated or its size line is wrong",
            )
    comments_tuple = tuple(comments)
    return MMInfo(
        source=source,
        format=fmt,
        field=fld,
        symmetry=sym,
        shape=(rows, cols),
        entries=entries,
        comments=comments_tuple,
        suitesparse=SuiteSparseMetadata.from_comments(comments_tuple),
        header_bytes=consumed,
        header_lines=line_number,
    )


def memory_limit_bytes() -> int:
    """Physical memory of this machine (the most a file may ask for)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def check_memory(info: MMInfo) -> None:
    """Refuse a file whose declared sizes need more memory than this machine has."""
    needed = info.bytes_needed()
    limit = memory_limit_bytes()
    if needed > limit:
        rows, cols = info.shape
        raise bad_file(
            info.source,
            f"declares a {rows}x{cols} {info.format} matrix with {info.entries} entries, which "
            f"needs about {needed} bytes to read; this machine has {limit} bytes of memory",
        )
