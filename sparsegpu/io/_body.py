"""The Matrix Market body, checked against its header before scipy's parse of it is used.

scipy's parser (fast_matrix_market) reads a number from the front of each token and
drops the rest: ``0x1p3`` is read as 0, ``2.5`` in an ``integer`` file as 2, a second
value on a ``real`` line is ignored, and a NUL byte after the last value crashes the
process. Every byte of the body is checked here, vectorized (numpy), a chunk of whole
lines at a time:

* only digits, ``+ - . e E``, letters of ``inf``/``nan``, spaces, tabs and line ends;
* every non-blank line holds exactly the numbers one entry of the header's format and
  field has (``row column [value [imaginary]]``, or the values of an ``array`` file);
* there are exactly as many entries as the size line declares;
* indices are unsigned integers, ``integer`` values have no ``.`` or exponent, and every
  value is a whole decimal number (sign, digits, one ``.``, one exponent, in that order).

Each chunk is first checked bit-parallel (:func:`_certain_entries`): every byte's class as
bit-planes, one bit a byte, 64 bytes a ``uint64`` word, and the rules as a few dozen
whole-array operations on the words; an addition's carry runs along a run of ones, which
finds each line's next token or a number's next non-digit for every line at once. A chunk
it cannot pass (a bad line, ``inf``/``nan``, a run of 64 bytes without a token) is checked
again byte by byte (:meth:`_Body.check_lines`), which names the first bad line.

Chunks are checked on several threads at once (numpy releases the GIL), or on one
(:data:`INLINE`: beside another thread's work, two threads of numpy calls this size hand
the GIL back and forth for no gain); a plain file's chunks are views of windows mapped
from the page cache. Index ranges are checked by scipy's parser, the stored triangle of
symmetric files on the parsed arrays.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import io
import mmap
import os
import stat
import threading

import numpy as np

from ._header import MMInfo, bad_file

# Bytes of whole lines checked at once (classified a _BLOCK at a time): the rules' few
# dozen numpy calls on the chunk's words (an eighth of its bytes) cost little per byte;
# larger chunks cost peak memory (the reader's ring and each thread's temporaries are
# sized to them) for no more speed. Two threads that each run numpy calls of under
# ~256 KB lose more to handing the GIL back and forth than the second core gives (one
# 128 KB comparison at a time on each of 2 cores: 0.83x the throughput of one thread;
# 512 KB: 1.6x; 1 MB: 1.9x), so that a plain file is checked on one thread.
CHUNK_BYTES = 1 << 20
# Chunks checked at once.
_WORKERS = min(8, os.cpu_count() or 1)
# An entry line longer than this is damage, not a number.
MAX_LINE_BYTES = 1 << 20

# Byte classes, as bits: _TOKEN (part of a number), _EVENT (a line end, or with _TOKEN a
# sign, point or exponent: the bytes whose neighbours are checked), _RARE (a letter, or a
# byte no entry has).
_TOKEN, _EVENT, _RARE = 1, 2, 4
_WS = 0
_NL = _EVENT
_DIGIT = _TOKEN
_LETTER = _TOKEN | _RARE
_BAD = _RARE
_SPECIAL = _TOKEN | _EVENT  # the low bits of a sign, point or exponent
# ... and one of the high bits: they are the only classes from 8 up (one comparison finds them)
_DOT, _EXP, _SIGN = _SPECIAL | 8, _SPECIAL | 16, _SPECIAL | 24
_CODES = 32  # classes fit in 5 bits
_CLASS = np.full(256, _BAD, dtype=np.uint8)
_CLASS[[ord(" "), ord("\t"), ord("\r")]] = _WS
_CLASS[ord("\n")] = _NL
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[ord(".")] = _DOT
_CLASS[[ord("e"), ord("E")]] = _EXP
_CLASS[[ord("+"), ord("-")]] = _SIGN
_CLASS[[c for c in range(256) if chr(c).isascii() and chr(c).isalpha() and chr(c) not in "eE"]] = (
    _LETTER
)
_CLASS_TABLE = _CLASS.tobytes()

# _ALLOWED[kind, previous class, next class]: where a sign, point or exponent may stand.
_ALLOWED = np.zeros((_CODES, _CODES, _CODES), dtype=bool)
for _prev in (_WS, _NL, _EXP):
    _ALLOWED[_SIGN, _prev, [_DIGIT, _DOT, _LETTER]] = True
for _prev in (_DIGIT, _SIGN, _WS, _NL):
    _ALLOWED[_DOT, _prev, _DIGIT] = True
_ALLOWED[_DOT, _DIGIT, [_EXP, _WS, _NL]] = True
for _prev in (_DIGIT, _DOT):
    _ALLOWED[_EXP, _prev, [_DIGIT, _SIGN]] = True
_REFUSED = ~_ALLOWED.ravel()  # indexed by kind << 10 | previous << 5 | next
# The order within one number (indexed by kind << 5 | previous): a mantissa sign, the
# point, the exponent, the exponent's sign.
_RANK = np.zeros((_CODES, _CODES), dtype=np.int8)
_RANK[_DOT], _RANK[_EXP], _RANK[_SIGN, _EXP] = 1, 2, 3
_RANK = _RANK.ravel()
_WORDS = (b"inf", b"infinity", b"nan")

_LAYOUT = {
    ("coordinate", "pattern"): "row column",
    ("coordinate", "real"): "row column value",
    ("coordinate", "integer"): "row column value",
    ("coordinate", "complex"): "row column real imaginary",
    ("array", "real"): "value",
    ("array", "integer"): "value",
    ("array", "complex"): "real imaginary",
}


if hasattr(np, "bitwise_count"):  # numpy >= 2.0
    _popcount = np.bitwise_count
else:
    _ONES = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
    _popcount = _ONES.take


def _starts_up_to(start: np.ndarray):
    """``f(positions)``: how many of ``start``'s true entries lie at or before each of the
    (sorted or not) ``positions``; a prefix count read from bits and popcounts.

    The same as ``numpy.cumsum(start)[positions]``, about 5x cheaper: numpy's cumsum of
    one byte per byte cost a third of the whole check.
    """
    packed = np.packbits(start)  # bit 7 of byte k is start[8 k]
    ones = _popcount(packed)
    before = np.cumsum(ones, dtype=np.int32)
    before -= ones

    def at(positions: np.ndarray) -> np.ndarray:
        byte = positions >> 3
        shift = (7 - (positions & 7)).astype(np.uint8)
        return before.take(byte) + _popcount(packed.take(byte) >> shift)

    return at


# ------------------------------------------------------------------ bit-parallel check
_ONE, _TOP, _FULL = np.uint64(1), np.uint64(63), np.uint64(2**64 - 1)
# Bytes classified at a time: the block, its flags and its byte temporary stay in the core's
# cache (2 MB of L2 here) between the comparisons and the pack of one class. One thread,
# 138 MB: 169 ms the whole check at 256 KB, 175 ms at 128 KB, 184 ms at 512 KB.
_BLOCK = 256 << 10
# The class planes, in their rows of _Scratch.planes: digit, space and line end (every
# field), sign (all but pattern), point and exponent (real and complex). Signs and
# exponents are packed as their complement: two operations each, not three.
_DIGIT, _SPACE, _LINE, _SIGNS, _POINT, _EXPS = range(6)
_TEMPS = 10  # word temporaries of the rules


class _Unusual(Exception):
    """A chunk the bit-parallel check leaves to the byte-by-byte one."""


class _Scratch:
    """One checking thread's buffers, sized to the longest chunk and kept across chunks:
    fresh temporaries each chunk cost page faults (malloc maps and unmaps them) worth
    more than the operations that fill them."""

    def __init__(self, size: int):
        self.size = size
        words = -(-size // 64)
        self.planes = np.zeros((6, words * 8), dtype=np.uint8)
        self.words = np.empty((_TEMPS, words), dtype=np.uint64)
        self.flags = np.empty((2, words), dtype=bool)
        self.byte = np.empty(_BLOCK, dtype=np.uint8)
        self.mask = np.empty(_BLOCK, dtype=bool)


_LOCAL = threading.local()


def _scratch(size: int) -> _Scratch:
    scratch = getattr(_LOCAL, "scratch", None)
    if scratch is None or scratch.size < size:
        scratch = _LOCAL.scratch = _Scratch(max(size, CHUNK_BYTES + 2))
    return scratch


def _classify(a: np.ndarray, s: _Scratch, classes: int) -> np.ndarray:
    """Bit-planes of the first ``classes`` classes of ``a`` (rows of ``s.planes`` as
    ``uint64`` words: bit ``i`` of a plane is whether byte ``i`` is in its class, zeros past
    the end), a block of bytes at a time.

    numpy operations, which release the GIL (``bytes.translate`` does not), so that chunks
    are classified on every core; each class is one exact byte value or range, so that
    the planes' popcounts add up to the chunk's length when it holds no other byte.
    """
    n = a.size
    words = -(-n // 64)
    planes = s.planes[:classes, : words * 8]
    planes[:, n // 8 :] = 0  # the last word's bits past the end
    for start in range(0, n, _BLOCK):
        block = a[start : start + _BLOCK]
        b, m = s.byte[: block.size], s.mask[: block.size]
        row = planes[:, start // 8 : -(-(start + block.size) // 8)]
        np.less(np.bitwise_xor(block, 0x30, out=b), 10, out=m)
        row[_DIGIT] = np.packbits(m, bitorder="little")
        row[_SPACE] = np.packbits(np.equal(block, 0x20, out=m), bitorder="little")
        row[_LINE] = np.packbits(np.equal(block, 0x0A, out=m), bitorder="little")
        if classes > _SIGNS:  # not a sign: (byte - '+') & ~2 is 0 for '+' and '-' only
            np.bitwise_and(np.subtract(block, 0x2B, out=b), 0xFD, out=b)
            row[_SIGNS] = np.packbits(b, bitorder="little")
        if classes > _POINT:
            row[_POINT] = np.packbits(np.equal(block, 0x2E, out=m), bitorder="little")
        if classes > _EXPS:  # not an exponent: (byte ^ 'e') & ~32 is 0 for 'e' and 'E' only
            np.bitwise_and(np.bitwise_xor(block, 0x65, out=b), 0xDF, out=b)
            row[_EXPS] = np.packbits(b, bitorder="little")
    out = planes.view(np.uint64)
    for complemented in [row for row in (_SIGNS, _EXPS) if row < classes]:
        row = out[complemented]
        np.invert(row, out=row)
        if n % 64:  # the bits past the end
            row[-1] &= (_ONE << np.uint64(n % 64)) - _ONE
    return out


def _counts(planes: np.ndarray) -> list[int]:
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0: one count a word
        return np.bitwise_count(planes).sum(axis=1, dtype=np.uint32).tolist()
    ones = _popcount(planes.view(np.uint8)).reshape(planes.shape[0], -1)
    return ones.sum(axis=1, dtype=np.int64).tolist()


class _Words:
    """The word-level rules' operations, into one thread's kept temporaries."""

    def __init__(self, s: _Scratch, words: int):
        self.temps = list(s.words[:, :words])
        self.flags, self.full = s.flags[0, :words], s.flags[1, :words]

    def temp(self) -> np.ndarray:
        return self.temps.pop()

    def free(self, *arrays) -> None:
        self.temps.extend(arrays)

    def after(self, x: np.ndarray) -> np.ndarray:
        """Each byte's bit moved onto the byte after it."""
        out, spill = self.temp(), self.temp()
        np.left_shift(x, _ONE, out=out)
        np.right_shift(x[:-1], _TOP, out=spill[1:])
        np.bitwise_or(out[1:], spill[1:], out=out[1:])
        self.free(spill)
        return out

    def landing(self, ones: np.ndarray, not_ones: np.ndarray, sources: np.ndarray):
        """The first zero of ``ones`` (no word of it all ones) at or after each of
        ``sources``: where the carry of ``ones + sources`` comes out of each source's run of
        ones.

        A carry crosses into the next word at most once; a chunk where a sum word is all
        ones (where a carry arriving would go on) is left to the byte-by-byte check.
        """
        total = self.temp()
        np.add(ones, sources, out=total)
        np.less(total, ones, out=self.flags)  # the words whose carry goes on into the next
        if np.equal(total, _FULL, out=self.full).any():
            raise _Unusual
        np.add(total[1:], self.flags[:-1], out=total[1:], casting="unsafe")
        np.bitwise_and(total, not_ones, out=total)
        return total


