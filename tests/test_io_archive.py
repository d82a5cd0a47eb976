"""sparsegpu.io._archive.safe_extract: only regular files and directories under the one
expected directory, within a size limit, from an archive whose checksum holds."""

from __future__ import annotations

import tarfile

import pytest

from sparsegpu.io import _archive

from .collection_server import file_member, link_member, tar_bytes


def extract(tmp_path, members):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_bytes(members))
    destination = tmp_path / "out"
    destination.mkdir()
    return _archive.safe_extract(archive, destination, "m")


def test_regular_members_are_extracted(tmp_path):
    top = extract(tmp_path, [file_member("m/m.mtx", b"abc"), file_member("m/sub/m_b.mtx", b"d")])
    assert (top / "m.mtx").read_bytes() == b"abc"
    assert (top / "sub" / "m_b.mtx").read_bytes() == b"d"


REFUSED = {
    "symlink": (link_member("m/x", "/etc/passwd"), "symbolic link"),
    "hardlink": (link_member("m/x", "m/m.mtx", tarfile.LNKTYPE), "hard link"),
    "char-device": (link_member("m/x", "", tarfile.CHRTYPE), "a device"),
    "block-device": (link_member("m/x", "", tarfile.BLKTYPE), "a device"),
    "fifo": (link_member("m/x", "", tarfile.FIFOTYPE), "FIFO"),
    "dot-dot": (file_member("m/../../x", b"x"), r"'\.\.'"),
    "absolute": (file_member("/m/x", b"x"), "absolute path"),
    "outside-top": (file_member("other/x", b"x"), "outside the expected directory"),
    "duplicate": (file_member("m/m.mtx", b"again"), "twice"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_unsafe_members_are_refused(tmp_path, case):
    member, message = REFUSED[case]
    with pytest.raises(ValueError, match=message):
        extract(tmp_path, [file_member("m/m.mtx", b"abc"), member])
    assert not (tmp_path / "x").exists()


def test_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(_archive, "MIN_EXTRACT_LIMIT", 10)
    monkeypatch.setattr(_archive, "MAX_EXPANSION_RATIO", 1)
    with pytest.raises(ValueError, match="expands to more than"):
        extract(tmp_path, [file_member("m/m.mtx", b"0" * 100_000)])


def test_truncated_archive_is_refused(tmp_path):
    data = tar_bytes([file_member("m/m.mtx", bytes(range(256)) * 400)])
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(data[: len(data) - 20])
    destination = tmp_path / "out"
    destination.mkdir()
    with pytest.raises(ValueError, match="damaged or truncated"):
        _archive.safe_extract(archive, destination, "m")
