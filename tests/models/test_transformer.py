"""The small transformer: a block list that cuts anywhere, masks padding, stays small."""

from __future__ import annotations

import json

import pytest
import torch

from flowsplit.cli import main as cli_main
from flowsplit.errors import ConfigError
from flowsplit.federated.system.profile import profile_model
from flowsplit.models.registry import build_model, model_options
from flowsplit.models.transformer import MAX_PARAMS
from tests.train.synth import write_synthetic

TINY = {"patch": 8, "embed": 4, "dim": 16, "heads": 2, "ff": 32, "depth": 2, "dropout": 0.0}


def _flows(n: int = 6, shape=(16, 64), present: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 256, (n, *shape), generator=g, dtype=torch.uint8)
    x[:, present:] = 0  # packets the flows do not have
    return x


def test_defaults_are_small_and_blocks_are_named():
    m = build_model("transformer", view="pkt_bytes", input_shape=(16, 64), n_classes=8)
    n = sum(p.numel() for p in m.parameters())
    assert 100_000 < n <= MAX_PARAMS
    assert m.block_names == ["embed", "enc1", "enc2", "enc3", "enc4", "head"]
    assert m(_flows()).shape == (6, 8)
    b = build_model("transformer", view="bytes", input_shape=(784,), n_classes=20)
    assert b(torch.randint(0, 256, (3, 784), dtype=torch.uint8)).shape == (3, 20)
    assert model_options("transformer")["depth"] == 4


def test_too_many_parameters_or_a_bad_size_is_refused():
    with pytest.raises(ConfigError, match="parameters"):
        build_model(
            "transformer", view="pkt_bytes", input_shape=(16, 64), n_classes=8, dim=512, ff=2048
        )
    with pytest.raises(ConfigError, match="multiple of heads"):
        build_model("transformer", view="bytes", input_shape=(64,), n_classes=2, dim=10, heads=4)
    with pytest.raises(ConfigError, match="reads the views"):
        build_model("transformer", view="seq", input_shape=(8, 4), n_classes=2)


@pytest.mark.parametrize("stem", [0, 3])
def test_any_cut_composes_to_the_whole_model(stem):
    torch.manual_seed(0)
    opts = {**TINY, "stem": stem}
    m = build_model("transformer", view="pkt_bytes", input_shape=(16, 64), n_classes=4, **opts)
    m.eval()
    x = _flows()
    whole = m(x)
    for cut in range(1, m.n_blocks):
        h = m.forward_range(x, 0, cut)
        assert h.dim() == (2 if cut == m.n_blocks else 3)
        torch.testing.assert_close(m.forward_range(h, cut, m.n_blocks), whole)


def test_absent_packets_take_no_part():
    """A flow's logits do not depend on how many absent packets follow it: the tokens of
    padding rows are masked out of attention and of the mean."""
    torch.manual_seed(0)
    m = build_model("transformer", view="pkt_bytes", input_shape=(16, 64), n_classes=4, **TINY)
    m.eval()
    x = _flows(present=5)
    # The same 5 packets in a model that sees only 8 rows: drop absent rows 8..15.
    torch.manual_seed(0)
    short = build_model("transformer", view="pkt_bytes", input_shape=(8, 64), n_classes=4, **TINY)
    state = m.state_dict()
    state["blocks.embed.row_pos"] = state["blocks.embed.row_pos"][:8]
    short.load_state_dict(state)
    short.eval()
    torch.testing.assert_close(short(x[:, :8]), m(x), rtol=1e-4, atol=1e-5)
    # ...while a present packet does change them.
    y = x.clone()
    y[:, 2, 10] ^= 0xFF
    assert not torch.allclose(m(y), m(x))


