"""sparsegpu.io: Matrix Market reading (fields, symmetries, compressions, archives),
writing, and a ValueError naming the file for every kind of bad file."""

from __future__ import annotations

import bz2
import gzip
import inspect
import io
import tarfile

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import sparsegpu as sg
from sparsegpu.io import _header


def write_text(path, text: str):
    path.write_text(text)
    return path


def dense(A):
    return A.toarray() if sp.issparse(A) else np.asarray(A)


# ------------------------------------------------------------------ fields, symmetry
SYMMETRY_CASES = {
    # name: (file text, expected dense matrix)
    "real-general": (
        "%%MatrixMarket matrix coordinate real general\n2 3 3\n1 1 1.5\n2 3 -2\n1 3 4e1\n",
        [[1.5, 0, 40], [0, 0, -2]],
    ),
    "integer-general": (
        "%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 2 7\n2 1 -3\n",
        [[0, 7], [-3, 0]],
    ),
    "pattern-general": (
        "%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n2 2\n",
        [[0, 1], [0, 1]],
    ),
    "complex-general": (
        "%%MatrixMarket matrix coordinate complex general\n2 2 2\n1 1 1 2\n2 1 0 -1\n",
        [[1 + 2j, 0], [-1j, 0]],
    ),
    "real-symmetric": (
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 2\n2 1 3\n3 2 4\n3 3 5\n",
        [[2, 3, 0], [3, 0, 4], [0, 4, 5]],
    ),
    "pattern-symmetric": (
        "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n3 1\n2 2\n",
        [[1, 0, 1], [0, 1, 0], [1, 0, 0]],
    ),
    "real-skew-symmetric": (
        "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 3\n3 2 -4\n",
        [[0, -3, 0], [3, 0, 4], [0, -4, 0]],
    ),
    "complex-hermitian": (
        "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 2 0\n2 1 1 1\n",
        [[2, 1 - 1j], [1 + 1j, 0]],
    ),
    "array-real-general": (
        "%%MatrixMarket matrix array real general\n2 2\n1\n0\n3\n4\n",
        [[1, 3], [0, 4]],
    ),
    "array-real-symmetric": (
        "%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n",
        [[1, 2], [2, 3]],
    ),
}


@pytest.mark.parametrize("case", SYMMETRY_CASES, ids=list(SYMMETRY_CASES))
def test_fields_and_symmetries_expand_like_dense(tmp_path, case):
    text, expected = SYMMETRY_CASES[case]
    A = sg.io.mmread(write_text(tmp_path / "m.mtx", text))
    assert isinstance(A, sg.csr_matrix)
    np.testing.assert_array_equal(A.toarray(), np.array(expected))


def test_symmetric_diagonal_is_stored_once(tmp_path):
    text = "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 5\n2 1 1\n2 2 7\n"
    A = sg.io.mmread(write_text(tmp_path / "m.mtx", text))
    assert A.nnz == 4
    assert A[0, 0] == 5 and A[1, 1] == 7


def test_pattern_values_are_float64_ones(tmp_path):
    A = sg.io.mmread(write_text(tmp_path / "m.mtx", SYMMETRY_CASES["pattern-general"][0]))
    assert A.dtype == np.float64


def test_array_option_returns_csr_array(tmp_path):
    A = sg.io.mmread(write_text(tmp_path / "m.mtx", SYMMETRY_CASES["real-general"][0]), array=True)
    assert isinstance(A, sg.csr_array)


def test_matches_scipy_on_a_bundled_matrix():
    import scipy.io

    path = sg.datasets.path("bcsstk13")
    ours = sg.io.mmread(path)
    reference = sp.csr_matrix(scipy.io.mmread(str(path)))
    assert ours.shape == reference.shape and ours.nnz == reference.nnz == 83_883
    assert abs(ours - reference).max() == 0


# ---------------------------------------------------------------------- compression
def _compressors():
    return {
        ".mtx": lambda data: data,
        ".mtx.gz": gzip.compress,
        ".mtx.bz2": bz2.compress,
    }


@pytest.mark.parametrize("suffix", list(_compressors()))
def test_reads_each_compression(tmp_path, suffix):
    text, expected = SYMMETRY_CASES["real-symmetric"]
    path = tmp_path / f"m{suffix}"
    path.write_bytes(_compressors()[suffix](text.encode()))
    np.testing.assert_array_equal(sg.io.mmread(path).toarray(), expected)


