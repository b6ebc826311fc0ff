"""Memory of an ``sfl run`` per registered client, the figure its memory check uses.

    python benchmarks/client_memory.py --out bench-results/client_memory.json

``flowsplit sfl run`` refuses a ``--clients`` x ``--aggregators`` whose run would not fit
the available memory (``federated.system.presets.CLIENT_BYTES``: bytes a client and
aggregator, bytes a client). This measures both: for each aggregator count (``--aggregators``,
3 and 30) and each client count (``--clients``, 100,000 and 1,000,000) it runs ``sfl run``
on the embedded capture (prepared into a temporary folder; 1 round, 10 clients sampled,
``hsfl``) in a child process, ``--repeats`` times, and takes the child's peak resident
set size (``ru_maxrss`` from ``wait4``). Per aggregator count, the slope of the median
peak against the clients is the bytes a client; across aggregator counts, the slope of
those is the bytes a client and aggregator, the intercept the bytes a client.

JSON: ``{"points": [{"aggregators", "clients", "peak_rss_mb": [...], "wall_s": [...]}],
"per_client": {A: bytes}, "fit": {"bytes_per_client_aggregator", "bytes_per_client"},
"check": [bytes a client and aggregator, bytes a client], "environment": ...}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # benchmark helpers (environment record, JSON); before numpy/torch


def _peak(cmd: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of ``cmd`` run to its end."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.strip()[-500:]}")
    return usage.ru_maxrss / 1024, wall


def _slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope, my - slope * mx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/client_memory.json"))
    p.add_argument("--aggregators", type=int, nargs="+", default=[3, 30])
    p.add_argument("--clients", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    if len(args.aggregators) < 2 or len(args.clients) < 2:
        p.error("give at least two aggregator counts and two client counts (slopes)")

    from flowsplit.federated.system.presets import CLIENT_BYTES

    points, per_client = [], {}
    with tempfile.TemporaryDirectory(prefix="client-memory-") as tmp:
        ds = Path(tmp) / "ds"
        demo = _common.ROOT / "demo" / "captures"
        flowsplit = [sys.executable, "-m", "flowsplit"]
        subprocess.run([*flowsplit, "prepare", str(demo), "-o", str(ds), "--quiet"], check=True)
        for a in args.aggregators:
            medians = []
            for n in args.clients:
                cmd = [*flowsplit, "sfl", "run", str(ds), "-o", str(Path(tmp) / "run")]
                cmd += ["--clients", str(n), "--aggregators", str(a), "--rounds", "1"]
                cmd += ["--clients-per-round", "10", "--quiet", "--overwrite"]
                runs = [_peak(cmd) for _ in range(args.repeats)]
                peaks = [r[0] for r in runs]
                points.append(
                    {
                        "aggregators": a,
                        "clients": n,
                        "peak_rss_mb": peaks,
                        "wall_s": [r[1] for r in runs],
                    }
                )
                medians.append(statistics.median(peaks))
                print(
                    f"{a:>4} aggregators {n:>9,} clients: peak {statistics.median(peaks):,.0f} MB"
                )
            slope, _ = _slope([float(n) for n in args.clients], [m * 2**20 for m in medians])
            per_client[a] = slope
            print(f"{a:>4} aggregators: {slope:,.0f} bytes a client")
    per_agg, base = _slope([float(a) for a in per_client], list(per_client.values()))
    print(
        f"fit: {per_agg:,.0f} bytes a client and aggregator + {base:,.0f} a client "
        f"(the check uses {CLIENT_BYTES[0]} and {CLIENT_BYTES[1]})"
    )
    _common.write_json(
        args.out,
        {
            "points": points,
            "per_client": per_client,
            "fit": {"bytes_per_client_aggregator": per_agg, "bytes_per_client": base},
            "check": list(CLIENT_BYTES),
            "config": vars(args),
            "environment": _common.environment(),
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
