"""flowsplit's Python API: the functions the command line runs, for scripts and notebooks.

    import flowsplit as fs

    ds = fs.prepare("demo/captures", "runs/ds")          # labels: one folder per class
    run = fs.train(dataset=ds.root, model="cnn", out="runs/cnn", epochs=2)
    ev = fs.evaluate("runs/cnn", ds.root)                 # scores + one row per flow
    print(ev.report)
    ev.predictions.head()

Every function returns the typed object the command writes (:class:`RunResult` for a
run, :class:`Dataset` for a dataset, :class:`Evaluation` for an evaluation) and raises
:class:`~flowsplit.errors.FlowsplitError` (one line saying what is wrong) on bad input,
where the command would print that line. Split learning is under ``fs.sfl``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowsplit import _API
from flowsplit.config_args import parse_seeds
from flowsplit.data.labels import LabelSpec
from flowsplit.data.prepare import PrepareOptions
from flowsplit.data.store import Dataset
from flowsplit.errors import ConfigError
from flowsplit.result import RunResult
from flowsplit.train.config import TrainConfig
from flowsplit.train.evaluation import Evaluation

if TYPE_CHECKING:
    from flowsplit.experiments.dp.result import CompareResult

__all__ = list(_API)  # the names `import flowsplit` lends out lazily, listed once there

PathLike = str | Path


def prepare(
    inputs: PathLike | Sequence[PathLike],
    out: PathLike,
    config: PrepareOptions | None = None,
    *,
    label_by: str = "auto",
    labels: PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    **options: Any,
) -> Dataset:
    """Turn captures (or flow CSVs, IDX files) into a labelled, split dataset at ``out``.

    Args:
        inputs: capture files or folders (``folder/CLASS/*.pcap`` labels by folder).
        out: the dataset directory to write.
        config: every setting at once, a :class:`PrepareOptions` (its ``labels``, a
            :class:`LabelSpec`, says how to label); then give no ``label_by``,
            ``labels`` or ``options``.
        label_by: ``auto``, ``folder``, ``file-csv``, ``flow-csv``, ``port`` or ``ndpi``
            (as ``prepare --label-by``).
        labels: the CSV of ``file-csv`` / ``flow-csv`` labels.
        overwrite: replace a dataset already at ``out``.
        progress: show a progress bar.
        **options: any :class:`PrepareOptions` field (``split_by="flow"``,
            ``top_classes=8``, ``views=("bytes", "stats")``, ...).

    Returns:
        The dataset, loaded (:class:`Dataset`).
    """
    from flowsplit.data.prepare import prepare_dataset

    files = _paths("inputs", inputs)
    path_argument("out", out)
    if not isinstance(overwrite, bool):
        raise ConfigError(f"overwrite: give True or False, not {overwrite!r}")
    if config is not None:
        if not isinstance(config, PrepareOptions):
            raise ConfigError(f"config: give a PrepareOptions, not {type(config).__name__}")
        if options or label_by != "auto" or labels is not None:
            raise TypeError("prepare(inputs, out, config): give the options in the config")
    else:
        config = _prepare_options(label_by, labels, options)
    prepare_dataset(files, out, config, progress=progress, overwrite=overwrite)
    return load_dataset(out)


def _prepare_options(label_by: str, labels: Any, options: dict[str, Any]) -> PrepareOptions:
    """:func:`prepare`'s keywords as one :class:`PrepareOptions`: LabelSpec's fields go
    to its ``labels``; one it shares with PrepareOptions (``label_column``) goes to both,
    as ``prepare --label-column`` does."""
    label_keys = {f.name for f in dataclasses.fields(LabelSpec)} - {"by", "labels"}
    shared = label_keys & {f.name for f in dataclasses.fields(PrepareOptions)}
    spec = LabelSpec(
        by=label_by,
        labels=Path(labels) if labels is not None else None,
        **{
            k: options[k] if k in shared else options.pop(k)
            for k in list(options)
            if k in label_keys
        },
    )
    for key in ("views", "classes", "exclude_classes", "class_names"):
        if isinstance(options.get(key), list):
            options[key] = tuple(options[key])
    return PrepareOptions(labels=spec, **options)


def _paths(name: str, inputs: Any) -> list[str]:
    """One path, or any iterable of them (``Path("caps").glob("*.pcap")``), as a list,
    each checked (:func:`path_argument`: ``None`` is refused, naming ``name``)."""
    one = isinstance(inputs, str | Path) or not isinstance(inputs, Iterable)
    return [path_argument(name, f) for f in ([inputs] if one else list(inputs))]


def load_dataset(path: PathLike) -> Dataset:
    """A prepared dataset: ``ds.classes``, ``ds.meta`` (one row per flow),
    ``ds.xy(view, split)`` (arrays for your own models), ``ds.view(name)``."""
    from flowsplit.data.store import load_dataset as _load

    return _load(path)


def train(config: TrainConfig | None = None, /, *, overwrite: bool = False, **fields) -> RunResult:
    """Train one model (centralised, or data-parallel with ``workers=N``) and return its result.

    Give a :class:`TrainConfig`, or its fields as keywords: ``dataset``, ``model``
    (a registry name, or ``package.module:factory`` for your own block model), ``out``,
    and any other (``epochs``, ``batch_size``, ``workers``, ``seed``, ...). The run
    directory ``out`` holds what ``flowsplit train`` writes. (``flowsplit.train``, the
    package, is callable and runs this same function.)
    """
    from flowsplit.train import run

    return run(config, overwrite=overwrite, **fields)


def evaluate(run: PathLike, dataset: PathLike | Dataset, *, split: str = "test") -> Evaluation:
    """Score a ``train`` or ``sfl run`` model on ``dataset``'s ``split`` (``all``: every flow).

    Returns an :class:`Evaluation`: ``.summary`` (accuracy, macro-F1 over the classes the
    dataset has, per-class precision/recall/F1/support, confusion matrix), ``.predictions``
    (a DataFrame, one row per flow with its probabilities) and ``.report`` (text).
    """
    from flowsplit.train.evaluation import evaluate_run

    return evaluate_run(run, dataset, split)


def predict(
    run: PathLike, captures: PathLike | Iterable[PathLike], *, min_confidence: float | None = None
):
    """Classify the flows of new captures with a trained run: a DataFrame, one row per flow
    (5-tuple, times, ``predicted``, ``confidence``; below ``min_confidence``: ``unknown``)."""
    from flowsplit.train.evaluation import predict_captures

    files = _paths("captures", captures)
    return predict_captures(path_argument("run", run), files, min_confidence)


def read_result(run: PathLike) -> RunResult:
    """The :class:`RunResult` of a run directory (``metrics.json``): every engine's."""
    from flowsplit.result import read_result as _read

    return _read(run)


def load_model(run: PathLike):
    """The trained model of a run directory (a ``BlockModel`` in eval mode, or the
    XGBoost classifier) and its ``config.json``, as ``(model, config)``."""
    from flowsplit.train.runs import load_trained_model

    return load_trained_model(run)


def compare(dataset: Any, out: PathLike | None = None, **options: Any) -> CompareResult:
    """Run ``flowsplit compare`` (models x workers x seeds) into ``out``; returns the
    study's :class:`~flowsplit.experiments.dp.result.CompareResult` (``OUT/results.json``:
    ``.summary``, the findings in words; ``.analysis``, the statistics and scaling
    model; ``.cells``, one row per run, as ``OUT/results.csv``). Options are the
    command's, as keywords (``models=["cnn", "xgboost"]``, ``workers=[1, 2]``,
    ``seeds=[0, 1]``, ``quick=True``), or give a
    :class:`~flowsplit.experiments.dp.config.CompareConfig` alone:
    ``fs.compare(CompareConfig(dataset=..., out=..., models=["cnn"]))``. A run that
    failed is listed in the result (the command would exit 1); call again to retry it."""
    from flowsplit.experiments.dp.config import CompareConfig
    from flowsplit.experiments.dp.result import read_compare_result

    if isinstance(dataset, CompareConfig):
        with_config(["compare", dataset.dataset, "-o", dataset.out], dataset, **options)
        return read_compare_result(dataset.out)
    argv = ["compare", path_argument("dataset", dataset), "-o", path_argument("out", out)]
    run_command([*argv, *as_flags(options, ["compare"])])
    return read_compare_result(out)


def path_argument(name: str, value: Any) -> str:
    """A path argument of an API call as its command takes it; ``None`` (or another
    non-path) is one line naming the argument, not a folder called ``None``."""
    if not isinstance(value, str | Path) or not str(value).strip():
        shown = repr(value) if value is None or isinstance(value, str) else type(value).__name__
        raise ConfigError(f"{name}: give a path, not {shown}")
    return str(value)


def with_config(argv: list[str], config: Any, *, quiet: bool = False, **options: Any) -> int:
    """Run the command ``argv`` with ``config`` (a config object) as its ``--config`` file,
    and ``options`` as flags over it: the command's own checks, files and output."""
    from flowsplit.config_file import write_config_toml
    from flowsplit.errors import FlowsplitError

    with tempfile.TemporaryDirectory(prefix="flowsplit-config-") as tmp:
        path = write_config_toml(Path(tmp) / "config.toml", config, comment=("dataset", "out"))
        try:
            return run_command(
                [*argv, "--config", str(path), *as_flags(options, argv)], quiet=quiet
            )
        except FlowsplitError as exc:
            if str(path) not in str(exc):
                raise
            # The file is this call's, gone when it returns: name the config object.
            named = str(exc).replace(str(path), f"config ({type(config).__name__})")
            raise ConfigError(named) from None


def _command_options(argv: Sequence[str]) -> dict[str, argparse.Action]:
    """The options of the command that ``argv`` starts with (``["sfl", "run", ...]``), by
    the name of the field each one sets (``n_clients`` -> the action of ``--clients``)."""
    from flowsplit.cli import build_parser

    parser = build_parser()
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return {a.dest: a for a in parser._actions if any(s.startswith("--") for s in a.option_strings)}


def as_flags(options: dict[str, Any], command: Sequence[str] = ()) -> list[str]:
    """Keyword options as the flags of ``command`` (its words, ``["sfl", "run"]``).

    A key is a field name of the command's config (``n_clients=4`` -> ``--clients 4``,
    ``timeout_s=30`` -> ``--timeout 30``) or the option's own name without its dashes
    (``clients=4``, ``batch_size=32`` -> ``--batch-size 32``). True -> the bare flag;
    False -> the ``--no-`` form where the option has one, else nothing; None -> nothing;
    a list -> comma-separated; ``model_options={"channels": [8, 16]}`` ->
    ``--model-option channels=[8, 16]``."""
    known = _command_options(command) if command else {}
    argv: list[str] = []
    for key, value in options.items():
        action = known.get(key)
        names = [s for s in action.option_strings if s.startswith("--")] if action else []
        flag = names[0] if names else "--" + key.replace("_", "-")
        if value is False and isinstance(action, argparse.BooleanOptionalAction):
            argv.append(next(s for s in names if s.startswith("--no-")))
            continue
        if isinstance(action, argparse._HelpAction):  # argparse would print and exit
            raise ConfigError(
                f"{key}: not an option of a call (see `flowsplit {' '.join(command)} --help`)"
            )
        if value is False and action is not None and action.nargs != 0:
            raise ConfigError(f"{key}=False: {flag} takes a value (it used to be left out)")
        if value is None or value is False:
            continue
        if key == "model_options":
            for k, v in dict(value).items():
                argv += ["--model-option", f"{k}={json.dumps(v)}"]
        elif value is True:
            argv.append(flag)
        elif isinstance(action, argparse._AppendAction):  # train_args=["--lr=0.1", ...]
            items = value if isinstance(value, list | tuple) else [value]
            argv += [f"{flag}={v}" for v in items]  # "=": a value may start with "-"
        elif isinstance(value, list | tuple):
            text = ",".join(map(str, value))
            if len(value) == 1 and action is not None and action.type is parse_seeds:
                text += ","  # seeds=[3] is the seed 3, not a count of 3 seeds
            argv += [flag, text]
        else:
            argv += [flag, str(value)]
    return argv


def run_command(argv: list[str], *, quiet: bool = False) -> int:
    """Run a ``flowsplit`` command in this process; a usage or input error raises
    :class:`~flowsplit.errors.FlowsplitError` (the CLI prints it as one line)."""
    import contextlib
    import io

    from flowsplit.cli import build_parser

    args = build_parser().parse_args(argv)
    sink = io.StringIO() if quiet else None
    with contextlib.redirect_stdout(sink) if sink is not None else contextlib.nullcontext():
        return int(args.func(args) or 0)