# ------------------------------------------------------------------------- archives
def make_archive(path, members: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _afiro_archive(tmp_path):
    main = gzip.decompress(sg.datasets.path("lp_afiro").read_bytes())
    rhs = b"%%MatrixMarket matrix array real general\n27 1\n" + b"1.0\n" * 27
    aux = b"%%MatrixMarket matrix coordinate real general\n51 1 1\n3 1 2.5\n"
    return make_archive(
        tmp_path / "lp_afiro.tar.gz",
        {
            "lp_afiro/lp_afiro.mtx": main,
            "lp_afiro/lp_afiro_b.mtx": rhs,
            "lp_afiro/lp_afiro_c.mtx": aux,
        },
    )


def test_archive_reads_the_main_member(tmp_path):
    A = sg.io.mmread(_afiro_archive(tmp_path))
    assert A.shape == (27, 51) and A.nnz == 102


def test_archive_aux_only_when_asked(tmp_path):
    A, aux = sg.io.mmread(_afiro_archive(tmp_path), aux=True)
    assert sorted(aux) == ["b", "c"]
    np.testing.assert_array_equal(aux["b"], np.ones((27, 1)))
    assert isinstance(aux["c"], sg.csr_matrix) and aux["c"][2, 0] == 2.5


def test_archive_metadata(tmp_path):
    info = sg.io.mminfo(_afiro_archive(tmp_path))
    assert info.suitesparse.full_name == "LPnetlib/lp_afiro"
    assert info.suitesparse.id == 597
    assert info.suitesparse.kind == "linear programming problem"
    assert info.suitesparse.aux == ("c", "lo", "hi", "z0")
    assert info.source.endswith("lp_afiro.tar.gz:lp_afiro/lp_afiro.mtx")


def test_archive_without_main_member_names_the_problem(tmp_path):
    path = make_archive(tmp_path / "x.tar.gz", {"other/readme.txt": b"hi"})
    with pytest.raises(ValueError, match=r"x\.tar\.gz.*<Name>/<Name>\.mtx"):
        sg.io.mmread(path)


def test_archive_that_is_not_a_tar(tmp_path):
    path = tmp_path / "x.tar.gz"
    path.write_bytes(gzip.compress(b"not a tar at all" * 100))
    with pytest.raises(ValueError, match=r"x\.tar\.gz"):
        sg.io.mmread(path)


# ------------------------------------------------------------------------- metadata
def test_suitesparse_metadata_of_a_bundled_file():
    info = sg.io.mminfo(sg.datasets.path("bcsstk13"))
    meta = info.suitesparse
    assert (meta.group, meta.name, meta.id) == ("HB", "bcsstk13", 35)
    assert meta.kind == "computational fluid dynamics problem"
    assert meta.title.startswith("SYMMETRIC STIFFNESS MATRIX")
    assert meta.author == "J. Lewis" and meta.date == "1982"
    assert (info.shape, info.entries, info.symmetry) == ((2003, 2003), 42_943, "symmetric")


def test_no_metadata_in_a_plain_header(tmp_path):
    info = sg.io.mminfo(write_text(tmp_path / "m.mtx", SYMMETRY_CASES["real-general"][0]))
    assert info.suitesparse is None


# -------------------------------------------------------------------------- writing
@pytest.mark.parametrize("suffix", list(_compressors()))
def test_write_read_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(0)
    A = sp.random(30, 20, density=0.2, random_state=rng, format="csr")
    path = tmp_path / f"out{suffix}"
    sg.io.mmwrite(path, sg.csr_matrix(A))
    B = sg.io.mmread(path)
    np.testing.assert_allclose(B.toarray(), A.toarray(), rtol=1e-15)


def test_write_symmetric_round_trip(tmp_path):
    A = sg.datasets.load("LFAT5")
    path = tmp_path / "lfat5.mtx"
    sg.io.mmwrite(path, A, symmetry="symmetric", precision=17)  # 17 digits round-trip float64
    assert sg.io.mminfo(path).symmetry == "symmetric"
    np.testing.assert_array_equal(sg.io.mmread(path).toarray(), A.toarray())


def test_write_refuses_archives(tmp_path):
    with pytest.raises(ValueError, match="tar"):
        sg.io.mmwrite(tmp_path / "x.tar.gz", sp.eye(2))


def test_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "keep.mtx"
    path.write_text("old")
    with pytest.raises(ValueError):
        sg.io.mmwrite(path, sp.eye(3), symmetry="sideways")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.mtx"]


# ------------------------------------------------------------------------ bad files
BANNER = "%%MatrixMarket matrix coordinate real general\n"
BAD_FILES = {
    "empty": ("", "empty"),
    "no-banner": ("3 3 1\n1 1 1\n", "not a Matrix Market banner"),
    "short-banner": ("%%MatrixMarket matrix coordinate real\n1 1 1\n1 1 1\n", "5"),
    "vector-object": ("%%MatrixMarket vector coordinate real general\n", "object 'vector'"),
    "unknown-format": ("%%MatrixMarket matrix sparse real general\n", "unknown format 'sparse'"),
    "unknown-field": ("%%MatrixMarket matrix coordinate quaternion general\n", "unknown field"),
    "unknown-symmetry": (
        "%%MatrixMarket matrix coordinate real sideways\n",
        "unknown symmetry 'sideways'",
    ),
    "array-pattern": ("%%MatrixMarket matrix array pattern general\n2 2\n", "array.*pattern"),
    "real-hermitian": ("%%MatrixMarket matrix coordinate real hermitian\n2 2 1\n", "hermitian"),
    "pattern-skew": (
        "%%MatrixMarket matrix coordinate pattern skew-symmetric\n2 2 1\n",
        "skew-symmetric",
    ),
    "no-size-line": (BANNER + "% only a comment\n", "before the size line"),
    "size-line-words": (BANNER + "3 3\n", "needs 'rows columns entries'"),
    "size-line-text": (BANNER + "3 three 1\n", "must be integers"),
    "negative-size": (BANNER + "-3 3 1\n", "negative"),
    "symmetric-not-square": (
        "%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n1 1 1\n",
        "must be square",
    ),
    "too-many-declared": (BANNER + "2 2 5\n" + "1 1 1\n" * 5, "more than a general 2x2"),
    "fewer-entries": (BANNER + "3 3 3\n1 1 1\n2 2 2\n", "truncated|larger|Expected"),
    "more-entries": (BANNER + "3 3 1\n1 1 1\n2 2 2\n", "line 4: '2 2 2' is entry 2"),
    "row-out-of-range": (BANNER + "3 3 2\n1 1 1\n4 1 2\n", "out of bounds|exceeds|index"),
    "column-out-of-range": (BANNER + "3 3 2\n1 1 1\n1 9 2\n", "out of bounds|exceeds|index"),
    "zero-index": (BANNER + "3 3 2\n1 1 1\n0 1 2\n", "out of bounds|negative|index"),
    "non-numeric-value": (BANNER + "3 3 2\n1 1 1\n2 2 abc\n", "line 4: 'abc' is not a decimal"),
    "non-numeric-index": (BANNER + "3 3 2\n1 1 1\nx 2 2\n", "line 4: 'x' is not an index"),
    "truncated-last-line": (BANNER + "3 3 2\n1 1 1.0\n2 2", "bad entries|truncated"),
    "above-diagonal": (
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n1 1 1\n1 3 2\n",
        r"entry 2 \(row 1, column 3\) is above the diagonal",
    ),
    "skew-diagonal": (
        "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 1\n2 2 1\n",
        "on the diagonal",
    ),
    "hermitian-complex-diagonal": (
        "%%MatrixMarket matrix coordinate complex hermitian\n2 2 1\n1 1 1 1\n",
        "real diagonal",
    ),
}


@pytest.mark.parametrize("case", BAD_FILES, ids=list(BAD_FILES))
def test_bad_file_is_a_value_error_naming_the_file(tmp_path, case):
    text, problem = BAD_FILES[case]
    path = write_text(tmp_path / f"{case}.mtx", text)
    with pytest.raises(ValueError, match=problem) as excinfo:
        sg.io.mmread(path)
    assert str(excinfo.value).startswith(str(path))


FAST_MATRIX_MARKET = "spmatrix" in inspect.signature(scipy.io.mmread).parameters


@pytest.mark.skipif(
    not FAST_MATRIX_MARKET, reason="scipy < 1.12 parses with its own reader, whose message differs"
)
@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("4 1 2", r"line 5: row index 4 is out of range: the size line declares 3 rows"),
        ("1 9 2", r"line 5: column index 9 is out of range: .* 3 columns \(indices 1 to 3\)"),
        ("0 1 2", r"line 5: row index 0 is out of range"),
    ],
    ids=["row", "column", "zero"],
)
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_an_index_out_of_range_is_reported_with_its_value_and_bound(
    tmp_path, entry, expected, suffix
):
    text = BANNER + "3 3 3\n1 1 1\n\n" + entry + "\n2 2 2\n"
    path = tmp_path / f"m{suffix}"
    path.write_bytes(_compressors()[suffix](text.encode()))
    with pytest.raises(ValueError, match=expected) as excinfo:
        sg.io.mmread(path)
    assert str(excinfo.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("content", "shown"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "column 1 holds byte 0x89"),
        (b"MM\x00\x01" + b"\xff" * 500 + b"\n", "column 3 holds byte 0x00"),
    ],
    ids=["png", "nul"],
)
def test_a_binary_file_is_named_as_such_without_its_bytes(tmp_path, content, shown):
    path = tmp_path / "m.mtx"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"is not a text file \\(line 1, {shown}\\)") as info:
        sg.io.mmread(path)
    message = str(info.value)
    assert message.isascii() and message.isprintable()
    assert len(message) - len(str(path)) < 160