def _certain_entries(data, per_line: int, indices: int, field: str) -> int:
    """The lines of a chunk (a newline, then whole lines), when every line passes with
    scipy's (fast_matrix_market's) parse of the same file beside it; raises
    :class:`_Unusual` where the byte-by-byte check must decide.

    What scipy's parser refuses is not proven again here: a line with fewer numbers than
    the field has, a number that does not start as one (``+-1``, ``.e5``, a letter), an
    index with anything after its digits but a point or a sign, extra lines. What it
    silently accepts is: the bytes after the number it read from the front of each token
    (``1.5x``, ``1.2.3``, ``1e5e3``, ``5-3``, ``1e+``), extra numbers on a line, a column
    index followed by a point or sign (``1 1.5`` is read as column 1, value 0.5: a line
    one number short that passes as whole). Every byte of the chunk
    is a digit, space, line end, sign, point or exponent (popcounts of the planes), and:

    * the spaces are exactly ``lines x (numbers a line - 1)``: with no line short (scipy
      refuses those), every line holds exactly its numbers, one space apart (a chunk
      holding blank lines overcounts its entries and is checked again line by line);
    * a sign follows no digit or point; an exponent is followed by a digit, or a sign
      and a digit;
    * the first non-digit after a point is no point, and after an exponent's digits
      neither a point nor an exponent (``_Words.landing``: every token at once);
    * a column index is digits up to the space after it (scipy reads a row index with
      anything else after its digits as a bad column).
    """
    a = np.frombuffer(data, dtype=np.uint8)
    n = a.size
    s = _scratch(n)
    decimal = field in ("real", "complex")
    classes = 6 if decimal else 4 if per_line > indices else 3
    planes = _classify(a, s, classes)
    counts = _counts(planes)
    lines = counts[_LINE] - 1
    if sum(counts) != n or counts[_SPACE] != lines * (per_line - 1):
        raise _Unusual
    if per_line == indices:
        return lines
    w = _Words(s, planes.shape[1])
    digit, sign = planes[_DIGIT], planes[_SIGNS]
    if not decimal:
        after_digit = w.after(digit)
        if np.bitwise_and(sign, after_digit, out=after_digit).any():
            raise _Unusual
        return lines
    if np.equal(digit[:-1], _FULL, out=w.full[:-1]).any():
        raise _Unusual  # 64 bytes of digits: a carry could cross a whole word
    point, exponent = planes[_POINT], planes[_EXPS]
    bad, t, not_digit = w.temp(), w.temp(), w.temp()
    np.invert(digit, out=not_digit)
    # a sign after a digit or point
    np.bitwise_or(digit, point, out=t)
    after = w.after(t)
    np.bitwise_and(sign, after, out=bad)
    w.free(after)
    # an exponent followed by neither a digit nor a sign; its sign followed by no digit
    after_exp = w.after(exponent)
    np.bitwise_or(digit, sign, out=t)
    np.invert(t, out=t)
    np.bitwise_and(after_exp, t, out=t)
    np.bitwise_or(bad, t, out=bad)
    np.bitwise_and(sign, after_exp, out=t)
    after_exp_sign = w.after(t)
    np.bitwise_and(after_exp_sign, not_digit, out=t)
    np.bitwise_or(bad, t, out=bad)
    # the first non-digit after a point: no point
    after_point = w.after(point)
    landed = w.landing(digit, not_digit, after_point)
    np.bitwise_and(landed, point, out=t)
    np.bitwise_or(bad, t, out=bad)
    w.free(after_point, landed)
    # ... after an exponent's digits: neither a point nor an exponent
    np.bitwise_or(after_exp, after_exp_sign, out=after_exp)
    landed = w.landing(digit, not_digit, after_exp)
    np.bitwise_or(point, exponent, out=t)
    np.bitwise_and(landed, t, out=t)
    np.bitwise_or(bad, t, out=bad)
    w.free(after_exp, after_exp_sign, landed)
    if indices:  # a column index is digits, then a space (scipy reads "1 1.5" as 1, 0.5)
        line_starts = w.after(planes[_LINE])
        if n % 64:  # the chunk's end is no line's start
            line_starts[-1] &= ~(_ONE << np.uint64(n % 64))
        row_ends = w.landing(digit, not_digit, line_starts)
        column_starts = w.after(row_ends)
        landed = w.landing(digit, not_digit, column_starts)
        np.invert(planes[_SPACE], out=t)
        np.bitwise_and(landed, t, out=t)
        np.bitwise_or(bad, t, out=bad)
    if bad.any():
        raise _Unusual
    return lines


