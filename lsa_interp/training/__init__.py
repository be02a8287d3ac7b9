"""Training: the recipe, one model or stacked replicates, CUDA-graph steps, resumable run directories."""

from lsa_interp.training.config import Recipe, TrainConfig
from lsa_interp.training.runs import resume_run, start_run
from lsa_interp.training.schedule import lr_factor
from lsa_interp.training.stack_config import RunSpec, StackConfig
from lsa_interp.training.stack_trainer import StackTrainer
from lsa_interp.training.trainer import Trainer
from lsa_interp.training.validation import exact_match, loss_fn, validate_model

__all__ = [
    "Recipe",
    "RunSpec",
    "StackConfig",
    "StackTrainer",
    "TrainConfig",
    "Trainer",
    "exact_match",
    "loss_fn",
    "lr_factor",
    "resume_run",
    "start_run",
    "validate_model",
]
