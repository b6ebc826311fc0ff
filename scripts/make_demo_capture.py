#!/usr/bin/env python3
"""Regenerate flowsplit's embedded lab capture: demo/captures/<class>/<class>-<NN>.pcap.

The lab
-------
Real servers and real clients talk across an emulated WAN link on this machine, and tcpdump
records what crosses it. Nothing leaves the machine and no third-party capture is used::

    client namespace                       the "wire"                    server namespace
    10.77.0.1 on tap fsdc<pid>   <-- delay, jitter, rate, loss -->   10.77.0.2 on tap fsds<pid>
    curl, http.client, ssl, dig,        (a thread of this script)       http.server, dnsmasq,
    getaddrinfo, ssh, scp, redis-cli,                                   sshd, redis-server,
    mosquitto_pub/sub, psql, RTP sender                                 mosquitto, postgres,
    tcpdump -i fsdc<pid>  (the capture point: the client's access link)     RTP echo

Two network namespaces are joined by a pair of TAP devices. A thread of this script copies
each frame from one TAP to the other after a one-way delay with uniform jitter, a
serialisation delay at the link rate and an optional random loss, keeping each direction in
order: what `tc qdisc add dev lo root netem delay 20ms 5ms rate 16mbit loss 0.1%` would do,
but it also works on kernels built without sch_netem (like the one the committed capture was
made on). TAP devices do no segmentation offload, so every captured frame is at most 1514
bytes, and tcpdump on one TAP sees each packet exactly once (no loopback duplicates).

A session runs every class's clients at once under one path profile (LAN, metro, DSL, cable,
4G, intercontinental) and one client-host setting (resolver options, TCP timestamps on or
off). tcpdump captures the whole session; the script then splits it by server port into one
file per class, so each file holds only flows to its class's server, and a dataset can be
split into train/val/test by capture file. Each flow's behaviour (client program, requests,
sizes, think times, options) is drawn from a random generator seeded with (--seed, class,
session, flow index): a rerun does the same things, only packet timing differs.

Requirements
------------
Root: `ip netns`, TAP devices and running PostgreSQL as its own user need CAP_NET_ADMIN and
CAP_SYS_ADMIN in the initial namespaces. An unprivileged `unshare -rn` is not enough (no
second named namespace, no switch to the postgres user), so run it with sudo, in a VM or in
a privileged container. Python 3.11+ (standard library only) and, on Debian or Ubuntu:

    apt-get install -y tcpdump iproute2 util-linux openssl curl bind9-dnsutils dnsmasq-base \\
        openssh-server openssh-client redis-server redis-tools mosquitto mosquitto-clients \\
        postgresql postgresql-client

Only the programs of the selected --classes are needed; the script says in one line what is
missing. No system service is enabled or started: every server runs inside the lab's
namespace, and servers, namespaces, TAPs and temporary files are removed on exit or Ctrl-C.
Output files are written under a temporary name and renamed when complete.

Usage:  sudo python3 scripts/make_demo_capture.py --out demo/captures    (about 3 minutes)
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import glob
import heapq
import http.client
import json
import os
import random
import select
import shutil
import signal
import socket
import ssl
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLIENT_IP, SERVER_IP, PREFIX_LEN = "10.77.0.1", "10.77.0.2", 24
CLIENT_MAC, SERVER_MAC = "02:00:0a:4d:00:01", "02:00:0a:4d:00:02"
DOMAIN = "lab.example"
WEB_HOST = f"www.{DOMAIN}"

# What a file keeps of each packet. tcpdump captures whole frames (SNAPLEN); the splitter
# then cuts each packet after its headers plus those payload bytes that are still among its
# flow's first FLOW_PAYLOAD payload bytes (both directions, in packet order), keeping at
# least HEAD_BYTES bytes of each of the flow's first HEAD_PACKETS packets. Every record keeps
# the packet's original length. So the byte views flowsplit computes (the first 784 payload
# bytes of a flow, the first 64 bytes of its first 16 packets) are exactly those of a full
# capture, sizes, flags and timing are there for every packet, and the files stay small.
SNAPLEN = 1514
FLOW_PAYLOAD = 784
HEAD_PACKETS, HEAD_BYTES = 16, 64

FLOW_CONCURRENCY = 3  # flows of one class in flight at once
MEAN_FLOW_GAP = 0.25  # seconds: mean pause before each flow starts (exponential)
COMMAND_TIMEOUT = 60  # seconds: one client program


# --------------------------------------------------------------------------------------
# The classes: one server and one port each, several client behaviours
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabClass:
    name: str
    proto: str  # "tcp" or "udp"
    port: int
    server: str
    clients: str
    programs: tuple[str, ...] = ()  # what must be installed for this class


CLASSES = {
    c.name: c
    for c in [
        LabClass(
            name="http",
            proto="tcp",
            port=80,
            server="Python http.server (HTTP/1.1 keep-alive) serving a small generated site",
            clients="Python http.client (page loads, API polling, downloads, HEAD, 404s), curl",
            programs=("curl",),
        ),
        LabClass(
            name="https",
            proto="tcp",
            port=443,
            server="the same site over TLS (Python ssl, self-signed ECDSA certificate)",
            clients="Python ssl + http.client (TLS 1.3, or TLS 1.2 at most), curl",
            programs=("curl", "openssl"),
        ),
        LabClass(
            name="dns",
            proto="udp",
            port=53,
            server=f"dnsmasq, authoritative for {DOMAIN} (A, AAAA, CNAME, MX, TXT, SRV, PTR)",
            clients="glibc stub resolver (getaddrinfo, gethostbyaddr), dig",
            programs=("dnsmasq", "dig"),
        ),
        LabClass(
            name="ssh",
            proto="tcp",
            port=22,
            server="OpenSSH sshd, public-key login",
            clients="OpenSSH ssh (remote commands, typed interactive sessions), scp downloads",
            programs=("sshd", "ssh", "ssh-keygen", "scp", "mount"),
        ),
        LabClass(
            name="redis",
            proto="tcp",
            port=6379,
            server="redis-server (no persistence)",
            clients="application-style sessions (a small Python RESP client: greeting, "
            "commands with think times, pipelines), redis-cli one-shot, -r repeat and --pipe",
            programs=("redis-server", "redis-cli"),
        ),
        LabClass(
            name="mqtt",
            proto="tcp",
            port=1883,
            server="mosquitto broker (anonymous)",
            clients="mosquitto_pub (single and streamed messages), mosquitto_sub; MQTT 3.1.1 "
            "and 5, QoS 0-2, retained messages",
            programs=("mosquitto", "mosquitto_pub", "mosquitto_sub"),
        ),
        LabClass(
            name="postgres",
            proto="tcp",
            port=5432,
            server="PostgreSQL, SCRAM-SHA-256 password authentication",
            clients="psql: selects, inserts, updates, transactions, with think times",
            programs=("psql", "postgres", "initdb", "setpriv"),
        ),
        LabClass(
            name="rtp",
            proto="udp",
            port=5004,
            server="RTP echo service (each packet returned under its own SSRC, like a PBX "
            "echo test), Python",
            clients="Python RTP sender at a constant packet rate (G.711, G.722, G.729, GSM, "
            "Opus profiles)",
        ),
    ]
}

# The Debian package of each program, for the one line that says what is missing.
PACKAGE_OF = {
    "ip": "iproute2",
    "ss": "iproute2",
    "setpriv": "util-linux",
    "dnsmasq": "dnsmasq-base",
    "dig": "bind9-dnsutils",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "scp": "openssh-client",
    "mount": "mount",
    "redis-cli": "redis-tools",
    "mosquitto_pub": "mosquitto-clients",
    "mosquitto_sub": "mosquitto-clients",
    "psql": "postgresql-client",
    "postgres": "postgresql",
    "initdb": "postgresql",
}


@dataclass(frozen=True)
class NetPath:
    """One session's emulated link, applied in each direction (RTT = 2 x delay)."""

    name: str
    delay_ms: float
    jitter_ms: float  # uniform +-, like netem's "delay D J"
    rate_mbit: float
    loss: float  # probability per frame


PATHS = [
    NetPath("lan", 1.0, 0.3, 200.0, 0.0),
    NetPath("metro", 8.0, 2.0, 100.0, 0.0),
    NetPath("dsl", 20.0, 5.0, 16.0, 0.001),
    NetPath("cable", 30.0, 8.0, 50.0, 0.002),
    NetPath("4g", 45.0, 15.0, 20.0, 0.005),
    NetPath("intercontinental", 90.0, 10.0, 30.0, 0.001),
]
RESOLVER_OPTIONS = ["edns0", "", "single-request", "edns0 trust-ad", "rotate", "edns0"]


def client_host(session: int) -> dict:
    """The client host's settings in a session: its resolver options and TCP timestamps
    (on like Linux and macOS clients, off like Windows clients)."""
    return {
        "resolver_options": RESOLVER_OPTIONS[(session - 1) % len(RESOLVER_OPTIONS)],
        "tcp_timestamps": session % 2 == 1,
    }


