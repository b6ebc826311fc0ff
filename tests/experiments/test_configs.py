"""The study's model list: the five by default, any registered model when named."""

from __future__ import annotations

import pytest

from flowsplit.errors import ConfigError
from flowsplit.experiments.dp.config import ALL_MODELS, CompareConfig


def test_a_study_trains_the_five_by_default_and_any_registered_model_when_named():
    assert CompareConfig(dataset="d", out="o").models == list(ALL_MODELS)
    assert CompareConfig(dataset="d", out="o", models=["transformer", "cnn"]).models == [
        "transformer",
        "cnn",
    ]
    with pytest.raises(
        ConfigError, match="--models: unknown transformer9; choose from .*transformer"
    ):
        CompareConfig(dataset="d", out="o", models=["transformer9"])
