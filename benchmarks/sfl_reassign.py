"""An aggregator killed in round 3 of a 6-round dist run, against the fault-free run.

Three ``sfl run --mode dist`` runs of the same configuration (cnn, heterogeneous
topology, 8 clients, 3 aggregators, 6 rounds): fault-free; ``--fail aggregator:1@round3``
(the aggregator's process SIGKILLs itself at the start of round 3); and an external
SIGKILL of aggregator 1's process as soon as the server logs ``round 3 starts``. Per
run: per-round accuracy, participants, lost clients and bytes, the moves, the final
assignment, and whether the final weights equal the ``--fail`` run's.

    python benchmarks/sfl_reassign.py DATASET --out reassign.json

DATASET: a prepared dataset (the demo's: ``flowsplit prepare demo/captures -o DS``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402 - after the sys.path line, like the import below

from benchmarks._common import ROOT, SINGLE_THREAD_ENV, environment, write_json  # noqa: E402


def _holder(path: Path) -> int | None:
    """The process that has ``path`` open (each role holds its own log file)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(f) == str(path) for f in (d / "fd").iterdir()):
                return int(d.name)
    return None


def run(args: list[str], out: Path, *, kill_round: int | None = None) -> dict[str, Any]:
    """One ``sfl run`` into ``out``; ``kill_round``: SIGKILL aggregator 1 when it starts."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowsplit", *args, "-o", str(out)],
        cwd=ROOT,
        env={**os.environ, **SINGLE_THREAD_ENV},
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = False
    if kill_round is not None:
        log = out / "logs" / "server.log"
        while proc.poll() is None:
            if log.is_file() and f"round {kill_round} starts" in log.read_text(errors="replace"):
                pid = _holder((out / "logs" / "aggregator-1.log").resolve())
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                break
            time.sleep(0.05)
    _, err = proc.communicate()
    result: dict[str, Any] = {
        "exit": proc.returncode,
        "wall_s": round(time.monotonic() - start, 1),
        "killed": killed,
    }
    if proc.returncode != 0:
        return {**result, "stderr_tail": err[-600:]}
    metrics = json.loads((out / "metrics.json").read_text())
    keys = ("round", "accuracy", "participants", "lost", "lost_aggregators", "bytes_total")
    return {
        **result,
        "final_accuracy": metrics["rounds"][-1]["accuracy"],
        "rounds": [{k: r.get(k) for k in keys} for r in metrics["rounds"]],
        "reassignments": metrics["extra"].get("reassignments", []),
        "final_assignment": metrics["extra"].get("final_assignment"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", help="a prepared dataset")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    base = ["sfl", "run", str(Path(args.dataset).resolve()), "--model", "cnn"]
    base += ["--topology", "heterogeneous", "--clients", "8", "--aggregators", "3"]
    base += ["--rounds", "6", "--seed", str(args.seed), "--mode", "dist"]
    base += ["--timeout", "20", "--quiet"]
    with tempfile.TemporaryDirectory(prefix="flowsplit-reassign-") as tmp:
        work = Path(tmp)
        runs = {
            "fault-free": run(base, work / "free"),
            "fail-round3": run([*base, "--fail", "aggregator:1@round3"], work / "fail"),
            "sigkill-round3": run(base, work / "kill", kill_round=3),
        }
        ref = work / "fail" / "model.pt"
        for name, folder in (("fault-free", "free"), ("sigkill-round3", "kill")):
            path = work / folder / "model.pt"
            if ref.is_file() and path.is_file():
                a, b = (torch.load(x, weights_only=True) for x in (ref, path))
                runs[name]["weights_equal_fail_run"] = all(torch.equal(a[k], b[k]) for k in a)
    free = runs["fault-free"].get("final_accuracy")
    for name in ("fail-round3", "sigkill-round3"):
        acc = runs[name].get("final_accuracy")
        if acc is not None and free is not None:
            runs[name]["accuracy_vs_fault_free_pt"] = round(100 * (acc - free), 2)
            last = runs[name]["rounds"][-1]
            runs[name]["held"] = bool(
                last["participants"] == 8
                and abs(acc - free) <= 0.01
                and runs[name]["reassignments"]
            )
    write_json(args.out, {"dataset": str(args.dataset), "runs": runs, "environment": environment()})
    for name, r in runs.items():
        print(
            name,
            r.get("final_accuracy"),
            r.get("accuracy_vs_fault_free_pt"),
            r.get("held"),
            r.get("final_assignment"),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