def test_header_line_without_newline_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(_header, "MAX_HEADER_LINE_BYTES", 64)
    path = tmp_path / "blob.mtx"
    path.write_bytes(b"%%MatrixMarket matrix coordinate real general\n%" + b"\x00" * 500)
    with pytest.raises(ValueError, match="longer than 64 bytes"):
        sg.io.mmread(path)


def test_truncated_gzip_is_a_value_error(tmp_path):
    data = sg.datasets.path("bcsstk13").read_bytes()
    path = tmp_path / "cut.mtx.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.mtx\.gz"):
        sg.io.mmread(path)


def test_declared_entries_beyond_the_file_size_are_refused_before_parsing(tmp_path, monkeypatch):
    import scipy.io

    def must_not_parse(*args, **kwargs):
        raise AssertionError("the parser was called on a file that cannot hold its entries")

    monkeypatch.setattr(scipy.io, "mmread", must_not_parse)
    path = write_text(tmp_path / "liar.mtx", BANNER + "100000 100000 50000000\n1 1 1\n")
    with pytest.raises(ValueError, match="only .* bytes follow the size line"):
        sg.io.mmread(path)


def test_absurd_sizes_in_a_compressed_file_are_refused_with_the_bytes(tmp_path, monkeypatch):
    import scipy.io

    monkeypatch.setattr(scipy.io, "mmread", lambda *a, **k: pytest.fail("parser called"))
    path = tmp_path / "huge.mtx.gz"
    path.write_bytes(gzip.compress((BANNER + "4000000000 4000000000 900000000000\n").encode()))
    with pytest.raises(ValueError, match=r"needs about \d+ bytes") as excinfo:
        sg.io.mmread(path)
    assert str(excinfo.value).startswith(str(path))


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.mtx"):
        sg.io.mmread(tmp_path / "nope.mtx")


