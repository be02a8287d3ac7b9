"""Training: the recipe, one model or stacked replicates, CUDA-graph steps, resumable run directories."""

from typing import TYPE_CHECKING

from lsa_interp.utils import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors read; at run time `_EXPORTS` imports each name on first use
    from lsa_interp.training.config import Recipe as Recipe, TrainConfig as TrainConfig
    from lsa_interp.training.runs import resume_run as resume_run, start_run as start_run
    from lsa_interp.training.schedule import lr_factor as lr_factor
    from lsa_interp.training.stack_config import RunSpec as RunSpec, StackConfig as StackConfig
    from lsa_interp.training.stack_trainer import StackTrainer as StackTrainer
    from lsa_interp.training.trainer import Trainer as Trainer
    from lsa_interp.training.validation import (
        exact_match as exact_match,
        loss_fn as loss_fn,
        validate_model as validate_model,
    )


_EXPORTS = {  # each public name -> the module that defines it, imported on first use
    "Recipe": "config",
    "TrainConfig": "config",
    "resume_run": "runs",
    "start_run": "runs",
    "lr_factor": "schedule",
    "RunSpec": "stack_config",
    "StackConfig": "stack_config",
    "StackTrainer": "stack_trainer",
    "Trainer": "trainer",
    "exact_match": "validation",
    "loss_fn": "validation",
    "validate_model": "validation",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
