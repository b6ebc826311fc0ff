"""Shared benchmark helpers: one thread, the environment record, medians, JSON.

Import this module before numpy/torch in a benchmark script, so that the thread
settings below apply to every library loaded afterwards.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The public corpora (README, Public corpora): FLOWSPLIT_SHARED_DATA, as the tests read it.
SHARED = Path(os.environ.get("FLOWSPLIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
# How the nDPI sets choose their flows (nDPI's master protocol, no Unknown, at most 30
# flows per capture and class, classes in at least 5 captures); the number of classes
# and the labels file are given apart.
NDPI_SELECTION = [
    "--label-column",
    "master",
    "--exclude-classes",
    "Unknown",
    "--max-flows-per-group",
    "30",
    "--min-groups-per-class",
    "5",
]
# `flowsplit prepare` options of the nDPI 8-protocol set (after the input folder), as the
# README gives them.
NDPI8_OPTIONS = [
    "--labels",
    str(SHARED / "ndpi" / "ndpi_flow_labels.csv"),
    *NDPI_SELECTION,
    "--top-classes",
    "8",
]
SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}


def single_thread() -> None:
    """Keep this process (and its children) to one compute thread."""
    os.environ.update(SINGLE_THREAD_ENV)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(**extra: Any) -> dict[str, Any]:
    """Hardware, software and load at the time of the run."""
    versions = {"python": platform.python_version()}
    for name in ("numpy", "pandas", "pyarrow", "dpkt", "nfstream", "torch"):
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = getattr(mod, "__version__", "?")
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15": load,
        "threads": {k: os.environ.get(k) for k in SINGLE_THREAD_ENV},
        "versions": versions,
        "git_commit": git_commit(),
        **extra,
    }


def measure(fn: Callable[[], Any], runs: int, *, warmup: int = 1) -> dict[str, Any]:
    """Run ``fn`` ``warmup + runs`` times; wall and CPU seconds of the timed runs, medians."""
    for _ in range(warmup):
        fn()
    wall, cpu, result = [], [], None
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return {
        "runs": runs,
        "wall_s": [round(x, 4) for x in wall],
        "cpu_s": [round(x, 4) for x in cpu],
        "median_wall_s": statistics.median(wall),
        "median_cpu_s": statistics.median(cpu),
        "min_wall_s": min(wall),
        "result": result,
    }


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
