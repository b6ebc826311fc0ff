"""The bad-input sweep: every command, given bad input, fails in one handled line.

Each case runs the real CLI (``flowsplit.cli.main``, in this process, stderr
captured) on one bad input: a missing file, a directory for a file, an empty or
damaged capture, a corrupt dataset or run directory, a result of the wrong kind,
an option value out of range, a malformed topology or plan, an output path that
cannot be made. Every case must end with a non-zero exit and exactly one line on
stderr, ``flowsplit: error: ...``, naming the file or option and what is wrong,
and never an ``internal error`` (which the CLI keeps for real bugs). A few cases
run as ``python -m flowsplit`` too, to show the exit code and the absent
traceback end to end.

A case is a command line with placeholders: ``{ds}``, ``{run}``, ``{sflrun}``,
``{captures}``, ``{pcap}``, ``{pcapng}`` (the good inputs of :func:`world`), ``{t}``
(the case's own empty folder), ``{file}`` (a plain file in it, where a folder must
be) and ``{x}`` (what the case's ``make`` built: usually a damaged copy of a good
input). ``names`` (placeholders too) must appear in the line, and ``says`` as well.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flowsplit.cli import main
from tests.data._pcapgen import tcp_conversation, write_pcap, write_pcapng
from tests.train.synth import write_synthetic

ROOT = Path(__file__).resolve().parents[1]
DEMO_CAPTURES = ROOT / "demo" / "captures"
SMALL_CNN = "--model-option channels=[4,4] --model-option hidden=8"
SFL = f"sfl run {{ds}} --model cnn {SMALL_CNN} --rounds 1 --quiet"
GARBAGE = bytes(range(7, 250)) * 2
"""Bytes that are no capture, no npy, no safetensors."""
PICKLE = pickle.dumps({"model": os.getcwd})  # a pickle naming a function: never loaded


@dataclass(frozen=True)
class World:
    """Good inputs the cases damage: captures, a dataset, a trained run, an SFL run."""

    root: Path
    captures: Path
    """Two classes of the shipped lab capture, one folder each."""
    ds: Path
    """The captures prepared (views bytes and stats)."""
    run: Path
    """A small CNN trained on ``ds`` (1 epoch)."""
    sflrun: Path
    """An ``sfl run`` of ``ds`` (1 round)."""
    pcap: Path
    pcapng: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp("sweep")
    captures = root / "captures"
    for cls in ("dns", "ssh"):
        (captures / cls).mkdir(parents=True)
        for k in (1, 2):
            shutil.copy(DEMO_CAPTURES / cls / f"{cls}-0{k}.pcap", captures / cls)
    ds, run, sflrun = root / "ds", root / "run", root / "sflrun"
    views = "--views bytes,stats --split-by flow --quiet"
    assert main(shlex.split(f"prepare {captures} -o {ds} {views}")) == 0
    train = f"train {ds} -m cnn --epochs 1 {SMALL_CNN} --threads 1 -o {run} -q"
    assert main(shlex.split(train)) == 0
    sfl = SFL.format(ds=ds) + f" --clients 3 --aggregators 2 -o {sflrun}"
    assert main(shlex.split(sfl)) == 0
    packets = tcp_conversation("10.0.0.1", "10.0.0.2", 40000, 80)
    pcap = write_pcap(root / "good.pcap", packets)
    pcapng = write_pcapng(root / "good.pcapng", packets)
    return World(root, captures, ds, run, sflrun, Path(pcap), Path(pcapng))


# --- ways to damage a good input ----------------------------------------------------
def copy_of(src: Path, t: Path) -> Path:
    dst = t / src.name
    shutil.copytree(src, dst)
    return dst


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def truncated(path: Path, keep: int) -> Path:
    """``path`` cut to ``keep`` bytes (negative: all but the last ``-keep``)."""
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    return path


def bad_tree(t: Path, name: str, data: bytes) -> Path:
    """Two class folders holding only the damaged capture ``name``."""
    for cls in ("a", "b"):
        write(t / "cap" / cls / name, data)
    return t / "cap"


def with_bad(w: World, t: Path, name: str, data: bytes) -> Path:
    """The good captures plus one damaged capture ``name`` (``--strict`` refuses it)."""
    root = copy_of(w.captures, t)
    write(root / "dns" / name, data)
    return root


def in_copy(src: Path, t: Path, name: str, data: bytes | str | None) -> Path:
    """A copy of the folder ``src`` whose file ``name`` is replaced by ``data`` (None: removed)."""
    root = copy_of(src, t)
    if data is None:
        (root / name).unlink()
    else:
        write(root / name, data)
    return root


def plan_of(run: Path) -> dict:
    """A plan document (as ``sfl plan`` writes) of the cuts and assignment of ``run``."""
    cfg = json.loads((run / "config.json").read_text())
    fields = ("scheme", "batch_size", "local_epochs", "partition", "train_limit", "seed")
    return {
        "cuts": cfg["cuts"],
        "assignment": cfg["assignment"],
        "topology_toml": (run / "topology.toml").read_text(),
        "run": {k: cfg[k] for k in fields},
    }


def edited(path: Path, edit: Callable[[dict], None]) -> Path:
    """The JSON file ``path`` changed in place by ``edit``."""
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return path


def unfinished(w: World, t: Path, checkpoint: bytes) -> Path:
    """A run that stopped after an epoch (no metrics.json), with a damaged checkpoint."""
    run = in_copy(w.run, t, "metrics.json", None)
    write(run / "checkpoint.pt", checkpoint)
    return run


def saved(obj) -> bytes:
    """``obj`` as torch.save writes it (plain data: weights_only loads it)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def meta_without(w: World, t: Path, column: str) -> Path:
    ds = copy_of(w.ds, t)
    pd.read_parquet(ds / "meta.parquet").drop(columns=[column]).to_parquet(ds / "meta.parquet")
    return ds


def meta_without_labels(w: World, t: Path) -> Path:
    ds = copy_of(w.ds, t)
    pd.read_parquet(ds / "meta.parquet").drop(columns=["label"]).to_parquet(ds / "meta.parquet")
    return ds


def npy_of_shape(w: World, t: Path, shape: tuple[int, ...]) -> Path:
    """A dataset whose bytes.npy is well-formed but not of the manifest's shape."""
    ds = copy_of(w.ds, t)
    np.save(ds / "bytes.npy", np.zeros(shape, dtype=np.uint8))
    return ds


def negative_bandwidth(w: World, t: Path) -> Path:
    text = (w.sflrun / "topology.toml").read_text()
    bad = text.replace("bandwidth_Bps = 125000000.0", "bandwidth_Bps = -5.0", 1)
    assert bad != text
    return write(t / "net.toml", bad)


def special(t: Path, kind: str) -> Path:
    """A FIFO, socket or character device (ours: root only) in ``t``."""
    path = t / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        import socket

        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod needs root (CI runs the sweep as root)")
        path = t / "dev"
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


def linked(t: Path, target: Path) -> Path:
    link = t / "link"
    link.symlink_to(target)
    return link


def non_utf8_class(w: World, t: Path) -> Path:
    """The captures with one class folder whose name is not UTF-8 (bytes 'ss\\xffh')."""
    root = copy_of(w.captures, t)
    os.rename(root / "ssh", os.fsencode(root) + b"/ss\xffh")
    return root


