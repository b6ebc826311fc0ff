"""Old name of :mod:`flowsplit.federated.system.topology`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import topology as _moved

warnings.warn(
    "flowsplit.federated.topology moved to flowsplit.federated.system.topology",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
