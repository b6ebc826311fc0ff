"""``compare --comm-hooks``: DDP communication hooks as a dimension of the multi-worker cells,
compared with the plain all-reduce of the same seeds (fake engine, tiny dataset)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.experiments.dp import compare as compare_mod
from flowsplit.experiments.dp import records as records_mod
from flowsplit.experiments.dp.compare import (
    Cell,
    CompareConfig,
    cell_dir,
    check_cells,
    plan_cells,
    run_compare,
    train_command,
)
from flowsplit.report import page as page_mod
from tests.experiments.helpers import fake_allreduce, fake_metrics, make_dataset
from tests.experiments.test_compare import TINY_PNG

# What the fake engine does per hook: share of the plain bytes, and test samples it
# additionally gets wrong (powersgd loses accuracy, fp16 none).
BYTES_SHARE = {"none": 1.0, "fp16": 0.5, "powersgd": 0.1}
EXTRA_ERRORS = {"none": 0, "fp16": 0, "powersgd": 2}


def hook_metrics(cell: Cell) -> dict:
    """``fake_metrics`` with what a hooked DDP run records differently."""
    m = fake_metrics(cell)
    if cell.workers > 1 and cell.model != "xgboost":
        m["comm_hook"] = cell.hook
        m["comm_bytes"] = int(m["comm_bytes"] * BYTES_SHARE[cell.hook])
        m["exposed_comm_s"] = 0.01 * BYTES_SHARE[cell.hook] * m["epochs_run"]
        pred = list(m["test_predictions"])
        wrong = [i for i, (t, p) in enumerate(zip(m["test_labels"], pred, strict=True)) if t == p]
        for i in wrong[: EXTRA_ERRORS[cell.hook] + cell.seed % 2 * (cell.hook == "powersgd")]:
            pred[i] = (pred[i] + 1) % 3
        m["test_predictions"] = pred
        m["accuracy"] = float(np.mean(np.array(pred) == np.array(m["test_labels"])))
        m["macro_f1"] = m["accuracy"] - 0.01
    return m


def hook_runner(calls: list):
    def run(cell: Cell, cfg: CompareConfig) -> tuple[bool, str]:
        calls.append((cell, train_command(cell, cfg)))
        d = cell_dir(cfg.out, cell)
        d.mkdir(parents=True, exist_ok=True)
        (d / "metrics.json").write_text(json.dumps(hook_metrics(cell)))
        return True, ""

    return run


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_mod, "available_cores", lambda: 2)
    monkeypatch.setattr(records_mod, "CONTENDED_SHARE", math.inf)
    monkeypatch.setattr(page_mod, "figure_to_base64", lambda fig, dpi=100: TINY_PNG)
    ds = make_dataset(tmp_path / "ds")
    return ds, tmp_path


def test_hooks_apply_to_multi_worker_neural_cells_only():
    cells = plan_cells(["cnn", "xgboost"], [1, 2], [0], ["fp16", "none", "fp16"])
    assert [c.name for c in cells] == [
        "cnn/w1/seed0",
        "cnn/w2/seed0",
        "cnn/w2-fp16/seed0",
        "xgboost/w1/seed0",
        "xgboost/w2/seed0",
    ]
    # The default (no hooks) keeps the layout of the studies made before hooks existed.
    assert [c.name for c in plan_cells(["cnn"], [1, 2], [0])] == ["cnn/w1/seed0", "cnn/w2/seed0"]
    assert str(cell_dir("OUT", Cell("cnn", 2, 3, "powersgd"))).endswith("cnn/w2-powersgd/seed3")
    assert str(cell_dir("OUT", Cell("cnn", 2, 3))).endswith("cnn/w2/seed3")


def test_unknown_hook_and_a_second_hook_option_are_refused():
    with pytest.raises(ConfigError, match="--comm-hooks: unknown fp8"):
        CompareConfig(dataset="d", out="o", comm_hooks=["fp8"])
    # Checked before any cell runs (no dataset needed yet): a hook given as a train
    # option, abbreviated as argparse allows it too.
    for hooks, arg in ((["fp16"], "--comm-hook=powersgd"), (["none"], "--comm-ho=fp16")):
        cfg = CompareConfig(dataset="d", out="o", comm_hooks=hooks, train_args=[arg])
        with pytest.raises(ConfigError, match="sets comm_hook, which the study sets"):
            check_cells(cfg, None)


def test_cli_refuses_an_unknown_hook_in_one_line(study, capsys):
    from flowsplit.cli import main

    ds, root = study
    rc = main(["compare", str(ds), "-o", str(root / "s"), "--comm-hooks", "none,zip"])
    err = capsys.readouterr().err
    assert rc != 0 and "--comm-hooks: unknown zip" in err and "Traceback" not in err


def test_hook_study_pairs_each_hook_with_plain_runs_of_the_same_seed(study):
    # Prepare
    ds, root = study
    out = root / "hooks"
    fake_allreduce(out)
    calls: list = []
    # Execute: 3 seeds, cnn and xgboost, hooks fp16 and powersgd on 2 workers
    run_compare(
        ds,
        out,
        models=["cnn", "xgboost"],
        workers=[2],
        seeds=3,
        comm_hooks=["fp16", "powersgd"],
        quick=True,
        progress=False,
        run_cell_fn=hook_runner(calls),
    )
    # Assert: the command lines carry the hook; plain, centralised and XGBoost cells none
    for cell, cmd in calls:
        if cell.hook == "none":
            assert "--comm-hook" not in cmd
        else:
            assert cmd[cmd.index("--comm-hook") + 1] == cell.hook and cell.workers == 2
    # per seed: cnn 1, 2 plain, 2 fp16, 2 powersgd; xgboost 1, 2; and each model's same-cores
    # centralised cell (one process of 2 x 1 threads, XGBoost too), with --threads 2
    assert len(calls) == 3 * (4 + 2 + 2)
    same = [cmd for cell, cmd in calls if cell.threads is not None]
    assert len(same) == 6 and all(cmd[cmd.index("--threads") + 1] == "2" for cmd in same)
    assert all(cmd[cmd.index("--workers") + 1] == "1" for cmd in same)
    res = json.loads((out / "results.json").read_text())
    hooks = res["analysis"]["comm_hooks"]
    assert list(hooks) == ["cnn"] and list(hooks["cnn"]) == ["2"]
    by_hook = hooks["cnn"]["2"]
    assert list(by_hook) == ["none", "fp16", "powersgd"]
    plain = by_hook["none"]["comm_bytes_per_epoch"]["mean"]
    assert plain == pytest.approx(400_000 * 4 / 5)  # the fake engine's bytes over 5 epochs
    assert by_hook["fp16"]["comm_bytes_per_epoch"]["mean"] == pytest.approx(plain / 2)
    assert by_hook["powersgd"]["exposed_comm_per_epoch_s"]["mean"] == pytest.approx(0.001)
    # fp16 scores exactly as plain, seed by seed; powersgd loses 2 (odd seeds 3) of 15 samples
    fp16 = by_hook["fp16"]["vs_plain"]
    assert fp16["seeds"] == [0, 1, 2]
    assert fp16["accuracy"]["diff"]["mean"] == 0.0
    psgd = by_hook["powersgd"]["vs_plain"]["accuracy"]
    assert psgd["diff"]["mean"] == pytest.approx(-(2 + 3 + 2) / 3 / 15)
    # t = -7 over 2 df (p ~ 0.02): a shown difference is reported even below 5 seeds.
    assert psgd["n"] == 3 and psgd["verdict"] == "different"
    # The study's main comparison holds the plain runs only (3 seeds, not 9).
    cnn = res["analysis"]["models"]["cnn"]
    assert cnn["by_workers"]["2"]["n_runs"] == 3
    assert cnn["vs_central"]["2"]["accuracy"]["n"] == 3
    # The CSV names each run's hook; the reports carry the table and a sentence per hook.
    csv_text = (out / "results.csv").read_text()
    assert csv_text.splitlines()[0].split(",").count("comm_hook") == 1
    assert csv_text.count(",powersgd,") == 3
    md = (out / "report.md").read_text()
    assert "Communication hooks against the plain all-reduce" in md
    assert "powersgd" in md and "50 % of its all-reduce bytes" in md
    assert "Communication hooks against the plain all-reduce" in (out / "report.html").read_text()
    assert any("comm hook powersgd" in s and "10 % of its" in s for s in res["summary"])


def test_a_study_without_hooks_has_no_hook_table(study):
    ds, root = study
    out = root / "plain"
    fake_allreduce(out)
    run_compare(
        ds,
        out,
        models=["cnn"],
        workers=[2],
        seeds=2,
        quick=True,
        progress=False,
        run_cell_fn=hook_runner([]),
    )
    res = json.loads((out / "results.json").read_text())
    assert res["analysis"]["comm_hooks"] == {}
    assert "Communication hooks against the plain all-reduce" not in (out / "report.md").read_text()
