"""The data-parallel study (``flowsplit compare``): centralised against DDP and XGBoost
on Dask; its typed result is :class:`~flowsplit.experiments.dp.result.CompareResult`."""
