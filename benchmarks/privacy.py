"""Leakage at every cut of the CNN on the nDPI 8-protocol set and USTC-TFC2016, with defences.

    python benchmarks/privacy.py --out bench-results/privacy.json \\
        [--datasets ndpi8,ustc] [--data-dir /tmp/flowsplit-privacy] [--train-limit 1000] ...

For each dataset (the ``bytes`` view, the CNN): ``flowsplit.privacy.run_study`` trains
the model centrally on a seeded subsample of the ``train`` split, then at every cut
an attacker holding the ``val`` rows (the auxiliary data) inverts the activations
and probes them, scored on ``test`` rows; each defence (NoPeek, calibrated noise,
quantisation) is trained with the defence in place and attacked the same way. The
datasets are prepared once into ``--data-dir`` (never into the repository) from
``../shared/data``: nDPI with the README's 8-protocol options, USTC-TFC2016 from its
IDX files. Subsampling (``--train-limit``, ``--aux-limit``, ``--eval-limit``) keeps
the run to minutes on a loaded 2-core machine; the figures are for those sizes.

JSON: ``{"environment": ..., "config": ..., "datasets": {NAME: {"cuts": {"1":
{"bytes_recovered", "ascii_recovered", "dcor", "label_probe_acc", "grad_label_acc",
"accuracy", ...}, ...}, "defences": {KIND: {"params", "cuts": {...}}}, "reference":
{...}, "prior": {...}, "accuracy": ...}}}``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _common import NDPI8_OPTIONS, SHARED, environment, single_thread, write_json

from flowsplit.privacy.attack import AttackConfig
from flowsplit.privacy.defences import parse_defences
from flowsplit.privacy.study import PrivacyConfig, run_study

PREPARE = {
    "ndpi8": [str(SHARED / "ndpi" / "pcap"), *NDPI8_OPTIONS],
    "ustc": [str(SHARED / "ustc-tfc2016")],
}
MEASURES = ("bytes_recovered", "ascii_recovered", "dcor", "label_probe_acc", "grad_label_acc")


def _prepare(name: str, data_dir: Path) -> Path:
    out = data_dir / name
    if (out / "manifest.json").is_file():
        return out
    if name not in PREPARE:
        raise SystemExit(
            f"privacy: no recipe to prepare {name!r}; choose from {', '.join(PREPARE)}"
        )
    if not Path(PREPARE[name][0]).exists():
        raise SystemExit(f"privacy: {PREPARE[name][0]} is absent; cannot prepare {name}")
    cmd = [sys.executable, "-m", "flowsplit", "prepare", *PREPARE[name], "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"privacy: preparing {name} failed: {done.stderr.strip()[-400:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench-results/privacy.json"))
    p.add_argument("--datasets", default="ndpi8,ustc", help="comma list (ndpi8, ustc)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path("/tmp/flowsplit-privacy"),
        help="prepared datasets live (or are prepared) here",
    )
    p.add_argument("--model", default="cnn")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=800)
    p.add_argument("--aux-limit", type=int, default=250)
    p.add_argument("--eval-limit", type=int, default=250)
    p.add_argument("--attack-epochs", type=int, default=10)
    p.add_argument("--defences", default="nopeek:0.5,noise:0.5,quant:2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    single_thread()

    config = PrivacyConfig(
        model=args.model,
        view="bytes",
        epochs=args.epochs,
        train_limit=args.train_limit,
        aux_limit=args.aux_limit,
        eval_limit=args.eval_limit,
        attack=AttackConfig(epochs=args.attack_epochs, seed=args.seed),
        defences=parse_defences(args.defences),
        seed=args.seed,
    )
    results: dict = {}
    t0 = time.perf_counter()
    doc = {
        "benchmark": "privacy",
        "environment": environment(note="timings on a shared, loaded machine"),
        "config": config.to_dict(),
        "subsampling": {
            "train_limit": args.train_limit,
            "aux_limit": args.aux_limit,
            "eval_limit": args.eval_limit,
        },
        "datasets": results,
        "complete": False,
    }

    def save(name: str | None = None, partial: dict | None = None) -> None:
        # Written after every measured cut, so a run stopped early keeps what it has.
        if name is not None:
            results[name] = partial
        doc["total_s"] = time.perf_counter() - t0
        write_json(args.out, doc)

    for name in [n.strip() for n in args.datasets.split(",") if n.strip()]:
        path = _prepare(name, args.data_dir)
        print(f"privacy: {name} ({path})", file=sys.stderr, flush=True)
        run_study(
            path,
            config,
            progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True),
            checkpoint=lambda partial, name=name: save(name, partial),
        )
    doc["complete"] = True
    save()
    for name, res in results.items():
        print(f"{name}: accuracy {res['accuracy']:.3f}, prior {res['prior']}")
        rows = [("none", res["cuts"])] + [(k, v["cuts"]) for k, v in res["defences"].items()]
        for label, cuts in rows:
            for k, rec in cuts.items():
                vals = "  ".join(f"{m} {rec[m]:.3f}" for m in ("accuracy", *MEASURES) if m in rec)
                print(f"  {label:<7} cut {k}: {vals}")
        if "reference" in res:
            print(
                f"  after the input stem: bytes_recovered {res['reference']['bytes_recovered']:.3f}"
            )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
