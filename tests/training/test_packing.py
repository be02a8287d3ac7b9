"""Packed rows (`lsa_interp.training.packing`): the layout, attention over it, and a packed stack, which must
train as the padded one does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lsa_interp.data.vocab import PAD
from lsa_interp.model import ModelConfig
from lsa_interp.training import RunSpec, StackConfig, StackTrainer
from lsa_interp.training.packing import capacity_for, pack_rows, packed_sdpa
from lsa_interp.training.stacked_model import StackedEncoderDecoder
from tests.helpers import assert_same_weights, ragged_stack_batch
from tests.training.test_stack_trainer import NO_DROPOUT


def _rows(lengths, width, start=10):
    """Rows ``[rep, batch, width]`` whose token j of row (r, b) is ``start + 100 r + 10 b + j``, PAD after."""
    lengths = torch.tensor(lengths)
    reps, batch = lengths.shape
    tokens = start + 100 * torch.arange(reps)[:, None, None] + 10 * torch.arange(batch)[None, :, None]
    tokens = tokens + torch.arange(width)
    return tokens.masked_fill(torch.arange(width) >= lengths[..., None], PAD), lengths


def test_rows_go_end_to_end_and_empty_rows_take_no_slot():
    tokens, lengths = _rows([[2, 0, 3], [1, 4, 0]], width=5)
    packed = pack_rows(tokens, lengths, capacity=6)
    assert packed.tokens.tolist() == [[10, 11, 30, 31, 32, PAD], [110, 120, 121, 122, 123, PAD]]
    assert packed.positions.tolist() == [[0, 1, 0, 1, 2, 0], [0, 0, 1, 2, 3, 0]]
    assert packed.starts.tolist() == [0, 2, 2, 6, 7, 11] and packed.lengths.tolist() == [2, 0, 3, 1, 4, 0]
    assert packed.slot_row.tolist() == [0, 0, 2, 2, 2, 6, 3, 4, 4, 4, 4, 6]  # 6 = rep * batch: no row
    labels = tokens + 1000
    assert packed.gather(labels).tolist() == [[1010, 1011, 1030, 1031, 1032, PAD], [1110, 1120, 1121, 1122, 1123, PAD]]


def test_unpack_then_repack_gives_back_every_slot_of_a_row_and_zeros_elsewhere():
    tokens, lengths = _rows([[2, 0, 3], [1, 4, 0]], width=5)
    packed = pack_rows(tokens, lengths, capacity=6)
    values = torch.randn(12, 2, 3)
    rows, own = packed.unpack(values)
    assert rows.shape == (6, 5, 2, 3) and own.sum(1).tolist() == [2, 0, 3, 1, 4, 0]
    assert torch.equal(rows[4, :4], values[7:11])  # replicate 1's second row: slots 1..4 of its buffer
    inside = (packed.slot_row < 6)[:, None, None]
    assert torch.equal(packed.repack(rows), values * inside)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_sdpa_is_padded_attention_on_each_rows_own_tokens(causal):
    torch.manual_seed(0)
    lengths = torch.tensor([[5, 0, 2], [1, 4, 3]])
    width, capacity = 5, 9
    padded = torch.randn(2, 3, width, 2, 4)  # [rep, batch, pos, head, d]
    own = torch.arange(width) < lengths[..., None]
    packed = pack_rows(torch.where(own, 4, PAD), lengths, capacity)
    flat_values = torch.zeros(2 * capacity, 2, 4)
    flat_values[(packed.slot_row < 6).nonzero().flatten()] = padded[own]
    flat_values.requires_grad_()
    out = packed_sdpa(flat_values, flat_values, flat_values, packed, packed, causal, 0.0)
    out.sum().backward()
    heads_first = padded.flatten(0, 1).transpose(1, 2)
    mask = own.flatten(0, 1)[:, None, None, :]
    if causal:
        mask = mask & torch.ones(width, width, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(heads_first, heads_first, heads_first, attn_mask=mask)
    expected = expected.transpose(1, 2)[own.flatten(0, 1)]
    assert torch.allclose(out[(packed.slot_row < 6)], expected, atol=1e-6)
    assert not out[packed.slot_row == 6].any() and torch.isfinite(flat_values.grad).all()  # the empty row: no NaN


def test_capacity_holds_the_fullest_step_with_a_margin_in_multiples_of_16():
    needs = np.array([[100, 20], [150, 18], [90, 30]])
    assert capacity_for(needs) == (160, 32)
    assert capacity_for(needs, margin=1.0, multiple=1) == (150, 30)


def test_a_packed_stack_computes_the_padded_stacks_losses_and_gradients():
    src, tgt_in, tgt_out = ragged_stack_batch()
    valid = torch.tensor([[True, True, True], [True, False, True]])  # a filler row: no tokens at all packed
    tgt_out = tgt_out.masked_fill(~valid[..., None], PAD)
    cfg = ModelConfig(d_model=32, n_heads=2, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
    padded = StackedEncoderDecoder.from_seeds(cfg, [3, 4]).train()
    packed = StackedEncoderDecoder.from_seeds(cfg, [3, 4]).train()
    expected = padded.losses(src, tgt_in, tgt_out)
    expected.sum().backward()
    packed_src = pack_rows(src, (src != PAD).sum(-1) * valid, 40)
    packed_tgt = pack_rows(tgt_in, (tgt_in != PAD).sum(-1) * valid, 16)
    losses = packed.packed_losses(packed_src, packed_tgt, packed_tgt.gather(tgt_out))
    losses.sum().backward()
    assert (losses - expected).abs().max() < 1e-6
    assert (packed.flat.grad - padded.flat.grad).abs().max() < 1e-6


def test_a_packed_mixed_stack_trains_as_the_padded_one(data_dir, other_dir, tmp_path):
    runs = (
        RunSpec(str(data_dir), seed=1, batching="random", epochs=1, preset="tiny"),
        RunSpec(str(other_dir), seed=2, batching="alphabet", epochs=1, preset="tiny4"),
    )
    common = dict(runs=runs, batch_size=64, lr=3e-3, log_every=4, val_limit=40, model=NO_DROPOUT, max_steps=12)
    common["device"] = "cpu"  # the eager packed path (the graphed one: tests/training/test_stack_graph.py)
    padded = StackTrainer.start(StackConfig(**common), tmp_path / "padded")
    packed = StackTrainer.start(StackConfig(**common, packing=True), tmp_path / "packed")
    assert padded.capacity is None
    needs = packed.plan.window(0, 12).token_needs(packed.train)
    assert packed.capacity == capacity_for(needs) and needs[:, 0].max() < 64 * packed.train.src.shape[1]
    padded.run()
    packed.run()
    weights = lambda trainer, index: {name: view[index].detach() for name, view in trainer.model.views().items()}
    for index in range(2):
        assert_same_weights(weights(packed, index), weights(padded, index), NO_DROPOUT["d_model"], rtol=1e-4)


def test_a_packed_stack_with_dropout_resumes_bit_for_bit(data_dir, tmp_path):
    runs = (RunSpec(str(data_dir), seed=2, preset="tiny"), RunSpec(str(data_dir), seed=3, preset="tiny"))
    model = {**NO_DROPOUT, "dropout": 0.2}
    config = StackConfig(
        runs=runs, batch_size=16, max_steps=4, val_limit=8, checkpoint_every=2, packing=True, model=model, device="cpu"
    )
    whole = StackTrainer.start(config, tmp_path / "whole")
    whole.run()
    StackTrainer.start(config.with_bounds(max_steps=2), tmp_path / "cut").run()
    resumed = StackTrainer.resume(tmp_path / "cut", max_steps=4)
    assert resumed.capacity == whole.capacity
    resumed.run()
    assert resumed.step == 4 and torch.equal(resumed.model.flat, whole.model.flat)
