"""The stack's own attention kernel (`small_attention`) against explicit attention, and in the stack.

Runs on a CUDA GPU, or on a CPU under Triton's interpreter where the ``triton`` package is installed (the
project does not depend on it: ``pip install triton``, then ``pytest tests/training/test_small_attention.py``);
skipped elsewhere.
"""

from __future__ import annotations

import pytest
import torch

from lsa_interp.data import save_dataset
from lsa_interp.data.vocab import PAD
from lsa_interp.model import ModelConfig
from lsa_interp.training import StackConfig, StackTrainer, TrainConfig
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from tests.helpers import explicit_attention, ragged_stack_batch

pytest.importorskip("triton")  # without a GPU, run under Triton's interpreter (tests/conftest.py)
from lsa_interp.training import small_attention as small_attention_module
from lsa_interp.training.packing import pack_rows
from lsa_interp.training.small_attention import launch_count, packed_small_attention, small_attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = 1e-5 if DEVICE == "cpu" else 2e-3  # CUDA: fp32 dots on tensor cores (tf32 in torch's reference)


def _inputs(rows, heads, lq, lk, seed=0, d_head=16):
    generator = torch.Generator().manual_seed(seed)
    make = lambda n: torch.randn(rows, heads, n, d_head, generator=generator).to(DEVICE).requires_grad_()
    return make(lq), make(lk), make(lk)


def _grads(out, tensors, grad):
    for tensor in tensors:
        tensor.grad = None
    out.backward(grad)
    return [tensor.grad.clone() for tensor in tensors]


EVERY_CLASS = [93, 1, 16, 17, 32, 33, 64, 65, 0]
"""Source rows of every length class (tiles of 16, 32, 64, 128) and their edges, and a row without keys."""


@pytest.mark.parametrize(
    "lq, lk, causal, key_len, query_len, shortest",
    [
        (93, 93, False, EVERY_CLASS, None, (1, 1)),
        (22, 22, True, [22, 5, 16, 17, 1], None, (1, 1)),
        (22, 93, False, [93, 5, 40, 65, 17], [22, 16, 3, 17, 0], (1, 1)),
        (7, 30, False, [30, 5, 16], [7, 7, 2], (1, 1)),
        # Hints above some rows' lengths: those rows are computed in the smallest tile launched.
        (93, 93, False, EVERY_CLASS, None, (40, 40)),
        (22, 93, False, [93, 5, 40, 65, 17], [22, 16, 3, 17, 0], (17, 40)),
    ],
    ids=["encoder", "decoder-self", "cross", "short", "encoder-hint", "cross-hint"],
)
def test_without_dropout_it_is_explicit_attention_forward_and_backward(lq, lk, causal, key_len, query_len, shortest):
    q, k, v = _inputs(len(key_len), 2, lq, lk)
    key_len = torch.tensor(key_len, device=DEVICE)
    query_len = None if query_len is None else torch.tensor(query_len, device=DEVICE)
    seed = torch.tensor([7], device=DEVICE)
    out = small_attention(q, k, v, key_len, seed, causal=causal, query_len=query_len, shortest=shortest)
    grad = torch.randn_like(out)
    ours = _grads(out, (q, k, v), grad)
    expected = explicit_attention(q, k, v, key_len, causal, query_len=query_len)
    theirs = _grads(expected, (q, k, v), grad)
    assert (out - expected).abs().max() < TOLERANCE
    assert all((a - b).abs().max() < TOLERANCE for a, b in zip(ours, theirs))


