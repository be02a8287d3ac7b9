"""The hooked encoder-decoder, its activation cache, checkpoints and the reference-format converter."""

from lsa_interp.utils import lazy_exports

_EXPORTS = {  # each public name -> the module that defines it, imported on first use
    "ActivationCache": "cache",
    "CheckpointError": "checkpoint",
    "available_models": "checkpoint",
    "load_model": "checkpoint",
    "save_model": "checkpoint",
    "ModelConfig": "config",
    "convert_reference_state_dict": "convert",
    "load_reference_checkpoint": "convert",
    "HookedEncoderDecoder": "hooked",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
