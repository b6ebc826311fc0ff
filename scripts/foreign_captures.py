"""The reader on captures it was never tuned on: other projects' test captures.

Fetches the source packages of tcpdump, Wireshark, nDPI 4.2, libpcap and dpkt from
Debian's archive (checked against pinned SHA-256 digests), keeps the capture files in
them that are not in the shared corpora (compared by content), and checks:

1. robustness: ``flowsplit prepare`` on each capture alone (as the CLI runs it) ends
   in a dataset or a one-line error, never a traceback, a crash or a hang (60 s);
2. agreement with NFStream on 5-tuple and packet count, by reason and rule
   (``benchmarks/prepare_throughput.py``'s ``agreement``);
3. agreement with ndpiReader itself: the flows of the reference output nDPI 4.2 ships
   for its captures (``tests/result/*.out``) found by 5-tuple, and with the same number
   of packets per 5-tuple.

    .venv/bin/python scripts/foreign_captures.py --out foreign.json [--work DIR]

The captures stay in ``--work`` (default ``~/.cache/flowsplit-foreign``), outside the
project. NFStream comes from the ``bench`` extra (installed when missing, unless
``--no-install``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from flowsplit.data.store import file_digest  # noqa: E402

ARCHIVE = "http://deb.debian.org/debian/pool/main/"
# (project, path in the archive, SHA-256 of the file)
SOURCES = [
    (
        "tcpdump",
        "t/tcpdump/tcpdump_4.99.3.orig.tar.gz",
        "ad75a6ed3dc0d9732945b2e5483cb41dc8b4b528a169315e499c6861952e73b3",
    ),
    (
        "wireshark",
        "w/wireshark/wireshark_4.0.17.orig.tar.bz2",
        "62fd1491b6211d1651a16a45ead15808970b3a6a9ebde2537f96722af47aaaa5",
    ),
    (
        "ndpi",
        "n/ndpi/ndpi_4.2.orig.tar.gz",
        "e54ce8fe13adc5d747be7553513657fae78f796e0bd459e122c280cc06ce4daf",
    ),
    (
        "libpcap",
        "libp/libpcap/libpcap_1.10.3.orig.tar.gz",
        "2a8885c403516cf7b0933ed4b14d6caa30e02052489ebd414dc75ac52e7559e6",
    ),
    (
        "dpkt",
        "p/python-dpkt/python-dpkt_1.9.8.orig.tar.gz",
        "9990639e19a9c8f1db4af453b7e6a45ef2995ec03e13bac35b9824839fd46867",
    ),
]
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".ntar", ".pcap.gz", ".pcapng.gz", ".pcap.zst")
HANG_S = 60


def fetch(work: Path) -> dict[str, Path]:
    """The source packages, downloaded once into ``work`` and checked."""
    out = {}
    for project, path, digest in SOURCES:
        dst = work / Path(path).name
        if not dst.exists() or file_digest(dst, "sha256") != digest:
            print(f"fetching {ARCHIVE}{path}", file=sys.stderr)
            tmp = dst.with_suffix(dst.suffix + ".part")
            with urllib.request.urlopen(ARCHIVE + path, timeout=120) as r, tmp.open("wb") as fh:
                shutil.copyfileobj(r, fh)
            if file_digest(tmp, "sha256") != digest:
                tmp.unlink()
                raise SystemExit(f"error: {ARCHIVE}{path}: SHA-256 differs from the pinned one")
            tmp.replace(dst)
        out[project] = dst
    return out


def unseen_captures(archives: dict[str, Path], work: Path, shared: Path) -> list[Path]:
    """The archives' captures not in ``shared`` (by content), as ``work/captures/P__NAME``;
    gzip-compressed ones (``NAME.gz``) decompressed, as ``P__NAME``."""
    known = (
        {file_digest(p, "sha256") for p in shared.rglob("*") if p.is_file()}
        if shared.is_dir()
        else set()
    )
    out_dir = work / "captures"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    seen, out = set(), []
    for project, archive in archives.items():
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if not m.isfile() or not m.name.endswith(CAPTURE_SUFFIXES):
                    continue
                data = tar.extractfile(m).read()
                digest = hashlib.sha256(data).hexdigest()
                if digest in known or digest in seen:
                    continue
                seen.add(digest)
                base = Path(m.name).name
                if base.endswith(".gz"):  # NFStream cannot read them (no label): decompressed
                    data, base = gzip.decompress(data), base[: -len(".gz")]
                    digest = hashlib.sha256(data).hexdigest()
                    if digest in known or digest in seen:
                        continue
                    seen.add(digest)
                name = f"{project}__{base}"
                while (out_dir / name).exists():
                    name = f"{project}__{len(out)}_{Path(m.name).name}"
                (out_dir / name).write_bytes(data)
                out.append(out_dir / name)
    return sorted(out)


def robustness(paths: list[Path], work: Path) -> dict:
    """Each capture through the CLI's prepare, in a child process that a crash cannot
    take the others down with (the child starts again after the file that crashed)."""
    log = work / "robustness.jsonl"
    log.unlink(missing_ok=True)
    (work / "robustness.current").unlink(missing_ok=True)
    listing = work / "robustness.files"
    listing.write_text("\n".join(map(str, paths)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    while True:
        done = _logged(log)
        if len(done) >= len(paths):
            break
        r = subprocess.run(
            [sys.executable, __file__, "--child", str(listing), str(log)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            marker = work / "robustness.current"
            current = marker.read_text() if marker.exists() else None
            if current is None or current in _logged(log):  # not a capture's doing
                raise SystemExit(f"error: the sweep's child failed: {r.stderr[-500:]}")
            with log.open("a") as fh:
                row = {"file": current, "outcome": "crash", "rc": r.returncode}
                fh.write(json.dumps({**row, "error": r.stderr[-500:]}) + "\n")
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    messages = collections.Counter()
    for row in rows:
        if row["outcome"] == "error":
            messages[re.sub(r"\d+", "N", row["error"].split(": ", 3)[-1])[:120]] += 1
    return {
        "files": len(rows),
        "outcomes": dict(collections.Counter(r["outcome"] for r in rows).most_common()),
        "errors_by_message": dict(messages.most_common()),
        "bad": [r for r in rows if r["outcome"] not in ("dataset", "error")],
        "slowest_s": max((r.get("s", 0.0) for r in rows), default=0.0),
    }


def _logged(log: Path) -> set[str]:
    if not log.exists():
        return set()
    return {json.loads(x)["file"] for x in log.read_text().splitlines()}


class _Hang(Exception):
    pass


def _child(listing: Path, log: Path) -> None:
    from flowsplit import cli

    def alarm(*_):
        raise _Hang

    signal.signal(signal.SIGALRM, alarm)
    done = _logged(log)
    out = log.parent / "robustness-dataset"
    current = log.parent / "robustness.current"
    with log.open("a") as fh:
        for f in listing.read_text().splitlines():
            if f in done:
                continue
            current.write_text(f)
            err = io.StringIO()
            t = time.perf_counter()
            signal.alarm(HANG_S)
            argv = ["prepare", f, "-o", str(out), "--label-by", "port", "--overwrite", "--quiet"]
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    rc = cli.main(argv)
                outcome = "dataset" if rc == 0 else "error"
            except _Hang:
                outcome, rc = "hang", None
            except BaseException as exc:  # noqa: BLE001 - what the sweep looks for
                outcome, rc = "exception", None
                err.write(repr(exc))
            finally:
                signal.alarm(0)
            text = err.getvalue()
            if "Traceback" in text:
                outcome = "traceback"
            lines = [x for x in text.splitlines() if "error:" in x]
            row = {"file": f, "outcome": outcome, "rc": rc, "s": round(time.perf_counter() - t, 3)}
            if outcome != "dataset":
                row["error"] = lines[-1] if outcome == "error" and lines else text[-500:]
            fh.write(json.dumps(row) + "\n")
            fh.flush()


_OUT_LINE = re.compile(
    r"^\s+\d+\s+(TCP|UDP) (\S+) <?-> (\S+) \[proto: [\d.]+/([^\]]+)\]"
    r".*?\[(\d+) pkts/\d+ bytes <?->? (\d+) pkts/\d+ bytes\]"
)


def _endpoint(text: str) -> tuple[str, int]:
    addr, port = text[1:].rsplit("]:", 1) if text.startswith("[") else text.rsplit(":", 1)
    return addr, int(port)


def reader_flow(line: str) -> tuple[tuple, int] | None:
    """(flow key, packets both ways) of one flow line of ndpiReader's output, or None."""
    from flowsplit.data.labels import flow_key

    m = _OUT_LINE.match(line)
    if m is None:
        return None
    l4, a, b, _, n_ab, n_ba = m.groups()
    return flow_key(6 if l4 == "TCP" else 17, *_endpoint(a), *_endpoint(b)), int(n_ab) + int(n_ba)


