"""`prepare --label-by ndpi`: nDPI's labels through NFStream, on captures written here."""

from __future__ import annotations

import struct

import pytest

from flowsplit.data import dpi
from flowsplit.data.labels import LabelSpec
from flowsplit.data.prepare import PrepareOptions, prepare_dataset
from flowsplit.data.store import load_dataset
from flowsplit.errors import ConfigError
from tests.data import _pcapgen as g

A, B = "10.0.0.1", "10.0.0.2"


def dns_query(name: str, ident: int) -> bytes:
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)


def _captures(root):
    """DNS and HTTP flows, and one UDP flow nDPI cannot name, in three files."""
    for f in range(3):
        pkts = [
            g.Packet(
                1.0 + i,
                g.ether(
                    g.ipv4(A, B, 17, g.udp(40000 + i, 53, dns_query(f"h{i}.f{f}.example.com", i)))
                ),
            )
            for i in range(3)
        ]
        for i in range(3):
            get = (
                f"GET /{f}/{i} HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8\r\n\r\n".encode()
            )
            ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            pkts += g.tcp_conversation(
                A, B, 41000 + i, 80, t0=10.0 + i, payloads=(("a", get), ("b", ok))
            )
        pkts.append(
            g.Packet(
                20.0, g.ether(g.ipv4(A, B, 17, g.udp(45000, 45001, b"\x99" * 40 + bytes([f]))))
            )
        )
        g.write_pcap(root / f"mixed{f}.pcap", sorted(pkts, key=lambda p: p.ts))
    return root


def test_ndpi_labels_flows_without_folders(tmp_path):
    pytest.importorskip("nfstream")
    root = tmp_path / "in"
    root.mkdir()
    _captures(root)
    opts = PrepareOptions(labels=LabelSpec(by="ndpi"), split_by="flow", small_split_flows=0)
    m = prepare_dataset([root], tmp_path / "ds", opts)
    meta = load_dataset(tmp_path / "ds").meta
    assert m["classes"] == ["DNS", "HTTP"] and m["class_counts"] == {"DNS": 9, "HTTP": 9}
    assert set(meta.loc[meta["label_name"] == "HTTP", "port_b"]) == {80}
    assert m["labeller"]["name"] == "nDPI via NFStream" and m["labeller"]["nfstream"]
    # nDPI's own version, as the installed NFStream's engine tells it
    from nfstream.engine import engine

    ndpi = m["labeller"]["ndpi"]
    assert ndpi == engine.ffi.string(engine.lib.engine_lib_ndpi_version()).decode()
    assert ndpi.split(".")[0].isdigit(), ndpi
    assert m["skipped"]["unlabelled"] == 3  # the unknown UDP flows
    assert m["skipped"]["ndpi_unknown"] == 3
    cat = prepare_dataset(
        [root],
        tmp_path / "ds2",
        PrepareOptions(labels=LabelSpec(by="ndpi", ndpi_field="category"), split_by="flow"),
    )
    assert cat["classes"] == ["Network", "Web"]


def test_ndpi_labelling_reports_each_capture_done(tmp_path):
    # the hook of prepare's progress bar: every capture once, in order, also unreadable ones
    pytest.importorskip("nfstream")
    from flowsplit.data.dpi import ndpi_labels

    paths = sorted(_captures(tmp_path).iterdir())
    (tmp_path / "bad.pcap").write_bytes(b"not a capture")
    done = []
    got = ndpi_labels(
        [(p, p.name) for p in [paths[0], tmp_path / "bad.pcap", *paths[1:]]], on_done=done.append
    )
    assert done == [0, 1, 2, 3]
    assert got.dropped["ndpi_unreadable_file"] == 1 and len(got.flow_map) == 18


def test_missing_nfstream_is_a_clear_error(monkeypatch):
    def missing(name):
        raise dpi.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(dpi.importlib.metadata, "version", missing)
    with pytest.raises(ConfigError, match=r"pip install 'flowsplit\[dpi\]'"):
        dpi.ndpi_labels([], label_field="master")
