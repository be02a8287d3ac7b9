"""Start or resume a training run with the trainer its config asks for (one model, or a native stack)."""

from __future__ import annotations

import os
from pathlib import Path

from lsa_interp.training.config import TrainConfig
from lsa_interp.training.run_dir import CONFIG_FILE, parse_config
from lsa_interp.training.stack_config import StackConfig
from lsa_interp.training.stack_trainer import StackTrainer, is_stack_run
from lsa_interp.training.trainer import Trainer


def start_run(config: TrainConfig, run_dir: str | os.PathLike, force: bool = False) -> Trainer | StackTrainer:
    """A new run of ``config`` in ``run_dir``: `Trainer` for one model, `StackTrainer` (seeds ``seed ..
    seed + replicates - 1``) when ``config.stacked``. Raises FileExistsError when ``run_dir`` is not empty and
    not ``force``."""
    if not config.stacked:
        return Trainer.start(config, run_dir, force=force)
    return StackTrainer.start(StackConfig.from_train_config(config), run_dir, force=force)


def resume_run(
    run_dir: str | os.PathLike, max_steps: int | None = None, max_minutes: float | None = None
) -> Trainer | StackTrainer:
    """Continue the run in ``run_dir`` (new bounds override the saved ones).

    Raises FileNotFoundError when it is no run, ValueError for a run of the retired ``vmap`` stack.
    """
    if is_stack_run(run_dir):
        return StackTrainer.resume(run_dir, max_steps=max_steps, max_minutes=max_minutes)
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no {CONFIG_FILE})")
    config = parse_config(Path(run_dir), TrainConfig.from_dict)
    if config.replicates > 1:
        raise ValueError(f"{run_dir} was trained by the retired vmap stack and cannot resume; train it again")
    return Trainer.resume(run_dir, max_steps=max_steps, max_minutes=max_minutes)
