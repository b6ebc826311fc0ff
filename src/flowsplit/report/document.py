"""What every typed study document shares: a schema version, strict JSON out, a reader.

:class:`JsonDocument` lives on the ground floor (:mod:`flowsplit.result`, beside the
run's :class:`~flowsplit.result.RunResult`, which is one too) and is mixed into the
studies' result dataclasses (:class:`~flowsplit.experiments.dp.result.CompareResult`,
:class:`~flowsplit.experiments.sfl.result.SFLCompareResult`,
:class:`~flowsplit.privacy.result.PrivacyResult`): :meth:`~JsonDocument.to_json` writes
strict JSON atomically, :meth:`~JsonDocument.read` reads a file (or a study folder)
back, checked field by field (:func:`flowsplit.util.typed_from_dict`), and raises one
:class:`~flowsplit.errors.InputError` line naming the file when it is not one.
"""

from __future__ import annotations

from flowsplit.result import JsonDocument

__all__ = ["JsonDocument"]
