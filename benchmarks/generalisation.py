"""Cross-source, temporal and open-set results, the shortcut ablation (issue 32).

    python benchmarks/generalisation.py --out bench-results/generalisation.json \\
        --foreign-archives DIR [--foreign-extra DIR] [--work DIR] [--models cnn,lstm,...] \\
        [--epochs N] [--model-epochs cnn=15] [--steps-per-epoch S] [--seeds 0] \\
        [--augment default] [--class-weight balanced] \\
        [--ablate --plots DIR] \\
        [--ustc-models cnn,transformer] [--temporal-models cnn,xgboost] \\
        [--ustc-split-models cnn,transformer --ustc-train-fractions 0.25,0.5]

1. **Cross-source.** Every model trains on the nDPI 8-protocol set (the README's
   ``NDPI8_OPTIONS``: nDPI's own labels, split by capture file) and is scored on
   *foreign* captures: the test captures of tcpdump, Wireshark, libpcap, dpkt and nDPI
   4.2 (those of nDPI 4.2 whose file name is also in the shared nDPI corpus left out:
   older copies of the same traffic; gzip-compressed ones decompressed), and those of
   every ``--foreign-extra`` folder (``scripts/generated_captures.py``'s MDNS, STUN and
   QUIC traffic made on this machine), labelled independently by nDPI through NFStream
   (``prepare --label-by ndpi``), restricted to the classes both sets share with at
   least ``--min-flows`` flows in the foreign set. ``own_macro_f1`` is the run's own
   test macro-F1 (8 classes); ``own_macro_f1_overlap`` its mean F1 over the shared
   classes only; ``cross_macro_f1`` the mean F1 over the same classes on the foreign
   flows (a foreign flow called one of the other classes counts as an error);
   ``drop`` = ``own_macro_f1_overlap - cross_macro_f1``. The same with the
   label-ambiguous flows set apart (legacy-unicast mDNS: MDNS with one end on port 5353,
   a DNS message once ports are masked): ``cross_macro_f1_unambiguous``,
   ``drop_unambiguous``. ``models[M]`` holds the means over seeds (``sd`` the
   standard deviations) and ``runs`` the rows per seed; each row's
   ``open_set.errors_by_capture`` the wrong flows grouped by capture, true and predicted
   class. ``--class-weight balanced`` also trains every neural model as ``M+bal``
   (``train --class-weight balanced``, the neural models' default now); the plain ``M``
   rows are trained with ``--class-weight none``. ``--model-epochs cnn=15`` gives one
   model other epochs.
2. **Temporal.** The same 8-protocol flows split by time (``--split-by time``: the
   earliest 70 % of flows train, the latest 15 % test) against the split by file.
3. **Open set.** The foreign flows of classes the model never saw (DHCPv6, BGP, ...)
   against those of the shared classes: AUROC of the model's top probability, and the
   accuracy/coverage of ``predict --min-confidence P`` for a range of P.
4. **Ablation** (``--ablate``): ``evaluate --ablate`` of every run on its own test
   split, one picture per model in ``--plots``.
5. **USTC-TFC2016** (``--ustc-models``): the 20-class byte sessions, split by flow as
   the README does; own test scores (and the ablation with ``--ablate``).
6. **Pre-training** (``--pretrain-steps N``): the transformer also as ``transformer+pre``,
   its encoder first trained by masked byte modelling (``flowsplit pretrain``, seed 0,
   once per source): for the cross-source part on the shared nDPI captures that hold no
   validation or test flow of the 8-protocol set (every class, labels unused), for
   USTC-TFC2016 on its training split's bytes.
7. **ip layout** (``--ip-models``): the 8-protocol set prepared with ``--pkt-layout ip``
   (the per-session header fields kept), each model trained on it and ablated.
8. **USTC-TFC2016 by split** (``--ustc-split-models``): the README's split against a
   random split of every row (``prepare --no-dedup``, the published works' kind): the
   test rows' copies among the training rows (first K bytes, nearest row, 1-NN), each
   model under both with its accuracy on the test rows with and without a near-copy;
   ``--ustc-train-fractions 0.25,0.5`` adds the CNN on parts of the training rows.

Runs already in ``--work``/runs (a ``metrics.json``) are reused, not trained again;
each row records the settings its run was trained with (its ``config.json``).

The foreign captures come from Debian source packages, fetched with Debian's own
client (no deb-src entry is needed in the system's sources):

    mkdir -p /tmp/aptsrc/lists/partial /tmp/aptsrc/parts DIR && cd DIR
    printf 'Types: deb-src\\nURIs: http://deb.debian.org/debian\\nSuites: bookworm\\n'\\
'Components: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \\
        > /tmp/aptsrc/parts/src.sources
    A="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/tmp/aptsrc/parts \\
       -o Dir::State::Lists=/tmp/aptsrc/lists"
    apt-get $A update && for p in tcpdump wireshark ndpi libpcap python-dpkt; do
        apt-get $A source --download-only $p; done

``--foreign-archives DIR`` then reads the ``*.orig.tar.*`` files there (checked against
the SHA-256 digests ``scripts/foreign_captures.py`` pins); ``--foreign DIR`` takes an
already assembled folder of captures instead. ``--foreign-extra DIR`` (repeatable) adds
the captures of DIR, e.g. ``sudo python3 scripts/generated_captures.py --out DIR
--python VENV/bin/python`` (see its docstring); the JSON gives the flows per class
of every origin (``flows_per_class_by_origin``: the part of a file name before ``__``). Labelling needs NFStream
(``pip install 'flowsplit[dpi]'``).

Everything runs in this process with one thread (the machine may be shared: timings
are not the point here). The JSON holds every figure with the settings that made it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from _common import NDPI8_OPTIONS, NDPI_SELECTION, ROOT, SHARED, environment, single_thread

single_thread()

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from flowsplit.cli import main as cli_main  # noqa: E402
from flowsplit.train.crosssource import (  # noqa: E402
    legacy_unicast_mdns,
    mean_f1,
    nearest_rows,
    open_set_scores,
    prefix_copies,
    shared_classes,
)

NEURAL = ("cnn", "lstm", "convlstm", "convgru", "transformer")


def flowsplit(*argv) -> None:
    rc = cli_main([str(a) for a in argv])
    if rc:
        raise SystemExit(f"flowsplit {' '.join(map(str, argv[:3]))} ... failed ({rc})")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- datasets -----------------------------------------------------------------------
def prepare_ndpi(out: Path, split_by: str = "file") -> Path:
    if not (out / "manifest.json").exists():
        log(f"prepare {out.name}")
        flowsplit(
            "prepare",
            SHARED / "ndpi" / "pcap",
            "-o",
            out,
            *NDPI8_OPTIONS,
            "--split-by",
            split_by,
            "--quiet",
        )
    return out


def foreign_module():
    """``scripts/foreign_captures.py`` as a module."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import foreign_captures

    return foreign_captures


