"""Data parallelism is the centralised optimisation: 2 gloo workers vs 1 process.

Multi-process, CPU, gloo, 127.0.0.1, free ports. The four models and the two
all-reduce hooks train in one 2-worker process group (the real ``run_training`` per
run, one spawn for all, :func:`ddp_runs`), so the tests cost one start-up, not six.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flowsplit.cli import main as cli_main
from flowsplit.models.registry import neural_models
from flowsplit.result import RunResult
from flowsplit.train.checkpoint import load_checkpoint
from flowsplit.train.config import TrainConfig
from flowsplit.train.distributed import ParallelLayout, process_group, read_dist_env
from flowsplit.train.launch import launch_local
from flowsplit.train.loop import run_training, train_worker
from tests.train.synth import write_synthetic

pytestmark = pytest.mark.slow

# A few steps: 48 training rows, global batch 16 (8 per worker), 2 epochs = 6 steps.
# Dropout off: its masks are seeded per rank and would differ from one process's.
COMMON = {"epochs": 2, "batch_size": 16, "patience": 0, "quiet": True, "threads": 1}
OPTIONS = {
    "cnn": {"dropout": 0.0, "channels": [4, 8], "hidden": 16, "embed": 4},
    "lstm": {"dropout": 0.0, "input_dropout": 0.0, "hidden_size": 8, "hidden": 16},
    "convlstm": {"dropout": 0.0, "channels": [3, 4], "hidden": 16},
    "convgru": {"dropout": 0.0, "channels": [3, 4], "hidden": 16},
    "transformer": {
        "dropout": 0.0,
        "patch": 8,
        "embed": 4,
        "dim": 8,
        "heads": 2,
        "ff": 16,
        "depth": 2,
        "stem": 3,  # the convolutional stem too (max-pools included)
        "stem_width": 4,
    },
}


def _train_all_in_one_group(cfgs: list[TrainConfig]) -> None:
    """Worker body: every config trained in turn inside one process group."""
    env = read_dist_env()
    first = ParallelLayout.from_config(cfgs[0], env)
    torch.set_num_threads(first.threads_per_worker)
    with process_group(first, env):
        for cfg in cfgs:
            run_training(cfg, ParallelLayout.from_config(cfg, env), env, resume=False)


def _last_weights(run) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoint.pt")["model"]


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """The directory of every run of both tests below, trained in one process group:
    ``{model}-1`` (one process) and ``{model}-2`` (2 workers) per neural model, and the
    2-worker CNN with plain (``none``) and ``fp16`` all-reduce."""
    tmp_path = tmp_path_factory.mktemp("ddp")
    # Prepare
    # 48 training rows, imbalanced: the balanced class weights differ from 1.
    data = write_synthetic(tmp_path / "data", n=80, class_share=(0.6, 0.25, 0.15))
    weighting = {
        "cnn": "balanced",
        "lstm": "balanced",
        "convlstm": "none",
        "convgru": "none",
        "transformer": "balanced",
    }
    cfgs = {
        m: TrainConfig(
            dataset=str(data),
            model=m,
            out=str(tmp_path / f"{m}-{{}}"),
            model_options=OPTIONS[m],
            class_weight=weighting[m],
            **COMMON,
        )
        for m in neural_models()
    }
    central = {m: dataclasses.replace(c, out=c.out.format("1")) for m, c in cfgs.items()}
    ddp = {m: dataclasses.replace(c, out=c.out.format("2"), workers=2) for m, c in cfgs.items()}
    # The same small CNN run with plain and with fp16-compressed all-reduce.
    hooks_data = write_synthetic(tmp_path / "hooks-data", n=80)
    base = TrainConfig(
        dataset=str(hooks_data),
        model="cnn",
        out=str(tmp_path / "run"),
        workers=2,
        model_options=OPTIONS["cnn"],
        **COMMON,
    )
    hooks = [
        dataclasses.replace(base, out=str(tmp_path / hook), comm_hook=hook, bucket_mb=0.001)
        for hook in ("none", "fp16")
    ]
    # The CNN with dropout on (half the units), its masks drawn for the global batch, on
    # 45 training rows: steps of 16, 16 and 13, whose rows split 7 / 6 between the ranks.
    uneven = write_synthetic(tmp_path / "uneven-data", n=75, class_share=(0.6, 0.25, 0.15))
    dropping = dataclasses.replace(
        cfgs["cnn"],
        dataset=str(uneven),
        model_options={**OPTIONS["cnn"], "dropout": 0.5},
        dropout_masks="global",
    )
    central["dropout"] = dataclasses.replace(dropping, out=str(tmp_path / "dropout-1"))
    # The same run with dropout off: the check that dropout acted at all.
    central["dropout-off"] = dataclasses.replace(
        dropping, out=str(tmp_path / "dropout-off"), model_options=OPTIONS["cnn"]
    )
    ddp["dropout"] = dataclasses.replace(dropping, out=str(tmp_path / "dropout-2"), workers=2)
    # Execute
    for cfg in central.values():
        train_worker(cfg)
    runs = [*ddp.values(), *hooks]
    launch_local(_train_all_in_one_group, (runs,), n_workers=2, threads_per_worker=1)
    return tmp_path


def test_two_gloo_workers_end_with_the_centralised_weights(ddp_runs):
    tmp_path = ddp_runs
    # Assert
    for m in neural_models():
        a, b = _last_weights(tmp_path / f"{m}-1"), _last_weights(tmp_path / f"{m}-2")
        worst = max((a[k] - b[k]).abs().max().item() for k in a)
        assert worst < 1e-5, f"{m}: 2 workers differ from 1 process by {worst:.2e}"
        r1 = RunResult.from_json(tmp_path / f"{m}-1")
        r2 = RunResult.from_json(tmp_path / f"{m}-2")
        assert (r1.engine, r2.engine, r2.workers) == ("centralised", "ddp", 2)
        # Same global batches: the same number of samples per epoch in both runs.
        assert r1.loss_per_epoch == pytest.approx(r2.loss_per_epoch, rel=1e-4)
        # Each of the 3 steps per epoch all-reduces every gradient once (float32).
        n_params = sum(v.numel() for k, v in a.items() if not k.endswith(("mean", "std")))
        assert r2.comm_bytes == 2 * 3 * 4 * n_params
        assert r1.comm_bytes == 0 and 0 < r2.comm_time_s < sum(r2.epoch_times_s)


def test_global_dropout_masks_make_two_workers_the_centralised_run(ddp_runs):
    # Dropout 0.5 on: per-rank masks would part the runs at the first step; an odd
    # training split: a dropped row or an unweighted short last step would too.
    a, b = _last_weights(ddp_runs / "dropout-1"), _last_weights(ddp_runs / "dropout-2")
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, f"dropout on: 2 workers differ from 1 process by {worst:.2e}"
    r1 = RunResult.from_json(ddp_runs / "dropout-1")
    r2 = RunResult.from_json(ddp_runs / "dropout-2")
    assert r1.loss_per_epoch == pytest.approx(r2.loss_per_epoch, rel=1e-5)
    off = _last_weights(ddp_runs / "dropout-off")  # the same data and run, dropout off
    assert max((a[k] - off[k]).abs().max().item() for k in a) > 1e-3  # dropout did act


def test_cli_two_workers_writes_one_result_with_every_rank_measured(tmp_path, capsys):
    # Prepare
    data = write_synthetic(tmp_path / "data", n=80)
    run = tmp_path / "run"
    # Execute
    opts = "--model cnn --workers 2 --threads 1 --epochs 2 --batch-size 8 -q --model-option embed=4"
    rc = cli_main(["train", str(data), "-o", str(run), *opts.split()])
    # Assert
    assert rc == 0
    r = RunResult.from_json(run)
    assert (r.workers, r.threads_per_worker, r.backend) == (2, 1, "gloo")
    assert len(r.peak_rss_mb) == 2 and all(m > 50 for m in r.peak_rss_mb)
    assert len(r.epoch_times_s) == r.epochs_run == 2 and len(r.val_macro_f1_per_epoch) == 2
    assert len(r.test_predictions) == len(r.test_labels) == len(r.test_flow_ids) == r.n_test
    assert r.config["workers"] == 2 and r.extra["layout"]["per_worker_batch"] == 4
    assert (run / "weights.safetensors").is_file() and (run / "train.log").is_file()
    assert "2 worker(s) x 1 thread(s)" in capsys.readouterr().out


def test_fp16_hook_trains_and_sends_half_the_bytes(ddp_runs):
    tmp_path = ddp_runs
    # Assert
    plain, half = (RunResult.from_json(tmp_path / h) for h in ("none", "fp16"))
    assert (plain.comm_hook, half.comm_hook) == ("none", "fp16")
    assert 2 * half.comm_bytes == plain.comm_bytes > 0
    # Tiny buckets: several all-reduces a step, and the same number with either hook.
    assert half.extra["comm_calls_last_epoch"] == plain.extra["comm_calls_last_epoch"] > 3
    for r in (plain, half):
        assert 0 <= r.exposed_comm_s <= r.comm_time_s
    # 16-bit gradients follow the float32 optimisation closely over a few steps.
    assert half.loss_per_epoch == pytest.approx(plain.loss_per_epoch, rel=1e-2)
    a, b = _last_weights(tmp_path / "none"), _last_weights(tmp_path / "fp16")
    assert 0 < max((a[k] - b[k]).abs().max().item() for k in a) < 1e-2
