"""Training: the recipe, one model or stacked replicates, CUDA-graph steps, resumable run directories."""

from lsa_interp.utils import lazy_exports

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
