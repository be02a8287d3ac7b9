"""The analyses a grid can ask for on each finished model, by name, at the sizes of the one-model report.

`ANALYSIS_NAMES` is cheap to import (grid validation needs it); `analysis_function` imports the analysis
modules (torch, plotly) only when a model is analysed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lsa_interp.model.hooked import HookedEncoderDecoder

Analysis = Callable[["HookedEncoderDecoder", str, int], Any]
ANALYSIS_NAMES = (
    "matching", "roles", "patching", "invariance", "cross_attention", "elimination", "decoder_lens", "rasp", "report",
)  # fmt: skip
"""Names a grid's ``analyses`` list may use; ``report`` runs all of them and writes one page."""


def analysis_function(name: str) -> Analysis:
    """The function ``(model, model_name, seed) -> result with write(out_dir)`` of analysis ``name``.

    Raises ValueError for a name not in `ANALYSIS_NAMES`.
    """
    from lsa_interp.analysis import (
        cross_attention,
        decoder_lens,
        elimination,
        invariance,
        matching,
        patching,
        rasp,
        roles as role_analysis,
    )
    from lsa_interp.analysis.report import REPORT_SIZES, run_report

    sizes = REPORT_SIZES
    table: dict[str, Analysis] = {
        "matching": lambda model, model_name, seed: matching.matching_analysis(model, model_name),
        "roles": lambda model, model_name, seed: role_analysis.role_assignment(
            model, n_tasks=sizes["roles"], seed=seed, model_name=model_name
        ),
        "patching": lambda model, model_name, seed: patching.patching_analysis(
            model, model_name, head="all", n_pairs=sizes["patch_pairs"], seed=seed
        ),
        "invariance": lambda model, model_name, seed: invariance.mapping_invariance(
            model, seed=seed, model_name=model_name
        ),
        "cross_attention": lambda model, model_name, seed: cross_attention.cross_attention_targets(
            model, n_tasks=sizes["cross_attention"], seed=seed, model_name=model_name
        ),
        "elimination": lambda model, model_name, seed: elimination.elimination(
            model, n_tasks=sizes["elimination"], seed=seed, model_name=model_name
        ),
        "decoder_lens": lambda model, model_name, seed: decoder_lens.decoder_lens(
            model, decoder_lens.lens_tasks(model, sizes["decoder_lens"], seed), model_name=model_name, source="val"
        ),
        "rasp": lambda model, model_name, seed: rasp.rasp_comparison(
            model, rasp.seen_rule_tasks(sizes["rasp"], seed), model_name=model_name
        ),
        "report": lambda model, model_name, seed: run_report(model, model_name, seed),
    }
    if name not in table:
        raise ValueError(f"unknown analysis {name!r}; choose one of: {', '.join(ANALYSIS_NAMES)}")
    return table[name]
