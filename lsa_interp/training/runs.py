"""Start or resume a training run with the trainer its config asks for (one model, or stacked replicates)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lsa_interp.training.config import TrainConfig
from lsa_interp.training.replicates import ReplicateTrainer
from lsa_interp.training.run_dir import CONFIG_FILE
from lsa_interp.training.trainer import Trainer


def trainer_class(config: TrainConfig) -> type[Trainer]:
    """`Trainer` for one model, `ReplicateTrainer` for ``config.replicates > 1``."""
    return Trainer if config.replicates == 1 else ReplicateTrainer


def start_run(config: TrainConfig, run_dir: str | os.PathLike, force: bool = False) -> Trainer:
    """A new run of ``config`` in ``run_dir``; raises FileExistsError when it is not empty and not ``force``."""
    return trainer_class(config).start(config, run_dir, force=force)


def resume_run(run_dir: str | os.PathLike, max_steps: int | None = None, max_minutes: float | None = None) -> Trainer:
    """Continue the run in ``run_dir`` (new bounds override the saved ones); FileNotFoundError if it is none."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no {CONFIG_FILE})")
    config = TrainConfig.from_dict(json.loads(path.read_text()))
    return trainer_class(config).resume(run_dir, max_steps=max_steps, max_minutes=max_minutes)
