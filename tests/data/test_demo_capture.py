"""The embedded lab capture (demo/captures) is there, big enough, small enough and clean.

Counted independently of flowsplit's own reader, with dpkt: every file is an Ethernet pcap
of IPv4 TCP/UDP packets, and every packet in a class folder talks to that class's server
port from ports.json (scripts/make_demo_capture.py writes both).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import dpkt
import pytest

from tests.conftest import DEMO_CAPTURES

MIN_CLASSES = 6
MIN_FILES_PER_CLASS = 5
MIN_FLOWS = 1500
MAX_BYTES = 6_000_000


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    path = DEMO_CAPTURES / "ports.json"
    assert path.is_file(), f"{path} missing: run scripts/make_demo_capture.py"
    ports = json.loads(path.read_text())
    assert all(isinstance(p, int) and 0 < p < 65536 for p in ports.values()), ports
    return ports


@pytest.fixture(scope="module")
def census(ports) -> dict:
    """Per file: flows (5-tuples), packets, L4 protocols, and anything out of place."""
    files, problems = {}, []
    for cls, port in ports.items():
        for path in sorted((DEMO_CAPTURES / cls).glob("*.pcap")):
            flows, protos, packets = set(), Counter(), 0
            with path.open("rb") as f:
                reader = dpkt.pcap.Reader(f)
                if reader.datalink() != dpkt.pcap.DLT_EN10MB:
                    problems.append(f"{path.name}: link type {reader.datalink()}")
                last = None
                for ts, buf in reader:
                    packets += 1
                    ip = dpkt.ethernet.Ethernet(buf).data
                    l4 = getattr(ip, "data", None)
                    if not isinstance(ip, dpkt.ip.IP) or not isinstance(
                        l4, dpkt.tcp.TCP | dpkt.udp.UDP
                    ):
                        problems.append(f"{path.name}: packet {packets} is not IPv4 TCP/UDP")
                        continue
                    if port not in (l4.sport, l4.dport):
                        problems.append(
                            f"{path.name}: packet {packets} {l4.sport}->{l4.dport}, not port {port}"
                        )
                    if ip.len + 14 > 1514:
                        problems.append(f"{path.name}: packet {packets} is {ip.len} bytes of IP")
                    if l4.data and last is not None and buf == last[1] and ts - last[0] < 1e-3:
                        problems.append(f"{path.name}: packet {packets} duplicates the one before")
                    last = (ts, buf)
                    protos[ip.p] += 1
                    flows.add((ip.p, *sorted([(ip.src, l4.sport), (ip.dst, l4.dport)])))
            files[path] = {"cls": cls, "flows": len(flows), "packets": packets, "protos": protos}
    return {"files": files, "problems": problems}


def test_layout_classes_and_files(ports):
    assert len(ports) >= MIN_CLASSES, sorted(ports)
    folders = {p.name for p in DEMO_CAPTURES.iterdir() if p.is_dir()}
    assert folders == set(ports), f"class folders {sorted(folders)} vs ports.json {sorted(ports)}"
    for cls in ports:
        names = sorted(p.name for p in (DEMO_CAPTURES / cls).iterdir())
        assert len(names) >= MIN_FILES_PER_CLASS, (cls, names)
        assert all(re.fullmatch(rf"{re.escape(cls)}-\d\d\.pcap", n) for n in names), names


def test_total_size_is_small():
    total = sum(p.stat().st_size for p in DEMO_CAPTURES.rglob("*") if p.is_file())
    assert total < MAX_BYTES, f"demo/captures holds {total:,} bytes"


def test_readme_says_it_is_a_lab_capture():
    text = (DEMO_CAPTURES / "README.md").read_text()
    assert "lab capture" in text.lower()
    assert "scripts/make_demo_capture.py" in text


def test_every_packet_talks_to_its_class_port(census):
    assert not census["problems"], "\n".join(census["problems"][:20])


def test_enough_flows_in_every_class_and_file(census, ports):
    files = census["files"]
    per_class = Counter()
    for path, f in files.items():
        assert f["flows"] >= 10, (path.name, f["flows"])
        assert len(f["protos"]) == 1, (path.name, f["protos"])  # one transport per class
        per_class[f["cls"]] += f["flows"]
    assert sum(per_class.values()) >= MIN_FLOWS, per_class
    assert set(per_class) == set(ports)
    assert min(per_class.values()) >= MIN_FLOWS // (2 * len(ports)), per_class  # no tiny class


def test_manifest_matches_the_files(census):
    manifest = json.loads((DEMO_CAPTURES / "manifest.json").read_text())
    listed = {DEMO_CAPTURES / f["file"]: f for f in manifest["files"]}
    assert set(listed) == set(census["files"])
    for path, f in census["files"].items():
        assert (listed[path]["flows"], listed[path]["packets"]) == (f["flows"], f["packets"])
