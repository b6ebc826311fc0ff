"""flowsplit.planner: accuracy-aware split and assignment planning for hierarchical SFL.

- :mod:`~flowsplit.planner.costs`: the engine's cost model per client and aggregator;
- :mod:`~flowsplit.planner.objective`: weights, references, the objective;
- :mod:`~flowsplit.planner.assign`: the delay-aware greedy and the local search;
- :mod:`~flowsplit.planner.exact`: the exact assignment (a MILP, SciPy's HiGHS) for small instances;
- :mod:`~flowsplit.planner.surrogate` and :mod:`~flowsplit.planner.pilots`: the
  accuracy surrogate fitted on short pilot runs;
- :mod:`~flowsplit.planner.plan`: :func:`plan_split` and the baselines' plans;
- :mod:`~flowsplit.planner.study`: the shared inputs of a plan (data, profile,
  topology, pilots) and :func:`plan_seed`;
- :mod:`~flowsplit.planner.commands`: ``flowsplit sfl plan``.

``flowsplit sfl compare``, which trains the plans and compares them, is an experiment:
:mod:`flowsplit.experiments.sfl.compare`. This package never imports
:mod:`flowsplit.experiments`, and :mod:`flowsplit.federated` never imports this one.
"""
