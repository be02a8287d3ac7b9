"""lsa-interp: letter-string analogy transformers, their datasets, training and interpretability."""

from typing import TYPE_CHECKING

from lsa_interp.utils import PACKAGE_VERSION as __version__, lazy_exports

if TYPE_CHECKING:  # what type checkers and editors read; at run time `_EXPORTS` imports each name on first use
    from lsa_interp.data.task import Task as Task
    from lsa_interp.model import load_model as load_model


_EXPORTS = {"Task": "data.task", "load_model": "model"}
"""``load_model`` imports the model (and torch) only when it is first used."""

__all__ = ["Task", "__version__", "load_model"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