# ------------------------------------------------- entries that do not match the header
COORDINATE = "%%MatrixMarket matrix coordinate {field} {symmetry}\n3 3 {n}\n"
ARRAY = "%%MatrixMarket matrix array {field} general\n2 1\n"
MISMATCHED = {
    # name: (header, entry lines, line and problem in the message)
    "nul-after-last-value": (COORDINATE, ["1 1 1.5", "2 2 2.5\0"], r"line 4: column 8 .*NUL"),
    "nul-line": (COORDINATE, ["1 1 1.5", "2 2 2.5", "\0\0\0"], r"line 5: column 1 .*NUL"),
    "control-byte": (COORDINATE, ["1 1 1.5", "2 2\x0c 2.5"], r"line 4: column 4 .*0x0c"),
    "comment-among-entries": (
        COORDINATE,
        ["1 1 1", "% a note", "2 2 2"],
        r"line 4: column 1 holds .*'%'\) \(a comment: comments belong before the size line",
    ),
    "two-values-in-real": (COORDINATE, ["1 1 1.5 7", "2 2 2"], r"line 3: .* holds 4 numbers"),
    "one-value-in-complex": (
        COORDINATE.replace("{field}", "complex"),
        ["1 1 1.5 0", "2 2 2"],
        r"line 4: .*'row column real imaginary'",
    ),
    "value-in-pattern": (
        COORDINATE.replace("{field}", "pattern"),
        ["1 1", "2 2 1"],
        r"line 4: .* holds 3 numbers",
    ),
    "two-values-in-array": (ARRAY, ["1", "2 3"], r"line 4: '2 3' holds 2 numbers"),
    "hex-float": (COORDINATE, ["1 1 0x1p3", "2 2 2"], r"line 3: '0x1p3' is not a decimal"),
    "fraction-in-integer": (
        COORDINATE.replace("{field}", "integer"),
        ["1 1 2.5", "2 2 2"],
        r"line 3: '2.5' is not an integer value",
    ),
    "exponent-in-integer": (
        ARRAY.replace("{field}", "integer"),
        ["1", "1e3"],
        r"line 4: '1e3' is not an integer value",
    ),
    "fractional-index": (COORDINATE, ["1 1.5 1", "2 2 2"], r"line 3: '1.5' is not an index"),
    "negative-index": (COORDINATE, ["1 1 1", "-2 2 2"], r"line 4: '-2' is not an index"),
    "two-points": (COORDINATE, ["1 1 1.2.3", "2 2 2"], r"line 3: '1.2.3' is not a decimal"),
    "point-in-exponent": (COORDINATE, ["1 1 1", "2 2 1e3.5"], r"line 4: '1e3.5'"),
    "exponent-without-digits": (COORDINATE, ["1 1 1e", "2 2 2"], r"line 3: '1e'"),
    "trailing-letter": (COORDINATE, ["1 1 1", "2 2 1d3"], r"line 4: '1d3'"),
    "sign-inside": (COORDINATE, ["1 1 5-3", "2 2 1"], r"line 3: '5-3'"),
    "word-value": (COORDINATE, ["1 1 infinite", "2 2 1"], r"line 3: 'infinite'"),
    "comma-decimal": (COORDINATE, ["1 1 1,5", "2 2 2"], r"line 3: column 6 holds byte 0x2c"),
    "second-exponent": (COORDINATE, ["1 1 1", "2 2 1e5e3"], r"line 4: '1e5e3'"),
    "exponent-sign-without-digits": (COORDINATE, ["1 1 1e+", "2 2 2"], r"line 3: '1e\+'"),
    "point-after-column-index": (
        COORDINATE,
        ["1 1.5", "2 2 2 7"],
        r"line 3: '1 1\.5' holds 2 numbers",
    ),
    "sign-joins-complex-parts": (
        COORDINATE.replace("{field}", "complex"),
        ["1 1 1.5-2.5", "2 2 2 2 7"],
        r"line 3: '1 1 1\.5-2\.5' holds 3 numbers",
    ),
    "one-entry-short": (
        COORDINATE.replace("{n}", "3"),
        ["1 1 1.0000000", "2 2 2.0000000"],
        "ends after 2 of",
    ),
    "one-entry-long": (COORDINATE.replace("{n}", "1"), ["1 1 1", "2 2 2"], "line 4: .*entry 2"),
}


