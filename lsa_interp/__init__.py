"""lsa-interp: letter-string analogy transformers, their datasets, training and interpretability."""

from lsa_interp.data.task import Task

__version__ = "0.1.0"

__all__ = ["Task", "__version__"]
