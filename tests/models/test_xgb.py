"""XGBoostClassifier: the scikit-learn estimator contract, and that it learns."""

from __future__ import annotations

import numpy as np
import pytest

from flowsplit.models.xgb import NotFittedError, XGBoostClassifier, dask_workers


def _blobs(n=600, n_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    X = rng.normal(size=(n, 5)).astype(np.float32)
    X[:, 0] += 6 * y  # well separated: about 0.3 % Bayes error
    return X, y


def test_init_only_stores_and_params_round_trip():
    est = XGBoostClassifier(max_depth=3, n_estimators=7)
    params = est.get_params()
    assert params["max_depth"] == 3 and params["n_estimators"] == 7
    assert XGBoostClassifier(**params).get_params() == params
    assert est.set_params(max_depth=4) is est and est.max_depth == 4
    assert not [k for k in vars(est) if k.endswith("_")]  # nothing learned yet
    with pytest.raises(ValueError, match="invalid parameter"):
        est.set_params(depth=2)


def test_use_before_fit_raises_a_clear_error():
    with pytest.raises(NotFittedError, match="call fit"):
        XGBoostClassifier().predict(np.zeros((2, 3)))


def test_fit_returns_self_learns_and_saves(tmp_path):
    # Prepare
    X, y = _blobs()
    est = XGBoostClassifier(n_estimators=40, n_jobs=1, early_stopping_rounds=5)
    # Execute
    fitted = est.fit(X[:400], y[:400], eval_set=(X[400:500], y[400:500]))
    acc = (est.predict(X[500:]) == y[500:]).mean()
    est.save_model(tmp_path / "m.ubj")
    loaded = XGBoostClassifier.load_model(tmp_path / "m.ubj")
    # Assert
    assert fitted is est
    assert est.n_features_in_ == 5 and list(est.classes_) == [0, 1, 2]
    assert acc > 0.9
    assert 0 <= est.best_iteration_ < est.booster_.num_boosted_rounds() <= 40
    assert est.predict_proba(X[:4]).shape == (4, 3)
    np.testing.assert_allclose(loaded.predict_proba(X[500:]), est.predict_proba(X[500:]), rtol=1e-6)


def test_n_classes_keeps_output_width_when_a_class_is_absent():
    X, y = _blobs(n_classes=3)
    keep = y < 2
    est = XGBoostClassifier(n_estimators=5, n_classes=3, n_jobs=1).fit(X[keep], y[keep])
    assert est.predict_proba(X).shape == (len(X), 3)


@pytest.mark.parametrize(
    ("X", "y", "message"),
    [
        (np.zeros(5), np.zeros(5, int), "2-D"),
        (np.zeros((5, 2)), np.zeros(4, int), "shape"),
        (np.zeros((5, 2)), np.full(5, 0.5), "class indices"),
        (np.full((5, 2), np.inf), np.zeros(5, int), "infinite"),
    ],
)
def test_inputs_are_validated_at_the_boundary(X, y, message):
    with pytest.raises(ValueError, match=message):
        XGBoostClassifier(n_estimators=2).fit(X, y)


class _Client:
    """A Dask client whose scheduler answers from its worker-less cache (``cached``), as
    ``scheduler_info`` does when its fresh request fails, or lists its ``workers`` when
    asked for all of them."""

    def __init__(self, cached: bool, workers: list[str]):
        self.cached, self.workers, self.ran = cached, workers, False

    def scheduler_info(self, n_workers: int = 0) -> dict:
        listed = [] if self.cached or n_workers != -1 else self.workers
        return {"workers": {w: {} for w in listed}}

    def run(self, fn) -> dict:
        self.ran = True
        return {w: fn() for w in self.workers}


def test_dask_workers_survive_an_answer_from_the_worker_less_cache():
    # A fresh answer lists the workers (asked for all of them: -1); no second question.
    fresh = _Client(False, ["tcp://a", "tcp://b"])
    assert dask_workers(fresh) == ["tcp://a", "tcp://b"] and not fresh.ran
    # The scheduler's answer comes from its cache: the workers answer themselves.
    cached = _Client(True, ["tcp://a", "tcp://b"])
    assert dask_workers(cached) == ["tcp://a", "tcp://b"] and cached.ran
    # No worker anywhere is an error that says so, not a division by zero later.
    with pytest.raises(RuntimeError, match="no workers"):
        dask_workers(_Client(True, []))
