"""Neural models: block structure, raw inputs, recurrent cells against hand-written maths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.layers import (
    ConvRecurrent,
    MaskedFramePool,
    MaskedTimePool,
    SeqInput,
    SizeEmbedding,
    fit_input_scaler,
    presence_mask,
)
from flowsplit.models.registry import (
    MODEL_SPECS,
    build_estimator,
    build_model,
    default_view,
    model_options,
    neural_models,
)
from flowsplit.train.config import TrainConfig

# (model, view, stored sample shape) covering every accepted view, at small sizes.
CASES = [
    ("cnn", "bytes", (784,)),
    ("cnn", "bytes", (28, 28)),
    ("cnn", "bytes", (100,)),
    ("cnn", "bytes", (60,)),  # not a square (1-D is the default anyway)
    ("cnn", "seq", (16, 5)),
    ("lstm", "seq", (16, 5)),
    ("lstm", "bytes", (64,)),
    ("lstm", "pkt_bytes", (6, 64)),
    ("convlstm", "pkt_bytes", (6, 64)),
    ("convlstm", "pkt_bytes", (6, 8, 8)),
    ("convlstm", "bytes", (64,)),
    ("convgru", "pkt_bytes", (6, 64)),
    ("convgru", "bytes", (784,)),
]


def _raw_batch(view: str, shape: tuple[int, ...], n: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if view == "seq":  # packet sizes and gaps as stored: large and unscaled
        return torch.rand((n, *shape), generator=g) * 1500
    return torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)


@pytest.mark.parametrize(("name", "view", "shape"), CASES)
def test_blocks_compose_to_the_model_and_take_raw_rows(name, view, shape):
    # Prepare
    model = build_model(name, view=view, input_shape=shape, n_classes=5).eval()  # no dropout
    x = _raw_batch(view, shape)
    # Execute: the model, and the same blocks applied one at a time
    out = model(x)
    h = x
    for i in range(model.n_blocks):
        h = model.forward_range(h, i, i + 1)
        assert isinstance(h, torch.Tensor)
    # Assert
    assert isinstance(model, BlockModel)
    assert model.name == name and model.view == view and model.input_shape == shape
    assert out.shape == (3, 5) and torch.isfinite(out).all()
    torch.testing.assert_close(h, out)
    # A split anywhere gives the same result: client part then server part.
    for cut in range(1, model.n_blocks):
        torch.testing.assert_close(
            model.forward_range(model.forward_range(x, 0, cut), cut, model.n_blocks), out
        )


@pytest.mark.parametrize(
    ("name", "view", "shape", "steps"),
    [
        ("lstm", "seq", (16, 5), 16),
        ("lstm", "bytes", (64,), 8),  # 8 rows of 8 bytes
        ("convlstm", "pkt_bytes", (6, 64), 6),
        ("convgru", "bytes", (784,), 7),  # 7 strips of 4 rows
    ],
)
def test_recurrent_blocks_return_the_whole_sequence(name, view, shape, steps):
    model = build_model(name, view=view, input_shape=shape, n_classes=4)
    first = model.forward_range(_raw_batch(view, shape), 0, 1)
    assert first.shape[:2] == (3, steps)  # (B, T, ...): one output per step


def test_bytes_are_scaled_inside_the_first_block():
    # Prepare: uint8 bytes and the same values as floats must give the same logits.
    model = build_model("cnn", view="bytes", input_shape=(64,), n_classes=3).eval()
    x = _raw_batch("bytes", (64,))
    # Execute / Assert
    torch.testing.assert_close(model(x), model(x.float()))


def test_seq_scaler_standardises_training_rows():
    # Prepare: two features on very different scales.
    x = torch.stack([torch.rand(200, 10) * 1500, torch.rand(200, 10) * 1e-3], dim=-1)
    scaler = SeqInput(2)
    # Execute
    z = scaler(x)  # unfitted: the signed log only
    fit_input_scaler(nn.Sequential(scaler), x)
    zf = scaler(x).reshape(-1, 2)
    # Assert
    torch.testing.assert_close(z, torch.log1p(x))
    torch.testing.assert_close(zf.mean(0), torch.zeros(2), atol=1e-4, rtol=0)
    torch.testing.assert_close(zf.std(0), torch.ones(2), atol=1e-3, rtol=0)


def test_convlstm_step_matches_the_textbook_cell():
    # Prepare: one layer, two frames; the reference convolves [x_t, h_{t-1}] at once.
    torch.manual_seed(0)
    layer = ConvRecurrent("lstm", in_channels=2, hidden=3, kernel=3)
    x = torch.randn(4, 2, 2, 5, 6)  # (B, T, C, H, W)
    w = torch.cat([layer.conv_x.weight, layer.cell.conv_h.weight], dim=1)
    h = c = torch.zeros(4, 3, 5, 6)
    expected = []
    for t in range(2):
        gates = F.conv2d(torch.cat([x[:, t], h], 1), w, layer.conv_x.bias, padding=1)
        i, f, o, g = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        expected.append(h)
    # Execute / Assert
    torch.testing.assert_close(layer(x), torch.stack(expected, 1))


def test_convgru_step_matches_the_textbook_cell():
    torch.manual_seed(1)
    layer = ConvRecurrent("gru", in_channels=1, hidden=2, kernel=3)
    x = torch.randn(3, 3, 1, 4, 4)
    wx_zr, wx_n = layer.conv_x.weight.split([4, 2])
    bx_zr, bx_n = layer.conv_x.bias.split([4, 2])
    h = torch.zeros(3, 2, 4, 4)
    expected = []
    for t in range(3):
        zr = torch.sigmoid(
            F.conv2d(x[:, t], wx_zr, bx_zr, padding=1)
            + F.conv2d(h, layer.cell.conv_zr.weight, padding=1)
        )
        z, r = zr.chunk(2, 1)
        n = torch.tanh(
            F.conv2d(x[:, t], wx_n, bx_n, padding=1)
            + F.conv2d(r * h, layer.cell.conv_n.weight, padding=1)
        )
        h = (1 - z) * n + z * h
        expected.append(h)
    torch.testing.assert_close(layer(x), torch.stack(expected, 1))


def test_registry_contract():
    assert set(MODEL_SPECS) == {"cnn", "lstm", "convlstm", "convgru", "transformer", "xgboost"}
    assert neural_models() == ["cnn", "lstm", "convlstm", "convgru", "transformer"]
    assert [default_view(m) for m in MODEL_SPECS] == [
        "bytes",
        "pkt_bytes",
        "pkt_bytes",
        "pkt_bytes",
        "pkt_bytes",
        "stats",
    ]
    assert MODEL_SPECS["xgboost"].kind == "xgboost" and MODEL_SPECS["cnn"].kind == "torch"
    assert model_options("cnn")["channels"] == (64, 128)
    assert model_options("xgboost")["n_estimators"] == 300
    assert build_estimator("xgboost", max_depth=3).max_depth == 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: build_model("resnet", view="bytes", input_shape=(784,), n_classes=3),
            "unknown model",
        ),
        (
            lambda: build_model("cnn", view="pkt_bytes", input_shape=(4, 64), n_classes=3),
            "reads the views",
        ),
        (
            lambda: build_model("cnn", view="bytes", input_shape=(784,), n_classes=3, width=3),
            "no option width",
        ),
        (
            lambda: build_model("xgboost", view="stats", input_shape=(5,), n_classes=3),
            "not a neural model",
        ),
        (
            lambda: build_model("cnn", view="bytes", input_shape=(60,), n_classes=3, dims=2),
            "square",
        ),
        (
            lambda: build_model(
                "convgru", view="bytes", input_shape=(784,), n_classes=3, rows_per_frame=5
            ),
            "divisor",
        ),
        (lambda: build_estimator("xgboost", depth=3), "no option depth"),
        (
            lambda: build_model(
                "convgru", view="pkt_bytes", input_shape=(6, 64), n_classes=3, pool="mean"
            ),
            "pool must be global, time or last",
        ),
        (
            lambda: build_model(
                "lstm", view="bytes", input_shape=(784,), n_classes=3, step_bytes=10
            ),
            "step_bytes=10 does not divide the 784 payload bytes",
        ),
        (
            lambda: build_model(
                "convlstm", view="pkt_bytes", input_shape=(6, 64), n_classes=3, kernel=2
            ),
            "convlstm cannot be built with kernel=2",
        ),
        (
            lambda: build_model("cnn", view="bytes", input_shape=(784,), n_classes=3, channels=[8]),
            "cnn cannot be built with channels=",
        ),
    ],
)
def test_bad_model_requests_say_what_to_do(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_same_seed_same_initial_weights():
    # DDP ranks rely on it (and DDP broadcasts rank 0's anyway): two builds, one seed.
    torch.manual_seed(3)
    a = build_model("convgru", view="pkt_bytes", input_shape=(4, 16), n_classes=3)
    torch.manual_seed(3)
    b = build_model("convgru", view="pkt_bytes", input_shape=(4, 16), n_classes=3)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)


def test_cnn_two_d_reads_the_payload_as_a_28x28_image():
    model = build_model("cnn", view="bytes", input_shape=(784,), n_classes=4, dims=2)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    out = model(_raw_batch("bytes", (784,)))
    assert convs and out.shape == (3, 4) and torch.isfinite(out).all()


def test_presence_mask_ends_at_the_last_non_zero_step():
    x = torch.zeros(3, 5, 2)
    x[0, :2] = 1.0  # two packets
    x[1, [0, 3]] = 1.0  # a zero step inside a flow is not padding
    # x[2]: nothing at all still has a first step
    assert presence_mask(x).tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 0, 0, 0, 0],
    ]


def test_size_embedding_buckets_by_direction_and_size():
    emb = SizeEmbedding(2)
    sizes = torch.tensor([[0.0, 100, -100, 1535, 1536, 3072, 1e7]])
    buckets = []
    emb.embed.forward = lambda idx: buckets.append(idx) or torch.zeros(*idx.shape, 2)
    emb(sizes[..., None])
    n = emb.n_buckets  # 200: 192 of 8 bytes up to 1536, then 8 doublings
    assert buckets[0].tolist() == [[0, 1 + 12, 1 + 12 + n, 1 + 191, 1 + 192, 1 + 193, n]]


@pytest.mark.parametrize(
    ("name", "view", "short", "long", "options"),
    [
        ("lstm", "seq", (6, 4), (11, 4), {}),
        ("lstm", "bytes", (4, 8), (9, 8), {}),
        ("lstm", "pkt_bytes", (4, 16), (7, 16), {}),
        ("lstm", "pkt_bytes", (4, 16), (7, 16), {"bidirectional": True}),
        *(
            (name, "pkt_bytes", (4, 16), (7, 16), {"pool": pool})
            for name in ("convlstm", "convgru")
            for pool in ("global", "time", "last")
        ),
    ],
)
def test_padding_does_not_change_the_prediction(name, view, short, long, options):
    # Prepare: the same flows (3 packets / rows) padded to two lengths; the model's
    # parameters do not depend on the length, so the same seed builds the same model.
    x_long = _raw_batch(view, long, n=4)
    x_long[:, 3:] = 0  # every flow ends after 3 steps
    x_long[0, 1:] = 0  # one flow of a single step
    x_short = x_long[:, : short[0]].clone()
    models = []
    for shape in (short, long):
        torch.manual_seed(0)
        model = build_model(name, view=view, input_shape=shape, n_classes=3, **options)
        models.append(model.eval())
    # Execute / Assert
    torch.testing.assert_close(models[0](x_short), models[1](x_long))


def test_lstm_runs_one_way_by_default_and_both_ways_on_request():
    # One way by default (bidirectional gained under a point of validation macro-F1 for
    # twice the CPU, see build_lstm); both ways, each LSTM block passes on 2 * hidden_size
    # features per step, then the presence mask.
    assert model_options("lstm")["bidirectional"] is False
    for options, width in (({}, 8), ({"bidirectional": True}, 2 * 8)):
        model = build_model(
            "lstm", view="pkt_bytes", input_shape=(6, 16), n_classes=3, hidden_size=8, **options
        )
        x = _raw_batch("pkt_bytes", (6, 16))
        for cut in (1, 2):
            assert model.forward_range(x, 0, cut).shape == (3, 6, width + 1)


def test_lstm_reads_bytes_in_steps_of_step_bytes():
    model = build_model("lstm", view="bytes", input_shape=(784,), n_classes=3, step_bytes=16)
    first = model.forward_range(_raw_batch("bytes", (784,)), 0, 1)
    assert first.shape[:2] == (3, 49)  # 784 bytes -> 49 steps of 16


def test_time_pool_ignores_padding_frames_and_keeps_positions():
    # (B=1, T=3, C=1 + mask, H=1, W=2): two present frames, one padding frame of large values
    x = torch.tensor([[[[[1.0, 2.0]], [[1.0, 1.0]]], [[[3.0, 0.0]], [[1.0, 1.0]]],
                       [[[9.0, 9.0]], [[0.0, 0.0]]]]])  # fmt: skip
    per_position = MaskedTimePool()(x)  # (1, 2C, H, W): mean then max
    assert per_position.tolist() == [[[[2.0, 1.0]], [[3.0, 2.0]]]]
    assert MaskedFramePool()(x).tolist() == [[1.5, 3.0]]


def test_convolutional_recurrent_models_default_to_a_higher_learning_rate():
    # They learn slowly at Adam's usual 1e-3 (models.defaults); an explicit --lr wins.
    def lr(**kw):
        return TrainConfig(dataset="d", out="r", **kw).effective_lr("torch")

    assert lr(model="cnn") == lr(model="lstm") == 1e-3
    assert lr(model="convlstm") == lr(model="convgru") == 3e-3
    assert lr(model="convgru", lr=5e-4) == 5e-4
    assert TrainConfig(dataset="d", out="r", model="xgboost").effective_lr("xgboost") == 0.1
