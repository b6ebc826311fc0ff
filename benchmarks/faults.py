"""Fault injection: real processes, real signals, a full disk and a read-only output.

Every case starts ``python -m flowsplit ...`` in its own session with a unique tag in
its environment (inherited by every process it starts: the fork server, the role
processes, DDP workers), waits until the run is under way, injects one fault, and
records:

- ``expected`` / ``observed``: what should happen and what did (exit code, the last
  line of stderr, the round records);
- ``held``: observed matches expected, with no orphans, no lost files and no late
  writes;
- ``detect_s``: seconds from the fault to its detection (the launcher's exit, the
  "lost ..." log line, or the last tagged process gone);
- ``orphans``: tagged processes still alive 10 s after the launcher ended (each is
  then killed, so cases do not disturb each other);
- ``lost_files``: files a user keeps that are missing or unreadable afterwards
  (``model.pt``/``metrics.json`` of a run that reported success, a DDP
  ``checkpoint.pt`` that existed before the fault, a file on the full disk);
- ``late_writes``: files of OUT created or changed after the launcher had ended
  (a stopped run must write nothing after the stop);
- ``litter``: temporary files left behind.

The cases: the dist launcher, server, an aggregator and a client killed, terminated
and stopped; the server SIGKILLed and the run resumed; the server SIGTERMed at each
phase of a round (client compute and upload, the aggregator's step, the backbone, the
server's step, gradients and the model on the way down, the server collecting the
upload, the checkpoint being written: a pause point injected through
``benchmarks/fault_hook/sitecustomize.py`` puts the fault exactly there); Ctrl-Z and
``fg`` of ``sfl run --mode dist`` and of ``train --workers 2``; DDP workers and
launcher killed, terminated and stopped; and a full disk (64 KiB left), a disk with
no space at all, and a read-only output for ``sfl run`` (sim and dist), ``train`` and
``prepare``.

Judged strictly (:func:`strict`): a case holds only if its own check held (a failure
is flowsplit's one line on stderr, ``flowsplit: error: ...``, never an internal error;
a run that goes on completes with its result; an exit without either is not held)
and there are 0 orphans, 0 lost files, 0 late writes, 0 tracebacks or C++ frames on
stderr, and the fault was detected within 60 s. The JSON has every case and a
summary (cases held, the longest detection, the load average around the run).

Needs root for the tmpfs cases (``mount -t tmpfs -o size=2m``; unmounted after);
without it they are reported as not built. The machine this runs on may be loaded:
detection times are upper bounds.

    nice -n 15 python benchmarks/faults.py --out faults.json          # all (25 min)
    nice -n 15 python benchmarks/faults.py --out faults.json --quick  # one of each kind
    python benchmarks/faults.py --out faults.json --only at-,ctrl-z   # names containing
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402 - after the sys.path line, like the import below

from benchmarks._common import SINGLE_THREAD_ENV, environment, write_json  # noqa: E402
from flowsplit.train.launch import heartbeat_limit  # noqa: E402

PY = sys.executable
TAG = "FLOWSPLIT_FAULT_TAG"
SFL_TIMEOUT_S = 10.0  # a niced run on a loaded machine can starve 5 s (a client dropped)
DDP_TIMEOUT_S = 10.0


# --- processes ---------------------------------------------------------------------------


def tagged(tag: str) -> list[int]:
    """Pids of live processes whose environment carries ``tag``."""
    needle = f"{TAG}={tag}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    out.append(int(d.name))
        except OSError:
            continue
    return out


def holding(path: Path, tag: str) -> int | None:
    """The tagged process that has ``path`` open (a role holds its own log file)."""
    for pid in tagged(tag):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == str(path):
                        return pid
    return None


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def wait_for(pred: Callable[[], Any], timeout: float, step: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    return None


class Launch:
    """One ``python -m flowsplit`` run in its own session, tagged."""

    def __init__(
        self,
        args: list[str],
        out: Path,
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        job: bool = False,
    ):
        """``env``: added to the environment; ``job``: a process group of its own in
        this session (as a shell starts a job, so Ctrl-Z stops it), else a session of
        its own (a detached run)."""
        self.tag = uuid.uuid4().hex
        self.out = out
        env = {**os.environ, **SINGLE_THREAD_ENV, TAG: self.tag, **(env or {})}
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - read after the run ends
        self.proc = subprocess.Popen(
            [PY, "-m", "flowsplit", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            start_new_session=not job,
            process_group=0 if job else None,
        )
        self.ended_at: float | None = None
        self.orphans: list[str] = []
        self.gone_after_s: float | None = None
        """Seconds from reaping (after the launcher ended) until no tagged process lived."""
        """What the orphans were (pid, state, command line), for the record."""

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.ended_at = time.monotonic()
        return rc

    def wait_shown(self, timeout: float, t0: float) -> float | None:
        """Seconds from ``t0`` until the user saw flowsplit's error line on stderr (or the
        launcher ended without one); None if neither within ``timeout``."""
        seen = wait_for(
            lambda: self.proc.poll() is not None or "flowsplit: error:" in self.stderr_text(),
            timeout,
            0.05,
        )
        return None if not seen else time.monotonic() - t0

    def last_line(self) -> str:
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines() if ln]
        return lines[-1] if lines else ""

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def tracebacks(self) -> int:
        """Python tracebacks and C++ stack frames (torch's, gloo's) on stderr."""
        return noise(self.stderr_text())

    def one_line_error(self) -> bool:
        """The run failed the way a user should see it: its last line is flowsplit's
        one-line error (not an internal error), with no traceback or C++ frame anywhere."""
        line = self.last_line()
        return (
            line.startswith("flowsplit: error:")
            and "internal error" not in line
            and self.tracebacks() == 0
        )

    def reap(self) -> int:
        """Orphans: tagged processes alive 10 s after the launcher ended; then kill them."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        t0 = time.monotonic()
        left = wait_for(lambda: not tagged(self.tag), 10.0)
        if self.gone_after_s is None and left:
            self.gone_after_s = round(time.monotonic() - t0, 2)
        pids = [] if left else tagged(self.tag)
        for pid in pids:
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                self.orphans.append(f"{pid} {state(pid)} {cmd.decode(errors='replace')[:120]}")
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)


