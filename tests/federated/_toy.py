"""Small block models and synthetic datasets for the federated tests.

The models follow the :class:`BlockModel` contract (one tensor between blocks) and
cover the block kinds split learning must handle: dense, 1-D convolution,
recurrent (LSTM returning its whole sequence) and dropout. The dataset gives every
class a learnable byte pattern, so a few rounds beat chance clearly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from flowsplit.data.store import write_dataset
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.setup import RunSetup, prepare_run
from flowsplit.federated.system.presets import resolve_topology
from flowsplit.models.base import BlockModel


class Scale(nn.Module):
    """Bytes 0..255 (any dtype) -> floats in [0, 1], reshaped per sample."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float32) / 255.0).reshape(x.shape[0], *self.shape)


class LastStep(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1]  # (B, T, H) -> (B, H)


class Rnn(nn.Module):
    def __init__(self, n_in: int, hidden: int):
        super().__init__()
        self.rnn = nn.LSTM(n_in, hidden, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]  # (B, T, H): the whole sequence crosses a cut


def toy_model(*, input_shape: tuple[int, ...], n_classes: int, kind: str = "mlp") -> BlockModel:
    """A 4-5 block model over a ``bytes`` view of ``input_shape == (L,)``."""
    (length,) = input_shape
    if kind == "mlp":
        blocks = [
            ("fc1", nn.Sequential(Scale((length,)), nn.Linear(length, 24), nn.ReLU())),
            ("fc2", nn.Sequential(nn.Linear(24, 16), nn.ReLU())),
            ("fc3", nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.1))),
            ("head", nn.Linear(16, n_classes)),
        ]
    elif kind == "cnn":
        blocks = [
            ("conv1", nn.Sequential(Scale((1, length)), nn.Conv1d(1, 4, 3, padding=1), nn.ReLU())),
            ("conv2", nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.ReLU(), nn.MaxPool1d(2))),
            ("fc", nn.Sequential(nn.Flatten(), nn.Linear(6 * (length // 2), 12), nn.ReLU())),
            ("head", nn.Linear(12, n_classes)),
        ]
    elif kind == "rnn":
        steps = 8
        blocks = [
            ("rnn1", nn.Sequential(Scale((steps, length // steps)), Rnn(length // steps, 10))),
            ("rnn2", Rnn(10, 10)),
            ("last", LastStep()),
            ("fc", nn.Sequential(nn.Linear(10, 10), nn.Tanh())),
            ("head", nn.Linear(10, n_classes)),
        ]
    else:
        raise ValueError(kind)
    return BlockModel(blocks, view="bytes", input_shape=input_shape, n_classes=n_classes, name=kind)


class ToyFactory:
    """Picklable factory (spawned processes rebuild the model from it)."""

    view = "bytes"

    def __init__(self, kind: str = "mlp"):
        self.kind = kind

    def __call__(self, *, input_shape, n_classes) -> BlockModel:
        return toy_model(input_shape=input_shape, n_classes=n_classes, kind=self.kind)


def write_toy_dataset(
    out: str | Path, *, n: int = 240, n_classes: int = 3, length: int = 32, seed: int = 0
) -> Path:
    """``n`` flows, a ``bytes`` view of ``length`` uint8, 70/10/20 % train/val/test,
    sites ``g0..g5`` in the ``group`` column."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    rng.shuffle(y)
    pattern = (np.arange(length)[None, :] * (y[:, None] + 1) * 37) % 256
    noise = rng.integers(0, 256, size=(n, length))
    data = np.where(rng.random((n, length)) < 0.6, pattern, noise).astype(np.uint8)
    n_train, n_val = int(n * 0.7), int(n * 0.1)
    split = np.array(["train"] * n_train + ["val"] * n_val + ["test"] * (n - n_train - n_val))
    classes = [f"c{k}" for k in range(n_classes)]
    meta = pd.DataFrame(
        {
            "flow_id": np.arange(n),
            "source": [f"s{i % 4}" for i in range(n)],
            "group": [f"g{i % 6}" for i in range(n)],
            "label": y.astype(np.int64),
            "label_name": [classes[k] for k in y],
            "split": split,
        }
    )
    return write_dataset(out, meta=meta, classes=classes, views={"bytes": data})


def toy_setup(dataset: Path, clients: int, aggregators: int, **config) -> RunSetup:
    """A one-round run of the toy MLP on a ``clients`` x ``aggregators`` heterogeneous
    topology (``config``: SFLConfig fields over small defaults), for the runner's tests."""
    cfg = SFLConfig(**{"rounds": 1, "batch_size": 16, "lr": 1e-2, "seed": 11, **config})
    topo = resolve_topology("heterogeneous", n_clients=clients, n_aggregators=aggregators)
    return prepare_run(cfg, dataset=dataset, model_fn=ToyFactory("mlp"), topology=topo)
