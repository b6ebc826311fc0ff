"""The accuracy surrogate: predict the final accuracy of every legal cut pair from pilots.

Pilot runs (:mod:`flowsplit.planner.pilots`) train a step budget at a few cut pairs
chosen to span the legal triangle ``1 <= a <= c < L`` (:func:`choose_pilot_cuts`:
its three corners first, then farthest-point sampling; every pair when there are
few). Each pilot's validation curve is extrapolated to the run's step budget by a
fitted learning curve (:func:`fit_curve`: ``y = a + b * steps ** -c``). Pairs
without a pilot get a ridge regression (:class:`LossSurrogate`) on features of each
cut (:func:`cut_features`), its penalty chosen by exact leave-one-out error (the hat
matrix gives it in closed form). :func:`predict_accuracy` puts it together and says
how far to trust it: a backtest of the extrapolation (fit on all but the last point,
predict the last), the rank agreement of that backtest, the share of the pilots'
spread the ridge keeps (a penalty that flattens its predictions is reported, not
hidden) and whether the pilots separate the cut pairs beyond their sampling noise.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from flowsplit.errors import ConfigError
from flowsplit.federated.system.parts import legal_cuts
from flowsplit.federated.system.profile import BlockProfile, cut_table

FEATURE_NAMES = (
    "depth_client",
    "depth_aggregator",
    "log_act_a",
    "log_act_c",
    "param_frac_client",
    "param_frac_aggregator",
)
N_DEPTH = 2
"""The first two features: enough with few pilots (see :class:`LossSurrogate`)."""
FIXED_ALPHA = 1e-2
ALPHAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def cut_features(profile: BlockProfile) -> tuple[list[tuple[int, int]], np.ndarray]:
    """(legal cuts, (P, 6) features): depth fraction of the client and aggregator
    parts, the log of the activation bytes at each cut relative to the input, and the
    two parts' share of the parameters (the order of :data:`FEATURE_NAMES`)."""
    t = cut_table(profile)
    total = max(float(np.sum(profile.params)), 1.0)
    x = np.stack(
        [
            t["depth_client"],
            t["depth_aggregator"],
            np.log(t["act_a_bytes"] / profile.input_bytes),
            np.log(t["act_c_bytes"] / profile.input_bytes),
            t["client_params"] / total,
            t["aggregator_params"] / total,
        ],
        axis=1,
    ).astype(np.float64)
    cuts = [(int(a), int(c)) for a, c in zip(t["a"], t["c"], strict=True)]
    return cuts, x


def choose_pilot_cuts(n_blocks: int, n_pilots: int) -> list[tuple[int, int]]:
    """``n_pilots`` legal cut pairs spanning the triangle of legal pairs (deterministic).

    The corners (1, 1), (1, L-1), (L-1, L-1) come first (client-light two-tier,
    aggregator-heavy three-tier, client-heavy two-tier), then each next pair is the
    legal pair farthest from those chosen (ties: the earlier pair in ``legal_cuts``).
    """
    cuts = legal_cuts(n_blocks)
    if n_pilots >= len(cuts):
        return cuts
    last = n_blocks - 1
    chosen = []
    for corner in ((1, 1), (1, last), (last, last)):
        if corner not in chosen and len(chosen) < n_pilots:
            chosen.append(corner)
    pts = np.array(cuts, dtype=np.float64) / max(last, 1)
    while len(chosen) < n_pilots:
        picked = np.array([cuts.index(c) for c in chosen])
        dist = np.linalg.norm(pts[:, None, :] - pts[None, picked, :], axis=2).min(axis=1)
        dist[picked] = -1.0
        chosen.append(cuts[int(np.argmax(dist))])
    return chosen


