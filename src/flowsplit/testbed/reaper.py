"""``python -m flowsplit.testbed.reaper TAG OWNER_PID``: remove testbed TAG when its owner ends.

Started (in a session of its own) by every :class:`~flowsplit.testbed.bed.Testbed`, so
that a controller killed by SIGKILL, which can run no clean-up of its own, still
leaves nothing behind. A controller that closes its testbed ends the reaper itself.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from flowsplit.testbed.system import alive, remove_instance


def wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        while alive(pid):
            time.sleep(0.2)
        return
    select.select([fd], [], [])  # readable once the process has exited
    os.close(fd)


def main(argv: list[str]) -> int:
    tag, owner = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wait_for_exit(owner)
    remove_instance(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
