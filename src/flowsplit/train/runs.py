"""The run directory: what a run writes, and how a trained model is read back.

Layout of ``RUN``::

    RUN/config.json         {"train": TrainConfig, "model": {...}, "layout": {...}, "dataset": {...}}
    RUN/train.log           rank 0's log
    RUN/checkpoint.pt       last finished epoch (neural models), for --resume
    RUN/weights.safetensors best-validation weights (neural models)
    RUN/model.ubj           the booster (XGBoost)
    RUN/metrics.json        the RunResult
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowsplit import __version__
from flowsplit.data.store import Dataset
from flowsplit.errors import ConfigError, InputError
from flowsplit.inputs import read_json_input
from flowsplit.models.registry import build_model, get_spec, model_options
from flowsplit.outputs import atomic_write_bytes, atomic_write_json
from flowsplit.train.config import TrainConfig
from flowsplit.train.distributed import available_cores

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "weights.safetensors"
BOOSTER_NAME = "model.ubj"
METRICS_NAME = "metrics.json"
LOG_NAME = "train.log"


def resolve_view(cfg: TrainConfig, ds: Dataset) -> str:
    """The view to train on: ``--view``, else the model's first accepted view the dataset has."""
    spec = get_spec(cfg.model)
    if cfg.view is not None:
        if cfg.view not in spec.views:
            raise ConfigError(
                f"{cfg.model} reads the views {', '.join(spec.views)}, not {cfg.view!r}"
            )
        if not ds.has_view(cfg.view):
            raise InputError(
                ds.root, f"dataset has no view {cfg.view!r} (it has: {', '.join(ds.views)})"
            )
        return cfg.view
    for view in spec.views:
        if ds.has_view(view):
            return view
    raise InputError(
        ds.root,
        f"{cfg.model} needs one of the views {', '.join(spec.views)}; "
        f"the dataset has {', '.join(ds.views) or 'none'}",
    )


CHECKPOINT_FILE = "checkpoint.pt"  # the name train/checkpoint.py writes (kept in step)
RUN_FILES = (CONFIG_NAME, LOG_NAME, CHECKPOINT_FILE, WEIGHTS_NAME, BOOSTER_NAME, METRICS_NAME)
"""Every file a run writes into RUN (``--overwrite`` removes these and nothing else)."""


def check_run_dir(out: str | Path, *, resume: bool, overwrite: bool = False) -> None:
    """Refuse to overwrite a finished or started run unless resuming or ``overwrite``.

    The refusal says what can be done with the run that is there: continue it with
    ``--resume`` when it has a checkpoint, start it again with ``--overwrite`` (which
    removes the run's own files, nothing else in the directory).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a directory; choose another -o")
    if resume:
        if not (out / CONFIG_NAME).is_file():
            raise ConfigError(f"{out}: nothing to resume (no {CONFIG_NAME})")
        return
    if overwrite or not ((out / CONFIG_NAME).exists() or (out / METRICS_NAME).exists()):
        return
    if (out / METRICS_NAME).exists():
        advice = "it has finished; choose another -o, or replace it with --overwrite"
    elif (out / CHECKPOINT_FILE).exists():
        advice = f"continue it with --resume {out}, start it again with --overwrite, or choose another -o"
    else:
        advice = (
            "it stopped before its first checkpoint, so there is nothing to resume; "
            "start it again with --overwrite, or choose another -o"
        )
    raise ConfigError(f"{out} already holds a run: {advice}")


def clear_run(out: str | Path) -> list[Path]:
    """Remove a run's own files (and their temporaries) from ``out``; returns them."""
    out = Path(out)
    removed = [out / name for name in RUN_FILES if (out / name).is_file()]
    for path in removed:
        path.unlink()
    return removed + remove_stale_temps(out)


PREVIOUS_RUN = ".previous-run"
"""Where ``--overwrite`` keeps the run it replaces until the new one has finished."""


def set_aside_run(out: str | Path) -> Path | None:
    """Move a run's own files into ``out/.previous-run/`` (``--overwrite``): the old run
    stays whole until the new one has finished (:func:`drop_aside_run`), and comes back
    if it fails (:func:`restore_aside_run`). None when there was no run to keep."""
    out = Path(out)
    aside = out / PREVIOUS_RUN
    files = [out / name for name in RUN_FILES if (out / name).is_file()]
    if aside.is_dir():  # an --overwrite killed before it finished: keep the run it kept
        for path in files:
            path.unlink()
        return aside
    if not files:
        return None
    aside.mkdir()
    for path in files:
        os.replace(path, aside / path.name)
    return aside


def restore_aside_run(out: str | Path, aside: Path | None) -> None:
    """The new run failed: its files go, the previous run's come back."""
    if aside is None or not aside.is_dir():
        return
    out = Path(out)
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for path in aside.iterdir():
        os.replace(path, out / path.name)
    aside.rmdir()


