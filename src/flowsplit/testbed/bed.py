"""Build a :class:`TestbedSpec` on this machine and run programs inside its nodes.

Layout: one network namespace per node, each with one interface ``tb0`` (a veth pair
whose other end ``n<k>`` sits on a bridge in a router namespace); node ``k`` has the
address ``10.233.<k // 250>.<k % 250 + 1>/16``. Every node's outgoing traffic is
shaped on its ``tb0``: one rate for everything (``tbf``), or one ``htb`` class per
destination with a rate of its own; so each directed link has its rate. Each node's
processes run in a cgroup whose CPU quota is the node's share. Latency is *not*
emulated (``tc netem`` is not available on these kernels): :meth:`Testbed.measure_rtt`
says what the testbed's paths really have (tens of microseconds).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from flowsplit.testbed.spec import NodeSpec, TestbedSpec
from flowsplit.testbed.system import (
    PREFIX,
    CpuGroup,
    TestbedError,
    own_cgroup,
    process_start_time,
    remove_instance,
    require,
    sh,
    write_state,
)

IFNAME = "tb0"
"""The interface of every node (set ``GLOO_SOCKET_IFNAME`` to it)."""
MTU = 1500
QUEUE_S = 0.2
QUEUE_MIN_BYTES = 4 << 20
"""A shaper's queue: 200 ms at the rate and at least 4 MiB, so TCP never loses segments
at the shaper (losses would stall on recovery, which no bandwidth model describes)."""
_CLONE_NEWNET = 0x40000000
_seq = itertools.count()


def burst_bytes(mbit: float) -> int:
    """Token bucket of a shaped link: 10 ms of traffic, at least 16 KB (a few frames)."""
    return max(16384, int(mbit * 1e6 / 8 / 100))


def queue_bytes(mbit: float) -> int:
    return max(QUEUE_MIN_BYTES, int(QUEUE_S * mbit * 1e6 / 8) + burst_bytes(mbit))


def node_address(k: int) -> str:
    return f"10.233.{k // 250}.{k % 250 + 1}"


@dataclass(frozen=True)
class Node:
    """One built node: where it is and how to reach it."""

    name: str
    rank: int
    address: str
    netns: str
    cgroup: Path
    spec: NodeSpec
    ifname: str = IFNAME
    cpus: tuple[int, ...] = ()
    """CPUs the node's processes are pinned to (empty: any)."""


