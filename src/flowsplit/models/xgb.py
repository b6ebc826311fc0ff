"""XGBoost (``hist``) over flow statistics, behind the scikit-learn estimator contract.

``__init__`` only stores keyword arguments; ``fit`` validates its inputs, trains
and returns ``self``; learned state ends in ``_``; using the estimator before
``fit`` raises :class:`NotFittedError`. ``fit(..., client=...)`` trains with
XGBoost's Dask integration on the workers of a ``distributed.Client``: the rows
are shuffled with ``random_state``, cut into one partition per worker and placed
there, and the workers build trees together (histograms are all-reduced).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from flowsplit.config_args import SEED_LIMIT, is_int
from flowsplit.errors import ConfigError
from flowsplit.models.checks import is_number, option_error


class NotFittedError(ValueError, AttributeError):
    """The estimator was used before ``fit`` (same bases as scikit-learn's)."""


class InvalidParamError(ConfigError, ValueError):
    """A constructor argument out of range: one line for the CLI (a ``ConfigError``),
    a ``ValueError`` as scikit-learn raises for a bad parameter."""


@dataclass(frozen=True)
class _Range:
    """The values XGBoost documents for one constructor argument."""

    integer: bool
    low: float
    high: float | None = None
    low_allowed: bool = True
    or_none: bool = False

    def allowed(self, value: Any) -> str | None:
        """None when ``value`` is allowed; else what is (``an integer >= 1 or null``)."""
        if value is None and self.or_none:
            return None
        if self.integer:
            ok = is_int(value) and value >= self.low
            text = "an integer " + (
                f">= {self.low}" if self.high is None else f"in [{self.low}, {self.high}]"
            )
        else:
            ok = is_number(value) and (value >= self.low if self.low_allowed else value > self.low)
            text = "a finite number in " + ("[" if self.low_allowed else "(") + f"{self.low:g}, "
            text += "inf)" if self.high is None else f"{self.high:g}]"
        if ok and (self.high is None or value <= self.high):
            return None
        return text + (" or null" if self.or_none else "")


def _param(default: Any, values: _Range) -> Any:
    """A constructor argument: its default and its :class:`_Range` (read by ``check_params``)."""
    return field(default=default, metadata={"range": values})


def _int(default: int | None, low: int, high: int | None = None, *, or_none: bool = False) -> Any:
    return _param(default, _Range(True, low, high, or_none=or_none or default is None))


def _fraction(default: float) -> Any:
    """A ratio in (0, 1] (eta, the sampling ratios)."""
    return _param(default, _Range(False, 0.0, 1.0, low_allowed=False))


def _non_negative(default: float) -> Any:
    return _param(default, _Range(False, 0.0))


def _param_error(name: str, value: Any, allowed: str) -> InvalidParamError:
    return InvalidParamError(str(option_error("xgboost", name, value, allowed)))


@dataclass(eq=False, kw_only=True)
class XGBoostClassifier:
    """Multi-class gradient-boosted trees (``tree_method="hist"``).

    Args:
        n_estimators: maximum number of boosting rounds.
        max_depth: maximum tree depth.
        learning_rate: shrinkage per round (``eta``).
        max_bin: histogram bins per feature.
        min_child_weight: minimum hessian sum in a leaf.
        subsample: fraction of rows per tree.
        colsample_bytree: fraction of features per tree.
        reg_lambda: L2 regularisation on leaf weights.
        early_stopping_rounds: stop when the validation log-loss has not improved for
            this many rounds (only with ``eval_set``; ``None`` disables it).
        n_classes: number of classes; ``None`` infers ``max(y) + 1`` (pass it when a
            class may be absent from the training rows).
        n_jobs: threads per process (``None``: XGBoost's default).
        random_state: seed of XGBoost and of the partitioning across Dask workers.
    """

    n_estimators: int = _int(300, 1)
    max_depth: int = _int(6, 0)
    learning_rate: float = _fraction(0.1)
    max_bin: int = _int(256, 2)
    min_child_weight: float = _non_negative(1.0)
    subsample: float = _fraction(1.0)
    colsample_bytree: float = _fraction(1.0)
    reg_lambda: float = _non_negative(1.0)
    early_stopping_rounds: int | None = _int(20, 1, or_none=True)
    n_classes: int | None = _int(None, 2)
    n_jobs: int | None = _int(None, 0)
    random_state: int = _int(0, 0, SEED_LIMIT - 1)

    # --- scikit-learn parameter protocol (the generated ``__init__`` only stores) ------
    @classmethod
    def _param_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor arguments, as scikit-learn's ``get_params``."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> XGBoostClassifier:
        """Set constructor arguments; unknown names raise ``ValueError``."""
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"invalid parameter {name!r} for XGBoostClassifier; "
                    f"valid: {', '.join(sorted(valid))}"
                )
            setattr(self, name, value)
        return self

    def check_params(self) -> None:
        """Refuse, naming the parameter, a value XGBoost refuses, or that would train
        nothing or at chance (``learning_rate=nan``, ``subsample=0``):
        :class:`InvalidParamError`. ``fit`` calls it; ``build_estimator`` too."""
        for f in fields(self):
            value = getattr(self, f.name)
            allowed = param_problem(f.name, value)
            if allowed is not None:
                raise _param_error(f.name, value, allowed)

    # --- fitting ---------------------------------------------------------------------
    def xgb_params(self, n_classes: int) -> dict[str, Any]:
        """The parameter dict handed to ``xgboost.train``."""
        params = {
            "objective": "multi:softprob",
            "num_class": int(n_classes),
            "eval_metric": "mlogloss",
            "tree_method": "hist",
            "max_depth": self.max_depth,
            "eta": self.learning_rate,
            "max_bin": self.max_bin,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "lambda": self.reg_lambda,
            "seed": self.random_state,
            "verbosity": 0,
        }
        if self.n_jobs is not None:
            params["nthread"] = int(self.n_jobs)
        return params

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        sample_weight: Any = None,
        eval_set: tuple[Any, Any] | None = None,
        callbacks: Sequence[xgb.callback.TrainingCallback] = (),
        client: Any = None,
        coll_cfg: Any = None,
    ) -> XGBoostClassifier:
        """Train on ``X`` ``(N, F)`` and integer labels ``y`` ``(N,)``; returns ``self``.

        ``sample_weight`` ``(N,)`` weighs each row's loss (e.g. balanced classes);
        ``eval_set=(X_val, y_val)`` enables early stopping on validation log-loss;
        ``client`` (a ``distributed.Client``) trains on its Dask workers;
        ``coll_cfg`` is passed to ``xgboost.dask.train`` (e.g. the tracker address).
        """
        self.check_params()
        X, y = _check_xy(X, y)
        n_classes = self.n_classes if self.n_classes is not None else int(y.max()) + 1
        if y.max() >= n_classes:
            raise InvalidParamError(
                f"xgboost cannot be trained with n_classes={n_classes}: the labels go up to "
                f"{y.max()}, so n_classes must be at least {y.max() + 1} (or null to count them)"
            )
        val = None if eval_set is None else _check_xy(*eval_set, n_features=X.shape[1])
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float32)
            if sample_weight.shape != y.shape or (sample_weight < 0).any():
                raise ValueError(f"sample_weight must be {y.shape} non-negative weights")
        params = self.xgb_params(n_classes)
        stop = self.early_stopping_rounds if eval_set is not None else None
        # The boosting settings both trainers take (one process, or the Dask workers).
        boosting = {
            "num_boost_round": self.n_estimators,
            "early_stopping_rounds": stop,
            "verbose_eval": False,
            "callbacks": list(callbacks),
        }
        train = (X, y, sample_weight)
        booster, history, self.n_workers_ = self._boost(
            params, train, val, boosting, client, coll_cfg
        )
        self.booster_ = booster
        self.evals_result_ = history
        self.n_classes_ = n_classes
        self.classes_ = np.arange(n_classes)
        self.n_features_in_ = X.shape[1]
        # Without early stopping XGBoost leaves best_iteration unset: use every tree.
        self.best_iteration_ = (
            int(booster.best_iteration) if stop else booster.num_boosted_rounds() - 1
        )
        return self

    def _boost(
        self, params: dict, train: tuple, val: tuple | None, boosting: dict, client, coll_cfg
    ) -> tuple[xgb.Booster, dict, int]:
        """Boost on ``train`` ``(X, y, weight)``, evaluated on it and on ``val``
        ``(X, y)``, in this process or on the Dask workers of ``client``: the booster,
        its evaluation history and the number of workers."""
        if client is None:

            def matrix(X, y, weight=None):
                return xgb.DMatrix(X, label=y, weight=weight, nthread=self.n_jobs or 0)

        else:
            workers = dask_workers(client)

            def matrix(X, y, weight=None):
                return _dask_matrix(client, workers, X, y, self.random_state, weight)

        dtrain = matrix(*train)
        evals = [(dtrain, "train")]
        if val is not None:
            evals.append((matrix(*val), "val"))
        if client is None:
            history: dict = {}
            booster = xgb.train(params, dtrain, evals=evals, evals_result=history, **boosting)
            return booster, history, 1
        from xgboost import dask as dxgb

        params.pop("nthread", None)  # each Dask worker uses its own thread count
        out = dxgb.train(client, params, dtrain, evals=evals, coll_cfg=coll_cfg, **boosting)
        return out["booster"], out["history"], len(workers)

    # --- using the fitted model -----------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "booster_"):
            raise NotFittedError(
                "this XGBoostClassifier is not fitted yet; call fit(X, y) before using it"
            )

    def predict_proba(self, X: Any, *, n_rounds: int | None = None) -> np.ndarray:
        """Class probabilities ``(N, n_classes)``, from the best round (or the first ``n_rounds``)."""
        self._check_fitted()
        X, _ = _check_xy(X, None, n_features=self.n_features_in_)
        stop = self.best_iteration_ + 1 if n_rounds is None else int(n_rounds)
        proba = self.booster_.inplace_predict(X, iteration_range=(0, stop))
        return np.asarray(proba).reshape(len(X), self.n_classes_)

    def predict(self, X: Any, *, n_rounds: int | None = None) -> np.ndarray:
        """Predicted class index per row ``(N,)``."""
        return self.predict_proba(X, n_rounds=n_rounds).argmax(axis=1)

    def save_model(self, path: str | Path) -> None:
        """Write the booster in XGBoost's own JSON/UBJSON format (no pickle)."""
        self._check_fitted()
        self.booster_.set_attr(
            flowsplit_best_iteration=str(self.best_iteration_),
            flowsplit_n_classes=str(self.n_classes_),
            flowsplit_n_features=str(self.n_features_in_),
        )
        self.booster_.save_model(str(path))

    @classmethod
    def load_model(cls, path: str | Path, **params: Any) -> XGBoostClassifier:
        """Load a booster written by :meth:`save_model` into a fitted estimator."""
        booster = xgb.Booster()
        booster.load_model(str(path))
        est = cls(**params)
        est.booster_ = booster
        est.best_iteration_ = int(booster.attr("flowsplit_best_iteration"))
        est.n_classes_ = int(booster.attr("flowsplit_n_classes"))
        est.n_features_in_ = int(booster.attr("flowsplit_n_features"))
        est.classes_ = np.arange(est.n_classes_)
        est.evals_result_ = {}
        est.n_workers_ = 1
        return est


