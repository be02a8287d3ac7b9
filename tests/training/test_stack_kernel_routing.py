"""What a stack with ``attention="triton"`` hands its attention kernel, checked without triton.

The kernel itself is tested against explicit attention in `test_small_attention.py`, which needs the triton
package (CI has none). Here a stand-in with the kernel's signature computes explicit attention and records
each call, so that CI checks the stack's side: every attention of a training step goes to the kernel (and
none of evaluation), with each row's key and query counts, the causal flag, the dropout stream (``call``) of
each layer and kind, the shortest-row hints, and a seed that advances once per step.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from lsa_interp.data.vocab import PAD
from lsa_interp.model import ModelConfig
from lsa_interp.training.packing import pack_rows
from lsa_interp.training.stacked_model import ATTENTION_SEED_SHIFT, CROSS_CALLS, SELF_CALLS, StackedEncoderDecoder
from tests.helpers import explicit_attention, ragged_stack_batch

CFG = ModelConfig(d_model=32, n_heads=2, d_mlp=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
SEEDS = [3, 4]
CALLS = [0, 1, SELF_CALLS, CROSS_CALLS, SELF_CALLS + 1, CROSS_CALLS + 1]
"""The step's attention calls in order: encoder layers 0 and 1, then per decoder layer its self- and cross-attention."""
KINDS = ["encoder", "encoder", "self", "cross", "self", "cross"]


class KernelStandIn:
    """`small_attention` and `packed_small_attention` as explicit attention, recording what each call was given."""

    def __init__(self):
        self.calls: list[dict] = []

    def small_attention(self, q, k, v, key_len, seed, causal, dropout_p, call, query_len, shortest):
        self.calls.append({
            "key_len": key_len.tolist(), "query_len": None if query_len is None else query_len.tolist(),
            "seed": int(seed), "causal": causal, "dropout_p": dropout_p, "call": call, "shortest": shortest,
        })  # fmt: skip
        return explicit_attention(q, k, v, key_len, causal, query_len=query_len)

    def packed_small_attention(self, q, k, v, q_start, q_len, k_start, k_len, widths, seed, causal, drop, call,
                               paired, shortest):  # fmt: skip
        self.calls.append({
            "rows": [t.tolist() for t in (q_start, q_len, k_start, k_len)], "widths": widths, "seed": int(seed),
            "causal": causal, "dropout_p": drop, "call": call, "paired": paired, "shortest": shortest,
        })  # fmt: skip
        out = torch.zeros_like(q)
        for qs, ql, ks, kl in zip(q_start.tolist(), q_len.tolist(), k_start.tolist(), k_len.tolist()):
            row = lambda x, start, n: x[start : start + n].transpose(0, 1)[None]  # [1, head, n, d_head]
            z = explicit_attention(
                row(q, qs, ql), row(k, ks, kl), row(v, ks, kl), torch.tensor([kl]), causal, query_len=torch.tensor([ql])
            )
            out[qs : qs + ql] = z[0].transpose(0, 1)
        return out


@pytest.fixture
def kernel(monkeypatch) -> KernelStandIn:
    """The stand-in, imported by the stack in place of `lsa_interp.training.small_attention`."""
    stand_in = KernelStandIn()
    module = SimpleNamespace(
        small_attention=stand_in.small_attention, packed_small_attention=stand_in.packed_small_attention
    )
    monkeypatch.setitem(sys.modules, "lsa_interp.training.small_attention", module)
    return stand_in


def _stacks():
    return (StackedEncoderDecoder.from_seeds(CFG, SEEDS).train(),
            StackedEncoderDecoder.from_seeds(CFG, SEEDS, attention="triton").train())  # fmt: skip


