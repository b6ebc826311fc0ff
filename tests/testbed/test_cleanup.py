"""A killed run under the testbed leaves no namespace, interface, qdisc, cgroup or process.

Each test starts ``flowsplit testbed run`` with two nodes running ``sleep``, then kills
something: the program in one node (a crash of the program under test), the testbed
command by SIGTERM (as Ctrl-C or a scheduler would), or the testbed command by
SIGKILL (no clean-up of its own can run: its reaper must do it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowsplit.testbed import find_testbeds
from flowsplit.testbed.system import CGROUP_V1_CPU, CGROUP_V2, NETNS_DIR, cgroup_pids

from .conftest import needs_testbed

pytestmark = [needs_testbed, pytest.mark.slow]


def host_links() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    return {link["ifname"] for link in json.loads(out.stdout)}


def host_qdisc_devices() -> set[str]:
    out = subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True, text=True, check=True)
    return {q.get("dev", "") for q in json.loads(out.stdout or "[]")}


def start_testbed() -> tuple[subprocess.Popen, str, dict[str, list[int]]]:
    """The testbed command, its tag, and the pids running in each node once both run."""
    cmd = [sys.executable, "-m", "flowsplit", "testbed", "run", "--nodes", "2", "--mbit", "10"]
    cmd += ["--cpu", "0.2", "--", "sleep", "60"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        tags = [t for t in find_testbeds() if t.startswith(f"fstb-{proc.pid}-")]
        if tags:
            group = next(
                (
                    base / tags[0]
                    for base in (CGROUP_V1_CPU, CGROUP_V2)
                    if (base / tags[0]).is_dir()
                ),
                None,
            )
            if group is not None:
                pids = {n: cgroup_pids(group / n) for n in ("node0", "node1")}
                if all(pids.values()) and all(
                    Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep")
                    for ps in pids.values()
                    for p in ps
                ):
                    return proc, tags[0], pids
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the testbed's programs did not start within 15 s")


def assert_nothing_left(tag: str, pids: dict[str, list[int]], links: set[str], qdevs: set[str]):
    deadline = time.monotonic() + 10  # the reaper may still be at work
    while tag in find_testbeds() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tag not in find_testbeds()
    assert not [p for p in NETNS_DIR.glob(f"{tag}-*")], "a namespace is left"
    assert not (CGROUP_V1_CPU / tag).exists() and not (CGROUP_V2 / tag).exists(), "a cgroup"
    for ps in pids.values():
        for pid in ps:
            assert (
                not Path(f"/proc/{pid}").exists()
                or b"sleep" not in Path(f"/proc/{pid}/cmdline").read_bytes()
            ), f"process {pid} is left"
    # The interfaces lived in the namespaces; none may have landed in the host's.
    assert not {name for name in host_links() - links if name == "tb0" or name[:1] == "n"}
    assert host_qdisc_devices() <= qdevs | host_links()


def test_a_crashed_program_ends_the_run_and_everything_goes():
    links, qdevs = host_links(), host_qdisc_devices()
    proc, tag, pids = start_testbed()
    os.kill(pids["node1"][0], signal.SIGKILL)  # the program under test dies
    _, err = proc.communicate(timeout=15)
    assert proc.returncode != 0
    assert "node1" in err and "testbed removed" in err
    assert_nothing_left(tag, pids, links, qdevs)


def test_sigterm_of_the_testbed_command_removes_everything():
    links, qdevs = host_links(), host_qdisc_devices()
    proc, tag, pids = start_testbed()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 130
    assert "stopped by SIGTERM" in err
    assert_nothing_left(tag, pids, links, qdevs)


def test_sigkill_of_the_testbed_command_is_cleaned_by_its_reaper():
    links, qdevs = host_links(), host_qdisc_devices()
    proc, tag, pids = start_testbed()
    proc.kill()
    proc.wait(5)
    assert_nothing_left(tag, pids, links, qdevs)


def test_clean_removes_a_dead_owners_testbed_only(tmp_path: Path):
    # A testbed whose owner (and reaper) died: built by a child we SIGKILL together with
    # its reaper (by their pids), as if the machine had lost both.
    code = (
        "import sys, time; from flowsplit.testbed import NodeSpec, Testbed, TestbedSpec\n"
        'tb = Testbed(TestbedSpec.cluster(2, NodeSpec("node", mbit=10))).build()\n'
        "print(tb.tag, tb._reaper.pid, flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    tag, reaper = child.stdout.readline().split()
    os.kill(int(reaper), signal.SIGKILL)
    child.kill()
    child.wait(5)
    assert tag in find_testbeds()  # the reaper was gone: it is left over
    out = subprocess.run(
        [sys.executable, "-m", "flowsplit", "testbed", "clean"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert tag in out.stdout
    assert tag not in find_testbeds()
    assert not list(NETNS_DIR.glob(f"{tag}-*"))
