"""The representation analyses' shared parts: task sets, chunked cached runs, the final norm, cosines."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.activations import (
    analysis_tasks,
    final_norm,
    map_cached,
    off_diagonal,
    pairwise_cosine,
)
from lsa_interp.data.task import STANDARD_ALPHABET
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

TINY = ModelConfig(d_model=16, n_heads=2, d_mlp=32, n_encoder_layers=1, n_decoder_layers=1)


def test_tasks_split_over_rules_and_alphabet_kinds_with_seed_zero_by_default():
    tasks = analysis_tasks(["succ", "pred"], 7)
    assert [t.transformation for t in tasks] == ["succ"] * 4 + ["pred"] * 3
    standard = [t.alphabet == STANDARD_ALPHABET for t in tasks]
    assert standard == [True, True, False, False, True, True, False]
    assert tasks == analysis_tasks(["succ", "pred"], 7, seed=0) != analysis_tasks(["succ", "pred"], 7, seed=1)
    assert all(t.alphabet == STANDARD_ALPHABET for t in analysis_tasks(["succ"], 4, alphabets="standard"))
    assert not any(t.alphabet == STANDARD_ALPHABET for t in analysis_tasks(["succ"], 4, alphabets="permuted"))
    with pytest.raises(ValueError, match="at least 1"):
        analysis_tasks(["succ"], 0)


def test_map_cached_runs_chunks_of_256_caching_only_the_named_hooks():
    model = HookedEncoderDecoder(TINY)
    tasks = analysis_tasks(["succ"], 260, alphabets="standard")
    names = ["encoder.0.hook_resid_post", "decoder.0.attn.hook_pattern"]
    seen = map_cached(model, tasks, names, lambda chunk, cache: (len(chunk), list(cache), cache.inputs.tgt_in.shape[1]))
    assert seen == [(256, names, 1), (4, names, 1)]  # the answers are left out: the decoder sees only '>'
    assert model.training


def test_final_norm_is_the_model_s_own_encoder_norm_in_the_input_s_dtype():
    torch.manual_seed(0)
    model = HookedEncoderDecoder(TINY)
    norm = model.encoder.ln_final
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
        norm.bias.uniform_(-1.0, 1.0)
    norm.eps = 0.25
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        assert torch.allclose(final_norm(model, x), norm(x), atol=1e-6)
        wide = final_norm(model, x.double())
    assert wide.dtype == torch.float64 and torch.allclose(wide, norm(x).double(), atol=1e-6)


def test_cosines_of_rows_keep_the_dtype_and_pairs_are_counted_once():
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    cosine = pairwise_cosine(x)
    assert cosine.dtype == torch.float32
    assert torch.allclose(cosine, torch.tensor([[1.0, 0.5**0.5, 0.0], [0.5**0.5, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert off_diagonal(torch.arange(9.0).reshape(3, 3)).tolist() == [1.0, 2.0, 5.0]
