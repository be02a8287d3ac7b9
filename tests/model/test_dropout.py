from __future__ import annotations

import pytest
import torch

from lsa_interp.model.dropout import Dropout, dropout


def test_drops_the_right_fraction_and_keeps_the_mean():
    torch.manual_seed(0)
    x = torch.ones(400, 500)
    out = dropout(x, 0.1, training=True)
    assert abs((out == 0).float().mean().item() - 0.1) < 0.005
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / 0.9))
    assert abs(out.mean().item() - 1.0) < 0.01


def test_identity_outside_training_and_at_p_zero():
    x = torch.randn(10, 10)
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0, training=True) is x
    module = Dropout(0.1).eval()
    assert module(x) is x


def test_masks_follow_the_torch_generator():
    x = torch.randn(64, 64)
    torch.manual_seed(5)
    first = Dropout(0.3).train()(x)
    torch.manual_seed(5)
    assert torch.equal(first, Dropout(0.3).train()(x))
    assert not torch.equal(first, Dropout(0.3).train()(x))


def test_vmapped_members_get_their_own_masks():
    """Under vmap (where the fields are shifted out, not viewed) the members' masks are the documented mask of
    the stacked shape: the same bits as one call on the whole stack."""
    x = torch.ones(3, 16, 9)
    torch.manual_seed(3)
    out = torch.func.vmap(lambda row: dropout(row, 0.5, training=True), randomness="different")(x)
    masks = out == 0
    assert out.shape == x.shape and 0.3 < masks.float().mean() < 0.7
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    torch.manual_seed(3)
    assert torch.equal(out != 0, _spec_keep(x.shape, 0.5))


def _spec_keep(shape: tuple[int, ...], p: float) -> torch.Tensor:
    """The documented mask: one random int64 word per 4 elements of a row; element j reads the word's j%4-th
    16-bit field (from the low bits), keeps its low 15 bits and survives when they are >= round(p * 2^15)."""
    last = shape[-1]
    words = torch.empty(*shape[:-1], (last + 3) // 4, dtype=torch.int64).random_()
    j = torch.arange(last)
    fields = (words[..., j // 4] >> (16 * (j % 4))) & 0x7FFF
    return fields >= round(p * 32768)


def test_mask_is_read_from_four_15_bit_fields_of_each_random_word():
    """Each element's keep decision is the documented function of the generator's int64 words, draw after draw."""
    x = torch.ones(3, 8)
    torch.manual_seed(11)
    outputs = [dropout(x, 0.5, training=True) for _ in range(2)]
    torch.manual_seed(11)
    expected = [_spec_keep(x.shape, 0.5) for _ in range(2)]
    for out, keep in zip(outputs, expected, strict=True):
        assert torch.equal(out != 0, keep)
        assert torch.equal(out[keep], torch.full_like(out[keep], 2.0))


@pytest.mark.parametrize("vmapped", [False, True], ids=["plain", "vmapped"])
def test_a_field_equal_to_the_threshold_is_kept(vmapped):
    """The threshold is round(p * 2^15) and a field equal to it survives (p=0.3: fields >= 9830 are kept), also
    under vmap, where the fields are shifted out of the words."""
    x = torch.ones(2, 32770)
    drop = lambda t: dropout(t, 0.3, training=True)
    torch.manual_seed(2)
    out = torch.func.vmap(drop, randomness="different")(x) if vmapped else drop(x)
    torch.manual_seed(2)
    words = torch.empty(2, 8193, dtype=torch.int64).random_()
    j = torch.arange(32770)
    fields = (words[..., j // 4] >> (16 * (j % 4))) & 0x7FFF
    at_threshold = fields == 9830
    assert at_threshold.any() and (out[at_threshold] != 0).all()
    assert torch.equal(out != 0, fields >= 9830)


def test_the_mask_depends_on_the_shape_not_the_memory_layout():
    """A transposed (non-contiguous) input and a 3-D input get the documented row-major mask of their shape."""
    transposed = torch.ones(8, 3).t()
    assert not transposed.is_contiguous()
    for x in (transposed, torch.ones(2, 3, 8)):
        torch.manual_seed(12)
        out = dropout(x, 0.5, training=True)
        torch.manual_seed(12)
        assert torch.equal(out != 0, _spec_keep(tuple(x.shape), 0.5))


def test_the_output_has_the_input_dtype_and_its_exact_scale():
    """float64 keeps its precision (the kept value is exactly 1/(1-p) in float64) and bfloat16 stays bfloat16."""
    for dtype in (torch.float64, torch.bfloat16):
        x = torch.ones(6, 40, dtype=dtype)
        torch.manual_seed(9)
        out = dropout(x, 0.3, training=True)
        kept = out[out != 0]
        assert out.dtype == dtype and kept.numel() > 0
        assert torch.equal(kept, torch.full_like(kept, 1.0 / 0.7))
