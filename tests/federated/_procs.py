"""Finding a test's own processes (by a tag in their environment) and waiting on them."""

from __future__ import annotations

import time
from pathlib import Path

TAG = "FLOWSPLIT_TEST_TAG"
"""The environment variable a test sets on what it launches; children inherit it."""


def tagged(tag: str) -> list[int]:
    """Live (not zombie) processes whose environment carries ``TAG=tag``."""
    needle = f"{TAG}={tag}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle not in (d / "environ").read_bytes().split(b"\0"):
                continue
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def wait_for(pred, timeout: float, step: float = 0.05) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` seconds pass; its last answer."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
