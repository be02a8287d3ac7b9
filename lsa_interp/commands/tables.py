"""Rich tables printed whole: at a terminal as wide as the terminal, piped or redirected as wide as the tables."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

TERMINAL_MIN_WIDTH = 120
"""Tables are laid out at least this wide at a terminal (rich cuts a cell that does not fit with '…')."""


def table_console(tables: Sequence[Table], minimum: int = TERMINAL_MIN_WIDTH) -> Console:
    """A Console on stdout for printing ``tables``: at a terminal as wide as the terminal, at least ``minimum``;
    piped or redirected, as wide as the widest table needs (at least ``minimum``), so that no cell is cut."""
    if Console().is_terminal:
        return Console(width=max(shutil.get_terminal_size().columns, minimum))
    probe = Console(width=1_000_000)
    need = max((Measurement.get(probe, probe.options, table).maximum for table in tables), default=0)
    return Console(width=max(need, minimum))
