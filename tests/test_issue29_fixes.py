"""Things a new user found simply wrong (issue 29), each pinned by a test that failed before.

- ``sfl run --plan`` ran sfl run's default 5 rounds, not the plan's;
- progress bars wrote ``\\r`` and cursor codes into redirected logs;
- a moved or copied study could not be resumed (its dataset was named by path);
- ``sfl privacy`` did not flag its own failed reference check.
"""

from __future__ import annotations

import json
import shutil

import pytest

from flowsplit.cli import main
from flowsplit.errors import ConfigError
from flowsplit.experiments.dp.compare import _check_fingerprint
from flowsplit.experiments.dp.config import CompareConfig
from flowsplit.federated import commands as fed_commands
from flowsplit.planner import study
from flowsplit.privacy.study import reference_check
from tests.federated._toy import ToyFactory, write_toy_dataset

SMALL_CNN = {"embed": 4, "channels": [4, 8], "hidden": 8, "kernel": 3, "pool": 2}
CURSOR_CODES = ("\r", "\x1b[")


def _model_options() -> list[str]:
    return [a for k, v in SMALL_CNN.items() for a in ("--model-option", f"{k}={json.dumps(v)}")]


@pytest.fixture
def toy(tmp_path):
    return write_toy_dataset(tmp_path / "toy", n=120)


