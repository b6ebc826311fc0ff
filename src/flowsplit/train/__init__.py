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
