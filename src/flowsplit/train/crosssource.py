"""How far a model's score falls on data from elsewhere (``evaluate`` on another dataset).

A model scored on a dataset other than the one it trained on is scored on another
source (other networks, hosts, times): ``evaluate`` then puts the score beside the
run's own test score and says the drop, and whether the two datasets share capture
files (then the "other" source is not wholly other: the figure is optimistic).

The scoring of the cross-source figures (``flowsplit compare --cross-source``,
``benchmarks/generalisation.py``) lives here too: the classes both sources share with
enough flows (:func:`shared_classes`), the scores over them
(:func:`cross_source_scores`) and the open-set AUROC of the model's confidence on the
other source's classes it never saw (:func:`open_set_scores`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flowsplit.data.store import Dataset, load_dataset
from flowsplit.errors import FlowsplitError


def _own_test(run: Path) -> dict[str, float] | None:
    from flowsplit.result import RunResult

    try:
        r = RunResult.from_json(run)
    except (FlowsplitError, OSError, ValueError, KeyError, TypeError):
        return None
    return {"accuracy": float(r.accuracy), "macro_f1": float(r.macro_f1)}


def source_comparison(
    run: str | Path, doc: dict[str, Any], ds: Dataset, scores: dict[str, Any]
) -> dict[str, Any] | None:
    """The drop from the run's own test split to ``scores`` on ``ds``; None when ``ds``
    is the dataset the run trained on."""
    trained_on = doc.get("dataset", {}).get("path")
    if trained_on and Path(trained_on).resolve() == Path(ds.root).resolve():
        return None
    own = _own_test(Path(run))
    out: dict[str, Any] = {"trained_on": trained_on, "own_test": own}
    if own is not None:
        out["macro_f1_drop"] = own["macro_f1"] - float(scores["macro_f1"])
        out["accuracy_drop"] = own["accuracy"] - float(scores["accuracy"])
    shared = None
    if trained_on and Path(trained_on).is_dir():
        try:
            seen = set(load_dataset(trained_on).meta["source"].astype(str))
            here = set(ds.meta["source"].astype(str))
            shared = len(seen & here)
        except (FlowsplitError, OSError, KeyError):
            shared = None
    out["shared_capture_files"] = shared
    return out


def format_comparison(cmp: dict[str, Any], scores: dict[str, Any]) -> str:
    """One or two lines for ``evaluate``'s table."""
    own = cmp.get("own_test")
    if own is None:
        line = "  another dataset than the run's (its own test scores are not readable)"
    else:
        line = (
            f"  another dataset than the run's: macro-F1 {scores['macro_f1']:.4f} against "
            f"{own['macro_f1']:.4f} on its own test split (drop {cmp['macro_f1_drop']:+.4f}), "
            f"accuracy {scores['accuracy']:.4f} against {own['accuracy']:.4f}"
        )
    if cmp.get("shared_capture_files"):
        line += (
            f"\n  note: {cmp['shared_capture_files']} capture file(s) are in both datasets; "
            "the drop across sources is larger than this"
        )
    return line


# --- scoring on another source, restricted to the classes both have enough flows of ----
# (`flowsplit compare --cross-source`, benchmarks/generalisation.py)

MIN_CROSS_FLOWS = 20
"""Flows of a shared class the other source needs before the class is scored: on fewer,
one flow's call would pass as a finding."""

OPEN_SET_THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
"""``predict --min-confidence`` values of the open-set curve."""


def shared_classes(
    train_classes: list[str], other_counts: dict[str, int], min_flows: int = MIN_CROSS_FLOWS
) -> tuple[list[str], dict[str, int]]:
    """The training classes with at least ``min_flows`` flows on the other source (in
    training order), and the others with their flow counts there: a class scored on a
    handful of flows would pass a single flow off as a finding."""
    keep = [c for c in train_classes if other_counts.get(c, 0) >= min_flows]
    return keep, {c: int(other_counts.get(c, 0)) for c in train_classes if c not in keep}


def mean_f1(per_class_f1: dict[str, float | None], classes: list[str]) -> float:
    """Mean F1 over ``classes`` (a class without an F1, never predicted nor present: 0)."""
    vals = [per_class_f1.get(c) for c in classes]
    return float(np.mean([0.0 if v is None else v for v in vals])) if vals else float("nan")


