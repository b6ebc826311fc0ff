"""Reading a file the user gave (or an earlier command wrote): its text or its JSON, with
one-line :class:`~flowsplit.errors.InputError` naming the file when it is missing, a
folder, not UTF-8 text or not JSON (:mod:`flowsplit.util.jsondoc` says which). The
counterpart of :mod:`flowsplit.outputs`; what the content must hold is the reader's
business."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowsplit.errors import InputError
from flowsplit.util import read_json_document, read_text_document


def read_text_input(path: str | Path, missing: str = "no such file") -> str:
    """The text of ``path``; ``missing``: what to say when there is no file."""
    try:
        return read_text_document(Path(path), missing)
    except ValueError as exc:
        raise InputError(path, str(exc)) from None


def read_json_input(path: str | Path, missing: str = "no such file") -> Any:
    """The JSON content of ``path``; ``missing``: what to say when there is no file."""
    try:
        return read_json_document(Path(path), missing)
    except ValueError as exc:
        raise InputError(path, str(exc)) from None
