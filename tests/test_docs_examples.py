"""The Python examples of the README and docs/ run as written, each document's blocks in order.

Each document runs in its own interpreter (an example may change a model's state), in an empty working
directory, so that the files an example writes (runs/view.html, data/copy-200, ...) are checked and thrown
away. The one example that trains (docs/training.md: two 20-epoch runs) gets its datasets made first and
its `StackTrainer.run` replaced by a line saying what it would train; everything before `run()` is real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DOCS_WITH_EXAMPLES = sorted(
    path.relative_to(ROOT).as_posix()
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    if PYTHON_BLOCK.search(path.read_text(encoding="utf-8"))
)
DATASETS_FIRST = {"docs/training.md": ("copy-20", "nocopy-20")}
"""Datasets an example reads from data/PRESET, made (seed 0) before it runs."""
WRITES = {
    "README.md": ["runs/view.html"],
    "docs/data.md": ["data/copy-200/manifest.json"],
    "docs/getting-started.md": ["runs/patching"],
    "docs/training.md": ["runs/mixed/train_config.json"],
}
"""What each document's examples leave in the working directory."""


def python_blocks(doc: str) -> list[str]:
    """The ```python blocks of a document, in order."""
    return PYTHON_BLOCK.findall((ROOT / doc).read_text(encoding="utf-8"))


def run_examples(doc: str) -> None:
    """Run a document's Python blocks in one namespace, in the working directory (called in a subprocess)."""
    if doc in DATASETS_FIRST:
        from lsa_interp.data import PRESETS, generate_dataset, save_dataset
        from lsa_interp.training import StackTrainer

        for preset in DATASETS_FIRST[doc]:
            save_dataset(generate_dataset(PRESETS[preset], seed=0), f"data/{preset}")
        StackTrainer.run = lambda self: print(f"not trained here: a stack of {len(self.config.runs)} runs")
    namespace: dict = {"__name__": "__docs__"}
    for index, block in enumerate(python_blocks(doc)):
        exec(compile(block, f"{doc}, python block {index + 1}", "exec"), namespace)


def test_the_documents_with_examples_are_found():
    assert {"README.md", "docs/concepts.md", "docs/training.md", "docs/matching_and_patching.md"} <= set(
        DOCS_WITH_EXAMPLES
    )
    assert len(python_blocks("README.md")) == 2 and "load_model" in python_blocks("README.md")[1]


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS_WITH_EXAMPLES)
def test_the_examples_run(doc, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    code = f"from tests.test_docs_examples import run_examples; run_examples({doc!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for written in WRITES.get(doc, []):
        assert (tmp_path / written).exists(), f"{doc}'s examples did not write {written}"
    if doc in DATASETS_FIRST:
        assert "not trained here: a stack of 2 runs" in done.stdout
