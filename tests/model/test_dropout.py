from __future__ import annotations

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
    x = torch.ones(3, 16, 9)
    out = torch.func.vmap(lambda row: dropout(row, 0.5, training=True), randomness="different")(x)
    masks = out == 0
    assert out.shape == x.shape and 0.3 < masks.float().mean() < 0.7
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
