"""``evaluate`` across datasets: classes by name, unseen classes counted and named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flowsplit.cli import main as cli_main
from flowsplit.data.store import load_dataset, write_dataset
from flowsplit.train.evaluation import ClassMapping, score_by_name
from tests.train.synth import write_synthetic

N = 240  # 80 flows a class in the 3-class set


def test_scores_by_name_worked_out_by_hand():
    # Prepare: the model knows a, b, c; the dataset has c, a and an unseen d.
    mapping = ClassMapping(["a", "b", "c"], ["c", "a", "d"])
    y_dataset = np.array([0, 1, 2, 2, 1])  # c, a, d, d, a
    y_pred = np.array([2, 0, 1, 0, 1])  # c, a, b, a, b (model indices)
    # Execute
    s = score_by_name(y_dataset, y_pred, mapping)
    # Assert: rows 0, 1, 4 scored (true c, a, a; predicted c, a, b) -> 2 of 3 right.
    assert s["n_scored"] == 3 and s["accuracy"] == pytest.approx(2 / 3)
    # F1: a = 2*1/(2+1), b = 0 (predicted once, never true), c = 1. Macro-F1 over the
    # classes the dataset has (a, c): 5/6; with the absent b averaged in it was 5/9.
    assert s["per_class_f1"] == pytest.approx({"a": 2 / 3, "b": 0.0, "c": 1.0})
    assert s["macro_f1"] == pytest.approx(5 / 6)
    assert s["macro_f1_all_classes"] == pytest.approx(5 / 9)
    # Precision / recall / support: a predicted twice (1 right), true twice (1 found).
    assert s["per_class_precision"] == {"a": 1.0, "b": 0.0, "c": 1.0}
    assert s["per_class_recall"] == pytest.approx({"a": 0.5, "b": None, "c": 1.0})
    assert s["per_class_support"] == {"a": 2, "b": 0, "c": 1}
    assert s["unseen_classes"] == {"d": 2}
    assert s["unseen_predicted_as"] == {"d": {"a": 1, "b": 1}}
    assert s["absent_classes"] == ["b"] and s["shared_classes"] == ["a", "c"]


def test_class_names_match_ignoring_case():
    mapping = ClassMapping(["dns", "http"], ["DNS", "Http", "SSH"])
    assert mapping.shared == ["dns", "http"] and mapping.unseen == ["SSH"]
    assert mapping.to_model_labels(np.array([0, 1, 2])).tolist() == [0, 1, -1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An XGBoost model of the 3-class synthetic set (classes class0..class2)."""
    root = tmp_path_factory.mktemp("evaluate")
    data = write_synthetic(root / "ds3", n=N, n_classes=3)
    run = root / "run"
    argv = [
        "train",
        str(data),
        "--model",
        "xgboost",
        "--boost-rounds",
        "15",
        "--threads",
        "1",
        "-o",
        str(run),
        "-q",
    ]
    assert cli_main(argv) == 0
    return root, data, run


def _evaluate(run, data, capsys, *extra) -> dict:
    capsys.readouterr()
    assert cli_main(["evaluate", str(run), str(data), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_subset_of_the_classes_is_scored_and_the_absent_class_named(trained, capsys):
    # Prepare: a dataset of class0 and class1 only
    root, _, run = trained
    subset = write_synthetic(root / "ds2", n=160, n_classes=2, seed=5)
    # Execute
    s = _evaluate(run, subset, capsys, "--split", "all")
    # Assert: every flow scored, class2 named as absent, and the model is good on them.
    assert (s["n"], s["n_scored"], s["unseen_classes"]) == (160, 160, {})
    assert s["absent_classes"] == ["class2"] and s["shared_classes"] == ["class0", "class1"]
    assert sum(map(sum, s["confusion_matrix"])) == 160
    assert s["accuracy"] > 0.6  # chance is 1/3 (the model may still answer class2)


def test_an_extra_class_is_counted_named_and_left_out(trained, capsys):
    # Prepare: class0..class3; class3 (a quarter of the flows) was never trained on.
    root, _, run = trained
    superset = write_synthetic(root / "ds4", n=320, n_classes=4, seed=6)
    # Execute
    s = _evaluate(run, superset, capsys, "--split", "all")
    text_rc = cli_main(["evaluate", str(run), str(superset), "--split", "all"])
    text = capsys.readouterr().out
    # Assert
    assert s["unseen_classes"] == {"class3": 80} and s["n_scored"] == 240 and s["n"] == 320
    assert sum(s["unseen_predicted_as"]["class3"].values()) == 80
    assert set(s["unseen_predicted_as"]["class3"]) <= {"class0", "class1", "class2"}
    assert sum(map(sum, s["confusion_matrix"])) == 240 and s["accuracy"] > 0.6
    assert text_rc == 0 and "class3" in text and "80 flows of a class the model was not" in text


def test_classes_are_matched_by_name_not_by_index(trained, capsys, tmp_path):
    # Prepare: the training set itself with its class list reversed (labels renumbered)
    # and its statistics columns in reverse order.
    _, data, run = trained
    ds = load_dataset(data)
    meta = ds.meta.copy()
    meta["label"] = 2 - meta["label"]
    stats = ds.stats_frame()
    flipped = write_dataset(
        tmp_path / "flipped",
        meta=meta,
        classes=ds.classes[::-1],
        views={v: np.asarray(ds.view(v)) for v in ds.views if v != "stats"},
        stats=stats[stats.columns[::-1]],
    )
    # Execute
    same = _evaluate(run, data, capsys)
    other = _evaluate(run, flipped, capsys)
    # Assert: the same flows, so the same scores
    assert other["accuracy"] == same["accuracy"] and other["macro_f1"] == same["macro_f1"]
    assert other["confusion_matrix"] == same["confusion_matrix"]


def test_a_dataset_with_no_known_class_is_refused_in_one_line(trained, tmp_path, capsys):
    # Prepare: classes named otherwise
    _, data, run = trained
    ds = load_dataset(data)
    other = write_dataset(
        tmp_path / "other", meta=ds.meta, classes=["x", "y", "z"], stats=ds.stats_frame()
    )
    # Execute
    rc = cli_main(["evaluate", str(run), str(other)])
    # Assert
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "\n" not in err
    assert "none of its classes (x, y, z) is one the model was trained on" in err


def test_a_full_disk_or_a_refused_file_is_one_line_naming_it(trained, monkeypatch, capsys):
    import errno

    from flowsplit.train import commands, runs

    _, data, run = trained

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")  # no file name, as from write()

    monkeypatch.setattr(commands, "atomic_write_text", full)
    rc = cli_main(["evaluate", str(run), str(data), "--out", "/out/eval.json"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (
        "flowsplit: error: /out/eval.json: cannot write it (No space left on device)"
    )

    # Any command: a permission or read-only refusal names the file, no traceback.
    def refused(path):
        raise PermissionError(errno.EACCES, "Permission denied", "/runs/r/config.json")

    monkeypatch.setattr(runs, "load_trained_model", refused)
    rc = cli_main(["evaluate", str(run), str(data)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == "flowsplit: error: /runs/r/config.json: Permission denied"
