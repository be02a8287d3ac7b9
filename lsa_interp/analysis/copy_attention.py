"""The paper's Figure 5: how much encoder layer 2 (head average) attends from each example-output letter to
the same letter in the example input, on successor tasks in the standard alphabet (~0.22-0.24 in models
trained with copy tasks, ~0.015 without). One number per model; the copy vs no-copy comparison is made
over a population of models (`analysis.population`).
"""

from __future__ import annotations

import torch

from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.analysis.rasp import encoder_patterns
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model.hooked import HookedEncoderDecoder

PAPER_COPY, PAPER_NOCOPY = 0.23, 0.015
"""Figure 5: head-averaged layer-2 attention, example-out letter -> same example-in letter."""
LAYER = 1
"""Encoder layer 2 (0-based 1)."""


def example_match_attention(model: HookedEncoderDecoder, n_tasks: int = 50, seed: int = 0) -> float:
    """Mean over ``n_tasks`` successor tasks (standard alphabet) and their example-output letters of the
    head-averaged encoder layer-2 attention on the same letter in the example input. Raises ValueError
    for a model with fewer than two encoder layers."""
    if model.cfg.n_encoder_layers <= LAYER:
        raise ValueError(f"Figure 5 reads encoder layer 2; this model has {model.cfg.n_encoder_layers}")
    tasks = rule_tasks("succ", n_tasks, seed=seed, alphabets="standard")
    was_training = model.training
    model.eval()
    try:
        patterns, src = encoder_patterns(model, tasks)
    finally:
        model.train(was_training)
    roles = encode_tasks(tasks, with_answers=False).roles
    pairs = (
        (roles == ROLE_ID["example_out"])[:, :, None]
        & (roles == ROLE_ID["example_in"])[:, None, :]
        & (src[:, :, None] == src[:, None, :])
    )
    mass = torch.einsum("bqk,bqk->bq", patterns[:, LAYER].mean(1), pairs.float())
    return float(mass[pairs.any(-1)].mean())


def copy_attention_analysis(model: HookedEncoderDecoder, model_name: str = "model", seed: int = 0) -> AnalysisResult:
    """`example_match_attention` as an `AnalysisResult` with one finding (no verdict on one model: the paper's
    claim compares models trained with and without copy tasks)."""
    value = example_match_attention(model, seed=seed)
    finding = Finding(
        "Figure 5: layer-2 attention example-out -> same example-in letter",
        f"~{PAPER_COPY} with copy tasks, ~{PAPER_NOCOPY} without (head average, succ, standard alphabet)",
        f"{value:.3f}",
        None,
        "compared across models by `lsa-interp report --models`",
        value,
    )
    return AnalysisResult("copy_attention", model_name, {"attention": value}, {"attention": value}, {}, [finding])
