"""Baselines of ``sfl compare`` that split nothing, on the same rows and seeds.

- ``majority``: always the most frequent class of the run's training rows;
- ``centralised``: the same model trained in one place on the union of the clients'
  shards (the run's training rows), ``rounds * local_epochs`` epochs, the same
  optimiser (Adam), learning rate and batch size, shuffled by the seed;
- ``fedavg``: plain FedAvg of the whole model on the clients: each round every client
  with data trains a copy of the global model for ``local_epochs`` over its shard, and
  the server averages the copies weighted by sample count. Its bytes per round are the
  model download and upload of every participating client (4-byte floats), the
  delay is not simulated (it has no cut and no aggregator to charge).

Each returns final test accuracy and macro-F1. These are the floors and ceilings the
split schemes are read against: a split scheme not above ``majority`` learned
nothing, and ``centralised`` is what the same rows can give without splitting.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from flowsplit.experiments.sfl.config import BASELINES
from flowsplit.federated.metrics import evaluate_model, macro_f1
from flowsplit.train.batches import shuffled_batches

FLOAT_BYTES = 4


def _batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, gen: torch.Generator):
    for idx in shuffled_batches(len(y), batch_size, gen):
        yield x[idx], y[idx]


def _train(model, x, y, *, epochs: int, batch_size: int, lr: float, gen) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        for xb, yb in _batches(x, y, batch_size, gen):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def majority(setup) -> dict[str, Any]:
    """The most frequent training class, predicted for every test row."""
    ys = np.concatenate([setup.client_data(i)[1].numpy() for i in range(len(setup.shards))])
    cls = int(np.bincount(ys, minlength=setup.dataset.n_classes).argmax())
    _, y = setup.eval_data()
    pred = np.full(len(y), cls)
    y = y.numpy()
    return {
        "accuracy": float(np.mean(pred == y)),
        "macro_f1": float(macro_f1(y, pred, setup.dataset.n_classes)),
        "bytes": 0.0,
        "class": cls,
    }


def centralised(setup) -> dict[str, Any]:
    """The whole model trained on the union of the shards (see the module docstring)."""
    cfg = setup.config
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    data = [setup.client_data(i) for i in range(len(setup.shards))]
    x = torch.cat([d[0] for d in data])
    y = torch.cat([d[1] for d in data])
    model = copy.deepcopy(setup.model)
    _train(
        model,
        x,
        y,
        epochs=cfg.rounds * cfg.local_epochs,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        gen=gen,
    )
    m = evaluate_model(model, *setup.eval_data(), setup.dataset.n_classes)
    return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "bytes": 0.0}


def fedavg(setup) -> dict[str, Any]:
    """Plain FedAvg of the whole model (see the module docstring)."""
    cfg = setup.config
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    global_model = copy.deepcopy(setup.model)
    n_params = sum(p.numel() for p in global_model.parameters())
    data = [setup.client_data(i) for i in range(len(setup.shards))]
    weights = np.array([len(d[1]) for d in data], dtype=np.float64)
    part = np.flatnonzero(weights > 0)
    total_bytes = 0.0
    for _ in range(cfg.rounds):
        states = []
        for i in part:
            local = copy.deepcopy(global_model)
            _train(
                local,
                *data[i],
                epochs=cfg.local_epochs,
                batch_size=cfg.batch_size,
                lr=cfg.lr,
                gen=gen,
            )
            states.append(local.state_dict())
        w = weights[part] / weights[part].sum()
        avg = {
            k: sum(float(wi) * s[k].double() for wi, s in zip(w, states, strict=True)).to(v.dtype)
            if v.is_floating_point()
            else v
            for k, v in global_model.state_dict().items()
        }
        global_model.load_state_dict(avg)
        total_bytes += 2.0 * FLOAT_BYTES * n_params * len(part)
    m = evaluate_model(global_model, *setup.eval_data(), setup.dataset.n_classes)
    return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "bytes": total_bytes}


RUNNERS = {"majority": majority, "centralised": centralised, "fedavg": fedavg}


def run_baselines(setup, names=BASELINES) -> dict[str, dict[str, Any]]:
    """Each baseline in ``names`` on ``setup``'s rows, seed and test split."""
    return {name: RUNNERS[name](setup) for name in names}


__all__ = ["BASELINES", "centralised", "fedavg", "majority", "run_baselines"]
