"""Old name of :mod:`flowsplit.federated.system.aggregate`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import aggregate as _moved

warnings.warn(
    "flowsplit.federated.aggregate moved to flowsplit.federated.system.aggregate",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
