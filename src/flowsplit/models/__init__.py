"""Models: CNN, LSTM, ConvLSTM, ConvGRU as block lists (``BlockModel``), XGBoost, registry.

Use :func:`flowsplit.models.registry.build_model` for the neural models and
:func:`~flowsplit.models.registry.build_estimator` for XGBoost.
"""