class Testbed:
    """A built testbed; use as ``with Testbed(spec) as tb: ...`` (removed on exit).

    Everything is removed by :meth:`close` (the ``with`` block's end, also after an
    exception), and, if this process dies without closing (SIGKILL), by a reaper
    process started with the testbed that waits for this process to end.
    """

    __test__ = False

    def __init__(self, spec: TestbedSpec, *, pin: bool = True):
        self.spec = spec
        self.pin = pin
        """Pin each quota'd node to one CPU (see :func:`pin_nodes`)."""
        self.tag = ""
        self.nodes: dict[str, Node] = {}
        self.router = ""
        self._group: CpuGroup | None = None
        self._reaper: subprocess.Popen | None = None
        self._procs: list[subprocess.Popen] = []
        self._home: Path | None = None

    # -- building and removing -------------------------------------------------------

    def __enter__(self) -> Testbed:
        self.build()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def build(self) -> Testbed:
        """Create the namespaces, links, shapers and cgroups (needs root)."""
        require()
        self.tag = f"{PREFIX}{os.getpid()}-{next(_seq)}"
        while Path(f"/run/netns/{self.tag}-r").exists():  # an earlier life of this pid
            self.tag = f"{PREFIX}{os.getpid()}-{next(_seq)}"
        write_state(
            self.tag,
            {
                "owner": os.getpid(),
                "owner_start": process_start_time(os.getpid()),
                "spec": self.spec.to_dict(),
            },
        )
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "flowsplit.testbed.reaper", self.tag, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        self.router = f"{self.tag}-r"
        sh("ip", "netns", "add", self.router)
        sh("ip", "-n", self.router, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.router, "link", "set", "br0", "up")
        self._group = CpuGroup.create(self.tag)
        pins = pin_nodes(self.spec) if self.pin else {}
        for k, ns_spec in enumerate(self.spec.nodes):
            netns = f"{self.tag}-{k}"
            sh("ip", "netns", "add", netns)
            sh("ip", "-n", netns, "link", "set", "lo", "up")
            sh("ip", "link", "add", IFNAME, "netns", netns, "type", "veth",
               "peer", "name", f"n{k}", "netns", self.router)  # fmt: skip
            sh("ip", "-n", self.router, "link", "set", f"n{k}", "master", "br0", "up")
            addr = node_address(k)
            sh("ip", "-n", netns, "addr", "add", f"{addr}/16", "dev", IFNAME)
            sh("ip", "-n", netns, "link", "set", IFNAME, "mtu", str(MTU), "up")
            # Frames of the MTU, as a real link's shaper sees them: with segmentation
            # offload a veth hands the shaper 64 kB frames, which pass a smaller bucket
            # at once (a 100 kB message through a 50 kB bucket: 4 ms, not 11 ms).
            sh("ip", "-n", netns, "link", "set", IFNAME, "gso_max_segs", "1", check=False)
            cg = self._group.add_node(
                ns_spec.name, self.spec.quota_us(ns_spec), self.spec.cpu_period_us
            )
            self.nodes[ns_spec.name] = Node(
                ns_spec.name, k, addr, netns, cg, ns_spec, cpus=pins.get(ns_spec.name, ())
            )
        for node in self.nodes.values():
            self._shape(node)

    def _shape(self, node: Node, mbit: float | None = ..., rates: dict | None = None) -> None:
        """Shape what ``node`` sends (its spec's rates unless given)."""
        mbit = node.spec.mbit if mbit is ... else mbit
        rates = node.spec.rates if rates is None else rates
        tc = ["tc", "-n", node.netns]
        if not rates:
            if mbit is None:
                sh(*tc, "qdisc", "del", "dev", IFNAME, "root", check=False)
                return
            # `replace`, never delete and add: deleting drops what the queue holds, and
            # TCP then waits out a retransmission timeout (200 ms or more) mid-run.
            sh(*tc, "qdisc", "replace", "dev", IFNAME, "root", "tbf", "rate", f"{mbit:g}mbit",
               "burst", str(burst_bytes(mbit)), "limit", str(queue_bytes(mbit)))  # fmt: skip
            return
        sh(*tc, "qdisc", "del", "dev", IFNAME, "root", check=False)  # classes from scratch
        lines = [f"qdisc replace dev {IFNAME} root handle 1: htb default {1 if mbit else 0}"]
        classes = [(1, None, mbit)] if mbit else []
        classes += [
            (10 + self.nodes[dst].rank, self.nodes[dst].address, r) for dst, r in rates.items()
        ]
        for minor, dst, r in classes:
            b = burst_bytes(r)
            lines.append(
                f"class add dev {IFNAME} parent 1: classid 1:{minor} htb rate {r:g}mbit "
                f"ceil {r:g}mbit burst {b} cburst {b} quantum 1514"
            )
            lines.append(
                f"qdisc add dev {IFNAME} parent 1:{minor} handle {minor}: bfifo limit {queue_bytes(r)}"
            )
            if dst is not None:
                lines.append(
                    f"filter add dev {IFNAME} parent 1: protocol ip prio 1 u32 "
                    f"match ip dst {dst}/32 flowid 1:{minor}"
                )
        proc = subprocess.run(
            [*tc, "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True
        )
        if proc.returncode:
            raise TestbedError(f"tc (node {node.name}): {proc.stderr.strip()}")

    def set_rate(self, mbit: float | None, nodes: list[str] | None = None) -> None:
        """Re-shape what ``nodes`` (default all) send to one rate (None: unshaped), at once.

        For links that change during a run (a benchmark's epochs); per-destination
        rates come back with :meth:`reset_rates`.
        """
        targets = [self.nodes[n] for n in (nodes or list(self.nodes))]
        threads = [threading.Thread(target=self._shape, args=(node, mbit, {})) for node in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def set_cpu(self, cpu: float | None = ..., nodes: list[str] | None = None) -> None:
        """Change the CPU quota of ``nodes`` (default all) to ``cpu`` cores (None: no limit;
        left out: back to each node's spec). E.g. no limit while workers start up."""
        assert self._group is not None
        period = self.spec.cpu_period_us
        for name in nodes or list(self.nodes):
            share = self.nodes[name].spec.cpu if cpu is ... else cpu
            quota = None if share is None else max(1000, round(share * period))
            self._group.set_quota(name, quota, period)

    def prioritise_controller(self) -> None:
        """Move this process (and what it starts from now on, ``tc`` included) into the
        testbed's cgroup: no quota, the testbed's high CPU weight.

        For a controller that must react at once while the nodes run (re-shaping links
        between epochs): on a machine other jobs load, an ordinary process can take
        seconds to notice an epoch's end and run ``tc``. :meth:`close` moves it back.
        """
        assert self._group is not None
        if self._home is None:
            self._home = own_cgroup(self._group.flavour)
        path = self._group.add_node("controller", None, self.spec.cpu_period_us)
        (path / "cgroup.procs").write_text(str(os.getpid()))

    def reset_rates(self) -> None:
        for node in self.nodes.values():
            self._shape(node)

    def close(self) -> None:
        """End every process started here and remove everything the testbed made."""
        if not self.tag:
            return
        if self._home is not None:  # out of the cgroup before it goes
            with contextlib.suppress(OSError):
                (self._home / "cgroup.procs").write_text(str(os.getpid()))
            self._home = None
        for p in self._procs:
            with contextlib.suppress(ProcessLookupError):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
        remove_instance(self.tag)
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
        if self._reaper is not None and self._reaper.poll() is None:
            self._reaper.terminate()
            self._reaper.wait(5)
        self.tag = ""

    # -- running programs ------------------------------------------------------------

    def spawn(
        self,
        node: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cgroup: bool = True,
        **popen_kw,
    ) -> subprocess.Popen:
        """Start ``argv`` in ``node``'s namespace and (``cgroup``) under its CPU quota.

        ``env`` is added to this process's environment. ``argv[0] == "flowsplit"`` runs
        this interpreter's ``-m flowsplit``, ``python`` this interpreter. The process leads a session of its own
        (``start_new_session``), so a terminal's Ctrl-C reaches only the controller,
        which ends it. Other keywords go to :class:`subprocess.Popen`.
        """
        n = self.nodes[node]
        if argv and argv[0] == "flowsplit":
            argv = [sys.executable, "-m", "flowsplit", *argv[1:]]
        elif argv and argv[0] in ("python", "python3"):
            argv = [sys.executable, *argv[1:]]
        procs_file = n.cgroup / "cgroup.procs"

        def enter_cgroup() -> None:  # in the child, before exec
            with open(procs_file, "w") as fh:
                fh.write(str(os.getpid()))
            if n.cpus:
                os.sched_setaffinity(0, n.cpus)

        popen_kw.setdefault("start_new_session", True)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", n.netns, *argv],
            env={**os.environ, **(env or {})},
            preexec_fn=enter_cgroup if cgroup else None,  # noqa: PLW1509 - no threads run it
            **popen_kw,
        )
        self._procs.append(proc)
        return proc

    def rank_env(self, node: str, *, master_port: int = 29500, world: list[str] | None = None):
        """torchrun's environment for ``node``: one process per node, rank = node order.

        ``world``: the nodes taking part (default all, in spec order); rank 0's address
        is ``MASTER_ADDR``. Gloo binds the node's interface (``GLOO_SOCKET_IFNAME``).
        """
        world = world or list(self.nodes)
        rank = world.index(node)
        return {
            "RANK": str(rank),
            "GROUP_RANK": str(rank),
            "WORLD_SIZE": str(len(world)),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": self.nodes[world[0]].address,
            "MASTER_PORT": str(master_port),
            "GLOO_SOCKET_IFNAME": IFNAME,
            "FLOWSPLIT_TESTBED_NODE": node,
        }

    def launch(
        self,
        argv: list[str],
        *,
        world: list[str] | None = None,
        env: dict[str, str] | None = None,
        master_port: int = 29500,
        log_dir: str | Path | None = None,
    ) -> list[subprocess.Popen]:
        """Start ``argv`` once per node with torchrun's environment (:meth:`rank_env`).

        ``{rank}``, ``{node}`` and ``{address}`` in ``argv`` become the node's. Output
        goes to ``log_dir/<node>.log`` when given (else this process's stdout/stderr).
        """
        world = world or list(self.nodes)
        procs = []
        for name in world:
            n = self.nodes[name]
            args = [
                a.replace("{rank}", str(world.index(name)))
                .replace("{node}", name)
                .replace("{address}", n.address)
                for a in argv
            ]
            out = None
            if log_dir is not None:
                Path(log_dir).mkdir(parents=True, exist_ok=True)
                out = open(Path(log_dir) / f"{name}.log", "wb")  # noqa: SIM115 - closed below
            full_env = {"OMP_NUM_THREADS": "1", **(env or {}), **self.rank_env(
                name, master_port=master_port, world=world)}  # fmt: skip
            try:
                procs.append(
                    self.spawn(
                        name,
                        args,
                        env=full_env,
                        stdout=out,
                        stderr=subprocess.STDOUT if out else None,
                    )
                )
            finally:
                if out is not None:
                    out.close()
        return procs

    def wait(self, procs: list[subprocess.Popen], timeout_s: float | None = None) -> list[int]:
        """Wait for ``procs``; when one fails (or ``timeout_s`` passes) end the others.

        Returns the exit codes (a process ended here reads as ``-9``).
        """
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            codes = [p.poll() for p in procs]  # every one: poll() is what sets returncode
            if None not in codes:
                break
            failed = any(c not in (None, 0) for c in codes)
            if failed or (end is not None and time.monotonic() > end):
                for p in procs:
                    if p.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(p.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        return [p.wait() for p in procs]

    # -- measuring -------------------------------------------------------------------

    def socket_in(self, node: str, family=socket.AF_INET, kind=socket.SOCK_DGRAM) -> socket.socket:
        """A socket of this process that lives in ``node``'s namespace (shaped as the node).

        No CPU quota applies: for probing the network from the controller.
        """
        return socket_in_netns(self.nodes[node].netns, family, kind)

    def measure_rtt(self, a: str, b: str, *, count: int = 20) -> float:
        """Median round-trip time (s) of a small UDP datagram from ``a`` to ``b`` and back."""
        server = self.socket_in(b)
        server.bind((self.nodes[b].address, 0))
        client = self.socket_in(a)
        client.settimeout(2.0)
        server.settimeout(2.0)
        target = server.getsockname()
        rtts = []
        for _ in range(count + 2):  # the first two: ARP
            t0 = time.perf_counter()
            client.sendto(b"x" * 32, target)
            data, addr = server.recvfrom(64)
            server.sendto(data, addr)
            client.recvfrom(64)
            rtts.append(time.perf_counter() - t0)
        server.close()
        client.close()
        return statistics.median(rtts[2:])

    def cpu_stat(self, node: str) -> dict[str, int]:
        """The node's cgroup ``cpu.stat`` (``nr_periods``, ``nr_throttled``, ...)."""
        assert self._group is not None
        return self._group.throttled(node)

    def tx_bytes(self, node: str) -> int:
        """Bytes the node's interface has sent."""
        out = sh("ip", "-n", self.nodes[node].netns, "-j", "-s", "link", "show", IFNAME).stdout
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])

    def calibrate(
        self,
        node: str,
        *,
        model: str,
        dataset: str | Path,
        batch_size: int = 64,
        steps: int = 5,
        timeout_s: float = 300.0,
    ) -> dict:
        """Time forward+backward steps of ``model`` in ``node`` under its quota.

        Returns ``{"flops_per_s", "step_s", "flops_per_step", ...}``: the node's speed
        as the cost model's compute term needs it, measured, not assumed.
        """
        argv = [sys.executable, "-m", "flowsplit.testbed.calibrate", "--model", model]
        argv += ["--dataset", str(dataset), "--batch-size", str(batch_size)]
        argv += ["--steps", str(steps)]
        proc = self.spawn(
            node, argv, env={"OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TestbedError(f"calibration in {node} ran past {timeout_s:g} s") from None
        if proc.returncode:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise TestbedError(f"calibration in {node} failed: {tail[0]}")
        return json.loads(out.decode().strip().splitlines()[-1])


def pin_nodes(spec: TestbedSpec) -> dict[str, tuple[int, ...]]:
    """One CPU for each node with a quota of at most one core: the least loaded so far.

    Why: the kernel hands a cgroup's quota to a CPU in slices of
    ``sched_cfs_bandwidth_slice_us`` (5 ms), more than a small quota's whole period
    budget (2 ms at 0.2 core, 10 ms period). A node whose threads (the worker, gloo's,
    autograd's) run on two CPUs then finds its quota stranded on one of them while a
    thread on the other waits for the next period: every message between nodes can
    cost a period. On one CPU the node behaves as a slower single-core machine.
    """
    cores = sorted(os.sched_getaffinity(0))
    load = dict.fromkeys(cores, 0.0)
    pins = {}
    for node in sorted(spec.nodes, key=lambda n: -(n.cpu or 0.0)):
        if node.cpu is None or node.cpu > 1.0:
            continue
        cpu = min(cores, key=lambda c: (load[c], c))
        load[cpu] += node.cpu
        pins[node.name] = (cpu,)
    return pins


def socket_in_netns(netns: str, family=socket.AF_INET, kind=socket.SOCK_DGRAM) -> socket.socket:
    """A socket created in network namespace ``netns`` (from a thread that enters it)."""
    box: list = []

    def make() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                box.append(OSError(ctypes.get_errno(), f"setns {netns}"))
                return
            box.append(socket.socket(family, kind))
        finally:
            os.close(fd)
        # The thread ends here; its namespace goes with it (the socket keeps its own).

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if isinstance(box[0], Exception):
        raise box[0]
    return box[0]
