"""Every notebook in analyses/ runs top to bottom without an error (executed headless with nbclient).

The notebooks load the shipped checkpoints by name (``load_model("copy-200")``), so a notebook is skipped
while a checkpoint that it names is missing from ``checkpoints/``; the skip reason names the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, available_models

ANALYSES = Path(__file__).resolve().parent.parent / "analyses"
NOTEBOOKS = sorted(ANALYSES.glob("*.ipynb"))
CELL_TIMEOUT = 300
"""Seconds one cell may run (the slowest cell, notebook 01's evaluation, takes about 45 s on 2 cores)."""
_CHECKPOINT_NAME = re.compile(r"""["']((?:no)?copy-\d+(?:-\dshot)?)["']""")
"""A quoted shipped checkpoint name in a code cell, e.g. ``"copy-200"`` (the notebooks name models this way)."""


def checkpoints_named(path: Path) -> set[str]:
    """The checkpoint names quoted in the code cells of the notebook at ``path``."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return {name for source in code for name in _CHECKPOINT_NAME.findall(source)}


def _missing_reason(path: Path) -> str | None:
    missing = sorted(checkpoints_named(path) - set(available_models()))
    return f"checkpoint(s) missing from {CHECKPOINTS_DIR}: {', '.join(missing)}" if missing else None


def _notebook_param(path: Path) -> object:
    reason = _missing_reason(path)
    marks = [pytest.mark.skip(reason=reason)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_every_notebook_names_a_checkpoint():
    assert NOTEBOOKS, f"no notebooks in {ANALYSES}"
    assert all(checkpoints_named(path) for path in NOTEBOOKS)


@pytest.mark.slow
@pytest.mark.parametrize("path", [_notebook_param(p) for p in NOTEBOOKS])
def test_notebook_runs(path: Path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(ANALYSES)}}
    )
    # One torch thread per kernel unless set: the suite runs two workers on two cores.
    client.execute(env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    errors = [output for cell in notebook.cells for output in cell.get("outputs", []) if output.output_type == "error"]
    assert not errors, f"{path.name}: {errors[0].ename}: {errors[0].evalue}"
