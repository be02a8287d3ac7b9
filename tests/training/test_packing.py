"""Packed rows (`lsa_interp.training.packing`): the layout, attention over it, and a packed stack, which must
train as the padded one does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lsa_interp.data.vocab import PAD
from lsa_interp.model import ModelConfig
from lsa_interp.training import RunSpec, StackConfig, StackTrainer, packing, stack_step
from lsa_interp.training.packing import (
    capacity_for,
    filler_sequences,
    pack_rows,
    packed_flash,
    packed_sdpa,
    sequence_bounds,
)
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


def test_sequence_bounds_are_the_rows_then_fillers_no_wider_than_a_row_over_the_unused_slots():
    tokens, lengths = _rows([[2, 0, 3], [1, 4, 0]], width=5)
    packed = pack_rows(tokens, lengths, capacity=12)
    assert filler_sequences(packed) == 3 and filler_sequences(packed, pack_rows(tokens, lengths, 16)) == 4
    bounds = sequence_bounds(packed, 3)
    assert bounds.dtype == torch.int32
    # replicate 0: rows at 0, 2 (empty), 2; slots 5..11 unused: fillers 5..9, 10..11 and an empty one; then 12 on
    assert bounds.tolist() == [0, 2, 2, 5, 10, 12, 12, 13, 17, 17, 22, 24, 24]


@pytest.mark.parametrize("seed", range(5))
def test_sequence_bounds_put_every_slot_in_one_sequence_and_each_row_in_its_own(seed):
    generator = torch.Generator().manual_seed(seed)
    reps, batch, width = 3, 6, 9
    lengths = torch.randint(0, width + 1, (reps, batch), generator=generator)
    capacity = int(lengths.sum(1).max()) + int(torch.randint(0, 30, (), generator=generator))
    tokens = torch.where(torch.arange(width) < lengths[..., None], 4, PAD)
    packed = pack_rows(tokens, lengths, capacity)
    fillers = filler_sequences(packed)
    bounds = sequence_bounds(packed, fillers).long()
    sizes = bounds.diff().view(reps, batch + fillers)
    assert bounds[0] == 0 and bounds[-1] == reps * capacity and (sizes >= 0).all()
    assert torch.equal(sizes[:, :batch], lengths) and (sizes[:, batch:] <= width).all()
    assert torch.equal(bounds[:-1].view(reps, -1)[:, :batch].flatten(), packed.starts)


def _varlen_attention(q, k, v, q_bounds, k_bounds, q_longest, k_longest, causal, dropout_p):
    """What `packing.flash_varlen` computes (FlashAttention-2's variable-length semantics), sequence by sequence on
    any device: each sequence's queries over its own keys, causal from the sequence's first position, zeros for a
    sequence without keys. Checks the kernel's preconditions: int32 bounds and no sequence over its longest."""
    assert q_bounds.dtype == k_bounds.dtype == torch.int32 and dropout_p == 0.0
    assert int(q_bounds.diff().max()) <= q_longest and int(k_bounds.diff().max()) <= k_longest
    out = torch.zeros_like(q)
    for (q0, q1), (k0, k1) in zip(q_bounds.view(-1, 1).unfold(0, 2, 1).view(-1, 2).tolist(),
                                  k_bounds.view(-1, 1).unfold(0, 2, 1).view(-1, 2).tolist()):  # fmt: skip
        if q1 > q0 and k1 > k0:
            heads_first = lambda t: t.transpose(0, 1)
            mask = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril() if causal else None
            z = F.scaled_dot_product_attention(
                heads_first(q[q0:q1]), heads_first(k[k0:k1]), heads_first(v[k0:k1]), attn_mask=mask
            )
            out = out.index_copy(0, torch.arange(q0, q1), heads_first(z))
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_flash_attends_over_each_rows_own_keys_as_packed_sdpa_does(monkeypatch, causal):
    monkeypatch.setattr(packing, "flash_varlen", _varlen_attention)
    torch.manual_seed(1)
    src_lengths, tgt_lengths = torch.tensor([[5, 0, 2], [1, 4, 3]]), torch.tensor([[2, 0, 3], [1, 1, 2]])
    src = pack_rows(torch.where(torch.arange(5) < src_lengths[..., None], 4, PAD), src_lengths, 11)
    tgt = pack_rows(torch.where(torch.arange(3) < tgt_lengths[..., None], 4, PAD), tgt_lengths, 7)
    fillers = filler_sequences(src, tgt)
    bounds = {"src": sequence_bounds(src, fillers), "tgt": sequence_bounds(tgt, fillers)}
    values = {"src": torch.randn(22, 2, 4, requires_grad=True), "tgt": torch.randn(14, 2, 4, requires_grad=True)}
    rows = {"src": src, "tgt": tgt}
    for query, key in (("src", "src"), ("tgt", "tgt"), ("tgt", "src")):
        if causal and query != key:
            continue
        q, kv = values[query], values[key]
        out = packed_flash(q, kv, kv, rows[query], rows[key], (bounds[query], bounds[key]), causal, 0.0)
        expected = packed_sdpa(q, kv, kv, rows[query], rows[key], causal, 0.0)
        real = rows[query].slot_row < 6
        assert torch.allclose(out[real], expected[real], atol=1e-6), (query, key)
        grads = torch.autograd.grad(out[real].sum(), (q, kv))
        expected_grads = torch.autograd.grad(expected[real].sum(), (q, kv))
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, expected_grads)), (query, key)


