"""The host side of a testbed: names, ``ip``/``tc`` calls, cgroups, and removing leftovers.

Every object a testbed makes carries its instance tag ``fstb-<owner pid>-<n>``:
namespaces ``<tag>-r`` (the router) and ``<tag>-<k>`` (node ``k``), the cgroup
``<tag>`` with one child per node. Interfaces live inside the namespaces (made there
directly, never in the host's), so they go when their namespace goes. A state file
``/run/flowsplit-testbed/<tag>.json`` records the owner's pid and start time, so
:func:`clean_leftovers` can tell a dead testbed from a live one whose owner pid was
reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from flowsplit.errors import FlowsplitError
from flowsplit.util import pid_alive

PREFIX = "fstb-"
NETNS_DIR = Path("/run/netns")
STATE_DIR = Path("/run/flowsplit-testbed")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")
TESTBED_SHARES = 262144
"""cpu.shares of a testbed's cgroup (v1's maximum, 256x the default; v2: weight 10000,
100x): on a machine other jobs load, the quota'd nodes still get their quota (a quota
is a ceiling, shares are the claim). With 10x, 27 runnable tasks on 2 cores left a
testbed about half a core in all, less than 4 nodes' quotas of 0.2."""


class TestbedError(FlowsplitError):
    """The testbed cannot be built or used here (no root, no ``ip``, no cgroup)."""

    __test__ = False


def missing_requirement() -> str:
    """Why a testbed cannot be built on this machine, in one line ('' when it can)."""
    if os.geteuid() != 0:
        return "the testbed needs root (network namespaces, tc, cgroups); run it as root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the testbed needs the {tool} command (iproute2), not found on PATH"
    if cgroup_flavour() is None:
        return "the testbed needs the cgroup cpu controller (v1 at /sys/fs/cgroup/cpu or v2)"
    return ""


def require() -> None:
    """Raise :class:`TestbedError` (one line) if a testbed cannot be built here."""
    reason = missing_requirement()
    if reason:
        raise TestbedError(reason)


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command; on failure raise :class:`TestbedError` with its stderr."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    if check and proc.returncode:
        raise TestbedError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def cgroup_flavour() -> str | None:
    """``v1`` (cpu controller mounted on its own), ``v2`` (unified, cpu enabled) or None."""
    if (CGROUP_V1_CPU / "cpu.cfs_quota_us").is_file():
        return "v1"
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        return "v2"
    return None


def process_start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot; None if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


alive = pid_alive
"""Whether a process runs (a zombie does not): :func:`flowsplit.util.pid_alive`."""


