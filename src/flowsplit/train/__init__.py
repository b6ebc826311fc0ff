"""Training engines: centralised, data-parallel (PyTorch DDP) and distributed XGBoost.

- ``config``: :class:`TrainConfig`, validated once and saved with every run;
- ``distributed``: the environment (:func:`read_dist_env`), :class:`ParallelLayout`,
  the process group context manager, :func:`apply_ddp` and the all-reduce meter;
- ``loop``: the training loop every worker runs (``train_worker``);
- ``launch``: N local worker processes, as torchrun would start them;
- ``xgb_engine``: XGBoost in one process or on a Dask cluster, round timings,
  estimated synchronisation;
- ``result``: :class:`RunResult`, the one schema of ``RUN/metrics.json``;
- ``runs``/``checkpoint``: the run directory, trained models, atomic checkpoints;
- ``commands``: ``flowsplit train``, ``evaluate``, ``predict``; ``__main__``: the
  torchrun entry point ``python -m flowsplit.train``.
"""

import sys
import types


def run(config=None, /, *, overwrite: bool = False, **fields):
    """Train one model from a :class:`~flowsplit.train.config.TrainConfig` (or its fields as
    keywords) and return its :class:`~flowsplit.result.RunResult`: the Python API's
    ``flowsplit.train(...)``, the same checks and files as ``flowsplit train``."""
    from pathlib import Path

    from flowsplit.train.commands import train_run
    from flowsplit.train.config import TrainConfig

    if config is not None and not isinstance(config, TrainConfig):
        from flowsplit.errors import ConfigError

        raise ConfigError(f"config: give a TrainConfig, not {type(config).__name__}")
    if config is None:
        # Paths as the config's text; anything else (None) is left to its type check,
        # not made a folder called "None".
        if isinstance(fields.get("dataset"), str | Path) and str(fields["dataset"]).strip():
            fields["dataset"] = str(Path(fields["dataset"]).resolve())
        fields = {k: str(v) if isinstance(v, Path) else v for k, v in fields.items()}
        config = TrainConfig.from_dict({"quiet": True, **fields})
    elif fields:
        config = TrainConfig.from_dict({**config.to_dict(), **fields})
    return train_run(config, resume=False, overwrite=overwrite)


class _CallablePackage(types.ModuleType):
    """``flowsplit.train`` is this package and, called, the API's ``train``: once the
    package is imported, Python binds the name ``flowsplit.train`` to it, so the
    function ``fs.train(...)`` must be the package itself."""

    def __call__(self, config=None, /, *, overwrite: bool = False, **fields):
        return run(config, overwrite=overwrite, **fields)


sys.modules[__name__].__class__ = _CallablePackage
