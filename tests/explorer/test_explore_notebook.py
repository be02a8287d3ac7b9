"""`explore(model)` in a real Jupyter kernel (nbclient): the app is shown inline and serves the model."""

from __future__ import annotations

import os
import socket

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_explore_in_a_notebook_shows_the_app_inline_and_serves_the_notebook_model():
    import nbformat
    from nbclient import NotebookClient

    port = _free_port()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "from lsa_interp import load_model\n"
            "from lsa_interp.explorer import explore\n"
            f"app = explore(load_model('copy-20'), port={port})"
        ),
        nbformat.v4.new_code_cell(
            "import urllib.request\n"
            f"layout = urllib.request.urlopen('http://127.0.0.1:{port}/_dash-layout', timeout=60).read().decode()\n"
            "print('picker offers the notebook model:', 'notebook model' in layout)"
        ),
    ]
    NotebookClient(notebook, timeout=180, kernel_name="python3").execute(
        env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    )
    shown = [out["data"]["text/html"] for out in notebook.cells[0].outputs if out["output_type"] == "display_data"]
    assert len(shown) == 1 and f'src="http://127.0.0.1:{port}/"' in shown[0] and "<iframe" in shown[0]
    printed = "".join(out.get("text", "") for out in notebook.cells[1].outputs if out["output_type"] == "stream")
    assert "picker offers the notebook model: True" in printed