CPP_FRAMES = ("Traceback (most recent call last)", "Exception raised from", "frame #")


def noise(text: str) -> int:
    """How many tracebacks and C++ stack frames ``text`` holds."""
    return sum(text.count(mark) for mark in CPP_FRAMES)


def state(pid: int) -> str:
    """The one-letter state of ``pid`` (``T``: stopped, ``Z``: a zombie), ``-`` if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "-"


def snapshot(out: Path) -> dict[str, float]:
    if not out.exists():
        return {}
    return {str(p): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def late_writes(out: Path, before: dict[str, float]) -> list[str]:
    """Files of OUT (logs apart) created or changed since ``before``."""
    after = snapshot(out)
    return sorted(
        p for p, m in after.items() if "/logs/" not in p and (p not in before or before[p] != m)
    )


def litter(root: Path) -> list[str]:
    # A temporary file, or any file in a temporary folder (prepare's .NAME.tmp-*/_raw/).
    return sorted(
        str(p) for p in root.rglob("*") if p.is_file() and ".tmp" in str(p.relative_to(root))
    )


def loadable(path: Path) -> bool:
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return True
    except Exception:  # noqa: BLE001 - any failure means the file is lost
        return False


# --- split learning (dist backend) --------------------------------------------------------

SFL_ROUNDS = 8
SFL_CLIENTS, SFL_AGGS = 4, 2


def sfl_args(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "sfl",
        "run",
        str(data),
        "-o",
        str(out),
        "--mode",
        "dist",
        "--model",
        "cnn",
        "--clients",
        str(SFL_CLIENTS),
        "--aggregators",
        str(SFL_AGGS),
        "--rounds",
        str(SFL_ROUNDS),
        "--batch-size",
        "32",
        "--timeout",
        str(SFL_TIMEOUT_S),
        "--quiet",
        *extra,
    ]


def round_started(out: Path, n: int) -> bool:
    log = out / "logs" / "server.log"
    return log.is_file() and f"round {n} starts" in log.read_text(errors="replace")


def lost_line(out: Path, what: str) -> bool:
    return any(
        f"lost {what}" in p.read_text(errors="replace") for p in (out / "logs").glob("*.log")
    )


def sfl_case(data: Path, work: Path, role: str, sig: signal.Signals) -> dict[str, Any]:
    """``role``: launcher, server, aggregator-1, client-2; ``sig``: what it receives."""
    out = work / f"sfl-{role}-{sig.name}"
    # Aggregator 1 serves half the clients: the round it is lost in keeps 2 of 4, which
    # the default minimum (a majority) would refuse before they could be reassigned.
    extra = ("--min-clients", "2") if role.startswith("aggregator") else ()
    run = Launch(sfl_args(data, out, *extra), out, cwd=work)
    case: dict[str, Any] = {"name": f"sfl-{role}-{sig.name}"}
    try:
        if not wait_for(lambda: round_started(out, 2), 240, 0.2):
            run.proc.kill()
            return {**case, "held": False, "observed": "never reached round 2: " + run.last_line()}
        if role == "launcher":
            target = run.proc.pid
        else:
            target = holding((out / "logs" / f"{role}.log").resolve(), run.tag)
        if target is None:
            return {**case, "held": False, "observed": f"no process holds {role}.log"}
        before = snapshot(out)
        t0 = time.monotonic()
        if role == "launcher" and sig == signal.SIGINT:
            os.killpg(run.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        else:
            os.kill(target, sig)
        detect: float | None = None
        if role.startswith(("client", "aggregator")):
            kind, index = role.split("-")
            # A stopped aggregator: the launcher ends it when its heartbeat stops, and the
            # server then loses it like a killed one.
            seen = wait_for(lambda: lost_line(out, f"{kind} {index}"), 120, 0.05)
            detect = time.monotonic() - t0 if seen else None
        if role == "launcher" and sig == signal.SIGKILL:
            gone = wait_for(lambda: not tagged(run.tag), 30, 0.05)
            detect = time.monotonic() - t0 if gone else None
        rc = run.wait(300)
        if detect is None and rc is not None and role in ("launcher", "server"):
            detect = run.ended_at - t0
        time.sleep(3.0)  # anything still running gets the chance to write late
        late = late_writes(out, before) if role in ("launcher", "server") else []
        orphans = run.reap()
        return {
            **case,
            **judge_sfl(role, sig, rc, run, out),
            "detect_s": None if detect is None else round(detect, 2),
            "orphans": orphans,
            "orphan_processes": run.orphans,
            "others_gone_after_s": run.gone_after_s,
            "late_writes": len(late),
            "late_files": late,
            "litter": len(litter(out)),
        }
    finally:
        run.reap()


HOOK = Path(__file__).resolve().parent / "fault_hook"
"""``sitecustomize.py``: a pause point at a named place of a dist round (its docstring)."""
PHASE_ROUND = 1
"""The round (0-based) a phase case pauses in: the first one's checkpoint exists."""
PHASES = {
    # point: the role that pauses there (the server, or the peer busy in that phase)
    "client-compute": "client-2",
    "client-upload": "client-2",
    "aggregator-step": "aggregator-1",
    "backbone": "server",
    "server-step": "server",
    "gradients-down": "server",
    "download": "server",
    "server-collect": "server",
    "checkpoint": "server",
}