class _BadLine(Exception):
    """A bad line, numbered within its chunk (the chunk's first line is line 1)."""

    def __init__(self, line: int, problem: str):
        super().__init__(line, problem)
        self.line = line
        self.problem = problem


class _Body:
    """What one file's entries must look like, and the check of one chunk of lines.

    Lines are numbered within the chunk (from 1): the chunks are checked in parallel, and
    :func:`_collect` adds the lines of the chunks before.
    """

    def __init__(self, info: MMInfo, beside_parser: bool):
        self.info = info
        self.beside_parser = beside_parser
        self.layout = _LAYOUT[(info.format, info.field)]
        self.per_line = len(self.layout.split())
        self.indices = 2 if info.format == "coordinate" else 0

    @staticmethod
    def fail(line: int, problem: str):
        raise _BadLine(line, problem)

    def check(self, data) -> tuple[int, int]:
        """Check ``data`` (bytes-like): a newline, then whole lines.

        Returns the chunk's entries and its number of lines; the caller checks the
        entries' total against the size line. Only a check whose file scipy's parser
        reads as well (``beside_parser``) leaves to it what it refuses.
        """
        if self.beside_parser:
            try:
                lines = _certain_entries(data, self.per_line, self.indices, self.info.field)
                return lines, lines
            except _Unusual:
                pass
        entry_lines, lines = self.check_lines(data)
        return entry_lines.size, lines

    def check_lines(self, data) -> tuple[np.ndarray, int]:
        """Check ``data`` byte by byte; the first bad line raises :class:`_BadLine`.

        Returns the chunk's entry lines (0-based) and its number of lines.
        """
        a = np.frombuffer(data, dtype=np.uint8)
        # bytes.translate: a third of the cost of _CLASS.take(a), which widens the indices
        c = np.frombuffer(bytes(data).translate(_CLASS_TABLE), dtype=np.uint8)
        rare = np.bitwise_or.reduce(c) & _RARE  # a letter or a bad byte somewhere
        if rare and (c == _BAD).any():
            self._bad_byte(a, c)
        token = (c & _TOKEN).view(bool)
        start = np.empty_like(token)
        start[0] = False
        np.greater(token[1:], token[:-1], out=start[1:])
        tokens_up_to = _starts_up_to(start)
        newlines = np.flatnonzero(c == _NL)
        counts = np.diff(tokens_up_to(newlines))
        self._count(a, counts)
        words = self._words(a, c, token, start) if rare and (c == _LETTER).any() else None
        # the chunk starts and ends with a newline: a special has neighbours on both sides
        middle = c[1:-1]
        special = middle >= _DOT
        # An exponent's sign before a digit ("1e-5") stands where it may, and the exponent
        # before it already carries the token's place and order: no per-sign work for it.
        special &= ~((middle == _SIGN) & (c[:-2] == _EXP) & (c[2:] == _DIGIT))
        inner = np.flatnonzero(special)
        if inner.size:
            tokens = tokens_up_to(inner + 1) - 1
            self._numbers(a, c, inner, tokens, start, words)
        return np.flatnonzero(counts), newlines.size - 1

    @staticmethod
    def _line_of(a: np.ndarray, position: int) -> tuple[int, int]:
        """(line number, 1-based column) of byte ``position``."""
        previous = int(np.flatnonzero(a[:position] == 10)[-1])
        return 1 + int(np.count_nonzero(a[1:position] == 10)), position - previous

    @staticmethod
    def _text(a: np.ndarray, k: int) -> str:
        newlines = np.flatnonzero(a == 10)
        line = a[newlines[k] + 1 : newlines[k + 1]].tobytes().rstrip(b"\r")
        shown = line[:80].decode("latin-1")
        return repr(shown + ("..." if len(line) > 80 else ""))

    def _token(self, a, c, start, t: int) -> tuple[int, str]:
        """(line number, text) of the chunk's token ``t``."""
        position = int(np.flatnonzero(start)[t])
        end = position + int(np.argmin(c[position:] & _TOKEN))
        return self._line_of(a, position)[0], a[position:end].tobytes().decode("latin-1")

    def _bad_byte(self, a, c) -> None:
        position = int(np.argmax(c == _BAD))
        line, column = self._line_of(a, position)
        byte = int(a[position])
        what = "a NUL byte" if byte == 0 else f"byte 0x{byte:02x}"
        if 32 < byte < 127:  # printable: shown as well
            what += f" ({chr(byte)!r})"
        if byte == ord("%"):
            what += " (a comment: comments belong before the size line)"
        self.fail(
            line,
            f"column {column} holds {what}, which no Matrix Market entry has (digits, "
            "'+-.eE', spaces, line ends): the file is damaged or not a Matrix Market text "
            "file; download or write it again",
        )

    def _count(self, a, counts) -> None:
        wrong = (counts != self.per_line) & (counts != 0)
        if wrong.any():
            k = int(np.argmax(wrong))
            self.fail(
                k + 1,
                f"{self._text(a, k)} holds {int(counts[k])} numbers, but an entry "
                f"of a {self.info.format} {self.info.field} file is "
                f"'{self.layout}' ({self.per_line}); the file does not match its header",
            )

    def too_many(self, data, seen: int):
        """Refuse the chunk's line holding entry ``declared + 1`` (``seen`` came before)."""
        declared = self.info.entries
        entry_lines, _ = self.check_lines(data)
        k = int(entry_lines[declared - seen])
        self.fail(
            k + 1,
            f"{self._text(np.frombuffer(data, dtype=np.uint8), k)} is entry {declared + 1}, "
            f"but the size line declares {declared} entries: the size line is wrong or "
            "lines were appended to the file",
        )

    def _value_kind(self, column: int) -> str:
        if column < self.indices:
            return "an index (a positive integer)"
        if self.info.field == "integer":
            return "an integer value (the header's field is 'integer')"
        return "a decimal number"

    def _words(self, a, c, token, start) -> np.ndarray:
        """Token numbers of ``inf``/``nan`` values; any other word is refused."""
        starts = np.flatnonzero(start)
        lettered = np.unique(np.searchsorted(starts, np.flatnonzero(c == _LETTER), "right") - 1)
        for t in lettered:
            begin = int(starts[t])
            word = a[begin : begin + int(np.argmin(token[begin:]))].tobytes()
            column = int(t) % self.per_line
            value = column >= self.indices and self.info.field in ("real", "complex")
            if not (value and word.lower().lstrip(b"+-") in _WORDS and word[1:2] not in b"+-"):
                line, _ = self._line_of(a, begin)
                self.fail(
                    line,
                    f"{word.decode('latin-1')!r} is not {self._value_kind(column)}; the file "
                    "does not match its header",
                )
        return lettered

    def _numbers(self, a, c, inner, tokens, start, words) -> None:
        """Signs, points and exponents (at ``inner``, positions in ``c[1:-1]``, so that
        ``c[:-2]`` and ``c[2:]`` hold their neighbours): where they stand, their order,
        and which tokens."""
        kind = c[1:-1].take(inner)
        pair = (kind.astype(np.uint16) << 5) | c[:-2].take(inner)
        rank = _RANK.take(pair)
        pair <<= 5
        pair |= c[2:].take(inner)
        bad = _REFUSED.take(pair)
        bad[1:] |= (tokens[1:] == tokens[:-1]) & (rank[1:] <= rank[:-1])
        bad |= tokens % self.per_line < self.indices
        if self.info.field == "integer":
            bad |= kind != _SIGN
        if words is not None:
            bad &= ~np.isin(tokens, words)
        if bad.any():
            t = int(tokens[np.argmax(bad)])
            line, text = self._token(a, c, start, t)
            self.fail(
                line,
                f"{text!r} is not {self._value_kind(t % self.per_line)}; the file does not "
                "match its header",
            )


