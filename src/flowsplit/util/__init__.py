"""Small helpers every layer may use (the ground floor: imports nothing of flowsplit).

- :mod:`flowsplit.util.system`: :func:`available_cores`, :func:`available_memory`,
  :func:`peak_rss_mb`,
  :func:`die_with_parent`, :func:`free_port`, :func:`stop_signals`, :func:`pid_alive`,
  :func:`wait_for_exit`;
- :mod:`flowsplit.util.jsondoc`: :func:`jsonable` (strict JSON out) and the typed
  documents' reading (:func:`typed_from_dict`, :func:`typed_to_dict`,
  :func:`read_json_document`).
"""

from flowsplit.util.jsondoc import (
    jsonable,
    read_json_document,
    read_text_document,
    typed_from_dict,
    typed_to_dict,
)
from flowsplit.util.system import (
    available_cores,
    available_memory,
    die_with_parent,
    exit_without_finalising,
    free_port,
    peak_rss_mb,
    pid_alive,
    stop_signals,
    wait_for_exit,
)

__all__ = [
    "available_cores",
    "available_memory",
    "die_with_parent",
    "exit_without_finalising",
    "free_port",
    "jsonable",
    "peak_rss_mb",
    "pid_alive",
    "stop_signals",
    "read_json_document",
    "read_text_document",
    "typed_from_dict",
    "typed_to_dict",
    "wait_for_exit",
]