def foreign_captures(archives: Path, work: Path) -> Path:
    """The foreign captures (as ``scripts/foreign_captures.py`` assembles them) minus
    nDPI 4.2's older copies of the shared corpus's files, as links in ``work/xsrc``."""
    found = {}
    for project, path, digest in foreign_module().SOURCES:
        name = Path(path).name
        p = archives / name
        if not p.exists():
            raise SystemExit(f"error: {p} missing (see the docstring: apt-get source)")
        from flowsplit.data.store import file_digest

        if file_digest(p, "sha256") != digest:
            raise SystemExit(f"error: {p}: SHA-256 differs from the pinned one")
        found[project] = p
    paths = foreign_module().unseen_captures(found, work, SHARED)
    shared_names = {p.name for p in (SHARED / "ndpi" / "pcap").iterdir()}
    xsrc = work / "xsrc"
    xsrc.mkdir(parents=True, exist_ok=True)
    for p in paths:
        if p.name.startswith("ndpi__") and p.name[len("ndpi__") :] in shared_names:
            continue
        link = xsrc / p.name
        if not link.exists():
            link.symlink_to(p)
    return xsrc


def with_extra(captures: Path, extra: list[Path], out: Path) -> Path:
    """``captures`` and the capture files of every ``extra`` folder, as links in ``out``
    (the extra files named ``FOLDER__NAME`` unless their name has a ``__`` already)."""
    out.mkdir(parents=True, exist_ok=True)
    files = [p for p in Path(captures).iterdir() if p.is_file()]
    for d in extra:
        if not d.is_dir():
            raise SystemExit(f"error: --foreign-extra {d}: not a folder")
        files += [p for p in sorted(d.iterdir()) if p.suffix in (".pcap", ".pcapng", ".cap")]
    for p in files:
        name = p.name if "__" in p.name else f"{p.parent.name}__{p.name}"
        link = out / name
        if not link.exists():
            link.symlink_to(p.resolve())
    return out


def origin(source: str) -> str:
    """The project a foreign capture came from: its name's part before ``__``."""
    name = Path(str(source)).name
    return name.split("__", 1)[0] if "__" in name else "other"


def flows_per_class_by_origin(ds, classes: list[str]) -> dict[str, dict[str, int]]:
    """Flows of each of ``classes`` per origin of the capture (tcpdump, wireshark, ...)."""
    m = ds.meta[ds.meta["label_name"].isin(classes)]
    out: dict[str, dict[str, int]] = {}
    for (src, cls), n in m.groupby([m["source"].map(origin), "label_name"]).size().items():
        out.setdefault(cls, {})[src] = int(n)
    return out


def prepare_foreign(captures: Path, out: Path) -> Path:
    if not (out / "manifest.json").exists():
        log(f"prepare {out.name} (nDPI labels through NFStream)")
        selection = [a for a in NDPI_SELECTION if a not in ("--label-column", "master")]
        i = selection.index("--min-groups-per-class")
        del selection[i : i + 2]  # every class of the foreign set: the open-set part needs them
        flowsplit(
            "prepare", captures, "-o", out, "--label-by", "ndpi", "--ndpi-field", "master",
            *selection, "--quiet",
        )  # fmt: skip
    return out


def restrict(ds, keep_classes: list[str], out: Path, rows=None) -> Path:
    """The flows of ``ds`` (``rows``, default all) whose class is in ``keep_classes``,
    as one test split."""
    from flowsplit.data.store import load_dataset, write_dataset

    m = ds.meta
    mask = m["label_name"].isin(keep_classes).to_numpy().copy()
    if rows is not None:
        sel = np.zeros(len(m), dtype=bool)
        sel[rows] = True
        mask &= sel
    if (out / "manifest.json").exists():  # made by an earlier pass: the same flows?
        done = load_dataset(out)
        if sorted(done.classes) == sorted(keep_classes) and done.n_flows == int(mask.sum()):
            return out
        raise SystemExit(f"error: {out} holds another restriction; remove it")
    idx = np.flatnonzero(mask)
    meta = m.iloc[idx].reset_index(drop=True).copy()
    classes = [c for c in ds.classes if c in keep_classes]
    meta["label"] = [classes.index(c) for c in meta["label_name"]]
    meta["split"] = "test"
    views = {v: np.asarray(ds.view(v)[idx]) for v in ds.views if v != "stats"}
    stats = ds.stats_frame().iloc[idx].reset_index(drop=True)
    return write_dataset(out, meta=meta, classes=classes, views=views, stats=stats)


