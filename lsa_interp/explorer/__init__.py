"""The live explorer: a local Dash app to open a model, pick a task, intervene and see the answer change.

``lsa-interp explore`` serves it; `explore` shows it inline in a notebook; `lsa_interp.explorer.compute`
holds its model arithmetic (`lens_top_k`, `ablate_cells`, `ablate_heads`, `patch_heads_from`).
"""

from lsa_interp.explorer.app import create_app, explore, explorer_catalogue, serve
from lsa_interp.explorer.catalogue import ModelCatalogue, discover_models
from lsa_interp.explorer.compute import (
    CellBox,
    Interventions,
    Prediction,
    ablate_cells,
    ablate_heads,
    lens_top_k,
    patch_heads_from,
    run_task,
)

__all__ = [
    "CellBox",
    "Interventions",
    "ModelCatalogue",
    "Prediction",
    "ablate_cells",
    "ablate_heads",
    "create_app",
    "discover_models",
    "explore",
    "explorer_catalogue",
    "lens_top_k",
    "patch_heads_from",
    "run_task",
    "serve",
]