def drop_aside_run(aside: Path | None) -> None:
    """The new run finished: the previous one is removed."""
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def remove_stale_temps(out: str | Path) -> list[Path]:
    """Remove temporaries a killed run left beside its files (``.checkpoint.pt.*.tmp``, ...).

    Every file of a run is written to ``.<name>.<random>.tmp`` (or ``.<name>.tmp``) and
    renamed; a process killed in between leaves the temporary, which the next run of
    the same directory removes before it starts. Only one run writes a directory at a
    time (:func:`check_run_dir`), so a temporary found then belongs to no live writer.
    """
    out = Path(out)
    if not out.is_dir():
        return []
    stale = sorted({p for name in RUN_FILES for p in out.glob(f".{name}*.tmp") if p.is_file()})
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def _installed_version(*distributions: str) -> str | None:
    """Version of the first of these distributions that is installed (without importing it)."""
    for name in distributions:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def environment() -> dict[str, Any]:
    """Versions, host and cores, for every result and benchmark."""
    return {
        "flowsplit": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        # The CPU-only wheel (Linux, Windows) or the full one (macOS): both import as xgboost.
        "xgboost": _installed_version("xgboost-cpu", "xgboost"),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_count": available_cores(),
        "cuda": torch.cuda.is_available(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_run_config(
    out: Path, cfg: TrainConfig, ds: Dataset, *, view: str, layout: dict[str, Any]
) -> dict[str, Any]:
    """Write ``config.json``: the options, the model as built, the layout, the dataset."""
    options = {**model_options(cfg.model), **cfg.model_options}
    doc = {
        "train": cfg.to_dict(),
        "model": model_section(cfg.model, get_spec(cfg.model).kind, ds, view, options),
        "layout": layout,
        "dataset": dataset_section(ds, view),
    }
    atomic_write_json(out / CONFIG_NAME, doc)
    return doc


def model_section(name: str, kind: str, ds: Dataset, view: str, options: dict) -> dict[str, Any]:
    """``config.json``'s model: what ``evaluate`` and ``predict`` rebuild it from."""
    return {
        "name": name,
        "kind": kind,
        "view": view,
        "input_shape": list(ds.view_shape(view)),
        "n_classes": ds.n_classes,
        "classes": list(ds.classes),
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
    }


def dataset_section(ds: Dataset, view: str) -> dict[str, Any]:
    """``config.json``'s dataset: where the run's flows came from and how they were made."""
    return {
        "path": str(Path(ds.root).resolve()),
        "n_flows": ds.n_flows,
        "kind": ds.manifest.get("kind", "capture"),
        "splits": ds.manifest.get("splits"),
        "options": ds.manifest.get("options", {}),
        "view_columns": ds.manifest["views"].get(view, {}).get("columns"),
    }


def read_run_config(run: str | Path) -> dict[str, Any]:
    """The ``config.json`` of a run directory."""
    path = Path(run) / CONFIG_NAME
    if not path.is_file():
        raise InputError(run, f"not a flowsplit run directory (no {CONFIG_NAME})")
    doc = read_json_input(path)
    if not isinstance(doc, dict):
        raise InputError(
            path, "is not the config.json of a `flowsplit train` or `sfl run` run (not an object)"
        )
    return doc


def save_weights(model: torch.nn.Module, path: Path, meta: dict[str, Any]) -> None:
    """Write the model's state dict as safetensors, with the build recipe as metadata."""
    from safetensors.torch import save

    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    # Serialised in memory, then written atomically: a full disk names the file.
    atomic_write_bytes(path, save(state, metadata={"flowsplit": json.dumps(meta)}))


MODEL_KEYS = ("name", "kind", "view", "input_shape", "n_classes", "classes")
"""What config.json's ``model`` must hold to rebuild the trained model."""

_MODEL_TYPES = {
    "name": lambda v: isinstance(v, str),
    "kind": lambda v: isinstance(v, str),
    "view": lambda v: isinstance(v, str),
    "input_shape": lambda v: isinstance(v, list) and all(type(d) is int for d in v),
    "n_classes": lambda v: type(v) is int and v > 0,
    "classes": lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v),
}
"""What each of those must be."""


def _check_types(path: Path, info: dict[str, Any], dataset: Any) -> None:
    """Refuse a run's ``model`` and ``dataset`` sections (of ``path``) where a field is
    not of its type (a hand-edited or damaged config.json)."""
    wrong = [f"model.{k}" for k, ok in _MODEL_TYPES.items() if k in info and not ok(info[k])]
    if not wrong and isinstance(info.get("classes"), list):
        wrong += [] if len(info["classes"]) == info.get("n_classes") else ["model.classes (count)"]
    dataset = dataset if isinstance(dataset, dict) else {}
    for key, kind in (("options", dict), ("path", str)):
        wrong += (
            [] if dataset.get(key) is None or isinstance(dataset[key], kind) else [f"dataset.{key}"]
        )
    if wrong:
        raise InputError(path, f"has a wrong {', '.join(wrong)}: the run is damaged")


def load_trained_model(run: str | Path) -> tuple[Any, dict[str, Any]]:
    """The trained model of a run directory (a :class:`BlockModel` or an
    ``XGBoostClassifier``) and its ``config.json``."""
    run = Path(run)
    doc = read_run_config(run)
    info = doc.get("model")
    # An `sfl run` directory holds the same model section (and the whole model's weights)
    # since runs record them; its model options are the section's own.
    is_sfl = (run / "topology.toml").is_file() and not isinstance(doc.get("train"), dict)
    if not isinstance(info, dict) or not (is_sfl or isinstance(doc.get("train"), dict)):
        if is_sfl:
            raise InputError(
                run, "is an `sfl run` directory written before runs saved their whole model"
            )
        raise InputError(run / CONFIG_NAME, "is not the config.json of a `flowsplit train` run")
    missing = [f"model.{k}" for k in MODEL_KEYS if info.get(k) is None]
    missing += [] if isinstance(doc.get("dataset"), dict) else ["dataset"]
    _check_types(run / CONFIG_NAME, info, doc.get("dataset"))
    if is_sfl:
        options = info.get("options")
        missing += [] if isinstance(options, dict) else ["model.options"]
    else:
        options = doc["train"].get("model_options")
        missing += [] if isinstance(options, dict) else ["train.model_options"]
    if missing:
        raise InputError(run / CONFIG_NAME, f"lacks {', '.join(missing)}: the run is damaged")
    if info["kind"] == "xgboost":
        path = run / BOOSTER_NAME
        if not path.is_file():
            raise InputError(run, f"no {BOOSTER_NAME}: the run did not finish")
        from flowsplit.models.xgb import XGBoostClassifier

        try:
            return XGBoostClassifier.load_model(path), doc
        except Exception as exc:  # noqa: BLE001 - xgboost raises its own kinds for a bad file
            raise InputError(path, f"unreadable booster ({type(exc).__name__})") from None
    from safetensors.torch import load_file

    path = run / WEIGHTS_NAME
    if not path.is_file():
        raise InputError(run, f"no {WEIGHTS_NAME}: the run did not finish")
    model = build_model(
        info["name"],
        view=info["view"],
        input_shape=tuple(info["input_shape"]),
        n_classes=info["n_classes"],
        **options,
    )
    try:
        state = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError: a damaged file
        raise InputError(path, f"unreadable weights ({type(exc).__name__}: {exc})") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:  # shapes or names that are not this model's
        first = str(exc).strip().splitlines()[0]
        raise InputError(path, f"weights do not fit the model of config.json ({first})") from None
    model.eval()
    return model, doc


@torch.no_grad()
def predict(
    model: Any,
    x: torch.Tensor | np.ndarray,
    *,
    labels: bool = False,
    batch_size: int = 1024,
    device: str | torch.device = "cpu",
) -> np.ndarray:
    """Class probabilities ``(N, n_classes)`` for the rows of ``x`` (a raw view array),
    or with ``labels`` the predicted class of every row."""
    if not isinstance(model, torch.nn.Module):  # an XGBoostClassifier
        return model.predict(np.asarray(x)) if labels else model.predict_proba(np.asarray(x))
    post = (lambda z: z.argmax(dim=1)) if labels else (lambda z: torch.softmax(z, dim=1))
    return _batched(model, x, batch_size, device, post).numpy()


def predict_proba(model: Any, x: torch.Tensor | np.ndarray, **options: Any) -> np.ndarray:
    """Class probabilities ``(N, n_classes)`` (options: :func:`predict`'s)."""
    return predict(model, x, labels=False, **options)


def predict_labels(model: Any, x: torch.Tensor | np.ndarray, **options: Any) -> np.ndarray:
    """The predicted class of every row (options: :func:`predict`'s)."""
    return predict(model, x, labels=True, **options)


def _batched(model, x, batch_size, device, post) -> torch.Tensor:
    """Apply ``model`` in eval mode batch by batch, ``post`` on each output, on the CPU."""
    was_training = model.training
    model.eval()
    x = torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x
    out = [
        post(model(x[i : i + batch_size].to(device))).cpu() for i in range(0, len(x), batch_size)
    ]
    model.train(was_training)
    if not out:
        return torch.zeros((0,), dtype=torch.long)
    return torch.cat(out)
