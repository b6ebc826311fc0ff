"""A whole leakage study and the `flowsplit sfl privacy` command on a tiny synthetic dataset."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from flowsplit.cli import main
from flowsplit.data.store import write_dataset
from flowsplit.errors import ConfigError, InputError
from flowsplit.federated.system.parts import split_model
from flowsplit.models.registry import build_model
from flowsplit.privacy.attack import AttackConfig
from flowsplit.privacy.defences import Defence
from flowsplit.privacy.study import PrivacyConfig, load_run_weights, run_study

SMALL_CNN = {"embed": 4, "channels": [4, 8], "hidden": 8, "kernel": 3, "pool": 2}


def _dataset(path, n=150, length=32, n_classes=3, seed=0):
    """Bytes whose first positions spell the class in ASCII; the rest is noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    data = rng.integers(1, 256, (n, length)).astype(np.uint8)
    for k in range(n_classes):
        data[y == k, :6] = np.frombuffer(f"GET /{k}".encode(), np.uint8)
    seq = rng.normal(size=(n, 8, 3)).astype(np.float32) + y[:, None, None]
    split = np.array(["train", "train", "train", "val", "test"] * (n // 5))
    meta = pd.DataFrame(
        {
            "flow_id": np.arange(n),
            "label": y,
            "split": split,
            "label_name": [f"c{k}" for k in y],
            "group": "g",
            "source": "s",
        }
    )
    return write_dataset(
        path,
        meta=meta,
        classes=[f"c{k}" for k in range(n_classes)],
        views={"bytes": data, "seq": seq},
    )


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return _dataset(tmp_path_factory.mktemp("privacy") / "toy")


def test_study_measures_every_cut_and_defence(toy):
    cfg = PrivacyConfig(
        model="cnn",
        model_options=SMALL_CNN,
        epochs=1,
        cuts=(1, 3),
        attack=AttackConfig(epochs=1),
        defences=(Defence("noise", 1.0),),
    )
    saved = []
    res = run_study(toy, cfg, checkpoint=lambda partial: saved.append(len(partial["cuts"])))
    assert sorted(res["cuts"]) == ["1", "3"]
    assert saved == [1, 2, 2, 2]  # after each cut, then each defended cut
    for rec in res["cuts"].values():
        for key in (
            "bytes_recovered",
            "ascii_recovered",
            "dcor",
            "label_probe_acc",
            "grad_label_acc",
        ):
            assert 0.0 <= rec[key] <= 1.0, key
    # The class prefix "GET /k" is an ASCII run every row has: the attacker
    # without activations gets the commonest one right, i.e. about a third.
    assert 0.2 < res["prior"]["ascii_recovered_prior"] < 0.5
    assert sorted(res["defences"]["noise"]["cuts"]) == ["1", "3"]
    assert res["defences"]["noise"]["cuts"]["1"]["dp_epsilon_equiv"] > 1
    assert res["reference"]["after"].startswith("conv1[0]")


def test_seq_view_reports_feature_errors(toy):
    cfg = PrivacyConfig(
        model="cnn",
        view="seq",
        model_options={"channels": [4, 8], "hidden": 8},
        cuts=(1,),
        epochs=1,
        attack=AttackConfig(epochs=2),
        gradients=False,
        reference=False,
    )
    rec = run_study(toy, cfg)["cuts"]["1"]
    assert set(rec["seq_nrmse_features"]) == {"f0", "f1", "f2"}
    assert 0.0 <= rec["seq_recovered"] <= 1.0 and "grad_label_acc" not in rec


def test_bad_cut_and_overlapping_splits(toy):
    with pytest.raises(ConfigError, match="cut 4 is not legal"):
        run_study(toy, PrivacyConfig(model_options=SMALL_CNN, cuts=(4,), epochs=0))
    with pytest.raises(ConfigError, match="disjoint"):
        PrivacyConfig(aux_split="test", eval_split="test")


def test_cli_writes_json_and_picture_and_marks_the_budget(toy, tmp_path, capsys):
    out = tmp_path / "priv"
    argv = [
        "sfl",
        "privacy",
        str(toy),
        "-o",
        str(out),
        "--epochs",
        "1",
        "--attack-epochs",
        "1",
        "--defences",
        "quant:2",
        "--max-leakage",
        "0.99",
        "--topology",
        "homogeneous",
        "--clients",
        "4",
        "--aggregators",
        "2",
        "--quiet",
    ]
    for k, v in SMALL_CNN.items():
        argv += ["--model-option", f"{k}={json.dumps(v)}"]
    assert main(argv) == 0
    doc = json.loads((out / "privacy.json").read_text())
    assert (out / "pareto.png").stat().st_size > 1000
    pareto = doc["pareto"]
    assert pareto["chosen"]["leakage"] <= 0.99
    assert len(pareto["pairs"]) == 6  # (a, c) with 1 <= a <= c <= 3
    assert "least delay with bytes_recovered <= 0.99" in capsys.readouterr().out
    # Redrawn from the results with a tighter budget and the cuts of a plan marked.
    (tmp_path / "plan.json").write_text(json.dumps({"cuts": [2, 3]}))
    redraw = [
        *argv[:5],
        "--redraw",
        "--max-leakage",
        "0.0",
        "--plan",
        str(tmp_path / "plan.json"),
        "--topology",
        "homogeneous",
        "--clients",
        "4",
        "--aggregators",
        "2",
    ]
    capsys.readouterr()
    assert main(redraw) == 0
    printed = capsys.readouterr().out
    assert "no cut pair has bytes_recovered <= 0.0" in printed
    assert "the plan of" in printed and "cuts (2, 3)" in printed
    doc = json.loads((out / "privacy.json").read_text())
    assert doc["pareto"]["chosen"] is None and doc["pareto"]["plan"]["cuts"] == [2, 3]
    # A second run refuses to overwrite; a bad defence is a one-line error.
    assert main(argv) == 2
    assert main([*argv[:4], str(tmp_path / "x"), "--defences", "blur"]) == 2
    assert "defence 'blur'" in capsys.readouterr().err


def test_weights_of_an_sfl_run_directory_are_loaded_block_by_block(tmp_path):
    def fresh(seed):
        torch.manual_seed(seed)
        return build_model("cnn", view="bytes", input_shape=(32,), n_classes=3, **SMALL_CNN)

    trained = fresh(1)
    split = split_model(trained, 1, 2)  # what `sfl run` saves: the parts in a row
    torch.save(
        nn.Sequential(split.client, split.aggregator, split.server).state_dict(),
        tmp_path / "model.pt",
    )
    (tmp_path / "config.json").write_text(json.dumps({"cuts": [1, 2]}))
    loaded = load_run_weights(fresh(2), tmp_path)
    for key, value in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    (tmp_path / "config.json").write_text(json.dumps({"cuts": [2, 2]}))  # wrong cuts
    with pytest.raises(InputError, match="model.pt"):
        load_run_weights(fresh(2), tmp_path)
    with pytest.raises(InputError, match="not an `sfl run` directory"):
        load_run_weights(fresh(2), tmp_path / "nowhere")
