"""Run every benchmark, one after the other, and write each one's JSON to OUT_DIR.

    python benchmarks/run_all.py --out-dir bench-results [--quick] [--only planner,sfl_sim]

Benchmarks (each also runs alone; see its docstring):

- ``prepare_throughput``: packets per second of ``flowsplit prepare`` against NFStream
  and dpkt on the nDPI captures (skipped when ../shared/data/ndpi is absent);
- ``ddp_overhead``: flowsplit's DDP engine against a minimal DDP loop, and the
  data-parallel speedup of each neural model;
- ``allreduce``: all-reduce time against message size, and the fitted ring model;
- ``sfl_sim``: simulated split-federated rounds per second, and the accounting's cost;
- ``planner``: planning time at 10,000 clients, and the gap to the exact solver.

They run one at a time (they measure time; running them together would spoil every
figure). ``OUT_DIR/summary.json`` lists each benchmark's status, wall time and file.
Exit status: 0 when every benchmark that ran succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NDPI = ROOT.parent / "shared" / "data" / "ndpi"

# name -> (script, extra arguments, extra arguments with --quick)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "prepare_throughput": ("prepare_throughput.py", [], ["--quick"]),
    "ddp_overhead": ("ddp_overhead.py", [], ["--quick"]),
    "allreduce": ("allreduce.py", [], ["--repeats", "2"]),
    "sfl_sim": ("sfl_sim.py", [], ["--repeats", "1", "--rounds", "1"]),
    "planner": ("planner.py", [], ["--instances", "50", "--runs", "2"]),
}


def _skip_reason(name: str) -> str | None:
    if name == "prepare_throughput" and not NDPI.is_dir():
        return f"{NDPI} is absent (the nDPI captures are the corpus)"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path, default=Path("bench-results"))
    p.add_argument("--quick", action="store_true", help="fewer repeats: a smoke run, not figures")
    p.add_argument("--only", default="", help="comma list of benchmarks (default: all)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(
            f"run_all: error: unknown benchmark(s) {', '.join(unknown)}; "
            f"choose from {', '.join(BENCHMARKS)}",
            file=sys.stderr,
        )
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in names:
        script, extra, quick_extra = BENCHMARKS[name]
        out = args.out_dir / f"{name}.json"
        reason = _skip_reason(name)
        if reason:
            print(f"== {name}: skipped: {reason}", flush=True)
            summary[name] = {"status": "skipped", "reason": reason}
            continue
        cmd = [sys.executable, str(ROOT / "benchmarks" / script), "--out", str(out), *extra]
        if args.quick:
            cmd += quick_extra
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=ROOT, env=env)
        wall = time.perf_counter() - t0
        status = "ok" if rc == 0 else f"failed (exit {rc})"
        print(f"== {name}: {status} in {wall:.0f} s -> {out}", flush=True)
        summary[name] = {
            "status": "ok" if rc == 0 else "failed",
            "exit": rc,
            "wall_s": round(wall, 1),
            "file": str(out),
        }
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    failed = [n for n, s in summary.items() if s["status"] == "failed"]
    if failed:
        print(f"run_all: {len(failed)} benchmark(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