def test_sfl_run_with_a_plan_runs_the_plans_rounds(toy, tmp_path, monkeypatch, capsys):
    # Prepare: a plan of 2 rounds (sfl run's own default is 5).
    monkeypatch.setattr(study, "registry_model", lambda name, view: ToyFactory("mlp"))
    monkeypatch.setattr(fed_commands, "_neural_model", lambda *a: ToyFactory("mlp"))
    plan = tmp_path / "plan.json"
    common = ["--clients", "4", "--aggregators", "2", "--batch-size", "16"]
    assert (
        main(["sfl", "plan", str(toy), *common, "--no-pilots", "--rounds", "2", "-o", str(plan)])
        == 0
    )
    assert json.loads(plan.read_text())["run"]["rounds"] == 2
    # Execute: no --rounds, then --rounds 3 (which replaces the plan's, with a note).
    assert main(["sfl", "run", str(toy), "--plan", str(plan), "-o", str(tmp_path / "a")]) == 0
    err_a = capsys.readouterr().err
    assert (
        main(
            [
                "sfl",
                "run",
                str(toy),
                "--plan",
                str(plan),
                "--rounds",
                "3",
                "-o",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    err_b = capsys.readouterr().err
    # Assert
    metrics_a = json.loads((tmp_path / "a" / "metrics.json").read_text())
    metrics_b = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert len(metrics_a["rounds"]) == metrics_a["config"]["rounds"] == 2
    assert len(metrics_b["rounds"]) == 3
    assert "--rounds 3 replaces the plan's 2 rounds" in err_b
    # The round log went to a captured (non-terminal) stderr: plain lines, no bar redraws.
    assert "round 2/2" in err_a
    assert not any(code in err_a for code in CURSOR_CODES)


def test_train_writes_plain_lines_without_bar_codes_off_a_terminal(toy, tmp_path, capsys):
    # Prepare / Execute: stderr is pytest's capture, not a terminal.
    out = tmp_path / "run"
    argv = ["train", str(toy), "--model", "cnn", "--epochs", "2", "-o", str(out)]
    assert main([*argv, *_model_options()]) == 0
    printed = capsys.readouterr()
    # Assert: one plain line per epoch and not a single carriage return or cursor code.
    assert (printed.out + printed.err).count("val macro-F1") == 2
    # Epochs are 1-based, as in the report's plots.
    assert "epoch 1/2:" in printed.out + printed.err and "epoch 2/2:" in printed.out + printed.err
    assert not any(code in printed.out + printed.err for code in CURSOR_CODES)


def test_a_copied_study_resumes_and_another_dataset_is_still_refused(toy, tmp_path):
    # Prepare: a study's compare.json written for the dataset where it was made.
    made = CompareConfig(dataset=str(toy), out=str(tmp_path / "study"), models=["cnn"])
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "compare.json").write_text(
        json.dumps({"fingerprint": made.fingerprint()})
    )
    # Execute: the study and its dataset copied elsewhere.
    moved = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "study", moved / "study")
    shutil.copytree(toy, moved / "toy")
    _check_fingerprint(
        CompareConfig(dataset=str(moved / "toy"), out=str(moved / "study"), models=["cnn"])
    )
    # Assert: a different dataset is still refused, naming the dataset.
    other = write_toy_dataset(tmp_path / "other", n=90, seed=5)
    with pytest.raises(ConfigError, match="different dataset"):
        _check_fingerprint(CompareConfig(dataset=str(other), out=str(moved / "study")))


def test_reference_check_rule():
    assert reference_check({"bytes_recovered": 0.99}) == "passed"
    assert reference_check({"bytes_recovered": 0.219}).startswith("failed: 21.9 %")
    assert reference_check({"seq_nrmse": 0.05}) == "passed"
    assert reference_check({"seq_nrmse": 0.8}).startswith("failed")


def test_sfl_privacy_flags_a_failed_reference_check(toy, tmp_path, capsys):
    # Prepare / Execute: an attacker trained for one epoch cannot invert even the stem.
    out = tmp_path / "priv"
    argv = ["sfl", "privacy", str(toy), "-o", str(out), "--epochs", "1", "--attack-epochs", "1"]
    argv += ["--topology", "homogeneous", "--clients", "4", "--aggregators", "2", "--quiet"]
    assert main([*argv, *_model_options()]) == 0
    # Assert: recorded in privacy.json and said on stderr, with what to do.
    reference = json.loads((out / "privacy.json").read_text())["reference"]
    assert reference["bytes_recovered"] < 0.9
    assert reference["check"].startswith("failed")
    err = capsys.readouterr().err
    assert "reference check failed" in err and "--attack-epochs" in err


def test_sfl_run_records_per_class_results_and_evaluate_reads_it(toy, tmp_path, capsys):
    # Prepare / Execute: a one-round split run of a small CNN, then evaluate on its run.
    out = tmp_path / "sfl"
    argv = ["sfl", "run", str(toy), "--rounds", "1", "--clients", "3", "--aggregators", "2"]
    assert main([*argv, "--model", "cnn", *_model_options(), "--quiet", "-o", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    csv = tmp_path / "flows.csv"
    capsys.readouterr()
    assert main(["evaluate", str(out), str(toy), "--json", "--predictions", str(csv)]) == 0
    scores = json.loads(capsys.readouterr().out)
    # Assert: the run's own test predictions give its final accuracy ...
    labels, predicted = metrics["test_labels"], metrics["test_predictions"]
    assert len(labels) == len(predicted) == len(metrics["test_flow_ids"]) == metrics["n_test"]
    right = sum(a == b for a, b in zip(labels, predicted, strict=True))
    assert right / len(labels) == pytest.approx(metrics["accuracy"], abs=1e-12)
    assert sum(map(sum, metrics["confusion_matrix"])) == len(labels)
    assert set(metrics["per_class_f1"]) == {"c0", "c1", "c2"}
    # ... evaluate rebuilds the same model from the run directory ...
    assert scores["accuracy"] == pytest.approx(metrics["accuracy"], abs=1e-12)
    assert scores["per_class_support"] == {
        c: sum(1 for v in labels if v == k) for k, c in enumerate(["c0", "c1", "c2"])
    }
    # ... and writes one row per flow with the probabilities of every class.
    import pandas as pd

    table = pd.read_csv(csv)
    assert len(table) == len(labels)
    assert {"flow_id", "source", "true", "predicted", "p_c0", "p_c1", "p_c2"} <= set(table.columns)
    assert table[["p_c0", "p_c1", "p_c2"]].sum(axis=1).to_numpy() == pytest.approx(1.0, abs=1e-5)
    assert (table["predicted"] == table["true"]).mean() == pytest.approx(metrics["accuracy"])