class LossSurrogate:
    """Ridge regression of pilot loss on cut features (scikit-learn style).

    Few pilots cannot support many features: with fewer than six pilots only the
    first ``N_DEPTH`` columns (depth of the client and of the aggregator part, which
    set how much of the model is averaged across clients, across aggregators, or
    trained sequentially at the server) are used, all of them from six on
    (``n_features`` fixes it). Features are standardised on the training rows
    (constant ones dropped); the intercept is not penalised; the penalty is the one
    of ``alphas`` with the least leave-one-out squared error when there are at least
    two more pilots than features, else ``FIXED_ALPHA`` (``alpha`` fixes it).
    """

    def __init__(
        self,
        *,
        alpha: float | None = None,
        alphas: tuple[float, ...] = ALPHAS,
        n_features: int | None = None,
    ):
        self.alpha = alpha
        self.alphas = alphas
        self.n_features = n_features

    def fit(self, x: np.ndarray, y: np.ndarray) -> LossSurrogate:
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if x.ndim != 2 or y.shape != (x.shape[0],) or x.shape[0] < 1:
            raise ValueError(f"need x (n, d) and y (n,) with n >= 1, got {x.shape}, {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ConfigError(
                "a pilot run diverged (its loss is not finite); try a lower --lr or more "
                "--pilot-rounds"
            )
        n, d = x.shape
        k = self.n_features or (d if n >= 6 else min(N_DEPTH, d))
        self.mean_ = x.mean(axis=0)
        scale = x.std(axis=0)
        self.keep_ = (scale > 1e-12) & (np.arange(d) < k)
        self.scale_ = np.where(self.keep_, scale, 1.0)
        z = ((x - self.mean_) / self.scale_)[:, self.keep_]
        self.intercept_ = float(y.mean())
        yc = y - self.intercept_
        if self.alpha is not None:
            candidates = (self.alpha,)
        elif n >= int(self.keep_.sum()) + 2:
            candidates = self.alphas
        else:
            candidates = (FIXED_ALPHA,)
        best = None
        for alpha in candidates:
            coef, loo = _ridge(z, yc, float(alpha))
            if best is None or loo < best[2] - 1e-15:
                best = (float(alpha), coef, loo)
        self.alpha_, coef, loo = best
        self.coef_ = np.zeros(x.shape[1])
        self.coef_[self.keep_] = coef
        self.loo_rmse_ = float(np.sqrt(loo))
        self.n_train_ = int(x.shape[0])
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise RuntimeError("LossSurrogate is not fitted yet; call fit(x, y) first")
        z = (np.asarray(x, dtype=np.float64) - self.mean_) / self.scale_
        return self.intercept_ + z @ self.coef_

    def to_dict(self) -> dict:
        return {
            "alpha": self.alpha_,
            "intercept": self.intercept_,
            "coef": dict(zip(FEATURE_NAMES, self.coef_.tolist(), strict=False)),
            "features": [n for n, k in zip(FEATURE_NAMES, self.keep_, strict=False) if k],
            "loo_rmse": self.loo_rmse_,
            "n_pilots": self.n_train_,
        }


def _ridge(z: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Ridge coefficients on centred data and the mean leave-one-out squared error."""
    n, d = z.shape
    if d == 0:
        resid = y
        h = np.full(n, 1.0 / n)
        coef = np.zeros(0)
    else:
        zc = z - z.mean(axis=0)
        a = zc.T @ zc + alpha * np.eye(d)
        coef = np.linalg.solve(a, zc.T @ y)
        resid = y - zc @ coef
        # Leverage of each row, the intercept's 1/n included.
        h = 1.0 / n + np.einsum("ij,ji->i", zc, np.linalg.solve(a, zc.T))
    if n < 2:
        return coef, float("inf")
    loo = resid / np.clip(1.0 - h, 1e-9, None)
    return coef, float(np.mean(loo**2))


CURVE_EXPONENTS = tuple(np.round(np.arange(0.1, 2.01, 0.1), 2))
"""Exponents ``c`` of the learning curve ``a + b * steps ** -c`` tried by :func:`fit_curve`."""
FLAT_SPREAD = 0.5
"""A ridge fit keeping less than this share of the pilots' spread is reported as flattened."""
NOISE_Z = 1.96
"""Cut pairs are separated when the pilots' spread exceeds NOISE_Z standard errors of a
difference of two accuracies."""


def fit_curve(steps, values, target: float, *, bounds=(0.0, 1.0)) -> tuple[float, dict]:
    """Extrapolate a validation curve to ``target`` steps.

    Least squares of ``y = a + b * s ** -c`` over ``c`` in :data:`CURVE_EXPONENTS`
    (``a`` and ``b`` in closed form for each ``c``). The prediction is anchored at the
    last measured point: ``y_last + f(target) - f(s_last)`` (the fit supplies the
    further change, not the level, which a noisy curve's fit can miss); it is clipped
    to ``bounds`` and, so that a few noisy points cannot run away, to within the
    curve's own range widened by its total change. With fewer than three points the
    last value is the prediction (method ``"last point"``).
    """
    s = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if len(y) < 3 or not np.all(np.isfinite(y)):
        return float(y[-1]), {"method": "last point"}
    best = None
    for c in CURVE_EXPONENTS:
        basis = np.column_stack([np.ones_like(s), s ** -float(c)])
        coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
        sse = float(np.sum((basis @ coef - y) ** 2))
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(c), coef)
    sse, c, (a, b) = best
    raw = float(y[-1] + b * (float(target) ** -c - s[-1] ** -c))
    span = float(y.max() - y.min())
    lo, hi = max(bounds[0], y.min() - span), min(bounds[1], y.max() + span)
    pred = float(np.clip(raw, lo, hi))
    return pred, {
        "method": "learning curve",
        "a": float(a),
        "b": float(b),
        "c": c,
        "rmse": float(np.sqrt(sse / len(y))),
        "unclipped": raw,
    }


