"""Old name of :mod:`flowsplit.federated.system.partition`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import partition as _moved

warnings.warn(
    "flowsplit.federated.partition moved to flowsplit.federated.system.partition",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
