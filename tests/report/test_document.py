"""The typed-document base (flowsplit.result.JsonDocument): a document declared in its
class line is written and read back, and a wrong file is one line naming it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from flowsplit.errors import InputError
from flowsplit.report.document import JsonDocument as Reexported
from flowsplit.result import JsonDocument, RunResult


@dataclass
class Note(JsonDocument, schema=2, file_name="note.json", what="a test note", root="note"):
    text: str
    tags: list[str] = field(default_factory=list)
    schema_version: int = 2


def test_a_document_declared_in_its_class_line_round_trips(tmp_path):
    # Prepare
    note = Note("hello", ["a"])
    # Execute: written into a folder under its file name, read back from the folder
    note.to_json(tmp_path / "note.json")
    back = Note.read(tmp_path)
    # Assert
    assert back == note
    assert json.loads((tmp_path / "note.json").read_text())["schema_version"] == 2
    assert (Note.SCHEMA_VERSION, Note.FILE_NAME, Note.ROOT) == (2, "note.json", "note")
    assert Reexported is JsonDocument  # the studies' import path still works


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "x", "schema_version": 1}', "schema version 1, this flowsplit reads version 2"),
        ('{"tags": [], "schema_version": 2}', "note lacks text"),
        ('{"text": 3, "schema_version": 2}', "note.text: int, not str"),
        ("[", "not valid JSON"),
    ],
)
def test_a_wrong_note_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "note.json"
    path.write_text(content)
    with pytest.raises(InputError) as err:
        Note.read(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and message in text


def test_a_run_result_reads_as_read_result_says(tmp_path):
    # A run folder without metrics.json: the run's own line, not the generic one.
    with pytest.raises(InputError, match="the run has not finished"):
        RunResult.read(tmp_path)
    (tmp_path / "metrics.json").write_text('{"kind": "train"}')
    with pytest.raises(InputError) as err:
        RunResult.read(tmp_path)
    assert "\n" not in str(err.value) and "not a flowsplit run result" in str(err.value)
