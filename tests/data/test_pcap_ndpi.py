"""The reader on the real nDPI captures: against dpkt, streaming, and the malformed ones."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.errors import InputError
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows, iter_flows_many
from tests.conftest import NDPI_DIR, needs_ndpi

pytestmark = [needs_ndpi, pytest.mark.shared_data]
PCAPS = NDPI_DIR / "pcap"

# One file per format and link type that dpkt reads fully (see scripts/validate_reader.py).
CROSS_CHECK = [
    "roughtime.pcap",  # Ethernet
    "dns.pcap",  # Ethernet, VLAN + PPPoE
    "syslog.pcap",  # Ethernet, PPPoE
    "rx.pcap",  # nanosecond pcap
    "dlt_ppp.pcap",  # PPP without address/control
    "bjnp.pcap",  # raw IP
    "dns2tcp_tunnel.pcap",  # Linux cooked
    "pgsql2.pcapng",  # BSD loopback
    "ah.pcapng",  # IPv6 with an authentication header
    "bfcp.pcapng",  # nanosecond interface
    "http2.pcapng",  # Linux cooked, nanoseconds
    "4in4tunnel.pcap",  # IP-in-IP: the inner flows (dpkt decodes them too)
    "4in6tunnel.pcap",
    "6in4tunnel.pcap",
    "6in6tunnel.pcap",
]


def _ours(path, options):
    out = {}
    for b in iter_flows(path, options, ReadReport()):
        for j, (key, first) in enumerate(zip(b.keys(), b.first_index.tolist(), strict=True)):
            out[(key, first)] = (b, j)
    return out


@pytest.mark.parametrize("layout", ["payload", "ip"])
@pytest.mark.parametrize("name", CROSS_CHECK)
def test_flows_and_views_agree_with_dpkt(name, layout):
    pytest.importorskip("dpkt")
    from flowsplit.reader.reference import reference_flows, reference_stats, reference_views

    opts = FlowOptions(mask_port=False, pkt_layout=layout)
    ours = _ours(PCAPS / name, opts)
    ref = reference_flows(PCAPS / name, opts)
    assert ref.error is None
    assert {(f.key, f.first_index) for f in ref.flows} == set(ours)
    for f in ref.flows:
        b, j = ours[(f.key, f.first_index)]
        assert (b.n_packets[j], b.n_bytes[j]) == (f.n_packets, f.n_bytes), f.key
        want = reference_views(f, opts)
        np.testing.assert_array_equal(b.views["bytes"][j], want["bytes"])
        np.testing.assert_array_equal(b.views["pkt_bytes"][j], want["pkt_bytes"])
        seq, want_seq = b.views["seq"][j], want["seq"]
        np.testing.assert_allclose(np.delete(seq, 1, 1), np.delete(want_seq, 1, 1), atol=1e-3)
        # Inter-arrival times: float64 epoch timestamps resolve about 0.24 microseconds.
        np.testing.assert_allclose(np.expm1(seq[:, 1]), np.expm1(want_seq[:, 1]), atol=2, rtol=1e-4)
        for col, value in reference_stats(f, mask_port=False).items():
            # Times: dpkt rounds nanosecond timestamps to ~256 ns (ticks as float64).
            loose = col.startswith("iat") or col in ("duration", "pkts_per_s", "bytes_per_s")
            tol = dict(rel=1e-2, abs=1e-5) if loose else dict(rel=1e-5, abs=1e-3)
            assert b.stats[col].iloc[j] == pytest.approx(value, **tol), (f.key, col)


def test_streaming_real_files_in_small_chunks():
    big = sorted(PCAPS.glob("*.pcap*"), key=lambda p: p.stat().st_size)[-3:]
    opts = FlowOptions(views=("seq", "bytes", "stats"), seq_len=8, n_bytes=64)
    for path in big:
        whole, parts = _ours(path, opts), {}
        for b in iter_flows(path, opts, ReadReport(), chunk_bytes=64 << 10):
            for j, key in enumerate(zip(b.keys(), b.first_index.tolist(), strict=True)):
                parts[key] = (b, j)
        assert set(parts) == set(whole), path.name
        for key, (b, j) in parts.items():
            w, k = whole[key]
            assert b.n_packets[j] == w.n_packets[k]
            np.testing.assert_array_equal(b.views["seq"][j], w.views["seq"][k])
            np.testing.assert_array_equal(b.views["bytes"][j], w.views["bytes"][k])
            np.testing.assert_array_equal(b.stats.iloc[j].to_numpy(), w.stats.iloc[k].to_numpy())


def test_malformed_corpus_files_never_crash():
    bad = [p for p in sorted(PCAPS.iterdir()) if "fuzz" in p.name or p.name.startswith("bad")]
    assert bad
    for path in bad:
        for strict in (False, True):
            try:
                for _ in iter_flows(path, FlowOptions(), ReadReport(), strict=strict):
                    pass
            except InputError as exc:
                assert str(path) in str(exc)


def test_whole_corpus_in_one_stream():
    paths = sorted(p for p in PCAPS.iterdir() if p.is_file())
    report = ReadReport()
    n_flows = sum(len(b) for b in iter_flows_many(paths, FlowOptions(), report, on_error="skip"))
    assert report.n_files + len(report.file_errors) == len(paths)
    assert n_flows == report.n_flows > 8000
    assert report.n_flow_packets > 0.9 * report.n_packets
    used = report.n_flow_packets + report.n_merged
    assert report.n_packets == used + sum(report.skipped.values())
