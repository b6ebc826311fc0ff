"""The planner's leakage budget reader (flowsplit.planner.leakage)."""

from __future__ import annotations

import json
import math

import pytest

from flowsplit.errors import ConfigError, InputError
from flowsplit.planner.leakage import (
    allowed_cuts,
    allowed_pairs,
    budget_pairs,
    pair_leakage,
    read_leakage,
)

STUDY = {
    "cuts": {
        "1": {"bytes_recovered": 0.6, "dcor": 0.9},
        "2": {"bytes_recovered": 0.3, "dcor": 0.8},
        "3": {"bytes_recovered": 0.1, "dcor": 0.7},
    },
    "defences": {"noise": {"cuts": {"1": {"bytes_recovered": 0.2}}}},
}


def _write(tmp_path, doc, name="privacy.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_read_and_allow(tmp_path):
    path = _write(tmp_path, STUDY)
    assert read_leakage(path, "dcor") == {1: 0.9, 2: 0.8, 3: 0.7}
    assert allowed_cuts(path, "bytes_recovered", 0.3) == {2, 3}
    assert read_leakage(path, "bytes_recovered", defence="noise") == {1: 0.2}


def test_a_benchmark_file_with_one_dataset_is_read(tmp_path):
    path = _write(tmp_path, {"datasets": {"ndpi8": STUDY}})
    assert allowed_cuts(path, "bytes_recovered", 0.5) == {2, 3}
    two = _write(tmp_path, {"datasets": {"a": STUDY, "b": STUDY}}, "two.json")
    with pytest.raises(InputError, match="2 datasets"):
        read_leakage(two, "dcor")


def test_pair_leakage_is_the_worse_exposed_cut():
    leak = {1: 0.6, 2: 0.3, 3: 0.1}
    assert pair_leakage(leak, 1, 3) == 0.6
    assert pair_leakage(leak, 2, 2) == 0.3
    assert pair_leakage(leak, 2, 4) == math.inf  # not measured: unbounded
    pairs = [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)]
    assert allowed_pairs(pairs, leak, 0.3) == [(2, 2), (2, 3), (3, 3)]
    with pytest.raises(ConfigError, match=r"least leaky is \(3, 3\)"):
        allowed_pairs(pairs, leak, 0.05)


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"rows": 3}), "no 'cuts'"),
        (json.dumps({"cuts": {"1": {"dcor": 0.5}}}), "no numeric measure 'bytes_recovered'"),
        (json.dumps({"cuts": {"x": {"bytes_recovered": 0.5}}}), "not an integer"),
    ],
)
def test_bad_files_are_one_line_errors_naming_the_file(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError, match=match) as info:
        read_leakage(path, "bytes_recovered")
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_leakage(tmp_path / "none.json", "dcor")
    with pytest.raises(InputError, match="defence 'quant'"):
        read_leakage(_write(tmp_path, STUDY), "dcor", defence="quant")


def test_budget_pairs_for_the_planner(tmp_path):
    path = _write(tmp_path, STUDY)
    assert budget_pairs(None, "dcor", None) is None
    assert budget_pairs(path, "bytes_recovered", 0.3) == ((2, 2), (2, 3), (3, 3))
    assert budget_pairs(path, "bytes_recovered", 1.0) == (
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 2),
        (2, 3),
        (3, 3),
    )
    with pytest.raises(ConfigError, match="needs both"):
        budget_pairs(path, "dcor", None)
    other = _write(tmp_path, {**STUDY, "model": "lstm"}, "lstm.json")
    with pytest.raises(InputError, match="measured on model 'lstm', not 'cnn'"):
        budget_pairs(other, "dcor", 0.9, model="cnn")
    with pytest.raises(ConfigError, match="needs both"):
        budget_pairs(None, "dcor", 0.5)
    with pytest.raises(ConfigError, match=r"--max-leakage 0.5 on dcor .*least leaky is \(3, 3\)"):
        budget_pairs(path, "dcor", 0.5)
