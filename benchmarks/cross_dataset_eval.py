"""``flowsplit evaluate`` across datasets on the nDPI test captures (issue 13, item 3).

    python benchmarks/cross_dataset_eval.py --ndpi ../shared/data/ndpi --out bench-results/cross_eval.json

The captures are nDPI's own test suite (https://github.com/ntop/nDPI,
``tests/cfgs/default/pcap``; the flow labels come from its expected results in
``tests/cfgs/default/result``, as ``ndpi_flow_labels.csv``); ``--ndpi`` is a folder
holding ``pcap/`` and that CSV.

1. ``prepare`` the 8-protocol set of the README (``--top-classes 8``) and the same with
   ``--top-classes 9`` (a ninth class the model never sees);
2. train XGBoost on the 8-protocol set (its train split; val selects the round);
3. build two held-out datasets from the captures the model neither trained nor
   validated on (the 8-protocol set's test captures, split by file): a **subset**
   (5 of the 8 classes) and a **superset** (all 9 classes);
4. ``evaluate --split all`` on each: the subset is scored on its 5 classes with the 3
   others marked absent; the superset is scored on the 8 shared classes and its ninth
   class is counted, named and shown with what the model called it.

The JSON holds the three ``evaluate`` outputs (``trained_test``, ``subset``,
``superset``) and the class lists.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import NDPI_SELECTION

SUBSET = ("DNS", "HTTP", "QUIC", "STUN", "TLS")
PREPARE = [*NDPI_SELECTION, "--quiet"]


def flowsplit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "flowsplit", *args], check=True)


def held_out(ds, seen_sources: set, keep: list[str], out: Path) -> Path:
    """The flows of ``ds`` from captures outside ``seen_sources`` whose class is in ``keep``."""
    from flowsplit.data.store import write_dataset

    m = ds.meta
    rows = np.flatnonzero(~m["source"].isin(seen_sources).to_numpy() & m["label_name"].isin(keep))
    meta = m.iloc[rows].reset_index(drop=True).copy()
    classes = [c for c in ds.classes if c in keep]
    meta["label"] = [classes.index(c) for c in meta["label_name"]]
    meta["split"] = "test"
    views = {v: np.asarray(ds.view(v)[rows]) for v in ds.views if v != "stats"}
    stats = ds.stats_frame().iloc[rows].reset_index(drop=True)
    return write_dataset(out, meta=meta, classes=classes, views=views, stats=stats)


def evaluate(run: Path, data: Path, split: str, work: Path) -> dict:
    out = work / f"eval-{data.name}.json"
    flowsplit("evaluate", str(run), str(data), "--split", split, "--out", str(out))
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ndpi", type=Path, required=True, help="folder with pcap/ and the labels")
    p.add_argument("--out", type=Path, required=True, help="JSON to write")
    p.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    args = p.parse_args(argv)
    from flowsplit.data.store import load_dataset

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        labels = str(args.ndpi / "ndpi_flow_labels.csv")
        for k in (8, 9):
            flowsplit(
                "prepare",
                str(args.ndpi / "pcap"),
                "-o",
                str(work / f"ndpi{k}"),
                "--labels",
                labels,
                "--top-classes",
                str(k),
                *PREPARE,
            )
        run = work / "run-xgb"
        flowsplit(
            "train",
            str(work / "ndpi8"),
            "--model",
            "xgboost",
            "--threads",
            "1",
            "-q",
            "-o",
            str(run),
        )
        base, nine = load_dataset(work / "ndpi8"), load_dataset(work / "ndpi9")
        seen = set(base.meta.loc[base.meta["split"] != "test", "source"])
        subset = held_out(base, seen, list(SUBSET), work / "ndpi-subset5")
        superset = held_out(nine, seen, nine.classes, work / "ndpi-superset9")
        result = {
            "model_classes": base.classes,
            "trained_test": evaluate(run, work / "ndpi8", "test", work),
            "subset": evaluate(run, subset, "all", work),
            "superset": evaluate(run, superset, "all", work),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name in ("trained_test", "subset", "superset"):
        r = result[name]
        print(
            f"{name:<13} scored {r['n_scored']}/{r['n']}: accuracy {r['accuracy']:.4f}, "
            f"macro-F1 {r['macro_f1']:.4f}; absent {r['absent_classes']}, "
            f"unseen {r['unseen_classes']} -> {r['unseen_predicted_as']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
