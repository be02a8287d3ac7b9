"""The model of a training run as of its last saved state: look at a run before it has finished.

A run saves ``state.pt`` at every epoch end, every ``--checkpoint-every`` steps and when it stops
(`lsa_interp.training.run_dir`). `run_snapshot` builds the model from it, without the data or the optimizer, and
gives it the training metadata a finished run's model carries (preset, seed, data seed, batching, the run's
config, steps and epochs so far) plus ``snapshot: True``, so that evaluation and every analysis take it as they
take a shipped checkpoint. A run on the plain `nn.Transformer` (``--architecture reference``) is converted to the
hook-point model.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from lsa_interp.data.dataset import read_manifest
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, load_model
from lsa_interp.model.convert import hooked_from_reference
from lsa_interp.model.reference import ReferenceTransformer
from lsa_interp.training.config import TrainConfig
from lsa_interp.training.run_dir import CONFIG_FILE, METRICS_FILE, STATE_FILE, read_config
from lsa_interp.training.run_state import read_state
from lsa_interp.training.stack_config import StackConfig
from lsa_interp.training.stack_trainer import STACK_KEY, run_train_config
from lsa_interp.training.stacked_model import StackedEncoderDecoder


def is_training_run(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a training run directory (it holds ``train_config.json``)."""
    return (Path(path) / CONFIG_FILE).is_file()


def _epochs(run_dir: Path, state: dict[str, Any], run: str | None, planned: int) -> float | None:
    """Epochs trained at the state's step, from the records written before it (None before the first): a single
    run's step records carry its epoch; a stack's replicate ``run`` has its steps per epoch in its first epoch
    record (it ends its training at its ``planned`` epochs)."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        records = [json.loads(line) for line in handle.read(state["metrics_offset"]).decode().splitlines() if line]
    if run is None:
        steps = [r for r in records if r.get("type") == "step" and r.get("step")]
        return state["step"] * steps[-1]["epoch"] / steps[-1]["step"] if steps else None
    first = next((r for r in records if r.get("type") == "epoch" and r.get("run") == run), None)
    return min(float(planned), state["step"] * first["epoch"] / first["step"]) if first else None


def run_snapshot(
    run_dir: str | os.PathLike, replicate: int = 0, device: torch.device | str = "cpu"
) -> HookedEncoderDecoder:
    """The model of ``run_dir`` at its last saved state, in eval mode; ``replicate`` picks a stack's run.

    Raises FileNotFoundError when ``run_dir`` is no training run or has saved no state yet, ValueError for a
    replicate the run does not have.
    """
    run_dir = Path(run_dir)
    if not is_training_run(run_dir):
        raise FileNotFoundError(f"{run_dir} is not a training run (no {CONFIG_FILE})")
    state = read_state(run_dir)
    if state is None:
        raise FileNotFoundError(f"{run_dir} has saved no state yet (no {STATE_FILE}); wait for its first save")
    data = read_config(run_dir)
    if data.pop(STACK_KEY, False):
        stack_config = StackConfig.from_dict(data)
        if not 0 <= replicate < len(stack_config.runs):
            raise ValueError(f"replicate {replicate} out of range: the stack has {len(stack_config.runs)} runs")
        stack = StackedEncoderDecoder(ModelConfig(**stack_config.model), len(stack_config.runs))
        with torch.no_grad():
            stack.flat.copy_(state["flat"])
        model, spec = stack.replicate_model(replicate), stack_config.runs[replicate]
        config, run_name = run_train_config(stack_config, spec), spec.name
    else:
        config, run_name = TrainConfig.from_dict(data), None
        if replicate != 0:
            raise ValueError(f"replicate {replicate} out of range: {run_dir} trained one model (replicate 0)")
        cfg = ModelConfig(**config.model)
        if config.architecture == "reference":
            reference = ReferenceTransformer(cfg)
            reference.load_state_dict(state["model"])
            model = hooked_from_reference(reference)
        else:
            model = HookedEncoderDecoder(cfg)
            model.load_state_dict(state["model"])
    manifest = read_manifest(config.data_dir) if Path(config.data_dir, "manifest.json").is_file() else {}
    model.metadata = {
        "preset": config.preset or manifest.get("preset"),
        "seed": config.seed,
        "data_seed": manifest.get("seed"),
        "batching": config.batching,
        "train_config": asdict(config),
        "steps": state["step"],
        "epochs_completed": _epochs(run_dir, state, run_name, config.epochs),
        "train_seconds": round(state["elapsed"], 1),
        "snapshot": True,
        **({"run": run_name} if run_name else {}),
    }
    return model.to(device).eval()


def load_run_or_model(name_or_path: str | os.PathLike, device: torch.device | str = "cpu") -> HookedEncoderDecoder:
    """`run_snapshot` for a training run directory or ``STACK_RUN/replicate-I`` (a stack's run), else
    `lsa_interp.model.load_model` (shipped names, checkpoint directories such as ``RUN/model``, reference files).
    Raises what those raise, and ValueError for the directory of a stack of several runs (which one is meant:
    it used to open replicate 0 without saying so)."""
    path = Path(name_or_path)
    index = path.name.removeprefix("replicate-")
    if index.isdigit() and is_training_run(path.parent):
        return run_snapshot(path.parent, int(index), device)
    if is_training_run(path):
        data = read_config(path)
        runs = len(StackConfig.from_dict(data).runs) if data.pop(STACK_KEY, False) else 1
        if runs > 1:
            raise ValueError(
                f"{path} is a stack of {runs} runs; open one of them as {path / 'replicate-I'} (I from 0 to {runs - 1})"
            )
        return run_snapshot(path, 0, device)
    return load_model(name_or_path, device)
