"""CLI command ``explore``: the live explorer, a local Dash app (`lsa_interp.explorer`).

Dash and torch are imported inside the command, so ``--help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the ``explore`` command to ``app``."""

    @app.command(
        "explore",
        help="Start the live explorer in the browser: pick a model and a task (typed or drawn from the test sets), "
        "see its attention, hidden states and decoder lens, ablate cells or heads, patch attention patterns from "
        "a second task and watch the answer change. The whole view is in the URL. Prints the address; Ctrl-C stops.",
        epilog="Example: lsa-interp explore --model copy-200 --port 8050\n\n"
        "With a training run: lsa-interp explore --model runs/copy-200",
    )
    def explore(
        model: Annotated[
            list[str] | None,
            typer.Option(
                help="A shipped checkpoint name, a checkpoint directory or a run directory (repeatable); listed first. "
                "The shipped checkpoints and checkpoints/replicates/* are always offered."
            ),
        ] = None,
        port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8050,
        host: Annotated[
            str, typer.Option(help="Address to listen on; 127.0.0.1 keeps the app on this machine.")
        ] = "127.0.0.1",
    ) -> None:
        """Serve the live explorer."""
        from lsa_interp.explorer import explorer_catalogue, serve

        catalogue = explorer_catalogue(model or [])
        print(f"lsa-interp explorer: http://{host}:{port}/  ({len(catalogue.names)} models; Ctrl-C stops)", flush=True)
        serve(catalogue, host=host, port=port)
