"""Old name of :mod:`flowsplit.federated.system.protocol`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import protocol as _moved

warnings.warn(
    "flowsplit.federated.protocol moved to flowsplit.federated.system.protocol",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
