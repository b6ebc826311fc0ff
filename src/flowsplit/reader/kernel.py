"""The one door to the compiled kernel (``_kernel.pyx``, built by ``pip install``).

Every module of the reader that has a compiled fast path takes it from here, as
``from flowsplit.reader.kernel import compiled as _kernel``, and keeps its NumPy
fallback beside it for when ``compiled`` is None (a source checkout built without a C
compiler, or ``FLOWSPLIT_NO_KERNEL=1`` to compare both ways). The fallbacks compute the
same results, bit for bit (tests/data/test_kernel.py runs both on the same captures).
"""

from __future__ import annotations

import os

compiled = None
"""The compiled module, or None: the NumPy fallbacks run."""
if os.environ.get("FLOWSPLIT_NO_KERNEL", "") in ("", "0"):
    try:
        from flowsplit.reader import _kernel as compiled
    except ImportError:
        compiled = None


def available() -> bool:
    """Whether the compiled kernel is in use."""
    return compiled is not None
