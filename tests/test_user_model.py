"""Bring your own model: ``--model package.module:factory`` following the block-list
contract is trained centrally, with 2 DDP workers and split (sfl run); a factory that
breaks the contract is a one-line error."""

from __future__ import annotations

import json
import textwrap

import pytest

from flowsplit.cli import main
from tests.federated._toy import write_toy_dataset

USER_MODULE = textwrap.dedent(
    '''
    """A user's own model, outside flowsplit: three blocks over the bytes view."""
    import torch
    from torch import nn

    from flowsplit.models.base import BlockModel


    class ToFloat(nn.Module):
        def forward(self, x):
            return x.float() / 255.0  # raw uint8 rows in, as the contract says


    def build(*, view, input_shape, n_classes, hidden=16):
        """A two-layer perceptron over the payload bytes."""
        width = int(torch.tensor(input_shape).prod())
        blocks = [
            ("embed", nn.Sequential(ToFloat(), nn.Flatten(), nn.Linear(width, hidden), nn.ReLU())),
            ("mid", nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())),
            ("head", nn.Linear(hidden, n_classes)),
        ]
        return BlockModel(blocks, view=view, input_shape=input_shape, n_classes=n_classes,
                          name="user-mlp")


    build.views = ("bytes",)


    def not_blocks(*, view, input_shape, n_classes):
        return nn.Linear(4, n_classes)
    '''
)


@pytest.fixture
def user_model(tmp_path, monkeypatch):
    """The toy dataset and a module ``my_models`` importable here and in workers."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "my_models.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods"))
    return write_toy_dataset(tmp_path / "toy", n=120)


def _train(data, out, *extra) -> dict:
    argv = ["train", str(data), "--model", "my_models:build", "--epochs", "2", "--seed", "1"]
    assert main([*argv, "--model-option", "hidden=8", "-o", str(out), "-q", *extra]) == 0
    return json.loads((out / "metrics.json").read_text())


def test_user_model_trains_centrally_and_is_evaluated(user_model, tmp_path, capsys):
    metrics = _train(user_model, tmp_path / "run")
    assert metrics["model"] == "my_models:build" and metrics["epochs_run"] == 2
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "run"), str(user_model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(metrics["accuracy"])


def test_user_model_is_split_and_trained_by_sfl(user_model, tmp_path):
    out = tmp_path / "sfl"
    argv = ["sfl", "run", str(user_model), "--model", "my_models:build", "--cuts", "1,2"]
    argv += ["--rounds", "1", "--clients", "3", "--aggregators", "2", "--quiet", "-o", str(out)]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["cuts"] == [1, 2] and len(metrics["rounds"]) == 1
    # The three tiers each ran one block: the profile names them.
    assert json.loads((out / "profile.json").read_text())["block_names"] == ["embed", "mid", "head"]


@pytest.mark.slow
def test_user_model_trains_data_parallel_like_one_process(user_model, tmp_path):
    one = _train(user_model, tmp_path / "w1", "--threads", "1")
    two = _train(user_model, tmp_path / "w2", "--workers", "2", "--threads", "1")
    assert two["workers"] == 2 and two["engine"] == "ddp"
    # The same global batches: the same losses, within float tolerance.
    assert two["loss_per_epoch"] == pytest.approx(one["loss_per_epoch"], rel=1e-4)


def test_a_factory_breaking_the_contract_is_one_line(user_model, tmp_path, capsys):
    for model, says in (
        ("my_models:not_blocks", "not a flowsplit.models.base.BlockModel"),
        ("my_models:nothing", "has no callable 'nothing'"),
        ("no_such_module:build", "cannot import no_such_module"),
    ):
        argv = ["train", str(user_model), "--model", model, "-o", str(tmp_path / "x")]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
