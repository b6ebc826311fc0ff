"""flowsplit pretrain: masked byte modelling, the encoder file, train --init-from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flowsplit.cli import main as cli_main
from flowsplit.models.registry import build_model
from flowsplit.models.transformer import MaskedBytePretrainer, load_encoder
from tests.train.synth import write_synthetic

CAPTURES = Path(__file__).resolve().parents[2] / "demo" / "captures"
TINY = {"patch": 8, "embed": 4, "dim": 16, "heads": 2, "ff": 32, "depth": 2, "dropout": 0.0}
TINY_ARGS = [a for k, v in TINY.items() for a in ("--model-option", f"{k}={v}")]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_masking_hides_only_present_patches_and_the_loss_is_over_them():
    torch.manual_seed(0)
    m = build_model("transformer", view="pkt_bytes", input_shape=(4, 16), n_classes=2, **TINY)
    net = MaskedBytePretrainer(m, mask_ratio=0.5)
    x = torch.randint(1, 256, (8, 4, 16), dtype=torch.uint8)
    x[:, 2:] = 0  # two packets absent: never chosen, never scored
    loss, right, n = net(x, torch.Generator().manual_seed(1))
    # 8 flows x 2 present rows x 2 patches = 32 present tokens; about half are hidden
    assert 0 < int(n) <= 32 * 8 and int(n) % 8 == 0
    assert 0 <= int(right) <= int(n)
    assert abs(float(loss.detach()) - torch.log(torch.tensor(256.0))) < 1.0  # untrained: ~ln 256
    x[:] = 0
    x[:, 0, 0] = 1  # only the first patch of the first row holds a byte
    _, _, n = net(x, torch.Generator().manual_seed(1))
    assert int(n) <= 8 * 2 * 8  # the first row's two patches at most


def test_pretrain_on_the_embedded_capture_loss_falls_and_train_starts_from_it(tmp_path, capsys):
    pre = tmp_path / "pre"
    argv = ["pretrain", str(CAPTURES / "dns"), str(CAPTURES / "http"), "-o", str(pre)]
    argv += ["--steps", "40", "--batch-size", "16", "--lr", "3e-3", "-q", *TINY_ARGS]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "pretrained the transformer" in out and "encoder.pt" in out
    info = json.loads((pre / "pretrain.json").read_text())
    first, last = info["curve"][0]["loss"], info["curve"][-1]["loss"]
    assert last < first - 0.5, info["curve"]  # learns at least the byte frequencies
    assert info["input_shape"] == [16, 64] and info["view"] == "pkt_bytes"
    doc = torch.load(pre / "encoder.pt", weights_only=True)
    assert doc["format"] == "flowsplit-pretrained-encoder"
    assert not any(k.startswith("blocks.head.") for k in doc["state"])

    # train from it: with a vanishing learning rate the encoder ends where it started
    ds = write_synthetic(tmp_path / "ds", pkt_shape=(16, 64))
    run = tmp_path / "run"
    argv = ["train", str(ds), "-m", "transformer", "--init-from", str(pre), "-o", str(run)]
    argv += ["--epochs", "1", "--lr", "1e-12", "-q", "--threads", "1", *TINY_ARGS]
    assert cli_main(argv) == 0
    from safetensors.torch import load_file

    trained = load_file(str(run / "weights.safetensors"))
    for key, value in doc["state"].items():
        torch.testing.assert_close(trained[key], value, atol=1e-6, rtol=0)
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["train"]["init_from"] == str(pre.resolve())


def test_pretrain_on_a_dataset_folder_uses_its_train_rows(tmp_path):
    from flowsplit.train.pretrain import load_rows

    ds = write_synthetic(tmp_path / "ds", n=50, pkt_shape=(4, 16), split=(0.6, 0.2))
    rows, view = load_rows([str(ds)], like=None, view=None, split="train")
    assert view == "pkt_bytes" and rows.shape == (30, 4, 16)
    rows, _ = load_rows([str(ds)], like=None, view="bytes", split="all")
    assert rows.shape == (50, 64)


def test_a_wrong_encoder_file_is_one_line(tmp_path, capsys):
    ds = write_synthetic(tmp_path / "ds", pkt_shape=(4, 16))
    base = ["train", str(ds), "-m", "transformer", "--epochs", "1", "-q", *TINY_ARGS]

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "encoder.pt").write_bytes(b"not a torch file")
    assert cli_main([*base, "--init-from", str(bad), "-o", str(tmp_path / "r1")]) == 2
    assert "encoder.pt: not a weights file of `flowsplit pretrain`" in _error_line(capsys)

    assert cli_main([*base, "--init-from", str(tmp_path / "nowhere"), "-o", str(tmp_path / "r2")])
    assert "no such file" in _error_line(capsys)

    # an encoder of another input shape (pre-trained on 16 x 64 packets)
    other = tmp_path / "other"
    from flowsplit.train.pretrain import pretrain

    rows = torch.randint(1, 256, (20, 8, 16), dtype=torch.uint8).numpy()
    pretrain(rows, "pkt_bytes", other, steps=2, batch_size=4, model_options=TINY)
    assert cli_main([*base, "--init-from", str(other), "-o", str(tmp_path / "r3")]) == 2
    assert "pkt_bytes (8, 16), this model reads pkt_bytes (4, 16)" in _error_line(capsys)

    # another size, and a model that is not the transformer
    m = build_model("transformer", view="pkt_bytes", input_shape=(8, 16), n_classes=2, **TINY)
    with pytest.raises(Exception, match="another size: dim=16 \\(model 32\\)"):
        load_encoder(m, str(other), {**TINY, "dim": 32})
    with pytest.raises(Exception, match="another size: stem=0 \\(model 5\\)"):
        load_encoder(m, str(other), {**TINY, "stem": 5})
    # without a stem no weight depends on stem_width: another value is no other size
    load_encoder(m, str(other), {**TINY, "stem": 0, "stem_width": 32})
    # a file written before the stem existed names no stem: it is a stem-less encoder
    doc = torch.load(other / "encoder.pt", weights_only=True)
    assert doc["options"]["stem"] == 0 and doc["options"]["stem_width"] == 64
    del doc["options"]["stem"], doc["options"]["stem_width"]
    torch.save(doc, other / "encoder.pt")
    load_encoder(m, str(other), {**TINY, "stem": 0, "stem_width": 64})
    with pytest.raises(Exception, match="another size: stem=0 \\(model 3\\); give"):
        load_encoder(m, str(other), {**TINY, "stem": 3, "stem_width": 64})
    argv = ["train", str(ds), "-m", "cnn", "--init-from", str(other), "-o", str(tmp_path / "r4")]
    assert cli_main(argv) == 2
    assert "pre-trained weights are for the transformer, not cnn" in _error_line(capsys)
    assert not (tmp_path / "r1" / "weights.safetensors").exists()