# --------------------------------------------------------------------------------------
# Prerequisites and small helpers
# --------------------------------------------------------------------------------------


class LabError(Exception):
    """A one-line reason the lab cannot go on."""


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a setup command; raise LabError with its first line of complaint if it fails."""
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        first = (p.stderr or p.stdout).strip().splitlines()[:1] or ["no output"]
        raise LabError(f"{' '.join(argv[:5])} failed: {first[0]}")
    return p


def netns(ns: str, argv: list[str]) -> list[str]:
    """argv run inside network namespace ns."""
    return ["ip", "netns", "exec", ns, *argv]


def find_pg_bindir() -> str | None:
    """The newest PostgreSQL server binaries (Debian keeps them off PATH)."""
    dirs = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.path.exists(f"{d}/postgres")]
    if dirs:
        return max(dirs, key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)
    postgres = shutil.which("postgres")
    return os.path.dirname(postgres) if postgres else None


def missing_prerequisites(classes: list[LabClass]) -> str | None:
    """One line saying what is missing, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (network namespaces, TAP devices)"
    if os.geteuid() != 0:
        return "needs root for ip netns and TAP devices: run it with sudo"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun not found: modprobe tun"
    programs = ["ip", "ss", "tcpdump", *(p for c in classes for p in c.programs)]
    pg = find_pg_bindir()
    missing = []
    for prog in dict.fromkeys(programs):
        if prog in ("postgres", "initdb"):
            ok = pg is not None and os.path.exists(os.path.join(pg, prog))
        elif prog == "sshd":
            ok = bool(shutil.which("sshd") or os.path.exists("/usr/sbin/sshd"))
        else:
            ok = shutil.which(prog) is not None
        if not ok:
            missing.append(prog)
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(PACKAGE_OF.get(m, m) for m in missing))
    return f"{', '.join(missing)} not found: apt-get install -y {packages}"


VOCABULARY = """
network flow packet traffic server client request response latency bandwidth queue route
cache session token record stream frame buffer window socket report sensor device gateway
edge cloud model train split data lab test alpha beta gamma delta river mountain city garden
orange silver quiet rapid
"""


def words(rng: random.Random, n: int) -> str:
    """n random words: text for pages, values and messages."""
    vocab = VOCABULARY.split()
    return " ".join(rng.choice(vocab) for _ in range(n))


def think(rng: random.Random, mean: float) -> float:
    """A think time: exponential with this mean, at most four times it."""
    return min(rng.expovariate(1 / mean), 4 * mean)


# --------------------------------------------------------------------------------------
# The wire: a userspace cable between two TAP devices
# --------------------------------------------------------------------------------------

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000