# --- runs ----------------------------------------------------------------------------
def train(
    ds: Path,
    model: str,
    run: Path,
    args,
    *,
    seed: int,
    augment: str = "none",
    class_weight: str = "none",
    init_from: Path | None = None,
    extra: tuple[str, ...] = (),
) -> Path | None:
    if (run / "metrics.json").exists():
        return run
    if args.collect_only:
        log(f"{run.name}: not trained (--collect-only), left out")
        return None
    log(
        f"train {model} seed {seed} augment {augment} class weight {class_weight} "
        f"on {ds.name} -> {run.name}"
    )
    argv = ["train", ds, "-m", model, "-o", run, "--seed", seed, "--threads", 1, "-q"]
    argv += ["--overwrite"] if run.exists() else []
    argv += ["--init-from", init_from] if init_from else []
    if model != "xgboost":
        argv += ["--epochs", args.model_epochs.get(model, args.epochs), "--augment", augment]
        argv += ["--class-weight", class_weight]
        if args.steps_per_epoch:
            argv += ["--steps-per-epoch", args.steps_per_epoch]
        if args.patience is not None:
            argv += ["--patience", args.patience]
        argv += list(extra)  # a --ustc-variant's options (given last: they win)
    t = time.perf_counter()
    flowsplit(*argv)
    (run / "bench_wall_s.txt").write_text(f"{time.perf_counter() - t:.1f}\n")
    return run


def run_settings(run: Path) -> dict:
    """What the run was trained with (its config.json), for the JSON."""
    cfg = json.loads((run / "config.json").read_text())["train"]
    keep = (
        "epochs",
        "steps_per_epoch",
        "patience",
        "batch_size",
        "lr",
        "augment",
        "class_weight",
        "init_from",
        "label_smoothing",
        "weight_decay",
        "lr_schedule",
        "model_options",
    )
    return {k: cfg.get(k) for k in keep} | {"view": run_view(run)}


def run_view(run: Path) -> str | None:
    return json.loads((run / "config.json").read_text()).get("model", {}).get("view")


def pretrained(work: Path, name: str, rows_fn, args, res: dict) -> Path:
    """``flowsplit pretrain``'s encoder for one source (made once, seed 0)."""
    from flowsplit.train.pretrain import pretrain

    out = work / f"pretrain-{name}"
    if not (out / "encoder.pt").exists():
        rows, view = rows_fn()
        log(f"pretrain on {name}: {len(rows)} flows, {args.pretrain_steps} steps")
        pretrain(rows, view, out, steps=args.pretrain_steps, seed=0, log=log)
    info = json.loads((out / "pretrain.json").read_text())
    res.setdefault("pretrain", {})[name] = {k: v for k, v in info.items() if k != "options"}
    return out


def ndpi_pretrain_rows(ndpi8: Path):
    """The shared nDPI captures holding no validation or test flow of the 8-protocol set,
    read as it was prepared (every class; labels unused)."""
    from flowsplit.data.store import load_dataset
    from flowsplit.train.pretrain import load_rows

    m = load_dataset(ndpi8).meta
    held = set(m.loc[m["split"] != "train", "source"])
    root = SHARED / "ndpi" / "pcap"
    files = [str(p) for p in sorted(root.iterdir()) if p.is_file() and p.name not in held]
    return load_rows(files, like=str(ndpi8), view="pkt_bytes", split="train")


def evaluate(run: Path, ds: Path, split: str, out: Path, *extra) -> dict:
    made = max((run / "metrics.json").stat().st_mtime, (ds / "manifest.json").stat().st_mtime)
    if out.exists() and out.stat().st_mtime > made:
        return json.loads(out.read_text())  # this run's evaluation of this dataset, made before
    flowsplit("evaluate", run, ds, "--split", split, "-o", out, *extra)
    return json.loads(out.read_text())


def open_set(run: Path, foreign: Path, overlap: list[str] | None = None) -> dict:
    """Known (shared) against unknown (never trained) foreign classes, by confidence
    (:func:`flowsplit.train.crosssource.open_set_scores`); with ``overlap``, also the
    errors on the flows of those classes grouped by capture (``errors_by_capture``: one
    capture's many like flows, all right or all wrong, can move a class's F1 alone)."""
    from flowsplit.data.store import load_dataset
    from flowsplit.train.evaluation import ClassMapping, model_input
    from flowsplit.train.runs import load_trained_model, predict_proba

    model, doc = load_trained_model(run)
    ds = load_dataset(foreign)
    info = doc["model"]
    mapping = ClassMapping(list(info["classes"]), ds.classes)
    rows = np.arange(ds.n_flows)
    x = model_input(ds, info["view"], rows, doc["dataset"].get("view_columns"))
    proba = predict_proba(model, x)
    scores = open_set_scores(proba, mapping.to_model_labels(ds.labels))
    unseen = {
        c: int((ds.labels == i).sum()) for i, c in enumerate(ds.classes) if c in mapping.unseen
    }
    return {
        "n_known": scores["n_known"],
        "n_unknown": scores["n_unknown"],
        "unknown_classes": dict(sorted(unseen.items(), key=lambda kv: -kv[1])),
        "auroc_confidence": scores["auroc_confidence"],
        "curve": scores["curve"],
    } | (
        {"errors_by_capture": errors_by_capture(ds, proba, info["classes"], overlap)}
        if overlap
        else {}
    )


def errors_by_capture(ds, proba: np.ndarray, model_classes, overlap: list[str]) -> list[dict]:
    """The flows of the ``overlap`` classes called another class, grouped by (capture,
    true class, predicted class), the largest groups first (groups of 3 flows or more)."""
    true = np.asarray(ds.classes, dtype=object)[ds.labels]
    pred = np.asarray(model_classes, dtype=object)[proba.argmax(1)]
    wrong = np.isin(true, overlap) & (true != pred)
    groups: dict[tuple[str, str, str], int] = {}
    for key in zip(ds.meta["source"].astype(str)[wrong], true[wrong], pred[wrong], strict=True):
        groups[key] = groups.get(key, 0) + 1
    rows = [
        {"capture": c, "label": t, "predicted": p, "flows": n}
        for (c, t, p), n in sorted(groups.items(), key=lambda kv: -kv[1])
        if n >= 3
    ]
    return rows


