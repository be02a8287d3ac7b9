"""The hooked encoder-decoder, its activation cache, checkpoints and the reference-format converter."""

from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.hooked import HookedEncoderDecoder

__all__ = ["ActivationCache", "HookedEncoderDecoder", "ModelConfig"]
