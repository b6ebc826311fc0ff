"""``flowsplit pretrain``: masked byte modelling on unlabelled captures (the transformer).

The transformer's encoder (``embed``, ``enc1``..``encN``) learns from flows without
labels: a fraction of each flow's byte patches is hidden behind a learned mask token
and a small head predicts the hidden bytes (see
:class:`~flowsplit.models.transformer.MaskedBytePretrainer`). ``-o DIR`` receives
``encoder.pt`` (the encoder blocks' weights, the view, input shape and model sizes
they fit; read back with ``torch.load(weights_only=True)``) and ``pretrain.json`` (the
loss curve). ``flowsplit train --model transformer --init-from DIR`` starts from it.

The input is pcap/pcapng files or folders (flows cut and turned into the view as
``prepare`` would, with the options of ``--like DATASET`` or the defaults), or one
prepared dataset folder (its ``--split`` rows; labels are not read).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from flowsplit.choices import add_model_option_argument, as_options
from flowsplit.config_args import (
    FLOAT32_MAX,
    FORCE_HELP,
    add_out_option,
    check_threads,
    command_parser,
    finite_float,
    parse_seed,
    path_text,
)
from flowsplit.errors import ConfigError, InputError, check_finite_loss

VIEWS = ("pkt_bytes", "bytes")
SPLITS = ("train", "val", "test", "all")  # as evaluate --split
DESCRIPTION = """\
Pre-train the transformer's encoder by masked byte modelling on unlabelled flows and
write DIR/encoder.pt (and DIR/pretrain.json, the loss curve). Then:

    flowsplit train DATASET --model transformer --init-from DIR -o RUN