class _Inline:
    """An executor that runs each job at once, in the caller's thread (its future is
    done when ``submit`` returns)."""

    @staticmethod
    def submit(fn, *args) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except Exception as exc:  # handed over as the future's, as a pool would
            future.set_exception(exc)
        return future


INLINE = _Inline()


def check_body(text, info: MMInfo, beside_parser: bool = False, pool=None) -> None:
    """Check every entry of a Matrix Market body against ``info`` (see the module doc).

    Parameters
    ----------
    text : binary file object, or bytes-like
        The (decompressed) file: a stream positioned just after the header, or the whole
        file's bytes (``bytes``, ``mmap``), read from ``info.header_bytes`` on.
    info : MMInfo
        Its checked header.
    beside_parser : bool, optional
        The file is parsed by scipy's fast_matrix_market too, and used only if that parse
        passes: what that parser refuses is left to it (:func:`_certain_entries`).
    pool : concurrent.futures.Executor, optional
        Where chunks are checked (one of ``_WORKERS`` threads by default); :data:`INLINE`
        checks them in the calling thread.

    Raises
    ------
    ValueError
        ``'<file>: line <n>: <problem>'`` for the first bad line, or the entry count when
        the file ends early.
    """
    body = _Body(info, beside_parser)
    seen, line = 0, info.header_lines + 1
    with contextlib.ExitStack() as stack:
        if pool is None:
            pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(_WORKERS))
        pending = collections.deque()
        try:
            if _is_plain_file(text):
                chunks = _mapped_chunks(text.fileno(), info)
            elif isinstance(text, io.IOBase):
                chunks = _chunks(text)
            else:
                chunks = _buffer_chunks(text, info)
            for data in chunks:
                pending.append((pool.submit(body.check, data), data))
                if len(pending) > 2 * _WORKERS:
                    seen, line = _collect(body, pending.popleft(), seen, line)
        except _BadLine as long_line:  # from _chunks: its line follows the pending ones
            while pending:
                seen, line = _collect(body, pending.popleft(), seen, line)
            raise bad_file(info.source, f"line {line}: {long_line.problem}") from None
        while pending:
            seen, line = _collect(body, pending.popleft(), seen, line)
    if seen < info.entries:
        raise bad_file(
            info.source,
            f"the file ends after {seen} of the {info.entries} entries its size line "
            "declares: it is truncated or its size line is wrong",
        )


