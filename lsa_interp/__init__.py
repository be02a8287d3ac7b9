"""lsa-interp: letter-string analogy transformers, their datasets, training and interpretability."""

from lsa_interp.data.task import Task
from lsa_interp.utils import PACKAGE_VERSION as __version__

__all__ = ["Task", "__version__", "load_model"]


def __getattr__(name: str):
    """``load_model`` imports the model (and torch) only when it is first used."""
    if name == "load_model":
        from lsa_interp.model import load_model

        return load_model
    raise AttributeError(f"module 'lsa_interp' has no attribute {name!r}")