def seq_edited(t: Path, edit: Callable[[np.ndarray], np.ndarray]) -> Path:
    """A synthetic dataset whose seq.npy is replaced by ``edit`` of itself."""
    ds = write_synthetic(t / "ds", n=60, n_classes=2)
    np.save(ds / "seq.npy", edit(np.load(ds / "seq.npy")))
    return ds


def meta_label(ds: Path, label: int) -> Path:
    meta = pd.read_parquet(ds / "meta.parquet")
    meta.loc[0, "label"] = label
    meta.to_parquet(ds / "meta.parquet")
    return ds


def split_moved(w: World, t: Path, split: str, into: str) -> Path:
    """A copy of the dataset whose ``split`` rows all belong to ``into``: ``split`` is empty."""
    ds = copy_of(w.ds, t)
    meta = pd.read_parquet(ds / "meta.parquet")
    meta.loc[meta["split"] == split, "split"] = into
    meta.to_parquet(ds / "meta.parquet")
    return ds


def stats_of_text(w: World, t: Path) -> Path:
    """A copy of the dataset whose first flow statistic is text (a parquet of strings)."""
    ds = copy_of(w.ds, t)
    frame = pd.read_parquet(ds / "stats.parquet")
    frame[frame.columns[0]] = "zz"
    frame.to_parquet(ds / "stats.parquet")
    return ds


def plan_with(w: World, t: Path, **top) -> Path:
    """A plan of the SFL run with top-level keys ``top`` (``run_`` ones: in its run)."""
    plan = plan_of(w.sflrun)
    plan["run"].update({k[4:]: v for k, v in top.items() if k.startswith("run_")})
    plan.update({k: v for k, v in top.items() if not k.startswith("run_")})
    return write(t / "plan.json", json.dumps(plan))


def _set(*keys, value):
    """An edit setting doc[keys...] = value (None: deleting it)."""

    def edit(doc: dict) -> None:
        for key in keys[:-1]:
            doc = doc[key]
        if value is None:
            doc.pop(keys[-1])
        else:
            doc[keys[-1]] = value

    return edit


@dataclass(frozen=True)
class Case:
    name: str
    cmd: str
    """The command line after ``flowsplit``, with placeholders."""
    names: str
    """What the line must name (a path or an option; placeholders allowed)."""
    says: str = ""
    """Words of what is wrong, where the case pins them down."""
    make: Callable[[World, Path], Path] | None = None
    """Builds ``{x}``."""

    def places(self, w: World, t: Path, x: Path) -> dict[str, Path]:
        return {
            "ds": w.ds,
            "run": w.run,
            "sflrun": w.sflrun,
            "captures": w.captures,
            "pcap": w.pcap,
            "pcapng": w.pcapng,
            "t": t,
            "file": t / "plain-file",
            "x": x,
        }


