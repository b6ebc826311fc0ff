"""Validate the vectorised reader against an independent dpkt-based reader.

For every capture of a corpus (default: the nDPI test captures), both readers
assemble TCP/UDP flows under the same rules; per file, packet counts and the flows
(identified by 5-tuple and first packet, compared on packet and byte counts) are
compared. Differences are classified. Writes JSON with ``--out``.

    .venv/bin/python scripts/validate_reader.py [--corpus DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from flowsplit.errors import InputError  # noqa: E402
from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows  # noqa: E402
from flowsplit.reader.reference import DPKT_LINKTYPES, reference_flows  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "ndpi" / "pcap"


def ours(path: Path, options: FlowOptions) -> dict:
    report = ReadReport()
    flows: dict[tuple[str, int], tuple[int, int]] = {}
    error = None
    try:
        for b in iter_flows(path, options, report):
            for k, i, n, nb in zip(
                b.keys(),
                b.first_index.tolist(),
                b.n_packets.tolist(),
                b.n_bytes.tolist(),
                strict=True,
            ):
                flows[(k, i)] = (n, nb)
    except InputError as exc:
        error = exc.problem
    return {
        "n_packets": report.n_packets,
        "flows": flows,
        "skipped": report.skipped,
        "error": error,
    }


def theirs(path: Path, options: FlowOptions) -> dict:
    res = reference_flows(path, options, keep_packets=False)
    flows = {(f.key, f.first_index): (f.n_packets, f.n_bytes) for f in res.flows}
    return {"n_packets": res.n_packets, "flows": flows, "skipped": res.skipped, "error": res.error}


def interfaces(path: Path) -> list[tuple[int, int]]:
    """(link type, if_tsresol) of each interface a file declares (pcap: one)."""
    import struct

    data = path.read_bytes()
    if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") and len(data) >= 24:
        return [(struct.unpack("<I", data[20:24])[0] & 0xFFFF, 6)]
    if data[:4] in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d") and len(data) >= 24:
        return [(struct.unpack(">I", data[20:24])[0] & 0xFFFF, 6)]
    out, off, e = [], 0, "<"
    while off + 12 <= len(data):
        if struct.unpack_from("<I", data, off)[0] == 0x0A0D0D0A:
            e = "<" if struct.unpack_from("<I", data, off + 8)[0] == 0x1A2B3C4D else ">"
        bt, bl = struct.unpack_from(e + "II", data, off)
        if bt == 1 and off + 16 <= len(data):
            lt, res, opt = struct.unpack_from(e + "H", data, off + 8)[0], 6, off + 16
            while opt + 4 <= min(off + bl, len(data)) - 4:
                code, olen = struct.unpack_from(e + "HH", data, opt)
                if code == 0:
                    break
                if code == 9 and olen >= 1:
                    res = data[opt + 4]
                opt += 4 + ((olen + 3) & ~3)
            out.append((lt, res))
        if bl < 12:
            break
        off += bl
    return out


# Differences that come from dpkt not reading a file as it is, not from our reader.
DPKT_LIMITS = ("dpkt_linktype", "dpkt_interfaces", "dpkt_ppp_hdlc")


def classify(path: Path, a: dict, b: dict) -> list[tuple[str, str]]:
    """Why the two readers differ on one file: (category, detail), most specific first."""
    why = []
    ifs = interfaces(path)
    lts = {lt for lt, _ in ifs}
    if lts - DPKT_LINKTYPES:
        why.append(
            ("dpkt_linktype", f"link type dpkt does not decode {sorted(lts - DPKT_LINKTYPES)}")
        )
    if len(set(ifs)) > 1:
        why.append(
            (
                "dpkt_interfaces",
                f"pcapng interfaces differ in link type or timestamp "
                f"unit {sorted(set(ifs))}: dpkt applies the first one's to all",
            )
        )
    if 9 in lts and b["skipped"].get("non_ip", 0) > a["skipped"].get("non_ip", 0):
        why.append(
            ("dpkt_ppp_hdlc", "Cisco HDLC framing in DLT_PPP: dpkt decodes PPP framing only")
        )
    if a["error"] or b["error"]:
        why.append(("file_error", f"flowsplit={a['error']!r} dpkt={b['error']!r}"))
    if a["n_packets"] != b["n_packets"]:
        why.append(("records", f"records read: flowsplit {a['n_packets']}, dpkt {b['n_packets']}"))
    if "fuzz" in path.name or path.name.startswith("bad"):
        why.append(
            (
                "malformed",
                "deliberately malformed capture: the readers judge damaged headers differently",
            )
        )
    for reason in sorted(set(a["skipped"]) | set(b["skipped"])):
        if a["skipped"].get(reason, 0) != b["skipped"].get(reason, 0):
            why.append(
                (
                    "skipped",
                    f"{reason}: flowsplit {a['skipped'].get(reason, 0)}, "
                    f"dpkt {b['skipped'].get(reason, 0)}",
                )
            )
    return why or [("unclassified", "")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--limit", type=int, default=0, help="first N files only (0: all)")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    options = FlowOptions(views=())
    files = sorted(p for p in args.corpus.iterdir() if p.is_file())
    if args.limit:
        files = files[: args.limit]
    t0 = time.perf_counter()
    n_union = n_agree = pk_ours = pk_theirs = 0
    clean_union = clean_agree = 0  # files dpkt reads as they are
    per_file, reasons = [], collections.Counter()
    for path in files:
        a, b = ours(path, options), theirs(path, options)
        keys = set(a["flows"]) | set(b["flows"])
        agree = sum(a["flows"].get(k) == b["flows"].get(k) for k in keys)
        n_union += len(keys)
        n_agree += agree
        pk_ours += a["n_packets"]
        pk_theirs += b["n_packets"]
        why = []
        if agree != len(keys) or a["n_packets"] != b["n_packets"]:
            why = classify(path, a, b)
            reasons[why[0][0]] += 1
            only_a = sorted(k for k in keys if k in a["flows"] and k not in b["flows"])
            only_b = sorted(k for k in keys if k in b["flows"] and k not in a["flows"])
            per_file.append(
                {
                    "file": path.name,
                    "flows_flowsplit": len(a["flows"]),
                    "flows_dpkt": len(b["flows"]),
                    "flows_agreeing": agree,
                    "flows_union": len(keys),
                    "only_flowsplit": [f"{k}@{i}" for k, i in only_a[:5]],
                    "only_dpkt": [f"{k}@{i}" for k, i in only_b[:5]],
                    "category": why[0][0],
                    "why": [d for _, d in why],
                }
            )
        if not any(c in DPKT_LIMITS for c, _ in why):
            clean_union += len(keys)
            clean_agree += agree
    rate = n_agree / n_union if n_union else 1.0
    clean = clean_agree / clean_union if clean_union else 1.0
    summary = {
        "corpus": str(args.corpus),
        "n_files": len(files),
        "n_files_differing": len(per_file),
        "records_flowsplit": pk_ours,
        "records_dpkt": pk_theirs,
        "flows_union": n_union,
        "flows_agreeing": n_agree,
        "agreement_rate": rate,
        "agreement_rate_where_dpkt_reads_the_file": clean,
        "files_by_main_reason": dict(reasons.most_common()),
        "seconds": round(time.perf_counter() - t0, 1),
        "files": per_file,
    }
    print(
        f"{len(files)} files, {n_union} flows: {rate:.2%} agree on 5-tuple, first packet, packets "
        f"and bytes ({clean:.2%} leaving out what dpkt cannot read); {len(per_file)} files "
        f"differ: {dict(reasons.most_common())}"
    )
    for f in per_file:
        print(
            f"  {f['file']}: {f['flows_agreeing']}/{f['flows_union']} [{f['category']}] "
            f"{'; '.join(f['why'])}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