def mismatched_text(case) -> str:
    header, lines, _ = MISMATCHED[case]
    header = header.format(field="real", symmetry="general", n=2)
    return header + "".join(line + "\n" for line in lines)


# What scipy's parser refuses itself (the check leaves it to the parser, and names the line
# once the parse has failed).
SCIPY_REFUSES = {"negative-index"}


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("case", MISMATCHED, ids=list(MISMATCHED))
def test_entries_that_do_not_match_the_header_are_refused_with_their_line(tmp_path, case, suffix):
    assert_refused_with_its_line(tmp_path, case, suffix)


def assert_refused_with_its_line(tmp_path, case, suffix) -> None:
    path = tmp_path / f"m{suffix}"
    path.write_bytes(_compressors()[suffix](mismatched_text(case).encode()))
    with pytest.raises(ValueError, match=MISMATCHED[case][2]) as excinfo:
        sg.io.mmread(path)
    assert str(excinfo.value).startswith(f"{path}: ")


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("case", sorted(set(MISMATCHED) - SCIPY_REFUSES))
def test_entries_that_do_not_match_the_header_are_refused_whatever_scipy_reads(
    tmp_path, monkeypatch, case, suffix
):
    """scipy parses while the entries are checked; a failed check wins, even over a parse
    that went through (scipy reads a prefix of each number and drops the rest)."""
    import scipy.io

    monkeypatch.setattr(scipy.io, "mmread", lambda *a, **k: sp.coo_array((3, 3)))
    assert_refused_with_its_line(tmp_path, case, suffix)


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_a_file_with_a_nul_byte_never_reaches_scipy(tmp_path, monkeypatch, suffix):
    # scipy's parser crashes on a NUL byte: the check refuses the file first
    import scipy.io

    calls = []
    monkeypatch.setattr(scipy.io, "mmread", lambda *a, **k: calls.append(a))
    path = tmp_path / f"m{suffix}"
    path.write_bytes(_compressors()[suffix](mismatched_text("nul-after-last-value").encode()))
    with pytest.raises(ValueError, match="NUL"):
        sg.io.mmread(path)
    assert calls == []