C = Case
CASES = [
    # ---- prepare ---------------------------------------------------------------
    C("prepare-missing-input", "prepare {t}/nope.pcap -o {t}/o", "nope.pcap", "no such"),
    C("prepare-empty-pcap", "prepare {x} -o {t}/o", "e.pcap", "empty",
      lambda w, t: bad_tree(t, "e.pcap", b"")),
    C("prepare-garbage-pcap", "prepare {x} -o {t}/o", "g.pcap", "not a pcap",
      lambda w, t: bad_tree(t, "g.pcap", GARBAGE)),
    C("prepare-truncated-pcap-strict", "prepare {x} --strict -o {t}/o", "t.pcap", "truncated",
      lambda w, t: with_bad(w, t, "t.pcap", w.pcap.read_bytes()[:30])),
    C("prepare-truncated-pcapng", "prepare {x} -o {t}/o", "cap", "truncated",
      lambda w, t: bad_tree(t, "t.pcapng", w.pcapng.read_bytes()[:20])),
    C("prepare-garbage-pcapng-strict", "prepare {x} --strict -o {t}/o", "g.pcapng", "magic",
      lambda w, t: with_bad(w, t, "g.pcapng", b"\x0a\x0d\x0d\x0a" + GARBAGE)),
    C("prepare-csv-wrong-columns", "prepare {x} -o {t}/o", "flows.csv", "column",
      lambda w, t: write(t / "flows.csv", "foo,bar\n1,2\n3,4\n")),
    C("prepare-labels-missing", "prepare {captures} --labels {t}/labels.csv -o {t}/o",
      "labels.csv", "not found"),
    C("prepare-labels-wrong-columns", "prepare {captures} --labels {x} -o {t}/o", "labels.csv",
      make=lambda w, t: write(t / "labels.csv", "a,b\n1,2\n")),
    C("prepare-port-map-malformed", "prepare {captures} --label-by port --port-map {x} -o {t}/o",
      "pm.json", "JSON", lambda w, t: write(t / "pm.json", "{oops")),
    C("prepare-port-map-a-list", "prepare {captures} --label-by port --port-map {x} -o {t}/o",
      "pm.json", "object", lambda w, t: write(t / "pm.json", "[53]")),
    C("prepare-port-map-binary", "prepare {captures} --label-by port --port-map {x} -o {t}/o",
      "pm.json", "not UTF-8", lambda w, t: write(t / "pm.json", GARBAGE)),
    C("prepare-val-negative", "prepare {captures} --val -0.1 -o {t}/o", "--val"),
    C("prepare-test-nan", "prepare {captures} --test nan -o {t}/o", "--test"),
    C("prepare-val-plus-test-one", "prepare {captures} --val 0.5 --test 0.5 -o {t}/o", "--val"),
    C("prepare-seq-len-zero", "prepare {captures} --seq-len 0 -o {t}/o", "--seq-len"),
    C("prepare-unknown-view", "prepare {captures} --views bogus -o {t}/o", "bogus"),
    C("prepare-unknown-label-mode", "prepare {captures} --label-by magic -o {t}/o", "--label-by"),
    C("prepare-n-bytes-beyond-memory", "prepare {captures} --n-bytes 1000000000 -o {t}/o",
      "--n-bytes", "GiB for the 4096 flows"),
    C("prepare-labels-conflicting", "prepare {captures} --labels {x} -o {t}/o", "labels.csv",
      "on line 2 and 'ssh' on line 3", lambda w, t: write(t / "labels.csv",
                                                          "file,label\ndns-01.pcap,dns\ndns-01.pcap,ssh\n")),
    C("prepare-port-map-conflicting", "prepare {captures} --label-by port --port-map {x} -o {t}/o",
      "pm.json", "port 53", lambda w, t: write(t / "pm.json", '{"dns": 53, "other": 53}')),
    C("prepare-out-is-a-file", "prepare {captures} -o {x}", "plain-file", "not a directory",
      lambda w, t: write(t / "plain-file", "x")),
    C("prepare-out-under-a-file", "prepare {captures} -o {file}/ds", "plain-file", "not a directory",
      lambda w, t: write(t / "plain-file", "x")),
    C("prepare-over-a-dataset", "prepare {captures} -o {x} --quiet", "ds", "--overwrite",
      lambda w, t: copy_of(w.ds, t)),
    # ---- inspect ---------------------------------------------------------------
    C("inspect-missing", "inspect {t}/nope", "nope", "not a dataset"),
    C("inspect-a-file", "inspect {x}", "plain-file", "not a dataset",
      lambda w, t: write(t / "plain-file", "x")),
    C("inspect-empty-dir", "inspect {t}", "{t}", "no manifest.json"),
    C("inspect-garbage-manifest", "inspect {x}", "manifest.json", "JSON",
      lambda w, t: in_copy(w.ds, t, "manifest.json", "{not json")),
    C("inspect-binary-manifest", "inspect {x}", "manifest.json", "cannot be read",
      lambda w, t: in_copy(w.ds, t, "manifest.json", b"\xff\xfe\x00 not text")),
    C("inspect-manifest-a-list", "inspect {x}", "manifest.json", "not a JSON object",
      lambda w, t: in_copy(w.ds, t, "manifest.json", "[1, 2]")),
    C("inspect-manifest-counts-a-list", "inspect {x}", "manifest.json", "class_counts",
      lambda w, t: edited(copy_of(w.ds, t) / "manifest.json", _set("class_counts", value=[1])).parent),
    C("inspect-manifest-options-a-list", "inspect {x}", "manifest.json", "options",
      lambda w, t: edited(copy_of(w.ds, t) / "manifest.json", _set("options", value=[])).parent),
    C("inspect-meta-without-label-names", "inspect {x}", "manifest.json", "label_name",
      lambda w, t: meta_without(w, t, "label_name")),
    C("inspect-manifest-no-classes", "inspect {x}", "manifest.json", "classes",
      lambda w, t: edited(copy_of(w.ds, t) / "manifest.json", _set("classes", value=None)).parent),
    C("inspect-manifest-old-schema", "inspect {x}", "manifest.json", "schema",
      lambda w, t: edited(copy_of(w.ds, t) / "manifest.json", _set("schema_version", value=99)).parent),
    C("inspect-corrupt-meta", "inspect {x}", "meta.parquet", "unreadable",
      lambda w, t: in_copy(w.ds, t, "meta.parquet", b"PAR1 garbage")),
    C("inspect-meta-missing", "inspect {x}", "meta.parquet", "missing",
      lambda w, t: in_copy(w.ds, t, "meta.parquet", None)),
    C("inspect-meta-without-labels", "inspect {x}", "manifest.json", "label",
      lambda w, t: meta_without_labels(w, t)),
    # ---- train -----------------------------------------------------------------
    C("train-dataset-missing", "train {t}/nods -m cnn -o {t}/r -q", "nods"),
    C("train-dataset-a-file", "train {x} -m cnn -o {t}/r -q", "plain-file",
      make=lambda w, t: write(t / "plain-file", "x")),
    C("train-no-model", "train {ds} -o {t}/r -q", "--model"),
    C("train-truncated-npy", "train {x} -m cnn -o {t}/r -q", "bytes.npy", "unreadable",
      lambda w, t: truncated(copy_of(w.ds, t) / "bytes.npy", -500).parent),
    C("train-garbage-npy", "train {x} -m cnn -o {t}/r -q", "bytes.npy", "unreadable",
      lambda w, t: in_copy(w.ds, t, "bytes.npy", b"\x93NUMPY garbage")),
    C("train-npy-missing", "train {x} -m cnn -o {t}/r -q", "bytes.npy", "missing",
      lambda w, t: in_copy(w.ds, t, "bytes.npy", None)),
    C("train-npy-wrong-shape", "train {x} -m cnn -o {t}/r -q", "bytes.npy", "shape",
      lambda w, t: npy_of_shape(w, t, (7, 784))),
    C("train-corrupt-stats-parquet", "train {x} -m xgboost --boost-rounds 2 -o {t}/r -q",
      "stats.parquet", "unreadable", lambda w, t: in_copy(w.ds, t, "stats.parquet", b"PAR1junk")),
    C("train-unknown-model", "train {ds} -m transformer9 -o {t}/r -q", "transformer9"),
    C("train-unknown-view", "train {ds} -m cnn --view nosuch -o {t}/r -q", "nosuch"),
    C("train-view-not-in-dataset", "train {ds} -m lstm --view seq -o {t}/r -q", "seq"),
    C("train-epochs-zero", "train {ds} -m cnn --epochs 0 -o {t}/r -q", "--epochs"),
    C("train-batch-negative", "train {ds} -m cnn --batch-size -4 -o {t}/r -q", "--batch-size"),
    C("train-lr-nan", "train {ds} -m cnn --lr nan -o {t}/r -q", "--lr"),
    C("train-workers-zero", "train {ds} -m cnn --workers 0 -o {t}/r -q", "--workers"),
    C("train-timeout-negative", "train {ds} -m cnn --timeout -1 -o {t}/r -q", "--timeout"),
    C("train-epochs-not-a-number", "train {ds} -m cnn --epochs many -o {t}/r -q", "--epochs"),
    C("train-unknown-device", "train {ds} -m cnn --device tpu -o {t}/r -q", "--device"),
    C("train-bad-model-option", "train {ds} -m cnn --model-option channels=[four] -o {t}/r -q",
      "channels"),
    C("train-negative-kernel", "train {ds} -m cnn --model-option kernel=-3 -o {t}/r -q",
      "kernel=-3", "cannot be built"),
    C("train-unknown-model-option", "train {ds} -m cnn --model-option wings=2 -o {t}/r -q",
      "wings"),
    C("train-model-option-without-value", "train {ds} -m cnn --model-option hidden -o {t}/r -q",
      "hidden"),
    C("train-one-class", "train {x} -m cnn -o {t}/r -q", "one", "one class",
      lambda w, t: write_synthetic(t / "one", n=60, n_classes=1)),
    C("train-one-class-xgboost", "train {x} -m xgboost --boost-rounds 2 -o {t}/r -q", "one",
      "one class", lambda w, t: write_synthetic(t / "one", n=60, n_classes=1)),
    C("train-out-under-a-file", "train {ds} -m cnn -o {file}/r -q", "plain-file", "not a directory",
      lambda w, t: write(t / "plain-file", "x")),
    C("train-over-a-finished-run", "train {ds} -m cnn -o {x} -q", "run", "--overwrite",
      lambda w, t: copy_of(w.run, t)),
    C("train-resume-not-a-run", "train --resume {t} -q", "{t}", "config.json"),
    C("train-resume-an-sfl-run", "train --resume {x} -q", "config.json", "flowsplit train",
      lambda w, t: copy_of(w.sflrun, t)),
    C("train-resume-config-empty", "train --resume {x} -q", "config.json", "lacks dataset",
      lambda w, t: in_copy(w.run, t, "config.json", "{}")),
    C("train-resume-corrupt-checkpoint", "train --resume {x} -q", "checkpoint.pt", "unreadable",
      lambda w, t: unfinished(w, t, b"PK\x03\x04garbage")),
    C("train-resume-checkpoint-a-list", "train --resume {x} -q", "checkpoint.pt", "not a training",
      lambda w, t: unfinished(w, t, saved([1]))),
    C("train-resume-checkpoint-epoch-a-word", "train --resume {x} -q", "checkpoint.pt", "epoch",
      lambda w, t: unfinished(w, t, saved({"model": {}, "optimizer": {}, "history": {},
                                            "best": {}, "epoch": "x"}))),
    C("train-resume-pickle-checkpoint", "train --resume {x} -q", "checkpoint.pt", "pickled",
      lambda w, t: unfinished(w, t, PICKLE)),
    # ---- evaluate --------------------------------------------------------------
    C("evaluate-run-missing", "evaluate {t}/norun {ds}", "norun", "not a flowsplit run"),
    C("evaluate-run-corrupt-config", "evaluate {x} {ds}", "config.json", "JSON",
      lambda w, t: in_copy(w.run, t, "config.json", "{")),
    C("evaluate-run-config-a-list", "evaluate {x} {ds}", "config.json", "flowsplit train",
      lambda w, t: in_copy(w.run, t, "config.json", "[]")),
    C("evaluate-run-config-classes-a-word", "evaluate {x} {ds}", "config.json", "model.classes",
      lambda w, t: edited(copy_of(w.run, t) / "config.json", _set("model", "classes", value="ab")).parent),
    C("predict-run-config-options-mistyped", "predict {x} {pcap}", "config.json", "seq_len",
      lambda w, t: edited(copy_of(w.run, t) / "config.json",
                          _set("dataset", "options", "seq_len", value="x")).parent),
    C("evaluate-sfl-run-config-a-list", "evaluate {x} {ds}", "config.json", "not an object",
      lambda w, t: in_copy(w.sflrun, t, "config.json", "[]")),
    C("evaluate-run-corrupt-weights", "evaluate {x} {ds}", "weights.safetensors", "unreadable",
      lambda w, t: in_copy(w.run, t, "weights.safetensors", b"\x08" + bytes(7) + b"{}garbage")),
    C("evaluate-run-truncated-weights", "evaluate {x} {ds}", "weights.safetensors", "unreadable",
      lambda w, t: truncated(copy_of(w.run, t) / "weights.safetensors", 200).parent),
    C("evaluate-run-weights-of-another-model", "evaluate {x} {ds}", "weights.safetensors",
      "do not fit", lambda w, t: edited(copy_of(w.run, t) / "config.json",
                                        _set("train", "model_options", "hidden", value=16)).parent),
    C("evaluate-corrupt-booster", "evaluate {x} {ds}", "model.ubj", "unreadable",
      lambda w, t: write(edited(copy_of(w.run, t) / "config.json",
                                _set("model", "kind", value="xgboost")).parent / "model.ubj",
                         GARBAGE).parent),
    C("evaluate-run-config-without-dataset", "evaluate {x} {ds}", "config.json", "lacks dataset",
      lambda w, t: edited(copy_of(w.run, t) / "config.json", _set("dataset", value=None)).parent),
    C("predict-run-config-without-dataset", "predict {x} {pcap}", "config.json", "lacks dataset",
      lambda w, t: edited(copy_of(w.run, t) / "config.json", _set("dataset", value=None)).parent),
    C("evaluate-run-config-model-without-view", "evaluate {x} {ds}", "config.json", "lacks model.view",
      lambda w, t: edited(copy_of(w.run, t) / "config.json",
                          _set("model", "view", value=None)).parent),
    C("evaluate-dataset-missing", "evaluate {run} {t}/nods", "nods"),
    C("evaluate-dataset-is-a-run", "evaluate {run} {run}", "{run}", "manifest.json"),
    C("evaluate-unknown-split", "evaluate {run} {ds} --split holdout", "--split"),
    C("evaluate-output-under-a-file", "evaluate {run} {ds} --out {file}/m.json", "plain-file",
      make=lambda w, t: write(t / "plain-file", "x")),
    C("evaluate-output-a-directory", "evaluate {run} {ds} --out {t}", "{t}"),
    # ---- predict ---------------------------------------------------------------
    C("predict-run-missing", "predict {t}/norun {pcap}", "norun"),
    C("predict-capture-missing", "predict {run} {t}/nope.pcap", "nope.pcap"),
    C("predict-capture-empty", "predict {run} {x}", "e.pcap", "empty",
      lambda w, t: write(t / "e.pcap", b"")),
    C("predict-capture-garbage", "predict {run} {x}", "g.pcapng", "not a pcap",
      lambda w, t: write(t / "g.pcapng", GARBAGE)),
    C("predict-captures-all-garbage", "predict {run} {x}/a.pcap {x}/b.pcap", "a.pcap",
      "no readable capture", lambda w, t: write(t / "x" / "a.pcap", GARBAGE).parent
      if write(t / "x" / "b.pcap", b"") else None),
    C("predict-capture-a-directory", "predict {run} {t}", "{t}"),
    C("predict-capture-a-csv", "predict {run} {x}", "flows.csv", "captures",
      lambda w, t: write(t / "flows.csv", "a,b\n1,2\n")),
    C("predict-min-confidence-nan", "predict {run} {pcap} --min-confidence nan",
      "--min-confidence"),
    C("predict-unknown-format", "predict {run} {pcap} --format xml", "--format"),
    C("predict-output-under-a-file", "predict {run} {pcap} -o {file}/p.csv", "plain-file",
      make=lambda w, t: write(t / "plain-file", "x")),
    C("predict-model-of-other-views", "predict {x} {pcap}", "run", "(100,)",
      lambda w, t: edited(copy_of(w.run, t) / "config.json",
                          _set("dataset", "options", "n_bytes", value=100)).parent),
    # ---- compare / report ------------------------------------------------------
    C("compare-out-a-run", "compare {ds} -o {x} --quick", "run", "not a compare study",
      lambda w, t: copy_of(w.run, t)),
    C("compare-out-a-dataset", "compare {ds} -o {x} --quick", "ds", "not a compare study",
      lambda w, t: copy_of(w.ds, t)),
    C("compare-out-a-file", "compare {ds} -o {x} --quick", "plain-file", "not a directory",
      lambda w, t: write(t / "plain-file", "x")),
    C("compare-unknown-model", "compare {ds} -o {t}/s --models cnn,bogus", "bogus"),
    C("compare-workers-zero", "compare {ds} -o {t}/s --workers 0", "--workers"),
    C("compare-seeds-negative", "compare {ds} -o {t}/s --seeds -2", "--seeds"),
    C("compare-dataset-missing", "compare {t}/nods -o {t}/s", "nods"),
    C("report-not-a-study", "report {t}", "{t}", "compare"),
    C("report-a-run", "report {run}", "{run}", "compare"),
    C("report-missing", "report {t}/nostudy", "nostudy"),
    C("report-corrupt-study", "report {t}", "compare.json", "JSON",
      lambda w, t: write(t / "compare.json", "{")),
    C("report-wrong-schema-study", "report {t}", "compare.json", "settings",
      lambda w, t: write(t / "compare.json", '{"models": 3}')),
    C("report-runs-missing", "report {x}", "s", "4 of its 4 runs are missing",
      lambda w, t: write(t / "s" / "compare.json", json.dumps(
          {"config": {"models": ["cnn"], "workers": [1, 2], "seeds": [0, 1]}})).parent),
    C("report-settings-damaged", "report {x}", "compare.json", "damaged",
      lambda w, t: write(t / "s" / "compare.json", json.dumps(
          {"config": {"models": ["cnn"], "workers": 3, "seeds": [0]}})).parent),
    # ---- sfl run ---------------------------------------------------------------
    C("sfl-run-dataset-missing", "sfl run {t}/nods -o {t}/o", "nods"),
    C("sfl-run-topology-missing", SFL + " --topology {t}/net.toml -o {t}/o", "net.toml"),
    C("sfl-run-topology-a-directory", SFL + " --topology {x} -o {t}/o", "net.toml",
      make=lambda w, t: (t / "net.toml").mkdir() or t / "net.toml"),
    C("sfl-run-topology-malformed", SFL + " --topology {x} -o {t}/o", "net.toml", "TOML",
      lambda w, t: write(t / "net.toml", "[server\nspeed=")),
    C("sfl-run-topology-wrong-schema", SFL + " --topology {x} -o {t}/o", "net.toml", "topology",
      lambda w, t: write(t / "net.toml", 'name = "x"\n[server]\nspeed_flops = "fast"\n')),
    C("sfl-run-topology-binary", SFL + " --topology {x} -o {t}/o", "net.toml", "not UTF-8",
      lambda w, t: write(t / "net.toml", GARBAGE)),
    C("sfl-run-topology-seed-a-word", SFL + " --topology {x} -o {t}/o", "net.toml", "seed",
      lambda w, t: write(t / "net.toml", re.sub(r"(?m)^seed = .*$", 'seed = "x"',
                                               (w.sflrun / "topology.toml").read_text()))),
    C("sfl-run-select-file-binary", SFL + " --select list:{x} -o {t}/o", "ids.txt", "not UTF-8",
      lambda w, t: write(t / "ids.txt", GARBAGE)),
    C("sfl-run-config-fault-not-integers", SFL + " --config {x} -o {t}/o", "hang_clients",
      "integers", lambda w, t: write(t / "c.toml", '[run]\nhang_clients = {a = "b"}\n')),
    C("sfl-run-topology-negative-bandwidth", SFL + " --topology {x} -o {t}/o", "net.toml",
      "bandwidth", negative_bandwidth),
    C("sfl-run-unknown-preset", SFL + " --topology moonbase -o {t}/o", "moonbase"),
    C("sfl-run-more-aggregators-than-clients", SFL + " --clients 2 --aggregators 3 -o {t}/o",
      "--aggregators"),
    C("sfl-run-cuts-out-of-range", SFL + " --cuts 9,9 -o {t}/o", "cuts", "not legal"),
    C("sfl-run-cuts-garbage", SFL + " --cuts a,b -o {t}/o", "--cuts"),
    C("sfl-run-rounds-zero", SFL + " --rounds 0 -o {t}/o", "--rounds"),
    C("sfl-run-lr-nan", SFL + " --lr nan -o {t}/o", "--lr"),
    C("sfl-run-batch-zero", SFL + " --batch-size 0 -o {t}/o", "--batch-size"),
    C("sfl-run-drop-prob-out-of-range", SFL + " --drop-prob 1.5 -o {t}/o", "--drop-prob"),
    C("sfl-run-partition-unknown", SFL + " --partition zipf:2 -o {t}/o", "--partition"),
    C("sfl-run-partition-negative-alpha", SFL + " --partition dirichlet:-1 -o {t}/o",
      "dirichlet"),
    C("sfl-run-min-clients-too-many", SFL + " --clients 3 --min-clients 9 -o {t}/o",
      "--min-clients"),
    C("sfl-run-unknown-scheme", SFL + " --scheme fedavg -o {t}/o", "--scheme"),
    C("sfl-run-not-a-neural-model", "sfl run {ds} --model xgboost -o {t}/o", "xgboost"),
    C("sfl-run-plan-malformed", SFL + " --plan {x} -o {t}/o", "plan.json", "plan",
      lambda w, t: write(t / "plan.json", "{")),
    C("sfl-run-plan-wrong-schema", SFL + " --plan {x} -o {t}/o", "plan.json", "plan",
      lambda w, t: write(t / "plan.json", '{"cuts": "x"}')),
    C("sfl-run-plan-predicted-a-list", SFL + " --plan {x} -o {t}/o", "plan.json", "predicted",
      lambda w, t: write(t / "plan.json", json.dumps({**plan_of(w.sflrun), "predicted": [1]}))),
    C("sfl-run-plan-missing", SFL + " --plan {t}/plan.json -o {t}/o", "plan.json", "not found"),
    C("sfl-run-resume-no-checkpoint", SFL + " --mode dist --resume -o {t}/o",
      "sfl-checkpoint.pt"),
    C("sfl-run-resume-garbage-checkpoint", SFL + " --mode dist --resume -o {x}",
      "sfl-checkpoint.pt", "unreadable",
      lambda w, t: write(t / "o" / "sfl-checkpoint.pt", b"garbage").parent),
    C("sfl-run-resume-a-model-as-checkpoint", SFL + " --mode dist --resume -o {x}",
      "sfl-checkpoint.pt", "not an SFL checkpoint", lambda w, t: write(t / "o" / "sfl-checkpoint.pt",
                                                   (w.sflrun / "model.pt").read_bytes()).parent),
    C("sfl-run-resume-sim", SFL + " --resume -o {t}/o", "--resume"),
    C("sfl-run-out-under-a-file", SFL + " -o {file}/o", "plain-file", "not a directory",
      lambda w, t: write(t / "plain-file", "x")),
    C("sfl-run-over-a-run", SFL + " -o {x}", "sflrun", "--overwrite",
      lambda w, t: copy_of(w.sflrun, t)),
    C("sfl-run-overwrite-a-dataset", SFL + " --overwrite -o {x}", "ds", "not an `sfl run`",
      lambda w, t: copy_of(w.ds, t)),
    # ---- sfl profile / plan / compare / privacy ----------------------------------
    C("sfl-profile-unknown-model", "sfl profile --dataset {ds} --model bogus", "bogus"),
    C("sfl-plan-weights-garbage", "sfl plan {ds} --weights a,b -o {t}/p.json", "--weights"),
    C("sfl-plan-tolerance-negative", "sfl plan {ds} --acc-tolerance -1 -o {t}/p.json",
      "--acc-tolerance"),
    C("sfl-plan-leakage-file-missing",
      "sfl plan {ds} --max-leakage 0.5 --leakage-file {t}/privacy.json -o {t}/p.json",
      "privacy.json", "not found"),
    C("sfl-plan-leakage-file-wrong-schema",
      "sfl plan {ds} --max-leakage 0.5 --leakage-file {x} -o {t}/p.json", "privacy.json",
      make=lambda w, t: write(t / "privacy.json", "[]")),
    C("sfl-plan-leakage-file-malformed",
      "sfl plan {ds} --max-leakage 0.5 --leakage-file {x} -o {t}/p.json", "privacy.json",
      make=lambda w, t: write(t / "privacy.json", "{")),
    C("sfl-plan-more-aggregators-than-clients",
      "sfl plan {ds} --clients 2 --aggregators 3 --no-pilots -o {t}/p.json", "--aggregators"),
    C("sfl-compare-more-aggregators-than-clients",
      "sfl compare {ds} --clients 2 --aggregators 3 --quick -o {t}/c", "--aggregators"),
    C("sfl-plan-capacity-garbage", "sfl plan {ds} --capacity x -o {t}/p.json", "--capacity"),
    C("sfl-plan-pilots-garbage", "sfl plan {ds} --pilots 1;2 -o {t}/p.json", "--pilots"),
    C("sfl-plan-out-under-a-file", "sfl plan {ds} --no-pilots --quick -o {file}/p.json",
      "plain-file", make=lambda w, t: write(t / "plain-file", "x")),
    C("sfl-compare-unknown-scheme", "sfl compare {ds} --schemes sfl,magic -o {t}/c", "magic"),
    C("sfl-compare-empty-test-split", "sfl compare {x} --quick -o {t}/c", "ds", "test split",
      lambda w, t: write_synthetic(t / "ds", n=60, n_classes=2, split=(0.8, 0.2))),
    C("sfl-compare-seeds-zero", "sfl compare {ds} --seeds 0 -o {t}/c", "--seeds"),
    C("sfl-privacy-victim-run-not-a-run", "sfl privacy {ds} --victim-run {t} -o {t}/pv", "{t}",
      "model.pt"),
    C("sfl-privacy-victim-run-corrupt-model", "sfl privacy {ds} --victim-run {x} -o {t}/pv",
      "model.pt", "unreadable", lambda w, t: in_copy(w.sflrun, t, "model.pt", b"garbage")),
    C("sfl-privacy-bad-defence", "sfl privacy {ds} --defences tinfoil:3 -o {t}/pv", "tinfoil"),
    C("sfl-privacy-cut-out-of-range", "sfl privacy {ds} --client-cuts 99 -o {t}/pv", "99"),
    C("sfl-privacy-overwrite-a-dataset", "sfl privacy {ds} --overwrite -o {x}", "ds",
      "not an `sfl privacy` study", lambda w, t: copy_of(w.ds, t)),
    C("sfl-privacy-redraw-without-study", "sfl privacy {ds} --redraw -o {t}", "privacy.json"),
    C("sfl-privacy-redraw-corrupt-study", "sfl privacy {ds} --redraw -o {t}", "privacy.json",
      make=lambda w, t: write(t / "privacy.json", '{"cuts": 3}')),
    # ---- outputs nobody may write (mkdir in /sys: EPERM as root, EACCES otherwise) -------
    C("prepare-out-unwritable", "prepare {captures} -o /sys/flowsplit-sweep/ds",
      "/sys/flowsplit-sweep"),
    C("train-out-unwritable", "train {ds} -m cnn -o /sys/flowsplit-sweep/r -q",
      "/sys/flowsplit-sweep"),
    C("evaluate-output-unwritable", "evaluate {run} {ds} --out /sys/flowsplit-sweep.json",
      "/sys/flowsplit-sweep.json"),
    C("predict-output-unwritable", "predict {run} {pcap} -o /sys/flowsplit-sweep.csv",
      "/sys/flowsplit-sweep.csv"),
    C("sfl-run-out-unwritable", SFL + " -o /sys/flowsplit-sweep/o", "/sys/flowsplit-sweep"),
    C("compare-out-unwritable", "compare {ds} --quick -o /sys/flowsplit-sweep/s",
      "/sys/flowsplit-sweep"),
    # ---- -o onto what is not a regular file (issue 31 item 1) -------------------
    C("evaluate-output-a-fifo", "evaluate {run} {ds} --out {x}", "fifo", "a FIFO",
      lambda w, t: special(t, "fifo")),
    C("predict-output-a-fifo", "predict {run} {pcap} -o {x}", "fifo", "a FIFO",
      lambda w, t: special(t, "fifo")),
    C("evaluate-output-a-device", "evaluate {run} {ds} --out {x}", "dev", "a character device",
      lambda w, t: special(t, "device")),
    C("predict-output-a-socket", "predict {run} {pcap} -o {x}", "sock", "a socket",
      lambda w, t: special(t, "socket")),
    C("evaluate-output-a-link-to-a-fifo", "evaluate {run} {ds} --out {x}", "link", "a FIFO",
      lambda w, t: linked(t, special(t, "fifo"))),
    # ---- nonsense refused at parse time, or stopped (issue 31 items 5-6) ----------
    C("train-lr-inf", "train {ds} -m cnn --lr inf -o {t}/r -q", "--lr", "finite"),
    C("train-weight-decay-nan", "train {ds} -m cnn --weight-decay nan -o {t}/r -q",
      "--weight-decay", "finite"),
    C("train-weight-decay-negative", "train {ds} -m cnn --weight-decay -1 -o {t}/r -q",
      "--weight-decay", ">= 0"),
    C("train-timeout-inf", "train {ds} -m cnn --timeout inf -o {t}/r -q", "--timeout", "finite"),
    C("train-seed-negative", "train {ds} -m cnn --seed -1 -o {t}/r -q", "--seed", "2**32"),
    C("train-seed-2-to-the-70", f"train {{ds}} -m cnn --seed {2**70} -o {{t}}/r -q", "--seed",
      "2**32"),
    C("train-workers-beyond-the-cores", "train {ds} -m cnn --workers 64 -o {t}/r -q",
      "--workers 64", "core(s)"),
    C("train-threads-beyond-the-cores", "train {ds} -m cnn --threads 100000 -o {t}/r -q",
      "100000 threads", "--force"),
    C("train-diverges", f"train {{ds}} -m cnn {SMALL_CNN} --lr 1e30 --epochs 2 -o {{t}}/r -q",
      "--lr", "loss is nan"),
    C("sfl-run-lr-inf", SFL + " --lr inf -o {t}/o", "--lr", "finite"),
    C("sfl-run-momentum-nan", SFL + " --momentum nan -o {t}/o", "--momentum", "finite"),
    C("sfl-run-weight-decay-negative", SFL + " --weight-decay -1 -o {t}/o", "--weight-decay",
      ">= 0"),
    C("sfl-run-momentum-negative", SFL + " --momentum -0.5 -o {t}/o", "--momentum", ">= 0"),
    C("sfl-run-timeout-inf", SFL + " --timeout inf -o {t}/o", "--timeout", "finite"),
    C("sfl-run-seed-2-to-the-70", SFL + f" --seed {2**70} -o {{t}}/o", "--seed", "2**32"),
    C("sfl-run-threads-beyond-the-cores", SFL + " --threads 100000 -o {t}/o", "--threads 100000",
      "--force"),
    C("sfl-run-diverges", SFL + " --lr 1e30 -o {t}/o", "--lr", "loss is nan"),
    C("sfl-plan-seed-negative", "sfl plan {ds} --seed -1 -o {t}/p.json", "--seed", "2**32"),
    C("compare-seeds-too-big", f"compare {{ds}} -o {{t}}/s --seeds 0,{2**40}", "--seeds",
      "2**32"),
    C("compare-seeds-count-huge", "compare {ds} -o {t}/s --seeds 1000000000", "--seeds"),
    C("sfl-plan-out-a-fifo", "sfl plan {ds} --no-pilots --quick -o {x}", "fifo", "a FIFO",
      lambda w, t: special(t, "fifo")),
    # ---- damaged inputs that were internal errors (issue 31 item 6) --------------
    C("prepare-class-folder-not-utf8", "prepare {x} -o {t}/o", "ss\\xffh", "not valid UTF-8",
      lambda w, t: non_utf8_class(w, t)),
    C("prepare-csv-header-only", "prepare {x} -o {t}/o", "h.csv", "no flow rows",
      lambda w, t: write(t / "h.csv", "Flow Duration,Flow Bytes/s,Label\n")),
    C("train-seq-npy-nan", "train {x} -m lstm --view seq --batch-size 8 -o {t}/r -q", "seq.npy", "NaN",
      lambda w, t: seq_edited(t, lambda a: np.full_like(a, np.nan))),
    C("train-seq-npy-big-endian", "train {x} -m lstm --view seq --batch-size 8 -o {t}/r -q",
      "seq.npy",
      "byte order", lambda w, t: seq_edited(t, lambda a: a.astype(">f4"))),
    C("train-meta-label-out-of-range", "train {x} -m cnn -o {t}/r -q", "meta.parquet",
      "label 99", lambda w, t: meta_label(copy_of(w.ds, t), 99)),
    C("inspect-meta-label-negative", "inspect {x}", "meta.parquet", "label -1",
      lambda w, t: meta_label(copy_of(w.ds, t), -1)),
    C("train-resume-config-hand-edited", "train --resume {x} -q", "config.json", "lr is 'fast'",
      lambda w, t: edited(unfinished(w, t, (w.run / "checkpoint.pt").read_bytes()) / "config.json",
                          _set("train", "lr", value="fast")).parent),
    C("train-resume-config-workers-text", "train --resume {x} -q", "config.json",
      "workers is '2', not int",
      lambda w, t: edited(unfinished(w, t, (w.run / "checkpoint.pt").read_bytes()) / "config.json",
                          _set("train", "workers", value="2")).parent),
    C("sfl-run-plan-hand-edited", SFL + " --plan {x} -o {t}/o", "plan.json", "batch_size is 'x'",
      lambda w, t: write(t / "plan.json", json.dumps({
          "cuts": [1, 2], "assignment": [0], "topology_toml": "",
          "run": {"scheme": "hsfl", "batch_size": "x", "local_epochs": 1, "partition": "iid",
                  "train_limit": None, "seed": 0}}))),
    C("train-master-addr-unresolvable",
      "train {ds} -m cnn --workers 2 --master-addr no.such.host.invalid -o {t}/r -q",
      "--master-addr no.such.host.invalid", "cannot be resolved"),
    C("train-master-addr-not-local",
      "train {ds} -m cnn --workers 2 --master-addr 192.0.2.1 -o {t}/r -q",
      "--master-addr 192.0.2.1", "not an address of this machine"),
    # ---- demo ------------------------------------------------------------------
    C("demo-captures-missing", "demo --captures {t}/nocap -o {t}/d --quiet", "nocap"),
    C("demo-captures-empty", "demo --captures {x} -o {t}/d --quiet", "cap",
      make=lambda w, t: (t / "cap").mkdir() or t / "cap"),
    C("demo-unknown-skip", "demo --skip everything -o {t}/d --quiet", "everything"),
    C("demo-seeds-zero", "demo --seeds 0 -o {t}/d --quiet", "--seeds"),
    C("demo-unknown-model", "demo --captures {captures} --models cnn,bogus -o {t}/d --quiet",
      "bogus"),
    C("demo-out-under-a-file", "demo -o {file}/d --quiet", "plain-file", "not a directory",
      lambda w, t: write(t / "plain-file", "x")),
    # ---- second fuzz round: values that ran on without a word, or failed late --------
    C("train-stats-column-of-text", "train {x} -m xgboost --boost-rounds 2 -o {t}/r -q",
      "stats.parquet", "not numbers", stats_of_text),
    C("train-empty-test-split", f"train {{x}} -m cnn --epochs 1 {SMALL_CNN} -o {{t}}/r -q",
      "{x}", "the test split is empty", lambda w, t: split_moved(w, t, "test", "val")),
    C("evaluate-empty-test-split", "evaluate {run} {x}", "{x}", "test split is empty",
      lambda w, t: split_moved(w, t, "test", "val")),
    C("train-zero-channels", "train {ds} -m cnn --model-option channels=[0,0] -o {t}/r -q",
      "channels=[0, 0]", "size 0"),
    C("sfl-run-plan-unknown-scheme", SFL + " --plan {x} -o {t}/o", "plan.json", "'bogus'",
      lambda w, t: plan_with(w, t, run_scheme="bogus")),
    C("sfl-run-plan-scheme-edited", SFL + " --plan {x} -o {t}/o", "plan.json",
      "scheme 'sfl' is not its run's", lambda w, t: plan_with(w, t, scheme="sfl")),
    C("sfl-run-topology-misspelt-key", SFL + " --topology {x} -o {t}/o", "net.toml",
      "no key 'memory_byte'", lambda w, t: write(t / "net.toml", (
          w.sflrun / "topology.toml").read_text().replace("memory_bytes", "memory_byte", 1))),
    # ---- option values that reached numpy or torch, or ran on meaninglessly ----------
    C("sfl-run-trace-negative-seed", SFL + " --trace random:-1 -o {t}/o", "--trace",
      "[0, 2**32)"),
    C("sfl-plan-topology-seed-negative", "sfl plan {ds} --topology-seed -1 -o {t}/p.json",
      "--topology-seed", "[0, 2**32)"),
    C("sfl-run-negative-clients", SFL + " --clients -1 -o {t}/o", "--clients -1", "at least 1"),
    C("sfl-run-straggler-overflow", SFL + " --straggler-slowdown 1e300 -o {t}/o",
      "--straggler-slowdown", "factor of slowness"),
    C("sfl-run-dirichlet-infinite", SFL + " --partition dirichlet:inf -o {t}/o", "--partition",
      "finite"),
    C("sfl-run-min-available-without-sampling", SFL + " --min-available-clients 5 -o {t}/o",
      "--min-available-clients", "sampled rounds"),
    C("sfl-plan-zero-pilots", "sfl plan {ds} --pilots 0 -o {t}/p.json", "--pilots", ">= 1"),
    C("sfl-compare-target-negative", "sfl compare {ds} --target-accuracy -1 -o {t}/c",
      "--target-accuracy", "(0, 1]"),
    C("sfl-compare-seed-twice", "sfl compare {ds} --seeds 1,1 -o {t}/c", "--seeds", "twice"),
    C("compare-epochs-zero", "compare {ds} -o {t}/s --models cnn --seeds 1 --epochs 0",
      "--epochs", ">= 1"),
    C("compare-train-arg-unknown", "compare {ds} -o {t}/s --models cnn --seeds 1 --train-arg=--bogus",
      "--train-arg", "--bogus"),
    C("compare-workers-beyond-rows", "compare {ds} -o {t}/s --models cnn --seeds 1 --workers 99999",
      "--workers 99999", "training samples"),
    C("compare-no-model", "compare {ds} -o {t}/s --models '' --seeds 1", "--models",
      "at least one"),
    C("compare-cell-timeout-negative", "compare {ds} -o {t}/s --cell-timeout -1", "--cell-timeout"),
    C("evaluate-ablate-plot-without-ablate", "evaluate {run} {ds} --ablate-plot {t}/a.png",
      "--ablate-plot", "--ablate"),
    C("train-augment-jitter-overflow", "train {ds} -m cnn --augment jitter=inf -o {t}/r -q",
      "--augment", "log-normal sigma"),
    C("sfl-run-clients-beyond-memory", SFL + " --clients 100000000000 -o {t}/o",
      "--clients 100000000000", "GiB available"),
    C("sfl-run-fail-after-last-round", SFL + " --fail aggregator:0@round9 -o {t}/o",
      "--fail aggregator:0@round9", "after the last"),
    C("train-xgboost-lr-above-one", "train {ds} -m xgboost --lr 5 -o {t}/r -q", "--lr",
      "(0, 1]"),
    C("train-eval-batch-size-zero", "train {ds} -m cnn --eval-batch-size 0 -o {t}/r -q",
      "--eval-batch-size", ">= 1"),
    C("testbed-show-cpu-budget-zero", "testbed show {x} --cpu-budget 0", "--cpu-budget",
      "positive", lambda w, t: w.sflrun / "topology.toml"),
    C("testbed-show-nodes-huge", "testbed show --nodes 99999999", "99999999", "1 to 250"),
    C("demo-fresh-a-dataset", "demo --fresh -o {x} --quiet", "--fresh",
      make=lambda w, t: copy_of(w.ds, t)),
    # An empty path (an unset shell variable) is the current directory to pathlib:
    # prepare failed inside with "PosixPath('.') has an empty name".
    C("prepare-out-empty", 'prepare {captures} -o ""', "-o/--out", "an empty path"),
    C("train-out-empty", 'train {ds} -m cnn -o "" -q', "--out/-o", "an empty path"),
    C("sfl-run-dataset-empty", 'sfl run "" -o {t}/o', "DATASET", "an empty path"),
    C("evaluate-run-empty", 'evaluate "" {ds}', "RUN", "an empty path"),
    C("compare-out-empty", 'compare {ds} -o "" -q', "--out/-o", "an empty path"),
    # An empty list item, a number left out: ",4" used to be the cuts 4,4.
    C("sfl-run-cuts-empty-item", SFL + " --cuts ,4 -o {t}/o", "--cuts ',4'", "give one cut"),
    # Optimiser values beyond a float32: torch failed inside with "overflow"
    C("train-lr-beyond-float32", "train {ds} -m cnn --lr 1e300 -o {t}/r -q", "--lr 1e+300",
      "beyond a float32"),
    C("sfl-run-weight-decay-beyond-float32", SFL + " --weight-decay 1e39 -o {t}/o",
      "--weight-decay", "beyond a float32"),
    C("pretrain-lr-beyond-float32", "pretrain {ds} -o {t}/p --lr 1e300", "--lr", "3.4e+38"),
    C("sfl-run-aggregators-beyond-memory", SFL + " --aggregators 9223372036854775807 -o {t}/o",
      "--aggregators 9223372036854775807", "GiB available"),
    C("compare-train-arg-sets-the-model",
      "compare {ds} -o {t}/s --models cnn --seeds 1 --train-arg=--model=lstm --quiet",
      "--train-arg --model=lstm", "which the study sets"),
    C("compare-workers-empty-item", "compare {ds} -o {t}/o --workers 1,,2 -q", "--workers",
      "'1,,2'"),
]  # fmt: skip


