"""Packets per second of preparing a capture corpus, against NFStream and dpkt.

On the nDPI test captures (all 543 files), one core, in one run:

- flowsplit: ``flowsplit.data.prepare.prepare_dataset`` (flows, labels by port,
  splits, the dataset store) when it exists, and the reading pipeline alone
  (``iter_flows_many``: records, flows and the four views);
- NFStream (statistical_analysis, splt_analysis=32, no DPI), file by file;
- a dpkt-based extractor of the same flows and four views
  (:mod:`flowsplit.reader.reference`), file by file.

With NFStream, also the agreement of the two on the corpus's TCP/UDP flows
(5-tuple and packet count), by reason of disagreement (``agreement_with_nfstream``).

All rates use the same denominator: the packet records of the corpus. Medians of
several runs (``--runs`` for flowsplit, ``--baseline-runs`` for the slow baselines).
Peak memory: a fresh process reads the corpus written as one pcapng capture 1x and
8x (every decodable packet, timestamps shifted per file and copy so that no flows
merge) and reports its ru_maxrss.

    .venv/bin/python benchmarks/prepare_throughput.py --out bench-results/prepare.json

The agreement alone (about a minute; no timings)::

    .venv/bin/python benchmarks/prepare_throughput.py --agreement-only --out bench-results/agreement.json

Missing baselines (nfstream, dpkt) are pip-installed first (``--no-install``: skipped).
"""

from __future__ import annotations

import argparse
import collections
import ipaddress
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import _common as C

C.single_thread()

sys.path.insert(0, str(C.ROOT / "src"))
import numpy as np  # noqa: E402

from flowsplit.data.labels import flow_key  # noqa: E402
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows_many  # noqa: E402
from flowsplit.reader.packets import PacketDecoder  # noqa: E402
from flowsplit.reader.staging import iter_record_chunks  # noqa: E402

DEFAULT_CORPUS = C.ROOT.parent / "shared" / "data" / "ndpi" / "pcap"
OPTIONS = FlowOptions()  # all four views, default sizes and masks


def run_pipeline(paths: list[Path]) -> dict:
    report = ReadReport()
    n_flows = sum(len(b) for b in iter_flows_many(paths, OPTIONS, report, on_error="skip"))
    return {
        "n_packets": report.n_packets,
        "n_flows": n_flows,
        "n_flow_packets": report.n_flow_packets,
        "file_errors": len(report.file_errors),
    }


def run_prepare(corpus: Path, work: Path):
    try:
        from flowsplit.data.labels import LabelSpec
        from flowsplit.data.prepare import PrepareOptions, prepare_dataset
    except ImportError:
        return None

    def fn() -> dict:
        out = work / "prepared"
        shutil.rmtree(out, ignore_errors=True)
        opts = PrepareOptions(labels=LabelSpec(by="port"))
        manifest = prepare_dataset([corpus], out, opts, overwrite=True)
        return {"n_flows_stored": manifest.get("n_flows")}

    return fn


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure_with_children(fn, runs: int) -> dict:
    """C.measure, with the CPU of child processes that ended in each run added (NFStream
    meters in a child process: time.process_time alone misses most of its work)."""
    spent: list[float] = []

    def timed():
        k = _children_cpu()
        out = fn()
        spent.append(_children_cpu() - k)
        return out

    m = C.measure(timed, runs)
    m["cpu_s"] = [round(c + k, 4) for c, k in zip(m["cpu_s"], spent[-runs:], strict=True)]
    m["median_cpu_s"] = statistics.median(m["cpu_s"])
    m["children_cpu_s"] = [round(k, 4) for k in spent[-runs:]]
    return m


def run_nfstream(paths: list[Path]) -> dict:
    from nfstream import NFStreamer

    n_flows, failed = 0, 0
    for p in paths:
        try:
            streamer = NFStreamer(
                source=str(p),
                statistical_analysis=True,
                splt_analysis=32,
                n_dissections=0,
                n_meters=1,
            )
            n_flows += sum(1 for _ in streamer)
        except Exception:  # noqa: BLE001 - NFStream refuses some malformed files
            failed += 1
    return {"n_flows": n_flows, "files_failed": failed}


def run_dpkt(paths: list[Path]) -> dict:
    from flowsplit.reader.reference import reference_flows, reference_stats, reference_views

    n_flows = 0
    for p in paths:
        res = reference_flows(p, OPTIONS)
        for f in res.flows:
            reference_views(f, OPTIONS)
            reference_stats(f, OPTIONS.mask_port)
        n_flows += len(res.flows)
    return {"n_flows": n_flows}


