"""CLI command ``explore``: the live explorer, a local Dash app (`lsa_interp.explorer`).

Dash and torch are imported inside the command, so ``--help`` stays fast.
"""

from __future__ import annotations

import socket
from typing import Annotated

import typer


def check_address(host: str, port: int) -> None:
    """Raise ValueError (exit 2) unless a server can listen on ``host``:``port``, tried before any work by
    binding a socket there as the server will (werkzeug's own failure exits 1 with a bare line)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        address = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as err:
        message = f"cannot listen on --host {host!r} --port {port}: {err.strerror or err}"
        raise ValueError(f"{message}; give an address of this machine and a free port") from None


def app_url(host: str, port: int) -> str:
    """The app's address for a browser: an IPv6 host in brackets (``http://[::1]:8050/``)."""
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


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

        check_address(host, port)
        catalogue = explorer_catalogue(model or [])
        print(f"lsa-interp explorer: {app_url(host, port)}  ({len(catalogue.names)} models; Ctrl-C stops)", flush=True)
        serve(catalogue, host=host, port=port)
