"""core/atomic.py: the new content lands whole, nothing temporary stays behind, a failed write
leaves the old file as it was, and the file and its directory are fsync'ed."""
import os
import stat

import pytest

from core import atomic
from core.atomic import atomic_open, atomic_path, atomic_write_text

pytestmark = pytest.mark.unit


def leftovers(directory):
    return [name for name in os.listdir(directory) if ".tmp" in name]


@pytest.fixture
def fsyncs(monkeypatch):
    """What every os.fsync call was given: ("dir", path) or ("file", path) of its descriptor."""
    calls = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        mode = os.fstat(fd).st_mode
        calls.append(("dir" if stat.S_ISDIR(mode) else "file",
                      os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    return calls


def test_atomic_open_writes_text_and_bytes(tmp_path):
    path = tmp_path / "a.txt"
    with atomic_open(path, "w") as f:
        f.write("hello\n")
    assert path.read_text() == "hello\n"
    with atomic_open(str(path), "wb") as f:
        f.write(b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert leftovers(tmp_path) == []


def test_atomic_path_yields_a_temporary_name_with_the_suffix(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"old")
    with atomic_path(path, suffix=".png") as tmp:
        assert tmp.endswith(".png") and os.path.dirname(tmp) == str(tmp_path)
        assert tmp != str(path)
        with open(tmp, "wb") as f:
            f.write(b"new")
        assert path.read_bytes() == b"old"  # nothing visible before the block ends
    assert path.read_bytes() == b"new"
    assert leftovers(tmp_path) == []


def test_atomic_write_text_replaces_the_file(tmp_path):
    path = tmp_path / "summary.json"
    atomic_write_text(path, "{}\n")
    atomic_write_text(path, '{"a": 1}\n')
    assert path.read_text() == '{"a": 1}\n'
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("writer", ["open", "path"])
def test_an_exception_leaves_the_old_file_and_no_temporary_file(tmp_path, writer):
    path = tmp_path / "last.pt"
    path.write_bytes(b"the previous checkpoint")
    with pytest.raises(RuntimeError, match="disk full"):
        if writer == "open":
            with atomic_open(path, "wb") as f:
                f.write(b"half of the new")
                raise RuntimeError("disk full")
        else:
            with atomic_path(path, suffix=".gif") as tmp:
                with open(tmp, "wb") as f:
                    f.write(b"half of the new")
                raise RuntimeError("disk full")
    assert path.read_bytes() == b"the previous checkpoint"
    assert leftovers(tmp_path) == []


def test_a_writer_that_writes_nothing_fails_and_leaves_the_old_file(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"old")
    with pytest.raises(FileNotFoundError):
        with atomic_path(path, suffix=".png"):
            pass  # the library never created its file
    assert path.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_only_whole_file_modes_are_accepted(tmp_path):
    for mode in ("a", "r+", "ab"):
        with pytest.raises(ValueError, match="whole files"):
            with atomic_open(tmp_path / "x", mode):
                pass
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer", ["open", "path"])
def test_the_file_then_its_directory_are_fsynced(tmp_path, fsyncs, writer):
    path = tmp_path / "out.bin"
    if writer == "open":
        with atomic_open(path, "wb") as f:
            f.write(b"data")
    else:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"data")
    assert len(fsyncs) == 2
    (kind, name), directory = fsyncs
    real = os.path.realpath(tmp_path)
    assert kind == "file" and name.startswith(os.path.join(real, "out.bin.tmp-"))  # the new data
    assert directory == ("dir", real)  # after the rename: the rename itself is durable


def test_no_directory_fsync_when_the_write_fails(tmp_path, fsyncs):
    with pytest.raises(RuntimeError):
        with atomic_open(tmp_path / "x", "w"):
            raise RuntimeError("boom")
    assert fsyncs == []


def test_a_directory_that_cannot_be_fsynced_is_not_an_error(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def refusing_directories(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError("EINVAL: not on this platform")
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", refusing_directories)
    atomic_write_text(tmp_path / "a", "x")
    assert (tmp_path / "a").read_text() == "x"
    atomic.fsync_directory(str(tmp_path / "missing"))  # cannot even be opened: ignored too
