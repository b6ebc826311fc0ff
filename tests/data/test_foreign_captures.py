"""scripts/foreign_captures.py: reading ndpiReader's reference output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from flowsplit.data.labels import flow_key

_SPEC = importlib.util.spec_from_file_location(
    "foreign_captures", Path(__file__).resolve().parents[2] / "scripts" / "foreign_captures.py"
)
F = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(F)


def test_flow_lines_of_ndpi_reader_output():
    both = (
        "\t1\tUDP 82.243.113.43:64969 <-> 192.168.1.5:40959 [proto: 37/BitTorrent][ClearText]"
        "[Confidence: DPI (cache)][cat: Download/7][47 pkts/36653 bytes <-> 39 pkts/4836 bytes]"
        "[Goodput ratio: 95/66]"
    )
    one_way = (
        "\t12\tUDP [fe80::9bd:81dd:2fdc:5750]:1900 -> [ff02::c]:1900 [proto: 12/SSDP]"
        "[ClearText][Confidence: DPI][cat: System/18][16 pkts/8921 bytes -> 0 pkts/0 bytes]"
    )
    app = (
        "\t2\tTCP 192.168.2.126:45380 <-> 161.117.13.29:80 [proto: 7.295/HTTP.1kxun][ClearText]"
        "[Confidence: DPI][cat: Streaming/17][20 pkts/1520 bytes <-> 60 pkts/181605 bytes]"
    )
    assert F.reader_flow(both) == (flow_key(17, "82.243.113.43", 64969, "192.168.1.5", 40959), 86)
    assert F.reader_flow(one_way) == (
        flow_key(17, "fe80::9bd:81dd:2fdc:5750", 1900, "ff02::c", 1900),
        16,
    )
    assert F.reader_flow(app) == (flow_key(6, "161.117.13.29", 80, "192.168.2.126", 45380), 80)
    assert F.reader_flow("Guessed flow protos:\t0") is None
    assert F.reader_flow("\tBitTorrent\t86\t41489\t1") is None


def test_shared_classes_need_min_flows():
    """The filter benchmarks/generalisation.py applies to the foreign set."""
    from flowsplit.train.crosssource import shared_classes

    keep, too_few = shared_classes(
        ["DNS", "TLS", "MDNS", "QUIC"], {"DNS": 85, "MDNS": 20, "QUIC": 19, "BGP": 99}, 20
    )
    assert keep == ["DNS", "MDNS"]  # training order; a class not in training never counts
    assert too_few == {"TLS": 0, "QUIC": 19}


def test_unseen_captures_decompress_gzip_and_skip_known(tmp_path):
    import gzip
    import io
    import tarfile

    plain, packed, known = b"\xd4\xc3\xb2\xa1one", b"\xd4\xc3\xb2\xa1two", b"\xd4\xc3\xb2\xa1old"
    archive = tmp_path / "p.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in [
            ("p/a.pcap", plain),
            ("p/b.pcapng.gz", gzip.compress(packed)),
            ("p/c.pcap.gz", gzip.compress(plain)),  # the same capture as a.pcap
            ("p/d.pcap", known),
            ("p/notes.txt", b"x"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "old.pcap").write_bytes(known)
    got = F.unseen_captures({"p": archive}, tmp_path / "work", shared)
    assert [p.name for p in got] == ["p__a.pcap", "p__b.pcapng"]
    assert got[1].read_bytes() == packed
