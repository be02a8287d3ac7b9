"""Model inputs: tasks, token batches and id tensors to a TokenBatch; attention masks."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import ARROW, ROLE_ID
from lsa_interp.model.inputs import causal_mask, key_mask, to_token_batch


def test_tasks_with_answers_are_teacher_forced(make_tasks):
    tasks = make_tasks(3)
    batch = to_token_batch(tasks)
    assert torch.equal(batch.tgt_in, encode_tasks(tasks).tgt_in)
    assert batch.tgt_in[0, 0] == ARROW


def test_without_answers_or_with_teacher_force_off_the_decoder_input_is_the_arrow(make_tasks):
    tasks = make_tasks(3)
    mixed = [tasks[0], tasks[1].with_answer(None), tasks[2]]
    for batch in (to_token_batch(mixed), to_token_batch(tasks, teacher_force=False), to_token_batch(mixed[1])):
        assert batch.tgt_in.shape[1] == 1 and (batch.tgt_in == ARROW).all()
        assert batch.tgt_out is None


def test_id_tensor_gets_roles_and_explicit_tgt(make_tasks):
    reference = encode_tasks(make_tasks(2))
    batch = to_token_batch(reference.src, tgt=reference.tgt_in)
    assert torch.equal(batch.roles, reference.roles) and torch.equal(batch.tgt_in, reference.tgt_in)
    assert batch.roles[0, 0] == ROLE_ID["alphabet"]
    with pytest.raises(ValueError, match="rows"):
        to_token_batch(reference.src, tgt=reference.tgt_in[:1])
    with pytest.raises(TypeError):
        to_token_batch(reference.src.float())


def test_masks():
    pad = torch.tensor([[False, False, True]])
    keys = key_mask(pad, torch.float32)
    assert keys.shape == (1, 1, 1, 3) and keys[0, 0, 0].tolist() == [0.0, 0.0, float("-inf")]
    causal = causal_mask(pad, torch.float32)[0, 0]
    inf = float("-inf")
    assert causal.tolist() == [[0.0, inf, inf], [0.0, 0.0, inf], [0.0, 0.0, inf]]
