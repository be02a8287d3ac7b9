"""Helpers shared by test modules."""

from __future__ import annotations

import pytest

from lsa_interp import cli


def run(args: list[str], capsys) -> tuple[int, str, str]:
    """Run ``lsa-interp ARGS`` in-process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err
