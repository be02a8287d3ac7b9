"""The hooked encoder-decoder, its activation cache, checkpoints and the reference-format converter."""

from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.checkpoint import CheckpointError, available_models, load_model, save_model
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.convert import convert_reference_state_dict, load_reference_checkpoint
from lsa_interp.model.hooked import HookedEncoderDecoder

__all__ = [
    "ActivationCache",
    "CheckpointError",
    "HookedEncoderDecoder",
    "ModelConfig",
    "available_models",
    "convert_reference_state_dict",
    "load_model",
    "load_reference_checkpoint",
    "save_model",
]
