"""The shortcut ablation: each perturbation changes what it names and nothing else, and
``evaluate --ablate`` finds the field a model relies on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from flowsplit.cli import main as cli_main
from flowsplit.data import perturb
from flowsplit.reader.views import SEQ_FEATURES
from flowsplit.train.ablation import ablations_for, run_ablations
from flowsplit.train.evaluation import ClassMapping
from tests.train.synth import write_synthetic


def _ipv4_tcp_row(width: int = 80, *, ts: bool = True, payload: bytes = b"GET / HTTP/1.1") -> bytes:
    """An IPv4 TCP packet as an ip-layout row: 20-byte IP header, TCP header with options
    (MSS 4, NOP, NOP, timestamps 10 = 16 bytes -> header 36 bytes), then the payload."""
    ip = bytearray(20)
    ip[0] = 0x45
    ip[4:6] = (0x1234).to_bytes(2, "big")  # IP ID
    ip[8] = 64  # TTL
    ip[9] = 6
    tcp = bytearray(20)
    tcp[4:8] = (1000).to_bytes(4, "big")  # seq
    tcp[8:12] = (2000).to_bytes(4, "big")  # ack
    opts = bytes([2, 4, 5, 0xB4]) + (bytes([1, 1, 8, 10]) + bytes(range(1, 9)) if ts else b"")
    tcp[12] = ((20 + len(opts)) // 4) << 4
    tcp[14:16] = (29200).to_bytes(2, "big")  # window
    row = bytes(ip) + bytes(tcp) + opts + payload
    return (row + bytes(width))[:width]


def _batch(rows: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(1, len(rows), -1).copy()


def test_ip_layout_offsets_find_headers_and_payload():
    x = _batch([_ipv4_tcp_row(), _ipv4_tcp_row(ts=False), bytes(80)])
    at = perturb.ip_layout_offsets(x)
    assert at["l4"][0].tolist() == [20, 20, 0]
    assert at["proto"][0, :2].tolist() == [6, 6]
    assert at["payload"][0, :2].tolist() == [56, 44]  # 20 + 36, 20 + 24
    assert x[0, 0, 56:59].tobytes() == b"GET"


@pytest.mark.parametrize(
    ("field", "changed"),
    [
        ("ip_id", {4, 5}),
        ("ttl", {8}),
        ("seq_ack", set(range(24, 32))),
        ("window", {34, 35}),
        ("tcp_timestamps", set(range(48, 56))),
    ],
)
def test_each_ip_field_changes_its_bytes_only(field, changed):
    x = _batch([_ipv4_tcp_row() for _ in range(3)] + [bytes(80)])
    rng = np.random.default_rng(1)
    # Over several draws each of the field's bytes changes at least once, nothing else ever.
    seen: set[int] = set()
    for _ in range(8):
        y = perturb.ip_field(x, field, rng)
        assert y.shape == x.shape and y.dtype == np.uint8
        diff = set(np.flatnonzero((y[0, :3] != x[0, :3]).any(axis=0)).tolist())
        assert diff <= changed, diff - changed
        seen |= diff
        assert not y[0, 3].any()  # padding stays padding
    assert seen == changed


def test_per_flow_offsets_keep_the_steps_within_a_flow():
    rows = [_ipv4_tcp_row() for _ in range(3)]
    x = _batch(rows)
    x[0, 1, 24:28] = np.frombuffer((1500).to_bytes(4, "big"), dtype=np.uint8)
    y = perturb.ip_field(x, "seq_ack", np.random.default_rng(3))
    seqs = [int.from_bytes(y[0, i, 24:28].tobytes(), "big") for i in range(3)]
    assert (seqs[1] - seqs[0]) % (1 << 32) == 500 and seqs[2] == seqs[0]
    assert seqs[0] != 1000


def test_tcp_options_become_no_ops_and_headers_payload_split():
    x = _batch([_ipv4_tcp_row()])
    y = perturb.ip_field(x, "tcp_options", np.random.default_rng(0))
    assert (y[0, 0, 40:56] == 1).all() and (y[0, 0, :40] == x[0, 0, :40]).all()
    assert (y[0, 0, 56:] == x[0, 0, 56:]).all()
    h = perturb.headers_only(x, "ip")
    assert (h[0, 0, :56] == x[0, 0, :56]).all() and not h[0, 0, 56:].any()
    p = perturb.payload_only(x, "ip")
    assert p[0, 0, 0] == 0x40 and not p[0, 0, 1:56].any()
    assert (p[0, 0, 56:] == x[0, 0, 56:]).all()
    k = perturb.mask_payload_prefix(x, "pkt_bytes", "ip", 3)
    assert not k[0, 0, 56:59].any() and k[0, 0, 59:70].tobytes() == b" / HTTP/1.1"


def test_payload_layout_and_seq_perturbations():
    rng = np.random.default_rng(0)
    x = np.zeros((2, 5, 16), dtype=np.uint8)
    x[:, :4, 0] = 1
    x[:, :4, 3] = 6
    x[:, :4, 1:3] = np.arange(8, dtype=np.uint8).reshape(1, 4, 2)
    x[:, :4, 8:] = 7
    w = perturb.payload_window(x, rng)
    assert (w[:, :4, 6:8] != 0).any() and (w[..., :6] == x[..., :6]).all()
    assert not w[:, 4].any()
    po = perturb.payload_only(x, "payload")
    assert (po[:, :4, 0] == 1).all() and not po[:, :4, 1:8].any() and (po[:, :4, 8:] == 7).all()
    s = perturb.payload_sizes_shuffled(x, rng)
    assert sorted(map(tuple, s[0, :4, 1:3])) == sorted(map(tuple, x[0, :4, 1:3]))
    assert not s[:, 4].any()
    # seq: timing permuted within the flow, sizes keep each packet's direction
    f = list(SEQ_FEATURES)
    q = np.zeros((1, 6, len(f)), dtype=np.float32)
    q[0, :5, f.index("mask")] = 1
    q[0, :5, f.index("size")] = [100, -200, 300, -400, 500]
    q[0, :5, f.index("log_iat")] = [0, 1, 2, 3, 4]
    t = perturb.seq_shuffled(q, "timing", rng)
    assert sorted(t[0, :5, f.index("log_iat")]) == [0, 1, 2, 3, 4]
    z = perturb.seq_shuffled(q, "sizes", np.random.default_rng(5))
    sizes = z[0, :5, f.index("size")]
    assert (np.sign(sizes) == np.sign(q[0, :5, f.index("size")])).all()
    assert sorted(abs(sizes)) == [100, 200, 300, 400, 500]
    assert (z[0, 5] == 0).all()


class _ReadsWindow(torch.nn.Module):
    """Class 1 when the first packet's TCP window (payload layout) is above 30000."""

    def forward(self, x):
        win = x[:, 0, 6].long() * 256 + x[:, 0, 7].long()
        big = (win > 30000).float()
        return torch.stack([1 - big, big], dim=1)


