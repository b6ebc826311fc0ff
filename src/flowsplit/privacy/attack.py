"""The honest-but-curious attacker at the next tier: inversion, label probe, gradient attack.

Assumptions (the standard ones of split-learning privacy studies): the attacker
(an edge aggregator, or the server in two-tier SFL) follows the protocol, sees the
activations a client sends across the cut, knows the client part's weights (it
averages them every round in flowsplit's schemes) and holds auxiliary data, a
labelled sample of the same distribution disjoint from the rows it attacks. It
runs its auxiliary rows through the client part and fits:

- an :class:`InversionDecoder` from activations back to the input (payload bytes
  as 256-way classes per position, per-packet features by regression);
- a logistic-regression probe from activations to the label (:func:`label_probe`);
- from per-sample gradients at the cut (what travels down in end-to-end schemes),
  a nearest-centroid classifier on gradient directions (a direction-based label
  inference, after Li et al., 2022, "Label leakage and protection in two-party
  split learning").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flowsplit.privacy.config import AttackConfig  # noqa: F401 (re-exported)
from flowsplit.train.batches import shuffled_batches

# Largest flat activation the decoder's first dense layer and the probe take;
# bigger ones are average-pooled along their trailing axes (like AuxHead).
MAX_FLAT = 4096
MAX_UPSAMPLE = 64


def pool_flat(z: torch.Tensor, max_features: int = MAX_FLAT) -> torch.Tensor:
    """``(B, d1, ...)`` -> ``(B, <= max_features)``: flatten, pooling trailing axes when too big."""
    if z[0].numel() <= max_features or z.dim() < 3:
        return z.flatten(1)
    per_slice = max(1, max_features // z.shape[1])
    return F.adaptive_avg_pool1d(z.flatten(2), per_slice).flatten(1)


@dataclass(frozen=True)
class Layout:
    """How the decoder reads an activation: ``positions`` along the input, ``channels`` each."""

    channels: int
    positions: int  # 0: no positional axis, decode from the flattened activation
    channels_last: bool = False


def activation_layout(sample_shape: tuple[int, ...], target_len: int) -> Layout:
    """Find the axis of an activation that runs along the input (bytes or packets).

    A convolutional output ``(C, P)`` with ``P`` dividing the input length is read
    channels-first, a recurrent output ``(T, H)`` channels-last; dense outputs
    ``(H,)`` have no such axis and are decoded from the flat vector.
    """
    shape = tuple(int(s) for s in sample_shape)
    if len(shape) >= 2:
        first = Layout(shape[0], math.prod(shape[1:]), False)
        last = Layout(math.prod(shape[1:]), shape[0], True)
        ok = [
            lay
            for lay in (first, last)
            if lay.positions <= target_len and math.ceil(target_len / lay.positions) <= MAX_UPSAMPLE
        ]
        if ok:
            return max(ok, key=lambda lay: lay.positions)  # finest resolution; ties: first
    return Layout(min(math.prod(shape), MAX_FLAT), 0)


class InversionDecoder(nn.Module):
    """Activations -> per-position outputs ``(B, out_channels, target_len)``.

    With a positional axis of ``P`` steps the decoder maps each step's channels to
    ``r = ceil(target_len / P)`` sub-positions (sub-pixel upsampling: a separate map
    for every offset inside a pooling window), then mixes neighbours with a
    convolution. Without one, a dense layer first lays the vector out along
    ``target_len / 8`` steps.
    """

    def __init__(self, layout: Layout, target_len: int, out_channels: int, hidden: int = 32):
        super().__init__()
        self.layout, self.target_len, self.hidden = layout, int(target_len), int(hidden)
        if layout.positions:
            steps, in_ch = layout.positions, layout.channels
            self.dense = None
        else:
            steps, in_ch = math.ceil(target_len / 8), 32
            self.dense = nn.Sequential(
                nn.Linear(layout.channels, 256), nn.ReLU(), nn.Linear(256, in_ch * steps)
            )
        self.steps, self.ratio = steps, math.ceil(target_len / steps)
        self.expand = nn.Conv1d(in_ch, hidden * self.ratio, 3, padding=1)
        self.mix = nn.Conv1d(hidden, hidden, 3, padding=1)
        self.out = nn.Conv1d(hidden, out_channels, 1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        b = z.shape[0]
        if self.dense is not None:
            x = self.dense(pool_flat(z)).view(b, -1, self.steps)  # (B, 32, S)
        elif self.layout.channels_last:
            x = z.reshape(b, self.steps, -1).transpose(1, 2)  # (B, C, P)
        else:
            x = z.reshape(b, -1, self.steps)  # (B, C, P)
        x = F.relu(self.expand(x))  # (B, h*r, P)
        x = x.view(b, self.hidden, self.ratio, self.steps).transpose(2, 3)  # (B, h, P, r)
        x = x.reshape(b, self.hidden, self.steps * self.ratio)[..., : self.target_len]
        x = F.relu(self.mix(x))  # (B, h, L)
        return self.out(x)  # (B, out, L)


@dataclass
class Standardizer:
    """Per-feature mean and std of flattened activations, fitted on the attacker's rows."""

    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def fit(cls, z: torch.Tensor) -> Standardizer:
        flat = z.reshape(len(z), -1)
        std = flat.std(0)
        return cls(flat.mean(0), torch.where(std > 1e-6, std, torch.ones_like(std)))

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return ((z.reshape(len(z), -1) - self.mean) / self.std).view_as(z)