def _our_flows(
    paths: list[Path], tunnels: str, reassemble: bool = True
) -> dict[int, collections.Counter]:
    """Per file: Counter of (5-tuple key, packets) of flowsplit's flows."""
    ours: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    opts = FlowOptions(views=("seq",), seq_len=1, tunnels=tunnels, reassemble=reassemble)
    for b in iter_flows_many(paths, opts, ReadReport(), on_error="skip"):
        rows = zip(
            b.source.tolist(),
            b.proto.tolist(),
            b.ip_a.tolist(),
            b.port_a.tolist(),
            b.ip_b.tolist(),
            b.port_b.tolist(),
            b.n_packets.tolist(),
            strict=True,
        )
        for s, p, a, pa, ib, pb, n in rows:
            ours[s][(flow_key(p, a, pa, ib, pb), n)] += 1
    return ours


def _nfstream_flows(paths: list[Path]) -> tuple[dict[int, list[tuple[tuple, int]]], list[str]]:
    """Per file: NFStream's TCP/UDP flows as (5-tuple key, packets); the files it refused."""
    from nfstream import NFStreamer

    nfs: dict[int, list[tuple[tuple, int]]] = {}
    failed = []
    for s, path in enumerate(paths):
        try:
            nfs[s] = [
                (
                    flow_key(f.protocol, f.src_ip, f.src_port, f.dst_ip, f.dst_port),
                    f.bidirectional_packets,
                )
                for f in NFStreamer(source=str(path), n_dissections=0, n_meters=1)
                if f.protocol in (6, 17)
            ]
        except Exception:  # noqa: BLE001 - NFStream refuses some malformed files
            failed.append(path.name)
    return nfs, failed


def _clock_jumps_back(paths: list[Path], at_least: float = 1.0) -> set[int]:
    """Files with a record more than ``at_least`` seconds behind the latest one before it.

    NFStream holds its clock at the latest timestamp seen until real time passes it
    (so timeouts stop); flowsplit times each flow on its own gaps. Such files'
    flows are told apart by that rule, not by what was decoded.
    """
    latest: dict[int, float] = {}
    behind: set[int] = set()
    for chunk in iter_record_chunks(paths, ReadReport(), on_error="skip"):
        recs = chunk.records
        for s in np.unique(recs.src).tolist():
            ts = recs.ts[recs.src == s]
            if not len(ts):
                continue
            top = np.maximum.accumulate(np.concatenate([[latest.get(s, -np.inf)], ts]))
            if np.any(top[:-1] - ts > at_least):
                behind.add(s)
            latest[s] = float(top[-1])
    return behind


def _match(nfs, ours) -> dict[int, list[bool]]:
    """Per file, per NFStream flow: is there a flowsplit flow of the same 5-tuple and
    packet count (each flowsplit flow used once)?"""
    out = {}
    for s, flows in nfs.items():
        left = collections.Counter(ours.get(s, {}))
        hits = []
        for k, n in flows:
            hit = left[(k, n)] > 0
            left[(k, n)] -= hit
            hits.append(hit)
        out[s] = hits
    return out


def _record_cause(linktype: int, b: bytes) -> str:
    """What in a record's headers flowsplit and NFStream read differently (see agreement)."""
    if linktype == 1:
        off, et = 14, int.from_bytes(b[12:14], "big")
        while et in (0x8100, 0x88A8) and len(b) >= off + 4:
            et, off = int.from_bytes(b[off + 2 : off + 4], "big"), off + 4
    elif linktype == 113:
        off, et = 16, int.from_bytes(b[14:16], "big")
    elif linktype in (12, 14, 101, 228, 229):
        off = 0
        et = {4: 0x0800, 6: 0x86DD}.get(b[0] >> 4 if b else 0, 0)
    else:
        return "other_link_type"
    if len(b) < off + 20:
        return "truncated_ip_header"
    version = b[off] >> 4
    if et not in (0x0800, 0x86DD):
        return "ip_after_non_ip_ethertype" if version in (4, 6) else "non_ip"
    if version != 4:
        return "ipv6_other"
    ihl = (b[off] & 15) * 4
    if ihl < 20:
        return "ipv4_header_length_below_5"
    total = int.from_bytes(b[off + 2 : off + 4], "big")
    if total == 0:
        return "ipv4_total_length_0"
    if int.from_bytes(b[off + 6 : off + 8], "big") & 0x3FFF:
        return "ip_fragment"
    l4 = off + ihl
    if b[off + 9] == 6:
        if len(b) < l4 + 20 or total < ihl + 20:
            return "truncated_tcp_header"  # NFStream: a TCP flow with ports 0
        if b[l4 + 12] >> 4 < 5:
            return "tcp_data_offset_below_5"
        if total < ihl + (b[l4 + 12] >> 4) * 4:
            return "tcp_header_beyond_ip_length"
    return "other"


