"""TestbedSpec: nodes, CPU shares and link rates from a cluster or a topology (no root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.federated.system.presets import homogeneous
from flowsplit.federated.system.topology import write_topology
from flowsplit.testbed import NodeSpec, TestbedSpec, burst_bytes, missing_requirement
from flowsplit.testbed.spec import MIN_CPU


def test_cluster_nodes_share_one_rate_and_quota():
    spec = TestbedSpec.cluster(4, NodeSpec("node", cpu=0.25, mbit=100))
    assert [n.name for n in spec.nodes] == ["node0", "node1", "node2", "node3"]
    assert all(n.mbit == 100 and n.cpu == 0.25 and not n.rates for n in spec.nodes)
    # 0.25 core of a 10 ms period is 2.5 ms of CPU per period.
    assert spec.quota_us(spec.nodes[0]) == 2500
    assert spec.total_cpu == pytest.approx(1.0)


def test_topology_rates_and_cpu_ratios():
    topo = homogeneous(4, 2)
    topo = type(topo)(**{**topo.__dict__, "client_speed": np.array([1e9, 2e9, 1e9, 4e9])})
    spec = TestbedSpec.from_topology(topo, cpu_budget=1.0, max_cpu=1.0)
    names = [n.name for n in spec.nodes]
    # The dist runner's ranks: server 0, aggregators 1..A, clients after them.
    assert names[:3] == ["server", "aggregator0", "aggregator1"]
    assert names[3:] == ["client0", "client1", "client2", "client3"]
    cpu = {n.name: n.cpu for n in spec.nodes}
    # Shares keep the ratios of speeds (where no node is clamped) and fit the budget.
    if not spec.info["clamped"]:
        assert cpu["client1"] / cpu["client0"] == pytest.approx(2.0)
        assert cpu["client3"] / cpu["client0"] == pytest.approx(4.0)
    assert spec.total_cpu <= 1.0 + len(spec.info["clamped"]) * MIN_CPU + 1e-9
    # Each directed client-aggregator link at the topology's bandwidth, in Mbit/s.
    c0 = spec.node("client0")
    assert c0.rates["aggregator1"] == pytest.approx(topo.ca_bandwidth[0, 1] * 8 / 1e6)
    assert spec.node("aggregator1").rates["client0"] == c0.rates["aggregator1"]
    assert spec.node("server").rates["aggregator0"] == pytest.approx(topo.as_bandwidth[0] * 8 / 1e6)
    assert spec.info["latency_emulated"] is False


def test_speed_ratio_below_the_minimum_share_is_clamped_and_said():
    topo = homogeneous(2, 1)
    topo = type(topo)(**{**topo.__dict__, "server_speed": 1e15})
    spec = TestbedSpec.from_topology(topo, cpu_budget=1.0)
    assert set(spec.info["clamped"]) == {"aggregator0", "client0", "client1"}
    assert spec.node("client0").cpu == MIN_CPU


def test_quotas_may_not_oversubscribe_the_machine():
    cores = os.cpu_count() or 1
    with pytest.raises(ConfigError, match="add up to"):
        TestbedSpec.cluster(cores * 2 + 2, NodeSpec("node", cpu=0.5, mbit=10))


@pytest.mark.parametrize(
    "nodes, match",
    [
        ((NodeSpec("a"), NodeSpec("a")), "repeat"),
        ((NodeSpec("a", rates={"b": 10}),), "unknown"),
        ((NodeSpec("a", mbit=0),), "> 0"),
        ((NodeSpec("a", cpu=0.001),), "cpu"),
    ],
)
def test_bad_specs_say_what_is_wrong(nodes, match):
    with pytest.raises(ConfigError, match=match):
        TestbedSpec(nodes)


def test_burst_is_ten_ms_of_the_rate_at_least_16k():
    assert burst_bytes(1) == 16384
    assert burst_bytes(1000) == 1_250_000


def test_cli_show_prints_the_spec_of_a_topology(tmp_path, capsys):
    import argparse

    from flowsplit.testbed.commands import register

    # The testbed's own sub-commands (the whole CLI imports every area: slow to build).
    parser = argparse.ArgumentParser(prog="flowsplit")
    register(parser.add_subparsers())
    path = write_topology(homogeneous(3, 1), tmp_path / "topo.toml")
    args = parser.parse_args(["testbed", "show", str(path), "--cpu-budget", "1"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in doc["nodes"]][:2] == ["server", "aggregator0"]
    assert len(doc["nodes"]) == 5


def test_cli_run_without_root_says_so_in_one_line():
    if os.geteuid() == 0:
        # As root: pretend not to be (the check is the first thing `run` does).
        code = (
            "import os, sys; os.geteuid = lambda: 1000; from flowsplit.cli import main; "
            "sys.exit(main(['testbed', 'run', '--nodes', '2', '--', 'true']))"
        )
    else:
        assert missing_requirement().startswith("the testbed needs root")
        code = (
            "import sys; from flowsplit.cli import main; "
            "sys.exit(main(['testbed', 'run', '--nodes', '2', '--', 'true']))"
        )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs root" in lines[0], out.stderr


def test_nodes_are_pinned_to_the_least_loaded_cpu(monkeypatch):
    from flowsplit.testbed import bed

    monkeypatch.setattr(bed.os, "sched_getaffinity", lambda _pid: {0, 1})
    spec = TestbedSpec(
        (
            NodeSpec("big", cpu=0.6),
            NodeSpec("a", cpu=0.3),
            NodeSpec("b", cpu=0.3),
            NodeSpec("free"),  # no quota: not pinned
        )
    )
    pins = bed.pin_nodes(spec)
    # Largest share first, each on the CPU with the least quota so far: big -> CPU 0;
    # a -> CPU 1 (0 < 0.6); b -> CPU 1 (0.3 < 0.6). The node without a quota runs anywhere.
    assert pins == {"big": (0,), "a": (1,), "b": (1,)}
