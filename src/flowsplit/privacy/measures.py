"""Leakage measures: what an inversion recovered, and how dependent activations are on inputs.

All functions are pure and work on arrays of whole rows:

- :func:`payload_mask`: the bytes of a row before its zero padding (the payload
  proper; a stored ``bytes`` row is padded with zeros to a fixed length, and
  padding recovered is no leak);
- :func:`bytes_recovered`: share of payload bytes reconstructed exactly;
- :func:`ascii_runs` / :func:`ascii_recovered`: printable-ASCII runs of 4 or more
  characters (host names, header words, user agents) and the share reconstructed
  exactly, every character of the run right;
- :func:`seq_errors`: normalised RMSE of reconstructed per-packet features;
- :func:`distance_correlation`: Székely's distance correlation between two sets of
  vectors, in torch so that NoPeek can also use it as a differentiable penalty.
"""

from __future__ import annotations

import re

import numpy as np
import torch

# Printable ASCII is 0x20 (space) .. 0x7e (~); runs of 4+ are what `strings` shows.
_ASCII_RUN = re.compile(rb"[\x20-\x7e]{4,}")


def payload_mask(x: np.ndarray) -> np.ndarray:
    """``(N, L)`` bytes -> boolean mask of the positions up to each row's last non-zero byte."""
    x = np.asarray(x).reshape(len(x), -1)
    nonzero = x != 0
    # Index of the last non-zero byte + 1 (0 for an all-zero row).
    length = np.where(nonzero.any(1), x.shape[1] - np.argmax(nonzero[:, ::-1], axis=1), 0)
    return np.arange(x.shape[1])[None, :] < length[:, None]


def bytes_recovered(true: np.ndarray, pred: np.ndarray) -> float:
    """Share of payload bytes (see :func:`payload_mask`) that ``pred`` gets exactly right."""
    true = np.asarray(true).reshape(len(true), -1)
    pred = np.asarray(pred).reshape(len(pred), -1)
    if true.shape != pred.shape:
        raise ValueError(f"shapes differ: true {true.shape}, pred {pred.shape}")
    mask = payload_mask(true)
    n = int(mask.sum())
    return float(((true == pred) & mask).sum() / n) if n else float("nan")


def ascii_runs(row: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` of every printable-ASCII run of 4+ characters in one byte row."""
    data = np.asarray(row, dtype=np.uint8).tobytes()
    return [m.span() for m in _ASCII_RUN.finditer(data)]


def ascii_recovered(true: np.ndarray, pred: np.ndarray) -> tuple[float, int]:
    """Share of the ASCII runs of ``true`` that ``pred`` reproduces exactly, and their count."""
    true = np.asarray(true).reshape(len(true), -1)
    pred = np.asarray(pred).reshape(len(pred), -1)
    hit = total = 0
    for t, p in zip(true, pred, strict=True):
        equal = t == p
        for start, stop in ascii_runs(t):
            total += 1
            hit += bool(equal[start:stop].all())
    return (hit / total if total else float("nan")), total


def seq_errors(true: np.ndarray, pred: np.ndarray, scale: np.ndarray) -> dict[str, float]:
    """RMSE of ``pred`` per feature, divided by ``scale`` (the feature's spread), and its mean.

    ``true`` and ``pred`` are ``(N, T, F)`` in the same (e.g. standardised) space; a
    reconstruction no better than the feature's mean scores about 1.
    """
    true = np.asarray(true, dtype=np.float64)
    pred = np.asarray(pred, dtype=np.float64)
    rmse = np.sqrt(((true - pred) ** 2).reshape(-1, true.shape[-1]).mean(0))  # (F,)
    nrmse = rmse / np.where(scale > 0, scale, 1.0)
    out = {f"f{k}": float(v) for k, v in enumerate(nrmse)}
    out["mean"] = float(nrmse.mean())
    return out


def _centred_distances(x: torch.Tensor) -> torch.Tensor:
    """Double-centred pairwise Euclidean distance matrix of rows ``(n, d)``."""
    # Pairwise distances via the Gram matrix. Where a squared distance is (about) 0
    # the distance is set to exactly 0, and sqrt never sees it (its gradient there is inf).
    sq = (x * x).sum(1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    near = d2 <= 1e-12 * (1.0 + sq.max())
    d = torch.where(near, torch.zeros_like(d2), torch.where(near, torch.ones_like(d2), d2).sqrt())
    return d - d.mean(0, keepdim=True) - d.mean(1, keepdim=True) + d.mean()


def distance_correlation(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Sample distance correlation (Székely, Rizzo and Bakirov, 2007) of paired rows.

    ``x`` is ``(n, ...)``, ``y`` is ``(n, ...)``; each row is flattened. The result is
    in [0, 1]: 0 for independent samples (in the limit), 1 when ``y`` is a similarity
    transform of ``x``. It is the V-statistic (biased) estimator; it costs
    ``O(n^2 (d_x + d_y))``, so measure it on a subsample of a few hundred rows.
    Differentiable: NoPeek uses it as a training penalty.
    """
    x = x.reshape(len(x), -1)
    y = y.reshape(len(y), -1).to(x.dtype)
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows, y has {len(y)}")
    a, b = _centred_distances(x), _centred_distances(y)
    dcov2_xy = (a * b).mean()
    dvar_x, dvar_y = (a * a).mean(), (b * b).mean()
    denom = (dvar_x * dvar_y).sqrt()
    if float(denom.detach()) <= 0:
        return torch.zeros((), dtype=x.dtype)  # a constant sample: no dependence to measure
    return (dcov2_xy.clamp_min(0) / denom).sqrt()


def distance_correlation_np(
    x: np.ndarray, y: np.ndarray, *, max_rows: int = 500, seed: int = 0
) -> float:
    """:func:`distance_correlation` in float64 on at most ``max_rows`` random rows."""
    n = len(x)
    rows = np.arange(n)
    if n > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))
    xt = torch.as_tensor(np.asarray(x)[rows], dtype=torch.float64)
    yt = torch.as_tensor(np.asarray(y)[rows], dtype=torch.float64)
    with torch.no_grad():
        return float(distance_correlation(xt, yt))
