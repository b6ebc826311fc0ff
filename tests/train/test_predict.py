"""``flowsplit predict``: new captures -> views with the dataset's options -> classes."""

from __future__ import annotations

import csv

import pytest

from flowsplit.cli import main as cli_main
from tests.conftest import DEMO_CAPTURES

prepare = pytest.importorskip("flowsplit.data.prepare")
pytestmark = [
    pytest.mark.skipif(not hasattr(prepare, "extract_views"), reason="no extract_views yet"),
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
        ["--rounds", "20"]
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
    rc = cli_main(["predict", str(run), str(capture), "--output", str(tmp_path / "p.csv")])
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