def fit_inversion(
    z_aux: torch.Tensor,
    target_aux: torch.Tensor,
    *,
    kind: str,
    config: AttackConfig,
    transform=None,
) -> tuple[InversionDecoder, Standardizer]:
    """Train a decoder from activations ``z_aux`` to inputs ``target_aux``.

    ``kind`` is ``bytes`` (targets ``(N, L)`` integer byte values, 256-way
    cross-entropy per position) or ``seq`` (targets ``(N, T, F)`` floats, squared
    error). ``transform`` (e.g. a defence's noise) is applied to each batch of
    activations before the decoder, fresh every time, so the attacker learns to
    read defended activations the way a client sends them.
    """
    seed = 0 if config.seed is None else config.seed
    torch.manual_seed(seed)
    transform = transform or (lambda z: z)
    scaler = Standardizer.fit(transform(z_aux))
    if kind == "bytes":
        target_len, out_ch = target_aux.shape[1], 256
    else:
        target_len, out_ch = target_aux.shape[1], target_aux.shape[2]
    layout = activation_layout(tuple(z_aux.shape[1:]), target_len)
    decoder = InversionDecoder(layout, target_len, out_ch, config.hidden)
    opt = torch.optim.Adam(decoder.parameters(), lr=config.lr)
    gen = torch.Generator().manual_seed(seed)
    decoder.train()
    for _ in range(config.epochs):
        for idx in shuffled_batches(len(z_aux), config.batch_size, gen):
            out = decoder(scaler(transform(z_aux[idx])))  # (B, out, L)
            if kind == "bytes":
                loss = F.cross_entropy(out, target_aux[idx].long())
            else:
                loss = F.mse_loss(out.transpose(1, 2), target_aux[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    decoder.eval()
    return decoder, scaler


@torch.no_grad()
def invert(
    decoder: InversionDecoder, scaler: Standardizer, z: torch.Tensor, *, kind: str, batch: int = 256
) -> np.ndarray:
    """The decoder's reconstruction of each row: bytes ``(N, L)`` uint8, or seq ``(N, T, F)``."""
    outs = []
    for start in range(0, len(z), batch):
        out = decoder(scaler(z[start : start + batch]))
        outs.append(out.argmax(1).to(torch.uint8) if kind == "bytes" else out.transpose(1, 2))
    return torch.cat(outs).numpy()


def prior_guess(target_aux: np.ndarray, n: int, *, kind: str) -> np.ndarray:
    """What an attacker without activations guesses: per position the commonest byte (or mean)."""
    t = np.asarray(target_aux)
    if kind == "bytes":
        counts = np.apply_along_axis(np.bincount, 0, t.astype(np.int64), minlength=256)  # (256, L)
        guess = counts.argmax(0).astype(np.uint8)
    else:
        guess = t.mean(0)
    return np.broadcast_to(guess, (n, *guess.shape)).copy()


PROBE_C = 1.0
"""Inverse L2 strength of the label probe (scikit-learn's ``LogisticRegression`` default)."""
PROBE_MAX_ITER = 500
PROBE_GTOL = 1e-4
"""L-BFGS stops when no gradient entry of the per-row objective exceeds this (scikit-learn's
``tol`` for its L-BFGS solver)."""


@dataclass
class LogisticProbe:
    """scikit-learn's ``make_pipeline(StandardScaler(), LogisticRegression())``, on torch.

    Features are standardised on the fitting rows (population std; constant features
    keep scale 1), then a logistic regression with an L2 penalty ``|W|^2 / (2 C)`` on the
    summed log-loss (intercepts unpenalised) is fitted by L-BFGS from zero: multinomial
    (one weight column per class) for three or more classes, one column for two, as
    scikit-learn does. The objective is strictly convex, so any converged solver finds
    the same probe; written here because scikit-learn cost 40 MB for this one model.
    """

    classes: np.ndarray
    mean: torch.Tensor
    scale: torch.Tensor
    weight: torch.Tensor
    """``(features, classes)``, or ``(features, 1)`` with two classes."""
    bias: torch.Tensor

    @classmethod
    def fit(
        cls, z: np.ndarray, y: np.ndarray, *, c: float = PROBE_C, max_iter: int = PROBE_MAX_ITER
    ) -> LogisticProbe:
        """Fit on rows ``z`` (``(N, ...)``, flattened) with labels ``y`` (two classes or more)."""
        classes, target = np.unique(np.asarray(y), return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"a logistic probe needs two classes or more, got {classes}")
        x = _flat64(z)
        mean, std = x.mean(0), x.std(0, correction=0)
        scale = torch.where(std > 10 * torch.finfo(torch.float64).eps, std, torch.ones_like(std))
        x = (x - mean) / scale
        y_t = torch.as_tensor(target)
        cols = 1 if len(classes) == 2 else len(classes)
        weight = torch.zeros(x.shape[1], cols, dtype=torch.float64, requires_grad=True)
        bias = torch.zeros(cols, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS(
            [weight, bias],
            max_iter=max_iter,
            tolerance_grad=PROBE_GTOL,
            tolerance_change=1e-12,
            line_search_fn="strong_wolfe",
        )

        def objective() -> torch.Tensor:
            opt.zero_grad()
            loss = cls._loss(x, y_t, weight, bias, c)
            loss.backward()
            return loss

        # An unconverged probe after max_iter steps is still a probe (a weaker attacker).
        opt.step(objective)
        return cls(classes, mean, scale, weight.detach(), bias.detach())

    @staticmethod
    def _loss(x, y, weight, bias, c: float) -> torch.Tensor:
        """Summed log-loss plus ``|W|^2 / (2 C)``, divided by the rows (the optimum stays)."""
        loss = F.cross_entropy(_class_logits(x @ weight + bias), y, reduction="sum")
        return (loss + weight.square().sum() / (2 * c)) / len(y)

    def objective(self, z: np.ndarray, y: np.ndarray, c: float = PROBE_C) -> float:
        """The fitted objective on rows ``z``, labels ``y`` (to compare solvers)."""
        target = torch.as_tensor(np.searchsorted(self.classes, np.asarray(y)))
        x = (_flat64(z) - self.mean) / self.scale
        return float(self._loss(x, target, self.weight, self.bias, c))

    @torch.no_grad()
    def predict(self, z: np.ndarray) -> np.ndarray:
        """The predicted class of each row."""
        logits = _class_logits((_flat64(z) - self.mean) / self.scale @ self.weight + self.bias)
        return self.classes[logits.argmax(1).numpy()]


def _flat64(z: np.ndarray) -> torch.Tensor:
    z = np.asarray(z, dtype=np.float64)
    return torch.from_numpy(z.reshape(len(z), -1))


def _class_logits(scores: torch.Tensor) -> torch.Tensor:
    """One logit per class: a single binary score ``s`` becomes ``(0, s)`` (softmax = sigmoid)."""
    return F.pad(scores, (1, 0)) if scores.shape[1] == 1 else scores


def label_probe(
    z_aux: np.ndarray, y_aux: np.ndarray, z_test: np.ndarray, y_test: np.ndarray, *, seed: int = 0
) -> float:
    """Test accuracy of a logistic-regression probe (:class:`LogisticProbe`) fitted on the
    attacker's activations. ``seed`` is kept for callers: the fit uses no randomness."""
    del seed
    if len(np.unique(y_aux)) < 2:
        return float(np.mean(y_test == y_aux[0]))
    probe = LogisticProbe.fit(z_aux, y_aux)
    return float(np.mean(probe.predict(z_test) == y_test))


def cut_gradients(
    server: nn.Module, z: torch.Tensor, y: torch.Tensor, *, batch: int = 256
) -> torch.Tensor:
    """Per-sample gradients of the cross-entropy w.r.t. the activations ``z`` at the cut.

    The loss is summed over the batch, so each row's gradient is that sample's own
    (the models have no batch normalisation coupling samples); ``server`` should
    be in eval mode so dropout does not randomise the directions.
    """
    grads = []
    for start in range(0, len(z), batch):
        zb = z[start : start + batch].detach().clone().requires_grad_(True)
        loss = F.cross_entropy(server(zb), y[start : start + batch], reduction="sum")
        (g,) = torch.autograd.grad(loss, zb)
        grads.append(g.reshape(len(zb), -1))
    return torch.cat(grads)


def gradient_label_attack(
    g_aux: np.ndarray, y_aux: np.ndarray, g_test: np.ndarray, y_test: np.ndarray
) -> float:
    """Accuracy of labelling each test gradient by its nearest class centroid in direction.

    Cross-entropy gradients point away from the true class's logit, so gradients of
    one class share a direction; unit-normalised centroids of the attacker's own
    labelled gradients classify the victim's.
    """

    def unit(g: np.ndarray) -> np.ndarray:
        return g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)

    classes = np.unique(y_aux)
    ga, gt = unit(np.asarray(g_aux, np.float64)), unit(np.asarray(g_test, np.float64))
    centroids = unit(np.stack([ga[y_aux == k].mean(0) for k in classes]))
    pred = classes[np.argmax(gt @ centroids.T, axis=1)]
    return float(np.mean(pred == y_test))
