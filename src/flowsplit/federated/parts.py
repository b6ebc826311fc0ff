"""Old name of :mod:`flowsplit.federated.system.parts`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import parts as _moved

warnings.warn(
    "flowsplit.federated.parts moved to flowsplit.federated.system.parts",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
