"""The split-learning study (``flowsplit sfl compare``): SFL, HSFL and the planner's
schemes on one topology; its typed result is
:class:`~flowsplit.experiments.sfl.result.SFLCompareResult`."""