def ndpi_reader_agreement(archive: Path, paths: list[Path]) -> dict:
    """ndpiReader's flows (nDPI 4.2's reference output) found by flowsplit."""
    from flowsplit.data.labels import flow_key
    from flowsplit.reader.flows import FlowOptions, ReadReport, iter_flows_many

    with tarfile.open(archive) as tar:
        results = {
            Path(m.name).name[: -len(".out")]: tar.extractfile(m).read().decode("utf-8", "replace")
            for m in tar.getmembers()
            if m.isfile() and "/tests/result/" in m.name and m.name.endswith(".out")
        }
    files = [p for p in paths if p.name.startswith("ndpi__") and p.name[6:] in results]
    ref: dict[tuple[int, tuple], int] = {}
    for i, p in enumerate(files):
        for line in results[p.name[6:]].splitlines():
            got = reader_flow(line)
            if got is not None:
                ref[(i, got[0])] = ref.get((i, got[0]), 0) + got[1]
    ours: collections.Counter = collections.Counter()
    report = ReadReport()
    for bt in iter_flows_many(files, FlowOptions(views=("stats",)), report, on_error="skip"):
        cols = (bt.source, bt.proto, bt.ip_a, bt.port_a, bt.ip_b, bt.port_b, bt.n_packets)
        for s, proto, a, pa, b, pb, n in zip(*(c.tolist() for c in cols), strict=True):
            ours[(s, flow_key(proto, a, pa, b, pb))] += n
    found = sum(k in ours for k in ref)
    same = sum(ours.get(k) == n for k, n in ref.items())
    return {
        "files": len(files),
        "ndpi_reader_flows": len(ref),
        "found": found,
        "found_fraction": found / max(len(ref), 1),
        # packets summed over each side's flows of the 5-tuple (either may split a flow)
        "same_packets_per_five_tuple": same,
        "same_packets_per_five_tuple_fraction": same / max(len(ref), 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON results file")
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "flowsplit-foreign")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--no-install", action="store_true", help="skip NFStream when missing")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    archives = fetch(args.work)
    paths = unseen_captures(archives, args.work, args.shared)
    print(f"{len(paths)} captures not in {args.shared}", file=sys.stderr)
    res: dict = {"sources": [s[1] for s in SOURCES], "captures": len(paths)}
    res["robustness"] = rob = robustness(paths, args.work)
    print(f"robustness: {rob['outcomes']} (slowest {rob['slowest_s']:.2f} s)")
    res["ndpi_reader_4_2"] = nr = ndpi_reader_agreement(archives["ndpi"], paths)
    print(
        f"ndpiReader 4.2 flows found {nr['found']:,}/{nr['ndpi_reader_flows']:,} = "
        f"{nr['found_fraction']:.2%}, same packets per 5-tuple "
        f"{nr['same_packets_per_five_tuple_fraction']:.2%} "
        f"({nr['files']} files)"
    )
    import prepare_throughput as PT

    if PT.ensure_baseline("nfstream", install=not args.no_install):
        res["agreement_with_nfstream"] = agree = PT.agreement(paths)
        PT._print_agreement(agree)
    args.out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    return 1 if rob["bad"] else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(main())
