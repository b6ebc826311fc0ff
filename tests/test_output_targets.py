"""Outputs are written only onto a regular file or a missing path (issue 31 item 1).

A directory, character device, FIFO or socket given as an output is refused with
one line naming it, and is left as it was; a symbolic link is written through to
the file it points to (atomically, beside that file), the link staying a link.
The device case needs root (``mknod``) and runs as root in CI.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from pathlib import Path

import pytest
import torch

from flowsplit.errors import InputError
from flowsplit.outputs import atomic_write_text, output_file
from flowsplit.train.checkpoint import load_tensors, save_tensors


def _device(tmp_path: Path) -> Path:
    """A character device of our own (the null device's numbers) in ``tmp_path``."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root (CI runs this as root)")
    path = tmp_path / "null-device"
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the socket file stays
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "dir"
    path.mkdir()
    return path


KINDS = {
    "device": (_device, stat.S_ISCHR, "a character device"),
    "fifo": (_fifo, stat.S_ISFIFO, "a FIFO"),
    "socket": (_socket, stat.S_ISSOCK, "a socket"),
    "directory": (_directory, stat.S_ISDIR, "a directory"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("via_link", [False, True], ids=["direct", "symlink"])
def test_a_special_file_is_refused_and_left_alone(kind, via_link, tmp_path):
    # Prepare
    make, is_kind, what = KINDS[kind]
    target = make(tmp_path)
    given = target
    if via_link:
        given = tmp_path / "link"
        given.symlink_to(target)
    # Execute
    with pytest.raises(InputError) as caught:
        atomic_write_text(given, "{}\n")
    # Assert: one line naming the path given, the thing there untouched
    assert str(caught.value).startswith(f"{given}: is {what}")
    assert is_kind(os.stat(target).st_mode)
    assert via_link is given.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {target.name, given.name}
    )  # no temporary file left


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "device"])
def test_tensor_files_refuse_special_files_too(kind, tmp_path):
    make, is_kind, what = KINDS[kind]
    target = make(tmp_path)
    with pytest.raises(InputError, match=what):
        save_tensors(target, {"w": torch.zeros(2)})
    assert is_kind(os.stat(target).st_mode)


def test_a_fifo_output_does_not_block(tmp_path):
    # A reader-less FIFO would hang an open() for writing: the refusal comes first.
    fifo = _fifo(tmp_path)
    done = []
    thread = threading.Thread(target=lambda: done.append(_refused(fifo)), daemon=True)
    thread.start()
    thread.join(10)
    assert done == [True]


def _refused(path: Path) -> bool:
    try:
        atomic_write_text(path, "x")
    except InputError:
        return True
    return False


def test_a_symlink_is_written_through_to_its_target(tmp_path):
    # Prepare: a link in one folder to a file in another
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "metrics.json"
    target.write_text("old\n")
    link = tmp_path / "metrics.json"
    link.symlink_to(target)
    # Execute
    atomic_write_text(link, "new\n")
    save_tensors(tmp_path / "real" / "t.pt", {"w": torch.ones(3)})
    (tmp_path / "t.pt").symlink_to(tmp_path / "real" / "t.pt")
    save_tensors(tmp_path / "t.pt", {"w": torch.full((3,), 2.0)})
    # Assert: the link is still a link, the target holds the new text
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    assert (tmp_path / "t.pt").is_symlink()
    assert load_tensors(tmp_path / "real" / "t.pt")["w"].tolist() == [2.0, 2.0, 2.0]
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["metrics.json", "t.pt"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "made.json")
    atomic_write_text(link, "x\n")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "x\n"


def test_a_regular_file_or_new_path_is_replaced(tmp_path):
    old = tmp_path / "a.json"
    old.write_text("old")
    assert output_file(old) == old and output_file(tmp_path / "new.json") == tmp_path / "new.json"
    atomic_write_text(old, "new")
    assert old.read_text() == "new"


def test_outputs_follow_the_umask(tmp_path):
    # Tensor files and text files alike (issue 31 item 8: tensors were always 0600).
    mask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.json", "x")
        save_tensors(tmp_path / "t.pt", {"w": torch.zeros(1)})
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "a.json").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "t.pt").st_mode) == 0o640


def test_a_refused_write_names_the_file_not_the_temporary(tmp_path, monkeypatch):
    # Prepare: the disk is full when the bytes are written
    import flowsplit.data.store as store

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    # Execute
    with pytest.raises(OSError) as caught:
        atomic_write_text(tmp_path / "out.json", "x")
    # Assert
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == []
