"""The stacked model and its optimizer: the same losses, answers and updates as single models, replicates
independent of each other, dropout per replicate and per step."""

from __future__ import annotations

import shutil

import jaxtyping
import pytest
import torch

from lsa_interp.data.vocab import EOS, PAD
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.training.packing import pack_rows
from lsa_interp.training.stack_adamw import StackAdamW
from lsa_interp.training.stacked_model import Keys, StackedEncoderDecoder
from lsa_interp.training.validation import loss_fn

CFG = ModelConfig(d_model=32, n_heads=4, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
SEEDS = [3, 8, 11]


def _batch(seed: int = 0, reps: int = 3):
    """Random token batches ``[reps, 6, ...]`` with padded source and target tails (PAD targets too)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 26, (reps, 6, 14), generator=g)
    src[:, :, 11:] = PAD
    src[:, 2, 7:] = PAD
    tgt_in = torch.randint(0, 26, (reps, 6, 5), generator=g)
    tgt_out = torch.randint(0, 26, (reps, 6, 5), generator=g)
    tgt_in[:, 4, 3:] = tgt_out[:, 4, 3:] = PAD
    return src, tgt_in, tgt_out


def _single(seed: int, cfg: ModelConfig = CFG) -> HookedEncoderDecoder:
    torch.manual_seed(seed)
    return HookedEncoderDecoder(cfg)


def test_replicates_start_as_seeded_single_models_and_write_back():
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS)
    for index, seed in enumerate(SEEDS):
        single, back = _single(seed).state_dict(), stack.replicate_model(index).state_dict()
        assert single.keys() == back.keys() and all(torch.equal(single[k], back[k]) for k in single)
    with pytest.raises(IndexError, match="out of range"):
        stack.replicate_model(3)


def test_losses_and_greedy_answers_equal_each_single_model():
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS).eval()
    src, tgt_in, tgt_out = _batch()
    losses = stack.losses(src, tgt_in, tgt_out)
    generated = stack.greedy_decode(src, 8)
    for index, seed in enumerate(SEEDS):
        single = _single(seed).eval()
        torch.testing.assert_close(losses[index], loss_fn(single, src[index], tgt_in[index], tgt_out[index]))
        alone = single.greedy_decode(src[index], 8, drop_finished=False)
        width = max(alone.shape[1], generated.shape[2])
        padded = [torch.nn.functional.pad(t, (0, width - t.shape[-1]), value=PAD) for t in (generated[index], alone)]
        assert torch.equal(*padded)
    assert len({tuple(generated[i].flatten().tolist()) for i in range(3)}) == 3


def test_a_batch_without_targets_has_zero_loss():
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS)
    src, tgt_in, tgt_out = _batch()
    tgt_out[1] = PAD
    losses = stack.losses(src, tgt_in, tgt_out)
    assert losses[1] == 0 and (losses[[0, 2]] > 0).all()


def _stepped(batch) -> torch.Tensor:
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS)
    optimizer = StackAdamW(stack.flat, (0.9, 0.95), 0.01)
    for _ in range(2):
        stack.flat.grad = None
        stack.losses(*batch).sum().backward()
        optimizer.step(torch.full((3,), 1e-2), torch.ones(3))
    return stack.flat.detach()


def test_changing_one_replicates_batch_leaves_the_others_bit_identical():
    src, tgt_in, tgt_out = _batch()
    other_src, other_in, other_out = _batch(seed=1)
    src2, tgt_in2, tgt_out2 = src.clone(), tgt_in.clone(), tgt_out.clone()
    src2[1], tgt_in2[1], tgt_out2[1] = other_src[1], other_in[1], other_out[1]
    first, second = _stepped((src, tgt_in, tgt_out)), _stepped((src2, tgt_in2, tgt_out2))
    assert torch.equal(first[0], second[0]) and torch.equal(first[2], second[2])
    assert not torch.equal(first[1], second[1])


@pytest.mark.parametrize(
    "compiled",
    [False, pytest.param(True, marks=pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++ compiler"))],
    ids=["eager", "compiled"],
)
def test_stack_adamw_equals_torch_adamw_per_replicate_and_skips_inactive_ones(compiled, monkeypatch):
    # Compiled (as a compiled stack's step runs it): one fused pass, the same update. Dynamo cannot trace the
    # shape checks jaxtyping's pytest hook wraps around annotated methods; outside pytest there are none.
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", compiled)
    torch.manual_seed(0)
    param = torch.randn(3, 40, requires_grad=True)
    singles = [torch.nn.Parameter(param[i].detach().clone()) for i in range(3)]
    torch_opts = [torch.optim.AdamW([p], lr=1.0, betas=(0.9, 0.95), weight_decay=0.01) for p in singles]
    stacked = StackAdamW(param, (0.9, 0.95), 0.01)
    update = torch.compile(stacked.step, dynamic=False) if compiled else stacked.step
    for step in range(8):
        grad = torch.randn(3, 40)
        lrs = [1e-2 * (step + 1), 3e-3, 5e-3]
        active = [1.0, 1.0, float(step < 4)]
        frozen = param.detach()[2].clone()
        param.grad = grad.clone()
        update(torch.tensor(lrs), torch.tensor(active))
        for i in range(3):
            if active[i]:
                singles[i].grad = grad[i].clone()
                torch_opts[i].param_groups[0]["lr"] = lrs[i]
                torch_opts[i].step()
        if not active[2]:
            assert torch.equal(param.detach()[2], frozen)
    for i in range(3):
        torch.testing.assert_close(param.detach()[i], singles[i].detach(), rtol=1e-5, atol=1e-6)
    assert stacked.steps.flatten().tolist() == [8.0, 8.0, 4.0]


def test_dropout_keeps_one_minus_p_with_masks_per_replicate_and_per_step():
    stack = StackedEncoderDecoder.from_seeds(ModelConfig(**{**CFG.to_dict(), "dropout": 0.25}), SEEDS).train()
    ones = torch.ones(3, 64, 40, 32)
    first, second = stack._dropout(ones) != 0, stack._dropout(ones) != 0
    assert abs(first.float().mean().item() - 0.75) < 0.01
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    assert not torch.equal(first, second)
    assert torch.equal(stack.eval()._dropout(ones), ones)


def test_an_unknown_attention_or_a_missing_triton_is_named():
    cfg = ModelConfig(d_model=32, n_heads=2, d_mlp=64, n_encoder_layers=1, n_decoder_layers=1)
    with pytest.raises(ValueError, match="unknown attention 'flex'; choose one of: sdpa, triton, flash"):
        StackedEncoderDecoder(cfg, 2, attention="flex")
    try:
        import triton  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="the triton attention needs the triton package"):
            StackedEncoderDecoder(cfg, 2, attention="triton")
    else:
        assert StackedEncoderDecoder(cfg, 2, attention="triton").attention == "triton"


def test_greedy_answers_stop_at_the_step_every_row_has_ended_and_the_token_budget_is_bounded():
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS).eval()
    src = _batch()[0]
    with torch.no_grad():
        stack.views()["unembed.bias"][:, EOS] += 100.0  # every replicate answers EOS at once
    for budget in (1, 5, CFG.max_len):
        assert stack.greedy_decode(src, budget).tolist() == [[[EOS]] * 6] * 3
    for budget in (0, CFG.max_len + 1):
        with pytest.raises(ValueError, match="max_new_tokens"):
            stack.greedy_decode(src, budget)
    with torch.no_grad():
        stack.views()["unembed.bias"][1:, EOS] -= 100.0  # replicates 1 and 2 answer on
    assert stack.greedy_decode(src, 4).shape == (3, 6, 4)


def test_a_replicate_whose_batch_has_one_target_token_gets_that_tokens_loss():
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS)
    src, tgt_in, tgt_out = _batch()
    tgt_out[0, 1:] = PAD
    tgt_out[0, 0, 1:] = PAD
    total, count = stack.token_losses(src, tgt_in, tgt_out)
    assert count[0] == 1 and (count[1:] > 1).all()
    losses = stack.losses(src, tgt_in, tgt_out)
    torch.testing.assert_close(losses, total / count)
    packed_src = pack_rows(src, (src != PAD).sum(-1), capacity=96)
    packed_tgt = pack_rows(tgt_in, (tgt_in != PAD).sum(-1), capacity=32)
    torch.testing.assert_close(stack.packed_losses(packed_src, packed_tgt, packed_tgt.gather(tgt_out)), losses)


def test_stack_adamws_defaults_are_torch_adamws():
    torch.manual_seed(0)
    param = torch.randn(2, 30, requires_grad=True)
    single = torch.nn.Parameter(param[0].detach().clone())
    torch_opt = torch.optim.AdamW([single], lr=0.1)
    stacked = StackAdamW(param)
    for _ in range(3):
        grad = torch.randn(30)
        param.grad, single.grad = torch.stack([grad, grad]), grad.clone()
        stacked.step(torch.full((2,), 0.1), torch.ones(2))
        torch_opt.step()
    torch.testing.assert_close(param.detach()[0], single.detach(), rtol=1e-4, atol=1e-5)


def test_attention_drops_weights_in_training_and_keeps_their_mean():
    """The padded stack's attention (scaled_dot_product_attention) applies the recipe's attention dropout in
    training only: an output that differs from evaluation's at each draw, with evaluation's output as its mean."""
    stack = StackedEncoderDecoder.from_seeds(ModelConfig(**{**CFG.to_dict(), "dropout": 0.3}), SEEDS)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3 * 6, 4, 14, 8, generator=g) for _ in range(3))
    keep = torch.ones(3, 6, 14, dtype=torch.bool)
    keep[:, :, 11:] = False
    keys = Keys(keep.view(18, 1, 1, 14), keep.sum(-1).view(18), False, 0, shortest=(11, 11))
    with torch.no_grad():
        p = stack.views()
        plain = stack.eval()._attend(p, "encoder.0.attn.", q, k, v, keys)
        stack.train()
        torch.manual_seed(1)
        draws = torch.stack([stack._attend(p, "encoder.0.attn.", q, k, v, keys) for _ in range(400)])
    assert not torch.allclose(draws[0], plain) and not torch.equal(draws[0], draws[1])
    error = (draws.mean(0) - plain).abs()  # 1 / (1 - p) keeps the mean: within 5 standard errors
    assert (error <= 5 * draws.std(0) / len(draws) ** 0.5 + 1e-6).all()


def test_a_model_with_the_stacks_parameter_names_but_other_shapes_is_refused():
    stack = StackedEncoderDecoder.from_seeds(CFG, SEEDS)
    torch.manual_seed(0)
    wider = HookedEncoderDecoder(ModelConfig(**{**CFG.to_dict(), "d_mlp": 128}))
    assert list(dict(wider.named_parameters())) == stack.names
    with pytest.raises(ValueError, match="do not match"):
        stack.load_replicate(0, wider)


def test_the_stacks_layer_norm_uses_the_configured_epsilon():
    """With a large ``ln_eps`` (where it changes the numbers), each replicate's loss is the single model's."""
    cfg = ModelConfig(**{**CFG.to_dict(), "ln_eps": 0.5})
    stack = StackedEncoderDecoder.from_seeds(cfg, SEEDS).eval()
    src, tgt_in, tgt_out = _batch()
    losses = stack.losses(src, tgt_in, tgt_out)
    for index, seed in enumerate(SEEDS):
        single = _single(seed, cfg).eval()
        torch.testing.assert_close(losses[index], loss_fn(single, src[index], tgt_in[index], tgt_out[index]))