CAPTURES are pcap/pcapng files or folders, read with the options of --like DATASET
(the dataset you will fine-tune on: same view, packets and bytes per packet), or one
prepared dataset folder whose --split rows are used (labels ignored). Pre-train only on
flows that are not in the test split you will report (--split train, the default).
"""


def add_pretrain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", type=path_text, metavar="CAPTURES", help="(or a DATASET)")
    add_out_option(p, "folder to write encoder.pt", metavar="DIR")
    p.add_argument(
        "--like", metavar="DATASET", help="read captures as DATASET was prepared", type=path_text
    )
    p.add_argument(
        "--view",
        help="pkt_bytes or bytes: the view to pre-train on (default: pkt_bytes if present)",
    )
    p.add_argument(
        "--split",
        choices=SPLITS,
        default=None,
        help="rows of a dataset folder (default: train; captures are read whole)",
    )
    p.add_argument("--steps", type=int, default=500, help="optimiser steps (default: 500)")
    p.add_argument("--batch-size", type=int, default=64, help="flows per step (default: 64)")
    p.add_argument(
        "--lr", type=finite_float, default=1e-3, help="AdamW learning rate (default: 1e-3)"
    )
    p.add_argument(
        "--mask-ratio",
        type=finite_float,
        default=0.3,
        help="fraction of each flow's byte patches hidden (default: 0.3)",
    )
    p.add_argument("--seed", type=parse_seed, default=0, help="seed of weights, masks and order")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    add_model_option_argument(p, help="transformer size, e.g. dim=64 (give the same to train)")
    p.add_argument("--overwrite", action="store_true", help="replace DIR/encoder.pt")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _check(args: argparse.Namespace) -> None:
    for name, value, low in (("--steps", args.steps, 1), ("--batch-size", args.batch_size, 1)):
        if value < low:
            raise ConfigError(f"{name} must be >= {low}, got {value}")
    if not 0 < args.lr <= FLOAT32_MAX:  # AdamW takes it as a float32
        raise ConfigError(f"--lr must be > 0 and at most {FLOAT32_MAX:.1e}, got {args.lr:g}")
    if not 0.0 < args.mask_ratio < 1.0:
        raise ConfigError(f"--mask-ratio must be between 0 and 1, got {args.mask_ratio}")
    if args.view is not None and args.view not in VIEWS:
        raise ConfigError(f"--view {args.view!r}: the transformer pre-trains on pkt_bytes or bytes")
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    check_threads(args.threads, force=args.force)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(out, "is a file; -o takes a folder")
    if (out / "encoder.pt").exists() and not args.overwrite:
        raise InputError(out, "holds an encoder.pt already; give --overwrite or another -o")


def _is_dataset(path: Path) -> bool:
    return (
        path.is_dir() and (path / "manifest.json").is_file() and (path / "meta.parquet").is_file()
    )


def load_rows(captures: list[str], *, like: str | None, view: str | None, split: str | None):
    """The unlabelled rows ``(N, *shape)`` (uint8) and their view (``split``: of a
    dataset folder, default ``train``; captures have none)."""
    import numpy as np

    from flowsplit.data.store import load_dataset

    paths = [Path(c) for c in captures]
    if len(paths) == 1 and _is_dataset(paths[0]):
        if like is not None:
            raise ConfigError("--like is for captures; a dataset folder is read as it is")
        ds = load_dataset(paths[0])
        view = view or next((v for v in VIEWS if ds.has_view(v)), None)
        if view is None or not ds.has_view(view):
            raise InputError(ds.root, f"has no {view or 'pkt_bytes or bytes'} view to pre-train on")
        split = split or "train"
        idx = np.arange(ds.n_flows) if split == "all" else ds.split_indices(split)
        return np.asarray(ds.view(view)[idx]), view
    if any(_is_dataset(p) for p in paths):
        raise ConfigError("give one dataset folder or captures, not both")
    if split is not None:
        raise ConfigError(
            f"--split {split}: captures have no splits, every flow is read; prepare them "
            "and give the dataset folder to pre-train on one split"
        )
    from flowsplit.data.prepare import PrepareOptions, extract_views

    if like is not None:
        ref = load_dataset(like)
        options = dict(ref.manifest["options"])
        view = view or next((v for v in VIEWS if ref.has_view(v)), None)
        if view is None or not ref.has_view(view):
            raise InputError(like, f"has no {view or 'pkt_bytes or bytes'} view to match")
    else:
        options = {}
        view = view or "pkt_bytes"
    # Only the view pre-training reads (with the options it needs, e.g. the packet layout).
    options = {**options, "views": [v for v in PrepareOptions.views if v == view]}
    source = Path(like) / "manifest.json" if like is not None else "the default options"
    _, views, _ = extract_views(paths, options, source)
    rows = views.get(view)
    if rows is None or len(rows) == 0:
        raise InputError(paths[0], "no flows in the captures to pre-train on")
    return np.asarray(rows), view


def _batches(rows, batch_size: int, seed: int):
    """Minibatches of ``rows`` without end: a new seeded permutation for each pass, the
    batch's rows in store order."""
    import numpy as np
    import torch

    order = np.random.default_rng(seed)
    n = len(rows)
    perm, pos = order.permutation(n), 0
    while True:
        if pos + batch_size > n and pos > 0:
            perm, pos = order.permutation(n), 0
        take = perm[pos : pos + batch_size]
        pos += len(take)
        yield torch.from_numpy(np.ascontiguousarray(rows[np.sort(take)]))