def _packet_causes(path: Path, keys: set, tunnels: str) -> dict[tuple, list[str]]:
    """Per 5-tuple of ``keys``: why the packets NFStream and flowsplit put in its flows
    differ, each packet told by its record's headers (``nfstream_only_*``: NFStream
    counts a packet flowsplit does not use; ``flowsplit_only_*``: the converse;
    ``same_packets``: both hold the same packets, split into flows differently)."""
    from nfstream import NFPlugin, NFStreamer

    class Packets(NFPlugin):
        def on_init(self, packet, flow):
            flow.udps.pk = [(packet.time, packet.raw_size)]

        def on_update(self, packet, flow):
            flow.udps.pk.append((packet.time, packet.raw_size))

    theirs: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    for f in NFStreamer(source=str(path), n_dissections=0, n_meters=1, udps=Packets()):
        key = flow_key(f.protocol, f.src_ip, f.src_port, f.dst_ip, f.dst_port)
        if key in keys:
            theirs[key].update(f.udps.pk)
    report = ReadReport()
    decoder = PacketDecoder(report, tunnels=tunnels)
    records: dict[tuple, list[tuple[int, bytes]]] = collections.defaultdict(list)  # (ms, len)
    used: set[int] = set()
    mine: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    for chunk in iter_record_chunks([path], report, on_error="skip"):
        r, mv = chunk.records, chunk.buffer.mv
        ms = np.floor(r.ts * 1000 + 1e-6).astype(np.int64).tolist()
        for i, (t, w, off, cap, lt) in enumerate(
            zip(
                ms,
                r.wirelen.tolist(),
                r.data_off.tolist(),
                r.caplen.tolist(),
                r.linktype.tolist(),
                strict=True,
            )
        ):
            records[(t, w)].append((int(r.index[i]), int(lt), bytes(mv[off : off + min(cap, 96)])))
        by_index = {int(r.index[i]): (ms[i], int(r.wirelen[i])) for i in range(len(r))}
        pk, _ = decoder.decode(chunk)
        for j in range(len(pk)):
            key = flow_key(
                int(pk.proto[j]),
                _address(pk.sa_hi[j], pk.sa_lo[j]),
                int(pk.sport[j]),
                _address(pk.da_hi[j], pk.da_lo[j]),
                int(pk.dport[j]),
            )
            used.add(int(pk.index[j]))
            if key in keys:
                mine[key][by_index[int(pk.index[j])]] += 1
    out = {}
    for key in keys:
        causes = []
        for side, extra in (
            ("nfstream_only", theirs[key] - mine[key]),
            ("flowsplit_only", mine[key] - theirs[key]),
        ):
            for tw in extra:
                recs = records.get(tw, [])
                pick = [x for x in recs if (x[0] not in used) == (side == "nfstream_only")]
                if not recs:  # e.g. a record length past any snapshot length
                    causes.append(f"{side}_record_not_read_by_flowsplit")
                    continue
                lt, b = (pick or recs)[0][1:]
                causes.append(f"{side}_{_record_cause(lt, b)}")
        out[key] = sorted(set(causes)) or ["same_packets"]
    return out


# The rule of flowsplit behind each reason or packet cause of disagreement (README,
# "Prepare a dataset"). Each is kept on purpose: flowsplit does what the standards, a
# receiving stack (Linux) and Zeek do, where NFStream (nDPI's reader) does otherwise.
RULES = {
    # VXLAN, Geneve, GRE: flowsplit classifies the inner flows (--tunnels outer: NFStream's).
    "tunnel_outer_flow": "tunnel_opened",
    # NFStream holds its clock at the latest timestamp: after a step back its flows run on
    # through real idle gaps (and past its own active timeout); flowsplit times each flow
    # on its own timestamps.
    "clock_goes_back": "flows_timed_on_own_gaps",
    # A fuzzed ethertype: nDPI reads an IP header after any ethertype on its version
    # nibble; flowsplit only a whole IPv4 header whose checksum is right.
    "nfstream_only_ip_after_non_ip_ethertype": "non_ip_ethertype_not_read_as_ip",
    # Data offset < 5 or past the IP length: a receiving stack drops the segment, Zeek does
    # not count it (bad_TCP_header_len), Wireshark stops dissecting; skipped, counted.
    "nfstream_only_tcp_data_offset_below_5": "invalid_tcp_header_skipped",
    "nfstream_only_tcp_header_beyond_ip_length": "invalid_tcp_header_skipped",
    # Fewer than 20 bytes of TCP header: NFStream makes a flow with ports 0.
    "nfstream_only_truncated_tcp_header": "truncated_tcp_header_skipped",
    "nfstream_only_ipv4_header_length_below_5": "invalid_ipv4_header_skipped",
    # Total length 0 is segmentation offload in the capture (Zeek: ip_hdr_len_zero, read
    # with the captured length); NFStream drops the packet.
    "flowsplit_only_ipv4_total_length_0": "ipv4_total_length_0_read_as_offload",
    # NFStream counts fragments past the first as packets of a flow with ports 0.
    "nfstream_only_ip_fragment": "fragments_reassembled",
    # The reader skips a record it finds corrupt (here: a capture length of 524,501 bytes,
    # past libpcap's 262,144 and the record's own wire length) and resumes after it.
    "nfstream_only_record_not_read_by_flowsplit": "corrupt_record_skipped",
}


