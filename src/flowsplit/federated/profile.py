"""Old name of :mod:`flowsplit.federated.system.profile`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import profile as _moved

warnings.warn(
    "flowsplit.federated.profile moved to flowsplit.federated.system.profile",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