def test_entries_are_checked_in_archives_too(tmp_path):
    text = mismatched_text("nul-after-last-value").encode()
    path = make_archive(tmp_path / "m.tar.gz", {"m/m.mtx": text})
    with pytest.raises(ValueError, match=r"m\.tar\.gz:m/m\.mtx: line 4: .*NUL"):
        sg.io.mmread(path)


ACCEPTED_VALUES = ["-5.9e-8", "5.", ".5", "-.5", "5.e3", "1E+300", "inf", "-Infinity", "NaN"]


def test_every_decimal_spelling_is_accepted(tmp_path):
    lines = "".join(f"{k + 1} 1 {v}\n" for k, v in enumerate(ACCEPTED_VALUES))
    text = f"%%MatrixMarket matrix coordinate real general\n9 1 9\n{lines}"
    A = sg.io.mmread(write_text(tmp_path / "m.mtx", text))
    expected = [float(v) for v in ACCEPTED_VALUES]
    np.testing.assert_array_equal(A.toarray().ravel(), expected)


def test_blank_lines_crlf_and_blanks_around_entries_are_accepted(tmp_path):
    text = BANNER + "3 3 2\r\n\n  1 1\t1.5  \r\n\n2 2 -2\n\n"
    A = sg.io.mmread(write_text(tmp_path / "m.mtx", text))
    np.testing.assert_array_equal(A.diagonal(), [1.5, -2, 0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lines_straddling_chunks_are_checked_whole(tmp_path, monkeypatch, seed):
    from sparsegpu.io import _body

    monkeypatch.setattr(_body, "CHUNK_BYTES", 7)
    rng = np.random.default_rng(seed)
    A = sp.random(40, 30, density=0.2, random_state=rng, format="coo")
    path = tmp_path / "m.mtx"
    sg.io.mmwrite(path, A)
    # what scipy's own parser reads from the same text (scipy 1.11 writes fewer digits)
    np.testing.assert_array_equal(sg.io.mmread(path).toarray(), scipy.io.mmread(path).toarray())
    lines = path.read_bytes().split(b"\n")
    k = int(rng.integers(3, len(lines) - 1))
    lines[k] += b" 1"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ValueError, match=f"line {k + 1}: .* holds 4 numbers"):
        sg.io.mmread(path)


@pytest.mark.parametrize(("chunk", "window", "longest"), [(1000, 4096, 3000), (7, 4096, 64)])
def test_a_mapped_file_is_cut_into_the_chunks_of_its_bytes(
    tmp_path, monkeypatch, chunk, window, longest
):
    """A plain file is checked from windows mapped one after another: its chunks are
    those of its bytes in memory, lines straddling windows whole."""
    from sparsegpu.io import _body

    monkeypatch.setattr(_body, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(_body, "_WINDOW_BYTES", window)
    monkeypatch.setattr(_body, "MAX_LINE_BYTES", longest)
    A = sp.random(600, 600, density=0.02, random_state=np.random.default_rng(3), format="coo")
    path = tmp_path / "m.mtx"
    sg.io.mmwrite(path, A)
    info = sg.io.mminfo(path)
    with open(path, "rb") as file:
        mapped = [bytes(data) for data in _body._mapped_chunks(file.fileno(), info)]
    assert mapped == [bytes(data) for data in _body._buffer_chunks(path.read_bytes(), info)]
    assert len(mapped) > 2 and path.stat().st_size > 2 * window
    np.testing.assert_array_equal(sg.io.mmread(path).toarray(), A.toarray())


def test_an_overlong_line_is_refused_with_its_number(tmp_path, monkeypatch):
    from sparsegpu.io import _body

    monkeypatch.setattr(_body, "CHUNK_BYTES", 8)
    monkeypatch.setattr(_body, "MAX_LINE_BYTES", 16)
    path = write_text(tmp_path / "m.mtx", BANNER + "3 3 2\n1 1 1\n2 2 " + "1" * 40 + "\n")
    with pytest.raises(ValueError, match="line 4: is longer than 16 bytes"):
        sg.io.mmread(path)


def test_a_damaged_last_line_without_its_end_never_reaches_scipy(tmp_path, monkeypatch):
    # fast_matrix_market reads past its buffer on such a line and crashes the process
    monkeypatch.setattr(scipy.io, "mmread", lambda *a, **k: pytest.fail("parser called"))
    path = write_text(tmp_path / "m.mtx", BANNER + "3 3 2\n1 1 1.5\n2 2 2.5E-")
    with pytest.raises(ValueError, match=r"line 4: '2\.5E-' is not a decimal"):
        sg.io.mmread(path)


LAYOUTS = [("coordinate", f) for f in ("real", "integer", "complex", "pattern")] + [
    ("array", f) for f in ("real", "integer", "complex")
]


def scipy_refuses(fmt: str, field: str, body: bytes, entries: int) -> bool:
    """Whether scipy's parser refuses ``body`` (entry lines) under a header declaring
    ``entries`` (indices up to 99)."""
    size = "99 99 {}" if fmt == "coordinate" else "{} 1"
    header = f"%%MatrixMarket matrix {fmt} {field} general\n{size.format(entries)}\n"
    try:
        scipy.io.mmread(io.BytesIO(header.encode() + body))
    except ValueError:
        return True
    return False


@pytest.mark.skipif(
    not FAST_MATRIX_MARKET, reason="the check leaves refusals to fast_matrix_market"
)
@pytest.mark.parametrize(("fmt", "field"), LAYOUTS, ids=["-".join(x) for x in LAYOUTS])
def test_the_bit_parallel_check_passes_only_what_the_line_check_passes_or_scipy_refuses(fmt, field):
    """A chunk the bit-parallel check passes, the byte-by-byte check passes with as many
    lines, or scipy's parser refuses the file (the check leaves that to it); every
    well-formed chunk, one space between numbers, passes the bit-parallel check."""
    from sparsegpu.io import _body

    info = _header.MMInfo("m.mtx", fmt, field, "general", (99, 99), 10**9)
    body = _body._Body(info, beside_parser=True)
    rng = np.random.default_rng(len(fmt) * 10 + len(field))

    def number(integer: bool) -> str:
        digits = "".join(rng.choice(list("0123456789"), int(rng.integers(1, 4))))
        if integer:
            return rng.choice(["", "-"]) + digits
        mantissa = rng.choice([digits, digits + ".", "." + digits, digits + "." + digits])
        exponent = rng.choice(["", "e7", "E-12", "e+3"])
        return rng.choice(["", "-"]) + mantissa + exponent

    for _ in range(300):
        lines = []
        for _ in range(int(rng.integers(1, 12))):
            indices = ["".join(rng.choice(list("123456789"), 2)) for _ in range(body.indices)]
            values = [number(field == "integer") for _ in range(body.per_line - body.indices)]
            lines.append(" ".join(indices + values))
        text = bytearray(("\n" + "\n".join(lines) + "\n").encode())
        assert _body._certain_entries(bytes(text), body.per_line, body.indices, field) == len(lines)
        for _ in range(int(rng.integers(1, 3))):  # damage it, maybe
            where = int(rng.integers(1, len(text) - 1))
            text[where : where + int(rng.integers(0, 2))] = bytes(
                [int(rng.choice(list(b"0123456789+-.eE \t\nx,\0")))]
            )
        try:
            fast = _body._certain_entries(bytes(text), body.per_line, body.indices, field)
        except _body._Unusual:
            continue
        try:
            _, lines_seen = body.check_lines(bytes(text))
        except _body._BadLine:
            assert scipy_refuses(fmt, field, bytes(text[1:]), fast), bytes(text)
            continue
        assert fast == lines_seen, bytes(text)