def test_the_ablation_finds_the_field_a_model_relies_on():
    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    x = np.zeros((n, 4, 16), dtype=np.uint8)
    x[:, :, 0], x[:, :, 3] = 1, 6
    win = np.where(y == 1, 60000, 1000)
    x[:, :, 6], x[:, :, 7] = win[:, None] >> 8, win[:, None] & 0xFF
    rows = run_ablations(
        _ReadsWindow(), x, y, ClassMapping(["a", "b"], ["a", "b"]), ablations_for("pkt_bytes")
    )
    by = {r["name"]: r for r in rows}
    assert by["none"]["accuracy"] == 1.0
    assert by["headers_only"]["accuracy"] == 1.0  # the payload is not what it reads
    assert 0.35 < by["window"]["accuracy"] < 0.65  # the window is
    assert by["payload_only"]["accuracy"] < 0.65
    assert by["window"]["macro_f1_kept"] < 0.7


def test_stats_columns_are_permuted_by_group():
    cols = ["duration", "iat_mean", "size_mean", "init_win_fwd", "pkts"]
    x = np.arange(50, dtype=np.float32).reshape(10, 5)
    names = [a.name for a in ablations_for("stats", columns=cols)]
    assert names == [
        "timing_permuted",
        "sizes_permuted",
        "counts_permuted",
        "header_fields_permuted",
    ]
    y = perturb.stats_permuted(x, cols, "timing", np.random.default_rng(0))
    assert (y[:, 2:] == x[:, 2:]).all() and not (y[:, :2] == x[:, :2]).all()
    assert sorted(y[:, 0]) == sorted(x[:, 0])


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablate")
    data = write_synthetic(root / "ds", n=90, n_classes=3)
    run = root / "run"
    argv = ["train", str(data), "-m", "cnn", "--view", "bytes", "--epochs", "2"]
    argv += ["--threads", "1", "-q", "-o", str(run), "--model-option", "channels=[8,8]"]
    assert cli_main(argv) == 0
    return root, data, run


def test_evaluate_ablate_json_table_and_picture(cnn_run, capsys, tmp_path):
    root, data, run = cnn_run
    png = tmp_path / "abl.png"
    capsys.readouterr()
    argv = ["evaluate", str(run), str(data), "--ablate", "--ablate-k", "8,64", "--json"]
    assert cli_main([*argv, "--ablate-plot", str(png)]) == 0
    s = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in s["ablations"]]
    assert names == ["none", "first_8_masked", "first_64_masked"]
    assert s["ablations"][0]["accuracy"] == s["accuracy"]
    # the synthetic bytes view's pattern spans all 64 bytes: masking them all leaves chance
    assert s["ablations"][2]["accuracy"] <= max(1 / 3 + 0.15, s["accuracy"])
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "other_source" not in s  # the dataset it trained on
    assert cli_main(["evaluate", str(run), str(data), "--ablate"]) == 0
    out = capsys.readouterr().out
    assert "first_64_masked" in out and "macro-F1" in out


def test_evaluate_on_another_dataset_reports_the_drop(cnn_run, capsys):
    root, _, run = cnn_run
    other = write_synthetic(root / "other", n=60, n_classes=3, seed=9)
    capsys.readouterr()
    assert cli_main(["evaluate", str(run), str(other), "--split", "all", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    own = json.loads((run / "metrics.json").read_text())
    o = s["other_source"]
    assert o["own_test"]["macro_f1"] == pytest.approx(own["macro_f1"])
    assert o["macro_f1_drop"] == pytest.approx(own["macro_f1"] - s["macro_f1"])
    assert o["shared_capture_files"] == 1  # both synthetic sets name one source "synthetic"
    assert cli_main(["evaluate", str(run), str(other), "--split", "all"]) == 0
    assert "drop" in capsys.readouterr().out


def test_bad_ablate_k_is_one_line(cnn_run, capsys):
    _, data, run = cnn_run
    assert cli_main(["evaluate", str(run), str(data), "--ablate", "--ablate-k", "x"]) != 0
    err = capsys.readouterr().err
    assert "--ablate-k" in err and "Traceback" not in err