def _rule(reason: str, causes: list[str] | None) -> str:
    """The rule of :data:`RULES` behind one disagreeing flow (``unexplained``: none)."""
    if reason in RULES:
        return RULES[reason]
    if not causes:
        return "unexplained"
    return "+".join(sorted({RULES.get(c, "unexplained") for c in causes}))


def _packet_totals(flows: collections.Counter) -> collections.Counter:
    """Packets per 5-tuple, summed over one file's flows."""
    out: collections.Counter = collections.Counter()
    for (k, n), m in flows.items():
        out[k] += n * m
    return out


def _address(hi, lo) -> str:
    a = ipaddress.IPv6Address((int(hi) << 64) | int(lo))
    return str(a.ipv4_mapped or a)


def agreement(paths: list[Path]) -> dict:
    """Flows on which flowsplit and NFStream agree (5-tuple and packet count), by reason.

    For every NFStream TCP/UDP flow, a flowsplit flow of the same file with the same
    direction-free 5-tuple and packet count is looked for (each used once). Each one
    not found gets one reason, the first that holds:

    - ``tunnel_outer_flow``: flowsplit's ``--tunnels outer`` has it: NFStream keeps
      the outer flow of a tunnel it does not open (VXLAN, GRE, Geneve), flowsplit
      classifies the inner flows by default (``tunnel_inner_flows``: the converse,
      for the ``tunnels_outer`` figures: NFStream opens IP-in-IP, GTP-U and CAPWAP);
    - ``clock_goes_back``: the file has a record more than 1 s behind the latest one
      before it, and the 5-tuple is there: NFStream holds its clock at the latest
      timestamp (its timeouts stop), flowsplit times flows on their own gaps;
    - the 5-tuple is there with other packet counts: ``flowsplit_more_packets`` or
      ``flowsplit_fewer_packets`` (over all flows of the 5-tuple: packets decoded by
      one tool and not the other), or ``flows_split_differently`` (same total);
    - ``five_tuple_not_found``.

    Each reason has a ``_malformed_file`` twin for files whose names mark them as
    deliberately malformed (fuzz, bad*), which are also left out of
    ``agree_fraction_without_malformed_files``. Figures with flowsplit's default
    (``tunnels="inner"``), with ``tunnels="outer"`` (key ``tunnels_outer``), and
    ``tunnels_as_nfstream``: per file the mode NFStream agrees with more (the
    files that take ``outer`` are named), which compares each tunnel the way NFStream
    decodes it.

    The flows told apart by what was decoded (not tunnels, not the clock) are then
    compared packet by packet (:func:`_packet_causes`: NFStream's packets through a
    plugin against flowsplit's decoded records, matched by millisecond and length);
    the header feature of each packet one tool counts and the other does not gives
    ``disagree_by_packet_cause`` (a flow with several causes counts once, under all
    of them joined by ``+``). On the nDPI corpus: NFStream reads an IP header after a
    non-IP ethertype (fuzzed frames) where flowsplit needs a correct IPv4 checksum,
    keeps TCP headers with a data offset below 5 or past the IP length and IPv4
    headers shorter than 20 bytes (as flows with the ports it finds there, or 0), and
    drops IPv4 packets of total length 0 (segmentation
    offload), which flowsplit keeps. ``disagree_by_rule`` names the rule of flowsplit's
    behind each disagreement (:data:`RULES`); ``disagree_unexplained`` counts those
    with none (a flowsplit fault to look at). ``disagreeing_flows`` lists every flow
    not matched, with its reason, packet causes, rule and flowsplit's packet counts for
    the 5-tuple.

    ``fragmented_flows`` and ``tunnelled_flows``: the same agreement on two subsets of
    NFStream's flows, those whose 5-tuple flowsplit gives other packets without
    reassembly (or whose fragments NFStream counts in a flow of their own), and those
    there in one tunnel mode of flowsplit's and not the other (a tunnel's inner flows,
    or its own flow).
    """
    nfs, failed = _nfstream_flows(paths)
    back = _clock_jumps_back(paths)
    ours = {m: _our_flows(paths, m) for m in ("inner", "outer")}
    hits = {m: _match(nfs, ours[m]) for m in ours}
    # Fragmented flows: their packets change when fragments are not reassembled;
    # tunnelled flows: there in one tunnel mode and not in the other (inner flows of a
    # tunnel, or a tunnel's own flow).
    plain = _our_flows(paths, "inner", reassemble=False)
    fragmented, tunnelled = {}, {}
    for s in nfs:
        inner = _packet_totals(ours["inner"].get(s, collections.Counter()))
        without = _packet_totals(plain.get(s, collections.Counter()))
        fragmented[s] = {k for k in inner.keys() | without.keys() if inner[k] != without[k]}
        outer = _packet_totals(ours["outer"].get(s, collections.Counter()))
        tunnelled[s] = inner.keys() ^ outer.keys()

    def malformed(s: int) -> bool:
        name = paths[s].name
        return "fuzz" in name or name.startswith("bad")

    def summary(per_file: dict[int, str], missed: list | None = None) -> dict:
        total = agree = m_total = m_agree = 0
        # The converse count: flowsplit's flows (of the files NFStream read) without a match.
        ours_total = sum(sum(ours[per_file[s]].get(s, {}).values()) for s in nfs)
        reasons: collections.Counter = collections.Counter()
        by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for s, flows in nfs.items():
            mode = per_file[s]
            other = "outer" if mode == "inner" else "inner"
            theirs: collections.Counter = collections.Counter()
            for k, n in flows:
                theirs[k] += n
            mine: collections.Counter = collections.Counter()
            for (k, n), c in ours[mode].get(s, {}).items():
                mine[k] += n * c
            bad = malformed(s)
            for (k, n), hit, hit_other in zip(flows, hits[mode][s], hits[other][s], strict=True):
                total += 1
                m_total += bad
                agree += hit
                m_agree += hit and bad
                if hit:
                    continue
                if hit_other:
                    why = f"tunnel_{other}_flow" + ("s" if other == "inner" else "")
                elif s in back and k in mine:
                    why = "clock_goes_back"
                elif k in mine:
                    why = {1: "flowsplit_more_packets", -1: "flowsplit_fewer_packets"}.get(
                        (mine[k] > theirs[k]) - (mine[k] < theirs[k]), "flows_split_differently"
                    )
                else:
                    why = "five_tuple_not_found"
                if missed is not None:
                    missed.append((s, k, n, why))
                why += "_malformed_file" if bad else ""
                reasons[why] += 1
                by_file[paths[s].name][why] += 1
        return {
            "nfstream_tcp_udp_flows": total,
            "agree": agree,
            "agree_fraction": agree / max(total, 1),
            "agree_fraction_without_malformed_files": (agree - m_agree) / max(total - m_total, 1),
            "disagree": total - agree,
            "flowsplit_tcp_udp_flows": ours_total,
            "flowsplit_flows_without_a_match": ours_total - agree,
            "disagree_by_reason": dict(reasons.most_common()),
            "disagree_by_file": {
                name: dict(c.most_common())
                for name, c in sorted(by_file.items(), key=lambda kv: -sum(kv[1].values()))
            },
        }

    best = {s: "outer" if sum(hits["outer"][s]) > sum(hits["inner"][s]) else "inner" for s in nfs}

    def subset(keys: dict[int, set]) -> dict:
        total = agree = as_nfstream = 0
        for s, flows in nfs.items():
            for (k, _), hit, hit_best in zip(
                flows, hits["inner"][s], hits[best[s]][s], strict=True
            ):
                if k in keys[s]:
                    total, agree, as_nfstream = total + 1, agree + hit, as_nfstream + hit_best
        return {
            "nfstream_tcp_udp_flows": total,
            "agree": agree,
            "agree_fraction": agree / max(total, 1),
            "agree_tunnels_as_nfstream": as_nfstream,
            "agree_fraction_tunnels_as_nfstream": as_nfstream / max(total, 1),
            "files": sorted(paths[s].name for s in nfs if keys[s] & {k for k, _ in nfs[s]}),
        }

    missed: list[tuple[int, tuple, int, str]] = []
    out = summary(dict.fromkeys(nfs, "inner"), missed)
    # Packet by packet, for the flows told apart by what was decoded.
    decoded = collections.defaultdict(set)
    for s, k, _, why in missed:
        if not why.startswith(("tunnel_", "clock_")):
            decoded[s].add(k)
    causes = {s: _packet_causes(paths[s], keys, "inner") for s, keys in decoded.items()}
    by_cause: collections.Counter = collections.Counter()
    by_rule: collections.Counter = collections.Counter()
    listing = []
    for s, k, n, why in missed:
        cause = causes.get(s, {}).get(k)
        if cause is not None:
            by_cause["+".join(cause)] += 1
        by_rule[_rule(why, cause)] += 1
        listing.append(
            {
                "file": paths[s].name,
                "five_tuple": [k[0], *k[1], *k[2]],
                "nfstream_packets": n,
                "flowsplit_packets": sorted(
                    c for (kk, c), m in ours["inner"][s].items() for _ in range(m) if kk == k
                ),
                "reason": why,
                **({"packet_causes": cause} if cause is not None else {}),
                "rule": _rule(why, cause),
            }
        )
    out["disagree_by_packet_cause"] = dict(by_cause.most_common())
    out["disagree_by_rule"] = dict(by_rule.most_common())
    out["disagree_unexplained"] = sum(n for r, n in by_rule.items() if "unexplained" in r)
    for s, by_key in causes.items():  # NFStream's flows of fragments it did not reassemble
        fragmented[s] |= {k for k, c in by_key.items() if "nfstream_only_ip_fragment" in c}
    out["fragmented_flows"] = subset(fragmented)
    out["tunnelled_flows"] = subset(tunnelled)
    out["disagreeing_flows"] = listing
    out["tunnels_outer"] = summary(dict.fromkeys(nfs, "outer"))
    out["tunnels_as_nfstream"] = {
        **summary(best),
        "files_compared_outer": sorted(paths[s].name for s, m in best.items() if m == "outer"),
    }
    out["nfstream_failed_files"] = failed
    out["files_clock_goes_back"] = sorted(paths[s].name for s in back)
    return out