def auroc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """P(score of a positive > score of a negative), ties halved (Mann-Whitney U over
    average ranks); None when either side is empty."""
    pos, neg = np.asarray(pos, dtype=np.float64), np.asarray(neg, dtype=np.float64)
    if not len(pos) or not len(neg):
        return None
    values = np.concatenate([pos, neg])
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average_rank = ends - (counts - 1) / 2  # 1-based rank, ties averaged
    r_pos = average_rank[inverse[: len(pos)]].sum()
    return float((r_pos - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def open_set_scores(
    proba: np.ndarray, y_model: np.ndarray, thresholds=OPEN_SET_THRESHOLDS
) -> dict[str, Any]:
    """Known flows (``y_model >= 0``: a class the model was trained on) against unknown
    ones (``-1``) by the model's top probability: its AUROC, and per ``predict
    --min-confidence`` threshold the coverage, the accuracy of what is accepted (an
    unknown flow given a class is wrong), the known flows kept and the unknown rejected."""
    proba, y = np.asarray(proba), np.asarray(y_model)
    known = y >= 0
    conf, pred = proba.max(1), proba.argmax(1)
    correct = known & (pred == y)
    curve = []
    for t in thresholds:
        acc = conf >= t
        curve.append(
            {
                "min_confidence": float(t),
                "coverage": float(acc.mean()) if len(acc) else None,
                "accuracy_accepted": float(correct[acc].mean()) if acc.any() else None,
                "known_coverage": float(acc[known].mean()) if known.any() else None,
                "unknown_rejected": float((~acc[~known]).mean()) if (~known).any() else None,
            }
        )
    return {
        "n_known": int(known.sum()),
        "n_unknown": int((~known).sum()),
        "auroc_confidence": auroc(conf[known], conf[~known]),
        "curve": curve,
    }


def cross_source_scores(
    proba: np.ndarray,
    y_dataset: np.ndarray,
    model_classes: list[str],
    dataset_classes: list[str],
    min_flows: int = MIN_CROSS_FLOWS,
) -> dict[str, Any]:
    """A model's scores on another source's flows, over the classes both share with at
    least ``min_flows`` flows there (a flow of one of them called any other class is an
    error). ``proba``: the model's probabilities of every flow of the other dataset;
    ``y_dataset``: their labels in its classes. Returns ``flows_per_class`` (model class
    -> flows there), ``scored`` and ``too_few`` (shared classes under ``min_flows``),
    ``macro_f1`` (mean F1 over ``scored``), ``accuracy``, ``per_class_f1``, ``n_scored``
    and ``open_set`` (:func:`open_set_scores`: the other classes as unknown)."""
    from flowsplit.train.evaluation import ClassMapping
    from flowsplit.train.metrics import classification_summary

    mapping = ClassMapping(list(model_classes), list(dataset_classes))
    y_model = mapping.to_model_labels(y_dataset)
    counts = {c: int((y_model == i).sum()) for i, c in enumerate(model_classes)}
    scored, _ = shared_classes(list(model_classes), counts, min_flows)
    too_few = {c: counts[c] for c in mapping.shared if c not in scored}
    rows = np.isin(y_model, [model_classes.index(c) for c in scored])
    pred = np.asarray(proba).argmax(1)
    summary = classification_summary(y_model[rows], pred[rows], list(model_classes))
    return {
        "flows_per_class": counts,
        "scored": scored,
        "too_few": too_few,
        "macro_f1": mean_f1(summary["per_class_f1"], scored),
        "accuracy": float((pred[rows] == y_model[rows]).mean()) if rows.any() else float("nan"),
        "per_class_f1": {c: summary["per_class_f1"][c] for c in scored},
        "n_scored": int(rows.sum()),
        "open_set": open_set_scores(proba, y_model),
    }


# --- flows whose label the model cannot see, and test rows the training rows hold ------

MDNS_PORT = 5353


def legacy_unicast_mdns(meta) -> np.ndarray:
    """The flows labelled MDNS of which exactly one end is port 5353 (``meta``: a
    dataset's meta frame with ``label_name``, ``port_a``, ``port_b``): legacy-unicast
    mDNS (RFC 6762 section 6.7), a one-shot query from an ephemeral port to port 5353
    and the unicast answer back to it. With the ports masked such a flow is a DNS
    message like any other: its label rests on the port alone (label-ambiguous), and a
    training set of 5353-to-5353 mDNS cannot teach it."""
    if not {"label_name", "port_a", "port_b"} <= set(meta.columns):
        return np.zeros(len(meta), dtype=bool)
    a = meta["port_a"].to_numpy() == MDNS_PORT
    b = meta["port_b"].to_numpy() == MDNS_PORT
    return (meta["label_name"].astype(str).to_numpy() == "MDNS") & (a != b)


def nearest_rows(
    train: np.ndarray, test: np.ndarray, chunk: int = 16
) -> tuple[np.ndarray, np.ndarray]:
    """For every row of ``test`` (n, d bytes) the index of the ``train`` row with the
    fewest differing bytes (Hamming distance), and that distance."""
    train, test = np.asarray(train), np.asarray(test)
    idx = np.empty(len(test), dtype=np.int64)
    dist = np.empty(len(test), dtype=np.int64)
    for a in range(0, len(test), chunk):
        d = (test[a : a + chunk, None, :] != train[None, :, :]).sum(2)
        j = d.argmin(1)
        idx[a : a + chunk], dist[a : a + chunk] = j, d[np.arange(len(j)), j]
    return idx, dist


def prefix_copies(
    train: np.ndarray,
    test: np.ndarray,
    y_train: np.ndarray,
    y_test: np.ndarray,
    lengths=(16, 32, 64, 128, 256, None),
) -> dict[str, dict[str, int]]:
    """Per prefix length K (None: the whole row): the test rows whose first K bytes are
    those of some training row, of which some such training row has the test row's
    class, and of which every such training row has another class."""
    out = {}
    for k in lengths:
        seen: dict[bytes, set] = {}
        for row, y in zip(np.asarray(train)[:, :k], y_train, strict=True):
            seen.setdefault(row.tobytes(), set()).add(y)
        hit = same = 0
        for row, y in zip(np.asarray(test)[:, :k], y_test, strict=True):
            s = seen.get(row.tobytes())
            hit += s is not None
            same += s is not None and y in s
        out[str(k or np.asarray(test).shape[1])] = {
            "test_rows_with_a_copy": hit,
            "a_copy_of_the_same_class": same,
            "copies_of_other_classes_only": hit - same,
        }
    return out