@pytest.mark.skipif(DEVICE == "cpu", reason="Triton's interpreter multiplies bf16 matrices wrongly")
def test_in_bf16_it_is_explicit_attention_within_bf16_rounding():
    q, k, v = _inputs(3, 2, 22, 93)
    key_len, query_len = torch.tensor([93, 5, 40], device=DEVICE), torch.tensor([22, 9, 13], device=DEVICE)
    seed = torch.tensor([7], device=DEVICE)
    half = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    out = small_attention(*half, key_len, seed, query_len=query_len)
    grad = torch.randn_like(out)
    ours = _grads(out, half, grad)
    expected = explicit_attention(q, k, v, key_len, query_len=query_len)
    theirs = _grads(expected, (q, k, v), grad.float())
    assert out.dtype == torch.bfloat16 and (out.float() - expected).abs().max() < 3e-2
    assert all((a.float() - b).abs().max() < 5e-2 * max(1.0, b.abs().max().item()) for a, b in zip(ours, theirs))


def _dropped_weights(seed, call, p, key_len, rows=4, heads=4, length=16):
    """The kernel's attention weights after dropout, read through values that are the identity."""
    q, k, _ = _inputs(rows, heads, length, length, d_head=length)
    v = torch.eye(length, device=DEVICE).expand(rows, heads, length, length)
    return small_attention(q, k, v, key_len, torch.tensor([seed], device=DEVICE), dropout_p=p, call=call).detach()


def test_dropout_keeps_about_1_minus_p_rescaled_and_repeats_from_the_same_seed_and_call():
    key_len = torch.full((4,), 16, device=DEVICE)
    dropped = _dropped_weights(3, 5, 0.25, key_len)
    plain = _dropped_weights(3, 5, 0.0, key_len)
    kept = dropped != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.03
    assert torch.allclose(dropped[kept], plain[kept] / 0.75, atol=1e-6)
    assert torch.equal(dropped, _dropped_weights(3, 5, 0.25, key_len))
    for other in (_dropped_weights(4, 5, 0.25, key_len), _dropped_weights(3, 6, 0.25, key_len)):
        assert (kept != (other != 0)).float().mean() > 0.2
    assert (kept[0] != kept[1]).float().mean() > 0.2  # rows draw their own masks


def test_dropout_decisions_look_independent_across_neighbours_steps_and_seed_words():
    full = torch.full((8,), 64, device=DEVICE)
    kept = _dropped_weights(9, 1, 0.25, full, rows=8, length=64) != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    for a, b in ((kept[..., 1:], kept[..., :-1]), (kept[..., 1:, :], kept[..., :-1, :]), (kept[1:], kept[:-1])):
        assert abs((a & b).float().mean().item() - 0.75**2) < 0.01  # along keys, queries, rows
    for seed in (10, 9 + (1 << 32)):  # the next step, and the same step of the next stack's stream
        other = _dropped_weights(seed, 1, 0.25, full, rows=8, length=64) != 0
        assert abs((kept & other).float().mean().item() - 0.75**2) < 0.01


def test_the_classes_start_at_the_tile_of_the_shortest_row_there_can_be():
    assert small_attention_module._classes(93) == [(0, 16), (16, 32), (32, 64), (64, 128)]
    assert small_attention_module._classes(93, shortest=40) == [(0, 64), (64, 128)]
    assert small_attention_module._classes(22, shortest=3) == [(0, 16), (16, 32)]


def test_a_forward_pass_of_the_papers_model_makes_24_launches_with_the_datas_hint_and_42_without():
    (src_width, src_shortest), (tgt_width, tgt_shortest) = (93, 39), (22, 4)  # copy-20's and copy-200's rows
    cfg = ModelConfig()

    def per_forward(src_hint, tgt_hint):
        encoder = launch_count((src_width, src_width), True, (src_hint, src_hint))
        decoder_self = launch_count((tgt_width, tgt_width), True, (tgt_hint, tgt_hint))
        cross = launch_count((tgt_width, src_width), False, (tgt_hint, src_hint))
        return cfg.n_encoder_layers * encoder + cfg.n_decoder_layers * (decoder_self + cross)

    assert per_forward(1, 1) == 42 and per_forward(src_shortest, tgt_shortest) == 24


