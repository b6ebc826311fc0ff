"""The attacks on synthetic client parts whose answer is known.

An injective client part (a fixed byte embedding) must be inverted almost
perfectly; a constant one must leave the attacker at the no-activations guess.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import optimize
from scipy.special import logsumexp
from torch import nn

from flowsplit.privacy.attack import (
    AttackConfig,
    Layout,
    LogisticProbe,
    activation_layout,
    cut_gradients,
    fit_inversion,
    gradient_label_attack,
    invert,
    label_probe,
    prior_guess,
)
from flowsplit.privacy.measures import bytes_recovered

LENGTH = 16


def _bytes(n: int, seed: int) -> torch.Tensor:
    # Non-zero bytes, so every position is payload.
    return torch.from_numpy(
        np.random.default_rng(seed).integers(1, 256, (n, LENGTH)).astype(np.uint8)
    )


def _embed() -> nn.Module:
    torch.manual_seed(0)
    emb = nn.Embedding(256, 12)
    return lambda x: emb(x.long()).movedim(-1, 1).detach()  # (B, 12, L)


def test_layout_finds_the_axis_along_the_input():
    assert activation_layout((64, 196), 784) == Layout(64, 196, False)  # conv: channels first
    assert activation_layout((32, 128), 32) == Layout(128, 32, True)  # recurrent: steps first
    assert activation_layout((128,), 784) == Layout(128, 0)  # dense: no axis


def test_identity_like_client_part_is_inverted_almost_perfectly():
    x_aux, x_eval = _bytes(200, 1), _bytes(100, 2)
    f = _embed()
    dec, scaler = fit_inversion(f(x_aux), x_aux, kind="bytes", config=AttackConfig(epochs=20))
    pred = invert(dec, scaler, f(x_eval), kind="bytes")
    assert bytes_recovered(x_eval.numpy(), pred) > 0.95


def test_constant_client_part_leaves_only_the_prior():
    x_aux, x_eval = _bytes(400, 1), _bytes(100, 2)
    z_aux, z_eval = torch.zeros(400, 4, LENGTH), torch.zeros(100, 4, LENGTH)
    dec, scaler = fit_inversion(z_aux, x_aux, kind="bytes", config=AttackConfig(epochs=5))
    pred = invert(dec, scaler, z_eval, kind="bytes")
    chance = bytes_recovered(x_eval.numpy(), prior_guess(x_aux.numpy(), 100, kind="bytes"))
    # Uniform bytes: both are about 1/255.
    assert bytes_recovered(x_eval.numpy(), pred) < 0.03
    assert chance < 0.03


def test_seq_inversion_recovers_linearly_encoded_features():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(350, 8, 3)).astype(np.float32))
    mix = torch.from_numpy(rng.normal(size=(3, 6)).astype(np.float32))
    z = x @ mix  # (N, T, 6): an invertible per-step map
    dec, scaler = fit_inversion(z[:250], x[:250], kind="seq", config=AttackConfig(epochs=15))
    pred = invert(dec, scaler, z[250:], kind="seq")
    nrmse = np.sqrt(((pred - x[250:].numpy()) ** 2).mean())
    assert nrmse < 0.25  # the mean guess scores about 1


def test_label_probe_reads_separable_activations_and_not_noise():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    z = rng.normal(size=(300, 10))
    z_sep = z + 4.0 * np.eye(3)[y] @ rng.normal(size=(3, 10))
    assert label_probe(z_sep[:200], y[:200], z_sep[200:], y[200:]) > 0.9
    assert label_probe(z[:200], y[:200], z[200:], y[200:]) < 0.6


def test_binary_probe_is_one_column_with_the_penalty_by_hand():
    # Prepare: two rows at -3 and +3 (standardised: -1, +1), labels 0 and 1. By symmetry
    # the intercept is 0 and the weight w minimises 2 log(1 + e^-w) + w^2 / 2, so
    # w = 2 / (1 + e^w). (Two softmax columns would penalise half as hard: s = 4 / (1 + e^s).)
    z = np.array([[-3.0], [3.0]])
    y = np.array([0, 1])
    w_hand = optimize.brentq(lambda w: w - 2 / (1 + np.exp(w)), 0, 2)  # 0.6749...
    # Execute
    probe = LogisticProbe.fit(z, y)
    # Assert
    assert probe.weight.shape == (1, 1)
    assert float(probe.weight) == pytest.approx(w_hand, abs=1e-4)
    assert float(probe.bias) == pytest.approx(0.0, abs=1e-6)
    assert list(probe.predict(np.array([[-0.5], [0.5]]))) == [0, 1]


def test_multiclass_probe_reaches_the_optimum_of_the_same_objective_by_scipy():
    # Prepare: 3 classes, 5 features (one constant), the objective written again in NumPy:
    # summed softmax log-loss + |W|^2 / 2 on standardised features, minimised by scipy.
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 90)
    z = rng.normal(size=(90, 5)) + np.eye(3)[y] @ rng.normal(size=(3, 5))
    z[:, 2] = 7.0
    x = (z - z.mean(0)) / np.where(z.std(0) > 0, z.std(0), 1.0)

    def objective(theta):
        w, b = theta[:15].reshape(5, 3), theta[15:]
        s = x @ w + b
        return (logsumexp(s, axis=1) - s[np.arange(90), y]).sum() + (w**2).sum() / 2

    best = optimize.minimize(objective, np.zeros(18), method="BFGS", options={"gtol": 1e-8})
    # Execute
    probe = LogisticProbe.fit(z, y)
    # Assert: the same optimum (the probe's objective is divided by the rows).
    assert probe.objective(z, y) * 90 == pytest.approx(best.fun, rel=1e-5)
    w_ref = best.x[:15].reshape(5, 3)
    assert np.abs(probe.weight.numpy() - w_ref).max() < 1e-2
    assert np.isfinite(probe.weight.numpy()).all() and abs(probe.weight.numpy()[2]).max() < 1e-6


def test_gradient_attack_labels_by_direction():
    rng = np.random.default_rng(0)
    server = nn.Linear(6, 4)
    z = torch.from_numpy(rng.normal(size=(400, 6)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 4, 400))
    g = cut_gradients(server, z, y).numpy()
    # dL/dz = W^T (softmax - onehot): the direction is dominated by -W[y].
    acc = gradient_label_attack(g[:300], y[:300].numpy(), g[300:], y[300:].numpy())
    assert acc > 0.8
    noise = rng.normal(size=g.shape)
    assert gradient_label_attack(noise[:300], y[:300].numpy(), noise[300:], y[300:].numpy()) < 0.45


def test_cut_gradients_are_per_sample():
    server = nn.Sequential(nn.Linear(5, 3))
    z, y = torch.randn(7, 5), torch.randint(0, 3, (7,))
    g = cut_gradients(server, z, y, batch=3)
    one = cut_gradients(server, z[4:5], y[4:5])
    assert torch.allclose(g[4], one[0], atol=1e-6)


@pytest.mark.parametrize("kind", ["bytes", "seq"])
def test_prior_guess_shapes(kind):
    t = np.zeros((5, 4), np.uint8) if kind == "bytes" else np.zeros((5, 4, 2))
    assert prior_guess(t, 3, kind=kind).shape == (3, *t.shape[1:])
