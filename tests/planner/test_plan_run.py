"""``sfl run --plan``: a plan written by ``sfl plan`` runs exactly as planned."""

from __future__ import annotations

import json

import pytest

from flowsplit.cli import main
from flowsplit.federated import commands as fed_commands
from flowsplit.planner import study
from tests.federated._toy import ToyFactory, write_toy_dataset


@pytest.fixture
def toy_plan(tmp_path, monkeypatch):
    """A toy dataset and a plan for it (6 clients, 2 aggregators, no pilots)."""
    monkeypatch.setattr(study, "registry_model", lambda name, view: ToyFactory("mlp"))
    monkeypatch.setattr(fed_commands, "_neural_model", lambda *a: ToyFactory("mlp"))
    data = write_toy_dataset(tmp_path / "toy", n=120)
    plan = tmp_path / "plan.json"
    rc = main(
        [
            "sfl",
            "plan",
            str(data),
            "--clients",
            "6",
            "--aggregators",
            "2",
            "--no-pilots",
            "--topology",
            "heterogeneous",
            "--batch-size",
            "16",
            "--seed",
            "3",
            "--quiet",
            "-o",
            str(plan),
        ]
    )
    assert rc == 0
    return data, plan


def test_a_simulated_run_of_a_plan_costs_what_the_plan_predicts(toy_plan, tmp_path):
    # Prepare
    data, plan_path = toy_plan
    plan = json.loads(plan_path.read_text())
    out = tmp_path / "run"
    # Execute: the run's own options differ from the plan's (they must be replaced).
    rc = main(
        [
            "sfl",
            "run",
            str(data),
            "--plan",
            str(plan_path),
            "--rounds",
            "2",
            "--batch-size",
            "64",
            "--cuts",
            "2,2",
            "--quiet",
            "-o",
            str(out),
        ]
    )
    # Assert: the planned cuts, assignment and per-round bytes and delay, exactly.
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    config = metrics["config"]
    assert len(metrics["rounds"]) == metrics["totals"]["rounds"] == 2
    assert list(config["cuts"]) == plan["cuts"] and config["batch_size"] == 16
    assert config["seed"] == 3 and config["scheme"] == plan["scheme"]
    for rec in metrics["rounds"]:
        assert rec["bytes_total"] == pytest.approx(plan["predicted"]["bytes_per_round"], rel=1e-12)
        assert rec["delay_s"] == pytest.approx(plan["predicted"]["delay_s_per_round"], rel=1e-9)
    assert metrics["bytes_total"] == pytest.approx(2 * plan["predicted"]["bytes_per_round"])


def test_a_broken_plan_file_is_a_one_line_error(toy_plan, tmp_path, capsys):
    data, plan_path = toy_plan
    doc = json.loads(plan_path.read_text())
    doc["assignment"] = doc["assignment"][:-1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    rc = main(["sfl", "run", str(data), "--plan", str(bad), "--quiet", "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert str(bad) in err[0] and "each of the 6 clients" in err[0]
    rc = main(
        [
            "sfl",
            "run",
            str(data),
            "--plan",
            str(tmp_path / "none.json"),
            "--quiet",
            "-o",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 2 and "plan file not found" in capsys.readouterr().err


def test_a_plan_on_a_trace_is_made_on_round_1s_network_and_says_so(
    toy_plan, tmp_path, monkeypatch, capsys
):
    # Prepare: a trace congesting every path to aggregator 1 (where toy_plan's plan puts
    # every client) in round 1 only, and the same plan made with it.
    data, untraced_path = toy_plan
    trace = tmp_path / "trace.toml"
    tables = [f'link = "client:{i}/aggregator:1"\nbandwidth_scale = 0.001' for i in range(6)]
    trace.write_text("".join(f"[[trace]]\nround = 1\nuntil = 1\n{t}\n" for t in tables))
    plan_path = tmp_path / "traced.json"
    args = ["--clients", "6", "--aggregators", "2", "--topology", "heterogeneous"]
    args += ["--no-pilots", "--batch-size", "16", "--seed", "3", "--quiet"]
    capsys.readouterr()
    # Execute
    assert main(["sfl", "plan", str(data), *args, "--trace", str(trace), "-o", str(plan_path)]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "run"
    rc = main(
        ["sfl", "run", str(data), "--plan", str(plan_path), "--rounds", "2", "--quiet"]
        + ["-o", str(out)]
    )
    # Assert: the plan saw round 1's congestion (it moved every client off aggregator
    # 1) and says what it did not foresee; the run's round 1 costs what it predicts.
    assert rc == 0
    plan, untraced = json.loads(plan_path.read_text()), json.loads(untraced_path.read_text())
    assert plan["trace"]["events"] == 6 and plan["trace"]["round_1_events"] == 6
    assert plan["trace"]["planned_on"] == "round 1" and "trace: 6 change(s)" in printed
    assert "trace" not in untraced and untraced["clients_per_aggregator"] == [0, 6]
    assert plan["clients_per_aggregator"] == [6, 0]
    first, _ = json.loads((out / "metrics.json").read_text())["rounds"]
    assert first["delay_s"] == pytest.approx(plan["predicted"]["delay_s_per_round"], rel=1e-9)