def flows_per_class(ds, split: str | None = None) -> dict[str, int]:
    m = ds.meta if split is None else ds.meta[ds.meta["split"] == split]
    return {str(k): int(v) for k, v in m["label_name"].value_counts().items()}


def files_per_class(ds) -> dict[str, int]:
    return {str(k): int(v) for k, v in ds.meta.groupby("label_name")["source"].nunique().items()}


# --- the parts -------------------------------------------------------------------------
def variants(args) -> list[tuple[str, str, str, str]]:
    """(name, model, augment, class_weight) of every model variant: the plain models, with
    ``--augment`` each neural one as ``M+aug``, with ``--class-weight balanced`` as ``M+bal``
    (the transformer pre-trained too: ``transformer+pre+bal``), with both as ``M+aug+bal``."""
    out = [] if args.no_plain else [(m, m, "none", "none") for m in args.models]
    if args.augment != "none":
        out += [(f"{m}+aug", m, args.augment, "none") for m in args.models if m in NEURAL]
    pre = args.pretrain_steps and "transformer" in args.models
    if pre and not args.no_plain:
        out.append(("transformer+pre", "transformer", "none", "none"))
    if args.class_weight != "none":
        cw = args.class_weight
        out += [(f"{m}+bal", m, "none", cw) for m in args.models if m in NEURAL]
        if args.augment != "none":  # both: each neural model with both too
            out += [(f"{m}+aug+bal", m, args.augment, cw) for m in args.models if m in NEURAL]
        if pre:
            out.append(("transformer+pre+bal", "transformer", "none", cw))
    return out


def cross_source(args, work: Path, res: dict) -> None:
    from flowsplit.data.store import load_dataset

    ndpi8 = prepare_ndpi(work / "ndpi8")
    captures = args.foreign or foreign_captures(args.foreign_archives, work / "foreign-src")
    if args.foreign_extra:
        captures = with_extra(captures, args.foreign_extra, work / "foreign-all")
    foreign = prepare_foreign(captures, work / "foreign")
    base, fds = load_dataset(ndpi8), load_dataset(foreign)
    counts = flows_per_class(fds)
    overlap, too_few = shared_classes(base.classes, counts, args.min_flows)
    cross = restrict(fds, overlap, work / "foreign-overlap")
    ambiguous = legacy_unicast_mdns(fds.meta) & fds.meta["label_name"].isin(overlap).to_numpy()
    clear = None
    if ambiguous.any():  # the same set less the flows whose label only the port tells
        clear = restrict(
            fds, overlap, work / "foreign-overlap-unambiguous", rows=np.flatnonzero(~ambiguous)
        )
    key = "ndpi8->foreign"
    entry = res["sources"][key] = {
        "train": {
            "dataset": "nDPI 8-protocol set (split by capture file)",
            "flows_per_class": flows_per_class(base),
            "test_flows_per_class": flows_per_class(base, "test"),
            "files_per_class": files_per_class(base),
        },
        "test": {
            "dataset": "foreign captures (tcpdump, Wireshark, libpcap, dpkt, nDPI 4.2)"
            + (" and " + ", ".join(map(str, args.foreign_extra)) if args.foreign_extra else "")
            + ", nDPI labels",
            "captures": len(list(Path(captures).iterdir())),
            "flows": fds.n_flows,
            "flows_per_class": counts,
            "flows_per_class_by_origin": flows_per_class_by_origin(fds, base.classes),
            "files_per_class": files_per_class(fds),
        },
        "class_overlap": overlap,
        "shared_but_too_few": too_few,
        "label_ambiguous": {
            "rule": "labelled MDNS with exactly one end on port 5353 (legacy-unicast mDNS, "
            "RFC 6762 6.7): with ports masked a DNS message; set apart in the *_unambiguous "
            "figures, which score the same flows less these",
            "flows": int(ambiguous.sum()),
            "per_class": {
                str(k): int(v) for k, v in fds.meta[ambiguous]["label_name"].value_counts().items()
            },
        },
        "min_flows": args.min_flows,
        "models": {},
    }
    log(f"cross-source classes {overlap}; too few {too_few}")
    pre = None
    if any("+pre" in name for name, *_ in variants(args)):
        pre = pretrained(work, "ndpi8", lambda: ndpi_pretrain_rows(ndpi8), args, res)
    for seed in args.seeds:
        for name, model, augment, class_weight in variants(args):
            run = train(
                ndpi8,
                model,
                work / "runs" / f"ndpi8-{name}-s{seed}",
                args,
                seed=seed,
                augment=augment,
                class_weight=class_weight,
                init_from=pre if "+pre" in name else None,
            )
            if run is None:
                continue
            own = json.loads((run / "metrics.json").read_text())
            own_eval = evaluate(run, ndpi8, "test", run / "eval-own.json")
            ev = evaluate(run, cross, "all", run / "eval-cross.json")
            osr = open_set(run, foreign, overlap)
            row = {
                "seed": seed,
                "augment": augment,
                "class_weight": class_weight,
                "own_macro_f1": own["macro_f1"],
                "own_accuracy": own["accuracy"],
                "own_macro_f1_overlap": mean_f1(own_eval["per_class_f1"], overlap),
                "cross_macro_f1": mean_f1(ev["per_class_f1"], overlap),
                "cross_macro_f1_all_model_classes": ev["macro_f1"],
                "cross_accuracy": ev["accuracy"],
                "cross_per_class_f1": {c: ev["per_class_f1"].get(c) for c in overlap},
                "n_cross": ev["n_scored"],
                "evaluate_other_source": ev.get("other_source"),
                "open_set": osr,
                "epochs_run": len(own.get("loss_per_epoch") or []) or None,
                "train_settings": run_settings(run),
                "train_wall_s": float((run / "bench_wall_s.txt").read_text())
                if (run / "bench_wall_s.txt").exists()
                else None,
            }
            row["drop"] = row["own_macro_f1_overlap"] - row["cross_macro_f1"]
            if clear is not None:
                ev_c = evaluate(run, clear, "all", run / "eval-cross-unambiguous.json")
                row["cross_macro_f1_unambiguous"] = mean_f1(ev_c["per_class_f1"], overlap)
                row["cross_accuracy_unambiguous"] = ev_c["accuracy"]
                row["n_cross_unambiguous"] = ev_c["n_scored"]
                row["drop_unambiguous"] = (
                    row["own_macro_f1_overlap"] - row["cross_macro_f1_unambiguous"]
                )
            entry["models"].setdefault(name, {"runs": []})["runs"].append(row)
            log(
                f"{name} s{seed}: own {row['own_macro_f1']:.3f} (overlap "
                f"{row['own_macro_f1_overlap']:.3f}) cross {row['cross_macro_f1']:.3f} "
                f"acc {row['cross_accuracy']:.3f} drop {row['drop']:+.3f} "
                f"open-set AUROC {osr['auroc_confidence']}"
            )
            if args.ablate:
                png = args.plots / f"ablation-ndpi8-{name}-s{seed}.png"
                ab = evaluate(run, ndpi8, "test", run / "eval-ablate.json", "--ablate",
                              "--ablate-plot", png)  # fmt: skip
                res["ablation"].setdefault("ndpi8", {})[f"{name}-s{seed}"] = ab["ablations"]
            write(args, res)
    summarise(entry, res["goals"])


