"""FedAvg on hand-computed examples."""

from __future__ import annotations

import pytest
import torch

from flowsplit.federated.system.aggregate import fedavg


def test_fedavg_weights_by_sample_count():
    # Prepare: three clients with 1, 3 and 4 samples.
    v = [torch.tensor([1.0, 0.0]), torch.tensor([2.0, 4.0]), torch.tensor([0.0, 8.0])]
    # Execute
    avg = fedavg(v, [1, 3, 4])
    # Assert: (1*1 + 3*2 + 4*0) / 8 = 7/8; (0 + 3*4 + 4*8) / 8 = 44/8 = 5.5.
    assert avg.tolist() == [0.875, 5.5]
    assert avg.dtype == torch.float32


def test_averaging_within_aggregators_then_across_equals_one_global_average():
    # Prepare: aggregator A serves clients (n=1, v=1) and (n=3, v=5); B serves (n=4, v=-2).
    a = fedavg([torch.tensor([1.0]), torch.tensor([5.0])], [1, 3])  # (1 + 15) / 4 = 4
    b = fedavg([torch.tensor([-2.0])], [4])
    # Execute: the server weights aggregators by their totals 4 and 4.
    hierarchical = fedavg([a, b], [4, 4])
    flat = fedavg([torch.tensor([1.0]), torch.tensor([5.0]), torch.tensor([-2.0])], [1, 3, 4])
    # Assert: (1 + 15 - 8) / 8 = 1.
    assert a.item() == 4.0
    assert hierarchical.item() == flat.item() == 1.0


def test_zero_weights_are_ignored_and_bad_weights_rejected():
    assert fedavg([torch.tensor([3.0]), torch.tensor([9.0])], [0, 2]).item() == 9.0
    with pytest.raises(ValueError, match="positive sum"):
        fedavg([torch.tensor([1.0])], [0])
    with pytest.raises(ValueError, match="shapes differ"):
        fedavg([torch.zeros(2), torch.zeros(3)], [1, 1])