_RANGES = {f.name: f.metadata["range"] for f in fields(XGBoostClassifier)}


def param_problem(name: str, value: Any) -> str | None:
    """None when ``value`` is allowed for the parameter ``name``; else what is (``a
    finite number in (0, 1]``), from the parameter's field."""
    return _RANGES[name].allowed(value)


def _check_xy(X: Any, y: Any, *, n_features: int | None = None):
    """Validate at the boundary: a 2-D finite-or-NaN float matrix and integer labels."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features, the model was fitted with {n_features}")
    if np.isinf(X).any():
        raise ValueError("X contains infinite values; replace them (NaN is read as missing)")
    if y is None:
        return X, None
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise ValueError("y must hold class indices 0 .. n_classes-1 (non-negative integers)")
    if len(y) == 0:
        raise ValueError("cannot fit on 0 samples")
    return X, y.astype(np.int64)


def dask_workers(client: Any) -> list[str]:
    """The addresses of the Dask cluster's workers, asked of the scheduler.

    ``client.scheduler_info()`` answers from the client's cache when its fresh request
    fails (an ``OSError`` it logs at debug level only, or a client reconnecting), and
    that cache holds cluster totals only, no workers: a busy machine once got an empty
    list there and a division by zero further on. Then ask the workers themselves
    (:meth:`Client.run` reaches every worker through the scheduler, and raises when it
    cannot); none at all is an error that says so.
    """
    import os

    workers = list(client.scheduler_info(n_workers=-1).get("workers", {}))
    workers = workers or list(client.run(os.getpid))
    if not workers:
        raise RuntimeError("the Dask cluster has no workers (they left or never started)")
    return workers


def _dask_matrix(
    client: Any, workers: list[str], X: np.ndarray, y: np.ndarray, seed: int, weight=None
):
    """A ``DaskDMatrix`` with one shuffled partition of the rows placed on each worker."""
    import dask.array as da
    from xgboost import dask as dxgb

    order = np.random.default_rng(seed).permutation(len(X))
    n_parts = max(1, min(len(workers), len(X)))
    parts = np.array_split(order, n_parts)
    xs, ys, ws = [], [], []
    for part, worker in zip(parts, workers, strict=False):
        fx = client.scatter(X[part], workers=[worker], direct=True)
        fy = client.scatter(y[part], workers=[worker], direct=True)
        xs.append(da.from_delayed(fx, shape=(len(part), X.shape[1]), dtype=X.dtype))
        ys.append(da.from_delayed(fy, shape=(len(part),), dtype=y.dtype))
        if weight is not None:
            fw = client.scatter(weight[part], workers=[worker], direct=True)
            ws.append(da.from_delayed(fw, shape=(len(part),), dtype=weight.dtype))
    w = da.concatenate(ws) if ws else None
    return dxgb.DaskDMatrix(client, da.concatenate(xs), da.concatenate(ys), weight=w)
