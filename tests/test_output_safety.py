"""Outputs nobody else's run can clobber, and a full disk like any other refusal
(issue 31 items 2 and 3).

A second writer of the same ``-o`` is refused naming the first; a full or read-only
disk is one line naming the output asked for, never a temporary name, and leaves no
temporary folder (those of crashed runs are removed by the next run); ``train
--overwrite`` keeps the finished run until the new one has succeeded.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowsplit.cli import main
from flowsplit.data.store import OutputLock, load_dataset
from tests.train.synth import write_synthetic

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "demo" / "captures"
SMALL_CNN = "--model-option channels=[4,4] --model-option hidden=8 --batch-size 8"
PREPARE = "prepare {caps} --views bytes,stats --split-by flow --quiet"
"""``prepare`` of :func:`caps` (placeholder ``{caps}``)."""


@pytest.fixture(scope="module")
def caps(tmp_path_factory) -> Path:
    """Two classes of the shipped lab capture, one folder each."""
    root = tmp_path_factory.mktemp("caps")
    for cls in ("dns", "ssh"):
        (root / cls).mkdir()
        for k in (1, 2):
            shutil.copy(CAPTURES / cls / f"{cls}-0{k}.pcap", root / cls)
    return root


def _one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("flowsplit: error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_synthetic(tmp_path_factory.mktemp("safety") / "ds", n=60, n_classes=2)


@pytest.mark.parametrize("command", ["prepare", "train", "sfl run"])
def test_a_second_writer_of_the_same_output_is_refused_naming_the_first(
    command, data, caps, tmp_path, capsys
):
    # Prepare: another flowsplit holds OUT (this process: flock is per open file)
    out = tmp_path / "out"
    argv = {
        "prepare": f"{PREPARE.format(caps=caps)} -o {out}",
        "train": f"train {data} -m cnn --epochs 1 {SMALL_CNN} -o {out} -q",
        "sfl run": f"sfl run {data} --model cnn {SMALL_CNN} --rounds 1 --quiet -o {out}",
    }[command]
    # Execute
    with OutputLock(out):
        rc = main(shlex.split(argv))
    # Assert: refused, naming the holder; nothing written; the lock gone after
    line = _one_line(capsys)
    assert rc == 2
    assert f"{out}: is being written by another flowsplit (pid {os.getpid()}" in line
    assert not out.exists()
    assert not (tmp_path / ".out.lock").exists()


@pytest.mark.slow  # two processes
def test_two_prepares_at_once_one_wins_the_other_is_told(caps, tmp_path):
    # Prepare: the first holds the lock (a process sleeping under it), the second starts
    out = tmp_path / "ds"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from flowsplit.data.store import OutputLock; "
            f"lock = OutputLock({str(out)!r}).acquire(); print('held', flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        # Execute
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "flowsplit",
                *shlex.split(f"{PREPARE.format(caps=caps)} -o {out}"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.kill()
        holder.wait()
    # Assert: the second is refused naming the first; after the first died, it runs
    assert done.returncode == 2, done.stderr
    assert f"pid {holder.pid}" in done.stderr and done.stderr.count("\n") == 1
    assert main(shlex.split(f"{PREPARE.format(caps=caps)} -o {out}")) == 0


def test_stale_temporary_folders_are_removed_by_the_next_run(caps, tmp_path):
    # Prepare: what a prepare killed while writing leaves beside its output
    stale = tmp_path / ".ds.tmp-abcd1234" / "_raw"
    stale.mkdir(parents=True)
    (stale / "bytes.npy").write_bytes(b"x" * 1000)
    other = tmp_path / ".other.tmp-abcd1234"  # another output's: not ours to remove
    other.mkdir()
    # Execute
    rc = main(shlex.split(f"{PREPARE.format(caps=caps)} -o {tmp_path / 'ds'}"))
    # Assert
    assert rc == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.tmp-abcd1234", "ds"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_prepare_on_a_full_disk_names_the_dataset_and_leaves_nothing(
    code, caps, tmp_path, monkeypatch, capsys
):
    # Prepare: the disk refuses the staged rows (a write error names no file)
    import flowsplit.data.store as store

    def refused(self, rows):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(store.NpyAppender, "append", refused)
    # Execute
    rc = main(shlex.split(f"{PREPARE.format(caps=caps)} -o {tmp_path / 'ds'}"))
    # Assert
    assert rc == 2
    assert _one_line(capsys) == f"flowsplit: error: {tmp_path / 'ds'}: {os.strerror(code)}"
    assert list(tmp_path.iterdir()) == []


def _tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return done.returncode == 0


@pytest.mark.parametrize("size", ["64k", "150k"])
def test_prepare_on_a_real_full_disk(size, caps, tmp_path, capsys):
    # Prepare: a tmpfs too small for the dataset (root: CI; skipped elsewhere)
    disk = tmp_path / "disk"
    if not _tmpfs(disk, size):
        pytest.skip("mounting a tmpfs needs root")
    try:
        # Execute
        rc = main(shlex.split(f"{PREPARE.format(caps=caps)} -o {disk / 'ds'}"))
        line = _one_line(capsys)
        left = list(disk.iterdir())
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    # Assert: one line naming the dataset; the disk as it was
    assert rc == 2
    assert line == f"flowsplit: error: {disk / 'ds'}: {os.strerror(errno.ENOSPC)}"
    assert left == []


def test_overwrite_keeps_the_finished_run_until_the_new_one_succeeds(
    data, tmp_path, monkeypatch, capsys
):
    # Prepare: a finished run, then an --overwrite whose training fails
    out = tmp_path / "run"
    assert main(shlex.split(f"train {data} -m cnn --epochs 1 {SMALL_CNN} -o {out} -q")) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    import flowsplit.train.loop as loop

    def fails(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "checkpoint.pt"))

    monkeypatch.setattr(loop, "train_worker", fails)
    capsys.readouterr()
    # Execute
    rc = main(shlex.split(f"train {data} -m cnn --epochs 2 {SMALL_CNN} -o {out} -q --overwrite"))
    # Assert: the failure is one line; the old run is whole, nothing else left
    assert rc == 2 and "checkpoint.pt: No space left" in _one_line(capsys)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before and "metrics.json" in after
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
    # ... and an --overwrite that succeeds replaces it (the kept copy removed)
    monkeypatch.undo()
    assert (
        main(shlex.split(f"train {data} -m cnn --epochs 2 {SMALL_CNN} -o {out} -q --overwrite"))
        == 0
    )
    assert not (out / ".previous-run").exists()
    assert (out / "metrics.json").read_bytes() != before["metrics.json"]


def test_a_lock_of_a_dead_process_blocks_nobody(tmp_path):
    # A lock file left by a killed run holds no lock: the kernel dropped it.
    (tmp_path / ".ds.lock").write_text('{"pid": 99999999}')
    started = time.monotonic()
    with OutputLock(tmp_path / "ds") as lock:
        assert lock.path.read_text().startswith(f'{{"pid": {os.getpid()}')
    assert time.monotonic() - started < 5
    assert not (tmp_path / ".ds.lock").exists()
    assert load_dataset  # the store's reader is untouched by the writer's lock
