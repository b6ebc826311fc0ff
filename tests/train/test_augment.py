"""Training-time augmentation: what each option changes, reproducibly, and train --augment."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flowsplit.cli import main as cli_main
from flowsplit.data.augment import (
    APPLIES,
    DEFAULT,
    MAX_JITTER,
    Augmenter,
    AugmentSpec,
    ViewInfo,
    parse_augment,
)
from flowsplit.errors import ConfigError
from flowsplit.reader.views import SEQ_FEATURES
from tests.train.synth import write_synthetic


def _pkt(n=3, p=6, width=16, present=4) -> np.ndarray:
    """Payload-layout rows: packet k of flow i has direction 1, size 100 + k, TCP,
    window 1000, payload bytes all ((5i + k) mod 255 + 1)."""
    x = np.zeros((n, p, width), dtype=np.uint8)
    for i in range(n):
        for k in range(present):
            x[i, k, 0], x[i, k, 1], x[i, k, 2], x[i, k, 3] = 1, 0, 100 + k, 6
            x[i, k, 6], x[i, k, 7] = 1000 >> 8, 1000 & 0xFF
            x[i, k, 8:] = (i * 5 + k) % 255 + 1
    return x


def _packets(row: np.ndarray) -> list[int]:
    """The packets of one flow, named by their payload byte."""
    return [int(r[8]) for r in row if r.any()]


def test_parse_none_default_and_lists():
    assert not parse_augment("none").active and parse_augment(None) == AugmentSpec()
    assert parse_augment("default") == DEFAULT and DEFAULT.active
    assert parse_augment("drop=0.1, mask=0.05") == AugmentSpec(drop=0.1, mask=0.05)
    assert parse_augment("drop=0.1,mask=0.05").to_text() == "drop=0.1,mask=0.05"
    for bad in ("drop", "lose=0.1", "drop=x", "drop=2", "jitter=-1"):
        with pytest.raises(ConfigError, match="--augment"):
            parse_augment(bad)


def test_each_part_is_bounded_where_it_is_declared():
    """A part's largest value comes from its field: probabilities stop at 1, jitter
    at MAX_JITTER; each field names the views it changes."""
    assert parse_augment("drop=1").drop == 1 and parse_augment(f"jitter={MAX_JITTER}").active
    with pytest.raises(ConfigError, match=r"drop=1.5 must be a probability in \[0, 1\]"):
        parse_augment("drop=1.5")
    with pytest.raises(ConfigError, match=r"jitter=3.5 must be a log-normal sigma in \[0, 3\]"):
        parse_augment("jitter=3.5")
    assert APPLIES["mask"] == ("pkt_bytes", "bytes") and APPLIES["fields"] == ("pkt_bytes",)


def test_each_row_is_augmented_the_same_whatever_batch_it_is_in():
    aug = Augmenter(DEFAULT, ViewInfo("pkt_bytes"), seed=3)
    x, rows = _pkt(n=6), np.array([10, 11, 12, 13, 14, 15])
    whole = aug(x, rows, epoch=2)
    halves = np.concatenate([aug(x[:3], rows[:3], 2), aug(x[3:][::-1], rows[3:][::-1], 2)[::-1]])
    assert (whole == halves).all()
    assert not (aug(x, rows, epoch=3) == whole).all()  # another epoch, other draws
    assert (x == _pkt(n=6)).all()  # the input is left alone


def test_drop_dup_and_swap_move_whole_packets():
    x, rows = _pkt(n=40), np.arange(40)
    out = Augmenter(AugmentSpec(drop=0.5), ViewInfo("pkt_bytes"))(x, rows, 0)
    for i in range(40):
        got, had = _packets(out[i]), _packets(x[i])
        assert 1 <= len(got) <= 4 and got == [p for p in had if p in got]  # order kept
    assert any(len(_packets(r)) < 4 for r in out)
    out = Augmenter(AugmentSpec(drop=1.0), ViewInfo("pkt_bytes"))(x, rows, 0)
    assert all(len(_packets(r)) == 1 for r in out)  # a flow keeps one packet
    out = Augmenter(AugmentSpec(dup=1.0), ViewInfo("pkt_bytes"))(x, rows, 0)
    first = _packets(x[0])[0]
    assert _packets(out[0]) == [first, first, first + 1, first + 1, first + 2, first + 2]
    out = Augmenter(AugmentSpec(swap=0.5), ViewInfo("pkt_bytes"))(x, rows, 0)
    assert all(sorted(_packets(o)) == _packets(r) for o, r in zip(out, x, strict=True))
    assert any(_packets(o) != _packets(r) for o, r in zip(out, x, strict=True))


def test_mask_touches_payload_bytes_only_and_fields_the_window():
    x, rows = _pkt(n=20), np.arange(20)
    out = Augmenter(AugmentSpec(mask=0.5), ViewInfo("pkt_bytes"))(x, rows, 0)
    assert (out[..., :8] == x[..., :8]).all()
    frac = (out[..., 8:][x[..., 8:] != 0] == 0).mean()
    assert 0.4 < frac < 0.6
    out = Augmenter(AugmentSpec(fields=1.0), ViewInfo("pkt_bytes"))(x, rows, 0)
    assert (out[..., 6:8] != x[..., 6:8]).any() and (out[..., :6] == x[..., :6]).all()
    assert (out[..., 8:] == x[..., 8:]).all()
    b = np.full((20, 64), 7, dtype=np.uint8)
    outb = Augmenter(AugmentSpec(mask=0.25), ViewInfo("bytes"))(b, rows, 0)
    assert 0.15 < (outb == 0).mean() < 0.35


def test_seq_jitter_keeps_directions_and_padding():
    f = list(SEQ_FEATURES)
    x = np.zeros((10, 8, len(f)), dtype=np.float32)
    x[:, :5, f.index("mask")] = 1
    x[:, :5, f.index("size")] = [100, -200, 300, -400, 500]
    x[:, :5, f.index("log_iat")] = 2.0
    out = Augmenter(AugmentSpec(jitter=0.1), ViewInfo("seq"))(x, np.arange(10), 0)
    s = out[:, :5, f.index("size")]
    assert (np.sign(s) == np.sign(x[:, :5, f.index("size")])).all()
    assert not np.allclose(s, x[:, :5, f.index("size")])
    assert np.allclose(s, x[:, :5, f.index("size")], rtol=0.6)
    assert (out[:, 5:] == 0).all() and (out[..., f.index("mask")] == x[..., f.index("mask")]).all()


def test_train_with_augment_records_it_and_refuses_a_bad_spec(tmp_path, capsys):
    data = write_synthetic(tmp_path / "ds", n=60, n_classes=3, pkt_shape=(4, 16))
    run = tmp_path / "run"
    argv = ["train", str(data), "-m", "cnn", "--view", "bytes", "--epochs", "2", "--threads", "1"]
    argv += ["-q", "--model-option", "channels=[4,8]"]
    assert cli_main([*argv, "-o", str(run), "--augment", "mask=0.1"]) == 0
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["train"]["augment"] == "mask=0.1"
    capsys.readouterr()
    assert cli_main([*argv, "-o", str(tmp_path / "bad"), "--augment", "drop=7"]) != 0
    err = capsys.readouterr().err
    assert "--augment" in err and "probability" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text,view,says",
    [
        ("drop=0.1", "bytes", "drop does nothing to the bytes view, which takes mask"),
        ("mask=0.1,fields=1", "seq", "mask, fields do nothing to the seq view"),
        ("default", "stats", "which takes no augmentation"),
        ("jitter=0.1", "stats", "jitter does nothing to the stats view"),
    ],
)
def test_an_augmentation_that_would_do_nothing_to_the_view_is_refused(text, view, says):
    from flowsplit.data.augment import check_augment_view

    with pytest.raises(ConfigError, match=says):
        check_augment_view(text, view)


@pytest.mark.parametrize(
    "text,view",
    [("default", "bytes"), ("default", "seq"), ("mask=0.1", "pkt_bytes"), (None, "stats")],
)
def test_an_augmentation_with_something_to_change_is_accepted(text, view):
    from flowsplit.data.augment import check_augment_view

    check_augment_view(text, view)  # default on bytes: its mask applies, the rest cannot


def test_train_refuses_packet_augmentation_of_the_bytes_view_before_training(tmp_path, capsys):
    data = write_synthetic(tmp_path / "ds", n=60, n_classes=3, pkt_shape=(4, 16))
    argv = ["train", str(data), "-m", "cnn", "--view", "bytes", "--epochs", "1", "-q"]
    assert cli_main([*argv, "-o", str(tmp_path / "r"), "--augment", "drop=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("drop does nothing to the bytes view, which takes mask"), err
    assert not (tmp_path / "r").exists()  # refused before the run directory was made
