"""Model option values: a bad one is refused in one line naming the model and option;
edge values that make sense still build."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from flowsplit.errors import ConfigError
from flowsplit.models.registry import build_estimator, build_model
from flowsplit.models.xgb import XGBoostClassifier

NAN = float("nan")

# (model, view, sample shape, options, what the message must say)
BAD_NEURAL = [
    ("cnn", "bytes", (784,), {"pool": 99999}, r"pool=99999: pool must be at most 784.*\(784,\)"),
    ("cnn", "bytes", (784,), {"pool": 0}, r"pool=0: pool must be an integer >= 1"),
    ("cnn", "bytes", (784,), {"pool": -1}, r"pool=-1: pool must be an integer >= 1"),
    ("cnn", "bytes", (784,), {"kernel": 99999}, r"kernel=99999: kernel must be at most 1567"),
    ("cnn", "bytes", (784,), {"kernel": 0}, r"kernel=0: kernel must be an integer >= 1"),
    ("cnn", "bytes", (784,), {"kernel": -3}, r"kernel=-3: kernel must be an integer >= 1"),
    ("cnn", "seq", (16, 5), {"kernel": 33}, r"kernel must be at most 31.*\(16, 5\)"),
    ("cnn", "bytes", (784,), {"hidden": 0}, r"cnn cannot be built with hidden=0: hidden must be"),
    ("cnn", "bytes", (784,), {"hidden": -4}, r"hidden must be an integer >= 1"),
    ("cnn", "bytes", (784,), {"channels": [8, -1]}, r"channels must be integers >= 1"),
    ("cnn", "bytes", (784,), {"channels": [8.5, 8]}, r"channels must be a list of integers"),
    ("cnn", "bytes", (784,), {"kernel": 2.5}, r"kernel=2.5: kernel must be an integer"),
    ("cnn", "bytes", (784,), {"dropout": 1.0}, r"dropout must be a number in \[0, 1\)"),
    ("cnn", "bytes", (784,), {"dropout": NAN}, r"dropout=nan: dropout must be a finite number"),
    ("lstm", "pkt_bytes", (6, 64), {"bidirectional": "abc"}, r"bidirectional must be true or"),
    ("lstm", "pkt_bytes", (6, 64), {"bidirectional": 2}, r"bidirectional=2: bidirectional must"),
    ("lstm", "pkt_bytes", (6, 64), {"hidden": 0}, r"hidden=0: hidden must be an integer >= 1"),
    ("lstm", "pkt_bytes", (6, 64), {"hidden_size": -1}, r"hidden_size must be an integer >= 1"),
    ("lstm", "pkt_bytes", (6, 64), {"input_dropout": -0.1}, r"input_dropout must be a number"),
    ("lstm", "bytes", (784,), {"step_bytes": -4}, r"step_bytes must be an integer >= 0"),
    ("convlstm", "bytes", (784,), {"rows_per_frame": 0}, r"rows_per_frame must be an integer"),
    ("convgru", "pkt_bytes", (6, 64), {"rows_per_frame": 0}, r"rows_per_frame=0: rows_per"),
    ("convlstm", "pkt_bytes", (6, 64), {"rows_per_frame": 99999}, r"rows_per_frame must be at"),
    ("convgru", "pkt_bytes", (6, 64), {"kernel": 99}, r"kernel must be at most 15.*8x8 frame"),
    ("convgru", "pkt_bytes", (6, 64), {"hidden": 0}, r"hidden=0: hidden must be an integer >= 1"),
    ("convlstm", "pkt_bytes", (6, 64), {"dropout": 1.5}, r"dropout must be a number in"),
    ("transformer", "pkt_bytes", (6, 64), {"patch": 99999}, r"patch must be at most 64"),
    ("transformer", "pkt_bytes", (6, 64), {"dropout": NAN}, r"dropout must be a finite number"),
    ("transformer", "pkt_bytes", (6, 64), {"dropout": 1.0}, r"dropout must be a number in"),
]


@pytest.mark.parametrize(("name", "view", "shape", "options", "message"), BAD_NEURAL)
def test_bad_neural_option_values_are_refused_in_one_line(name, view, shape, options, message):
    with pytest.raises(ConfigError, match=message) as caught:
        build_model(name, view=view, input_shape=shape, n_classes=3, **options)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(name)


@pytest.mark.parametrize(
    ("name", "view", "shape", "options"),
    [
        ("cnn", "bytes", (784,), {"pool": 1}),
        ("cnn", "bytes", (9,), {"kernel": 9, "pool": 9}),  # both the input length, odd
        ("cnn", "bytes", (784,), {"dims": 2, "kernel": 99}),  # 2-D applies min(kernel, 3)
        ("cnn", "seq", (4, 5), {}),  # the default kernel 5 over 4 packets: padded, as before
        ("cnn", "seq", (16, 5), {"pool": 99, "dropout": 0}),  # seq pools min(pool, 2)
        ("lstm", "pkt_bytes", (6, 64), {"bidirectional": True, "embed": 0, "hidden": 1}),
        ("convlstm", "bytes", (784,), {"rows_per_frame": 28}),
        ("convgru", "pkt_bytes", (6, 64), {"rows_per_frame": 8, "kernel": 7}),
        ("convgru", "pkt_bytes", (4, 8), {}),  # 2x4 frames: the default rows_per_frame is fine
        ("transformer", "pkt_bytes", (4, 16), {"patch": 16, "dim": 16, "heads": 2}),
    ],
)
def test_edge_values_that_make_sense_still_build(name, view, shape, options):
    model = build_model(name, view=view, input_shape=shape, n_classes=3, **options)
    assert model.name == name


BAD_XGBOOST = [
    ({"max_depth": -1}, r"max_depth=-1: max_depth must be an integer >= 0"),
    ({"learning_rate": -1}, r"learning_rate=-1: learning_rate must be a finite number in \(0, 1\]"),
    ({"learning_rate": NAN}, r"learning_rate=nan: learning_rate must be a finite number"),
    ({"learning_rate": "nan"}, r"learning_rate='nan': learning_rate must be a finite number"),
    ({"subsample": 2}, r"subsample=2: subsample must be a finite number in \(0, 1\]"),
    ({"subsample": 0}, r"subsample=0: subsample must be"),
    ({"colsample_bytree": 0.0}, r"colsample_bytree=0.0: colsample_bytree must be"),
    ({"max_bin": 1}, r"max_bin=1: max_bin must be an integer >= 2"),
    ({"min_child_weight": -1}, r"min_child_weight=-1: min_child_weight must be"),
    ({"reg_lambda": -0.5}, r"reg_lambda=-0.5: reg_lambda must be"),
    ({"n_estimators": 0}, r"n_estimators=0: n_estimators must be an integer >= 1"),
    ({"n_estimators": 2.5}, r"n_estimators=2.5: n_estimators must be an integer"),
    ({"early_stopping_rounds": -1}, r"early_stopping_rounds=-1: early_stopping_rounds must"),
    ({"early_stopping_rounds": 0}, r"early_stopping_rounds=0: early_stopping_rounds must"),
    ({"n_classes": 1}, r"n_classes=1: n_classes must be an integer >= 2"),
]


@pytest.mark.parametrize(("params", "message"), BAD_XGBOOST)
def test_bad_xgboost_params_are_refused_naming_the_option(params, message):
    with pytest.raises(ConfigError, match=message):
        build_estimator("xgboost", **params)


@pytest.mark.parametrize("name", [f.name for f in fields(XGBoostClassifier)])
def test_every_xgboost_parameter_is_checked(name):
    """Each parameter carries its allowed values on its field: a new one cannot be
    added unchecked, and a string is refused for each, naming it."""
    with pytest.raises(ConfigError, match=rf"{name}='x': {name} must be"):
        build_estimator("xgboost", **{name: "x"})
    assert XGBoostClassifier().check_params() is None  # the defaults are allowed


def test_xgboost_fit_checks_params_set_after_construction():
    est = build_estimator("xgboost", n_estimators=2).set_params(subsample=0)
    with pytest.raises(ConfigError, match="subsample=0"):
        est.fit(np.zeros((4, 2)), np.array([0, 1, 0, 1]))


def test_xgboost_n_classes_below_the_labels_is_a_config_error():
    X, y = np.random.default_rng(0).random((16, 3)), np.arange(16) % 8
    est = build_estimator("xgboost", n_estimators=2, n_classes=3, n_jobs=1)
    with pytest.raises(ConfigError, match=r"n_classes=3: the labels go up to 7.*at least 8"):
        est.fit(X, y)


def test_xgboost_edge_values_still_build():
    est = build_estimator(
        "xgboost", learning_rate=1, subsample=1.0, max_bin=2, max_depth=0,
        min_child_weight=0, early_stopping_rounds=None, n_estimators=1,
    )  # fmt: skip
    est.fit(np.random.default_rng(0).random((8, 2)), np.arange(8) % 2)
    assert est.n_classes_ == 2
