"""flowsplit.planner: accuracy-aware split and assignment planning for hierarchical SFL.

- :mod:`~flowsplit.planner.costs`: the engine's cost model per client and aggregator;
- :mod:`~flowsplit.planner.objective`: weights, references, the objective;
- :mod:`~flowsplit.planner.assign`: the delay-aware greedy and the local search;
- :mod:`~flowsplit.planner.exact`: the exact assignment (CP-SAT) for small instances;
- :mod:`~flowsplit.planner.surrogate` and :mod:`~flowsplit.planner.pilots`: the
  accuracy surrogate fitted on short pilot runs;
- :mod:`~flowsplit.planner.plan`: :func:`plan_split` and the baselines' plans;
- :mod:`~flowsplit.planner.compare`: ``flowsplit sfl compare`` (run_sfl_compare).
"""