def write_concatenated(paths: list[Path], out: Path, copies: int) -> int:
    """The corpus's decodable packets as one pcapng, ``copies`` times; records written.

    One interface per link type; every file of every copy gets its own stretch of
    time (its first packet at base + (copy * files + file) * 1e7 s), so that flows of
    different files or copies never merge.
    """
    from flowsplit.reader.pcap import SUPPORTED_LINKTYPES
    from flowsplit.reader.staging import iter_record_chunks

    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    iface: dict[int, int] = {}
    t0: dict[int, float] = {}
    n = 0
    with open(out, "wb") as fh:
        fh.write(shb)
        for copy in range(copies):
            for chunk in iter_record_chunks(paths, ReadReport(), on_error="skip"):
                r, mv = chunk.records, chunk.buffer.mv
                for src, off, cap, wire, ts, lt in zip(
                    r.src.tolist(),
                    r.data_off.tolist(),
                    r.caplen.tolist(),
                    r.wirelen.tolist(),
                    r.ts.tolist(),
                    r.linktype.tolist(),
                    strict=True,
                ):
                    if lt not in SUPPORTED_LINKTYPES:
                        continue
                    if lt not in iface:
                        iface[lt] = len(iface)
                        fh.write(struct.pack("<IIHHII", 1, 20, lt, 0, 0, 20))
                    base = t0.setdefault(src, ts)
                    t = 2e12 + (copy * len(paths) + src) * 1e7 + (ts - base)
                    ticks = max(int(t * 1e6), 0)
                    pad = -cap % 4
                    blen = 32 + cap + pad
                    fh.write(
                        struct.pack(
                            "<IIIIIII",
                            6,
                            blen,
                            iface[lt],
                            ticks >> 32,
                            ticks & 0xFFFFFFFF,
                            cap,
                            wire,
                        )
                    )
                    fh.write(mv[off : off + cap])
                    fh.write(b"\0" * pad + struct.pack("<I", blen))
                    n += 1
    return n