def accuracy_noise(accuracy: float, n_eval: int) -> float:
    """Binomial standard error of an accuracy measured on ``n_eval`` rows."""
    p = float(np.clip(accuracy, 0.0, 1.0))
    return float(np.sqrt(max(p * (1 - p), 1e-4) / max(n_eval, 1)))


def _spearman(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


SMOOTH_LAST = 1
"""Evaluations averaged into a pilot's "last point" when the planner will not extrapolate.

One: averaging the last two would halve one evaluation's noise but lags a curve that
is still rising by half its last step, and pilots stop while rising. On the embedded
capture's pilots (CNN, 6 cut pairs, 4 evaluations each) the mean of the last two
backtested to 17.3 pt against 10.3 pt for the last point, and ranked the six pairs
against their realised accuracy at Spearman 0.77 against 0.83."""


def smoothed_last(values, k: int = SMOOTH_LAST) -> float:
    """Mean of the last ``k`` values of a curve (all of them when it is shorter); with
    the default ``k`` (:data:`SMOOTH_LAST`), the last value."""
    y = np.asarray(values, dtype=np.float64)
    return float(np.mean(y[-max(1, int(k)) :]))


def fit_shared_curves(curves, target, *, bounds=(0.0, 1.0)) -> tuple[list[float], dict]:
    """Extrapolate several validation curves with ONE learning-curve exponent.

    ``curves`` is a list of ``(steps, values)``, ``target`` the steps to reach (one
    number, or one per curve). Each curve gets its own offset and
    scale, ``y_i = a_i + b_i * s ** -c``, but ``c`` (from :data:`CURVE_EXPONENTS`) is
    the one with the least squared error summed over all curves with at least three
    points: four noisy points of one pilot cannot pick a shape of their own, so how far
    each curve is carried depends only on its own rise measured through a common
    shape. Predictions are anchored at each last point and clipped as in
    :func:`fit_curve`; curves with fewer than three points predict their last value.
    """
    data = [(np.asarray(s, dtype=np.float64), np.asarray(y, dtype=np.float64)) for s, y in curves]
    targets = np.broadcast_to(np.asarray(target, dtype=np.float64), (len(data),))
    usable = [i for i, (_, y) in enumerate(data) if len(y) >= 3 and np.all(np.isfinite(y))]
    preds = [float(y[-1]) for _, y in data]
    if not usable:
        return preds, {"method": "last point", "c": None}
    best = None
    for c in CURVE_EXPONENTS:
        sse, coefs = 0.0, {}
        for i in usable:
            s, y = data[i]
            basis = np.column_stack([np.ones_like(s), s ** -float(c)])
            coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
            sse += float(np.sum((basis @ coef - y) ** 2))
            coefs[i] = coef
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(c), coefs)
    sse, c, coefs = best
    per = []
    for i, (s, y) in enumerate(data):
        if i not in coefs:
            per.append({"method": "last point"})
            continue
        a, b = coefs[i]
        raw = float(y[-1] + b * (float(targets[i]) ** -c - s[-1] ** -c))
        span = float(y.max() - y.min())
        lo, hi = max(bounds[0], y.min() - span), min(bounds[1], y.max() + span)
        preds[i] = float(np.clip(raw, lo, hi))
        per.append(
            {
                "method": "learning curve (shared exponent)",
                "a": float(a),
                "b": float(b),
                "c": c,
                "unclipped": raw,
            }
        )
    n_pts = sum(len(data[i][1]) for i in usable)
    return preds, {
        "method": "learning curve (shared exponent)",
        "c": c,
        "rmse": float(np.sqrt(sse / n_pts)),
        "per_curve": per,
    }


