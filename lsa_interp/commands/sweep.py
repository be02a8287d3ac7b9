"""CLI command ``sweep``: train, evaluate and analyse a grid of runs (a TOML grid file), in-process or on Ray.
The sweep library is imported inside the command, so ``--help`` stays fast."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command to ``app``."""

    @app.command(
        "sweep",
        epilog="Example: lsa-interp sweep grids/tiny.toml --out runs/tiny-sweep\n\n"
        "On a Ray cluster, 10 minutes per call: lsa-interp sweep grids/paper.toml --out runs/paper --ray auto "
        "--max-minutes 10",
    )
    def sweep(
        grid: Annotated[Path, typer.Argument(help="A grid file (TOML; see grids/paper.toml and docs/sweeps.md).")],
        out: Annotated[Path, typer.Option(help="Sweep directory: datasets, stacks, models, evaluations, results.csv.")],
        ray: Annotated[
            str | None,
            typer.Option(
                help="Run the stacks as Ray tasks: 'auto' (the running cluster, else a local instance) or a "
                "cluster address. Default: in this process."
            ),
        ] = None,
        max_minutes: Annotated[
            float | None,
            typer.Option(min=0.0, help="Start no new work after this many minutes (default: the grid's, else none)."),
        ] = None,
    ) -> None:
        """Train every run of a grid (packed into stacks), evaluate and analyse each finished model, and collect
        OUT/results.csv. Idempotent: run it again to skip finished runs and resume interrupted stacks.

        A unit of work that fails (a stack, an evaluation, an analysis) is listed at the end, its traceback in
        OUT/failures/, and the others go on; the exit code is then 1 (130 after Ctrl-C, the state saved)."""
        from lsa_interp.commands.common import writable_out
        from lsa_interp.sweep.runner import run_sweep

        writable_out(out)
        try:
            summary = run_sweep(grid, out, ray=ray, max_minutes=max_minutes)
        except KeyboardInterrupt as stop:  # Ctrl-C, or a signal the training loop caught and saved its state on
            signum = getattr(stop, "signum", signal.SIGINT)
            name = signal.Signals(signum).name
            print(f"{out}: stopped by {name}; run the same command again to continue", file=sys.stderr)
            raise typer.Exit(128 + signum) from None
        where = f"; table: {summary.results}" if summary.results else ""
        rest = "" if summary.complete else "; run the same command again to continue"
        print(f"{out}: {summary.finished}/{summary.runs} runs finished{where}{rest}")
        for failure in summary.failures:
            print(f"lsa-interp: failed: {failure}", file=sys.stderr)
        if summary.failures:
            raise typer.Exit(1)
