"""The server's checkpoint of a distributed run: ``OUT/sfl-checkpoint.pt`` and reading it back."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from flowsplit.errors import InputError
from flowsplit.federated.config import SFLConfig

log = logging.getLogger("flowsplit.federated")


CHECKPOINT_NAME = "sfl-checkpoint.pt"
"""``OUT/sfl-checkpoint.pt``: the server's state after its last finished round."""


def plain(o: Any) -> Any:
    """JSON for numpy scalars and arrays in round records."""
    return o.tolist() if hasattr(o, "tolist") else str(o)


def read_checkpoint(out_dir: str | Path, config: SFLConfig) -> dict[str, Any]:
    """``OUT/sfl-checkpoint.pt`` (tensors only), checked to be ``config``'s run."""
    path = Path(out_dir) / CHECKPOINT_NAME
    if not path.is_file():
        raise InputError(path, "no SFL checkpoint to resume from (no round of the run finished)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user problem
        raise InputError(path, f"unreadable checkpoint ({type(exc).__name__})") from None
    try:
        theirs = json.loads(state["config"])
    except (KeyError, TypeError, ValueError):  # a tensor file, but no SFL checkpoint
        raise InputError(path, "is not an SFL checkpoint (it holds no run configuration)") from None
    ours = json.loads(json.dumps(config.to_dict(), sort_keys=True))
    differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    if differ:
        raise InputError(
            path, f"written by a run with other {', '.join(differ)}; resume with its options"
        )
    return state