def test_the_stem_sees_neighbouring_bytes_within_a_packet_only():
    """``stem=K``: a byte changes the tokens of its packet's patches within the stem's
    reach, never a token of another packet (pkt_bytes); in the bytes view the payload is
    one run, so the tokens after the byte's own change too, up to the reach."""
    torch.manual_seed(0)
    opts = {**TINY, "stem": 5, "stem_width": 8}
    m = build_model("transformer", view="pkt_bytes", input_shape=(4, 16), n_classes=3, **opts)
    m.eval()
    x = _flows(n=2, shape=(4, 16), present=4)
    y = x.clone()
    y[:, 1, 7] ^= 0xFF  # packet 1, the last byte of its first patch (patch 8)
    embed = m.blocks["embed"]
    diff = (embed(y) - embed(x))[..., :-1].abs().sum(-1)  # (B, tokens): 4 packets x 2 patches
    changed = (diff > 0).any(0).reshape(4, 2)
    assert changed.tolist() == [[False, False], [True, True], [False, False], [False, False]]
    # without the stem only the byte's own patch moves
    plain = build_model("transformer", view="pkt_bytes", input_shape=(4, 16), n_classes=3, **TINY)
    d0 = (plain.blocks["embed"](y) - plain.blocks["embed"](x))[..., :-1].abs().sum(-1)
    assert (d0 > 0).any(0).reshape(4, 2).tolist()[1] == [True, False]
    # bytes view, 8 patches of 8: byte 7 reaches bytes 5..9 (first convolution), pooled
    # positions 1..2 of 4 bytes, 0..4 after the second convolution: tokens 0, 1 and 2
    b = build_model("transformer", view="bytes", input_shape=(64,), n_classes=3, **opts)
    xb = torch.randint(1, 256, (2, 64), dtype=torch.uint8)
    yb = xb.clone()
    yb[:, 7] ^= 0xFF
    db = (b.blocks["embed"](yb) - b.blocks["embed"](xb))[..., :-1].abs().sum(-1)
    assert (db > 0).any(0).tolist() == [True] * 3 + [False] * 5
    assert m(x).shape == (2, 3) and b(xb).shape == (2, 3)


def test_a_bad_stem_is_refused():
    for stem in (4, -1):
        with pytest.raises(ConfigError, match="odd kernel width"):
            build_model("transformer", view="bytes", input_shape=(64,), n_classes=2, stem=stem)
    with pytest.raises(ConfigError, match="patch a multiple of 4"):
        build_model("transformer", view="bytes", input_shape=(60,), n_classes=2, stem=3, patch=6)


def test_profile_counts_every_block():
    m = build_model("transformer", view="pkt_bytes", input_shape=(16, 64), n_classes=8)
    prof = profile_model(m, batch_size=2)
    assert prof.block_names == tuple(m.block_names)
    assert (prof.fwd_flops > 0).all() and prof.params.sum() == sum(
        p.numel() for p in m.parameters()
    )
    # between encoder layers: 64 tokens of dim 128 plus the mask channel, float32
    assert prof.out_bytes[1] == 64 * 129 * 4
    # the stem's convolutions are counted in the embed block: at least their
    # multiply-adds (16 packets: 64 x 16 -> 64 channels, then 16 x 64 -> 128, kernel 5)
    stem = profile_model(
        build_model("transformer", view="pkt_bytes", input_shape=(16, 64), n_classes=8, stem=5),
        batch_size=2,
    )
    convs = 16 * (64 * 16 * 64 * 5 + 16 * 64 * 128 * 5)
    assert stem.fwd_flops[0] - prof.fwd_flops[0] >= convs
    assert (stem.fwd_flops[1:] == prof.fwd_flops[1:]).all()


def test_it_learns_the_synthetic_set(tmp_path, capsys):
    data = write_synthetic(tmp_path / "ds", n=120, n_classes=3, pkt_shape=(4, 16))
    run = tmp_path / "run"
    argv = ["train", str(data), "-m", "transformer", "--epochs", "6", "--threads", "1"]
    argv += ["-q", "-o", str(run), "--lr", "3e-3", "--patience", "0"]
    for k, v in TINY.items():
        argv += ["--model-option", f"{k}={v}"]
    assert cli_main(argv) == 0
    r = json.loads((run / "metrics.json").read_text())
    assert r["model"] == "transformer" and r["view"] == "pkt_bytes"
    assert r["accuracy"] > 0.6  # chance is 1/3
