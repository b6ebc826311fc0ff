"""Model registry: names -> builders, the views each model reads, its kind.

>>> spec = MODEL_SPECS["cnn"]; spec.kind, spec.views
('torch', ('bytes', 'seq'))
>>> model = build_model("cnn", view="bytes", input_shape=(784,), n_classes=20)
>>> model.block_names
['conv1', 'conv2', 'fc', 'head']

Neural models take raw rows of their view (uint8 bytes, float32 per-packet
features): preprocessing sits inside their first block (``layers.py``). A model
over ``seq`` has an input standardisation to fit on training rows with
:func:`fit_input_scaler` before training (unfitted it still works, on
log-scaled features).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowsplit.errors import ConfigError
from flowsplit.models.base import BlockModel
from flowsplit.models.checks import check_type
from flowsplit.models.cnn import build_cnn
from flowsplit.models.convrnn import build_convgru, build_convlstm
from flowsplit.models.layers import fit_input_scaler, has_input_scaler
from flowsplit.models.lstm import build_lstm
from flowsplit.models.transformer import build_transformer

__all__ = [
    "MODEL_SPECS",
    "ModelSpec",
    "build_estimator",
    "build_model",
    "default_view",
    "fit_input_scaler",
    "has_input_scaler",
    "model_options",
    "neural_models",
]


@dataclass(frozen=True)
class ModelSpec:
    """What the registry knows about one model."""

    name: str
    """Registry name (``cnn``, ``lstm``, ...)."""
    kind: str
    """``torch`` (a :class:`BlockModel`) or ``xgboost`` (an :class:`XGBoostClassifier`)."""
    views: tuple[str, ...]
    """Dataset views the model reads; the first is its default."""
    builder: Callable[..., Any] = field(repr=False)
    """Callable building the model; its keyword defaults are the model's default sizes."""
    description: str = ""
    """One line for ``--help`` and reports."""


def _build_xgboost(**params: Any):
    # Imported on use: xgboost costs a second at import and neural runs never need it.
    from flowsplit.models.xgb import XGBoostClassifier

    est = XGBoostClassifier(**params)
    est.check_params()  # a value XGBoost would refuse (or run at chance with), in one line
    return est


MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "cnn",
            "torch",
            ("bytes", "seq"),
            build_cnn,
            "CNN: 1-D over the payload bytes or over packets (dims=2: 2-D over the 28x28 "
            "payload image)",
        ),
        ModelSpec(
            "lstm",
            "torch",
            # pkt_bytes first (one step per packet: in the default payload layout its
            # header fields and first 56 payload bytes; lstm.py gives the figures of the
            # two layouts). On the former ip layout (the first 64 bytes from the IP header
            # on) and with the earlier LSTM defaults (embedding 8, no input dropout;
            # lstm.py gives today's): on the nDPI 8-protocol set (ports masked, split by file) its best
            # validation macro-F1 was 0.849-0.862 in three runs against 0.823-0.843 over
            # the 28 rows of the payload image (bytes), for less than half the CPU per
            # training step (both ways 149 against 349 ms at batch 64: the packed
            # sequences stop at a short flow's last packet). Both ways
            # (bidirectional) bytes scored 0.879 and 0.894 for seeds 0 and 1 against 0.875
            # and 0.878 over pkt_bytes, but over seeds 0-4 averaged 0.856 against 0.869.
            # Over per-packet sizes, gaps and flags (seq) 0.49 on test. Sets without
            # pkt_bytes (USTC-TFC2016's byte sessions) fall back to bytes.
            ("pkt_bytes", "bytes", "seq"),
            build_lstm,
            "two-layer LSTM over the packets' first bytes, one step per packet (or over "
            "payload-image rows: --view bytes; per-packet features: --view seq)",
        ),
        ModelSpec(
            "convlstm",
            "torch",
            ("pkt_bytes", "bytes"),
            build_convlstm,
            "two-layer ConvLSTM over per-packet byte frames (or payload-image strips)",
        ),
        ModelSpec(
            "convgru",
            "torch",
            ("pkt_bytes", "bytes"),
            build_convgru,
            "two-layer ConvGRU over per-packet byte frames (or payload-image strips)",
        ),
        ModelSpec(
            "transformer",
            "torch",
            ("pkt_bytes", "bytes"),
            build_transformer,
            "small transformer over patches of packet bytes (YaTC-like, <= 2.5 M parameters)",
        ),
        ModelSpec(
            "xgboost",
            "xgboost",
            ("stats",),
            _build_xgboost,
            "gradient-boosted trees (hist) over flow statistics",
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    """The spec of ``name`` (a registry name, or ``package.module:factory`` for a model of
    your own, see :func:`user_model_spec`), or a :class:`ConfigError` listing the known models."""
    if name in MODEL_SPECS:
        return MODEL_SPECS[name]
    if ":" in name:
        return user_model_spec(name)
    raise ConfigError(
        f"unknown model {name!r}; choose one of {', '.join(MODEL_SPECS)}, "
        "or give your own as package.module:factory"
    )


USER_VIEWS = ("bytes",)
"""The views a user model reads when its factory does not say (``factory.views``)."""


def is_user_model(name: str) -> bool:
    """Whether ``name`` is a ``package.module:factory`` model rather than a registry name."""
    return name not in MODEL_SPECS and ":" in name


def user_model_spec(name: str) -> ModelSpec:
    """The spec of a model of your own, ``package.module:factory`` (``--model`` and the API).

    The contract (the one the built-in models follow, so that every engine can train it
    and split learning can cut it at any block boundary): ``factory(*, view, input_shape,
    n_classes, **options)`` returns a :class:`~flowsplit.models.base.BlockModel`, blocks
    ``b_1 .. b_L`` (L >= 2) each taking and returning one tensor, the last returning
    logits ``(B, n_classes)``; the first block takes the raw rows of the view (uint8
    bytes, float32 features) and converts them itself. ``factory.views`` (optional, a
    tuple) names the views it reads, the first its default (else ``bytes``); its keyword
    defaults are its ``--model-option`` options. The module must be importable (on
    ``PYTHONPATH``) in every process that trains it.
    """
    import importlib

    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--model {name!r}: give your own model as package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is one line
        raise ConfigError(
            f"--model {name}: cannot import {module_name} ({type(exc).__name__}: {exc}); "
            "is it on PYTHONPATH?"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"--model {name}: {module_name} has no callable {attr!r}")
    views = tuple(getattr(factory, "views", USER_VIEWS))
    doc = (inspect.getdoc(factory) or "").split("\n")[0]
    return ModelSpec(name, "torch", views, factory, doc or f"user model {name}")


def default_view(name: str) -> str:
    """The view ``name`` reads unless told otherwise."""
    return get_spec(name).views[0]


def neural_models() -> list[str]:
    """Names of the models built as :class:`BlockModel` (the ones split learning can cut)."""
    return [name for name, spec in MODEL_SPECS.items() if spec.kind == "torch"]


def model_options(name: str) -> dict[str, Any]:
    """The tunable options of ``name`` and their defaults (the builder's keywords)."""
    spec = get_spec(name)
    skip = {"view", "input_shape", "n_classes"} if spec.kind == "torch" else set()
    target = spec.builder
    if spec.kind == "xgboost":
        from flowsplit.models.xgb import XGBoostClassifier

        target = XGBoostClassifier
    sig = inspect.signature(target)
    return {
        p.name: p.default
        for p in sig.parameters.values()
        if p.name not in skip and p.default is not inspect.Parameter.empty
    }


def _check_options(name: str, overrides: dict[str, Any]) -> None:
    """Refuse an option ``name`` does not have, and a value not of its default's kind
    (``bidirectional=2`` for a bool, ``kernel=2.5`` for an int, ``nan`` for a float):
    see :func:`~flowsplit.models.checks.check_type`. Ranges are the builders' to check."""
    defaults = model_options(name)
    unknown = set(overrides) - set(defaults)
    if unknown:
        valid = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
        raise ConfigError(
            f"{name} has no option {', '.join(sorted(unknown))}; its options are: {valid}"
        )
    for option, value in overrides.items():
        check_type(name, option, value, defaults[option])


def build_model(
    name: str, *, view: str, input_shape: tuple[int, ...], n_classes: int, **overrides: Any
) -> BlockModel:
    """Build the neural model ``name`` for samples of ``view`` shaped ``input_shape``.

    ``overrides`` change default sizes (see :func:`model_options`), e.g.
    ``build_model("cnn", view="bytes", input_shape=(784,), n_classes=20, dropout=0.0)``.
    """
    spec = get_spec(name)
    if spec.kind != "torch":
        raise ConfigError(
            f"{name} is not a neural model (kind {spec.kind!r}); use build_estimator({name!r})"
        )
    if view not in spec.views:
        raise ConfigError(f"{name} reads the views {', '.join(spec.views)}, not {view!r}")
    if n_classes < 2:
        raise ConfigError(f"a classifier needs at least 2 classes, got n_classes={n_classes}")
    _check_options(name, overrides)
    given = ", ".join(f"{k}={v!r}" for k, v in overrides.items()) or "defaults"
    try:
        with warnings.catch_warnings():
            # A size of 0 is refused below, in one line, not warned about by torch.
            warnings.filterwarnings("ignore", "Initializing zero-element tensors")
            model = spec.builder(
                view=view, input_shape=tuple(input_shape), n_classes=int(n_classes), **overrides
            )
    except (TypeError, ValueError, RuntimeError) as exc:
        # An option of the right name but a wrong value (an even kernel, one channel
        # count where two are needed, a string for a number, a negative size, which
        # torch refuses with a RuntimeError): say which model and options.
        raise ConfigError(f"{name} cannot be built with {given}: {exc}") from None
    if not isinstance(model, BlockModel):
        raise ConfigError(
            f"{name} returned a {type(model).__name__}, not a flowsplit.models.base.BlockModel "
            "(a list of named blocks; see the model contract in docs/models.md)"
        )
    empty = next((n for n, p in model.named_parameters() if p.numel() == 0), None)
    if empty is not None:
        # torch builds a layer of size 0 and fails only at the first batch.
        raise ConfigError(f"{name} cannot be built with {given}: its weights {empty} have size 0")
    return model


def build_estimator(name: str = "xgboost", **params: Any):
    """Build a non-neural estimator (today: an ``XGBoostClassifier``) with ``params`` over its defaults."""
    spec = get_spec(name)
    if spec.kind != "xgboost":
        raise ConfigError(f"{name} is a neural model; use build_model({name!r}, ...)")
    _check_options(name, params)
    return spec.builder(**params)