MEANS = (
    "own_macro_f1",
    "own_accuracy",
    "own_macro_f1_overlap",
    "cross_macro_f1",
    "cross_accuracy",
    "drop",
    "cross_macro_f1_unambiguous",
    "cross_accuracy_unambiguous",
    "drop_unambiguous",
)


def summarise(entry: dict, goals: dict) -> None:
    """Per model the means over its seeds (``models[M]``: ``own_macro_f1``,
    ``cross_macro_f1``, ``cross_accuracy``, ``n_cross``, ``drop``, ... and ``sd`` the
    standard deviations across seeds; its rows per seed in ``runs``), and the issue's
    goals for this source pair."""
    means = {}
    for name, model in entry["models"].items():
        rows = model["runs"]
        m = {k: float(np.mean([r[k] for r in rows])) for k in MEANS if k in rows[0]}
        m["sd"] = {
            k: float(np.std([r[k] for r in rows], ddof=1)) if len(rows) > 1 else None
            for k in MEANS
            if k in rows[0]
        }
        m["n_cross"] = rows[0]["n_cross"]
        if "n_cross_unambiguous" in rows[0]:
            m["n_cross_unambiguous"] = rows[0]["n_cross_unambiguous"]
        m["seeds"] = [r["seed"] for r in rows]
        au = [
            r["open_set"]["auroc_confidence"]
            for r in rows
            if r["open_set"]["auroc_confidence"] is not None
        ]
        m["open_set_auroc"] = float(np.mean(au)) if au else None
        means[name] = m
        entry["models"][name] = m | {"runs": rows}
    neural = {k: v for k, v in means.items() if k.split("+")[0] in NEURAL}
    xgb = means.get("xgboost", {}).get("cross_macro_f1")
    if means:
        best = max(means, key=lambda k: means[k]["cross_macro_f1"])
        goals["best_cross_macro_f1"] = {
            "model": best,
            "value": means[best]["cross_macro_f1"],
            "goal": 0.85,
        }
    goals["neural_drop_at_most_0.10"] = {k: v["drop"] for k, v in neural.items()}
    if any("drop_unambiguous" in v for v in neural.values()):
        goals["neural_drop_at_most_0.10_label_ambiguous_set_apart"] = {
            k: v.get("drop_unambiguous") for k, v in neural.items()
        }
    if xgb is not None:
        goals["neural_minus_xgboost_at_least_0.15"] = {
            k: v["cross_macro_f1"] - xgb for k, v in neural.items()
        }


def temporal(args, work: Path, res: dict) -> None:
    by_time = prepare_ndpi(work / "ndpi8-time", split_by="time")
    by_file = work / "ndpi8"
    from flowsplit.data.store import load_dataset

    t = load_dataset(by_time)
    res["temporal"]["ndpi8 by file -> by time"] = entry = {
        "split": "flows ordered by start time: earliest 70 % train, next 15 % val, latest 15 % test",
        "train_flows_per_class": flows_per_class(t, "train"),
        "test_flows_per_class": flows_per_class(t, "test"),
        "models": {},
    }
    for seed in args.seeds:
        for model in args.temporal_models:
            run_t = train(
                by_time, model, work / "runs" / f"ndpi8time-{model}-s{seed}", args, seed=seed
            )
            if run_t is None:
                continue
            run_f = work / "runs" / f"ndpi8-{model}-s{seed}"
            if train(by_file, model, run_f, args, seed=seed) is None:
                continue
            mt = json.loads((run_t / "metrics.json").read_text())
            mf = json.loads((run_f / "metrics.json").read_text())
            row = {
                "seed": seed,
                "file_split_macro_f1": mf["macro_f1"],
                "time_split_macro_f1": mt["macro_f1"],
                "time_split_accuracy": mt["accuracy"],
                "drop": mf["macro_f1"] - mt["macro_f1"],
                "n_test": int(sum(entry["test_flows_per_class"].values())),
            }
            entry["models"].setdefault(model, []).append(row)
            log(
                f"temporal {model} s{seed}: file {row['file_split_macro_f1']:.3f} time {row['time_split_macro_f1']:.3f}"
            )
            write(args, res)


