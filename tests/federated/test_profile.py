"""Block profiles and part costs, checked against FLOPs and sizes counted by hand."""

from __future__ import annotations

import numpy as np
import pytest
from torch import nn

from flowsplit.federated.system.profile import (
    BlockProfile,
    aux_head_cost,
    cut_table,
    part_costs,
    profile_model,
)
from flowsplit.models.base import BlockModel


class Cast(nn.Module):
    def forward(self, x):
        return x.float()


def _linear_model() -> BlockModel:
    # Three bias-free linear blocks: FLOPs are exactly 2 * in * out per sample.
    blocks = [
        ("l1", nn.Sequential(Cast(), nn.Linear(6, 4, bias=False))),
        ("l2", nn.Linear(4, 3, bias=False)),
        ("head", nn.Linear(3, 2, bias=False)),
    ]
    return BlockModel(blocks, view="bytes", input_shape=(6,), n_classes=2, name="lin")


def test_profile_counts_flops_params_and_activation_bytes_by_hand():
    # Prepare
    model = _linear_model()
    # Execute
    prof = profile_model(model, batch_size=4)
    # Assert: forward 2*6*4 = 48, 2*4*3 = 24, 2*3*2 = 12 FLOPs per sample.
    assert prof.fwd_flops.tolist() == [48.0, 24.0, 12.0]
    assert prof.params.tolist() == [24, 12, 6]
    # Outputs (4,), (3,), (2,) float32 -> 16, 12, 8 bytes per sample.
    assert prof.out_bytes.tolist() == [16, 12, 8]
    assert prof.out_shapes == ((4,), (3,), (2,))
    # A linear layer's backward is two matrix products of the forward's size: ratio 2.
    assert prof.bwd_ratio_by_type["Linear"] == pytest.approx(2.0)
    assert prof.block_types == ("Cast+Linear", "Linear", "Linear")


def test_profile_round_trips_through_a_dict():
    # Prepare
    prof = profile_model(_linear_model())
    # Execute
    back = BlockProfile.from_dict(prof.to_dict())
    # Assert
    assert back.to_dict() == prof.to_dict()
    assert np.array_equal(back.bwd_ratio, prof.bwd_ratio)


def _hand_profile() -> BlockProfile:
    return BlockProfile(
        model="hand",
        block_names=("b1", "b2", "b3", "b4"),
        block_types=("conv", "conv", "dense", "dense"),
        input_shape=(8,),
        input_bytes=32,
        n_classes=2,
        fwd_flops=np.array([100.0, 200.0, 50.0, 10.0]),
        params=np.array([10, 20, 5, 2]),
        state_numel=np.array([10, 20, 5, 2]),
        out_shapes=((10,), (5,), (3,), (2,)),
        out_bytes=np.array([40, 20, 12, 8]),
        bwd_ratio_by_type={"conv": 2.0, "dense": 1.5},
    )


def test_part_costs_sum_the_blocks_of_each_tier():
    # Prepare
    prof = _hand_profile()
    # Execute: client = b1, aggregator = b2..b3, server = b4.
    costs = part_costs(prof, 1, 3)
    # Assert: forward sums; training adds backward = ratio x forward per block.
    assert costs.fwd_flops.tolist() == [100.0, 250.0, 10.0]
    # client 100 * (1 + 2); aggregator 200 * 3 + 50 * 2.5; server 10 * 2.5.
    assert costs.train_flops.tolist() == [300.0, 725.0, 25.0]
    assert costs.state_numel.tolist() == [10, 25, 2]
    assert costs.act_bytes.tolist() == [40, 12]
    assert costs.three_tier


def test_local_loss_adds_the_auxiliary_heads_to_client_and_aggregator():
    # Prepare
    prof = _hand_profile()
    # Execute
    plain = part_costs(prof, 1, 2)
    local = part_costs(prof, 1, 2, local_loss=True)
    # Assert: head over (10,) -> 2 classes: 3 * 2 * 10 * 2 = 120 FLOPs, 22 values;
    # head over (5,): 3 * 2 * 5 * 2 = 60 FLOPs, 12 values; the server has no head.
    assert aux_head_cost((10,), 2) == (120.0, 22)
    assert (local.train_flops - plain.train_flops).tolist() == [120.0, 60.0, 0.0]
    assert (local.state_numel - plain.state_numel).tolist() == [22, 12, 0]


def test_cut_table_lists_every_legal_cut_with_vectorised_costs():
    # Prepare
    prof = _hand_profile()
    # Execute
    table = cut_table(prof)
    # Assert: 6 legal cuts for 4 blocks; row (1, 3) matches part_costs.
    assert list(zip(table["a"], table["c"], strict=True)) == [
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 2),
        (2, 3),
        (3, 3),
    ]
    row = 2
    assert table["client_flops"][row] == 300.0
    assert table["aggregator_flops"][row] == 725.0
    assert table["server_flops"][row] == 25.0
    assert table["act_c_bytes"][row] == 12
    assert table["depth_client"][row] == 0.25
