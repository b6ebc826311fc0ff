"""The CLI's shared behaviour: one-line errors, --debug anywhere, the demo's --fresh."""

from __future__ import annotations

import pytest

from flowsplit.cli import main
from flowsplit.errors import InputError


def test_errors_are_one_line_and_debug_works_after_the_sub_command(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["inspect", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flowsplit: error: {missing}")
    with pytest.raises(InputError):  # --debug shows the exception, wherever it is given
        main(["inspect", str(missing), "--debug"])
    with pytest.raises(InputError):
        main(["--debug", "inspect", str(missing)])


def test_demo_fresh_refuses_a_directory_that_is_not_a_demo(tmp_path, capsys):
    (tmp_path / "thesis.tex").write_text("precious")
    rc = main(["demo", "-o", str(tmp_path), "--fresh", "--quiet"])
    assert rc == 2 and "--fresh deletes only a demo directory" in capsys.readouterr().err
    assert (tmp_path / "thesis.tex").read_text() == "precious"
