"""The hooked encoder-decoder, its activation cache, checkpoints and the reference-format converter."""

from typing import TYPE_CHECKING

from lsa_interp.utils import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors read; at run time `_EXPORTS` imports each name on first use
    from lsa_interp.model.cache import ActivationCache as ActivationCache
    from lsa_interp.model.checkpoint import (
        CheckpointError as CheckpointError,
        available_models as available_models,
        load_model as load_model,
        save_model as save_model,
    )
    from lsa_interp.model.config import ModelConfig as ModelConfig
    from lsa_interp.model.convert import (
        convert_reference_state_dict as convert_reference_state_dict,
        load_reference_checkpoint as load_reference_checkpoint,
    )
    from lsa_interp.model.hooked import HookedEncoderDecoder as HookedEncoderDecoder


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
