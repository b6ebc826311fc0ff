"""The documentation stays true: the example page runs, the README stays short and
points to the two make targets, and the CLI reference covers every command."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "demo" / "captures"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def test_the_example_page_runs_as_written(tmp_path, monkeypatch, capsys):
    # Prepare: the page's blocks, run in order in one namespace, in a scratch directory.
    blocks = _python_blocks(ROOT / "docs" / "example.md")
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace = {"CAPTURES": str(CAPTURES)}
    # Execute
    for block in blocks:
        exec(compile(block, "docs/example.md", "exec"), namespace)  # noqa: S102 - our own page
    printed = capsys.readouterr().out
    # Assert: what the page shows was computed (the report, the split run's summary).
    assert "confusion matrix" in printed and "test flows misclassified" in printed
    assert namespace["sfl"].kind == "sfl" and len(namespace["sfl"].rounds) == 1
    assert (tmp_path / "ex" / "hsfl" / "weights.safetensors").is_file()


def test_readme_is_a_short_first_read():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text
    assert ".venv/bin/flowsplit" in text and "source .venv/bin/activate" in text
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def test_cli_reference_has_every_command():
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py"
    )
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.on_page_markdown("x\n" + hook.MARKER + "\ny", None, None, None)
    for command in ("prepare", "train", "evaluate", "predict", "compare", "sfl run", "sfl plan"):
        assert f"`flowsplit {command}`" in page
    assert "--predictions" in page and hook.MARKER not in page


def test_every_command_help_ends_with_an_example():
    import argparse

    from flowsplit.cli import build_parser

    def walk(parser, path):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}")

    for path, parser in walk(build_parser(), "flowsplit"):
        text = parser.format_help()
        assert "\nexamples:\n  flowsplit" in text or "\nexamples:\n  PYTHONPATH" in text, path