def pretrain(
    rows,
    view: str,
    out: str | Path,
    *,
    steps: int = 500,
    batch_size: int = 64,
    lr: float = 1e-3,
    mask_ratio: float = 0.3,
    seed: int = 0,
    model_options: dict | None = None,
    log=None,
) -> dict:
    """Masked byte modelling on ``rows``; writes ``out/encoder.pt`` and ``out/pretrain.json``
    and returns the latter's content."""
    import numpy as np
    import torch

    from flowsplit.models.registry import build_model
    from flowsplit.models.registry import model_options as defaults
    from flowsplit.models.transformer import (
        ENCODER_NAME,
        MaskedBytePretrainer,
        encoder_state,
    )
    from flowsplit.outputs import atomic_write_bytes, atomic_write_json

    options = {**defaults("transformer"), **(model_options or {})}
    torch.manual_seed(seed)
    shape = tuple(int(s) for s in rows.shape[1:])
    model = build_model("transformer", view=view, input_shape=shape, n_classes=2, **options)
    _check_mask_ratio(model, mask_ratio)
    net = MaskedBytePretrainer(model, mask_ratio)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)),
    )
    gen = torch.Generator().manual_seed(seed)
    batches = _batches(rows, batch_size, seed)
    curve, losses, right, total = [], [], 0, 0
    every = max(1, steps // 20)
    t0 = time.perf_counter()
    net.train()
    for step in range(steps):
        loss, r, m = net(next(batches), gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        _check_loss(losses[-1], step, lr)
        right, total = right + int(r), total + int(m)
        if (step + 1) % every == 0 or step + 1 == steps:
            point = {
                "step": step + 1,
                "loss": float(np.mean(losses)),
                "masked_byte_accuracy": right / max(total, 1),
            }
            curve.append(point)
            if log:
                log(
                    f"step {step + 1}/{steps}: loss {point['loss']:.4f}, masked bytes right "
                    f"{point['masked_byte_accuracy']:.3f}"
                )
            losses, right, total = [], 0, 0
    if not all(bool(torch.isfinite(p).all()) for p in net.parameters()):
        _check_loss(math.nan, steps - 1, lr)
    info = {
        "view": view,
        "input_shape": list(shape),
        "flows": len(rows),
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "mask_ratio": float(mask_ratio),
        "seed": int(seed),
        "options": options,
        "seconds": time.perf_counter() - t0,
        "curve": curve,
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import io

    buf = io.BytesIO()
    keep = {k: info[k] for k in ("flows", "steps", "mask_ratio", "seed")}
    torch.save(encoder_state(model, options, **keep), buf)
    atomic_write_bytes(out / ENCODER_NAME, buf.getvalue())
    atomic_write_json(out / "pretrain.json", info)
    return info


MIN_MASK_RATIO = 0.1
"""A mask ratio at least this is never refused (flows of few patches): below it, the
ratio must hide at least one patch of a flow on average."""


def _check_mask_ratio(model, mask_ratio: float) -> None:
    """Refuse a mask ratio that would hide (on average) less than one byte patch of a
    flow and is under :data:`MIN_MASK_RATIO`: most steps would have nothing to learn."""
    embed = model.blocks["embed"]
    tokens = embed.rows * embed.patches
    if mask_ratio * tokens < 1 and mask_ratio < MIN_MASK_RATIO:
        least = min(1.0 / tokens, MIN_MASK_RATIO)
        raise ConfigError(
            f"--mask-ratio {mask_ratio:g} hides {mask_ratio * tokens:.2g} of the {tokens} "
            f"byte patches of a flow on average; give at least {least:.3g}"
        )


def _check_loss(loss: float, step: int, lr: float) -> None:
    """Stop a pre-training that diverged (nothing is written)."""
    check_finite_loss(
        loss, f"at step {step + 1}", lr, what="the pre-training loss", then="nothing was written"
    )


def cmd_pretrain(args: argparse.Namespace) -> int:
    import os

    import torch

    _check(args)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    rows, view = load_rows(args.captures, like=args.like, view=args.view, split=args.split)
    log = None if args.quiet else print
    info = pretrain(
        rows,
        view,
        args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        mask_ratio=args.mask_ratio,
        seed=args.seed,
        model_options=as_options(args.model_options),
        log=log,
    )
    first, last = info["curve"][0], info["curve"][-1]
    print(
        f"pretrained the transformer on {info['flows']} flows ({view} "
        f"{tuple(info['input_shape'])}), {info['steps']} steps: loss {first['loss']:.4f} -> "
        f"{last['loss']:.4f}, masked bytes right {last['masked_byte_accuracy']:.3f} "
        f"-> {Path(args.out) / 'encoder.pt'}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """pre-train the transformer by masked byte modelling on unlabelled captures"""
    p = command_parser(sub, "pretrain", register, layout=DESCRIPTION)
    add_pretrain_arguments(p)
    p.set_defaults(func=cmd_pretrain)