# Peak memory of a fresh process: VmHWM, since ru_maxrss survives fork + exec on Linux
# and would report the (larger) benchmark process that started the child.
_PEAK = "int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]) / 1024"
_CHILD = """
import json, sys, time
sys.path.insert(0, {src!r})
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows
t = time.perf_counter()
report, n = ReadReport(), 0
for b in iter_flows({path!r}, FlowOptions(), report):
    n += len(b)
print(json.dumps({{"seconds": time.perf_counter() - t, "n_packets": report.n_packets,
                  "n_flows": n, "peak_rss_mb": PEAK}}))
""".replace("PEAK", _PEAK)
_IMPORT_ONLY = """
import json, sys
sys.path.insert(0, {src!r})
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows
print(json.dumps({{"peak_rss_mb": PEAK}}))
""".replace("PEAK", _PEAK)
# NFStream meters in a child process: its CPU is the parent's plus the children's.
_NFSTREAM = """
import json, resource, time
from nfstream import NFStreamer
def children():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
t, c, k = time.perf_counter(), time.process_time(), children()
n = sum(1 for _ in NFStreamer(source={path!r}, statistical_analysis=True, splt_analysis=32,
                              n_dissections=0, n_meters=1))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"seconds": time.perf_counter() - t,
                  "cpu_s": time.process_time() - c + children() - k,
                  "process_cpu_s": ru.ru_utime + ru.ru_stime + children(), "n_flows": n}}))
"""
# The whole `prepare` of one capture in a fresh process: discovery, reading, labels by
# port, deduplication, splits, the dataset written. Timed after the imports, and the
# process's CPU with them.
_PREPARE = """
import json, resource, sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from flowsplit.data.labels import LabelSpec
from flowsplit.data.prepare import PrepareOptions, prepare_dataset
t, c = time.perf_counter(), time.process_time()
m = prepare_dataset([Path({path!r})], Path({out!r}), PrepareOptions(labels=LabelSpec(by="port")),
                    overwrite=True)
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"seconds": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                  "process_cpu_s": ru.ru_utime + ru.ru_stime, "n_packets": m["read"]["n_packets"],
                  "n_flows": m["n_flows"], "peak_rss_mb": PEAK}}))
""".replace("PEAK", _PEAK)


