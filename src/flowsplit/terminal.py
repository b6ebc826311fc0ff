"""Whether output goes to a person at a terminal (progress bars) or to a file (plain lines).

Progress bars redraw themselves with ``\\r`` and cursor codes: on a terminal that is
a bar, in a redirected log or a CI transcript it is noise. Every command shows a bar
only when :func:`on_terminal` says so and otherwise relies on its plain log lines
(one per epoch, round or run).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


def on_terminal(stream: TextIO | None = None) -> bool:
    """True when ``stream`` (default: stderr, where the bars go) is an interactive terminal.

    ``FLOWSPLIT_PROGRESS=1`` forces bars on and ``=0`` off (a terminal-like pipe, tests).
    """
    forced = os.environ.get("FLOWSPLIT_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
