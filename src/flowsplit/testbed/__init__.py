"""An emulated cluster or edge network on one machine, running flowsplit's real programs.

Needs root, ``ip`` and ``tc`` (iproute2) and the cgroup ``cpu`` controller (v1 or v2).
Nothing in :mod:`flowsplit.train` or :mod:`flowsplit.federated` imports this package;
it runs their programs inside its nodes.

What it emulates: one network namespace per node, joined through a bridge in a router
namespace by veth pairs; the rate of every directed link (``tc``: ``tbf`` for one rate
per node, ``htb`` classes for a rate per destination), and each node's CPU (a cgroup
quota: ``cpu`` cores per CFS period of 10 ms). What it does not: latency (``netem`` is
absent on these kernels; :meth:`Testbed.measure_rtt` gives what the paths really
have, tens of µs), loss, jitter, memory limits, and other machines' caches.

Python API (stable; other modules build on it)::

    from flowsplit.testbed import NodeSpec, Testbed, TestbedSpec

    spec = TestbedSpec.cluster(4, NodeSpec("node", cpu=0.25, mbit=100))   # node0..node3
    spec = TestbedSpec.from_topology("topo.toml")  # or a Topology: server,
    #   aggregator0.., client0.. (the dist runner's rank order), per-link rates,
    #   CPU shares in the ratio of the compute speeds (spec.info: FLOP/s per core)
    with Testbed(spec) as tb:                      # needs root; removed on exit
        tb.nodes["node1"].address                  # "10.233.0.2"; .netns, .rank, .cgroup
        p = tb.spawn("node1", ["flowsplit", ...], env={...})  # Popen in namespace + cgroup
        procs = tb.launch(["flowsplit", "train", DATA, "-o", "run-{rank}"], log_dir=LOGS)
        codes = tb.wait(procs, timeout_s=600)      # one per node; torchrun's env
        #   (RANK, WORLD_SIZE, MASTER_ADDR = first node, MASTER_PORT, GLOO_SOCKET_IFNAME)
        tb.rank_env("node1")                       # that environment, to start by hand
        tb.set_rate(10)                            # re-shape every node to 10 Mbit/s
        tb.measure_rtt("node0", "node1")           # s, median of UDP pings
        tb.socket_in("node1", kind=socket.SOCK_STREAM)  # a controller socket in node1
        tb.calibrate("node1", model="cnn", dataset=DATA)  # FLOP/s under its quota
        tb.cpu_stat("node1"); tb.tx_bytes("node1")

:func:`missing_requirement` says in one line why a testbed cannot be built here ('' if
it can): tests skip with it. :func:`clean_leftovers` removes what dead testbeds left
(also ``flowsplit testbed clean``). Command line: ``flowsplit testbed run``.
"""

from flowsplit.testbed.bed import IFNAME, Node, Testbed, burst_bytes, socket_in_netns
from flowsplit.testbed.spec import NodeSpec, TestbedSpec
from flowsplit.testbed.system import (
    TestbedError,
    clean_leftovers,
    find_testbeds,
    missing_requirement,
)

__all__ = [
    "IFNAME",
    "Node",
    "NodeSpec",
    "Testbed",
    "TestbedError",
    "TestbedSpec",
    "burst_bytes",
    "clean_leftovers",
    "find_testbeds",
    "missing_requirement",
    "socket_in_netns",
]
