"""Set-ups the activation-patching tests share: a small random model, succ/pred pairs with their decoder input and
measure, and pairs whose answers are what the planted model answers."""

from __future__ import annotations

import dataclasses

import torch

from lsa_interp.analysis.pair_batch import PairBatch, pair_batch
from lsa_interp.analysis.patch_runs import measure_at_parting
from lsa_interp.analysis.planted import planted_answer, planted_model
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.model.checkpoint import save_model
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.hooked import HookedEncoderDecoder


def small_model() -> HookedEncoderDecoder:
    """A random two-layer model in eval mode (seed 0)."""
    torch.manual_seed(0)
    return HookedEncoderDecoder(
        ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64)
    ).eval()


def succ_pred_runs(n: int = 5) -> tuple[list[MinimalPair], PairBatch, torch.Tensor, object]:
    """``n`` succ/pred pairs of 3-letter windows, their batch, the target answers' decoder input and the measure."""
    pairs = minimal_pairs("succ", "pred", n, lengths=(3,))
    tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in
    return pairs, pair_batch(pairs), tgt, measure_at_parting(pairs)


def pairs_parting_late() -> list[MinimalPair]:
    """Three succ/pred prompts given answers that part at the first, second and third letter (acd/bdf/bcf against
    bce)."""
    base = minimal_pairs("succ", "pred", 3, lengths=(3,))
    answers = [("acd", "bce"), ("bdf", "bce"), ("bcf", "bce")]
    return [
        MinimalPair(dataclasses.replace(p.source, answer=s), dataclasses.replace(p.target, answer=t))
        for p, (s, t) in zip(base, answers)
    ]


def planted_pairs(n: int, seed: int = 0) -> list[MinimalPair]:
    """pred/succ minimal pairs whose answers are what the planted model answers (the first example-output letter:
    pred's ``f`` of ``ghi > fhi`` against succ's ``g`` of ``ghi > ghj``)."""
    found = minimal_pairs("pred", "succ", n, seed=seed, lengths=(3,))
    with_answer = lambda task: dataclasses.replace(task, answer=planted_answer(task))
    return [MinimalPair(with_answer(p.source), with_answer(p.target)) for p in found]


def saved_planted(root) -> tuple[str, str]:
    """The planted model and the same model without its matching head, saved under ``root``: their paths."""
    return str(save_model(planted_model(), root / "planted")), str(
        save_model(planted_model(matching=False), root / "plain")
    )
