"""``--class-weight auto`` (the default): balanced for the neural models, none for XGBoost
(issue 32: balanced weights cut the cross-source drop; docs/generalisation.md)."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.train.config import TrainConfig
from flowsplit.train.metrics import class_weights


@pytest.mark.parametrize("model", ["cnn", "lstm", "convlstm", "convgru", "transformer"])
def test_auto_is_balanced_for_neural_models(model):
    cfg = TrainConfig(dataset="ds", model=model, out="run")
    assert cfg.class_weight == "auto"
    assert cfg.class_weight_mode == "balanced"
    w = class_weights(np.array([0, 0, 0, 1]), 2, cfg.class_weight_mode)
    np.testing.assert_allclose(w, [4 / 6, 4 / 2])


def test_auto_leaves_xgboost_unweighted_and_explicit_choices_win():
    assert TrainConfig(dataset="ds", model="xgboost", out="run").class_weight_mode == "none"
    cfg = TrainConfig(dataset="ds", model="cnn", out="run", class_weight="none")
    assert cfg.class_weight_mode == "none"
    assert class_weights(np.array([0, 1, 1]), 2, cfg.class_weight_mode) is None
    xgb = TrainConfig(dataset="ds", model="xgboost", out="run", class_weight="balanced")
    assert xgb.class_weight_mode == "balanced"


def test_unknown_class_weight_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError, match="auto, none or balanced, got 'inverse'"):
        TrainConfig(dataset="ds", model="cnn", out="run", class_weight="inverse")