def test_a_flash_stack_wires_its_packed_rows_into_the_kernel_as_packed_sdpa_does(monkeypatch):
    calls = []

    def spy(q, k, v, q_bounds, k_bounds, q_longest, k_longest, causal, dropout_p):
        calls.append((len(q_bounds), len(k_bounds), q_longest, k_longest, causal))
        return _varlen_attention(q, k, v, q_bounds, k_bounds, q_longest, k_longest, causal, dropout_p)

    monkeypatch.setattr(packing, "flash_varlen", spy)
    src, tgt_in, tgt_out = ragged_stack_batch()
    valid = torch.tensor([[True, True, True], [True, False, True]])
    tgt_out = tgt_out.masked_fill(~valid[..., None], PAD)
    cfg = ModelConfig(d_model=32, n_heads=2, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
    padded = StackedEncoderDecoder.from_seeds(cfg, [3, 4]).train()
    flash = StackedEncoderDecoder.from_seeds(cfg, [3, 4], attention="flash").train()
    expected = padded.losses(src, tgt_in, tgt_out)
    expected.sum().backward()
    packed_src = pack_rows(src, (src != PAD).sum(-1) * valid, 40)
    packed_tgt = pack_rows(tgt_in, (tgt_in != PAD).sum(-1) * valid, 16)
    losses = flash.packed_losses(packed_src, packed_tgt, packed_tgt.gather(tgt_out))
    losses.sum().backward()
    assert (losses - expected).abs().max() < 1e-6
    assert (flash.flat.grad - padded.flat.grad).abs().max() < 1e-6
    bounds = 2 * (3 + 4) + 1  # 2 replicates x (3 rows + ceil(40 / 12) fillers), and the end
    encoder, decoder_self, cross = (
        (bounds, bounds, 12, 12, False),
        (bounds, bounds, 5, 5, True),
        (bounds, bounds, 5, 12, False),
    )
    assert calls == [encoder, encoder, decoder_self, cross, decoder_self, cross]
    flash.eval()
    calls.clear()
    assert torch.allclose(flash.packed_losses(packed_src, packed_tgt, packed_tgt.gather(tgt_out)), losses, atol=1e-6)
    assert not calls  # evaluation runs packed_sdpa: the kernel only trains


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("query, key, causal", [("src", "src", False), ("tgt", "tgt", True), ("tgt", "src", False)])
def test_on_a_gpu_packed_flash_computes_packed_sdpa_in_bf16(query, key, causal):
    """The real kernel (bf16) against packed SDPA, with empty rows and, in cross-attention, filler queries whose
    filler has no keys (the source buffer is full)."""
    torch.manual_seed(2)
    src_lengths, tgt_lengths = torch.tensor([[9, 0, 4], [12, 12, 12]]), torch.tensor([[3, 0, 5], [1, 6, 2]])
    packed = lambda lengths, width, capacity: pack_rows(
        torch.where(torch.arange(width) < lengths[..., None], 4, PAD).cuda(), lengths.cuda(), capacity
    )
    rows = {"src": packed(src_lengths, 12, 36), "tgt": packed(tgt_lengths, 6, 16)}
    fillers = filler_sequences(*rows.values())
    bounds = {side: sequence_bounds(side_rows, fillers) for side, side_rows in rows.items()}
    q = torch.randn(rows[query].tokens.numel(), 2, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    kv = torch.randn(rows[key].tokens.numel(), 2, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = packed_flash(q, kv, kv, rows[query], rows[key], (bounds[query], bounds[key]), causal, 0.0)
    expected = packed_sdpa(q, kv, kv, rows[query], rows[key], causal, 0.0)
    real = rows[query].slot_row < 6
    assert torch.isfinite(out).all() and (out[real] - expected[real]).abs().max() < 2e-2
    grads = torch.autograd.grad(out[real].float().sum(), (q, kv))
    expected_grads = torch.autograd.grad(expected[real].float().sum(), (q, kv))
    for grad, expected_grad in zip(grads, expected_grads):
        assert torch.isfinite(grad).all() and (grad - expected_grad).abs().max() < 2e-2 * expected_grad.abs().max()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_packed_flash_drops_about_p_of_the_weights_rescaled_and_draws_new_masks_each_call():
    """Equal scores give each of a row's n keys the weight 1/n, and one-hot values read the weights out: with
    dropout p each is 0 or 1/(n (1 - p)), about 1 - p of them kept, the mask new at every call."""
    rows = pack_rows(torch.full((4, 64, 16), 4, device="cuda"), torch.full((4, 64), 16, device="cuda"), 1024)
    bounds = sequence_bounds(rows, filler_sequences(rows))
    q = torch.zeros(4096, 8, 16, device="cuda", dtype=torch.bfloat16)
    position = torch.arange(4096, device="cuda") % 16
    v = torch.eye(16, device="cuda", dtype=torch.bfloat16)[position][:, None, :].expand(4096, 8, 16).contiguous()
    weights = [packed_flash(q, q, v, rows, rows, (bounds, bounds), False, 0.25).float() for _ in range(2)]
    for w in weights:
        kept = w > 0
        assert torch.allclose(w[kept], torch.full_like(w[kept], 1 / (16 * 0.75)), rtol=1e-2)
        assert abs(kept.float().mean().item() - 0.75) < 0.01
    assert (weights[0] != weights[1]).float().mean() > 0.2


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


def test_a_packed_mixed_stack_trains_as_the_padded_one(data_dir, other_dir, tmp_path, monkeypatch):
    """On a CPU the packed stack packs each step's sources and targets into as many slots as they need, and ends
    within 1e-4 of the padded stack."""
    packs = []
    monkeypatch.setattr(stack_step, "pack_rows", lambda *args: packs.append(args[2]) or packing.pack_rows(*args))
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
    assert packs == []
    packed.run()
    assert packs == [int(n) for step_needs in needs[: packed.step] for n in step_needs]  # eagerly, at its own size
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


def test_packed_sdpa_drops_attention_weights_with_the_rate_it_is_given():
    lengths = torch.tensor([[5, 3], [4, 5]])
    packed = pack_rows(torch.where(torch.arange(5) < lengths[..., None], 4, PAD), lengths, capacity=10)
    values = torch.randn(20, 2, 4, generator=torch.Generator().manual_seed(0))
    inside = packed.slot_row < 4
    plain = packed_sdpa(values, values, values, packed, packed, False, 0.0)
    torch.manual_seed(1)
    dropped = torch.stack([packed_sdpa(values, values, values, packed, packed, False, 0.5) for _ in range(400)])
    assert not torch.allclose(dropped[0][inside], plain[inside], atol=1e-3)
    error = (dropped.mean(0) - plain)[inside].abs()  # 1 / (1 - p) keeps the mean: within 5 standard errors
    assert (error <= 5 * dropped.std(0)[inside] / len(dropped) ** 0.5 + 1e-6).all()
    assert not dropped[:, ~inside].any()
