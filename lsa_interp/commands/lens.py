"""CLI commands: (filled in by the analysis issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this group's commands to ``app``."""
