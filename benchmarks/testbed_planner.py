"""The planner's gains measured on the emulated testbed, beside the predicted ones.

    sudo python benchmarks/testbed_planner.py --out bench-results/testbed_planner.json

On the heterogeneous testbed topology of ``testbed_sfl.py`` (8 clients of 0.05-0.2
cores, 2 aggregators, client links 8-60 Mbit/s): ``flowsplit testbed compare`` (the
module :mod:`flowsplit.testbed.compare` does the work): the roles probe the testbed,
the planner plans on the probe (``acc-aware``, ``delay``; HSFL at its fixed cuts with a
random assignment, ``hsfl``, and with the greedy one, ``hsfl-greedy``) for every seed,
every plan runs for real (``sfl run --plan PLAN --mode dist --probe``), and measured
delay and bytes are compared with HSFL's and hsfl-greedy's, paired by seed (mean
relative difference, 95 % t interval), beside the predicted differences (the planner's
closed-form delay; the replay of the run's own messages). With the truth (default) the
accuracy-aware plan is also made from the true topology and run (``probe_vs_truth``).
Needs root. The machine may be shared with other work (noted in the JSON).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import testbed_sfl as tbs  # noqa: E402

from flowsplit.config_args import parse_model_option  # noqa: E402
from flowsplit.federated.system.topology import write_topology  # noqa: E402
from flowsplit.testbed import missing_requirement  # noqa: E402
from flowsplit.testbed.compare import (  # noqa: E402
    CompareOptions,
    compare_on_testbed,
    gains_lines,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dataset", default=None)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--train-limit", type=int, default=384)
    p.add_argument("--run-timeout", type=float, default=240.0)
    p.add_argument("--no-truth", action="store_true", help="skip the plan from the truth")
    p.add_argument("--pilots", type=int, default=3, help="pilot cut pairs of the planner")
    p.add_argument("--pilot-steps", type=int, default=24, help="optimiser steps per pilot")
    p.add_argument("--keep", default=None)
    args = p.parse_args(argv)
    why = missing_requirement()
    if why:
        print(f"testbed_planner: {why}", file=sys.stderr)
        return 2
    _common.single_thread()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="testbed-planner-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.dataset is None:
            args.dataset = str(work / "demo")
            if not Path(args.dataset).is_dir():
                subprocess.run([sys.executable, "-m", "flowsplit", "prepare", str(
                    _common.ROOT / "demo" / "captures"), "-o", args.dataset, "--quiet"],
                    check=True)  # fmt: skip
        truth_file = work / "truth.toml"
        write_topology(tbs.make_topology("heterogeneous"), truth_file)
        opts = CompareOptions(
            seeds=tuple(seeds),
            model="cnn",
            model_options=[parse_model_option(o) for o in tbs.MODEL_OPTIONS],
            rounds=args.rounds,
            batch_size=args.batch_size,
            train_limit=args.train_limit,
            n_pilots=args.pilots,
            pilot_steps=args.pilot_steps,
            truth=not args.no_truth,
            cpu_budget=1.6,
            max_cpu=0.3,
            timeout_s=args.run_timeout,
        )
        doc = compare_on_testbed(
            truth_file, args.dataset, work, opts, log=lambda msg: print(msg, flush=True)
        )
    doc = {
        "benchmark": "testbed_planner",
        "environment": _common.environment(
            note="2-core machine shared with other engineers; testbed quotas 1.5 cores"
        ),
        **doc,
        "topology": "heterogeneous (testbed_sfl.make_topology), planned on its probe",
    }
    _common.write_json(args.out, doc)
    for line in gains_lines(doc):
        print(line)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