def test_a_training_step_hands_every_attention_to_the_kernel_with_its_rows_and_stream(kernel):
    src, tgt_in, tgt_out = ragged_stack_batch(src_width=12)
    sdpa, stack = _stacks()
    expected = sdpa.losses(src, tgt_in, tgt_out)
    losses = stack.losses(src, tgt_in, tgt_out, shortest=(4, 3))
    torch.testing.assert_close(losses, expected, rtol=0, atol=1e-5)
    expected.sum().backward()
    losses.sum().backward()
    torch.testing.assert_close(stack.flat.grad, sdpa.flat.grad, rtol=0, atol=1e-5)
    source, target = (src != PAD).sum(-1).flatten().tolist(), (tgt_in != PAD).sum(-1).flatten().tolist()
    assert [call["call"] for call in kernel.calls] == CALLS
    assert [call["causal"] for call in kernel.calls] == [kind == "self" for kind in KINDS]
    assert [call["key_len"] for call in kernel.calls] == [target if kind == "self" else source for kind in KINDS]
    assert [call["query_len"] for call in kernel.calls] == [target if kind == "cross" else None for kind in KINDS]
    hints = {"encoder": (4, 4), "self": (3, 3), "cross": (3, 4)}
    assert [call["shortest"] for call in kernel.calls] == [hints[kind] for kind in KINDS]
    first_seed = (SEEDS[0] << ATTENTION_SEED_SHIFT) + 1
    assert {call["seed"] for call in kernel.calls} == {first_seed} and int(stack.attention_step) == first_seed
    assert {call["dropout_p"] for call in kernel.calls} == {0.0}


def test_the_seed_advances_once_a_training_step_and_evaluation_uses_no_kernel(kernel):
    src, tgt_in, tgt_out = ragged_stack_batch()
    _, stack = _stacks()
    start = int(stack.attention_step)
    stack.losses(src, tgt_in, tgt_out)
    stack.losses(src, tgt_in, tgt_out)
    assert int(stack.attention_step) == start + 2 and len(kernel.calls) == 2 * len(CALLS)
    assert [call["shortest"] for call in kernel.calls[:6]] == [(1, 1)] * 6, "no hint: every tile may be needed"
    stack.eval()
    with torch.no_grad():
        stack.losses(src, tgt_in, tgt_out)
        packed = pack_rows(src, (src != PAD).sum(-1), 40), pack_rows(tgt_in, (tgt_in != PAD).sum(-1), 16)
        stack.packed_losses(*packed, packed[1].gather(tgt_out))
        stack.greedy_decode(src, max_new_tokens=3)
    assert int(stack.attention_step) == start + 2 and len(kernel.calls) == 2 * len(CALLS)


def test_a_packed_training_step_hands_the_kernel_each_side_s_rows(kernel):
    src, tgt_in, tgt_out = ragged_stack_batch()
    sdpa, stack = _stacks()
    expected = sdpa.losses(src, tgt_in, tgt_out)
    packed_src = pack_rows(src, (src != PAD).sum(-1), 40, shortest=4)
    packed_tgt = pack_rows(tgt_in, (tgt_in != PAD).sum(-1), 16, shortest=3)
    start = int(stack.attention_step)
    losses = stack.packed_losses(packed_src, packed_tgt, packed_tgt.gather(tgt_out))
    torch.testing.assert_close(losses, expected, rtol=0, atol=1e-5)
    assert int(stack.attention_step) == start + 1 and {call["seed"] for call in kernel.calls} == {start + 1}
    assert [call["call"] for call in kernel.calls] == CALLS
    assert [call["causal"] for call in kernel.calls] == [kind == "self" for kind in KINDS]
    assert [call["paired"] for call in kernel.calls] == [kind != "cross" for kind in KINDS]
    rows = {side: [t.tolist() for t in (packed.starts, packed.lengths)] for side, packed in
            (("src", packed_src), ("tgt", packed_tgt))}  # fmt: skip
    sides = {"encoder": ("src", "src"), "self": ("tgt", "tgt"), "cross": ("tgt", "src")}
    assert [call["rows"] for call in kernel.calls] == [rows[sides[kind][0]] + rows[sides[kind][1]] for kind in KINDS]
    widths = {"src": packed_src.width, "tgt": packed_tgt.width}
    assert [call["widths"] for call in kernel.calls] == [tuple(widths[s] for s in sides[kind]) for kind in KINDS]
    hints = {"src": 4, "tgt": 3}
    assert [call["shortest"] for call in kernel.calls] == [tuple(hints[s] for s in sides[kind]) for kind in KINDS]


def test_the_kernel_numbers_the_calls_of_at_most_16_layers(kernel):
    layers = lambda n: ModelConfig(d_model=32, n_heads=2, d_mlp=64, n_encoder_layers=n, n_decoder_layers=1)
    assert StackedEncoderDecoder(layers(SELF_CALLS), 1, attention="triton").attention == "triton"
    with pytest.raises(ValueError, match="at most 16 layers"):
        StackedEncoderDecoder(layers(SELF_CALLS + 1), 1, attention="triton")
