"""The studies' typed results: written, read back equal, and a wrong file is one line."""

from __future__ import annotations

import json
import math

import pytest

from flowsplit.errors import InputError
from flowsplit.experiments.dp.result import read_compare_result
from flowsplit.experiments.sfl.result import SFLCompareResult, read_sfl_compare_result
from flowsplit.privacy.result import PrivacyResult, read_privacy_result
from tests.experiments.synthetic import paired_runs, study_results


def test_a_data_parallel_result_round_trips_through_its_file(tmp_path):
    c, p = paired_runs("cnn")
    result = study_results([*c, *p])
    result.to_json(tmp_path / "results.json")
    back = read_compare_result(tmp_path)
    assert back.to_dict() == result.to_dict()
    cmp = back.analysis.models["cnn"].vs_central["2"]
    assert cmp.claims.accuracy_verdict == cmp.accuracy.verdict
    assert back.analysis.baselines.majority.class_name == "web"
    assert (
        json.loads((tmp_path / "results.json").read_text())["analysis"]["baselines"]["majority"][
            "class"
        ]
        == "web"
    )


def test_nan_is_written_null_and_read_back_as_nan(tmp_path):
    doc = {"schemes": {}, "target_accuracy": math.nan, "surrogate": {}}
    SFLCompareResult.from_dict(doc).to_json(tmp_path / "results.json")
    text = (tmp_path / "results.json").read_text()
    assert '"target_accuracy": null' in text and '"surrogate": {}' in text
    back = read_sfl_compare_result(tmp_path / "results.json")
    assert math.isnan(back.target_accuracy) and back.surrogate is None


@pytest.mark.parametrize(
    ("reader", "content", "message"),
    [
        (read_compare_result, "{", "not valid JSON"),
        (read_compare_result, '{"schemes": {}}', "not the results of `flowsplit compare`"),
        (read_sfl_compare_result, '{"analysis": {}}', "not the results of `flowsplit sfl"),
        (read_sfl_compare_result, '{"schemes": {}, "schema_version": 9}', "schema version 9"),
        (read_sfl_compare_result, '{"schemes": {"hsfl": 1}}', "results.schemes['hsfl']: int"),
        (read_privacy_result, '{"model": "cnn"}', "privacy lacks view, config, cuts"),
    ],
)
def test_a_wrong_file_is_one_line_naming_it(tmp_path, reader, content, message):
    path = tmp_path / "doc.json"
    path.write_text(content)
    with pytest.raises(InputError) as err:
        reader(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(InputError, match="no such file") as err:
        read_privacy_result(tmp_path)
    assert str(err.value).count("not a privacy.json") == 1, err.value  # not "not X: ...(not X)"
    assert (
        PrivacyResult.from_dict(
            {
                "model": "cnn",
                "view": "bytes",
                "config": {},
                "cuts": {"1": {"block": "b1", "dcor": 0.5}},
            }
        )
        .cuts["1"]
        .number("dcor")
        == 0.5
    )
