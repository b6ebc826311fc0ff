"""``flowsplit predict``: new captures -> views with the dataset's options -> classes."""

from __future__ import annotations

import csv

import pytest

from flowsplit.cli import main as cli_main
from tests.conftest import DEMO_CAPTURES

pytestmark = [
    pytest.mark.skipif(not (DEMO_CAPTURES / "dns").is_dir(), reason="demo captures missing"),
]


@pytest.fixture(scope="module")
def demo_dataset(tmp_path_factory):
    """Two classes of the lab capture, prepared by the real pipeline."""
    root = tmp_path_factory.mktemp("predict")
    for name in ("dns", "http"):  # one folder per class
        (root / "captures" / name).mkdir(parents=True)
        for pcap in sorted((DEMO_CAPTURES / name).glob("*.pcap")):
            (root / "captures" / name / pcap.name).symlink_to(pcap)
    out = root / "ds"
    assert cli_main(["prepare", str(root / "captures"), "-o", str(out), "--quiet"]) == 0
    return out


@pytest.mark.parametrize("model", ["xgboost", "cnn"])
def test_predict_classifies_new_captures(demo_dataset, tmp_path, model, capsys):
    # Prepare: a quick model of each kind
    run = tmp_path / "run"
    extra = (
        ["--boost-rounds", "20"]
        if model == "xgboost"
        else ["--epochs", "2", "--model-option", "channels=[8,8]"]
    )
    assert (
        cli_main(
            [
                "train",
                str(demo_dataset),
                "--model",
                model,
                "-o",
                str(run),
                "-q",
                "--threads",
                "1",
                *extra,
            ]
        )
        == 0
    )
    capture = sorted((DEMO_CAPTURES / "dns").glob("*.pcap"))[0]
    # Execute
    rc = cli_main(["predict", str(run), str(capture), "--out", str(tmp_path / "p.csv")])
    # Assert: every flow gets one of the trained classes and a probability
    assert rc == 0
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert rows and {r["predicted"] for r in rows} <= {"dns", "http"}
    assert all(0.0 <= float(r["confidence"]) <= 1.0 for r in rows)
    if model == "xgboost":  # DNS over UDP/53 is easy: the statistics model gets it right
        assert sum(r["predicted"] == "dns" for r in rows) / len(rows) > 0.9


def test_predict_refuses_a_run_that_did_not_finish(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert cli_main(["predict", str(tmp_path / "run"), "x.pcap"]) == 2
    assert "not a flowsplit run directory" in capsys.readouterr().err


def test_predict_refuses_a_model_trained_on_idx_sessions(tmp_path, capsys):
    # Prepare: a tiny IDX set, a one-epoch CNN on it.
    from tests.data.test_prepare_cli import _idx_inputs

    assert (
        cli_main(["prepare", str(_idx_inputs(tmp_path)), "-o", str(tmp_path / "ds"), "--quiet"])
        == 0
    )
    run = tmp_path / "run"
    assert (
        cli_main(
            [
                "train",
                str(tmp_path / "ds"),
                "--model",
                "cnn",
                "--epochs",
                "1",
                "--model-option",
                "channels=[4,4]",
                "-q",
                "-o",
                str(run),
            ]
        )
        == 0
    )
    capsys.readouterr()
    # Execute
    capture = next(DEMO_CAPTURES.glob("dns/*.pcap"))
    rc = cli_main(["predict", str(run), str(capture)])
    # Assert
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "trained on a dataset of idx files" in err[0]


def test_train_refuses_a_dataset_without_a_val_split(demo_dataset, tmp_path, capsys):
    import shutil

    import pandas as pd

    ds = tmp_path / "ds"
    shutil.copytree(demo_dataset, ds)
    meta = pd.read_parquet(ds / "meta.parquet")
    meta.loc[meta.split == "val", "split"] = "train"
    meta.to_parquet(ds / "meta.parquet")
    rc = cli_main(["train", str(ds), "--model", "cnn", "-q", "-o", str(tmp_path / "run")])
    assert rc == 2 and "the val split is empty" in capsys.readouterr().err


def test_predict_min_confidence_labels_the_unsure_flows_unknown(demo_dataset, tmp_path, capsys):
    # Prepare: a quick XGBoost model and its predictions without a threshold
    run = tmp_path / "run"
    assert (
        cli_main(
            [
                "train",
                str(demo_dataset),
                "--model",
                "xgboost",
                "--boost-rounds",
                "20",
                "--threads",
                "1",
                "-q",
                "-o",
                str(run),
            ]
        )
        == 0
    )
    # Flows of the two trained classes and of others (https, mqtt): unsure ones among them.
    captures = [
        str(sorted((DEMO_CAPTURES / c).glob("*.pcap"))[0]) for c in ("dns", "http", "https", "mqtt")
    ]
    assert cli_main(["predict", str(run), *captures, "-o", str(tmp_path / "all.csv")]) == 0
    plain = list(csv.DictReader((tmp_path / "all.csv").open()))
    levels = sorted({float(r["confidence"]) for r in plain})
    assert len(levels) >= 2, "need flows of two confidence levels"
    threshold = (levels[0] + levels[-1]) / 2  # between two levels: no rounding doubt
    # Execute
    argv = [
        "predict",
        str(run),
        *captures,
        "-o",
        str(tmp_path / "p.csv"),
        "--min-confidence",
        str(threshold),
    ]
    assert cli_main(argv) == 0
    # Assert: the sure flows keep their class, the others are "unknown", nothing else moves
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert len(rows) == len(plain)
    for before, after in zip(plain, rows, strict=True):
        sure = float(before["confidence"]) >= threshold
        assert after["predicted"] == (before["predicted"] if sure else "unknown")
        assert after["confidence"] == before["confidence"]
    n_unknown = sum(r["predicted"] == "unknown" for r in rows)
    assert 0 < n_unknown < len(rows)
    assert f"({n_unknown} below --min-confidence: unknown)" in capsys.readouterr().out
    # A value that is no probability is a one-line usage error.
    assert cli_main(["predict", str(run), captures[0], "--min-confidence", "1.5"]) == 2
    assert "not a probability between 0 and 1" in capsys.readouterr().err
    # The library call gives the command's table (no CSV round trip), the same refusal.
    from flowsplit.errors import ConfigError
    from flowsplit.train.evaluation import predict_captures

    table = predict_captures(run, captures, threshold)
    assert list(table["predicted"]) == [r["predicted"] for r in rows]
    assert [f"{c:.4f}" for c in table["confidence"]] == [
        f"{float(r['confidence']):.4f}" for r in rows
    ]
    with pytest.raises(ConfigError, match="not a probability between 0 and 1"):
        predict_captures(run, captures, float("nan"))