def checkpoint_round(path: Path) -> int | None:
    """The number of finished rounds ``sfl-checkpoint.pt`` holds; None if unreadable."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["round"])
    except Exception:  # noqa: BLE001 - any failure means the file is lost
        return None


def sfl_phase_case(data: Path, work: Path, point: str) -> dict[str, Any]:
    """SIGTERM to the server at ``point`` of a round (:data:`PHASES`).

    The role at ``point`` stops itself there (``fault_hook``); the server then gets
    SIGTERM (and, if it is the one stopped, SIGCONT, so the signal lands at that point).
    A peer stopped there is continued once the server is gone, so it meets the dead
    server in that phase. Held: exit != 0 with one line naming the server, no traceback
    or C++ frame, no orphan, no result written, the last finished round's checkpoint
    intact, detection (launcher's exit) under 60 s.
    """
    who = PHASES[point]
    name = f"sfl-server-SIGTERM-at-{point}"
    out, mark = work / name, work / f"{name}.mark"
    hook_env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")])),
        "FLOWSPLIT_FAULT_PAUSE": f"{who}:{point}:{PHASE_ROUND}",
        "FLOWSPLIT_FAULT_MARK": str(mark),
    }
    run = Launch(sfl_args(data, out), out, cwd=work, env=hook_env)
    case: dict[str, Any] = {"name": name, "paused": f"{who} at {point}, round {PHASE_ROUND + 1}"}
    ckpt = out / "sfl-checkpoint.pt"
    try:
        if not wait_for(lambda: mark.is_file() or run.proc.poll() is not None, 240, 0.05):
            run.proc.kill()
        if not mark.is_file():
            return {**case, "held": False, "observed": "never paused: " + run.last_line()}
        paused = int(mark.read_text().split()[0])
        if not wait_for(lambda: state(paused) == "T", 10, 0.02):
            return {**case, "held": False, "observed": f"{who} did not stop ({state(paused)})"}
        server = holding((out / "logs" / "server.log").resolve(), run.tag)
        if server is None:
            return {**case, "held": False, "observed": "no process holds server.log"}
        rounds_before = checkpoint_round(ckpt)
        before = snapshot(out)
        t0 = time.monotonic()
        os.kill(server, signal.SIGTERM)
        if paused == server:
            os.kill(server, signal.SIGCONT)  # the pending SIGTERM is its next step
        else:
            wait_for(lambda: state(server) in ("-", "Z"), 10, 0.01)
            os.kill(paused, signal.SIGCONT)
        shown = run.wait_shown(120, t0)
        rc = run.wait(120)
        detect = None if rc is None else run.ended_at - t0
        time.sleep(3.0)  # anything still running gets the chance to write late
        late = [p for p in late_writes(out, before) if not p.endswith(".mark")]
        orphans = run.reap()
        rounds_after = checkpoint_round(ckpt)
        line = run.last_line()
        lost = int(rounds_before is None or rounds_after != rounds_before)
        ok = (
            rc not in (0, None)
            and "server" in line
            and run.one_line_error()
            and not (out / "metrics.json").exists()
        )
        others = [ln for ln in run.stderr_text().splitlines() if ln.strip()][:-1]
        return {
            **case,
            "expected": (
                "exit != 0 within seconds, one line naming the server, no traceback or C++ "
                f"frame; sfl-checkpoint.pt still holds round {PHASE_ROUND}; nothing written after"
            ),
            "observed": f"exit {rc}: {line[:240]}; checkpoint rounds {rounds_before} -> "
            f"{rounds_after}",
            "other_stderr_lines": others[:6],
            "held": bool(ok),
            "detect_s": None if detect is None else round(detect, 2),
            "error_shown_s": None if shown is None else round(shown, 2),
            "orphans": orphans,
            "orphan_processes": run.orphans,
            "others_gone_after_s": run.gone_after_s,
            "lost_files": lost,
            "late_writes": len(late),
            "late_files": late,
            "litter": len(litter(out)),
            "tracebacks": run.tracebacks(),
        }
    finally:
        run.reap()


def ctrl_z_case(data: Path, work: Path, mode: str) -> dict[str, Any]:
    """Ctrl-Z (SIGTSTP to the job's process group), stopped past the heartbeat limit, then
    ``fg`` (SIGCONT): every process stops, and the run then completes as if never stopped
    (``mode``: ``sfl`` for ``sfl run --mode dist``, ``ddp`` for ``train --workers 2``).

    Held: every tagged process in state T within 10 s (detection: the seconds until the
    last one stopped), none lost or named silent after the resume, exit 0 with a
    result, nothing on stderr, no orphans.
    """
    name = f"{mode}-ctrl-z-fg"
    out = work / name
    # The default --timeout (sfl run 60 s, train 120 s): the stop outlasts the heartbeat
    # limit (30 s), not --timeout (gloo's timers run on while a process is stopped, so
    # a longer stop drops the peers whose messages were awaited, as if they had hung).
    if mode == "sfl":
        args = sfl_args(data, out, "--rounds", "4", "--timeout", "60")
        under_way = lambda: round_started(out, 2)  # noqa: E731 - one use
        stop_s = heartbeat_limit(60.0) + 3
    else:
        args = ddp_args(data, out, "--epochs", "3", "--timeout", "120")
        under_way = (out / "checkpoint.pt").is_file
        stop_s = heartbeat_limit(120.0) + 3
    run = Launch(args, out, cwd=work, job=True)
    case: dict[str, Any] = {"name": name}
    try:
        if not wait_for(under_way, 240, 0.1):
            run.proc.kill()
            return {**case, "held": False, "observed": "never under way: " + run.last_line()}
        pids = tagged(run.tag)
        t0 = time.monotonic()
        os.killpg(run.proc.pid, signal.SIGTSTP)
        stopped = wait_for(lambda: all(state(p) in ("T", "-", "Z") for p in pids), 10, 0.02)
        detect = time.monotonic() - t0 if stopped else None
        states = "".join(state(p) for p in pids)
        time.sleep(stop_s)  # longer than the heartbeat limit and the drop timeout
        still = "".join(state(p) for p in pids)
        os.killpg(run.proc.pid, signal.SIGCONT)
        rc = run.wait(300)
        orphans = run.reap()
        text = run.stderr_text().strip()
        observed = (
            f"states after Ctrl-Z {states!r}, after {stop_s:g} s {still!r}; exit {rc}: "
            f"{run.last_line()[:200]}"
        )
        ok = bool(stopped) and set(still) <= {"T", "-", "Z"} and rc == 0 and not text
        if mode == "sfl" and rc == 0 and (out / "metrics.json").is_file():
            rounds = json.loads((out / "metrics.json").read_text())["rounds"]
            parts = [r.get("detail", r).get("participants") for r in rounds]
            lost = [r.get("detail", r).get("lost") for r in rounds]
            ok = ok and parts == [SFL_CLIENTS] * len(rounds) and not any(lost)
            observed += f"; participants per round {parts}, lost {lost}"
        elif mode == "ddp":
            ok = ok and (out / "metrics.json").is_file()
        result = out / ("model.pt" if mode == "sfl" else "weights.safetensors")
        lost_files = 0 if rc != 0 or (result.is_file() and result.stat().st_size) else 1
        return {
            **case,
            "expected": (
                "every process stopped (state T) within seconds and still stopped past the "
                "heartbeat limit; after fg the run completes: exit 0, a result, every client "
                "in every round, nothing on stderr"
            ),
            "observed": observed,
            "held": ok,
            "detect_s": None if detect is None else round(detect, 2),
            "orphans": orphans,
            "orphan_processes": run.orphans,
            "others_gone_after_s": run.gone_after_s,
            "lost_files": lost_files,
            "late_writes": 0,
            "tracebacks": run.tracebacks(),
        }
    finally:
        run.reap()


def sfl_resume_case(data: Path, work: Path) -> dict[str, Any]:
    """SIGKILL the server in round 3 of 5, ``--resume``: the uninterrupted run's weights?"""
    case: dict[str, Any] = {"name": "sfl-server-SIGKILL-resume"}
    extra = ("--rounds", "5")
    whole = work / "sfl-resume-whole"
    ref = Launch(sfl_args(data, whole, *extra), whole, cwd=work)
    ref_rc = ref.wait(600)
    ref.reap()
    out = work / "sfl-resume"
    run = Launch(sfl_args(data, out, *extra), out, cwd=work)
    try:
        if ref_rc != 0 or not wait_for(lambda: round_started(out, 3), 240, 0.1):
            return {**case, "held": False, "observed": f"reference exit {ref_rc}; no round 3"}
        server = holding((out / "logs" / "server.log").resolve(), run.tag)
        t0 = time.monotonic()
        os.kill(server, signal.SIGKILL)
        rc = run.wait(120)
        detect = None if rc is None else run.ended_at - t0
        orphans = run.reap()
    finally:
        run.reap()
    again = Launch([*sfl_args(data, out, *extra), "--resume"], out, cwd=work)
    rc2 = again.wait(600)
    orphans += again.reap()
    same = False
    if rc2 == 0:
        a = torch.load(whole / "model.pt", weights_only=True)
        b = torch.load(out / "model.pt", weights_only=True)
        same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return {
        **case,
        "expected": "kill: exit != 0, one line; --resume: exit 0, the uninterrupted weights",
        "observed": f"kill: exit {rc}: {run.last_line()[:160]}; resume: exit {rc2}, "
        f"weights {'equal' if same else 'differ'} ({again.last_line()[:120]})",
        "held": bool(rc not in (0, None) and rc2 == 0 and same and not orphans),
        "detect_s": None if detect is None else round(detect, 2),
        "orphans": orphans,
        "orphan_processes": run.orphans,
        "others_gone_after_s": run.gone_after_s,
        "lost_files": 0 if rc2 == 0 and loadable(out / "model.pt") else 1,
        "late_writes": 0,
        "tracebacks": run.tracebacks() + again.tracebacks(),
    }


def judge_sfl(role: str, sig: signal.Signals, rc, run: Launch, out: Path) -> dict[str, Any]:
    line = run.last_line()
    observed = f"exit {rc}: {line[:240]}"
    metrics = out / "metrics.json"
    lost_files = 0
    if role == "launcher" and sig == signal.SIGKILL:
        expected = (
            "every role process gone within seconds, nothing written after, and nothing "
            "on stderr (the roles leave silently: no traceback, no C++ frame)"
        )
        text = run.stderr_text()
        ok = not metrics.exists() and not text.strip()
        if text.strip():
            observed += f"; stderr: {' | '.join(text.strip().splitlines()[:3])[:240]}"
    elif role == "launcher":
        expected = f"exit != 0 within seconds, one line 'stopped by {sig.name}', nothing after"
        ok = rc not in (0, None) and "stopped by" in line and not metrics.exists()
        ok = ok and run.one_line_error()
    elif role == "server" and sig == signal.SIGSTOP:
        expected = "exit != 0 within the heartbeat timeout, one line naming the silent server"
        ok = rc not in (0, None) and "server (rank 0) sent no heartbeat" in line
        ok = ok and run.one_line_error() and not metrics.exists()
    elif role == "server":
        expected = "exit != 0 within seconds, one line naming the server, no orphans"
        ok = rc not in (0, None) and "server" in line and run.one_line_error()
        ok = ok and not metrics.exists()
    elif role.startswith("client"):
        index = int(role.split("-")[1])
        expected = (
            f"run completes (exit 0); client {index} lost, participants "
            f"{SFL_CLIENTS - 1} of {SFL_CLIENTS} from then on"
        )
        ok = False
        if rc == 0 and metrics.is_file():
            hist = json.loads(metrics.read_text())["rounds"]
            last = hist[-1].get("detail", hist[-1])
            ok = last.get("lost") == [index] and last.get("participants") == SFL_CLIENTS - 1
            observed += (
                f"; last round lost {last.get('lost')}, participants {last.get('participants')}"
            )
        if rc == 0:
            lost_files = sum(not (out / f).is_file() for f in ("metrics.json", "model.pt"))
            lost_files += 0 if loadable(out / "model.pt") else 1
    else:  # an aggregator: its clients are reassigned (issue 14 item 3)
        index = int(role.split("-")[1])
        expected = (
            f"run completes (exit 0); aggregator {index} lost, its clients reassigned to the "
            f"other, all {SFL_CLIENTS} clients in the last round"
        )
        if sig == signal.SIGSTOP:
            expected += "; the launcher names the silent aggregator"
        ok = False
        if rc == 0 and metrics.is_file():
            data = json.loads(metrics.read_text())
            last = data["rounds"][-1].get("detail", data["rounds"][-1])
            moves = data.get("extra", {}).get("reassignments", [])
            moved = sorted({m["client"] for m in moves if m["from"] == index})
            ok = (
                last.get("lost_aggregators") == [index]
                and last.get("participants") == SFL_CLIENTS
                and moved == list(range(index, SFL_CLIENTS, SFL_AGGS))
            )
            observed += (
                f"; last round participants {last.get('participants')}, lost aggregators "
                f"{last.get('lost_aggregators')}; moved {moved}"
            )
            if sig == signal.SIGSTOP:
                named = run.stderr_text().count(f"aggregator {index} (rank {1 + index}) sent no")
                ok = ok and named == 1
                observed += f"; launcher named it: {named == 1}"
        if rc == 0:
            lost_files = sum(not (out / f).is_file() for f in ("metrics.json", "model.pt"))
            lost_files += 0 if loadable(out / "model.pt") else 1
    ok = ok and run.tracebacks() == 0
    return {
        "expected": expected,
        "observed": observed,
        "held": bool(ok),
        "lost_files": lost_files,
        "tracebacks": run.tracebacks(),
    }


# --- data-parallel training (train --workers 2) -----------------------------------------


def ddp_args(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        str(data),
        "--model",
        "cnn",
        "-o",
        str(out),
        "--workers",
        "2",
        "--epochs",
        "40",
        "--batch-size",
        "16",
        "--threads",
        "1",
        "--timeout",
        str(DDP_TIMEOUT_S),
        "-q",
        *extra,
    ]


def ddp_case(data: Path, work: Path, target: str, sig: signal.Signals) -> dict[str, Any]:
    """``target``: launcher or worker (the last worker started)."""
    out = work / f"ddp-{target}-{sig.name}"
    run = Launch(ddp_args(data, out), out, cwd=work)
    case: dict[str, Any] = {"name": f"ddp-{target}-{sig.name}"}
    ckpt = out / "checkpoint.pt"
    try:
        if not wait_for(ckpt.is_file, 240, 0.2):
            run.proc.kill()
            return {**case, "held": False, "observed": "no checkpoint: " + run.last_line()}
        time.sleep(0.5)
        if target == "launcher":
            pid = run.proc.pid
        else:
            # The launcher's spawned workers (RANK is set after exec, so not in environ):
            # the last one started, normally rank 1.
            workers = [
                p
                for p in tagged(run.tag)
                if _ppid(p) == run.proc.pid
                and b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
            ]
            pid = max(workers, default=None)
        if pid is None:
            return {**case, "held": False, "observed": "no DDP worker found"}
        before = snapshot(out)
        t0 = time.monotonic()
        os.kill(pid, sig)
        if target == "launcher" and sig == signal.SIGKILL:
            gone = wait_for(lambda: not tagged(run.tag), 60, 0.05)
            rc, detect = None, (time.monotonic() - t0 if gone else None)
            run.wait(5)
        else:
            rc = run.wait(180)
            detect = None if rc is None else run.ended_at - t0
        line = run.last_line()
        time.sleep(2.0)
        # A stopped run may finish the checkpoint it was writing, but writes no result.
        late = [p for p in late_writes(out, before) if not p.endswith("checkpoint.pt")]
        orphans = run.reap()
        lost = 0 if loadable(ckpt) else 1
        if target == "launcher" and sig == signal.SIGKILL:
            expected = (
                "both workers gone within seconds (parent-death signal), nothing on stderr "
                "(no traceback, no C++ frame)"
            )
            ok = detect is not None and not run.stderr_text().strip()
        elif sig == signal.SIGSTOP:
            expected = (
                f"exit != 0 within --timeout {DDP_TIMEOUT_S:g} s + a margin, one line naming "
                "the worker with no heartbeat"
            )
            ok = rc not in (0, None) and detect is not None and detect < 60
            ok = ok and "heartbeat" in line and run.one_line_error()
        else:
            expected = "exit != 0 within seconds with one line; checkpoint.pt loadable"
            ok = rc not in (0, None) and run.one_line_error()
        return {
            **case,
            "expected": expected,
            "observed": f"exit {rc}: {line[:240]}",
            "held": bool(ok and not orphans and not lost and not late),
            "detect_s": None if detect is None else round(detect, 2),
            "orphans": orphans,
            "orphan_processes": run.orphans,
            "others_gone_after_s": run.gone_after_s,
            "lost_files": lost,
            "late_writes": len(late),
            "litter": len(litter(out)),
            "tracebacks": run.tracebacks(),
        }
    finally:
        run.reap()


# --- full disk, read-only output ---------------------------------------------------------


@contextlib.contextmanager
def tmpfs(size: str, *, read_only: bool = False):
    mnt = Path(tempfile.mkdtemp(prefix="flowsplit-tmpfs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    try:
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def disk_case(data: Path, work: Path, command: str, kind: str) -> dict[str, Any]:
    """``command``: sfl (simulated), sfl-dist, train or prepare; ``kind``: full (64 KiB
    left), nospace (not one block left: the filler takes every free byte) or readonly.

    Held: a one-line error naming the output and the OS's reason, no traceback (the
    dist roles included), no orphan, the user's file intact and no temporary litter.
    """
    case: dict[str, Any] = {"name": f"{command}-{kind}-output"}
    if os.geteuid() != 0:
        return {**case, "held": False, "observed": "not built here: needs root to mount a tmpfs"}
    with tmpfs("2m", read_only=kind == "readonly") as mnt:
        keep = mnt / "keep.bin"
        if kind in ("full", "nospace"):  # a file of the user's, then fill the rest
            keep.write_bytes(os.urandom(1 << 20))
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            spare = 64 << 10 if kind == "full" else 0
            # Unbuffered, so nothing is left to flush on close; nospace: until refused.
            with open(mnt / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
                fh.write(b"\0" * max(0, free - spare))
                while spare == 0:
                    fh.write(b"\0" * 4096)
            case["free_bytes"] = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        out = mnt / "run"
        if command in ("sfl", "sfl-dist"):
            args = [
                "sfl",
                "run",
                str(data),
                "-o",
                str(out),
                "--model",
                "cnn",
                "--clients",
                "2",
                "--aggregators",
                "1",
                "--rounds",
                "1",
                "--quiet",
            ]
            if command == "sfl-dist":  # the roles write sfl-checkpoint.pt each round
                args += ["--mode", "dist"]
        elif command == "prepare":  # the shipped lab capture: ~4 MB of views, 2 MB of disk
            captures = Path(__file__).resolve().parents[1] / "demo" / "captures"
            args = ["prepare", str(captures), "-o", str(out), "--quiet"]
        else:
            args = [
                "train",
                str(data),
                "--model",
                "cnn",
                "-o",
                str(out),
                "--epochs",
                "1",
                "--batch-size",
                "64",
                "-q",
            ]
        digest = keep.read_bytes() if keep.exists() else None
        t0 = time.monotonic()
        run = Launch(args, out, cwd=work)
        rc = run.wait(300)
        detect = None if rc is None else run.ended_at - t0
        line = run.last_line()
        orphans = run.reap()
        lost = int(digest is not None and (not keep.is_file() or keep.read_bytes() != digest))
        left = litter(mnt)
        errno_word = "Read-only file system" if kind == "readonly" else "No space left"
        ok = (
            rc not in (0, None)
            and line.startswith("flowsplit: error:")
            and "internal error" not in line
            and errno_word in line
            and str(mnt) in line  # names the path
            and run.tracebacks() == 0
        )
        return {
            **case,
            "expected": f"exit != 0, one line naming the path and '{errno_word}', no litter",
            "observed": f"exit {rc}: {line[:240]}",
            "held": bool(ok and not orphans and not lost and not left),
            "detect_s": None if detect is None else round(detect, 2),
            "orphans": orphans,
            "orphan_processes": run.orphans,
            "others_gone_after_s": run.gone_after_s,
            "lost_files": lost,
            "late_writes": 0,
            "litter": len(left),
            "litter_files": left,
            "tracebacks": run.tracebacks(),
        }


# --- main --------------------------------------------------------------------------------


def write_dataset(path: Path, n: int) -> Path:
    from benchmarks.ddp_overhead import write_synthetic_dataset

    return write_synthetic_dataset(path, n)


def all_cases(data: Path, work: Path) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):
        cases.append(
            (f"sfl-launcher-{sig.name}", lambda s=sig: sfl_case(data, work, "launcher", s))
        )
    for role in ("server", "aggregator-1", "client-2"):
        for sig in (signal.SIGKILL, signal.SIGTERM):
            cases.append(
                (f"sfl-{role}-{sig.name}", lambda r=role, s=sig: sfl_case(data, work, r, s))
            )
    for role in ("client-2", "aggregator-1", "server"):
        cases.append(
            (f"sfl-{role}-SIGSTOP", lambda r=role: sfl_case(data, work, r, signal.SIGSTOP))
        )
    cases.append(("sfl-server-SIGKILL-resume", lambda: sfl_resume_case(data, work)))
    for point in PHASES:
        cases.append(
            (f"sfl-server-SIGTERM-at-{point}", lambda pt=point: sfl_phase_case(data, work, pt))
        )
    for mode in ("sfl", "ddp"):
        cases.append((f"{mode}-ctrl-z-fg", lambda m=mode: ctrl_z_case(data, work, m)))
    for target, sig in (
        ("worker", signal.SIGKILL),
        ("worker", signal.SIGTERM),
        ("worker", signal.SIGSTOP),
        ("launcher", signal.SIGKILL),
        ("launcher", signal.SIGTERM),
    ):
        cases.append(
            (f"ddp-{target}-{sig.name}", lambda t=target, s=sig: ddp_case(data, work, t, s))
        )
    for command in ("sfl", "sfl-dist", "train", "prepare"):
        for kind in ("full", "nospace", "readonly"):
            cases.append(
                (f"{command}-{kind}-output", lambda c=command, k=kind: disk_case(data, work, c, k))
            )
    return cases


QUICK = (
    "sfl-launcher-SIGKILL",
    "sfl-server-SIGTERM-at-download",
    "sfl-server-SIGTERM-at-aggregator-step",
    "sfl-server-SIGTERM-at-checkpoint",
    "sfl-ctrl-z-fg",
    "ddp-launcher-SIGKILL",
    "ddp-ctrl-z-fg",
    "sfl-dist-nospace-output",
)
"""``--quick``: one case of each kind (a few minutes)."""

DETECT_LIMIT_S = 60.0


def strict(case: dict[str, Any]) -> dict[str, Any]:
    """Held only if the case's own check held and nothing was harmed: 0 orphans, 0 lost
    files, 0 late writes, 0 tracebacks or C++ frames, a detection under 60 s (a case
    that reports none did not detect its fault). The reasons go to ``not_held``."""
    why = [] if case.get("held") else ["its check failed (see observed)"]
    for key in ("orphans", "lost_files", "late_writes", "tracebacks"):
        if case.get(key) is None:
            why.append(f"{key} not measured")
        elif case[key]:
            why.append(f"{key} {case[key]}")
    detect = case.get("detect_s")
    if detect is None:
        why.append("no detection")
    elif detect >= DETECT_LIMIT_S:
        why.append(f"detection {detect} s >= {DETECT_LIMIT_S:g} s")
    case["held"] = not why
    case["not_held"] = why
    return case


def conditions() -> dict[str, Any]:
    """The machine's state as the suite runs (it may be shared: times are upper bounds)."""
    return {
        "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "niceness": os.nice(0),
        "root": os.geteuid() == 0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument(
        "--only",
        default="",
        help="run the cases whose name contains one of these (comma-separated)",
    )
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    p.add_argument("--rows", type=int, default=300, help="synthetic dataset rows")
    args = p.parse_args(argv)
    os.environ.update(SINGLE_THREAD_ENV)
    wanted = [w for w in args.only.split(",") if w]
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    before = conditions()
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="flowsplit-faults-") as tmp:
        work = Path(tmp)
        data = write_dataset(work / "data", args.rows)
        for name, fn in all_cases(data, work):
            if wanted and not any(w in name for w in wanted):
                continue
            if args.quick and name not in QUICK:
                continue
            start = time.monotonic()
            loads.append(os.getloadavg()[0])
            try:
                case = fn()
            except Exception as exc:  # noqa: BLE001 - a broken case is reported, not fatal
                case = {"name": name, "held": False, "observed": f"case failed: {exc!r}"}
            case.setdefault("detect_s", None)
            case.setdefault("orphans", None)
            case.setdefault("lost_files", None)
            case.setdefault("late_writes", None)
            case.setdefault("tracebacks", None)
            case["case_wall_s"] = round(time.monotonic() - start, 1)
            results.append(strict(case))
            print(
                json.dumps(
                    {
                        k: case.get(k)
                        for k in (
                            "name",
                            "held",
                            "detect_s",
                            "orphans",
                            "lost_files",
                            "late_writes",
                            "tracebacks",
                            "not_held",
                            "observed",
                        )
                    }
                ),
                flush=True,
            )
            summary = summarise(results, before, loads, time.monotonic() - started)
            write_json(
                args.out, {"summary": summary, "cases": results, "environment": environment()}
            )
    summary = summarise(results, before, loads, time.monotonic() - started)
    print(json.dumps(summary))
    print(f"{summary['held']} of {summary['cases']} cases held; wrote {args.out}")
    return 0 if summary["held"] == summary["cases"] else 1


def summarise(
    results: list[dict[str, Any]], before: dict[str, Any], loads: list[float], wall: float
) -> dict[str, Any]:
    detects = [c["detect_s"] for c in results if c.get("detect_s") is not None]
    return {
        "cases": len(results),
        "held": sum(bool(c["held"]) for c in results),
        "not_held": [c["name"] for c in results if not c["held"]],
        "max_detect_s": max(detects, default=None),
        "orphans": sum(c.get("orphans") or 0 for c in results),
        "lost_files": sum(c.get("lost_files") or 0 for c in results),
        "tracebacks": sum(c.get("tracebacks") or 0 for c in results),
        "wall_s": round(wall, 1),
        "conditions_at_start": before,
        "load_avg_1min_at_each_case": {
            "min": min(loads, default=None),
            "max": max(loads, default=None),
        },
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


if __name__ == "__main__":
    sys.exit(main())
