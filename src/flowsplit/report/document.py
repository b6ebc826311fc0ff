"""What every typed study document shares: a schema version, strict JSON out, a reader.

:class:`JsonDocument` is mixed into the studies' result dataclasses
(:class:`~flowsplit.experiments.dp.result.CompareResult`,
:class:`~flowsplit.experiments.sfl.result.SFLCompareResult`,
:class:`~flowsplit.privacy.result.PrivacyResult`): :meth:`~JsonDocument.to_json` writes
strict JSON atomically, :meth:`~JsonDocument.read` reads a file (or a study folder)
back, checked field by field (:func:`flowsplit.util.typed_from_dict`), and raises one
:class:`~flowsplit.errors.InputError` line naming the file when it is not one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Self

from flowsplit.errors import InputError
from flowsplit.outputs import atomic_write_text
from flowsplit.util import jsonable, read_json_document, typed_from_dict


class JsonDocument:
    """Mixin of a dataclass that is a study's JSON document."""

    SCHEMA_VERSION: ClassVar[int] = 1
    """The version this flowsplit writes and reads (a file without one is version 1)."""
    READS_VERSIONS: ClassVar[tuple[int, ...]] = ()
    """Older versions still read: their files lack only fields that have defaults."""
    FILE_NAME: ClassVar[str]
    """The file's name in a study folder (``results.json``, ``privacy.json``)."""
    WHAT: ClassVar[str]
    """What a good file is, for the error line (``a `flowsplit compare` result``)."""
    ROOT: ClassVar[str] = "results"
    """How error messages name the document's top level."""

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)

    def to_json(self, path: str | Path | None = None) -> str:
        """The document as strict JSON text; also written (atomically) to ``path``."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Check what makes ``data`` this kind of document (:class:`ValueError` if it is
        not) and return it as the fields read it; subclasses override."""
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse a document; :class:`ValueError` naming the first wrong field."""
        if isinstance(data, dict):
            version = data.get("schema_version", 1)
            if version != cls.SCHEMA_VERSION and version not in cls.READS_VERSIONS:
                readable = ", ".join(map(str, sorted({*cls.READS_VERSIONS, cls.SCHEMA_VERSION})))
                raise ValueError(
                    f"schema version {version!r}, this flowsplit reads version {readable}"
                )
            data = cls.prepare(data)
        return typed_from_dict(cls, data, cls.ROOT)

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """The document of a study folder, or of the file ``path``.

        Raises :class:`~flowsplit.errors.InputError` (one line, naming the file) when
        the file is missing, not JSON, of another schema version or not this document.
        """
        path = Path(path)
        if path.is_dir():
            path = path / cls.FILE_NAME
        try:
            return cls.from_dict(read_json_document(path, cls.WHAT))
        except (ValueError, TypeError) as exc:
            raise InputError(path, f"not {cls.WHAT}: {exc}") from None