def _run_case(case: Case, w: World, t: Path) -> tuple[list[str], str]:
    """The case's command line (its input built) and the line it must name."""
    x = case.make(w, t) if case.make is not None else t / "x"
    places = case.places(w, t, Path(x))
    return shlex.split(case.cmd.format(**places)), case.names.format(**places)


def _check_line(err: str, names: str, says: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert "internal error" not in line and "Traceback" not in err, line
    assert line.startswith("flowsplit: error: "), line
    assert names in line, line
    assert says in line, line
    return line


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_handled_line(case, world, tmp_path, capsys):
    # Prepare
    if "/sys/" in case.cmd and not _sys_refuses_writes():
        pytest.skip("/sys is missing or writable here: no output path that must be refused")
    argv, names = _run_case(case, world, tmp_path)
    capsys.readouterr()
    # Execute
    start = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - start
    # Assert: refused, in one line, and without hanging (issue 31: none over 30 s)
    assert rc == 2, f"exit {rc} for {argv}"
    _check_line(capsys.readouterr().err, names, case.says)
    assert took < 30, f"{took:.1f} s for {argv}"


def _sys_refuses_writes() -> bool:
    try:
        os.mkdir("/sys/flowsplit-sweep")
    except OSError as exc:
        return exc.errno in (errno.EPERM, errno.EACCES, errno.EROFS)
    os.rmdir("/sys/flowsplit-sweep")
    return False


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES], ids=errno.errorcode.get)
def test_a_full_disk_or_read_only_output_is_one_line_naming_the_file(
    code, tmp_path, monkeypatch, capsys
):
    # Prepare: the disk says no when the run writes its weights (tmpfs needs root: see
    # benchmarks/faults.py for the real full and read-only disks)
    import flowsplit.train.checkpoint as checkpoint

    def refused(path, state):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(checkpoint, "save_tensors", refused)
    data = write_synthetic(tmp_path / "ds", n=60, n_classes=2)
    # Execute
    rc = main(
        shlex.split(f"train {data} -m cnn --epochs 1 {SMALL_CNN} --batch-size 8 -o {tmp_path}/r -q")
    )
    # Assert
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"flowsplit: error: {tmp_path}/r/") and os.strerror(code) in err[0]


