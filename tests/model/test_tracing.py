"""nnsight over a hooked model: several invokes of one trace run as one batch, each seeing its own rows."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnsight")  # a project dependency; the GPU machine's image lacks it (scripts/device_env_check.sh)

from lsa_interp.model.tracing import TracedModel, traced

SHORT = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"
LONG = "abcdefghijklmnopqrstuvwxyz | ghijklm > fhijklm | bcdefgh"
PATTERN = "encoder.1.attn.hook_pattern"


def _invokes(nn: TracedModel, first, second):
    """Patterns and logits of two invokes of one trace."""
    with torch.no_grad(), nn.trace() as tracer:
        with tracer.invoke(first):
            first_pattern = nn.encoder[1].attn.hook_pattern.output.save()
            first_logits = nn.output.save()
        with tracer.invoke(second):
            second_pattern = nn.encoder[1].attn.hook_pattern.output.save()
            second_logits = nn.output.save()
    return first_pattern, first_logits, second_pattern, second_logits


def test_each_invoke_sees_its_own_rows_of_one_padded_batch(small_model):
    first_pattern, first_logits, second_pattern, second_logits = _invokes(traced(small_model), SHORT, [LONG, SHORT])
    with torch.no_grad():
        _, alone = small_model.run_with_cache(SHORT, names_filter=PATTERN)
        _, pair = small_model.run_with_cache([LONG, SHORT], names_filter=PATTERN)
    assert first_pattern.shape[0] == 1 and second_pattern.shape[0] == 2
    width = alone[PATTERN].shape[-1]
    assert first_pattern.shape[-1] == pair[PATTERN].shape[-1] > width  # padded to the longest input of the trace
    torch.testing.assert_close(first_pattern[..., :width, :width], alone[PATTERN], atol=1e-5, rtol=0)
    torch.testing.assert_close(second_pattern, pair[PATTERN], atol=1e-5, rtol=0)
    assert first_logits.shape[0] == 1 and second_logits.shape[0] == 2


def test_a_pattern_saved_in_one_invoke_patches_the_next(small_model):
    """The clean / corrupted pattern of nnsight (with its barrier): the corrupted invoke takes head 2 of the clean
    one's pattern, as `run_with_hooks` does with the same pattern."""
    clean, corrupted = SHORT, "abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd"
    nn = traced(small_model)
    with torch.no_grad(), nn.trace() as tracer:
        barrier = tracer.barrier(2)  # both invokes reach the layer in the same pass: the clean one reads first
        with tracer.invoke(clean):
            pattern = nn.encoder[1].attn.hook_pattern.output
            barrier()
        with tracer.invoke(corrupted):
            barrier()
            nn.encoder[1].attn.hook_pattern.output[:, 2] = pattern[:, 2]
            patched = nn.output.save()
    with torch.no_grad():
        _, cache = small_model.run_with_cache(clean, names_filter=PATTERN)

        def take_head_2(value, hook):
            value[:, 2] = cache[PATTERN][:, 2]
            return value

        expected = small_model.run_with_hooks(corrupted, fwd_hooks=[(PATTERN, take_head_2)])
        unpatched = small_model.run_with_hooks(corrupted, fwd_hooks=[(PATTERN, lambda value, hook: value)])
    torch.testing.assert_close(patched, expected, atol=1e-5, rtol=0)
    assert (patched - unpatched).abs().max() > 1e-3


def test_one_invoke_runs_its_input_as_given_and_the_model_keeps_its_fused_path(small_model):
    weights = {name: value.clone() for name, value in small_model.state_dict().items()}
    nn = traced(small_model)
    with torch.no_grad(), nn.trace([SHORT, LONG]):
        logits = nn.output.save()
    with torch.no_grad():
        torch.testing.assert_close(logits, small_model([SHORT, LONG]), atol=1e-4, rtol=0)
    assert nn._module is not small_model
    assert all(torch.equal(value, weights[name]) for name, value in small_model.state_dict().items())
    assert nn._batch_size() == 0 and nn._batch_size(LONG) == 1
    assert nn._batch_size(small_model.to_tokens([LONG] * 3)) == 3


def test_an_invoke_of_a_bad_task_names_the_task_problem(small_model):
    nn = traced(small_model)
    with pytest.raises(ValueError), torch.no_grad(), nn.trace() as tracer:
        with tracer.invoke(SHORT):
            nn.output.save()
        with tracer.invoke("abc | d"):
            nn.output.save()


def test_the_first_invokes_keyword_arguments_run_the_whole_pass(small_model):
    """The invokes run as one forward pass, which takes one set of keyword arguments: the first invoke's (here
    ``mask_tgt_pad=False``, which reads the PAD after the shorter answer as a token)."""
    short, long = f"{SHORT} > cde", f"{LONG} > cdefghi"
    nn = traced(small_model)
    with torch.no_grad(), nn.trace() as tracer:
        with tracer.invoke(short, mask_tgt_pad=False):
            first = nn.output.save()
        with tracer.invoke(long):
            second = nn.output.save()
    with torch.no_grad():
        unmasked = small_model([short, long], mask_tgt_pad=False)
        masked = small_model([short, long])
    torch.testing.assert_close(first, unmasked[:1], atol=1e-5, rtol=0)
    torch.testing.assert_close(second, unmasked[1:], atol=1e-5, rtol=0)
    assert (unmasked[0] - masked[0]).abs().max() > 1e-3  # the keyword argument changes the shorter answer's row
