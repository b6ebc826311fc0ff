"""Old name of :mod:`flowsplit.federated.system.presets`, kept for code written before the move."""

import sys
import warnings

from flowsplit.federated.system import presets as _moved

warnings.warn(
    "flowsplit.federated.presets moved to flowsplit.federated.system.presets",
    DeprecationWarning,
    stacklevel=2,
)
# The same module object under both names (so patching one patches the other).
sys.modules[__name__] = _moved