def test_a_rows_dropout_mask_does_not_depend_on_its_length_class():
    long = _dropped_weights(5, 3, 0.5, torch.full((4,), 40, device=DEVICE), length=64) != 0
    short = _dropped_weights(5, 3, 0.5, torch.full((4,), 12, device=DEVICE), length=64) != 0
    assert torch.equal(long[:, :, :12, :12], short[:, :, :12, :12])
    assert not short[:, :, :, 12:].any() and not short[:, :, 12:].any()


def test_with_dropout_the_gradients_are_those_of_the_mask_it_drew():
    key_len = torch.tensor([16, 9, 3, 16], device=DEVICE)
    keep = _dropped_weights(11, 2, 0.3, key_len) != 0
    q, k, v = _inputs(4, 4, 16, 16, seed=1)
    out = small_attention(q, k, v, key_len, torch.tensor([11], device=DEVICE), dropout_p=0.3, call=2)
    grad = torch.randn_like(out)
    ours = _grads(out, (q, k, v), grad)
    expected = explicit_attention(q, k, v, key_len, keep=keep, p=0.3)
    theirs = _grads(expected, (q, k, v), grad)
    assert (out - expected).abs().max() < TOLERANCE
    assert all((a - b).abs().max() < TOLERANCE for a, b in zip(ours, theirs))


@pytest.mark.parametrize(
    "shape, options, message",
    [
        ((2, 2, 8, 8), {}, "power of two of at least 16"),
        ((2, 2, 129, 16), {}, "at most 128 positions"),
        ((2, 2, 8, 16), {"call": 64}, "call must be in 0..63"),
        ((2, 2, 8, 16), {"dropout_p": 1.0}, r"dropout probability must be in \[0, 1\)"),
    ],
)
def test_what_it_cannot_compute_is_named(shape, options, message):
    x = torch.zeros(shape, device=DEVICE)
    with pytest.raises(ValueError, match=message):
        small_attention(x, x, x, torch.ones(2, dtype=torch.long), torch.zeros(1, dtype=torch.long), **options)


def test_self_attention_between_widths_is_refused():
    q, k = torch.zeros(2, 2, 8, 16, device=DEVICE), torch.zeros(2, 2, 12, 16, device=DEVICE)
    with pytest.raises(ValueError, match="as many query as key positions, got 8 and 12"):
        small_attention(q, k, k, torch.ones(2, dtype=torch.long), torch.zeros(1, dtype=torch.long))


def test_packed_rows_get_what_the_padded_rows_get_dropout_masks_included():
    lengths = [[93, 0, 17], [40, 65, 1]]
    tgt_lengths = [[22, 0, 5], [9, 16, 1]]
    tokens = lambda lens, width: torch.where(torch.arange(width) < torch.tensor(lens)[..., None], 4, PAD)
    # A hint of 40 for the shortest source row: rows of 17 and 1 keys are still computed (in the 64 tile).
    src = pack_rows(tokens(lengths, 93).to(DEVICE), torch.tensor(lengths, device=DEVICE), 160, shortest=40)
    tgt = pack_rows(tokens(tgt_lengths, 22).to(DEVICE), torch.tensor(tgt_lengths, device=DEVICE), 48)
    seed = torch.tensor([5], device=DEVICE)
    for queries, keys, causal in ((src, src, False), (tgt, tgt, True), (tgt, src, False)):
        q, k, v = _inputs(6, 2, queries.width, keys.width, seed=2)
        query_len = None if queries is keys else queries.lengths
        padded = small_attention(q, k, v, keys.lengths, seed, causal, 0.3, 4, query_len)
        grad = torch.randn_like(padded)
        expected = _grads(padded, (q, k, v), grad)
        pack = lambda t, rows: rows.repack(t.detach().transpose(1, 2)).requires_grad_()
        pq, pk, pv = pack(q, queries), pack(k, keys), pack(v, keys)
        out = packed_small_attention(
            pq, pk, pv, queries.starts, queries.lengths, keys.starts, keys.lengths, (queries.width, keys.width), seed,
            causal, 0.3, 4, paired=queries is keys, shortest=(queries.shortest, keys.shortest),
        )  # fmt: skip
        ours = _grads(out, (pq, pk, pv), queries.repack(grad.transpose(1, 2)))
        assert (out - queries.repack(padded.detach().transpose(1, 2))).abs().max() < TOLERANCE
        for mine, theirs, rows in zip(ours, expected, (queries, keys, keys)):
            assert (mine - rows.repack(theirs.transpose(1, 2))).abs().max() < TOLERANCE


