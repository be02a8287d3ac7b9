"""docs/cli.md is generated from the commands and kept current; every command documents an example."""

from __future__ import annotations

from pathlib import Path

import typer

from lsa_interp.cli import app
from lsa_interp.cli_reference import _walk, main, render_cli_reference

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_every_command_has_an_example_and_appears_in_the_reference():
    text = render_cli_reference()
    commands = _walk(typer.main.get_command(app), [])
    assert len(commands) >= 10
    for path, command in commands:
        assert command.epilog and "Example: lsa-interp " + " ".join(path) in command.epilog, path
        assert f"## `lsa-interp {' '.join(path)}`" in text


def test_docs_cli_md_is_up_to_date():
    assert DOC.read_text() == render_cli_reference(), (
        "regenerate with: python -m lsa_interp.cli_reference --out docs/cli.md"
    )


def test_main_writes_the_file(tmp_path, capsys):
    main(["--out", str(tmp_path / "cli.md")])
    main([])
    assert (tmp_path / "cli.md").read_text() == capsys.readouterr().out
