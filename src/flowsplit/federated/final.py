"""What an ``sfl run`` adds once its rounds are done, so that it has the results of a
``train`` run: the final global model scored per class on the evaluation split (per-class
F1, confusion matrix, each flow's true and predicted label and flow id in
``metrics.json``), the whole model as ``weights.safetensors``, and the model and dataset
sections of ``config.json`` that ``evaluate`` and ``predict`` read to rebuild it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowsplit.federated.system.parts import join_parts, split_model
from flowsplit.outputs import atomic_write_json
from flowsplit.result import read_result
from flowsplit.train.metrics import classification_summary
from flowsplit.train.runs import (
    WEIGHTS_NAME,
    dataset_section,
    model_section,
    predict_proba,
    save_weights,
)


def global_model(setup: Any, model_state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The run's :class:`~flowsplit.models.base.BlockModel` holding the final weights.

    ``model_state`` is the client, aggregator and server parts in a row (``0.layers.i``,
    ``1.layers.j``, ``2.layers.k``); they are loaded into the parts of a copy of the
    initial model and joined back block by block.
    """
    model = copy.deepcopy(setup.model)
    split = split_model(model, *setup.config.cuts)
    join_parts(split.client, split.aggregator, split.server).load_state_dict(model_state)
    parts = [split.client, split.aggregator, split.server]
    blocks = [block for part in parts for block in part.layers]
    for name, block in zip(model.block_names, blocks, strict=True):
        model.blocks[name] = block
    return model.eval()


def finish_run(out: str | Path, setup: Any, model_state: dict[str, torch.Tensor], model_fn) -> None:
    """Score the final model per class, save it whole, and describe it in ``config.json``."""
    out = Path(out)
    ds, view = setup.dataset, setup.view
    model = global_model(setup, model_state)
    rows = ds.split_indices(setup.config.eval_split)
    proba = predict_proba(model, np.asarray(ds.view(view)[rows]))
    y_true = ds.labels[rows].astype(np.int64)
    y_pred = proba.argmax(1) if len(rows) else np.zeros(0, dtype=np.int64)
    summary = classification_summary(y_true, y_pred, list(ds.classes))
    result = read_result(out)
    result.per_class_f1 = summary["per_class_f1"]
    result.confusion_matrix = summary["confusion_matrix"]
    result.test_labels = [int(v) for v in y_true]
    result.test_predictions = [int(v) for v in y_pred]
    result.test_flow_ids = [str(v) for v in ds.meta["flow_id"].to_numpy()[rows]]
    result.to_json(out / "metrics.json")
    name = getattr(model_fn, "name", None) or model.name
    options = dict(getattr(model_fn, "options", {}) or {})
    save_weights(model, out / WEIGHTS_NAME, {"model": name, "view": view})
    config_path = out / "config.json"
    doc = json.loads(config_path.read_text(encoding="utf-8"))
    options = _full_options(name, options)
    doc["model"] = model_section(name, "torch", ds, view, options)
    doc["dataset"] = dataset_section(ds, view)
    atomic_write_json(config_path, doc)


def _full_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A registry model's defaults with ``options`` over them (a user model: ``options``)."""
    from flowsplit.models.registry import MODEL_SPECS, model_options

    return {**model_options(name), **options} if name in MODEL_SPECS else options
