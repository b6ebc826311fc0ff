"""A built testbed: addresses reachable, links at their rates, CPU at its quota (root)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowsplit.testbed import NodeSpec, Testbed, TestbedSpec, find_testbeds

from .conftest import leftovers_of, needs_testbed

pytestmark = needs_testbed


def goodput_mbit(tb: Testbed, a: str, b: str, n_bytes: int) -> float:
    """Payload Mbit/s of one TCP transfer of ``n_bytes`` from node ``a`` to node ``b``."""
    srv = tb.socket_in(b, kind=socket.SOCK_STREAM)
    srv.bind((tb.nodes[b].address, 0))
    srv.listen()
    cli = tb.socket_in(a, kind=socket.SOCK_STREAM)
    cli.settimeout(20)
    cli.connect(srv.getsockname())
    conn, _ = srv.accept()
    got = [0]

    def read() -> None:
        while data := conn.recv(1 << 20):
            got[0] += len(data)

    reader = threading.Thread(target=read)
    reader.start()
    # The first 64 KB fill buffers and the token bucket; time the rest.
    cli.sendall(b"x" * 65536)
    while got[0] < 65536:
        time.sleep(0.001)
    start = time.perf_counter()
    cli.sendall(b"x" * n_bytes)
    cli.close()
    reader.join(30)
    took = time.perf_counter() - start
    conn.close()
    srv.close()
    assert got[0] == n_bytes + 65536
    return n_bytes * 8 / took / 1e6


def test_links_run_at_their_rates_per_destination():
    # Prepare: a -> b at 40 Mbit/s, a -> c at 10, everything else unshaped.
    spec = TestbedSpec(
        (NodeSpec("a", rates={"b": 40, "c": 10}), NodeSpec("b"), NodeSpec("c")), name="rates"
    )
    with Testbed(spec) as tb:
        # Execute
        ab = goodput_mbit(tb, "a", "b", 2_000_000)
        ac = goodput_mbit(tb, "a", "c", 600_000)
        ba = goodput_mbit(tb, "b", "a", 4_000_000)
        rtt = tb.measure_rtt("a", "b", count=5)
    # Assert: TCP payload over 1,448 of every 1,514 bytes on the wire (and a few ACKs).
    payload_share = 1448 / 1514
    assert ab == pytest.approx(40 * payload_share, rel=0.1)
    assert ac == pytest.approx(10 * payload_share, rel=0.1)
    assert ba > 200  # unshaped direction: far above any shaped rate
    assert 0 < rtt < 0.005  # no latency emulated: a veth and a bridge


def test_cluster_node_gets_its_cpu_quota_and_nothing_is_left(tmp_path: Path):
    spec = TestbedSpec.cluster(2, NodeSpec("node", cpu=0.2, mbit=100))
    home = Path("/proc/self/cgroup").read_text()
    with Testbed(spec) as tb:
        tag = tb.tag
        tb.prioritise_controller()  # this process moves in; close() moves it back
        assert tag in Path("/proc/self/cgroup").read_text()
        assert tb.nodes["node1"].address == "10.233.0.2"
        busy = "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass\nprint(time.process_time())"
        proc = tb.spawn("node1", [sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
        cpu_s = float(proc.communicate(timeout=20)[0])
        stat = tb.cpu_stat("node1")
        env = tb.rank_env("node1")
    # 1 s of wall time at 0.2 core: at most ~0.2 s of CPU (interpreter start included,
    # which runs under the same quota); on a loaded machine possibly less.
    assert 0.05 < cpu_s < 0.3
    assert stat["nr_throttled"] > 0
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "10.233.0.1"
    assert env["GLOO_SOCKET_IFNAME"] == "tb0"
    assert tag not in find_testbeds()
    assert Path("/proc/self/cgroup").read_text() == home


def test_an_exception_inside_removes_everything():
    with (
        pytest.raises(RuntimeError, match="boom"),
        Testbed(TestbedSpec.cluster(2, NodeSpec("node", mbit=10))) as tb,
    ):
        tb.spawn("node0", ["sleep", "30"])
        raise RuntimeError("boom")
    assert not leftovers_of(__import__("os").getpid())


def test_launch_runs_one_process_per_node_that_reach_each_other(tmp_path: Path):
    # Prepare: rank 0 listens on MASTER_ADDR:MASTER_PORT, rank 1 connects from its node.
    script = (
        "import os, socket\n"
        "addr, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])\n"
        "if os.environ['RANK'] == '0':\n"
        "    s = socket.create_server((addr, port)); c, peer = s.accept()\n"
        "    print('got', c.recv(100).decode(), 'from', peer[0], flush=True)\n"
        "else:\n"
        "    for _ in range(200):\n"
        "        try:\n"
        "            c = socket.create_connection((addr, port), timeout=1); break\n"
        "        except OSError:\n"
        "            import time; time.sleep(0.05)\n"
        "    c.sendall(('rank ' + os.environ['RANK'] + ' {node}').encode())\n"
    )
    with Testbed(TestbedSpec.cluster(2, NodeSpec("node", cpu=0.5, mbit=50))) as tb:
        # Execute
        procs = tb.launch(["python", "-c", script], master_port=29555, log_dir=tmp_path)
        codes = tb.wait(procs, timeout_s=20)
    # Assert: rank 1 reached rank 0 from node1's own address, through the bridge.
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()
    assert (tmp_path / "node0.log").read_text().strip() == "got rank 1 node1 from 10.233.0.2"
