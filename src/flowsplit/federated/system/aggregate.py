"""Federated averaging (pure functions).

FedAvg (McMahan et al., 2017) replaces a model by the average of its copies,
each weighted by the number of training samples behind it. Averaging within
aggregators (weights: client sample counts) and then across aggregators (weights:
each aggregator's total) gives the same result as one global average, because
``sum_j N_j * (sum_{i in j} n_i v_i / N_j) / N = sum_i n_i v_i / N``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def fedavg(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Weighted average of equally shaped tensors, accumulated in float64.

    Weights must be >= 0 with a positive sum; the result has the inputs' dtype.
    """
    if not vectors:
        raise ValueError("fedavg needs at least one tensor")
    if len(vectors) != len(weights):
        raise ValueError(f"{len(vectors)} tensors but {len(weights)} weights")
    w = torch.as_tensor([float(x) for x in weights], dtype=torch.float64)
    if torch.any(w < 0) or float(w.sum()) <= 0:
        raise ValueError(f"fedavg weights must be >= 0 with a positive sum, got {list(weights)}")
    w = w / w.sum()
    acc = torch.zeros(vectors[0].shape, dtype=torch.float64)
    for vec, weight in zip(vectors, w, strict=True):
        if vec.shape != acc.shape:
            raise ValueError(f"fedavg shapes differ: {tuple(vec.shape)} vs {tuple(acc.shape)}")
        acc += weight * vec.to(torch.float64)
    return acc.to(vectors[0].dtype)


def averaging_flops(numel: int | float, n_inputs: int | float) -> float:
    """FLOPs of averaging ``n_inputs`` copies of ``numel`` values (the cost model's charge)."""
    # One multiply and one add per value per averaged copy.
    return 2.0 * numel * n_inputs
