"""Pure pieces of the training engines, with expected values worked out by hand."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.result import COMMON_FIELDS, TRAIN_FIELDS, RunResult
from flowsplit.train.config import TrainConfig, parse_model_options
from flowsplit.train.distributed import CommMeter, DistEnv, ParallelLayout, read_dist_env
from flowsplit.train.metrics import (
    class_weights,
    classification_summary,
    confusion_matrix,
    macro_f1,
)


def test_confusion_and_f1_by_hand():
    # Prepare: 3 classes; class 2 never appears nor is predicted.
    y_true = np.array([0, 0, 0, 1, 1])
    y_pred = np.array([0, 0, 1, 1, 0])
    # Execute
    cm = confusion_matrix(y_true, y_pred, 3)
    s = classification_summary(y_true, y_pred, ["a", "b", "c"])
    # Assert: class a: TP 2, FP 1, FN 1 -> F1 4/6; class b: TP 1, FP 1, FN 1 -> F1 2/4.
    assert cm.tolist() == [[2, 1, 0], [1, 1, 0], [0, 0, 0]]
    assert s["per_class_f1"] == {"a": pytest.approx(2 / 3), "b": pytest.approx(0.5), "c": None}
    assert s["macro_f1"] == pytest.approx((2 / 3 + 0.5) / 2)
    assert s["accuracy"] == pytest.approx(3 / 5)
    assert macro_f1(y_true, y_pred, 3) == pytest.approx(s["macro_f1"])


def test_balanced_class_weights_by_hand():
    # 6 rows: class 0 x3, class 1 x2, class 2 x1, class 3 absent -> n / (3 * n_c).
    w = class_weights(np.array([0, 0, 0, 1, 1, 2]), 4, "balanced")
    np.testing.assert_allclose(w, [6 / 9, 6 / 6, 6 / 3, 0.0])
    assert class_weights(np.array([0, 1]), 2, "none") is None


def test_comm_meter_counts_overlap_once():
    # Prepare: intervals [0, 2] and [1, 3] overlap; [5, 6] stands alone -> busy 3 + 1.
    meter = CommMeter()
    meter._intervals = [(1.0, 3.0), (0.0, 2.0), (5.0, 6.0)]
    # Execute / Assert
    assert meter.busy_time() == pytest.approx(4.0)
    start = meter.launched(1024)
    meter.completed(start)
    assert meter.n_bytes == 1024 and meter.n_calls == 1


def test_read_dist_env_defaults_and_torchrun_values():
    assert read_dist_env({}) == DistEnv(0, 1, 0, 1, "127.0.0.1", 0, 0, False)
    env = read_dist_env(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RESTART_COUNT": "1",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
        }
    )
    assert env == DistEnv(3, 4, 1, 2, "10.0.0.1", 29500, 1, True)


def _cfg(**kw):
    return TrainConfig(dataset="d", model="cnn", out="r", **kw)


def test_layout_splits_the_global_batch_or_scales_lr():
    env2 = DistEnv(1, 2, 1, 2, "127.0.0.1", 1, 0, False)
    same = ParallelLayout.from_config(_cfg(batch_size=64, threads=1), env2)
    scaled = ParallelLayout.from_config(_cfg(batch_size=64, lr=0.01, scale_lr=True), env2)
    assert (same.per_worker_batch, same.global_batch, same.lr) == (32, 64, 1e-3)
    assert (scaled.per_worker_batch, scaled.global_batch, scaled.lr) == (64, 128, 0.02)
    assert same.ddp_enabled and not same.is_main and same.backend == "gloo"
    with pytest.raises(ConfigError, match="multiple of 2"):
        ParallelLayout.from_config(_cfg(batch_size=63), env2)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"workers": 0}, "--workers"),
        ({"lr": -1.0}, "--lr"),
        ({"device": "tpu"}, "--device"),
        ({"backend": "nccl", "device": "cpu"}, "needs CUDA"),
        ({"dask_scheduler": "localhost:8786"}, "tcp://"),
        ({"comm_hook": "int8"}, "--comm-hook must be one of none, fp16, bf16, powersgd"),
        ({"bucket_mb": 0.0}, "--bucket-mb"),
        ({"steps_per_epoch": 0}, "--steps-per-epoch"),
    ],
)
def test_config_errors_say_how_to_fix(kw, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(**kw)


def test_model_options_parse_json_values():
    assert parse_model_options(["channels=[8,16]", "dropout=0", "cell=gru"]) == {
        "channels": [8, 16],
        "dropout": 0,
        "cell": "gru",
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_model_options(["dropout"])


def test_run_result_round_trips_and_is_strict_json():
    # Prepare: a result with a NaN (undefined metric) and numpy scalars.
    # (every field of a training result; the SFL-only ones stay null)
    zero = {"list": [], "dict": {}, "str": "", "int": 0, "float": 0.0, "bool": False}
    hints = {f.name: str(f.type) for f in dataclasses.fields(RunResult)}
    fields = {
        f: next(v for k, v in zero.items() if k in hints[f])
        for f in (*COMMON_FIELDS, *TRAIN_FIELDS)
        if f not in ("extra", "schema_version")
    }
    fields.update(
        kind="train",
        model="cnn",
        view="bytes",
        engine="ddp",
        comm_time_s=np.float64(0.5),
        epoch_times_s=[1.0, float("nan")],
        per_class_f1={"a": None},
        config={"x": 1},
        env={},
    )
    r = RunResult(**fields)
    # Execute
    text = r.to_json()
    back = RunResult.from_json(text)
    # Assert
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert back.epoch_times_s == [1.0, None] and back.comm_time_s == 0.5
    assert back.model == "cnn" and back.schema_version == 2
    with pytest.raises(ValueError, match="lack fields"):
        RunResult.from_dict({"model": "cnn"})


def test_a_torchrun_restart_resumes_only_this_jobs_unfinished_run(tmp_path):
    from flowsplit.train.commands import check_restart

    # Prepare: RUN holds the config attempt 0 wrote.
    cfg = TrainConfig(dataset="ds", model="cnn", out=str(tmp_path), epochs=5, seed=1)
    (tmp_path / "config.json").write_text(json.dumps({"train": cfg.to_dict()}))
    # Execute / Assert: the same job (or a resumable change) passes ...
    check_restart(cfg)
    check_restart(TrainConfig(dataset="ds", model="cnn", out=str(tmp_path), epochs=9, seed=1))
    # ... another experiment in the same directory does not ...
    other = TrainConfig(dataset="ds", model="lstm", out=str(tmp_path), epochs=5, seed=2)
    with pytest.raises(ConfigError, match="differs in model, seed"):
        check_restart(other)
    # ... nor does a finished run.
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(ConfigError, match="finished run"):
        check_restart(cfg)


def test_rank_zero_values_cross_as_tensors_when_not_distributed():
    from flowsplit.train.distributed import broadcast_checkpoint, broadcast_flag, gather_floats

    layout = ParallelLayout.from_config(
        TrainConfig(dataset="d", model="cnn", out="o"),
        DistEnv(0, 1, 0, 1, "127.0.0.1", 0, 0, False),
    )
    assert broadcast_flag(1, layout) is True and gather_floats(3, layout) == [3.0]
    ckpt = {"epoch": 2}
    assert broadcast_checkpoint(ckpt, layout) is ckpt