def _choose_method(
    mae_curve: float | None, mae_last: float | None, tolerance: float
) -> tuple[str, str]:
    """``learning curve`` or ``last point``, and why (see :func:`predict_accuracy`)."""
    if mae_curve is None:
        method, reason = "last point", "no backtest possible (a pilot curve needs 4 points)"
    elif not np.isfinite(mae_curve):
        method, reason = "last point", "the backtest is not finite (a pilot diverged)"
    elif mae_curve > tolerance:
        method = "last point"
        reason = (
            f"the learning curve backtests to {100 * mae_curve:.2f} pt, beyond the "
            f"guard's tolerance of {100 * tolerance:g} pt: not extrapolated"
        )
    elif mae_last is not None and mae_last < mae_curve:
        method = "last point"
        reason = (
            f"the last point backtests better ({100 * mae_last:.2f} pt) than the "
            f"learning curve ({100 * mae_curve:.2f} pt)"
        )
    else:
        method = "learning curve"
        reason = (
            f"the learning curve backtests to {100 * mae_curve:.2f} pt, within the "
            f"guard's tolerance of {100 * tolerance:g} pt"
        )
    return method, reason


def _fill_with_ridge(legal, x, piloted, spread: float, acc: dict, loss: dict, source: dict) -> dict:
    """Predict the pairs without a pilot by ridge regressions on the cut features of
    the piloted ones (into ``acc``, ``loss``, ``source``); the ridge's record."""
    missing = [c for c in legal if c not in acc]
    rows = [legal.index(c) for c in piloted]
    ridge = LossSurrogate().fit(x[rows], [acc[c] for c in piloted])
    ridge_loss = LossSurrogate().fit(x[rows], [loss[c] for c in piloted])
    fitted = ridge.predict(x[rows])
    kept = float(np.ptp(fitted) / spread) if spread > 0 else float("nan")
    pred_acc = np.clip(ridge.predict(x), 0.0, 1.0)
    pred_loss = ridge_loss.predict(x)
    for c in missing:
        k = legal.index(c)
        acc[c], loss[c], source[c] = float(pred_acc[k]), float(pred_loss[k]), "ridge"
    return {
        **ridge.to_dict(),
        "spread_kept": kept,
        "flattened": bool(np.isfinite(kept) and kept < FLAT_SPREAD),
    }