def _is_plain_file(text) -> bool:
    """Whether ``text`` is a stream of a regular file on disk (which can be mapped)."""
    if not isinstance(text, io.BufferedReader) or not isinstance(text.raw, io.FileIO):
        return False
    try:
        return stat.S_ISREG(os.fstat(text.fileno()).st_mode)
    except OSError:
        return False


def _collect(body: _Body, job, seen: int, line: int) -> tuple[int, int]:
    """Wait for one chunk's check (in file order): entries and lines seen after it.

    ``line`` is the number of the chunk's first line in the file.
    """
    future, data = job
    try:
        entries, lines = future.result()
        if seen + entries > body.info.entries:
            entry_lines, lines = body.check_lines(data)  # blank lines are no entries
            entries = entry_lines.size
        if seen + entries > body.info.entries:
            body.too_many(data, seen)
    except _BadLine as bad:
        raise bad_file(body.info.source, f"line {line + bad.line - 1}: {bad.problem}") from None
    return seen + entries, line + lines


def _buffer_chunks(buffer, info: MMInfo):
    """Whole lines of a file's bytes after its header, a chunk at a time (views, not
    copies), each starting with the newline before its first line (the last line gets one
    after it too)."""
    yield from _cut(buffer, info.header_bytes - 1, final=True)


