"""Imported only by the fork server of :func:`~flowsplit.federated.dist.launch_roles`
(its preload list): the fork server ends with its launcher, at once.

The fork server has torch (and sympy, through torch.fx) loaded; when the launcher
ends, it would tear its interpreter down like any other, which takes seconds of CPU,
and on a loaded machine it was still running 10 s after the launcher had gone (an
orphan in the fault suite). Asked to be SIGKILLed when its parent ends, it leaves with
the launcher, however the launcher ends; the roles it forked have ended by then (or
end with it: each asks the same of the fork server). The request is not inherited by
the roles it forks.
"""

from __future__ import annotations

import signal

from flowsplit.util import die_with_parent

die_with_parent(signal.SIGKILL)