def predict_accuracy(
    records, profile: BlockProfile, target_steps: float, *, tolerance: float = 0.01
) -> dict:
    """Predicted validation accuracy and loss of every legal cut pair at ``target_steps``.

    ``records`` are :class:`~flowsplit.planner.pilots.PilotRecord` (each with its
    curve). Returns a JSON-ready document: ``accuracy`` and ``loss`` (cut pair ->
    value, keyed by the tuple), ``source`` per pair, ``noise`` (standard error of one
    accuracy measurement), ``separated`` (whether the pilots' predicted accuracies
    differ by more than their noise), ``backtest`` (mean absolute error and Spearman
    rank correlation of predicting each curve's last point from the others, for the
    shared-exponent learning curve and for the smoothed last point carried forward;
    ``method`` and ``reason`` say which was used and why) and, when some pairs had no
    pilot, the ridge's ``loo_rmse``, penalty and ``spread_kept``.

    Safe by construction: the pilots' curves are extrapolated (:func:`fit_shared_curves`)
    only when that backtests within ``tolerance`` (the accuracy guard's, so an
    extrapolation the guard could not tell from noise never decides the plan) and no
    worse than the last point; otherwise, and when no backtest is possible, each
    pilot's prediction is its last evaluation (:func:`smoothed_last`), whose ranking is
    the measured one.
    """
    legal, x = cut_features(profile)
    recs = list(records)
    acc_curves = [(r.curve_steps, r.curve_accuracy) for r in recs]
    loss_curves = [(r.curve_steps, r.curve_loss) for r in recs]
    fit_acc, info = fit_shared_curves(acc_curves, target_steps)
    fit_loss, _ = fit_shared_curves(loss_curves, target_steps, bounds=(0.0, np.inf))
    backtest = _backtest(recs, tolerance, exponent=info.get("c"))
    per = info.get("per_curve") or [{"method": "last point"}] * len(recs)
    if backtest["method"] == "learning curve":
        acc = {r.cuts: fit_acc[i] for i, r in enumerate(recs)}
        loss = {r.cuts: fit_loss[i] for i, r in enumerate(recs)}
        source = {r.cuts: f"pilot ({per[i]['method']})" for i, r in enumerate(recs)}
    else:
        acc = {r.cuts: smoothed_last(r.curve_accuracy) for r in recs}
        loss = {r.cuts: smoothed_last(r.curve_loss) for r in recs}
        last = (
            "pilot (its last evaluation)"
            if SMOOTH_LAST == 1
            else f"pilot (mean of its last {SMOOTH_LAST} evaluations)"
        )
        source = {r.cuts: last for r in recs}
    curves = {r.cuts: per[i] for i, r in enumerate(recs)}
    noise = max((accuracy_noise(r.accuracy, r.n_eval) for r in recs), default=float("nan"))
    piloted = [c for c in legal if c in acc]
    spread = float(np.ptp([acc[c] for c in piloted])) if piloted else 0.0
    separated = len(piloted) >= 2 and spread > NOISE_Z * np.sqrt(2.0) * noise
    doc = {
        "target_steps": float(target_steps),
        "noise": noise,
        "spread": spread,
        "separated": bool(separated),
        "backtest": backtest,
        "curves": [{"cuts": list(c), **curves[c]} for c in piloted],
    }
    if any(c not in acc for c in legal):
        doc["ridge"] = _fill_with_ridge(legal, x, piloted, spread, acc, loss, source)
    doc["accuracy"] = {c: float(acc[c]) for c in legal}
    doc["loss"] = {c: float(loss[c]) for c in legal}
    doc["source"] = {c: source[c] for c in legal}
    return doc


def _backtest(recs: list, tolerance: float, *, exponent: float | None) -> dict:
    """Each pilot curve's last point predicted from the rest of it, by the shared fit and
    by the smoothed last point carried forward: their errors, and the method chosen
    (:func:`_choose_method`) for :func:`predict_accuracy`'s ``backtest``."""
    back = [i for i, r in enumerate(recs) if len(r.curve_steps) >= 4]
    back_true = [float(recs[i].curve_accuracy[-1]) for i in back]
    back_last = [smoothed_last(recs[i].curve_accuracy[:-1]) for i in back]
    back_pred, _ = fit_shared_curves(
        [(recs[i].curve_steps[:-1], recs[i].curve_accuracy[:-1]) for i in back],
        [recs[i].curve_steps[-1] for i in back],
    )
    mae_curve = float(np.mean(np.abs(np.subtract(back_pred, back_true)))) if back else None
    mae_last = float(np.mean(np.abs(np.subtract(back_last, back_true)))) if back else None
    method, reason = _choose_method(mae_curve, mae_last, tolerance)
    curve = method == "learning curve"
    return {
        "n": len(back),
        "method": method,
        "reason": reason,
        "tolerance": float(tolerance),
        "exponent": exponent,
        "mae": mae_curve if curve else mae_last,
        "mae_curve": mae_curve,
        "mae_last_point": mae_last,
        "spearman": _spearman(back_pred if curve else back_last, back_true),
    }