TWO_HEADS = {"d_model": 32, "n_heads": 2, "d_mlp": 64, "n_encoder_layers": 2, "n_decoder_layers": 2}


@pytest.mark.parametrize("shortest", [(1, 1), (20, 3)], ids=["every-class", "hint"])
def test_a_stack_with_the_kernel_computes_what_the_sdpa_stack_does(shortest):
    # Sources of 40, 7 and 4 tokens: tiles of 16 and 64, or with the hint (sources of at least 20) 32 and 64.
    batch = ragged_stack_batch(DEVICE, src_width=40)
    cfg = ModelConfig(**TWO_HEADS, dropout=0.0)
    sdpa = StackedEncoderDecoder.from_seeds(cfg, [3, 4], DEVICE).train()
    ours = StackedEncoderDecoder.from_seeds(cfg, [3, 4], DEVICE, attention="triton").train()
    start = int(ours.attention_step)
    expected, losses = sdpa.losses(*batch), ours.losses(*batch, shortest=shortest)
    expected.sum().backward()
    losses.sum().backward()
    assert (losses - expected).abs().max() < TOLERANCE
    assert (ours.flat.grad - sdpa.flat.grad).abs().max() < TOLERANCE
    assert start == 3 << 32 and int(ours.attention_step) == start + 1  # one step of dropout streams per forward
    with torch.no_grad():
        ours.eval().losses(*batch)
    assert int(ours.attention_step) == start + 1


def test_a_packed_stack_with_the_kernel_computes_what_the_padded_sdpa_stack_does():
    src, tgt_in, tgt_out = ragged_stack_batch(DEVICE)
    cfg = ModelConfig(**TWO_HEADS, dropout=0.0)
    sdpa = StackedEncoderDecoder.from_seeds(cfg, [3, 4], DEVICE).train()
    ours = StackedEncoderDecoder.from_seeds(cfg, [3, 4], DEVICE, attention="triton").train()
    expected = sdpa.losses(src, tgt_in, tgt_out)
    expected.sum().backward()
    packed_src, packed_tgt = pack_rows(src, (src != PAD).sum(-1), 40), pack_rows(tgt_in, (tgt_in != PAD).sum(-1), 16)
    losses = ours.packed_losses(packed_src, packed_tgt, packed_tgt.gather(tgt_out))
    losses.sum().backward()
    assert (losses - expected).abs().max() < TOLERANCE
    assert (ours.flat.grad - sdpa.flat.grad).abs().max() < TOLERANCE


def test_a_stack_with_the_kernel_and_dropout_resumes_bit_for_bit(tiny, tmp_path):
    data = save_dataset(tiny, tmp_path / "data")
    model = {**TWO_HEADS, "n_encoder_layers": 1, "n_decoder_layers": 1, "dropout": 0.2}
    config = TrainConfig(
        data_dir=str(data), seed=2, device=DEVICE, batch_size=8, max_steps=4, val_limit=8, checkpoint_every=2,
        attention="triton", cuda_graph=False, model=model,
    )  # fmt: skip
    assert config.stacked
    stack = StackConfig.from_train_config(config)
    whole = StackTrainer.start(stack, tmp_path / "whole")
    whole.run()
    StackTrainer.start(stack.with_bounds(max_steps=2), tmp_path / "cut").run()
    resumed = StackTrainer.resume(tmp_path / "cut", max_steps=4)
    resumed.run()
    assert resumed.step == 4 and torch.equal(resumed.model.flat, whole.model.flat)
    assert int(resumed.model.attention_step) == int(whole.model.attention_step) == (2 << 32) + 4
