"""MDNS, STUN and QUIC traffic made on this machine, for the cross-source set (issue 32).

The foreign captures of ``scripts/foreign_captures.py`` hold only 4 MDNS, 2 STUN and 1
QUIC flows: too few to score those classes. This script makes more with implementations
that have nothing to do with the nDPI test captures, on a small virtual LAN, and
captures it with tcpdump:

    sudo python3 scripts/generated_captures.py --out DIR --python VENV/bin/python \\
        [--runs 4] [--seed 0]

``--python`` is an interpreter with aioquic, zeroconf and aioice (PyPI):
``python3 -m venv V && V/bin/pip install aioquic zeroconf aioice``. The system needs
``ip`` (iproute2), ``tcpdump``, coturn (``turnserver``, ``turnutils_stunclient``,
``turnutils_uclient``, ``turnutils_peer``), ``dig`` (bind9-dnsutils) and, when
present, ``avahi-daemon``: all Debian packages. It runs as root: it creates network
namespaces ``fsg-br`` (a bridge) and ``fsg-h1`` .. ``fsg-h4`` (hosts, one veth each into
the bridge) and removes them at the end, also after an error. Nothing leaves the
namespaces. Versions used for the figures in docs/generalisation.md: aioquic 1.7.2,
zeroconf 0.154.0, aioice 0.13.0 (PyPI); coturn 4.6.1, avahi 0.8, bind9-dnsutils 9.18,
tcpdump 4.99.3 (Debian 12).

Each run ``r`` writes ``DIR/generated__lan-r{r}.pcap`` (UDP only, captured on the
bridge, so every host's packets once), with its own addresses (``10.{60+r}.0.0/24``,
``fd00:{60+r}::/64``) and, drawn from ``random.Random(seed * 1000 + r)``:

- **QUIC**: aioquic servers on h1 (ports among 443, 4433, 8443, 9443; ALPN h3 and
  hq-interop; half of them with Retry), 9 client connections from h2-h4, each with a
  drawn QUIC version (1 or 2), ALPN, cipher suite, datagram size, congestion control,
  IP version, and 1-4 requests of 200 B to 120 kB.
- **STUN**: coturn's ``turnserver`` on h1 (ports 3478 and 3479, long-term credentials);
  ``turnutils_stunclient`` binding requests; aioice ICE agents on h2 and h3 (1-2
  components, IPv4 or both) gathering against the server and then checking connectivity
  with each other and exchanging datagrams; aioice with a TURN relay through coturn;
  ``turnutils_uclient`` TURN allocations relaying to ``turnutils_peer`` on h4.
- **MDNS**: python-zeroconf on three hosts and avahi-daemon (Debian, without D-Bus, in
  the host's private mounts) on a drawn fourth, each (IPv4 only, IPv6 only or both)
  announcing 1-3 services of drawn types, names and TXT records; the zeroconf hosts
  browse and resolve the others' services, then unregister (goodbye packets); ``dig``
  legacy-unicast queries (an ephemeral port to 224.0.0.251:5353, answered by unicast).

The seed fixes every drawn parameter (``DIR/generated.json`` lists them per run), not
the bytes: keys, connection IDs, ephemeral ports and timing differ on every run, so the
captures are made again, not pinned by digest.

A weaker "other source" than a real network: one machine, one kernel, no loss, no
middleboxes, sub-millisecond delays, few implementations (aioquic for every QUIC flow).
The labels are not given here: ``flowsplit prepare --label-by ndpi`` labels these
captures as it labels the others (nDPI through NFStream).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOSTS = 4
NS_BR = "fsg-br"
TOOLS = ("ip", "tcpdump", "turnserver", "turnutils_stunclient", "turnutils_uclient", "dig")


# --- the virtual LAN (runs as root) ---------------------------------------------------
def sh(*cmd, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=check, capture_output=True, text=True, **kw)


def client(*cmd, timeout: float) -> subprocess.CompletedProcess:
    """A client's run; one that hangs is stopped after ``timeout`` s (rc 124), the run goes on."""
    try:
        return sh(*cmd, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        return subprocess.CompletedProcess(e.cmd, 124, out, f"timed out after {timeout} s\n")


def nsexec(ns: str, *cmd) -> list[str]:
    return ["ip", "netns", "exec", ns, *map(str, cmd)]


def host_ns(i: int) -> str:
    return f"fsg-h{i}"


def addresses(run: int) -> dict[int, tuple[str, str]]:
    """Host number -> (IPv4, IPv6) in run ``run``'s subnets."""
    net = 60 + run
    return {
        i: (f"10.{net}.0.{10 * i + run}", f"fd00:{net}::{10 * i + run:x}")
        for i in range(1, HOSTS + 1)
    }


def lan_down() -> None:
    for ns in [NS_BR, *(host_ns(i) for i in range(1, HOSTS + 1))]:
        sh("ip", "netns", "del", ns, check=False)


def lan_up(run: int) -> dict[int, tuple[str, str]]:
    lan_down()
    addr = addresses(run)
    sh("ip", "netns", "add", NS_BR)
    sh(*nsexec(NS_BR, "ip", "link", "add", "br0", "type", "bridge"))
    # no snooping: every host gets the multicast (mDNS) without IGMP/MLD joins first
    sh(*nsexec(NS_BR, "ip", "link", "set", "br0", "type", "bridge", "mcast_snooping", "0"))
    sh(*nsexec(NS_BR, "ip", "link", "set", "br0", "up"))
    for i, (v4, v6) in addr.items():
        ns = host_ns(i)
        sh("ip", "netns", "add", ns)
        sh(
            "ip",
            "link",
            "add",
            f"fsg{i}",
            "netns",
            ns,
            "type",
            "veth",
            "peer",
            f"fsgp{i}",
            "netns",
            NS_BR,
        )
        sh(*nsexec(NS_BR, "ip", "link", "set", f"fsgp{i}", "master", "br0", "up"))
        for key in ("all", "default"):
            sh(*nsexec(ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.accept_dad=0"))
        sh(*nsexec(ns, "ip", "link", "set", "lo", "up"))
        sh(*nsexec(ns, "ip", "link", "set", f"fsg{i}", "name", "eth0"))
        sh(*nsexec(ns, "ip", "addr", "add", f"{v4}/24", "dev", "eth0"))
        sh(*nsexec(ns, "ip", "-6", "addr", "add", f"{v6}/64", "dev", "eth0", "nodad"))
        sh(*nsexec(ns, "ip", "link", "set", "eth0", "up"))
        sh(*nsexec(ns, "ip", "route", "add", "224.0.0.0/4", "dev", "eth0"))
    time.sleep(1.0)
    return addr


@contextlib.contextmanager
def capture(path: Path):
    """tcpdump on the bridge (UDP only) while the block runs."""
    p = subprocess.Popen(
        nsexec(NS_BR, "tcpdump", "-i", "br0", "-U", "-s", "0", "-w", path, "udp"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    try:
        yield
    finally:
        time.sleep(1.0)
        p.terminate()
        _, err = p.communicate(timeout=10)
        print(f"  tcpdump: {err.strip().splitlines()[-1] if err.strip() else ''}", file=sys.stderr)


def start(ns: str, *cmd, log: Path | None = None) -> subprocess.Popen:
    out = log.open("a") if log else subprocess.DEVNULL
    return subprocess.Popen(nsexec(ns, *cmd), stdout=out, stderr=subprocess.STDOUT)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def role(python: str, *args) -> list[str]:
    return [python, __file__, "--role", *map(str, args)]


# --- the three protocols, each one step of a run --------------------------------------
def quic_step(rng: random.Random, addr, python: str, tmp: Path, log: Path) -> dict:
    ports = rng.sample([443, 4433, 8443, 9443], 2)
    retry = {p: rng.random() < 0.5 for p in ports}
    servers = [start(host_ns(1), *role(python, "quic-server", "::", p, int(retry[p]), tmp), log=log)
               for p in ports]  # fmt: skip
    time.sleep(2.5)
    done = []
    try:
        for _ in range(9):
            h = rng.randint(2, HOSTS)
            v6 = rng.random() < 0.3
            spec = {
                "host": addr[1][1] if v6 else addr[1][0],
                "port": rng.choice(ports),
                "alpn": rng.choice(["h3", "h3", "hq-interop"]),
                "version": rng.choice([1, 1, 2]),
                "cipher": rng.choice(
                    ["", "AES_128_GCM_SHA256", "AES_256_GCM_SHA384", "CHACHA20_POLY1305_SHA256"]
                ),
                "datagram": rng.choice([1200, 1252, 1350, 1452]),
                "cc": rng.choice(["reno", "cubic"]),
                "sni": rng.choice(
                    ["localhost", "files.example", f"h{rng.randint(1, 99)}.lan.test"]
                ),
                "sizes": [
                    rng.choice([200, 1500, 6000, 30000, 120000]) for _ in range(rng.randint(1, 4))
                ],
            }
            r = client(
                *nsexec(host_ns(h), *role(python, "quic-client", json.dumps(spec))), timeout=60
            )
            with log.open("a") as fh:
                fh.write(r.stdout + r.stderr)
            done.append({**spec, "from": h, "ok": r.returncode == 0})
            time.sleep(rng.uniform(0.1, 0.6))
    finally:
        stop(servers)
    return {"ports": ports, "retry": retry, "connections": done}


def stun_step(rng: random.Random, addr, python: str, tmp: Path, log: Path) -> dict:
    srv4 = addr[1][0]
    cfg = [
        "turnserver", "-n", "--no-cli", "--no-tls", "--no-dtls", "--log-file", "stdout",
        "--simple-log", "--pidfile", tmp / "turnserver.pid", "--listening-ip", srv4,
        "--relay-ip", srv4, "--listening-port", 3478, "--alt-listening-port", 3479,
        "--lt-cred-mech", "--user", "gen:secret", "--realm", "lan.test",
        "--min-port", 49152, "--max-port", 49999,
    ]  # fmt: skip
    procs = [start(host_ns(1), *cfg, log=log)]
    peer = start(host_ns(HOSTS), "turnutils_peer", "-L", addr[HOSTS][0], "-p", 3480, log=log)
    procs.append(peer)
    time.sleep(2.0)
    steps = []
    try:
        for _ in range(rng.randint(2, 3)):  # binding requests from coturn's client
            h = rng.randint(2, HOSTS)
            client(*nsexec(host_ns(h), "turnutils_stunclient", "-p", 3478, srv4),
               timeout=20)  # fmt: skip
            steps.append(("stunclient", h))
        for _ in range(2):  # ICE between h2 and h3, gathering against coturn
            comps, v6 = rng.randint(1, 2), rng.random() < 0.5
            sig = Path(tempfile.mkdtemp(dir=tmp))
            use_turn = rng.random() < 0.5
            agents = [
                start(host_ns(h), *role(python, "ice", int(h == 2), sig, srv4, comps, int(v6),
                                         int(use_turn), rng.randint(3, 12)), log=log)
                for h in (2, 3)
            ]  # fmt: skip
            for a in agents:
                try:
                    a.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    stop([a])
            steps.append(("ice", comps, v6, use_turn))
        h = rng.randint(2, HOSTS - 1)  # TURN allocations relaying to turnutils_peer
        n, length = rng.randint(5, 20), rng.choice([64, 200, 500])
        flags = rng.choice([["-c"], [], ["-s", "-c"], ["-G", "-c"]])
        client(*nsexec(host_ns(h), "turnutils_uclient", "-u", "gen", "-w", "secret", *flags,
                   "-e", addr[HOSTS][0], "-r", 3480, "-n", n, "-l", length, "-m", rng.randint(1, 2),
                   "-z", rng.choice([10, 20, 40]), srv4), timeout=40)  # fmt: skip
        steps.append(("uclient", h, n, length, flags))
    finally:
        stop(procs)
    return {"steps": steps}


def mdns_step(rng: random.Random, addr, python: str, tmp: Path, log: Path) -> dict:
    types = ["_http._tcp", "_ipp._tcp", "_ssh._tcp", "_workstation._tcp", "_smb._tcp",
             "_airplay._tcp", "_printer._tcp", "_raop._tcp", "_googlecast._tcp"]  # fmt: skip
    hosts = []
    procs = []
    avahi = rng.randint(1, HOSTS) if shutil.which("avahi-daemon") else 0
    for i in range(1, HOSTS + 1):
        spec = {
            "hostname": f"{rng.choice(['nas', 'printer', 'laptop', 'tv', 'pi', 'desk'])}{rng.randint(1, 99)}",
            "v4": addr[i][0],
            "v6": addr[i][1],
            "ipver": rng.choice(["v4", "v6", "all", "all"]),
            "services": [
                {
                    "type": rng.choice(types),
                    "name": f"svc {i}-{k} {rng.randint(100, 999)}",
                    "port": rng.randint(1024, 60000),
                    "txt": {f"k{j}": "v" * rng.randint(1, 40) for j in range(rng.randint(0, 5))},
                }
                for k in range(rng.randint(1, 3))
            ],  # fmt: skip
            "browse": rng.sample(types, rng.randint(2, 5)),
            "seconds": rng.uniform(8, 14),
            "delay": rng.uniform(0, 2),
        }
        hosts.append(spec)
        if i == avahi:
            procs.append(start_avahi(host_ns(i), spec, tmp, log))
            continue
        procs.append(start(host_ns(i), *role(python, "mdns", json.dumps(spec)), log=log))
    time.sleep(6)
    digs = []
    for _ in range(rng.randint(2, 4)):  # legacy unicast queries from dig (an ephemeral port)
        h = rng.randint(1, HOSTS)
        q = rng.choice(["_services._dns-sd._udp.local", *(t + ".local" for t in types)])
        client(*nsexec(host_ns(h), "dig", "+time=2", "+tries=1", "-p", 5353, "@224.0.0.251", q, "PTR"),
           timeout=10)  # fmt: skip
        digs.append((h, q))
    for i, p in enumerate(procs, 1):
        if i == avahi:  # the daemon runs until stopped: as long as the others
            time.sleep(max(0.0, hosts[i - 1]["seconds"] - 6))
            stop([p])
            continue
        try:
            p.wait(timeout=40)
        except subprocess.TimeoutExpired:
            stop([p])
    keep = ("ipver", "services", "browse")
    return {"hosts": [{k: v for k, v in h.items() if k in keep} for h in hosts],
            "avahi_host": avahi, "dig": digs}  # fmt: skip


def start_avahi(ns: str, spec: dict, tmp: Path, log: Path) -> subprocess.Popen:
    """avahi-daemon (Debian) as this host's mDNS responder instead of python-zeroconf:
    its own configuration and static services, without D-Bus, in the namespace's private
    mounts (``ip netns exec`` gives each command its own mount namespace)."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    (d / "services").mkdir()
    v6 = "no" if spec["ipver"] == "v4" else "yes"
    v4 = "no" if spec["ipver"] == "v6" else "yes"
    (d / "avahi.conf").write_text(
        f"[server]\nhost-name={spec['hostname']}\nuse-ipv4={v4}\nuse-ipv6={v6}\n"
        "allow-interfaces=eth0\nenable-dbus=no\n[wide-area]\nenable-wide-area=no\n"
        "[publish]\npublish-workstation=yes\npublish-hinfo=yes\n"
    )
    for k, svc in enumerate(spec["services"]):
        txt = "".join(f"<txt-record>{a}={b}</txt-record>" for a, b in svc["txt"].items())
        (d / "services" / f"s{k}.service").write_text(
            '<?xml version="1.0" standalone="no"?><service-group>'
            f"<name>{svc['name']}</name><service><type>{svc['type']}</type>"
            f"<port>{svc['port']}</port>{txt}</service></service-group>"
        )
    script = (
        "mkdir -p /run/avahi-daemon && mount -t tmpfs none /run/avahi-daemon && "
        f"mount --bind {d / 'services'} /etc/avahi/services && "
        f"exec avahi-daemon -f {d / 'avahi.conf'} --no-drop-root --no-chroot --no-rlimits"
    )
    return start(ns, "sh", "-c", script, log=log)


def generate(out: Path, python: str, runs: int, seed: int) -> dict:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise SystemExit(
            f"error: {', '.join(missing)} not found (Debian: iproute2 tcpdump coturn bind9-dnsutils)"
        )
    if os.geteuid() != 0:
        raise SystemExit("error: network namespaces need root")
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"seed": seed, "runs": {}}
    try:
        for r in range(runs):
            rng = random.Random(seed * 1000 + r)
            addr = lan_up(r)
            pcap = out / f"generated__lan-r{r}.pcap"
            log = out / f"generated__lan-r{r}.log"
            log.unlink(missing_ok=True)
            print(f"run {r}: {pcap}", file=sys.stderr)
            with tempfile.TemporaryDirectory() as tmp, capture(pcap):
                t = Path(tmp)
                steps = [("quic", quic_step), ("stun", stun_step), ("mdns", mdns_step)]
                rng.shuffle(steps)
                manifest["runs"][pcap.name] = {
                    name: fn(rng, addr, python, t, log) for name, fn in steps
                }
            lan_down()
    finally:
        lan_down()
    (out / "generated.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return manifest


# --- roles: run inside a namespace by --python ----------------------------------------
def _payload(n: int, rng: random.Random) -> bytes:
    words = [b"alpha", b"beta", b"<div>", b"</div>", b'{"id": ', b"data", b"\n", b"lorem", b"ipsum"]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + (
            rng.randbytes(rng.randint(0, 24)) if rng.random() < 0.3 else b" "
        )
    return bytes(out[:n])


def _cert(tmp: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lan.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=2)).sign(key, hashes.SHA256())
    )  # fmt: skip
    c, k = tmp / f"cert{os.getpid()}.pem", tmp / f"key{os.getpid()}.pem"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))  # fmt: skip
    return c, k


def role_quic_server(host: str, port: str, retry: str, tmp: str) -> None:
    from aioquic.asyncio import QuicConnectionProtocol, serve
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import ProtocolNegotiated, StreamDataReceived

    rng = random.Random(int(port))

    class Server(QuicConnectionProtocol):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._h3, self._buf = None, {}

        def quic_event_received(self, event):
            if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
                self._h3 = H3Connection(self._quic)
            if self._h3 is not None:
                for ev in self._h3.handle_event(event):
                    if isinstance(ev, HeadersReceived):
                        n = int(dict(ev.headers)[b":path"].decode().strip("/") or 100)
                        self._h3.send_headers(ev.stream_id, [(b":status", b"200"), (b"server", b"gen"),
                                                             (b"content-length", str(n).encode())])  # fmt: skip
                        self._h3.send_data(ev.stream_id, _payload(n, rng), end_stream=True)
            elif isinstance(event, StreamDataReceived):
                buf = self._buf[event.stream_id] = self._buf.get(event.stream_id, b"") + event.data
                if event.end_stream:
                    n = int(buf.split()[1].strip(b"/") or 100)
                    self._quic.send_stream_data(event.stream_id, _payload(n, rng), end_stream=True)
            self.transmit()

    cfg = QuicConfiguration(is_client=False, alpn_protocols=[*H3_ALPN, "hq-interop"])
    cfg.load_cert_chain(*_cert(Path(tmp)))

    async def main():
        await serve(host, int(port), configuration=cfg, create_protocol=Server, retry=retry == "1")
        await asyncio.Future()

    asyncio.run(main())


def role_quic_client(spec_json: str) -> None:
    import ssl

    from aioquic.asyncio import QuicConnectionProtocol, connect
    from aioquic.h3.connection import H3Connection
    from aioquic.h3.events import DataReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import StreamDataReceived
    from aioquic.tls import CipherSuite

    spec = json.loads(spec_json)

    class Client(QuicConnectionProtocol):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._h3 = H3Connection(self._quic) if spec["alpn"] == "h3" else None
            self.waiting: dict[int, tuple[asyncio.Future, list]] = {}

        def quic_event_received(self, event):
            events = self._h3.handle_event(event) if self._h3 else [event]
            for ev in events:
                if (
                    isinstance(ev, (DataReceived, StreamDataReceived))
                    and ev.stream_id in self.waiting
                ):
                    fut, chunks = self.waiting[ev.stream_id]
                    chunks.append(ev.data)
                    if ev.stream_ended if self._h3 else ev.end_stream:
                        fut.set_result(b"".join(chunks))

        async def get(self, n: int) -> bytes:
            sid = self._quic.get_next_available_stream_id()
            if self._h3:
                self._h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                            (b":authority", spec["sni"].encode()),
                                            (b":path", f"/{n}".encode()), (b"user-agent", b"aioquic")],
                                      end_stream=True)  # fmt: skip
            else:
                self._quic.send_stream_data(sid, f"GET /{n}\r\n".encode(), end_stream=True)
            fut = asyncio.get_running_loop().create_future()
            self.waiting[sid] = (fut, [])
            self.transmit()
            return await asyncio.wait_for(fut, 20)

    cfg = QuicConfiguration(is_client=True, alpn_protocols=[spec["alpn"]], verify_mode=ssl.CERT_NONE,
                            server_name=spec["sni"], max_datagram_size=spec["datagram"],
                            congestion_control_algorithm=spec["cc"])  # fmt: skip
    if spec["version"] == 2:
        cfg.original_version = 0x6B3343CF
        cfg.supported_versions = [0x6B3343CF, 1]
    if spec["cipher"]:
        cfg.cipher_suites = [CipherSuite[spec["cipher"]]]

    async def main():
        async with connect(
            spec["host"], spec["port"], configuration=cfg, create_protocol=Client
        ) as c:
            for n in spec["sizes"]:
                got = await c.get(n)
                print(f"quic {spec['alpn']} v{spec['version']} GET {n}: {len(got)} bytes")
                await asyncio.sleep(random.uniform(0.05, 0.4))

    asyncio.run(main())


def role_ice(controlling: str, sig: str, stun: str, comps: str, v6: str, turn: str, n: str) -> None:
    import aioice

    me, other = ("a", "b") if controlling == "1" else ("b", "a")
    sig_dir = Path(sig)

    async def main():
        kw = (
            {"turn_server": (stun, 3478), "turn_username": "gen", "turn_password": "secret"}
            if turn == "1"
            else {}
        )
        conn = aioice.Connection(ice_controlling=controlling == "1", components=int(comps),
                                 stun_server=(stun, 3478), use_ipv6=v6 == "1", **kw)  # fmt: skip
        await conn.gather_candidates()
        doc = {"u": conn.local_username, "p": conn.local_password,
               "c": [c.to_sdp() for c in conn.local_candidates]}  # fmt: skip
        (sig_dir / f"{me}.tmp").write_text(json.dumps(doc))
        (sig_dir / f"{me}.tmp").rename(sig_dir / f"{me}.json")
        for _ in range(200):
            if (sig_dir / f"{other}.json").exists():
                break
            await asyncio.sleep(0.1)
        peer = json.loads((sig_dir / f"{other}.json").read_text())
        conn.remote_username, conn.remote_password = peer["u"], peer["p"]
        for c in peer["c"]:
            await conn.add_remote_candidate(aioice.Candidate.from_sdp(c))
        await conn.add_remote_candidate(None)
        await asyncio.wait_for(conn.connect(), 20)
        rng = random.Random(int(n) * 2 + (me == "a"))
        for _ in range(int(n)):
            for comp in range(1, int(comps) + 1):
                await conn.sendto(_payload(rng.randint(40, 1100), rng), comp)
            await asyncio.sleep(rng.uniform(0.02, 0.2))
        await asyncio.sleep(1.0)
        print(f"ice {me}: connected, sent {n} x {comps}")
        await conn.close()

    asyncio.run(main())


def role_mdns(spec_json: str) -> None:
    import socket

    from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf

    spec = json.loads(spec_json)
    time.sleep(spec["delay"])
    ipver = {"v4": IPVersion.V4Only, "v6": IPVersion.V6Only, "all": IPVersion.All}[spec["ipver"]]
    addrs = {"v4": [spec["v4"]], "v6": [spec["v6"]], "all": [spec["v4"], spec["v6"]]}[spec["ipver"]]
    zc = Zeroconf(ip_version=ipver)
    infos = []
    for s in spec["services"]:
        t = s["type"] + ".local."
        info = ServiceInfo(t, f"{s['name']}.{t}", port=s["port"], properties=s["txt"],
                           server=f"{spec['hostname']}.local.",
                           parsed_addresses=addrs)  # fmt: skip
        zc.register_service(info)
        infos.append(info)
    found = []

    def on_change(zeroconf, service_type, name, state_change):
        if state_change is ServiceStateChange.Added:
            found.append(name)
            zeroconf.get_service_info(service_type, name, timeout=1500)

    ServiceBrowser(zc, [t + ".local." for t in spec["browse"]], handlers=[on_change])
    time.sleep(spec["seconds"])
    for info in infos:
        zc.unregister_service(info)
    zc.close()
    print(f"mdns {spec['hostname']} ({socket.gethostname()}): found {len(found)}")


ROLES = {"quic-server": role_quic_server, "quic-client": role_quic_client, "ice": role_ice,
         "mdns": role_mdns}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for the captures")
    ap.add_argument(
        "--python", default=sys.executable, help="interpreter with aioquic, zeroconf, aioice"
    )
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role:
        ROLES[args.role[0]](*args.role[1:])
        return 0
    if args.out is None:
        ap.error("--out is required")
    m = generate(args.out, args.python, args.runs, args.seed)
    print(f"wrote {len(m['runs'])} captures to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
