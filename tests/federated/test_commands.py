"""`flowsplit sfl run|profile` end to end, and their one-line errors."""

from __future__ import annotations

import json

import pytest

from flowsplit.cli import main
from flowsplit.federated.topology import read_topology
from tests.federated._toy import write_toy_dataset

pytest.importorskip("flowsplit.models.registry")

SMALL_CNN = ["--model", "cnn", "--model-option", "channels=[4,4]", "--model-option", "hidden=8"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "ds", n=120)


def test_sfl_run_writes_metrics_topology_and_model(dataset, tmp_path, capsys):
    # Prepare
    out = tmp_path / "run"
    argv = ["sfl", "run", str(dataset), "--scheme", "hsfl", *SMALL_CNN, "--cuts", "1,2",
            "--topology", "slow-uplinks", "--clients", "3", "--aggregators", "2",
            "--rounds", "2", "--partition", "dirichlet:0.5", "--batch-size", "16",
            "-o", str(out), "--quiet"]  # fmt: skip
    # Execute
    rc = main(argv)
    # Assert
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert [r["round"] for r in metrics["rounds"]] == [1, 2]
    first = metrics["rounds"][0]
    for key in ("accuracy", "macro_f1", "loss", "delay_s", "bytes", "bytes_total"):
        assert key in first
    assert metrics["totals"]["bytes_total"] == sum(r["bytes_total"] for r in metrics["rounds"])
    assert metrics["scheme"] == "hsfl" and metrics["cuts"] == [1, 2]
    topo = read_topology(out / "topology.toml")
    assert topo.name == "slow-uplinks" and topo.client_samples.sum() > 0
    assert json.loads((out / "config.json").read_text())["partition"] == "dirichlet:0.5"
    assert "wrote" in capsys.readouterr().out
    # A rerun from the written topology file gives the same bytes.
    again = tmp_path / "again"
    argv2 = [*argv[: argv.index("--topology")], "--topology", str(out / "topology.toml"),
             *argv[argv.index("--rounds"):]]  # fmt: skip
    argv2[argv2.index("-o") + 1] = str(again)
    assert main(argv2) == 0
    metrics2 = json.loads((again / "metrics.json").read_text())
    assert metrics2["totals"]["bytes_total"] == metrics["totals"]["bytes_total"]


def test_sfl_run_refuses_to_overwrite_a_run(dataset, tmp_path, capsys):
    # Prepare
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    # Execute
    rc = main(["sfl", "run", str(dataset), *SMALL_CNN, "-o", str(out), "--quiet"])
    # Assert: one line, nothing lost.
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0
    assert "exists and is not empty (use --overwrite" in err
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cuts", "2,9"], "not legal for a model of 4 blocks"),
        (["--scheme", "sfl", "--cuts", "1,2"], "sfl is two-tier"),
        (["--topology", "mesh"], "neither a preset"),
        (["--partition", "dirichlet:0"], "alpha must be a number > 0"),
        (["--model", "xgboost"], "not a neural model"),
        (["--clients", "0"], "at least 1 client"),
    ],
)
def test_bad_options_give_one_line_errors(dataset, tmp_path, capsys, extra, message):
    # Execute
    rc = main(["sfl", "run", str(dataset), *SMALL_CNN, *extra, "-o", str(tmp_path / "r")])
    # Assert
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith("flowsplit: error:") and "\n" not in err
    assert message in err


def test_sfl_profile_prints_blocks_and_legal_cuts(dataset, capsys):
    # Execute
    rc = main(["sfl", "profile", *SMALL_CNN, "--dataset", str(dataset)])
    # Assert
    out = capsys.readouterr().out
    assert rc == 0
    assert "conv1" in out and "head" in out
    assert "legal cuts" in out
    cut_rows = [line for line in out.splitlines()[-6:] if line.strip()[:1].isdigit()]
    assert len(cut_rows) == 6  # 4 blocks -> 6 legal (a, c)
    rc = main(["sfl", "profile", *SMALL_CNN, "--dataset", str(dataset), "--json"])
    assert json.loads(capsys.readouterr().out)["block_names"] == ["conv1", "conv2", "fc", "head"]
