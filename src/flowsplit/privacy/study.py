"""A leakage study: train (or load) a model, attack every cut, with and without defences.

One study, for one dataset and model:

1. the model is trained centrally for a few epochs on the ``train`` split (or its
   weights are read from an ``sfl run`` directory): in end-to-end schemes the
   function computed does not depend on where the model is cut, so one model
   stands for every cut;
2. for every cut ``k`` (client = blocks ``1..k``) the attacker runs its auxiliary
   rows (``aux_split``, by default ``val``) through the client part, fits the
   attacks of :mod:`flowsplit.privacy.attack` and is scored on ``eval_split`` rows
   (by default ``test``), which neither the model nor the attacker saw;
3. each defence is trained from the same seed with the defence in place at the
   cut, then attacked the same way (the attacker knows the defence and its
   strength, and applies it to its own rows while fitting).

A reference measurement attacks the output of the model's input stem (the byte
embedding or the feature scaling, inside block 1): there the input is present
almost unchanged, so recovery must be near total — the check that the attack works
when it should.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flowsplit.config_args import fields_of
from flowsplit.data.store import Dataset, load_dataset
from flowsplit.errors import ConfigError, InputError, check_finite_loss
from flowsplit.federated.results import read_model_state
from flowsplit.models.base import BlockModel
from flowsplit.models.registry import build_model, default_view, fit_input_scaler
from flowsplit.privacy.attack import (
    cut_gradients,
    fit_inversion,
    gradient_label_attack,
    invert,
    label_probe,
    pool_flat,
    prior_guess,
)
from flowsplit.privacy.config import AttackConfig, PrivacyConfig  # noqa: F401 (re-exported)
from flowsplit.privacy.defences import Defence, gaussian_epsilon
from flowsplit.privacy.measures import (
    ascii_recovered,
    bytes_recovered,
    distance_correlation,
    distance_correlation_np,
    seq_errors,
)
from flowsplit.train.batches import shuffled_batches

log = logging.getLogger("flowsplit.privacy")

BYTE_VIEWS = ("bytes", "pkt_bytes")
PROBE_FEATURES = 2048


@dataclass
class StudyData:
    """Rows of one study as tensors: train (the model's), aux (the attacker's), eval (the victim's)."""

    view: str
    kind: str
    """``bytes`` or ``seq``: what the inversion reconstructs."""
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_aux: torch.Tensor
    y_aux: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    n_classes: int
    classes: list[str]
    seq_mean: torch.Tensor | None = None
    """Per-feature mean and std of the signed-log training rows (seq view only)."""
    seq_std: torch.Tensor | None = None


def _rows(ds: Dataset, split: str, limit: int | None, seed: int) -> np.ndarray:
    rows = ds.split_indices(split)
    if len(rows) == 0:
        raise ConfigError(f"dataset {ds.root} has no {split!r} rows")
    if limit is not None and limit < len(rows):
        pick = np.random.default_rng([seed, 23, len(rows)]).choice(len(rows), limit, replace=False)
        rows = np.sort(rows[pick])
    return rows


def load_study_data(dataset: str | Path | Dataset, config: PrivacyConfig) -> StudyData:
    """Read the three row sets of a study from a prepared dataset."""
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    view = config.view or default_view(config.model)
    if not ds.has_view(view):
        raise ConfigError(
            f"dataset {ds.root} has no view {view!r} (it has {', '.join(ds.views)}); pass --view"
        )
    if view not in BYTE_VIEWS and view != "seq":
        raise ConfigError(
            f"the privacy study inverts the bytes, pkt_bytes or seq view, not {view!r}"
        )

    def take(split: str, limit: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        rows = _rows(ds, split, limit, config.seed)
        x = torch.from_numpy(np.ascontiguousarray(ds.view(view)[rows]))
        return x, torch.from_numpy(ds.labels[rows].astype(np.int64))

    x_tr, y_tr = take("train", config.train_limit)
    x_aux, y_aux = take(config.aux_split, config.aux_limit)
    x_ev, y_ev = take(config.eval_split, config.eval_limit)
    kind = "bytes" if view in BYTE_VIEWS else "seq"
    mean = std = None
    if kind == "seq":
        logs = signed_log(x_tr).reshape(-1, x_tr.shape[-1])
        mean, std = logs.mean(0), logs.std(0)
        std = torch.where(std > 1e-6, std, torch.ones_like(std))  # a constant feature stays 0
    return StudyData(
        view=view,
        kind=kind,
        x_train=x_tr,
        y_train=y_tr,
        x_aux=x_aux,
        y_aux=y_aux,
        x_eval=x_ev,
        y_eval=y_ev,
        n_classes=ds.n_classes,
        classes=list(ds.classes),
        seq_mean=mean,
        seq_std=std,
    )


# --- the model, cut and defended -----------------------------------------------------------


def forward_cut(model: BlockModel, x: torch.Tensor, cut: int, layer: nn.Module) -> tuple:
    """``(activations sent at cut, logits)``: client blocks, the defence layer, the rest."""
    z = layer(model.forward_range(x, 0, cut))
    return z, model.forward_range(z, cut, model.n_blocks)


def input_features(data: StudyData, x: torch.Tensor) -> torch.Tensor:
    """The input as the numbers the attack reconstructs and dCor compares with.

    Bytes: values / 255, flattened; per-packet features: ``sign(x) log(1 + |x|)``
    standardised per feature with the training rows' statistics (sizes and gaps
    span orders of magnitude), so every feature counts on the same scale whatever
    preprocessing the model itself uses.
    """
    if data.kind == "bytes":
        return x.reshape(len(x), -1).to(torch.float32) / 255.0
    return (signed_log(x) - data.seq_mean) / data.seq_std  # (N, T, F)


def signed_log(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) * log(1 + |x|)`` in float32."""
    x = x.to(torch.float32)
    return torch.sign(x) * torch.log1p(x.abs())


def train_model(
    model: BlockModel,
    data: StudyData,
    config: PrivacyConfig,
    *,
    cut: int | None = None,
    defence: Defence = Defence(),
) -> BlockModel:
    """Centralised training (Adam, cross-entropy) with ``defence`` in place at ``cut``."""
    torch.manual_seed(config.seed)
    layer = defence.layer()
    cut = model.n_blocks if cut is None else cut
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    gen = torch.Generator().manual_seed(config.seed)
    model.train()
    for epoch in range(config.epochs):
        loss_sum = torch.zeros(())
        for idx in shuffled_batches(len(data.x_train), config.batch_size, gen):
            x, y = data.x_train[idx], data.y_train[idx]
            z, logits = forward_cut(model, x, cut, layer)
            loss = F.cross_entropy(logits, y)
            if defence.penalty > 0 and len(idx) > 2:
                loss = loss + defence.penalty * distance_correlation(input_features(data, x), z)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
        _check_loss(float(loss_sum), epoch, config, defence)
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        _check_loss(math.nan, config.epochs - 1, config, defence)
    model.eval()
    return model


def _check_loss(loss: float, epoch: int, config: PrivacyConfig, defence: Defence) -> None:
    """Stop a study whose model diverged (its loss or weights not finite): every measure
    of it would be nan."""
    which = "the model" if defence.kind == "none" else f"the model with {defence.kind}"
    check_finite_loss(
        loss, f"in epoch {epoch + 1}", config.lr, model=which, then="the study stopped"
    )


@torch.no_grad()
def evaluate(
    model: BlockModel, x: torch.Tensor, y: torch.Tensor, cut: int, layer: nn.Module
) -> float:
    """Accuracy of ``model`` on ``(x, y)`` with ``layer`` applied at ``cut``."""
    model.eval()
    hits = 0
    for start in range(0, len(x), 256):
        _, logits = forward_cut(model, x[start : start + 256], cut, layer)
        hits += int((logits.argmax(1) == y[start : start + 256]).sum())
    return hits / len(x)


@torch.no_grad()
def activations(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn`` applied to ``x`` in batches (no gradients)."""
    return torch.cat([fn(x[s : s + 256]) for s in range(0, len(x), 256)])


def check_sfl_run(run_dir: str | Path, *, read: bool = False) -> Path:
    """``run_dir`` as a path, if it holds an ``sfl run``'s model.pt and config.json
    (``read``: and its model.pt reads as tensors)."""
    run = Path(run_dir)
    for name in ("model.pt", "config.json"):
        if not (run / name).is_file():
            raise InputError(run, f"has no {name}: not an `sfl run` directory")
    if read:
        read_model_state(run / "model.pt")
    return run


def load_run_weights(model: BlockModel, run_dir: str | Path) -> BlockModel:
    """Load the final global model of an ``sfl run`` directory into ``model``.

    ``model.pt`` holds the client, aggregator and server parts in a row
    (``0.layers.i.*``, ``1.layers.j.*``, ``2.layers.k.*``); ``config.json`` gives
    the cuts that say which block each index is.
    """
    run = check_sfl_run(run_dir)
    try:
        cuts = json.loads((run / "config.json").read_text(encoding="utf-8"))["cuts"]
        a, c = int(cuts[0]), int(cuts[1])
    except (ValueError, KeyError, TypeError, IndexError):
        raise InputError(run / "config.json", "has no readable 'cuts' [a, c]") from None
    state = read_model_state(run / "model.pt")
    names = model.block_names
    offsets = (0, a, c)
    mapped = {}
    for key, tensor in state.items():
        part, _, rest = key.partition(".layers.")
        index, _, sub = rest.partition(".")
        try:
            block = names[offsets[int(part)] + int(index)]
        except (ValueError, IndexError):
            raise InputError(run / "model.pt", f"unexpected entry {key!r} for this model") from None
        mapped[f"blocks.{block}.{sub}"] = tensor
    try:
        model.load_state_dict(mapped)
    except RuntimeError as exc:
        # torch's first line only says "Error(s) in loading state_dict"; the next says which.
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        first = lines[1] if len(lines) > 1 else lines[0]
        first = first if len(first) < 200 else first[:200] + "..."
        raise InputError(
            run / "model.pt",
            f"does not fit {model.name} as built here ({first}); "
            "pass the run's --model, --view and --model-option",
        ) from None
    model.eval()
    return model


# --- attacks ----------------------------------------------------------------------------


def attack_activations(
    data: StudyData,
    z_aux: torch.Tensor,
    z_eval: torch.Tensor,
    *,
    config: PrivacyConfig,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    prior: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Every activation-based measure at one cut: inversion, dCor and the label probe.

    ``z_aux`` are the attacker's clean activations (``transform``, the defence, is
    applied to them batch by batch while the decoder learns); ``z_eval`` are the
    activations as sent (already defended). What is reconstructed (:func:`_targets`):
    byte values ``(N, L)`` or standardised features ``(N, T, F)``.
    """
    t0 = time.perf_counter()
    target_aux, target_eval = _targets(data)
    decoder, scaler = fit_inversion(
        z_aux, target_aux, kind=data.kind, config=config.attack, transform=transform
    )
    pred = invert(decoder, scaler, z_eval, kind=data.kind)
    out: dict[str, Any] = {}
    true = target_eval.numpy()
    if data.kind == "bytes":
        out["bytes_recovered"] = bytes_recovered(true, pred)
        out["ascii_recovered"], out["ascii_runs"] = ascii_recovered(true, pred)
    else:
        scale = true.reshape(-1, true.shape[-1]).std(0)
        errs = seq_errors(true, pred, scale)
        out["seq_nrmse"] = errs.pop("mean")
        out["seq_nrmse_features"] = errs
        # Higher is more leakage, like every other measure (0: no better than the mean).
        out["seq_recovered"] = max(0.0, 1.0 - out["seq_nrmse"])
    if prior:
        out.update(prior)
    out["dcor"] = distance_correlation_np(
        input_features(data, data.x_eval).numpy(),
        z_eval.numpy(),
        max_rows=config.dcor_rows,
        seed=config.seed,
    )
    z_aux_sent = activations(transform, z_aux) if transform is not None else z_aux
    out["label_probe_acc"] = label_probe(
        pool_flat(z_aux_sent, PROBE_FEATURES).numpy(),
        data.y_aux.numpy(),
        pool_flat(z_eval, PROBE_FEATURES).numpy(),
        data.y_eval.numpy(),
        seed=config.seed,
    )
    out["attack_s"] = time.perf_counter() - t0
    return out


def prior_measures(data: StudyData, target_aux: torch.Tensor, target_eval: torch.Tensor) -> dict:
    """The same measures for an attacker who ignores the activations (the floor of every leak)."""
    guess = prior_guess(target_aux.numpy(), len(target_eval), kind=data.kind)
    true = target_eval.numpy()
    if data.kind == "bytes":
        ascii_prior, _ = ascii_recovered(true, guess)
        return {
            "bytes_recovered_prior": bytes_recovered(true, guess),
            "ascii_recovered_prior": ascii_prior,
        }
    scale = true.reshape(-1, true.shape[-1]).std(0)
    return {"seq_nrmse_prior": seq_errors(true, guess, scale)["mean"]}


def _targets(data: StudyData) -> tuple[torch.Tensor, torch.Tensor]:
    if data.kind == "bytes":
        return data.x_aux.reshape(len(data.x_aux), -1), data.x_eval.reshape(len(data.x_eval), -1)
    return input_features(data, data.x_aux), input_features(data, data.x_eval)


def measure_cut(
    model: BlockModel,
    data: StudyData,
    cut: int,
    config: PrivacyConfig,
    *,
    defence: Defence = Defence(),
    prior: dict[str, float] | None = None,
) -> dict[str, Any]:
    """All measures at ``cut`` of a trained ``model`` whose client applies ``defence``."""
    model.eval()
    layer = defence.layer()
    torch.manual_seed(config.seed + 7)
    z_aux = activations(lambda x: model.forward_range(x, 0, cut), data.x_aux)
    z_eval = activations(lambda x: layer(model.forward_range(x, 0, cut)), data.x_eval)
    out: dict[str, Any] = {
        "block": model.block_names[cut - 1],
        "act_shape": list(z_eval.shape[1:]),
        "act_values": int(z_eval[0].numel()),
        "accuracy": evaluate(model, data.x_eval, data.y_eval, cut, layer),
    }
    out.update(
        attack_activations(
            data,
            z_aux,
            z_eval,
            config=config,
            transform=layer if defence.kind in ("noise", "quant") else None,
            prior=prior,
        )
    )
    if config.gradients:
        server = nn.Sequential(*list(model.blocks.values())[cut:]).eval()
        g_aux = cut_gradients(server, activations(layer, z_aux), data.y_aux)
        g_eval = cut_gradients(server, z_eval, data.y_eval)
        out["grad_label_acc"] = gradient_label_attack(
            g_aux.numpy(), data.y_aux.numpy(), g_eval.numpy(), data.y_eval.numpy()
        )
    if defence.kind == "noise":
        out["dp_epsilon_equiv"] = gaussian_epsilon(defence.strength, out["act_values"])
    return out


def measure_reference(model: BlockModel, data: StudyData, config: PrivacyConfig) -> dict | None:
    """Attack the output of block 1's first module (the input stem), where recovery must be high."""
    first = list(model.blocks.values())[0]
    if not isinstance(first, nn.Sequential) or len(first) < 2:
        return None
    stem = first[0]
    model.eval()
    z_aux, z_eval = activations(stem, data.x_aux), activations(stem, data.x_eval)
    out: dict[str, Any] = {
        "after": f"{model.block_names[0]}[0] ({type(stem).__name__})",
        "act_shape": list(z_eval.shape[1:]),
    }
    out.update(attack_activations(data, z_aux, z_eval, config=config))
    return out


REFERENCE_MIN_BYTES = 0.9
"""The share of payload bytes the attack must recover after the input stem (byte views):
there the input is all there, and a working decoder gets about 99 % back."""
REFERENCE_MAX_NRMSE = 0.3
"""The largest normalised error of the seq features after the input stem (seq view)."""


def reference_check(ref: dict[str, Any]) -> str:
    """``passed``, or ``failed: ...`` saying what the reference attack fell short of.

    A failed check means the attacker's decoder did not learn to invert even the input
    stem, so its (low) leakage at the cuts says nothing: the attack needs more epochs
    or auxiliary rows.
    """
    got = ref.get("bytes_recovered")
    if isinstance(got, float) and got < REFERENCE_MIN_BYTES:
        return (
            f"failed: {100 * got:.1f} % of payload bytes recovered after the input stem, "
            f"under the {100 * REFERENCE_MIN_BYTES:.0f} % a working decoder reaches"
        )
    nrmse = ref.get("seq_nrmse")
    if isinstance(nrmse, float) and nrmse > REFERENCE_MAX_NRMSE:
        return (
            f"failed: seq error {nrmse:.2f} after the input stem, above the "
            f"{REFERENCE_MAX_NRMSE} a working decoder reaches"
        )
    return "passed"


# --- the study --------------------------------------------------------------------------


def build_study_model(data: StudyData, config: PrivacyConfig) -> BlockModel:
    """The model for ``data``, seeded, its input scaler fitted on the training rows."""
    torch.manual_seed(config.seed)
    model = build_model(
        config.model,
        view=data.view,
        input_shape=tuple(data.x_train.shape[1:]),
        n_classes=data.n_classes,
        **config.model_options,
    )
    fit_input_scaler(model, data.x_train)
    return model


def legal_study_cuts(model: BlockModel, cuts: tuple[int, ...] | None) -> list[int]:
    """The cuts to attack: every ``1 <= k < L`` unless a subset is given (checked)."""
    legal = list(range(1, model.n_blocks))
    if cuts is None:
        return legal
    bad = [k for k in cuts if k not in legal]
    if bad:
        raise ConfigError(
            f"cut {bad[0]} is not legal for {model.name} with {model.n_blocks} blocks "
            f"({', '.join(model.block_names)}): choose from {legal[0]}..{legal[-1]}"
        )
    return sorted(set(cuts))


def run_study(
    dataset: str | Path | Dataset,
    config: PrivacyConfig,
    *,
    weights: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run a leakage study and return its results (the JSON ``sfl privacy`` writes).

    ``progress`` gets a line per step; ``checkpoint`` gets the partial results after
    every measured cut (to save them as they come).
    """
    keep = checkpoint or (lambda partial: None)
    say = progress or (lambda msg: log.info("%s", msg))
    t_start = time.perf_counter()
    data = load_study_data(dataset, config)
    model = build_study_model(data, config)
    cuts = legal_study_cuts(model, config.cuts)
    _load_or_train(model, data, config, weights, say)
    identity = nn.Identity()
    target_aux, target_eval = _targets(data)
    prior = prior_measures(data, target_aux, target_eval)
    undefended: dict[str, Any] = {}  # the document's "cuts" and "defences", as they fill
    defended_cuts: dict[str, Any] = {}
    result: dict[str, Any] = {
        "dataset": str(getattr(dataset, "root", dataset)),
        **fields_of(config, ("model",)),
        "view": data.view,
        "block_names": model.block_names,
        "n_blocks": model.n_blocks,
        "weights": str(weights) if weights is not None else None,
        "rows": {"train": len(data.x_train), "aux": len(data.x_aux), "eval": len(data.x_eval)},
        "classes": data.classes,
        "majority_acc": float(
            np.mean(data.y_eval.numpy() == np.bincount(data.y_aux.numpy()).argmax())
        ),
        "accuracy": evaluate(model, data.x_eval, data.y_eval, model.n_blocks, identity),
        "prior": prior,
        "config": config.to_dict(),
        "cuts": undefended,
        "defences": defended_cuts,
    }
    if config.reference:
        ref = measure_reference(model, data, config)
        if ref is not None:
            ref["check"] = reference_check(ref)
            result["reference"] = ref
            say(f"reference (after the input stem): {_summary(ref)}")
    for k in cuts:
        rec = undefended[str(k)] = measure_cut(model, data, k, config, prior=prior)
        say(f"cut {k} ({model.block_names[k - 1]}): {_summary(rec)}")
        keep(result)
    for defence in config.defences:
        by_cut: dict[str, Any] = {}
        defended_cuts[defence.kind] = {"params": defence.params(), "cuts": by_cut}
        for k in cuts:
            rec = by_cut[str(k)] = _defended_cut(data, config, defence, k, prior)
            say(f"{defence.kind} {defence.params()} cut {k}: {_summary(rec)}")
            keep(result)
    result["total_s"] = time.perf_counter() - t_start
    return result


def _load_or_train(model, data, config: PrivacyConfig, weights, say) -> None:
    """Give ``model`` the weights of the run ``weights``, or train it (no defence)."""
    t0 = time.perf_counter()
    if weights is not None:
        load_run_weights(model, weights)
        say(f"loaded the model of {weights}")
    else:
        train_model(model, data, config)
        say(
            f"trained {config.model} for {config.epochs} epochs in {time.perf_counter() - t0:.0f} s"
        )


def _defended_cut(data, config: PrivacyConfig, defence, k: int, prior) -> dict[str, Any]:
    """A fresh model trained with ``defence`` at cut ``k``, and its leakage there (with
    ``train_s``: the training time, the attack's left out)."""
    t0 = time.perf_counter()
    defended = train_model(build_study_model(data, config), data, config, cut=k, defence=defence)
    rec = measure_cut(defended, data, k, config, defence=defence, prior=prior)
    rec["train_s"] = time.perf_counter() - t0 - rec["attack_s"]
    return rec


SUMMARY_MEASURES = (
    "accuracy",
    "bytes_recovered",
    "ascii_recovered",
    "seq_nrmse",
    "dcor",
    "label_probe_acc",
    "grad_label_acc",
)
"""The per-cut measures a summary shows, in this order (the log here, the CLI's table)."""


def _summary(rec: dict[str, Any]) -> str:
    return ", ".join(f"{k} {rec[k]:.3f}" for k in SUMMARY_MEASURES if isinstance(rec.get(k), float))