def ustc_variants(args) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
    """(name, model, augment, class_weight, extra train options) of the USTC-TFC2016 runs:
    :func:`variants` of ``--ustc-models`` (``M``, ``M+bal``, ``transformer+pre+bal``, ...)
    and, for each ``--ustc-variant TAG=OPTIONS``, every neural one again as ``NAME+TAG``
    trained with those options too."""
    from types import SimpleNamespace

    base = variants(SimpleNamespace(**{**vars(args), "models": args.ustc_models}))
    out = [(*v, ()) for v in base]
    for tag, extra in args.ustc_variant:
        out += [(f"{n}+{tag}", m, a, cw, extra) for n, m, a, cw in base if m in NEURAL]
    return out


def ensemble_scores(runs: list[Path], ds: Path) -> dict:
    """Accuracy and macro-F1 on ``ds``'s test split of the average of the runs' softmax
    outputs (an ensemble of models, not a single model), with each member's own scores."""
    from flowsplit.train.evaluation import evaluate_run
    from flowsplit.train.metrics import macro_f1
    from flowsplit.train.runs import predict_proba

    probs, members, y = [], [], None
    for run in runs:
        ev = evaluate_run(run, ds, "test")
        p = predict_proba(ev.model, ev.x)
        y_run = ev.mapping.to_model_labels(ev.y)
        if y is not None and not np.array_equal(y, y_run):
            raise SystemExit(f"error: {run}: another test split or class order than {runs[0]}")
        y = y_run
        probs.append(p)
        members.append({"run": run.name, "accuracy": float((p.argmax(1) == y).mean())})
    pred = np.mean(probs, axis=0).argmax(1)
    return {
        "members": members,
        "n_test": int(len(y)),
        "accuracy": float((pred == y).mean()),
        "macro_f1": float(macro_f1(y, pred, probs[0].shape[1])),
        "note": "average of the members' softmax outputs: an ensemble, not a single model",
    }


def ustc(args, work: Path, res: dict) -> None:
    ds = work / "ustc"
    if not (ds / "manifest.json").exists():
        log("prepare ustc")
        flowsplit("prepare", SHARED / "ustc-tfc2016", "-o", ds, "--quiet")
    entry = res["ustc"] = res.get("ustc") or {"models": {}}
    pre = None
    runs_of: dict[str, list[Path]] = {}
    todo = ustc_variants(args)
    if any("+pre" in name for name, *_ in todo):
        from flowsplit.train.pretrain import load_rows

        pre = pretrained(
            work, "ustc", lambda: load_rows([str(ds)], like=None, view=None, split="train"),
            args, res,
        )  # fmt: skip
    for seed in args.seeds:
        for name, model, augment, class_weight, extra in todo:
            run = train(
                ds, model, work / "runs" / f"ustc-{name}-s{seed}", args, seed=seed,
                augment=augment, class_weight=class_weight,
                init_from=pre if "+pre" in name else None, extra=extra,
            )  # fmt: skip
            if run is None:
                continue
            runs_of.setdefault(name, []).append(run)
            m = json.loads((run / "metrics.json").read_text())
            n_params = None
            if model != "xgboost":
                from flowsplit.train.runs import load_trained_model

                net, _ = load_trained_model(run)
                n_params = int(sum(p.numel() for p in net.parameters()))
            val = m.get("val_macro_f1_per_epoch") or []
            row = {"seed": seed, "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                   "params": n_params, "epochs_run": len(m.get("loss_per_epoch") or []) or None,
                   "best_epoch": int(np.argmax(val)) + 1 if val else None,
                   "wall_s": bench_wall(run), "train_settings": run_settings(run)}  # fmt: skip
            entry["models"].setdefault(name, []).append(row)
            log(f"ustc {name} s{seed}: accuracy {m['accuracy']:.4f} macro-F1 {m['macro_f1']:.4f}")
            if args.ablate and model != "xgboost":  # the IDX set's stats fit no ablation group
                png = args.plots / f"ablation-ustc-{name}-s{seed}.png"
                ab = evaluate(
                    run, ds, "test", run / "eval-ablate.json", "--ablate", "--ablate-plot", png
                )
                res["ablation"].setdefault("ustc", {})[f"{name}-s{seed}"] = ab["ablations"]
            write(args, res)
    entry["mean_over_seeds"] = {
        name: {
            "accuracy": float(np.mean([r["accuracy"] for r in rows])),
            "accuracy_sd": float(np.std([r["accuracy"] for r in rows], ddof=1))
            if len(rows) > 1
            else None,
            "macro_f1": float(np.mean([r["macro_f1"] for r in rows])),
            "macro_f1_sd": float(np.std([r["macro_f1"] for r in rows], ddof=1))
            if len(rows) > 1
            else None,
            "seeds": len(rows),
        }
        for name, rows in entry["models"].items()
    }
    # The seeds' models of each variant together: a reported figure, not a single model.
    entry["ensemble_of_seeds"] = {
        name: ensemble_scores(runs, ds)
        for name, runs in runs_of.items()
        if len(runs) > 1 and not name.startswith("xgboost")
    }
    for name, e in entry["ensemble_of_seeds"].items():
        log(f"ustc ensemble of {name}'s {len(e['members'])} seeds: accuracy {e['accuracy']:.4f}")
    res["goals"]["ustc_accuracy_at_least_0.978"] = {
        name: v["accuracy"] for name, v in entry["mean_over_seeds"].items()
    }


def bench_wall(run: Path) -> float | None:
    """Seconds the benchmark (or the same command run by hand) took to train ``run``."""
    f = run / "bench_wall_s.txt"
    return float(f.read_text()) if f.exists() else None


NEAR_BYTES = 16
"""A test row with a training row at most this many bytes (of 784) different is a
near-copy of it."""


