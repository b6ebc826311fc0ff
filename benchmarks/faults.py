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

Needs root for the tmpfs cases (``mount -t tmpfs -o size=2m``; unmounted after);
without it they are reported as not built. The machine this runs on may be loaded:
detection times are upper bounds.

    python benchmarks/faults.py --out faults.json [--only sfl-client]
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

PY = sys.executable
TAG = "FLOWSPLIT_FAULT_TAG"
SFL_TIMEOUT_S = 5.0
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

    def __init__(self, args: list[str], out: Path, *, cwd: Path):
        self.tag = uuid.uuid4().hex
        self.out = out
        env = {**os.environ, **SINGLE_THREAD_ENV, TAG: self.tag}
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - read after the run ends
        self.proc = subprocess.Popen(
            [PY, "-m", "flowsplit", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            start_new_session=True,
        )
        self.ended_at: float | None = None

    def wait(self, timeout: float) -> int | None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.ended_at = time.monotonic()
        return rc

    def last_line(self) -> str:
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines() if ln]
        return lines[-1] if lines else ""

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def tracebacks(self) -> int:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").count("Traceback")

    def reap(self) -> int:
        """Orphans: tagged processes alive 10 s after the launcher ended; then kill them."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        left = wait_for(lambda: not tagged(self.tag), 10.0)
        pids = [] if left else tagged(self.tag)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)


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
            "late_writes": len(late),
            "late_files": late,
            "litter": len(litter(out)),
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
        "lost_files": 0 if rc2 == 0 and loadable(out / "model.pt") else 1,
        "late_writes": 0,
    }


def judge_sfl(role: str, sig: signal.Signals, rc, run: Launch, out: Path) -> dict[str, Any]:
    line = run.last_line()
    observed = f"exit {rc}: {line[:240]}"
    metrics = out / "metrics.json"
    lost_files = 0
    if role == "launcher" and sig == signal.SIGKILL:
        expected = "every role process gone within seconds, nothing written after"
        ok = not metrics.exists()
    elif role == "launcher":
        expected = f"exit != 0 within seconds, one line 'stopped by {sig.name}', nothing after"
        ok = rc not in (0, None) and "stopped by" in line and not metrics.exists()
    elif role == "server" and sig == signal.SIGSTOP:
        expected = "exit != 0 within the heartbeat timeout, one line naming the silent server"
        ok = rc not in (0, None) and "server (rank 0) sent no heartbeat" in line
        ok = ok and run.tracebacks() == 0 and not metrics.exists()
    elif role == "server":
        expected = "exit != 0 within seconds, one line naming the server, no orphans"
        ok = rc not in (0, None) and "server" in line and run.tracebacks() == 0
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
    return {"expected": expected, "observed": observed, "held": bool(ok), "lost_files": lost_files}


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
            expected = "both workers gone within seconds (parent-death signal)"
            ok = detect is not None
        elif sig == signal.SIGSTOP:
            expected = (
                f"exit != 0 within --timeout {DDP_TIMEOUT_S:g} s + a margin, one line naming "
                "the worker with no heartbeat"
            )
            ok = rc not in (0, None) and detect is not None and detect < 60
            ok = ok and "heartbeat" in line and "internal error" not in line
        else:
            expected = "exit != 0 within seconds with one line; checkpoint.pt loadable"
            ok = rc not in (0, None) and "Traceback" not in line and "internal error" not in line
        return {
            **case,
            "expected": expected,
            "observed": f"exit {rc}: {line[:240]}",
            "held": bool(ok and not orphans and not lost and not late),
            "detect_s": None if detect is None else round(detect, 2),
            "orphans": orphans,
            "lost_files": lost,
            "late_writes": len(late),
            "litter": len(litter(out)),
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
    """``command``: sfl (simulated), sfl-dist, train or prepare; ``kind``: full or readonly.

    Held: a one-line error naming the output and the OS's reason, no traceback (the
    dist roles included), no orphan, the user's file intact and no temporary litter.
    """
    case: dict[str, Any] = {"name": f"{command}-{kind}-output"}
    if os.geteuid() != 0:
        return {**case, "held": False, "observed": "not built here: needs root to mount a tmpfs"}
    with tmpfs("2m", read_only=kind == "readonly") as mnt:
        keep = mnt / "keep.bin"
        if kind == "full":  # a file of the user's, then fill all but 64 KiB
            keep.write_bytes(os.urandom(1 << 20))
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            (mnt / "filler").write_bytes(b"\0" * max(0, free - (64 << 10)))
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
        errno_word = "No space left" if kind == "full" else "Read-only file system"
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
            "lost_files": lost,
            "late_writes": 0,
            "litter": len(left),
            "litter_files": left,
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
        for kind in ("full", "readonly"):
            cases.append(
                (f"{command}-{kind}-output", lambda c=command, k=kind: disk_case(data, work, c, k))
            )
    return cases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--rows", type=int, default=300, help="synthetic dataset rows")
    args = p.parse_args(argv)
    os.environ.update(SINGLE_THREAD_ENV)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="flowsplit-faults-") as tmp:
        work = Path(tmp)
        data = write_dataset(work / "data", args.rows)
        for name, fn in all_cases(data, work):
            if args.only and args.only not in name:
                continue
            start = time.monotonic()
            try:
                case = fn()
            except Exception as exc:  # noqa: BLE001 - a broken case is reported, not fatal
                case = {"name": name, "held": False, "observed": f"case failed: {exc!r}"}
            case.setdefault("detect_s", None)
            case.setdefault("orphans", None)
            case.setdefault("lost_files", None)
            case["case_wall_s"] = round(time.monotonic() - start, 1)
            results.append(case)
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
                            "observed",
                        )
                    }
                ),
                flush=True,
            )
            write_json(args.out, {"cases": results, "environment": environment()})
    held = sum(bool(c["held"]) for c in results)
    print(f"{held} of {len(results)} cases held; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
