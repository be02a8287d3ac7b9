"""A tiny grid for sweep tests: 2 tiny datasets x 2 seeds, a tiny model, a few steps, one stack."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

TINY_GRID = """
seeds = [0, 1]
epochs = 1
replicates = 4
eval_limit = 40
analyses = {analyses}

[recipe]
batch_size = {batch_size}
max_steps = {max_steps}
checkpoint_every = {checkpoint_every}
log_every = 2
val_limit = 16
device = "cpu"

[model]
d_model = 32
n_heads = 4
d_mlp = 64
n_encoder_layers = 2
n_decoder_layers = 2

[datasets.tiny]
n_alphabets = 4
window_lengths = {windows}
n_reshuffle = {reshuffle}
n_new_alphabets = 4

[datasets.tiny-nocopy]
n_alphabets = 4
copy = false
window_lengths = {windows}
n_reshuffle = {reshuffle}
n_new_alphabets = 4

[[cells]]
presets = ["tiny", "tiny-nocopy"]
batching = ["random"]
"""


def write_tiny_grid(
    path: Path,
    max_steps: int = 6,
    analyses: tuple[str, ...] = (),
    batch_size: int = 8,
    checkpoint_every: int = 2,
    small: bool = False,
) -> Path:
    """Write the tiny grid to ``path`` and return it. ``small``: windows of 3 letters only, one reshuffle (1,804
    train rows per dataset instead of 7,200), for tests that train whole epochs."""
    options = {"max_steps": max_steps, "batch_size": batch_size, "checkpoint_every": checkpoint_every}
    data = {"windows": "[3]", "reshuffle": 1} if small else {"windows": "[3, 4]", "reshuffle": 2}
    path.write_text(TINY_GRID.format(analyses=json.dumps(list(analyses)), **options, **data))
    return path


def model_weights(out: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every final model of the sweep in ``out``, by run name."""
    weights = {}
    for config in sorted(out.glob("stacks/*/replicate-*/model/config.json")):
        name = json.loads(config.read_text())["metadata"]["run"]
        weights[name] = load_file(config.parent / "model.safetensors")
    return weights


def evaluations(out: Path) -> dict[str, dict]:
    """Every run's evaluation.json without its timing, by model name."""
    found = {}
    for path in sorted(out.glob("stacks/*/replicate-*/model/evaluation.json")):
        data = json.loads(path.read_text())
        data.pop("seconds")
        found[data["model"]] = data
    return found


def same_weights(a: dict[str, dict[str, torch.Tensor]], b: dict[str, dict[str, torch.Tensor]]) -> bool:
    """Whether two sweeps left the same runs with bit-identical weights."""
    return a.keys() == b.keys() and all(
        a[run].keys() == b[run].keys() and all(torch.equal(a[run][k], b[run][k]) for k in a[run]) for run in a
    )
