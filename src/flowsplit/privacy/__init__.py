"""What an honest-but-curious aggregator or server learns from what crosses a cut.

``flowsplit sfl privacy`` trains (or loads) a model, and for every legal cut
attacks the activations a client sends (inversion back to the payload bytes or
per-packet features, a label probe, distance correlation) and the gradients that
travel down (label inference), with and without defences (NoPeek, calibrated
noise, quantisation). The results are a plain JSON file; the planner reads it
through :mod:`flowsplit.planner.leakage` to keep plans under a leakage budget.

This package may import data, models, train, federated and planner.leakage (the
leakage file's reader); nothing below it imports it.
"""