def _cut(buffer, start: int, final: bool):
    """:func:`_buffer_chunks` of ``buffer`` from ``start`` (a newline's position). Unless
    ``buffer`` holds the file's end (``final``), stops before a chunk that may reach past
    its end; returns where the next chunk starts."""
    end = len(buffer)
    view = memoryview(buffer)
    while start + 1 < end:
        if end - start <= CHUNK_BYTES:
            if not final:
                return start
            ends_line = buffer[end - 1 : end] == b"\n"
            yield view[start:end] if ends_line else bytes(view[start:end]) + b"\n"
            return end
        cut = buffer.rfind(b"\n", start + 1, start + CHUNK_BYTES)
        if cut < 0:  # one line fills the chunk: take it whole, if it is not too long
            if not final and end < start + 2 + MAX_LINE_BYTES:
                return start
            cut = buffer.find(b"\n", start + 1, start + 2 + MAX_LINE_BYTES)
            if cut < 0:
                _Body.fail(1, f"is longer than {MAX_LINE_BYTES} bytes: not an entry")
        yield view[start : cut + 1]
        start = cut
    return start


# A plain file is mapped this many bytes at a time: the page cache's own pages, no copy.
_WINDOW_BYTES = 4 << 20


def _map(fileno: int, offset: int, length: int) -> mmap.mmap:
    if hasattr(mmap, "MAP_POPULATE"):  # Linux: the pages mapped at once, not a fault each
        flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
        return mmap.mmap(fileno, length, flags=flags, prot=mmap.PROT_READ, offset=offset)
    return mmap.mmap(fileno, length, access=mmap.ACCESS_READ, offset=offset)