SUBPROCESS_CASES = ["train-truncated-npy", "sfl-run-unknown-scheme"]  # ~3 s each: a few only


@pytest.mark.slow  # a process each
@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_end_to_end_exit_code_and_no_traceback(name, world, tmp_path):
    # Prepare: the same case, run as the user runs it
    case = next(c for c in CASES if c.name == name)
    argv, names = _run_case(case, world, tmp_path)
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # a stray warning would be a line too
    # Execute
    done = subprocess.run(
        [sys.executable, "-m", "flowsplit", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    # Assert
    assert done.returncode == 2, done.stderr
    _check_line(done.stderr, names, case.says)


def test_a_real_bug_is_still_an_internal_error(world, tmp_path, capsys, monkeypatch):
    # Prepare: a bug deep inside a command (not the user's input)
    import flowsplit.data.store as store

    def broken(*args, **kwargs):
        raise KeyError("oops")

    monkeypatch.setattr(store, "load_dataset", broken)
    # Execute
    rc = main(["inspect", str(world.ds)])
    # Assert: reported as a bug, not dressed up as the user's error
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0].startswith("flowsplit: internal error: KeyError")


def test_nonsense_that_runs_is_warned_about(world, tmp_path, capsys):
    # Prepare: a batch larger than the training rows (issue 14 item 7: a warning, it trains)
    n_train = json.loads((world.ds / "manifest.json").read_text())["splits"]["train"]
    argv = f"train {world.ds} -m cnn --epochs 1 {SMALL_CNN} --batch-size {n_train + 1}"
    # Execute
    rc = main(shlex.split(argv) + ["-o", str(tmp_path / "r"), "-q"])
    # Assert
    err = capsys.readouterr().err
    assert rc == 0
    assert f"--batch-size {n_train + 1}" in err and f"the {n_train} training rows" in err


def test_an_output_through_a_symlink_and_to_standard_output(world, tmp_path, capsys):
    # Prepare: -o a link to a file in another folder (written through, the link kept)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.json"
    link = tmp_path / "m.json"
    link.symlink_to(target)
    # Execute
    rc_link = main(["evaluate", str(world.run), str(world.ds), "--out", str(link)])
    capsys.readouterr()
    rc_stdout = main(["evaluate", str(world.run), str(world.ds), "-o", "-"])
    printed = capsys.readouterr().out
    rc_csv = main(["predict", str(world.run), str(world.pcap), "-o", "-"])
    csv = capsys.readouterr().out
    # Assert
    assert rc_link == rc_stdout == rc_csv == 0
    assert link.is_symlink() and json.loads(target.read_text())["run"] == str(world.run)
    assert json.loads(printed) == json.loads(target.read_text())  # the JSON alone
    assert csv.splitlines()[0].endswith("predicted,confidence") and not (tmp_path / "-").exists()
