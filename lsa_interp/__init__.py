"""lsa-interp: letter-string analogy transformers, their datasets, training and interpretability."""

from lsa_interp.utils import PACKAGE_VERSION as __version__
from lsa_interp.utils import lazy_exports

_EXPORTS = {"Task": "data.task", "load_model": "model"}
"""``load_model`` imports the model (and torch) only when it is first used."""

__all__ = ["Task", "__version__", "load_model"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
