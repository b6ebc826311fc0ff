"""Old name of :mod:`flowsplit.federated.system.costs`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import costs as _moved

warnings.warn(
    "flowsplit.federated.costs moved to flowsplit.federated.system.costs",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