def single_capture(path: Path, work: Path, runs: int, nfstream: bool) -> dict:
    """Whole `prepare` of one capture vs NFStream on it, fresh processes, interleaved.

    Medians of ``runs`` runs each: wall and CPU seconds after the imports, and the
    process's CPU seconds with them (flowsplit's imports: numpy, pandas, pyarrow).
    """
    src = str(C.ROOT / "src")
    out = work / "prepared-single"
    rows: dict[str, list[dict]] = {"flowsplit": [], "nfstream": []}
    for _ in range(runs):
        rows["flowsplit"].append(child(_PREPARE.format(src=src, path=str(path), out=str(out))))
        if nfstream:
            rows["nfstream"].append(child(_NFSTREAM.format(path=str(path))))
    n_packets = rows["flowsplit"][0]["n_packets"]
    res = {}
    for who, got in rows.items():
        if not got:
            continue
        med = {
            k: statistics.median(g[k] for g in got) for k in ("seconds", "cpu_s", "process_cpu_s")
        }
        res[who] = {
            "packets_per_s": n_packets / med["seconds"],
            "packets_per_cpu_s": n_packets / med["cpu_s"],
            "packets_per_process_cpu_s": n_packets / med["process_cpu_s"],
            "median_wall_s": med["seconds"],
            "median_cpu_s": med["cpu_s"],
            "median_process_cpu_s": med["process_cpu_s"],
            "runs": len(got),
            "wall_s": [round(g["seconds"], 4) for g in got],  # each run, in run order
            "n_flows": got[0]["n_flows"],
        }
        if who == "flowsplit":
            res[who]["what"] = "prepare_dataset, --label-by port, fresh process"
            res[who]["peak_rss_mb"] = max(g["peak_rss_mb"] for g in got)
    res["n_packets"] = n_packets
    return res


def child(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **C.SINGLE_THREAD_ENV},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def ensure_baseline(module: str, *, install: bool) -> bool:
    """Whether ``module`` imports; with ``install``, pip-install it first when missing.

    The baselines are the ``bench`` extra (``pip install 'flowsplit[bench]'``); they
    are installed here so that the benchmark runs on a fresh clone.
    """
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return True
    if not install:
        return False
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", module]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"pip install {module} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return False
    importlib.invalidate_caches()
    return importlib.util.find_spec(module) is not None


