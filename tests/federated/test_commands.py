"""`flowsplit sfl run|profile` end to end, and their one-line errors."""

from __future__ import annotations

import json

import pytest

from flowsplit.cli import main
from flowsplit.federated.system.topology import read_topology
from tests.federated._toy import write_toy_dataset

pytest.importorskip("flowsplit.models.registry")

SMALL_CNN = ["--model", "cnn", "--model-option", "channels=[4,4]", "--model-option", "hidden=8"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("toy") / "ds", n=120)


def test_sfl_run_writes_metrics_topology_and_model(dataset, tmp_path, capsys):
    # Prepare
    out = tmp_path / "run"
    argv = [
        "sfl",
        "run",
        str(dataset),
        "--scheme",
        "hsfl",
        *SMALL_CNN,
        "--cuts",
        "1,2",
        "--topology",
        "slow-uplinks",
        "--clients",
        "3",
        "--aggregators",
        "2",
        "--rounds",
        "2",
        "--partition",
        "dirichlet:0.5",
        "--batch-size",
        "16",
        "-o",
        str(out),
        "--quiet",
    ]
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
    argv2 = [
        *argv[: argv.index("--topology")],
        "--topology",
        str(out / "topology.toml"),
        *argv[argv.index("--rounds") :],
    ]
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
        (["--partition", "dirichlet:0"], "alpha must be a finite number > 0"),
        (["--model", "xgboost"], "not a neural model"),
        (["--clients", "0"], "--clients 0: a topology needs at least 1"),
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


def test_sfl_config_from_dict_refuses_an_unknown_key_in_one_line():
    # Prepare
    from flowsplit.errors import ConfigError
    from flowsplit.federated.config import SFLConfig

    # Execute / Assert: a typo is an error naming the key, not a silently dropped field.
    with pytest.raises(ConfigError) as err:
        SFLConfig.from_dict({"scheme": "hsfl", "bogus_key": 1})
    assert "'bogus_key'" in str(err.value) and "\n" not in str(err.value)
    # A saved config round-trips.
    cfg = SFLConfig(scheme="sfl", cuts=(2, 2), rounds=3, exit_clients={1: 0})
    assert SFLConfig.from_dict(cfg.to_dict()) == cfg


def test_every_sfl_config_field_is_an_sfl_run_option_with_its_docstring(capsys):
    # Prepare: the real parser, and the fields' docstrings.
    from dataclasses import fields

    from flowsplit.cli import build_parser
    from flowsplit.config_args import cli_fields, field_docs
    from flowsplit.federated.commands import _config_from_args
    from flowsplit.federated.config import SFLConfig

    argv = [
        "sfl",
        "run",
        "DS",
        "-o",
        "OUT",
        "--cuts",
        "2",
        "--scheme",
        "sfl",
        "--rounds",
        "3",
        "--timeout",
        "5",
        "--train-limit",
        "40",
        "--sfl-version",
        "v2",
    ]
    # Execute
    cfg = _config_from_args(build_parser().parse_args(argv))
    with pytest.raises(SystemExit):
        main(["sfl", "run", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    # Assert: the options set the fields; the rest keep the dataclass defaults.
    assert cfg == SFLConfig(
        scheme="sfl", cuts=(2, 2), rounds=3, timeout_s=5.0, train_limit=40, sfl_version="v2"
    )
    docs = field_docs(SFLConfig)
    cli_names = {f.name for f in cli_fields(SFLConfig)}
    assert cli_names == {f.name for f in fields(SFLConfig)} - {"exit_clients", "hang_clients"}
    for name in cli_names:
        assert " ".join(docs[name].split()[:4]) in helptext, name
    assert "(default: 1,2)" in helptext and "(default: 60.0)" in helptext


def test_a_new_config_field_becomes_an_option_with_help_and_default():
    # Prepare: a config with one more field than another (the one edit a new field needs).
    import argparse
    from dataclasses import dataclass, field

    from flowsplit.config_args import add_config_arguments, cli, config_from_args

    @dataclass
    class Demo:
        mode: str = field(default="a", metadata=cli(choices=("a", "b")))
        """Which mode."""
        warmup_steps: int | None = None
        """Steps before the learning rate peaks."""

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Demo)
    # Execute
    got = config_from_args(Demo, parser.parse_args(["--warmup-steps", "7"]))
    text = " ".join(parser.format_help().split())
    # Assert
    assert got == Demo(mode="a", warmup_steps=7)
    assert "Steps before the learning rate peaks. (default: none)" in text
    assert "Which mode. (default: a)" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])