def ustc_split_study(args, work: Path, res: dict) -> None:
    """USTC-TFC2016 under the README's split and the published works' kind of split:
    what the test rows share with the training rows under each (copies of their first K
    bytes, the nearest training row's distance, a 1-nearest-neighbour classifier), and
    the models trained under each, with their accuracy on the test rows that have a
    near-copy among the training rows and on the others. ``--ustc-train-fractions``
    adds the README's split with only part of its training rows (val and test
    unchanged), to see how the score grows with the training set."""
    from flowsplit.data.store import load_dataset, write_dataset
    from flowsplit.train.metrics import classification_summary

    splits = {
        "ustc": (
            "the README's: rows identical to an earlier one dropped (prepare's default, "
            "400), the rest split at random 70/15/15 (seed 0)",
            [],
        ),
        "ustc-nodedup": (
            "every row kept (--no-dedup), split at random 70/15/15 (seed 0): the published "
            "works' kind (DeepTraffic's 2_ProcessSession.ps1 tests a random 10 % of each "
            "class's sessions after dropping identical session files, not identical 784-byte "
            "rows)",
            ["--no-dedup"],
        ),
    }
    for name, (_, extra) in splits.items():
        if not (work / name / "manifest.json").exists():
            log(f"prepare {name}")
            flowsplit("prepare", SHARED / "ustc-tfc2016", "-o", work / name, *extra, "--quiet")
    for frac in args.ustc_train_fractions:
        name = f"ustc-train{round(frac * 100)}"
        splits[name] = (f"the README's split with {frac:.0%} of its training rows "
                        "(stratified draw, seed 0; val and test unchanged)", [])  # fmt: skip
        if not (work / name / "manifest.json").exists():
            base = load_dataset(work / "ustc")
            m = base.meta
            rng = np.random.default_rng(0)
            keep = np.ones(len(m), dtype=bool)
            for _, idx in m[m["split"] == "train"].groupby("label").indices.items():
                rows = m.index[m["split"] == "train"].to_numpy()[idx]
                drop = rng.permutation(rows)[round(frac * len(rows)) :]
                keep[drop] = False
            idx = np.flatnonzero(keep)
            write_dataset(
                work / name,
                meta=m.iloc[idx].reset_index(drop=True),
                classes=list(base.classes),
                views={"bytes": np.asarray(base.view("bytes")[idx])},
                stats=base.stats_frame().iloc[idx].reset_index(drop=True),
            )
    entry = res["ustc_split"] = res.get("ustc_split") or {"near_bytes": NEAR_BYTES, "splits": {}}
    for name, (what, _) in splits.items():
        ds = load_dataset(work / name)
        x, y = np.asarray(ds.view("bytes")), np.asarray(ds.labels)
        split = ds.meta["split"].to_numpy()
        tr, te = np.flatnonzero(split == "train"), np.flatnonzero(split == "test")
        log(f"{name}: nearest training row of {len(te)} test rows among {len(tr)}")
        j, dist = nearest_rows(x[tr], x[te])
        near = dist <= NEAR_BYTES
        nn = classification_summary(y[te], y[tr][j], list(ds.classes))
        ok_nn = y[tr][j] == y[te]
        sp = entry["splits"][name] = {
            "split": what,
            "n_train": len(tr),
            "n_test": len(te),
            "prefix_copies": prefix_copies(x[tr], x[te], y[tr], y[te]),
            "nearest_train_distance_quantiles": {
                str(q): float(np.quantile(dist, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)
            },
            "test_rows_with_a_near_copy": int(near.sum()),
            "nn1_hamming": {
                "accuracy": nn["accuracy"],
                "macro_f1": nn["macro_f1"],
                "accuracy_near": float(ok_nn[near].mean()) if near.any() else None,
                "accuracy_rest": float(ok_nn[~near].mean()) if (~near).any() else None,
            },
            "models": {},
        }
        log(f"{name}: {int(near.sum())} test rows with a near-copy; 1-NN {nn['accuracy']:.4f}")
        where = {int(f): k for k, f in enumerate(ds.meta["flow_id"].to_numpy()[te])}
        models = args.ustc_split_models if name in ("ustc", "ustc-nodedup") else ["cnn"]
        for seed in args.seeds:
            for model in models:
                if model not in args.ustc_split_models:
                    continue
                run = train(work / name, model, work / "runs" / f"{name}-{model}-s{seed}", args,
                            seed=seed)  # fmt: skip
                if run is None:
                    continue
                m = json.loads((run / "metrics.json").read_text())
                pos = np.array([where[int(f)] for f in m["test_flow_ids"]])
                ok = np.asarray(m["test_predictions"]) == np.asarray(m["test_labels"])
                row = {
                    "seed": seed,
                    "accuracy": m["accuracy"],
                    "macro_f1": m["macro_f1"],
                    "accuracy_near": float(ok[near[pos]].mean()) if near.any() else None,
                    "accuracy_rest": float(ok[~near[pos]].mean()) if (~near).any() else None,
                    "epochs_run": len(m.get("loss_per_epoch") or []) or None,
                    "train_settings": run_settings(run),
                }
                sp["models"].setdefault(model, []).append(row)
                log(f"{name} {model} s{seed}: accuracy {m['accuracy']:.4f} "
                    f"(near-copies {row['accuracy_near']:.4f}, rest {row['accuracy_rest']:.4f})")  # fmt: skip
                write(args, res)


def ip_layout(args, work: Path, res: dict) -> None:
    """The 8-protocol set with the ip layout of pkt_bytes: every model ablated on it."""
    ds = work / "ndpi8-ip"
    if not (ds / "manifest.json").exists():
        log("prepare ndpi8-ip (--pkt-layout ip)")
        flowsplit(
            "prepare", SHARED / "ndpi" / "pcap", "-o", ds, *NDPI8_OPTIONS,
            "--pkt-layout", "ip", "--quiet",
        )  # fmt: skip
    entry = res["ip_layout"] = res.get("ip_layout") or {"models": {}}
    for seed in args.seeds:
        for model in args.ip_models:
            run = train(ds, model, work / "runs" / f"ndpi8ip-{model}-s{seed}", args, seed=seed)
            if run is None:
                continue
            m = json.loads((run / "metrics.json").read_text())
            png = args.plots / f"ablation-ndpi8ip-{model}-s{seed}.png" if args.plots else None
            extra = ["--ablate"] + (["--ablate-plot", png] if png else [])
            ab = evaluate(run, ds, "test", run / "eval-ablate.json", *extra)
            res["ablation"].setdefault("ndpi8-ip", {})[f"{model}-s{seed}"] = ab["ablations"]
            entry["models"].setdefault(model, []).append(
                {
                    "seed": seed,
                    "accuracy": m["accuracy"],
                    "macro_f1": m["macro_f1"],
                    "train_settings": run_settings(run),
                }  # fmt: skip
            )
            log(f"ip layout {model} s{seed}: accuracy {m['accuracy']:.4f}")
            write(args, res)


def write(args, res: dict) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1, default=str) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="JSON to write")
    p.add_argument("--work", type=Path, help="datasets and runs (default: a temporary folder)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--foreign", type=Path, help="folder of foreign captures, already assembled")
    g.add_argument("--foreign-archives", type=Path, help="folder of the Debian *.orig.tar.* files")
    p.add_argument(
        "--foreign-extra",
        type=Path,
        action="append",
        default=[],
        help="folder of more foreign captures (scripts/generated_captures.py's), repeatable",
    )
    p.add_argument("--models", default="cnn,lstm,convlstm,convgru,transformer,xgboost")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument(
        "--model-epochs",
        default="",
        help="epochs of some models instead of --epochs, e.g. cnn=15 (MODEL=N,...)",
    )
    p.add_argument("--steps-per-epoch", type=int)
    p.add_argument("--patience", type=int, help="train --patience (default: train's)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument(
        "--augment", default="none", help="also train every neural model with this --augment"
    )
    p.add_argument(
        "--class-weight",
        choices=("none", "balanced"),
        default="none",
        help="also train every neural model with train --class-weight balanced (as M+bal)",
    )
    p.add_argument(
        "--no-plain",
        action="store_true",
        help="with --augment or --class-weight: only those variants",
    )
    p.add_argument("--min-flows", type=int, default=20, help="foreign flows a shared class needs")
    p.add_argument("--temporal-models", default="", help="models of the temporal split ('' skips)")
    p.add_argument("--ustc-models", default="", help="models trained on USTC-TFC2016 ('' skips)")
    p.add_argument(
        "--ustc-variant",
        action="append",
        default=[],
        metavar="TAG=OPTIONS",
        help="also train every neural --ustc-models variant with these train options as "
        "NAME+TAG, e.g. 'ls=--label-smoothing 0.1 --epochs 25' (repeatable)",
    )
    p.add_argument(
        "--pretrain-steps",
        type=int,
        default=0,
        help="also the transformer pre-trained by masked byte modelling for N steps",
    )
    p.add_argument(
        "--ip-models", default="", help="models trained and ablated on the ip layout ('' skips)"
    )
    p.add_argument(
        "--ustc-split-models",
        default="",
        help="models trained on USTC-TFC2016 under the README's split and a split "
        "without dedup, with the test rows' copies among the training rows ('' skips)",
    )
    p.add_argument(
        "--ustc-train-fractions",
        default="",
        help="with --ustc-split-models cnn: the CNN also on these parts of the README "
        "split's training rows, e.g. 0.25,0.5",
    )
    p.add_argument("--ablate", action="store_true", help="evaluate --ablate every run")
    p.add_argument(
        "--collect-only",
        action="store_true",
        help="train nothing: report the runs already in --work (others are left out)",
    )
    p.add_argument("--plots", type=Path, help="folder for the ablation pictures")
    p.add_argument("--skip-cross", action="store_true", help="only the temporal and USTC parts")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.temporal_models = [m for m in args.temporal_models.split(",") if m]
    args.ustc_models = [m for m in args.ustc_models.split(",") if m]
    variants_given, args.ustc_variant = args.ustc_variant, []
    for v in variants_given:
        tag, sep, opts = v.partition("=")
        try:
            extra = tuple(shlex.split(opts))
        except ValueError as e:
            p.error(f"--ustc-variant {v!r}: {e}")
        if not (sep and tag and extra):
            p.error(f"--ustc-variant: TAG=OPTIONS expected, got {v!r}")
        args.ustc_variant.append((tag, extra))
    args.ip_models = [m for m in args.ip_models.split(",") if m]
    args.ustc_split_models = [m for m in args.ustc_split_models.split(",") if m]
    args.ustc_train_fractions = [float(f) for f in args.ustc_train_fractions.split(",") if f]
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    try:
        args.model_epochs = {
            m: int(n)
            for m, _, n in (kv.partition("=") for kv in args.model_epochs.split(",") if kv)
        }
    except ValueError:
        p.error(f"--model-epochs: MODEL=N,... expected, got {args.model_epochs!r}")
    if not args.skip_cross and args.foreign is None and args.foreign_archives is None:
        p.error("give --foreign DIR or --foreign-archives DIR (or --skip-cross)")
    if args.ablate:
        args.plots = args.plots or args.out.with_suffix("").with_name(args.out.stem + "-plots")
        args.plots.mkdir(parents=True, exist_ok=True)
    res = {
        "environment": environment(note="2-core machine shared with other engineers; one thread"),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "sources": {},
        "temporal": {},
        "ablation": {},
        "goals": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if not args.skip_cross:
            cross_source(args, work, res)
        if args.temporal_models:
            temporal(args, work, res)
        if args.ustc_models:
            ustc(args, work, res)
        if args.ip_models:
            ip_layout(args, work, res)
        if args.ustc_split_models:
            ustc_split_study(args, work, res)
        write(args, res)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