def _print_agreement(agree: dict) -> None:
    for label, a in (
        ("default (inner)", agree),
        ("--tunnels outer", agree["tunnels_outer"]),
        ("tunnels as NFStream", agree["tunnels_as_nfstream"]),
    ):
        print(
            f"agreement {label:20s} {a['agree']:,}/{a['nfstream_tcp_udp_flows']:,} = "
            f"{a['agree_fraction']:.2%} ({a['agree_fraction_without_malformed_files']:.2%} "
            f"without malformed files); {a['disagree_by_reason']}; flowsplit's flows without "
            f"a match {a['flowsplit_flows_without_a_match']:,}/{a['flowsplit_tcp_udp_flows']:,}"
        )
    print("flows told apart by decoding, by packet cause:", agree["disagree_by_packet_cause"])
    print(
        "disagreements by flowsplit rule:",
        agree["disagree_by_rule"],
        f"(unexplained: {agree['disagree_unexplained']})",
    )
    for label in ("fragmented_flows", "tunnelled_flows"):
        a = agree[label]
        print(
            f"agreement on {label.replace('_', ' '):17s} {a['agree']:,}/"
            f"{a['nfstream_tcp_udp_flows']:,} = {a['agree_fraction']:.2%} (tunnels as NFStream "
            f"{a['agree_fraction_tunnels_as_nfstream']:.2%}; {len(a['files'])} files)"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON results file")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--runs", type=int, default=5, help="timed runs of flowsplit")
    ap.add_argument("--baseline-runs", type=int, default=3, help="timed runs of NFStream, dpkt")
    ap.add_argument("--quick", action="store_true", help="2 and 1 runs, no 8x memory test")
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["nfstream", "dpkt", "prepare", "rss", "agreement"],
    )
    ap.add_argument(
        "--agreement-only",
        action="store_true",
        help="only the agreement with NFStream (no timings): agreement_with_nfstream",
    )
    ap.add_argument(
        "--no-install",
        action="store_true",
        help="do not pip-install missing baselines (nfstream, dpkt); skip them instead",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.baseline_runs = 2, 1
    for base in ("nfstream", "dpkt"):
        if base not in args.skip and not ensure_baseline(base, install=not args.no_install):
            print(f"{base} not available: its baseline is skipped", file=sys.stderr)
            args.skip.append(base)
    if not args.corpus.is_dir():
        print(f"corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    paths = sorted(p for p in args.corpus.iterdir() if p.is_file())
    if args.agreement_only:
        if "nfstream" in args.skip:
            print("the agreement needs nfstream", file=sys.stderr)
            return 2
        agree = agreement(paths)
        C.write_json(
            args.out,
            {
                "corpus": {"path": str(args.corpus), "files": len(paths)},
                "agreement_with_nfstream": agree,
            },
        )
        _print_agreement(agree)
        return 0
    work = Path(tempfile.mkdtemp(prefix="fs-bench-"))
    res: dict = {"corpus": {"path": str(args.corpus), "files": len(paths)}}
    try:
        pipe = C.measure(lambda: run_pipeline(paths), args.runs)
        n_packets = pipe["result"]["n_packets"]
        res["corpus"].update(pipe.pop("result"))

        def rate(m: dict) -> dict:
            m.pop("result", None)
            return {
                "packets_per_s": n_packets / m["median_wall_s"],
                "packets_per_cpu_s": n_packets / m["median_cpu_s"],
                **m,
            }

        res["flowsplit_pipeline"] = {"what": "iter_flows_many: read, flows, 4 views", **rate(pipe)}
        prep = None if "prepare" in args.skip else run_prepare(args.corpus, work)
        if prep is not None:
            m = C.measure(prep, args.runs)
            extra = m["result"]
            res["flowsplit_prepare"] = {
                "what": "prepare_dataset, --label-by port",
                **rate(m),
                **extra,
            }
        res["flowsplit"] = dict(res.get("flowsplit_prepare") or res["flowsplit_pipeline"])
        if "nfstream" not in args.skip:
            m = measure_with_children(lambda: run_nfstream(paths), args.baseline_runs)
            info = m["result"]
            res["nfstream"] = {
                "what": "NFStreamer(statistical_analysis, splt_analysis=32, "
                "n_dissections=0, n_meters=1) per file",
                **rate(m),
                **info,
            }
        if "dpkt" not in args.skip:
            m = C.measure(lambda: run_dpkt(paths), args.baseline_runs, warmup=0)
            info = m["result"]
            res["dpkt"] = {
                "what": "dpkt reader, same flows and 4 views in Python",
                **rate(m),
                **info,
            }
        if "nfstream" not in args.skip and "agreement" not in args.skip:
            res["agreement_with_nfstream"] = agreement(paths)
            _print_agreement(res["agreement_with_nfstream"])
        speed = {}
        for base in ("nfstream", "dpkt"):
            if base in res:
                for ours in ("flowsplit", "flowsplit_pipeline"):
                    key = f"{ours}_vs_{base}"
                    speed[key] = res[ours]["packets_per_s"] / res[base]["packets_per_s"]
        res["speedup"] = speed
        if "rss" not in args.skip:
            src = str(C.ROOT / "src")
            rss = {"import_only": child(_IMPORT_ONLY.format(src=src))["peak_rss_mb"]}
            runs, single = {}, {}
            for copies in (1,) if args.quick else (1, 8):
                big = work / f"corpus-{copies}x.pcapng"
                n = write_concatenated(paths, big, copies)
                got = child(_CHILD.format(src=src, path=str(big)))
                got.update(records_written=n, file_mb=big.stat().st_size / 2**20)
                got["packets_per_s"] = got["n_packets"] / got["seconds"]
                runs[f"{copies}x"] = got
                rss[f"{copies}x"] = got["peak_rss_mb"]
                # One big file: the whole prepare, and NFStream without its per-file
                # start-up cost, on the same packets.
                single[f"{copies}x"] = single_capture(
                    big, work, args.baseline_runs, "nfstream" not in args.skip
                )
                big.unlink()
            res["peak_rss_mb"] = rss
            res["concatenated"] = runs
            # The largest single capture measured is the headline figure.
            form = list(single)[-1]
            res["single_capture"] = {"form": form, **single[form], "by_size": single}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["environment"] = C.environment(
        note="shared machine: other processes ran at the same time; compare rows of one run",
        flow_options={
            "views": list(OPTIONS.views),
            "seq_len": OPTIONS.seq_len,
            "n_bytes": OPTIONS.n_bytes,
            "n_pkts": OPTIONS.n_pkts,
            "pkt_len": OPTIONS.pkt_len,
        },
    )
    C.write_json(args.out, res)
    for k in ("flowsplit", "flowsplit_pipeline", "nfstream", "dpkt"):
        if k in res:
            print(f"{k:20s} {res[k]['packets_per_s']:>12,.0f} packets/s")
    if "peak_rss_mb" in res:
        print("peak RSS MB:", {k: round(v, 1) for k, v in res["peak_rss_mb"].items()})
    for size, one in res.get("single_capture", {}).get("by_size", {}).items():
        for who in ("flowsplit", "nfstream"):
            if who in one:
                r = one[who]
                print(
                    f"single capture {size} {who:9s} {r['packets_per_s']:>10,.0f} packets/s, "
                    f"{r['packets_per_cpu_s']:>10,.0f} per CPU-s "
                    f"({r['packets_per_process_cpu_s']:,.0f} with imports)"
                )
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