def _mapped_chunks(fileno: int, info: MMInfo):
    """:func:`_buffer_chunks` of the plain file ``fileno``, mapped a window at a time:
    no read into buffers (a tenth of the check's time), and a window's pages leave the
    resident set once its chunks are checked."""
    size = os.fstat(fileno).st_size
    start = info.header_bytes - 1
    while start + 1 < size:
        offset = start - start % mmap.ALLOCATIONGRANULARITY
        reach = start - offset + CHUNK_BYTES + MAX_LINE_BYTES + 2
        length = min(size - offset, max(_WINDOW_BYTES, reach))
        window = _map(fileno, offset, length)
        start = offset + (yield from _cut(window, start - offset, offset + length == size))
        del window  # unmapped once the last chunk viewing it is checked


def _chunks(stream):
    """Whole lines from ``stream``, a chunk at a time, each after a newline (the last line
    gets one too).

    Read (``readinto``) into a ring of kept buffers, one more than ``check_body`` holds
    at once: a fresh ``bytes`` each read, and its join with the line carried over, cost
    two copies and malloc's page faults. A chunk stays valid until ``2 * _WORKERS + 1``
    more have been taken.
    """
    ring = [bytearray(CHUNK_BYTES + MAX_LINE_BYTES + 2) for _ in range(2 * _WORKERS + 2)]
    k, buffer, filled = 0, ring[0], 1  # buffer[:filled]: a newline, then the carried line
    buffer[0] = 10
    while True:
        with memoryview(buffer) as view:
            got = stream.readinto(view[filled : filled + CHUNK_BYTES])
        if not got:
            if filled > 1:
                buffer[filled] = 10
                yield memoryview(buffer)[: filled + 1]
            return
        end = filled + got
        cut = buffer.rfind(b"\n", filled, end)
        if cut < 0:
            filled = end
            if filled - 1 > MAX_LINE_BYTES:
                _Body.fail(1, f"is longer than {MAX_LINE_BYTES} bytes: not an entry")
            continue
        k = (k + 1) % len(ring)
        following = ring[k]
        filled = end - cut
        following[0] = 10
        following[1:filled] = memoryview(buffer)[cut + 1 : end]
        yield memoryview(buffer)[: cut + 1]
        buffer = following
