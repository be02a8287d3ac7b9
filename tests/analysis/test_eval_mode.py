"""Analyses run the model in eval mode (no dropout; SPEC 5b) whatever mode it is handed in, and give it back in that
mode: a caller holding a model in training mode gets the same numbers as from a model in eval mode."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.cross_attention import cross_attention_targets
from lsa_interp.analysis.matching import matching_scores
from lsa_interp.analysis.patching import patch_pairs, patch_sweep
from lsa_interp.analysis.path_patching import parse_receiver, paths_from, paths_into
from lsa_interp.analysis.prompts import minimal_pairs, rule_tasks
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.heads import Head


@pytest.fixture(scope="module")
def noisy():
    """A small random model with heavy dropout: in training mode two runs differ."""
    torch.manual_seed(0)
    config = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, dropout=0.5)
    return HookedEncoderDecoder(config)


def _matching(model):
    return matching_scores(model, rule_tasks("succ", 4, seed=0)).mass


def _patched(model):
    return patch_pairs(model, minimal_pairs("succ", "pred", 6, seed=0, lengths=(3,)), "2.1").logit_diff_patched


def _swept(model):
    results = patch_sweep(model, minimal_pairs("succ", "pred", 6, seed=0, lengths=(3,)), "1.1+2.2")
    return torch.stack([result.logit_diff_patched for result in results.values()])


def _paths(model):
    pairs = minimal_pairs("succ", "pred", 6, seed=0, lengths=(3,))
    into = paths_into(model, pairs, [parse_receiver("cross:2.1/kv", model.cfg)]).grid.logit_diff
    return torch.cat([paths_from(model, pairs, [Head("encoder", 0, 1)]).grid.logit_diff.flatten(), into.flatten()])


def _cross(model):
    """The heads' shares, and the mode in which the tasks to judge were solved."""
    modes, solve = [], model.solve
    model.solve = lambda tasks: modes.append(model.training) or solve(tasks)
    try:
        result = cross_attention_targets(model, tasks=rule_tasks("pred", 6, seed=0))
    finally:
        del model.solve
    return result.data["heads"], modes


@pytest.mark.parametrize("analysis", [_matching, _patched, _swept, _paths, _cross])
def test_an_analysis_of_a_model_in_training_mode_runs_without_dropout_and_keeps_the_mode(noisy, analysis):
    noisy.eval()
    expected = analysis(noisy)
    noisy.train()
    got = analysis(noisy)
    assert noisy.training
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected, equal_nan=True)
    else:
        assert got == expected