@dataclass(frozen=True)
class CpuGroup:
    """A testbed's cgroup: a parent with high shares, one child per node with a quota."""

    root: Path
    flavour: str

    @classmethod
    def create(cls, tag: str) -> CpuGroup:
        flavour = cgroup_flavour()
        if flavour is None:
            raise TestbedError("no cgroup cpu controller")
        base = CGROUP_V1_CPU if flavour == "v1" else CGROUP_V2
        root = base / tag
        root.mkdir()
        group = cls(root, flavour)
        if flavour == "v1":
            (root / "cpu.shares").write_text(str(TESTBED_SHARES))
        else:
            with contextlib.suppress(OSError):  # the parent may have cpu enabled already
                (base / "cgroup.subtree_control").write_text("+cpu")
            (root / "cpu.weight").write_text("10000")
            (root / "cgroup.subtree_control").write_text("+cpu")
        return group

    def add_node(self, name: str, quota_us: int | None, period_us: int) -> Path:
        path = self.root / name
        path.mkdir()
        self.set_quota(name, quota_us, period_us)
        return path

    def set_quota(self, name: str, quota_us: int | None, period_us: int) -> None:
        path = self.root / name
        if self.flavour == "v1":
            (path / "cpu.cfs_period_us").write_text(str(period_us))
            (path / "cpu.cfs_quota_us").write_text(str(quota_us if quota_us else -1))
        else:
            (path / "cpu.max").write_text(f"{quota_us if quota_us else 'max'} {period_us}")

    def throttled(self, name: str) -> dict[str, int]:
        """The node's cpu.stat counters (periods, throttled periods and time)."""
        out = {}
        for line in (self.root / name / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
        return out


def cgroup_pids(path: Path) -> list[int]:
    """Pids in cgroup ``path`` and all its children."""
    pids: list[int] = []
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def kill_cgroup(path: Path, timeout_s: float = 10.0) -> None:
    """SIGKILL every process of cgroup ``path`` until none is left (or ``timeout_s``)."""
    end = time.monotonic() + timeout_s
    while True:
        pids = cgroup_pids(path)
        if not pids or time.monotonic() > end:
            return
        if os.getpid() in pids:  # a controller still inside: never kill ourselves
            leave_cgroup(path)
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def own_cgroup(flavour: str) -> Path:
    """The cpu cgroup this process is in (v1: the ``cpu`` hierarchy's; v2: the unified)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if (flavour == "v1" and "cpu" in controllers.split(",")) or (
            flavour == "v2" and controllers == ""
        ):
            base = CGROUP_V1_CPU if flavour == "v1" else CGROUP_V2
            return base / rel.lstrip("/")
    return CGROUP_V1_CPU if flavour == "v1" else CGROUP_V2


def leave_cgroup(path: Path) -> None:
    """Move this process from cgroup ``path`` back to the hierarchy's root."""
    base = CGROUP_V1_CPU if path.is_relative_to(CGROUP_V1_CPU) else CGROUP_V2
    (base / "cgroup.procs").write_text(str(os.getpid()))


def remove_cgroup(path: Path) -> None:
    """Kill its processes, then remove the cgroup's directories, children first."""
    if not path.is_dir():
        return
    kill_cgroup(path)
    dirs = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for d in [*dirs, path]:
        for _ in range(50):  # a killed process leaves its cgroup a moment after it dies
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def namespace_pids(ns: str) -> list[int]:
    proc = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def remove_namespace(ns: str) -> None:
    """Kill what still runs in namespace ``ns``, then delete it (with its interfaces)."""
    for pid in namespace_pids(ns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    sh("ip", "netns", "del", ns, check=False)


def instance_namespaces(tag: str) -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(tag + "-"))


def remove_instance(tag: str) -> None:
    """Remove everything of testbed ``tag``: processes, namespaces, cgroup, state file."""
    for base in (CGROUP_V1_CPU, CGROUP_V2):
        remove_cgroup(base / tag)
    for ns in instance_namespaces(tag):
        remove_namespace(ns)
    (STATE_DIR / f"{tag}.json").unlink(missing_ok=True)


def write_state(tag: str, info: dict) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = STATE_DIR / f"{tag}.json"
    path.write_text(json.dumps(info))


def owner_alive(tag: str) -> bool:
    """Whether testbed ``tag``'s owner still runs (same pid and start time)."""
    try:
        pid = int(tag[len(PREFIX) :].split("-")[0])
    except ValueError:
        return False
    try:
        state = json.loads((STATE_DIR / f"{tag}.json").read_text())
    except (OSError, ValueError):
        state = {}
    if not alive(pid):
        return False
    started = state.get("owner_start")
    return started is None or process_start_time(pid) == started


def find_testbeds() -> set[str]:
    """Tags of every testbed with something left on this machine."""
    tags: set[str] = set()
    if NETNS_DIR.is_dir():
        for p in NETNS_DIR.iterdir():
            if p.name.startswith(PREFIX):
                tags.add(p.name.rsplit("-", 1)[0])
    for base in (CGROUP_V1_CPU, CGROUP_V2):
        if base.is_dir():
            tags.update(p.name for p in base.iterdir() if p.name.startswith(PREFIX) and p.is_dir())
    if STATE_DIR.is_dir():
        tags.update(p.stem for p in STATE_DIR.glob(f"{PREFIX}*.json"))
    return tags


def clean_leftovers(*, all_testbeds: bool = False) -> list[str]:
    """Remove the testbeds whose owner is gone (``all_testbeds``: every one); their tags."""
    removed = []
    for tag in sorted(find_testbeds()):
        if all_testbeds or not owner_alive(tag):
            remove_instance(tag)
            removed.append(tag)
    return removed
