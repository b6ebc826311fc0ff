"""Accuracy of split federated learning against centralised training of the same model.

    python benchmarks/sfl_accuracy.py DATASET --out bench-results/sfl_accuracy.json \\
        [--model cnn] [--rounds 5] [--seeds 3] [--clients 10] [--aggregators 3]

For every seed: ``flowsplit train`` centralised for ROUNDS epochs (early stopping off,
constant learning rate), then ``flowsplit sfl run`` with ``sfl`` (cut a), ``hsfl`` and
``hsfl-ll`` (cuts a,c) for ROUNDS rounds of one local epoch each, so every scheme sees
each training row ROUNDS times, with the same model, batch size, optimiser (Adam) and
learning rate, evaluated on the same test split. Clients hold IID shards of the
training split (``--partition`` to change). Reports, per scheme, the mean test
accuracy and macro-F1 over seeds with 95 % t intervals, and the paired difference
from centralised training (scipy's paired t-test through flowsplit's statistics).
Every run is a subprocess with ``--threads`` torch threads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import environment, write_json

from flowsplit.experiments.stats import compare_paired, mean_ci

SCHEMES = ("sfl", "hsfl", "hsfl-ll")


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"sfl_accuracy: {' '.join(cmd[:6])} ... failed: {' | '.join(tail)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", type=Path)
    p.add_argument("--out", type=Path, default=Path("bench-results/sfl_accuracy.json"))
    p.add_argument("--model", default="cnn")
    p.add_argument("--rounds", type=int, default=5, help="rounds = centralised epochs")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--aggregators", type=int, default=3)
    p.add_argument("--cuts", default="1,2", help="hsfl and hsfl-ll cuts a,c (sfl cuts at a)")
    p.add_argument("--partition", default="iid")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work-dir", type=Path, default=None, help="keep the runs here")
    args = p.parse_args(argv)

    flowsplit = [sys.executable, "-m", "flowsplit"]
    a = args.cuts.split(",")[0]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="sfl-acc-"))
    work.mkdir(parents=True, exist_ok=True)
    scores: dict[str, dict[str, list[float]]] = {
        s: {"accuracy": [], "macro_f1": [], "wall_s": []} for s in ("centralised", *SCHEMES)
    }
    for seed in range(args.seeds):
        out = work / f"centralised-seed{seed}"
        t0 = time.perf_counter()
        if not (out / "metrics.json").is_file():
            _run(
                [
                    *flowsplit,
                    "train",
                    str(args.dataset),
                    "--model",
                    args.model,
                    "-o",
                    str(out),
                    "--epochs",
                    str(args.rounds),
                    "--patience",
                    "0",
                    "--lr-schedule",
                    "constant",
                    "--batch-size",
                    str(args.batch_size),
                    "--lr",
                    str(args.lr),
                    "--seed",
                    str(seed),
                    "--threads",
                    str(args.threads),
                    "-q",
                ]
            )
        m = json.loads((out / "metrics.json").read_text())
        scores["centralised"]["accuracy"].append(m["accuracy"])
        scores["centralised"]["macro_f1"].append(m["macro_f1"])
        scores["centralised"]["wall_s"].append(time.perf_counter() - t0)
        for scheme in SCHEMES:
            out = work / f"{scheme}-seed{seed}"
            t0 = time.perf_counter()
            if not (out / "metrics.json").is_file():
                _run(
                    [
                        *flowsplit,
                        "sfl",
                        "run",
                        str(args.dataset),
                        "--scheme",
                        scheme,
                        "--model",
                        args.model,
                        "--cuts",
                        a if scheme == "sfl" else args.cuts,
                        "--clients",
                        str(args.clients),
                        "--aggregators",
                        str(args.aggregators),
                        "--rounds",
                        str(args.rounds),
                        "--partition",
                        args.partition,
                        "--batch-size",
                        str(args.batch_size),
                        "--lr",
                        str(args.lr),
                        "--optimizer",
                        "adam",
                        "--eval-split",
                        "test",
                        "--seed",
                        str(seed),
                        "--threads",
                        str(args.threads),
                        "--quiet",
                        "-o",
                        str(out),
                    ]
                )
            last = json.loads((out / "metrics.json").read_text())["rounds"][-1]
            scores[scheme]["accuracy"].append(last["accuracy"])
            scores[scheme]["macro_f1"].append(last["macro_f1"])
            scores[scheme]["wall_s"].append(time.perf_counter() - t0)
        print(
            f"seed {seed}: " + ", ".join(f"{s} {v['accuracy'][-1]:.4f}" for s, v in scores.items()),
            flush=True,
        )

    summary = {}
    ref = scores["centralised"]
    for scheme, v in scores.items():
        row = {metric: mean_ci(v[metric]).as_dict() for metric in ("accuracy", "macro_f1")}
        if scheme != "centralised":
            for metric in ("accuracy", "macro_f1"):
                c = compare_paired(ref[metric], v[metric])
                row[f"{metric}_vs_centralised"] = {"diff": c.diff.as_dict(), "t_p": c.t_p}
        summary[scheme] = row
    print(
        f"\n{args.model} on {args.dataset}, {args.rounds} rounds/epochs, {args.seeds} seeds, "
        f"{args.clients} clients, {args.aggregators} aggregators, cuts {args.cuts}"
    )
    print(
        f"{'scheme':<12} {'accuracy % (95 % CI)':>24} {'macro-F1 %':>10} {'vs centralised, pt':>26}"
    )
    for scheme, row in summary.items():
        acc, f1 = row["accuracy"], row["macro_f1"]
        vs = row.get("accuracy_vs_centralised")
        diff = (
            f"{100 * vs['diff']['mean']:+.2f} ({100 * vs['diff']['low']:+.2f}.."
            f"{100 * vs['diff']['high']:+.2f})"
            if vs
            else ""
        )
        print(
            f"{scheme:<12} {100 * acc['mean']:>8.2f} ({100 * acc['low']:.2f}-{100 * acc['high']:.2f})"
            f" {100 * f1['mean']:>10.2f} {diff:>26}"
        )
    write_json(
        args.out,
        {
            "dataset": str(args.dataset),
            "config": {k: str(v) for k, v in vars(args).items()},
            "scores": scores,
            "summary": summary,
            "environment": environment(),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
