"""flowsplit: train traffic classifiers centralised, data-parallel or split across tiers."""

__version__ = "0.1.0"