def open_tap(name: str) -> int:
    """Create TAP device `name`; it lives as long as the returned descriptor."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


class Wire(threading.Thread):
    """Copies Ethernet frames between two TAP devices as the current NetPath would."""

    def __init__(self, fd_a: int, fd_b: int):
        super().__init__(name="wire", daemon=True)
        self.peer = {fd_a: fd_b, fd_b: fd_a}
        self.path = NetPath("direct", 0.0, 0.0, 1000.0, 0.0)
        self.rng = random.Random(0)
        self.stopping = threading.Event()
        self.frames = self.lost = 0

    def set_path(self, path: NetPath, seed: str) -> None:
        self.path, self.rng = path, random.Random(seed)

    def run(self) -> None:
        queue: list[tuple[float, int, int, bytes]] = []  # (due, sequence, out fd, frame)
        link_free = dict.fromkeys(self.peer, 0.0)  # when each direction's link is idle again
        last_due = dict.fromkeys(self.peer, 0.0)  # keeps each direction in order
        seq = 0
        while not self.stopping.is_set():
            now = time.monotonic()
            while queue and queue[0][0] <= now:
                _, _, out, frame = heapq.heappop(queue)
                with contextlib.suppress(OSError):
                    os.write(out, frame)
            wait = min(0.05, max(0.0, queue[0][0] - now)) if queue else 0.05
            readable, _, _ = select.select(list(self.peer), [], [], wait)
            now, p = time.monotonic(), self.path
            for fd in readable:
                while True:
                    try:
                        frame = os.read(fd, 65536)
                    except OSError:  # EAGAIN: nothing more to read
                        break
                    self.frames += 1
                    if p.loss and self.rng.random() < p.loss:
                        self.lost += 1
                        continue
                    start = max(now, link_free[fd])
                    link_free[fd] = start + len(frame) * 8 / (p.rate_mbit * 1e6)
                    delay = max(0.0, p.delay_ms + self.rng.uniform(-p.jitter_ms, p.jitter_ms))
                    due = last_due[fd] = max(link_free[fd] + delay / 1000, last_due[fd])
                    heapq.heappush(queue, (due, seq, self.peer[fd], frame))
                    seq += 1


# --------------------------------------------------------------------------------------
# The lab: namespaces, the wire, servers, and one capture session at a time
# --------------------------------------------------------------------------------------


class Lab:
    """Two namespaces joined by the wire, with the selected classes' servers running."""

    def __init__(self, classes: list[LabClass], seed: int):
        tag = str(os.getpid())
        self.classes, self.seed = classes, seed
        self.cli_ns, self.srv_ns = f"fsdemo-{tag}-cli", f"fsdemo-{tag}-srv"
        self.cli_tap, self.srv_tap = f"fsdc{tag}"[:15], f"fsds{tag}"[:15]
        self.work = Path(tempfile.mkdtemp(prefix="fsdemo-"))
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.namespaces: list[str] = []
        self.made_dirs: list[Path] = []  # system directories this run created
        self.netns_etc = Path("/etc/netns") / self.cli_ns
        self.wire: Wire | None = None
        self.tap_fds: list[int] = []

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        try:
            os.chmod(self.work, 0o755)  # postgres and the daemons' users read from here
            self._network()
            self._servers()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the servers; remove namespaces, TAPs, resolver file and work directory."""
        for name, proc in reversed(self.procs):
            if proc.poll() is None:  # postgres: SIGINT is its fast shutdown
                proc.send_signal(signal.SIGINT if name == "postgres" else signal.SIGTERM)
        deadline = time.monotonic() + 5
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for ns in self.namespaces:  # whatever our servers and clients forked in there
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        if self.wire is not None:
            self.wire.stopping.set()
            self.wire.join(timeout=2)
        for fd in self.tap_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()
        shutil.rmtree(self.netns_etc, ignore_errors=True)
        for d in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()  # only if still empty
        shutil.rmtree(self.work, ignore_errors=True)

    def makedirs(self, path: Path, mode: int = 0o755) -> None:
        """Create a system directory (and parents), remembering to remove it if empty."""
        for d in [*reversed(path.parents), path]:
            if not d.exists():
                d.mkdir(mode=mode)
                self.made_dirs.append(d)

    def spawn(self, name: str, ns: str, argv: list[str], **kw) -> subprocess.Popen:
        """Start a long-running program in a namespace; close() stops it."""
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(netns(ns, argv), stdout=log, stderr=log, **kw)
        self.procs.append((name, proc))
        return proc

    # -- network --------------------------------------------------------------------------

    def _network(self) -> None:
        for ns in (self.cli_ns, self.srv_ns):
            run(["ip", "netns", "add", ns])
            self.namespaces.append(ns)
            for conf in ("all", "default"):  # no IPv6 chatter (solicitations, DAD) on the link
                run(
                    netns(ns, ["sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{conf}/disable_ipv6"])
                )
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        self.tap_fds = [open_tap(self.cli_tap), open_tap(self.srv_tap)]
        for ns, tap, ip, mac in (
            (self.cli_ns, self.cli_tap, CLIENT_IP, CLIENT_MAC),
            (self.srv_ns, self.srv_tap, SERVER_IP, SERVER_MAC),
        ):
            run(["ip", "link", "set", tap, "netns", ns])
            run(["ip", "-n", ns, "link", "set", tap, "address", mac, "mtu", "1500"])
            run(["ip", "-n", ns, "addr", "add", f"{ip}/{PREFIX_LEN}", "dev", tap])
            run(["ip", "-n", ns, "link", "set", tap, "up"])
            if shutil.which("ethtool"):  # belt and braces: TAPs do no offload anyway
                off = ["tso", "off", "gso", "off", "gro", "off"]
                subprocess.run(netns(ns, ["ethtool", "-K", tap, *off]), capture_output=True)
        self.wire = Wire(*self.tap_fds)
        self.wire.start()
        # The client resolves names through the lab's DNS server only: `ip netns exec`
        # bind-mounts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf.
        self.makedirs(self.netns_etc)
        self.set_resolver_options("")

    def set_resolver_options(self, options: str) -> None:
        text = f"nameserver {SERVER_IP}\nsearch {DOMAIN}\noptions timeout:1 attempts:2 {options}\n"
        (self.netns_etc / "resolv.conf").write_text(text)

    # -- servers --------------------------------------------------------------------------

    def _servers(self) -> None:
        names = {c.name for c in self.classes}
        me = [sys.executable, str(Path(__file__).resolve())]
        make_site(self.work / "www")
        if "http" in names:
            self.spawn("http", self.srv_ns, [*me, "_serve", "http", str(self.work)])
        if "https" in names:
            tls = self.work / "tls"
            tls.mkdir()
            run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-nodes", "-days", "3650"]
                + ["-pkeyopt", "ec_paramgen_curve:prime256v1", "-subj", f"/CN={WEB_HOST}"]
                + ["-addext", f"subjectAltName=DNS:{WEB_HOST}"]
                + ["-keyout", str(tls / "key.pem"), "-out", str(tls / "cert.pem")]
            )
            self.spawn("https", self.srv_ns, [*me, "_serve", "https", str(self.work)])
        if "rtp" in names:
            self.spawn("rtp", self.srv_ns, [*me, "_serve", "rtp", str(self.work)])
        if "dns" in names:
            conf = self.work / "dnsmasq.conf"
            conf.write_text(dnsmasq_config())
            self.spawn(
                "dns", self.srv_ns, ["dnsmasq", "--keep-in-foreground", f"--conf-file={conf}"]
            )
        if "redis" in names:
            (self.work / "redis").mkdir()
            self.spawn(
                "redis",
                self.srv_ns,
                ["redis-server", "--bind", SERVER_IP, "--port", "6379", "--protected-mode", "no"]
                + ["--save", "", "--appendonly", "no", "--dir", str(self.work / "redis")]
                + ["--loglevel", "warning"],
            )
        if "mqtt" in names:
            conf = self.work / "mosquitto.conf"
            conf.write_text(
                f"listener 1883 {SERVER_IP}\nallow_anonymous true\npersistence false\n"
                "log_dest stderr\nlog_type error\n"
            )
            self.spawn("mqtt", self.srv_ns, ["mosquitto", "-c", str(conf)])
        if "ssh" in names:
            self._sshd()
        if "postgres" in names:
            self._postgres()
        self._wait_listening()

    def _sshd(self) -> None:
        d = self.work / "ssh"
        d.mkdir()
        for kind in ("ed25519", "ecdsa"):
            for role in ("host", "id"):
                run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(d / f"{role}_{kind}")])
        keys = [(d / f"id_{k}.pub").read_text() for k in ("ed25519", "ecdsa")]
        (d / "authorized_keys").write_text("".join(keys))
        (d / "sshd_config").write_text(
            f"Port 22\nListenAddress {SERVER_IP}\n"
            f"HostKey {d}/host_ed25519\nHostKey {d}/host_ecdsa\n"
            f"AuthorizedKeysFile {d}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
            "PidFile none\nPrintMotd no\nPrintLastLog no\nMaxStartups 64\nLogLevel ERROR\n"
            "Subsystem sftp internal-sftp\n"
        )
        self.makedirs(Path("/run/sshd"))  # sshd's privilege-separation directory
        # Logins get a clean home with Debian's default dotfiles, not this machine's /root:
        # sshd runs in a private mount namespace (made by `ip netns exec`) with a bind mount.
        home = d / "home"
        home.mkdir()
        for dotfile in (".bashrc", ".profile"):
            with contextlib.suppress(OSError):
                shutil.copy(f"/etc/skel/{dotfile}", home / dotfile)
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        start = f'mount --bind "{home}" /root && exec "{sshd}" -D -e -f "{d}/sshd_config"'
        self.spawn("ssh", self.srv_ns, ["sh", "-c", start])

    def _postgres(self) -> None:
        bindir = find_pg_bindir()
        data, sock, pw = self.work / "pg", self.work / "pgsock", self.work / "pgpass"
        data.mkdir()
        sock.mkdir()
        pw.write_text("postgres\n")
        for p in (data, sock, pw):
            shutil.chown(p, "postgres", "postgres")
        as_pg = ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups"]
        run(
            [*as_pg, f"{bindir}/initdb", "-D", str(data), "-U", "postgres", f"--pwfile={pw}"]
            + ["--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8"]
            + ["--locale=C"],
            cwd=self.work,
        )
        with open(data / "pg_hba.conf", "a") as f:
            f.write(f"host all all {CLIENT_IP}/32 scram-sha-256\n")
        self.spawn(
            "postgres",
            self.srv_ns,
            [*as_pg, f"{bindir}/postgres", "-D", str(data), "-c", f"listen_addresses={SERVER_IP}"]
            + ["-c", "port=5432", "-c", f"unix_socket_directories={sock}", "-c", "fsync=off"]
            + ["-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            cwd=self.work,
        )
        for _ in range(150):
            if (sock / ".s.PGSQL.5432").exists():
                break
            time.sleep(0.1)
        setup = (
            "CREATE ROLE demo LOGIN PASSWORD 'demo'; CREATE DATABASE demo OWNER demo;\n"
            "\\c demo demo\n"
            "CREATE TABLE items (id serial PRIMARY KEY, name text, price numeric(10,2),"
            " stock int, note text, updated timestamptz DEFAULT now());\n"
            "INSERT INTO items (name, price, stock, note) SELECT 'item-' || g,"
            " round((random() * 500)::numeric, 2), (random() * 100)::int, md5(g::text)"
            " FROM generate_series(1, 2000) g;\n"
            "CREATE TABLE events (id bigserial PRIMARY KEY, kind text, payload jsonb,"
            " at timestamptz DEFAULT now());\n"
        )
        psql = ["psql", "-X", "-q", "-h", str(sock), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
        run(netns(self.srv_ns, [*as_pg, *psql]), input=setup, cwd=self.work)

    def _wait_listening(self, timeout: float = 30.0) -> None:
        want = {(c.proto, c.port) for c in self.classes}
        deadline = time.monotonic() + timeout
        while True:
            have = set()
            for line in run(netns(self.srv_ns, ["ss", "-Hlntu"])).stdout.splitlines():
                f = line.split()
                if len(f) >= 5 and f[4].rsplit(":", 1)[-1].isdigit():
                    have.add((f[0], int(f[4].rsplit(":", 1)[-1])))
            if want <= have:
                return
            for name, proc in self.procs:
                if proc.poll() is not None:
                    log = (self.work / f"{name}.log").read_text(errors="replace").strip()
                    last = log.splitlines()[-1] if log else f"exit status {proc.returncode}"
                    raise LabError(f"{name} server exited: {last}")
            if time.monotonic() > deadline:
                raise LabError(f"servers not listening after {timeout:.0f}s: {sorted(want - have)}")
            time.sleep(0.2)

    # -- one session ----------------------------------------------------------------------

    def capture_session(self, session: int, flows: int, path: NetPath, raw: Path) -> dict:
        """Run every class's clients at once under `path` while tcpdump writes `raw`."""
        assert self.wire is not None
        self.wire.set_path(path, f"{self.seed}:wire:{session}")
        host = client_host(session)
        self.set_resolver_options(host["resolver_options"])
        ts = int(host["tcp_timestamps"])
        run(netns(self.cli_ns, ["sh", "-c", f"echo {ts} > /proc/sys/net/ipv4/tcp_timestamps"]))

        ports = " or ".join(f"({c.proto} port {c.port})" for c in self.classes)
        tcpdump = subprocess.Popen(
            netns(self.cli_ns, ["tcpdump", "-i", self.cli_tap, "-n", "-s", str(SNAPLEN)])
            + ["--immediate-mode", "-Z", "root", "-w", str(raw), ports],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(("tcpdump", tcpdump))
        first = tcpdump.stderr.readline() if tcpdump.stderr else ""
        if "listening on" not in first:
            tcpdump.wait()
            raise LabError(f"tcpdump did not start: {first.strip()}")

        plan = {
            "session": session,
            "seed": self.seed,
            "flows": flows,
            "classes": [c.name for c in self.classes],
            "work": str(self.work),
        }
        plan_file = self.work / f"plan-{session:02d}.json"
        plan_file.write_text(json.dumps(plan))
        me = [sys.executable, str(Path(__file__).resolve())]
        try:
            clients = subprocess.run(
                netns(self.cli_ns, [*me, "_clients", str(plan_file)]),
                capture_output=True,
                text=True,
                timeout=900,
            )
        except subprocess.TimeoutExpired:
            raise LabError(f"clients of session {session} still running after 900s") from None
        time.sleep(0.5 + 4 * (path.delay_ms + path.jitter_ms) / 1000)  # the last FINs cross
        tcpdump.send_signal(signal.SIGINT)
        _, err = tcpdump.communicate(timeout=30)
        self.procs.remove(("tcpdump", tcpdump))
        if clients.returncode != 0:
            tail = clients.stderr.strip().splitlines()[-1:] or ["no output"]
            raise LabError(f"clients of session {session} failed: {tail[0]}")
        drops = [int(ln.split()[0]) for ln in err.splitlines() if "dropped by kernel" in ln]
        return {
            "classes": json.loads(clients.stdout),
            "client_host": host,
            "kernel_drops": drops[0] if drops else 0,
            "wire_frames_lost": self.wire.lost,
        }


# --------------------------------------------------------------------------------------
# Server content: the web site and the DNS zone (the same in every run)
# --------------------------------------------------------------------------------------

SITE_TEXT = {  # path -> approximate size in bytes
    "index.html": 4200,
    "about.html": 2100,
    "news.html": 9000,
    "css/site.css": 6000,
    "js/app.js": 12000,
    "api/items.json": 1400,
    "api/status.json": 120,
    "robots.txt": 60,
}
SITE_BINARY = {  # path -> (size in bytes, the format's magic bytes); random content
    "img/logo.png": (3500, b"\x89PNG\r\n\x1a\n"),
    "img/photo.jpg": (20000, b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"),
    "favicon.ico": (1150, b"\x00\x00\x01\x00\x01\x00"),
    "files/report.pdf": (30000, b"%PDF-1.7\n"),
}
PAGE_ASSETS = ["css/site.css", "js/app.js", "img/logo.png", "favicon.ico"]


def make_site(root: Path) -> None:
    rng = random.Random("site")
    for rel, size in SITE_TEXT.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".html"):
            paragraphs = "".join(f"<p>{words(rng, 12)}</p>\n" for _ in range(size // 90))
            text = (
                f"<!doctype html>\n<html><head><title>{words(rng, 3)}</title>"
                '<link rel="stylesheet" href="/css/site.css"></head>\n<body>\n'
                f'{paragraphs}<script src="/js/app.js"></script></body></html>\n'
            )
        elif rel == "api/items.json":
            items = [
                {"id": i, "name": words(rng, 2), "price": rng.randint(1, 999)}
                for i in range(size // 50)
            ]
            text = json.dumps({"items": items})
        elif rel == "api/status.json":
            text = json.dumps({"status": "ok", "uptime": 86400, "version": "1.4.2"})
        elif rel.endswith(".css"):
            text = "".join(
                f".c{i} {{ margin: {rng.randint(0, 20)}px; color: #{rng.randrange(1 << 24):06x}; }}\n"
                for i in range(size // 45)
            )
        elif rel.endswith(".js"):
            text = "".join(
                f"function f{i}(a, b) {{ return a * {rng.randint(1, 99)} + b; }} // {words(rng, 4)}\n"
                for i in range(size // 70)
            )
        else:
            text = "User-agent: *\nDisallow: /files/\n"
        p.write_text(text)
    for rel, (size, magic) in SITE_BINARY.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(magic + rng.randbytes(size - len(magic)))


def dns_zone() -> dict[str, list[tuple[str, str]]]:
    """The lab zone: name -> [(record type, value)]."""
    rng = random.Random("zone")
    zone: dict[str, list[tuple[str, str]]] = {}
    hosts = ["www", "api", "cdn", "mail", "mx1", "vpn", "git", "wiki", "ntp", "ldap"]
    hosts += [f"web{i:02d}" for i in range(1, 13)] + [f"db{i:02d}" for i in range(1, 7)]
    hosts += [f"sensor-{i:03d}" for i in range(1, 41)] + [f"printer-{f}f" for f in range(1, 5)]
    for i, h in enumerate(hosts):
        records = [("A", f"10.{rng.randint(1, 250)}.{i // 250}.{i % 250 + 1}")]
        if rng.random() < 0.4:
            records.append(("AAAA", f"2001:db8:{i:x}::{rng.randint(1, 0xFFFF):x}"))
        zone[f"{h}.{DOMAIN}"] = records
    for alias, target in [("static", "cdn"), ("docs", "wiki"), ("shop", "www"), ("img", "cdn")]:
        zone[f"{alias}.{DOMAIN}"] = [("CNAME", f"{target}.{DOMAIN}")]
    zone[DOMAIN] = [
        ("MX", f"mx1.{DOMAIN}"),
        ("TXT", "v=spf1 ip4:10.0.0.0/8 -all"),
        ("TXT", "site-verification=" + "".join(rng.choices(string.ascii_letters, k=43))),
    ]
    dkim = base64.b64encode(rng.randbytes(160)).decode()
    zone[f"sel1._domainkey.{DOMAIN}"] = [("TXT", f"v=DKIM1; k=rsa; p={dkim}")]
    for service, target, port in [
        ("_sip._udp", "vpn", 5060),
        ("_ldap._tcp", "ldap", 389),
        ("_xmpp-client._tcp", "api", 5222),
        ("_imaps._tcp", "mail", 993),
    ]:
        zone[f"{service}.{DOMAIN}"] = [("SRV", f"{target}.{DOMAIN},{port}")]
    return zone


def dnsmasq_config() -> str:
    lines = [
        "port=53",
        f"listen-address={SERVER_IP}",
        "bind-interfaces",
        "no-resolv",  # no upstream: the lab zone only
        "no-hosts",
        "no-poll",
        "pid-file=",
        "user=nobody",
        f"local=/{DOMAIN}/",  # other names in the zone: NXDOMAIN
    ]
    for name, records in dns_zone().items():
        addresses = [v for t, v in records if t in ("A", "AAAA")]
        if addresses:
            lines.append(f"host-record={name},{','.join(addresses)}")  # also makes the PTRs
        for t, v in records:
            if t == "CNAME":
                lines.append(f"cname={name},{v}")
            elif t == "MX":
                lines.append(f"mx-host={name},{v},10")
            elif t == "TXT":
                lines.append(f'txt-record={name},"{v}"')
            elif t == "SRV":
                target, port = v.split(",")
                lines.append(f"srv-host={name},{target},{port},10,50")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# The Python servers (run in the server namespace as `_serve <kind> <work dir>`)
# --------------------------------------------------------------------------------------


def serve(kind: str, work: Path) -> None:
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    if kind in ("http", "https"):

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: several requests per connection

            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(work / "www"), **kw)

            def log_message(self, *a) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            tls: ssl.SSLContext | None = None

            def finish_request(self, request, client_address):  # in the connection's thread
                if self.tls is not None:
                    try:
                        request = self.tls.wrap_socket(request, server_side=True)
                    except OSError:
                        return
                super().finish_request(request, client_address)

        server = Server((SERVER_IP, CLASSES[kind].port), Handler)
        if kind == "https":
            server.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            server.tls.load_cert_chain(work / "tls" / "cert.pem", work / "tls" / "key.pem")
        server.serve_forever()
    elif kind == "rtp":
        # Echo service: each RTP packet goes back with the service's own SSRC, sequence
        # numbers and timestamps (advancing as the caller's do), like a PBX echo test.
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((SERVER_IP, CLASSES["rtp"].port))
        calls: dict[tuple[str, int], list[int]] = {}  # caller -> [ssrc, seq, ts, caller's ts0]
        while True:
            data, caller = sock.recvfrom(2048)
            if len(data) < 12:
                continue
            their_ts = struct.unpack_from("!I", data, 4)[0]
            first = caller not in calls
            call = calls.setdefault(
                caller,
                [random.getrandbits(32), random.getrandbits(16), random.getrandbits(32), their_ts],
            )
            ssrc, seq, ts0, their_ts0 = call
            ts = (ts0 + their_ts - their_ts0) & 0xFFFFFFFF
            marker_pt = (0x80 if first else 0) | (data[1] & 0x7F)
            call[1] = (seq + 1) & 0xFFFF
            with contextlib.suppress(OSError):
                sock.sendto(
                    struct.pack("!BBHII", 0x80, marker_pt, seq, ts, ssrc) + data[12:], caller
                )
    else:
        raise SystemExit(f"unknown server kind {kind}")


# --------------------------------------------------------------------------------------
# The clients (run in the client namespace as `_clients <plan.json>`): one function per
# class, each making one flow (one connection, or one UDP exchange) per call
# --------------------------------------------------------------------------------------


class Ctx:
    """What a flow needs to know about the lab."""

    def __init__(self, work: Path):
        self.work = work
        self.cert = work / "tls" / "cert.pem"
        self.ssh = work / "ssh"
        self.zone = dns_zone()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SSH_")}


def feed(argv: list[str], lines: list[tuple[float, str]] | None = None, env=None, ok=(0,)) -> None:
    """Run a client program, typing `lines` (pause, text) into its stdin as a person would."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if lines is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        if lines is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                for pause, text in lines:
                    time.sleep(pause)
                    proc.stdin.write(text.encode())
                    proc.stdin.flush()
        _, err = proc.communicate(timeout=COMMAND_TIMEOUT)  # closes stdin: end of input
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{argv[0]} timed out") from None
    if proc.returncode not in ok:
        msg = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"{argv[0]} exit {proc.returncode}: {msg[0]}")


# -- http, https ----------------------------------------------------------------------------

USER_AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
    "python-requests/2.32.3",
    "Python-urllib/3.11",
]


def web_requests(rng: random.Random) -> list[tuple[str, str, float]]:
    """One connection's requests: (method, path, pause before it)."""
    kind = rng.choices(["page", "poll", "download", "head", "misc"], [4, 2, 2, 1, 1])[0]
    if kind == "page":  # a page and some of its assets, maybe another page a bit later
        page = rng.choice(["/", "/index.html", "/about.html", "/news.html"])
        assets = rng.sample(PAGE_ASSETS, rng.randint(0, len(PAGE_ASSETS)))
        reqs = [("GET", page, 0.0)] + [("GET", f"/{a}", rng.uniform(0.005, 0.05)) for a in assets]
        if rng.random() < 0.3:
            reqs.append(("GET", rng.choice(["/about.html", "/news.html"]), think(rng, 1.0)))
        return reqs
    if kind == "poll":
        path = rng.choice(["/api/status.json", "/api/items.json"])
        return [("GET", path, think(rng, 0.4) if i else 0.0) for i in range(rng.randint(2, 6))]
    if kind == "download":
        return [("GET", rng.choice(["/img/photo.jpg", "/files/report.pdf", "/js/app.js"]), 0.0)]
    if kind == "head":
        paths = rng.sample(["/", "/img/photo.jpg", "/files/report.pdf", "/api/items.json"], 2)
        return [("HEAD", p, think(rng, 0.2)) for p in paths]
    misc = ["/robots.txt", "/favicon.ico", "/missing.html", "/wp-login.php"]
    return [("GET", rng.choice(misc), 0.0)]


def web_flow(rng: random.Random, ctx: Ctx, tls: bool) -> None:
    port = 443 if tls else 80
    reqs = web_requests(rng)
    if rng.random() < 0.35:  # curl: its URLs back to back on one connection
        argv = ["curl", "-s", "-o", "/dev/null", "--resolve", f"{WEB_HOST}:{port}:{SERVER_IP}"]
        argv += ["-A", rng.choice(USER_AGENTS)] if rng.random() < 0.5 else []
        argv += ["--compressed"] if rng.random() < 0.4 else []
        if tls:
            argv += ["--cacert", str(ctx.cert), "--http1.1"]
            argv += ["--tls-max", "1.2"] if rng.random() < 0.3 else []
        argv += ["-I"] if reqs[0][0] == "HEAD" else []
        scheme = "https" if tls else "http"
        feed(argv + [f"{scheme}://{WEB_HOST}{path}" for _, path, _ in reqs])
        return
    sock = socket.create_connection((SERVER_IP, port), timeout=30)
    if tls:
        context = ssl.create_default_context(cafile=str(ctx.cert))
        if rng.random() < 0.35:
            context.maximum_version = ssl.TLSVersion.TLSv1_2
        sock = context.wrap_socket(sock, server_hostname=WEB_HOST)
    conn = http.client.HTTPConnection(SERVER_IP, port, timeout=30)
    conn.sock = sock  # connected by address, but speaking to WEB_HOST (Host header, SNI)
    headers = {
        "Host": WEB_HOST,
        "User-Agent": rng.choice(USER_AGENTS),
        "Accept": rng.choice(["*/*", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"]),
    }
    if rng.random() < 0.5:
        headers["Accept-Language"] = rng.choice(["en-US,en;q=0.5", "de-DE,de;q=0.9", "fr"])
    if rng.random() < 0.3:
        headers["Cookie"] = f"session={rng.getrandbits(128):032x}"
    try:
        for method, path, pause in reqs:
            time.sleep(pause)
            conn.request(method, path, headers=headers)
            conn.getresponse().read()
    finally:
        conn.close()


def http_flow(rng: random.Random, ctx: Ctx) -> None:
    web_flow(rng, ctx, tls=False)


def https_flow(rng: random.Random, ctx: Ctx) -> None:
    web_flow(rng, ctx, tls=True)


# -- dns ------------------------------------------------------------------------------------


def dns_flow(rng: random.Random, ctx: Ctx) -> None:
    names = [n for n in ctx.zone if not n.startswith("_")]
    how = rng.choices(["getaddrinfo", "short", "reverse", "dig"], [4, 1, 1, 4])[0]
    if how == "getaddrinfo":  # glibc: A (and AAAA) for one name, on one socket
        name = rng.choice([*names, f"nohost{rng.randint(1, 99)}.{DOMAIN}"])
        family = rng.choice([socket.AF_INET, socket.AF_UNSPEC])
        with contextlib.suppress(socket.gaierror):
            socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)
    elif how == "short":  # a bare host name: the resolver appends the search domain
        with contextlib.suppress(socket.gaierror):
            socket.getaddrinfo(rng.choice(names).split(".")[0], 443, socket.AF_INET)
    elif how == "reverse":  # PTR
        addresses = [v for records in ctx.zone.values() for t, v in records if t == "A"]
        with contextlib.suppress(OSError):
            socket.gethostbyaddr(rng.choice(addresses))
    else:
        qtype, name = rng.choice(
            [("A", n) for n in names[:20]]
            + [("AAAA", n) for n in names[:10]]
            + [("MX", DOMAIN), ("TXT", DOMAIN), ("TXT", f"sel1._domainkey.{DOMAIN}")]
            + [("SRV", n) for n in ctx.zone if n.startswith("_")]
            + [("CNAME", f"static.{DOMAIN}"), ("ANY", DOMAIN), ("A", f"missing.{DOMAIN}")]
        )
        flags = rng.choice([[], [], ["+noedns"], ["+nocookie"], ["+dnssec"], ["+norecurse"]])
        feed(["dig", f"@{SERVER_IP}", "+time=1", "+tries=2", *flags, name, qtype])


# -- ssh ------------------------------------------------------------------------------------

SSH_COMMANDS = [
    "uname -a",
    "uptime",
    "cat /etc/os-release",
    "id; hostname; date",
    "df -h",
    "ls -la /usr/bin | head -n {n}",
    "ps -eo pid,comm | head -n {n}",
    "head -c {k} /dev/urandom | base64",
    "sleep 0.{d}; date -u",
    "seq 1 {n} | paste -sd+",
]
TYPED_COMMANDS = ["ls", "pwd", "date", "uptime", "whoami", "echo hello", "df -h /"]
SSH_CIPHERS = ["aes128-ctr", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"]


def ssh_flow(rng: random.Random, ctx: Ctx) -> None:
    key = ctx.ssh / f"id_{rng.choice(['ed25519', 'ecdsa'])}"
    opts = ["-F", "/dev/null", "-i", str(key), "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
    opts += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    opts += ["-c", rng.choice(SSH_CIPHERS)] if rng.random() < 0.5 else []
    how = rng.choices(["command", "typed", "scp"], [8, 1, 1])[0]
    if how == "command":
        command = rng.choice(SSH_COMMANDS).format(
            n=rng.randint(5, 120), k=rng.randint(100, 12000), d=rng.randint(1, 9)
        )
        feed(["ssh", *opts, f"root@{SERVER_IP}", command], env=ctx.env)
    elif how == "typed":  # a person at a terminal: one keystroke at a time, echoed back
        keys: list[tuple[float, str]] = [(0.8, "")]
        for command in [*rng.sample(TYPED_COMMANDS, rng.randint(1, 2)), "exit"]:
            keys += [(rng.uniform(0.04, 0.18), ch) for ch in command + "\n"]
            keys.append((think(rng, 0.6), ""))
        feed(["ssh", "-tt", *opts, f"root@{SERVER_IP}"], keys, env=ctx.env, ok=(0, 255))
    else:
        src = ctx.work / "www" / rng.choice(["img/photo.jpg", "js/app.js", "img/logo.png"])
        dest = ctx.work / f"scp-{rng.getrandbits(64):016x}"
        try:
            feed(["scp", "-q", *opts, f"root@{SERVER_IP}:{src}", str(dest)], env=ctx.env)
        finally:
            dest.unlink(missing_ok=True)


# -- redis ----------------------------------------------------------------------------------


def redis_command(rng: random.Random) -> list[str]:
    """One Redis command, as an application's cache, session store or queue sends it."""
    key = f"{rng.choice(['user', 'session', 'cache:page', 'cart', 'rate'])}:{rng.randint(1, 500)}"
    value = json.dumps({"v": words(rng, rng.randint(1, 8)), "n": rng.randint(0, 10**6)})
    if rng.random() < 0.1:
        value = base64.b64encode(rng.randbytes(rng.randint(200, 1500))).decode()
    queue = f"queue:{rng.randint(1, 5)}"
    users = [f"user:{rng.randint(1, 500)}" for _ in range(rng.randint(2, 8))]
    return rng.choice(
        [
            ["SET", key, value],
            ["SET", key, value, "EX", str(rng.randint(10, 3600))],
            ["GET", key],
            ["GET", key],
            ["INCR", f"counter:{rng.randint(1, 20)}"],
            ["LPUSH", queue, value],
            ["LRANGE", queue, "0", str(rng.randint(1, 50))],
            ["HSET", f"{key}:h", f"field{rng.randint(1, 9)}", value],
            ["HGETALL", f"{key}:h"],
            ["MGET", *users],
            ["EXPIRE", key, "60"],
            ["DEL", key],
            ["EXISTS", key],
            ["PING"],
        ]
    )


def resp(args: list[str]) -> bytes:
    """A command in the Redis serialisation protocol."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def read_reply(f) -> None:
    """Read and drop one RESP2 or RESP3 reply."""
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, n = line[:1], line[1:-2]
    if kind in (b"$", b"=", b"!") and int(n) >= 0:  # bulk string
        f.read(int(n) + 2)
    elif kind in (b"*", b"~", b">", b"%"):  # array, set, push, map
        for _ in range(max(0, int(n)) * (2 if kind == b"%" else 1)):
            read_reply(f)


def redis_flow(rng: random.Random, ctx: Ctx) -> None:
    cli = ["redis-cli", "-h", SERVER_IP, "-p", "6379"]
    how = rng.choices(["app", "cli", "repeat", "pipe"], [6, 2, 2, 1])[0]
    if how == "app":
        # What an application's Redis library sends: a greeting (redis-py 5's CLIENT
        # SETINFO, a RESP3 HELLO, or none), then commands with think times, some pipelined.
        # (Not redis-cli fed on stdin: it first fetches COMMAND DOCS, about 200 kB.)
        greeting = rng.choice(
            [
                [],
                [["HELLO", "3"]],
                [
                    ["CLIENT", "SETINFO", "LIB-NAME", "redis-py"],
                    ["CLIENT", "SETINFO", "LIB-VER", "5.0.8"],
                ],
            ]
        )
        with socket.create_connection((SERVER_IP, 6379), timeout=30) as sock:
            replies = sock.makefile("rb")
            for command in greeting:
                sock.sendall(resp(command))
                read_reply(replies)
            for i in range(rng.randint(1, 8)):
                time.sleep(think(rng, 0.15) if i else 0.0)
                batch = [redis_command(rng) for _ in range(rng.choice([1, 1, 1, 2, 5]))]
                sock.sendall(b"".join(resp(c) for c in batch))
                for _ in batch:
                    read_reply(replies)
    elif how == "cli":  # redis-cli CMD ARGS...: one command, one connection
        feed([*cli, *redis_command(rng)])
    elif how == "repeat":  # redis-cli -r N -i T: the same command N times on one connection
        command = rng.choice([["INCR", "hits"], ["GET", "user:1"], ["PING"], ["LLEN", "queue:1"]])
        every = f"{rng.uniform(0.05, 0.3):.2f}"
        feed([*cli, "-r", str(rng.randint(2, 8)), "-i", every, *command])
    else:  # mass insertion: a burst of SETs in the protocol
        batch = [
            ["SET", f"bulk:{rng.randint(0, 9999)}:{i}", words(rng, rng.randint(1, 6))]
            for i in range(rng.randint(20, 120))
        ]
        feed([*cli, "--pipe"], [(0.0, b"".join(resp(c) for c in batch).decode())])


# -- mqtt -----------------------------------------------------------------------------------


def mqtt_flow(rng: random.Random, ctx: Ctx) -> None:
    room = f"lab/b{rng.randint(1, 3)}/r{rng.randint(1, 6)}"
    common = ["-h", SERVER_IP, "-p", "1883", "-V", rng.choice(["mqttv311", "mqttv311", "mqttv5"])]
    if rng.random() < 0.5:
        common += ["-i", f"{rng.choice(['sensor', 'gw', 'app', 'dash'])}-{rng.randint(1, 999)}"]
    common += ["-k", str(rng.choice([15, 30, 60, 120])), "-q", str(rng.choice([0, 0, 1, 1, 2]))]
    how = rng.choices(["publish", "stream", "subscribe"], [4, 3, 2])[0]
    if how == "publish":
        kind = rng.choice(["temp", "humidity", "co2", "door", "power"])
        reading = {
            "sensor": kind,
            "value": round(rng.uniform(0, 100), 2),
            "seq": rng.randint(1, 9999),
        }
        message = json.dumps(reading)
        if rng.random() < 0.1:  # now and then a larger message: a snapshot, a log chunk
            message = base64.b64encode(rng.randbytes(rng.randint(600, 3000))).decode()
        retain = ["-r"] if rng.random() < 0.3 else []
        feed(["mosquitto_pub", *common, *retain, "-t", f"{room}/{kind}", "-m", message])
    elif how == "stream":  # periodic readings on one connection (-l: a message per line)
        kind = rng.choice(["temp", "power", "vibration"])
        lines = [
            (
                rng.uniform(0.1, 0.5) if i else 0.0,
                json.dumps({"v": round(rng.gauss(20, 5), 3), "i": i}) + "\n",
            )
            for i in range(rng.randint(2, 10))
        ]
        feed(["mosquitto_pub", *common, "-t", f"{room}/{kind}", "-l"], lines)
    else:  # the retained state now, then whatever arrives within a second or two
        topic = rng.choice([f"{room}/#", f"{room.rsplit('/', 1)[0]}/+/temp", "lab/#"])
        count, wait = str(rng.randint(1, 12)), str(rng.randint(1, 2))
        # exit status 27: -W timed out before -C messages arrived
        feed(["mosquitto_sub", *common, "-t", topic, "-C", count, "-W", wait], ok=(0, 27))


# -- postgres -------------------------------------------------------------------------------


def sql_statement(rng: random.Random) -> str:
    a = rng.randint(1, 1900)
    event = json.dumps({"item": a, "note": words(rng, 3)})
    return rng.choice(
        [
            "SELECT count(*) FROM items;",
            f"SELECT * FROM items WHERE id BETWEEN {a} AND {a + rng.randint(1, 100)};",
            f"SELECT name, price FROM items WHERE price > {rng.randint(1, 499)}"
            f" ORDER BY price LIMIT {rng.randint(1, 50)};",
            f"UPDATE items SET stock = stock - 1, updated = now() WHERE id = {a};",
            f"INSERT INTO events (kind, payload)"
            f" VALUES ('{rng.choice(['view', 'buy', 'login'])}', '{event}');",
            "SELECT now(), version();",
            f"SELECT md5(random()::text) FROM generate_series(1, {rng.randint(1, 80)});",
            "SELECT kind, count(*) FROM events GROUP BY kind;",
            "SELECT relname, relkind FROM pg_class ORDER BY relname LIMIT 25;",
            f"BEGIN; UPDATE items SET price = price * 1.01 WHERE id = {a}; COMMIT;",
        ]
    )


def postgres_flow(rng: random.Random, ctx: Ctx) -> None:
    env = dict(ctx.env)
    env.update(
        PGPASSWORD="demo" if rng.random() > 0.04 else "wrong",  # now and then a failed login
        PGSSLMODE=rng.choice(["disable", "prefer"]),  # prefer: SSLRequest, refused, plain
        PGAPPNAME=rng.choice(["psql", "report-job", "billing-etl", "dashboard"]),
        PGCONNECT_TIMEOUT="20",
    )
    psql = ["psql", "-X", "-q", "-h", SERVER_IP, "-p", "5432", "-U", "demo", "-d", "demo"]
    if rng.random() < 0.3:
        feed([*psql, "-c", sql_statement(rng)], env=env, ok=(0, 1, 2))
    else:
        n = rng.randint(2, 6)
        lines = [(think(rng, 0.3) if i else 0.0, sql_statement(rng) + "\n") for i in range(n)]
        feed([*psql, "-f", "-"], lines, env=env, ok=(0, 1, 2))


# -- rtp ------------------------------------------------------------------------------------

RTP_CODECS = [  # payload type, payload bytes (min, max), packet interval (s), clock ticks
    (0, (160, 160), 0.020, 160),  # PCMU (G.711 mu-law)
    (8, (160, 160), 0.020, 160),  # PCMA (G.711 A-law)
    (9, (160, 160), 0.020, 160),  # G.722
    (18, (20, 20), 0.020, 160),  # G.729
    (3, (33, 33), 0.020, 160),  # GSM
    (111, (40, 140), 0.020, 960),  # Opus, variable bitrate
    (0, (240, 240), 0.030, 240),  # PCMU, 30 ms packets
]


def rtp_flow(rng: random.Random, ctx: Ctx) -> None:
    pt, (lo, hi), interval, ticks = rng.choice(RTP_CODECS)
    silence = {0: 0xFF, 8: 0xD5}.get(pt)  # G.711's code for silence
    ssrc, seq, ts = rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(32)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((SERVER_IP, CLASSES["rtp"].port))
        sock.setblocking(False)
        start = time.monotonic()
        for i in range(rng.randint(6, 18)):
            size = rng.randint(lo, hi)
            if silence is None:
                payload = rng.randbytes(size)
            else:  # near-silence with a little noise
                payload = bytes(
                    silence ^ (rng.getrandbits(3) * (rng.random() < 0.5)) for _ in range(size)
                )
            marker_pt = (0x80 if i == 0 else 0) | pt
            header = struct.pack(
                "!BBHII", 0x80, marker_pt, (seq + i) & 0xFFFF, (ts + i * ticks) & 0xFFFFFFFF, ssrc
            )
            sock.send(header + payload)
            with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                while sock.recv(2048):  # the echoes
                    pass
            time.sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
        time.sleep(0.3)  # the last echoes arrive


FLOWS = {
    "http": http_flow,
    "https": https_flow,
    "dns": dns_flow,
    "ssh": ssh_flow,
    "redis": redis_flow,
    "mqtt": mqtt_flow,
    "postgres": postgres_flow,
    "rtp": rtp_flow,
}


def run_clients(plan_file: Path) -> None:
    """Run one session's flows, all classes at once; print a JSON report on stdout."""
    plan = json.loads(plan_file.read_text())
    ctx = Ctx(Path(plan["work"]))
    report = {name: {"flows": plan["flows"], "failed": 0, "errors": []} for name in plan["classes"]}

    def one_flow(name: str, i: int) -> None:
        rng = random.Random(f"{plan['seed']}:{name}:{plan['session']}:{i}")
        time.sleep(think(rng, MEAN_FLOW_GAP))
        try:
            FLOWS[name](rng, ctx)
        except Exception as exc:  # a failed flow is counted and reported, not fatal
            report[name]["failed"] += 1
            report[name]["errors"] = [*report[name]["errors"], f"{type(exc).__name__}: {exc}"][:3]

    def one_class(name: str) -> None:
        with ThreadPoolExecutor(FLOW_CONCURRENCY, thread_name_prefix=name) as pool:
            list(pool.map(lambda i: one_flow(name, i), range(plan["flows"])))

    threads = [threading.Thread(target=one_class, args=(name,)) for name in plan["classes"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(report))


# --------------------------------------------------------------------------------------
# Splitting a session capture into per-class files (pcap read and written here)
# --------------------------------------------------------------------------------------


@dataclass
class FileStats:
    file: str  # relative to the output folder
    cls: str
    session: int
    path: str
    flows: int = 0
    packets: int = 0
    bytes: int = 0  # file size
    wire_bytes: int = 0  # sum of the original frame lengths


def parse_frame(buf: bytes) -> tuple[str, str, int, str, int, int, int] | None:
    """(proto, src, sport, dst, dport, header bytes, payload bytes) of an IPv4 TCP/UDP frame."""
    if len(buf) < 34 or buf[12:14] != b"\x08\x00":
        return None
    ihl = (buf[14] & 0x0F) * 4
    total, proto = struct.unpack_from("!H", buf, 16)[0], buf[23]
    l4 = 14 + ihl
    if proto not in (6, 17) or len(buf) < l4 + 14:
        return None
    sport, dport = struct.unpack_from("!HH", buf, l4)
    l4_len = (buf[l4 + 12] >> 4) * 4 if proto == 6 else 8
    src, dst = socket.inet_ntoa(buf[26:30]), socket.inet_ntoa(buf[30:34])
    name = "tcp" if proto == 6 else "udp"
    return name, src, sport, dst, dport, l4 + l4_len, max(0, total - ihl - l4_len)


def split_session(
    raw: Path, out: Path, session: int, classes: list[LabClass], path: NetPath
) -> dict:
    """Write <out>/<class>/<class>-<NN>.pcap for each class from one session's capture."""
    by_port = {(c.proto, c.port): c for c in classes}
    data = raw.read_bytes()
    if len(data) < 24:
        raise LabError(f"session {session}: empty capture")
    magic, _, _, _, _, snaplen, linktype = struct.unpack_from("<IHHiIII", data, 0)
    if magic != 0xA1B2C3D4 or linktype != 1:
        raise LabError(f"session {session}: not a microsecond Ethernet pcap from tcpdump")
    records: dict[str, list[bytes]] = {c.name: [] for c in classes}
    stats = {
        c.name: FileStats(f"{c.name}/{c.name}-{session:02d}.pcap", c.name, session, path.name)
        for c in classes
    }
    flows: dict[tuple, list[int]] = {}  # 5-tuple -> [packets so far, payload bytes so far]
    other = duplicates = oversize = 0
    last: tuple[float, bytes] | None = None
    off = 24
    while off + 16 <= len(data):
        ts_s, ts_us, caplen, origlen = struct.unpack_from("<IIII", data, off)
        frame = data[off + 16 : off + 16 + caplen]
        off += 16 + caplen
        info = parse_frame(frame)
        if info is None:
            other += 1
            continue
        proto, src, sport, dst, dport, header, payload = info
        cls = by_port.get((proto, dport)) or by_port.get((proto, sport))
        if cls is None or {src, dst} != {CLIENT_IP, SERVER_IP}:
            other += 1  # not to a class's server port: a helper connection or stray traffic
            continue
        stamp = ts_s + ts_us / 1e6
        if payload and last is not None and frame == last[1] and stamp - last[0] < 0.001:
            duplicates += 1  # the same data frame twice within a millisecond
        last = (stamp, frame)
        oversize += origlen > 1514
        key = (proto, *sorted([(src, sport), (dst, dport)]))
        seen = flows.setdefault(key, [0, 0])
        keep = header + min(payload, max(0, FLOW_PAYLOAD - seen[1]))
        if seen[0] < HEAD_PACKETS:
            keep = max(keep, HEAD_BYTES)
        keep = min(keep, caplen)
        seen[0] += 1
        seen[1] += payload
        records[cls.name].append(struct.pack("<IIII", ts_s, ts_us, keep, origlen) + frame[:keep])
        st = stats[cls.name]
        st.packets += 1
        st.wire_bytes += origlen
    for proto, (_, port_a), (_, port_b) in flows:
        cls = by_port.get((proto, port_a)) or by_port[(proto, port_b)]
        stats[cls.name].flows += 1
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)
    for c in classes:
        final = out / stats[c.name].file
        final.parent.mkdir(parents=True, exist_ok=True)
        part = final.with_name(f".{final.name}.part")
        part.write_bytes(header + b"".join(records[c.name]))
        os.replace(part, final)
        stats[c.name].bytes = final.stat().st_size
    return {"files": stats, "other": other, "duplicates": duplicates, "oversize": oversize}


# --------------------------------------------------------------------------------------
# What goes beside the captures: ports.json, manifest.json, README.md
# --------------------------------------------------------------------------------------


def count_rows(files: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(f["cls"] for f in files):
        fs = [f for f in files if f["cls"] == name]
        rows.append({"class": name, "files": len(fs)})
        rows[-1].update({k: sum(f[k] for f in fs) for k in ("flows", "packets", "bytes")})
    return rows


def table(rows: list[dict]) -> str:
    """A Markdown table with a total row."""
    cols = ["class", "files", "flows", "packets", "bytes"]
    total = {"class": "total", **{k: sum(r[k] for r in rows) for k in cols[1:]}}
    body = [[r["class"], *(f"{r[k]:,}" for k in cols[1:])] for r in [*rows, total]]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]

    def line(cells: list[str]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cols), rule, *(line(b) for b in body)])


def tool_versions() -> list[str]:
    found = []
    for argv in (
        ["tcpdump", "--version"],
        ["dnsmasq", "--version"],
        ["ssh", "-V"],
        ["redis-server", "--version"],
        ["mosquitto", "-h"],
        [f"{find_pg_bindir()}/postgres", "--version"],
        ["curl", "--version"],
        ["openssl", "version"],
    ):
        with contextlib.suppress(OSError):
            p = subprocess.run(argv, capture_output=True, text=True)
            lines = (p.stdout + p.stderr).strip().splitlines()
            if lines:
                found.append(lines[0].strip())
    return found


def write_readme(out: Path, manifest: dict) -> None:
    classes = manifest["classes"]
    class_rows = "\n".join(
        f"| `{name}` | {c['proto'].upper()} {c['port']} | {c['server']} | {c['clients']} |"
        for name, c in classes.items()
    )
    session_rows = "\n".join(
        f"| {s['session']:02d} | {p['name']} | {p['delay_ms']:g} ms +- {p['jitter_ms']:g} ms | "
        f"{2 * p['delay_ms']:g} ms | {p['rate_mbit']:g} Mbit/s | {100 * p['loss']:g} % | "
        f"`{s['client_host']['resolver_options'] or '-'}` | "
        f"{'on' if s['client_host']['tcp_timestamps'] else 'off'} |"
        for s in manifest["sessions"]
        for p in [s["path"]]
    )
    args = manifest["args"]
    tools = "\n".join(f"- {t}" for t in manifest["tools"])
    text = f"""# flowsplit demo captures: a lab capture

These captures are **lab traffic made by flowsplit itself** on one machine, not traffic
from a real network. Real protocol implementations (servers and clients from Debian and
from the Python standard library) talked to each other across an emulated WAN link between
two private network namespaces, and tcpdump recorded the client's side of the link. Each
flow is labelled by the server it talks to: the class is the folder name.

Regenerate (as root; about 3 minutes; the script's docstring lists the Debian packages):

    sudo python3 scripts/make_demo_capture.py --out demo/captures --sessions {args["sessions"]} \\
        --flows-per-session {args["flows_per_session"]} --seed {args["seed"]}

## Classes

| class | server port | server | clients |
|---|---|---|---|
{class_rows}

`ports.json` holds the class -> server port map for programs. A file holds only TCP/UDP
packets between the client (10.77.0.1) and the server (10.77.0.2) on its class's server
port; nothing else was on the link but ARP.

## Files and counts

`<class>/<class>-<NN>.pcap`: one file per class and session NN, so a dataset can be split
into train/val/test by capture file. Flows are distinct TCP/UDP 5-tuples per file; bytes
are file sizes:

{table(count_rows(manifest["files"]))}

A class's flows are not always exactly sessions x flows per session: dig retries from a new
source port after a lost packet, and two lookups can share a source port. `manifest.json`
lists every file with its session, link profile, flows and packets, and the run's settings.

## How it was made

- Two network namespaces (client 10.77.0.1, server 10.77.0.2) joined by a pair of TAP
  devices. A thread of the script copies frames between them after a one-way delay with
  uniform jitter, a serialisation delay at the link rate and random loss, each direction
  in order: what `tc qdisc ... netem delay D J rate R loss L` does, done in userspace
  because the kernel the capture was made on has no `sch_netem`. MTU 1500, no offloads:
  no frame is larger than 1514 bytes and every packet appears once (no loopback
  duplicates). IPv6 is off on the lab link.
- A session runs all classes' clients at once ({args["flows_per_session"]} flows per class, at most
  {FLOW_CONCURRENCY} of a class in flight, exponential pauses) under one link profile and
  one client-host setting (resolver options; TCP timestamps on like Linux or macOS, off
  like Windows). Each flow's behaviour is drawn from a generator seeded with (seed, class,
  session, flow): reruns do the same things, only timing differs.
- Capture: `tcpdump -i <client tap> -s {SNAPLEN}` with a filter on the class ports. Each packet
  is then cut after its headers plus the payload bytes that are still among its flow's
  first {FLOW_PAYLOAD} payload bytes (both directions, in packet order), keeping at least
  {HEAD_BYTES} bytes of each of a flow's first {HEAD_PACKETS} packets; every record keeps the
  packet's original length. The payload-byte views (first 784 payload bytes of a flow, first
  64 bytes of its first 16 packets) are exactly those of a full capture; sizes, flags and
  timing are there for every packet; the files stay small. A view asking for more than
  {FLOW_PAYLOAD} payload bytes per flow sees zeros beyond them.

| session | link | one-way delay | RTT | rate | loss | resolver options | TCP timestamps |
|---|---|---|---|---|---|---|---|
{session_rows}

Made with:

{tools}

## Caveats

- One client address, one server address, fixed server ports: addresses, MACs and ports
  identify the class trivially. Mask them (flowsplit does by default) and report results
  with and without ports.
- Timing comes from an emulated link on one machine; payloads are lab content (a small
  generated web site, a generated DNS zone, synthetic sensor readings, SQL on a demo table).
- All classes of a session share its link profile, so the profile is not a class cue.

Made by the flowsplit project with `scripts/make_demo_capture.py`; same licence as flowsplit.
"""
    (out / "README.md").write_text(text)


def write_outputs(
    out: Path, args, classes: list[LabClass], files: list[FileStats], sessions: list[dict]
) -> list[dict]:
    """ports.json, manifest.json and README.md, keeping classes this run did not remake."""
    made = {c.name for c in classes}
    kept_files: list[dict] = []
    kept_classes: dict[str, dict] = {}
    with contextlib.suppress(OSError, ValueError, KeyError):
        old = json.loads((out / "manifest.json").read_text())
        kept_files = [
            f for f in old["files"] if f["cls"] not in made and (out / f["file"]).exists()
        ]
        kept_classes = {
            k: v for k, v in old["classes"].items() if k in {f["cls"] for f in kept_files}
        }
    all_classes = {**kept_classes}
    for c in classes:
        all_classes[c.name] = {
            "proto": c.proto,
            "port": c.port,
            "server": c.server,
            "clients": c.clients,
        }
    order = [*CLASSES, *sorted(all_classes)]
    all_classes = {k: all_classes[k] for k in sorted(all_classes, key=order.index)}
    manifest = {
        "generator": "scripts/make_demo_capture.py",
        "lab_capture": True,
        "args": {
            "sessions": args.sessions,
            "flows_per_session": args.flows_per_session,
            "seed": args.seed,
        },
        "capture": {
            "snaplen": SNAPLEN,
            "flow_payload": FLOW_PAYLOAD,
            "head_packets": HEAD_PACKETS,
            "head_bytes": HEAD_BYTES,
        },
        "classes": all_classes,
        "sessions": sessions,
        "tools": tool_versions(),
        "files": sorted(
            kept_files + [asdict(f) for f in files],
            key=lambda f: (order.index(f["cls"]), f["file"]),
        ),
    }
    ports = {name: c["port"] for name, c in all_classes.items()}
    for name, text in [
        ("ports.json", json.dumps(ports, indent=2) + "\n"),
        ("manifest.json", json.dumps(manifest, indent=1) + "\n"),
    ]:
        part = out / f".{name}.part"
        part.write_text(text)
        os.replace(part, out / name)
    write_readme(out, manifest)
    return count_rows(manifest["files"])


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Regenerate flowsplit's embedded lab capture: real servers and clients in "
        "two network namespaces joined by an emulated WAN link, captured with tcpdump, one "
        "pcap per class and session. Needs root.",
        epilog="Example: sudo python3 scripts/make_demo_capture.py --out demo/captures",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=REPO / "demo" / "captures",
        help="output folder (default: the repository's demo/captures)",
    )
    ap.add_argument(
        "--sessions", type=int, default=6, help="capture files per class (default: %(default)s)"
    )
    ap.add_argument(
        "--flows-per-session",
        type=int,
        default=40,
        help="flows per class and session (default: %(default)s)",
    )
    ap.add_argument(
        "--seed", type=int, default=1, help="seed of every client decision (default: %(default)s)"
    )
    ap.add_argument(
        "--classes",
        default=",".join(CLASSES),
        help=f"comma-separated subset of {','.join(CLASSES)} (default: all); other classes' "
        "files in --out are kept",
    )
    ap.add_argument(
        "--keep-raw",
        type=Path,
        metavar="DIR",
        help="also keep each session's whole capture (all classes, full frames) in DIR",
    )
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="print the first errors of failed flows"
    )
    args = ap.parse_args(argv)
    names = [c for c in args.classes.split(",") if c]
    unknown = [c for c in names if c not in CLASSES]
    if unknown or not names:
        ap.error(
            f"--classes: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(CLASSES)}"
        )
    if args.sessions < 1 or args.flows_per_session < 1:
        ap.error("--sessions and --flows-per-session must be at least 1")
    args.class_list = [CLASSES[c] for c in dict.fromkeys(names)]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    classes: list[LabClass] = args.class_list
    problem = missing_prerequisites(classes)
    if problem:
        print(f"make_demo_capture: {problem}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.keep_raw:
        args.keep_raw.mkdir(parents=True, exist_ok=True)

    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)  # clean up as on Ctrl-C
    signal.signal(signal.SIGHUP, interrupted)
    started = time.monotonic()
    files: list[FileStats] = []
    sessions: list[dict] = []
    try:
        with Lab(classes, args.seed) as lab:
            names = ", ".join(c.name for c in classes)
            print(f"lab up in {time.monotonic() - started:.0f}s: {names}", flush=True)
            for s in range(1, args.sessions + 1):
                path = PATHS[(s - 1) % len(PATHS)]
                t0 = time.monotonic()
                raw = lab.work / f"session-{s:02d}.pcap"
                report = lab.capture_session(s, args.flows_per_session, path, raw)
                result = split_session(raw, out, s, classes, path)
                if args.keep_raw:
                    shutil.move(raw, args.keep_raw / raw.name)
                else:
                    raw.unlink()
                files += result["files"].values()
                failed = {k: v["failed"] for k, v in report["classes"].items() if v["failed"]}
                sessions.append(
                    {
                        "session": s,
                        "path": asdict(path),
                        "client_host": report["client_host"],
                        "failed_flows": failed,
                        "kernel_drops": report["kernel_drops"],
                        "duplicates": result["duplicates"],
                        "oversize_frames": result["oversize"],
                        "other_packets": result["other"],
                    }
                )
                flows = sum(f.flows for f in result["files"].values())
                print(
                    f"session {s:02d} ({path.name}, {2 * path.delay_ms:g} ms RTT): {flows} flows "
                    f"in {time.monotonic() - t0:.0f}s; failed flows {failed or 'none'}; "
                    f"other packets {result['other']}, duplicates {result['duplicates']}, "
                    f"oversize {result['oversize']}, kernel drops {report['kernel_drops']}",
                    flush=True,
                )
                if args.verbose:
                    for name, v in report["classes"].items():
                        for error in v["errors"]:
                            print(f"  {name}: {error}")
    except LabError as exc:
        print(f"make_demo_capture: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        for part in [*out.glob(".*.part"), *out.glob("*/.*.part")]:  # half-written files
            part.unlink(missing_ok=True)
        print("make_demo_capture: interrupted; lab removed", file=sys.stderr)
        return 130
    made = {Path(f.file).name for f in files}
    for c in classes:  # files of sessions beyond --sessions are left from an earlier run
        for old in (out / c.name).glob(f"{c.name}-*.pcap"):
            if old.name not in made:
                old.unlink()
    rows = write_outputs(out, args, classes, files, sessions)
    print(table(rows))
    print(f"wrote {out} in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["_serve"]:
        serve(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1:2] == ["_clients"]:
        run_clients(Path(sys.argv[2]))
    else:
        sys.exit(main())
