"""The local launcher's workers do not outlive it (a compare cell timeout SIGKILLs it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from flowsplit.util import pid_alive

SCRIPT = """
import os, sys, time
from flowsplit.train.launch import launch_local

def work(path):
    open(os.path.join(path, str(os.getpid())), "w").close()
    time.sleep(120)

if __name__ == "__main__":
    launch_local(work, (sys.argv[1],), n_workers=2, threads_per_worker=1)
"""


@pytest.mark.slow  # three processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_when_the_launcher_is_killed(tmp_path):
    # Prepare: a launcher with two sleeping workers, each leading its own session.
    script = tmp_path / "launcher.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "pids"
    marks.mkdir()
    launcher = subprocess.Popen([sys.executable, str(script), str(marks)])
    try:
        # Three interpreters import torch first: on a loaded machine that took over 60 s.
        deadline = time.monotonic() + 180
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p.name) for p in marks.iterdir()]
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        # Execute: what subprocess.run(timeout=...) does to a cell.
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        # Assert: both workers are gone within seconds.
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(pid_alive(p) for p in pids)
    finally:
        launcher.kill()
        for p in marks.iterdir():
            if pid_alive(int(p.name)):
                os.kill(int(p.name), signal.SIGKILL)


FAILING = """
import os, signal, sys, time
from tqdm import tqdm
from flowsplit.errors import FlowsplitError
from flowsplit.train.launch import launch_local

def work():
    for _ in tqdm(range(1), disable=True):  # a bar takes tqdm's lock, as training does
        pass
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)

if __name__ == "__main__":
    try:
        launch_local(work, n_workers=2, threads_per_worker=1)
    except FlowsplitError as exc:
        print(f"flowsplit: error: {exc}", file=sys.stderr)
        sys.exit(2)
"""


@pytest.mark.slow  # three processes
def test_a_killed_worker_is_one_line_and_the_last(tmp_path):
    # Prepare: two workers, the second killed by SIGKILL (the OOM killer's signal).
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    # Execute
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180
    )
    # Assert: one line, the reason; no torch "Terminating process" line before it and no
    # resource_tracker "leaked semaphore" warning after it (issue 14).
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2
    assert lines == [
        "flowsplit: error: worker 1 was killed by SIGKILL (out of memory?); the other "
        "workers were stopped (continue from the last checkpoint with --resume RUN)"
    ], done.stderr


STOPPING = """
import os, signal, sys, time
from flowsplit.errors import FlowsplitError
from flowsplit.train.launch import launch_local

def work(path):
    open(os.path.join(path, str(os.getpid())), "w").close()
    time.sleep(2)  # a few heartbeats first
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(120)

if __name__ == "__main__":
    try:
        launch_local(work, (sys.argv[1],), n_workers=2, threads_per_worker=1, heartbeat_s=5)
    except FlowsplitError as exc:
        print(f"flowsplit: error: {exc}", file=sys.stderr)
        sys.exit(2)
"""


@pytest.mark.slow  # three processes
def test_a_stopped_worker_is_named_by_its_missing_heartbeat_and_every_worker_ends(tmp_path):
    # Prepare: two workers; the second stops itself (SIGSTOP) after two seconds, so only
    # the launcher's heartbeat watch can find it (its peer sleeps in no collective).
    script = tmp_path / "stopping.py"
    script.write_text(STOPPING)
    marks = tmp_path / "pids"
    marks.mkdir()
    # Execute
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), str(marks)], capture_output=True, text=True, timeout=180
    )
    took = time.monotonic() - start
    # Assert: one line naming rank 1 within the 120 s the workers would otherwise sleep,
    # and neither worker left behind (the stopped one needs SIGKILL).
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "flowsplit: error: worker 1 (rank 1) sent no heartbeat for 5 s (stopped or frozen); "
        "every worker was ended (continue from the last checkpoint with --resume RUN)"
    ]
    assert took < 100
    pids = [int(p.name) for p in marks.iterdir()]
    assert len(pids) == 2 and not any(pid_alive(p) for p in pids)


@pytest.mark.parametrize(
    ("gloo", "words"),
    [
        (
            "send failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection "
            "closed by peer [127.0.0.1]:45678",
            "send failed: its connection closed: the process ended or was killed",
        ),
        (
            "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error "
            "[127.0.0.1]:35766: Connection reset by peer",
            "its connection was reset: the process ended or was killed",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
            "Timed out waiting 30000ms for recv operation to complete",
            "RuntimeError: no answer within 30 s",
        ),
        (
            "no connection: [enforce fail at ../third_party/gloo/gloo/transport/tcp/"
            "pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4",
            "no connection: op.preamble.length <= op.nbytes. 8 vs 4",
        ),
    ],
)
def test_a_lost_peer_is_said_in_words_without_gloo_source_locations(gloo, words):
    from flowsplit.train.launch import peer_failure_words

    assert peer_failure_words(gloo) == words


def test_an_unknown_long_peer_failure_is_shortened_at_a_word():
    from flowsplit.train.launch import peer_failure_words

    text = "[x/pair.cc:1] " + " ".join(f"word{i}" for i in range(100))
    said = peer_failure_words(text, limit=60)
    assert said.endswith(" ...") and len(said) <= 64
    # Every word kept is whole: none is cut in the middle (the old [:160] did).
    assert all(w.startswith("word") and w[4:].isdigit() for w in said[:-4].split())
    assert "pair.cc" not in said


def test_cpp_quiet_settings_leave_the_users_own_alone():
    from flowsplit.train.launch import CPP_QUIET, cpp_quiet_env

    assert cpp_quiet_env({}) == CPP_QUIET
    assert cpp_quiet_env({"TORCH_SHOW_CPP_STACKTRACES": "1"}) == {"TORCH_CPP_LOG_LEVEL": "ERROR"}
