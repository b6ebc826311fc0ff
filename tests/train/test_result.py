"""The one result schema: strict reading, both kinds, one-line errors naming the file."""

from __future__ import annotations

import json
import math
import re

import pytest

from flowsplit.errors import InputError
from flowsplit.experiments.dp.records import read_record
from flowsplit.result import RESULT_SCHEMA_VERSION, RoundRecord, RunResult, read_result
from tests.experiments.helpers import fake_metrics


def _train_metrics() -> dict:
    from flowsplit.experiments.dp.compare import Cell

    return fake_metrics(Cell("cnn", 2, 0))


def _round(i: int) -> dict:
    return {
        "round": i,
        "accuracy": 0.5 + i / 10,
        "macro_f1": 0.4,
        "loss": 1.0 / i,
        "delay_s": 2.0,
        "clock_s": 2.0 * i,
        "wall_s": 0.1,
        "bytes_total": 1000 * i,
        "messages_total": 6,
        "bytes": {"client-agg": {"up": {"smashed": 1000 * i}}},
        "participants": 3,
        "lost": [],
    }


def _sfl_result() -> RunResult:
    rounds = [RoundRecord.from_dict(_round(i)) for i in (1, 2)]
    return RunResult(
        kind="sfl",
        model="cnn",
        view="bytes",
        engine="sfl-sim",
        workers=1,
        threads_per_worker=1,
        device="cpu",
        backend="sim",
        seed=3,
        wall_time_s=0.2,
        accuracy=0.7,
        macro_f1=0.4,
        classes=["a", "b"],
        n_train=90,
        n_test=10,
        config={"scheme": "hsfl"},
        env={},
        scheme="hsfl",
        cuts=[1, 2],
        topology="flat",
        n_clients=3,
        n_aggregators=1,
        rounds=rounds,
        bytes_total=3000,
        delay_total_s=4.0,
        totals={"bytes_total": 3000, "rounds": 2},
    )


def test_a_training_result_reads_back_with_every_field(tmp_path):
    # Prepare
    (tmp_path / "metrics.json").write_text(json.dumps(_train_metrics()))
    # Execute
    r = read_result(tmp_path)
    # Assert
    assert r.kind == "train" and r.workers == 2 and r.schema_version == RESULT_SCHEMA_VERSION
    assert r.epochs_run == 5 and len(r.epoch_times_s) == 5
    assert r.rounds is None and r.bytes_total is None  # the SFL fields: not measured


def test_an_sfl_result_round_trips_its_rounds_with_their_extra_keys(tmp_path):
    # Execute
    _sfl_result().to_json(tmp_path / "metrics.json")
    back = read_result(tmp_path / "metrics.json")
    # Assert: typed fields, and what the scheme added kept flat in the round
    assert [r.round for r in back.rounds] == [1, 2]
    assert back.rounds[1].bytes_total == 2000 and back.rounds[1].detail["participants"] == 3
    raw = json.loads((tmp_path / "metrics.json").read_text())
    assert raw["rounds"][0] == _round(1)
    assert raw["bytes_total"] == 3000 and raw["epoch_times_s"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(schema_version=1), "schema version 1, this flowsplit reads version 2"),
        (lambda m: m.pop("schema_version"), "lack fields schema_version"),
        (lambda m: (m.pop("accuracy"), m.pop("classes")), "lack fields accuracy, classes"),
        (lambda m: m.update(kind="dpi"), "kind 'dpi' is not one of train, sfl"),
        (lambda m: m.pop("test_predictions"), "lack fields test_predictions"),
        (lambda m: m.update(workers="2"), "mistyped workers (str, not int)"),
        (lambda m: m.update(epoch_times_s=None), "lack fields epoch_times_s"),
        # the items of a list or table, not only its type (a report drew them)
        (lambda m: m.update(classes=[1]), "mistyped classes[0] (int, not str)"),
        (lambda m: m.update(confusion_matrix=[1]), "mistyped confusion_matrix[0] (int, not list)"),
        (lambda m: m.update(per_class_f1={"a": "x"}), "per_class_f1['a'] (str, not float)"),
        (lambda m: m.update(confusion_matrix=[[1]]), "confusion_matrix is not"),
        (lambda m: m["test_labels"].pop(), "test_labels but"),
    ],
)
def test_a_wrong_result_is_one_line_naming_the_file_and_field(tmp_path, change, message):
    # Prepare
    m = _train_metrics()
    change(m)
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    # Execute / Assert
    with pytest.raises(InputError, match=re.escape(message)) as info:
        read_result(tmp_path)
    assert str(info.value).startswith(str(tmp_path / "metrics.json"))
    assert "\n" not in str(info.value)


def test_an_sfl_result_without_its_rounds_is_refused(tmp_path):
    m = _sfl_result().to_dict()
    del m["rounds"]
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(InputError, match="lack fields rounds"):
        read_result(tmp_path)
    m = _sfl_result().to_dict()
    del m["rounds"][1]["clock_s"]
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(InputError, match=r"rounds\[1\] lack fields clock_s"):
        read_result(tmp_path)


def test_missing_and_undefined_values_are_told_apart(tmp_path):
    # A missing file says so; a NaN accuracy (written null) reads back as NaN, not 0.
    with pytest.raises(InputError, match="no such file"):
        read_result(tmp_path)
    m = _train_metrics()
    m["accuracy"] = None
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    assert math.isnan(read_result(tmp_path).accuracy)


def test_a_finished_run_of_another_schema_is_an_error_not_a_run_to_redo(tmp_path):
    # Prepare: no metrics -> unfinished (None); an old-schema file -> error, not None.
    assert read_record(tmp_path, cores=2) is None
    m = _train_metrics()
    del m["kind"]
    m["schema_version"] = 1
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    # Execute / Assert
    with pytest.raises(InputError, match="schema version 1"):
        read_record(tmp_path, cores=2)
    _sfl_result().to_json(tmp_path / "metrics.json")
    with pytest.raises(InputError, match="result of a 'sfl' run, not of a training run"):
        read_record(tmp_path, cores=2)
