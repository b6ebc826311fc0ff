"""Global-batch dropout masks: N ranks' rows interleave into the one-process mask."""

from __future__ import annotations

import torch
from torch import nn

from flowsplit.train.dropout import GlobalBatchDropout, MaskSource, use_global_masks


def _masks(world_size: int, rank: int, rows: int, steps: int, seed: int = 3) -> list:
    source = MaskSource(world_size=world_size, rank=rank)
    source.reseed(seed)
    drop = GlobalBatchDropout(0.5, False, source).train()
    return [drop(torch.ones(rows, 5)) for _ in range(steps)]


def test_two_ranks_apply_the_rows_of_the_centralised_mask():
    # 3 steps of 8 rows, then a short last step of 6 (3 per rank).
    central = _masks(1, 0, 8, 3) + [_masks(1, 0, 6, 4)[3]]
    ranks = [_masks(2, r, 4, 3) + [_masks(2, r, 3, 4)[3]] for r in (0, 1)]
    for step, whole in enumerate(central):
        woven = torch.empty_like(whole)
        woven[0::2], woven[1::2] = ranks[0][step], ranks[1][step]
        assert torch.equal(woven, whole), f"step {step}"
        assert set(whole.unique().tolist()) == {0.0, 2.0}  # dropped, or kept and scaled
    # Each rank's own rows differ from the other's (a shared stream, not a shared mask).
    assert not torch.equal(ranks[0][0], ranks[1][0])


def test_swap_keeps_the_state_dict_and_eval_is_identity():
    model = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.3), nn.Sequential(nn.Dropout(0.1)))
    keys = list(model.state_dict())
    source = MaskSource(world_size=1, rank=0)
    assert use_global_masks(model, source) == 2
    assert list(model.state_dict()) == keys
    assert all(type(m) is not nn.Dropout for m in model.modules())
    x = torch.randn(2, 4)
    assert torch.equal(model.eval()(x), model[0](x))
