"""``python -m flowsplit.testbed.reaper TAG OWNER_PID``: remove testbed TAG when its owner ends.

Started (in a session of its own) by every :class:`~flowsplit.testbed.bed.Testbed`, so
that a controller killed by SIGKILL, which can run no clean-up of its own, still
leaves nothing behind. A controller that closes its testbed ends the reaper itself.
"""

from __future__ import annotations

import signal
import sys

from flowsplit.testbed.system import remove_instance
from flowsplit.util import wait_for_exit


def main(argv: list[str]) -> int:
    tag, owner = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wait_for_exit(owner)
    remove_instance(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
