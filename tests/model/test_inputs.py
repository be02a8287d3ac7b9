"""Model inputs: tasks, token batches and id tensors to a TokenBatch; attention masks."""

from __future__ import annotations

import re

import jaxtyping
import pytest
import torch

from lsa_interp.data.tokenizer import TokenBatch, encode_tasks
from lsa_interp.data.vocab import ARROW, EOS, PAD, ROLE_ID, VOCAB_SIZE
from lsa_interp.model.inputs import causal_mask, decoder_input_from_generated, key_mask, to_token_batch


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


def test_left_padded_id_tensors_are_refused(make_tasks):
    """Positions are not offset for leading PADs: a left-padded prompt would decode another answer."""
    src = encode_tasks(make_tasks(2)).src
    left = torch.cat([torch.full((2, 3), PAD), src[:, : (src != PAD).sum(1).min()]], dim=1)
    with pytest.raises(ValueError, match="encoder ids must be right-padded"):
        to_token_batch(left)
    right = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    assert torch.equal(to_token_batch(right).src, right)
    inside = src.clone()
    inside[1, 4] = PAD  # a PAD between tokens, not at the row's start
    with pytest.raises(ValueError, match="encoder ids must be right-padded"):
        to_token_batch(inside)


def test_id_tensors_of_a_single_token_id_are_in_the_vocabulary():
    """Every id the same (the smallest equal to the largest) is in range, at either end of the vocabulary."""
    for token in (0, VOCAB_SIZE - 1):
        ids = torch.full((2, 3), token)
        assert torch.equal(to_token_batch(ids).src, ids)


def test_the_start_token_is_on_the_batchs_device():
    src = torch.zeros((2, 3), dtype=torch.long, device="meta")
    batch = to_token_batch(TokenBatch(src, torch.zeros_like(src)), teacher_force=False)
    assert batch.tgt_in.device.type == "meta" and batch.tgt_in.shape == (2, 1) and batch.tgt_in.dtype == torch.long


def test_masks():
    pad = torch.tensor([[False, False, True]])
    keys = key_mask(pad, torch.float32)
    assert keys.shape == (1, 1, 1, 3) and keys[0, 0, 0].tolist() == [0.0, 0.0, float("-inf")]
    causal = causal_mask(pad, torch.float32)[0, 0]
    inf = float("-inf")
    assert causal.tolist() == [[0.0, inf, inf], [0.0, 0.0, inf], [0.0, 0.0, inf]]


def test_masks_follow_the_dtype_and_mask_each_rows_own_padding():
    pad = torch.tensor([[False, False, False], [False, True, True]])
    keys = key_mask(pad, torch.float16)
    assert keys.dtype == torch.float16 and keys.shape == (2, 1, 1, 3)
    assert torch.isinf(keys[:, 0, 0]).tolist() == pad.tolist()
    causal = causal_mask(pad, torch.float64)
    assert causal.dtype == torch.float64 and causal.shape == (2, 1, 3, 3)
    future = torch.ones(3, 3, dtype=torch.bool).triu(1)
    assert torch.isinf(causal[0, 0]).tolist() == future.tolist()
    assert torch.isinf(causal[1, 0]).tolist() == (future | pad[1]).tolist()
    assert (causal[~torch.isinf(causal)] == 0).all() and (causal[torch.isinf(causal)] < 0).all()


def test_decoder_input_from_generated_shifts_right_and_drops_trailing_padding():
    generated = torch.tensor([[1, EOS, PAD, PAD, PAD], [2, 3, EOS, PAD, PAD]])
    assert decoder_input_from_generated(generated).tolist() == [[ARROW, 1, PAD], [ARROW, 2, 3]]
    unfinished = torch.tensor([[4, 5]])  # no EOS yet: every token is fed back
    assert decoder_input_from_generated(unfinished).tolist() == [[ARROW, 4]]
    assert decoder_input_from_generated(torch.tensor([[EOS, PAD]])).tolist() == [[ARROW]]


def test_decoder_input_of_an_empty_generation_is_the_start_column():
    """``generate(..., return_cache=True)`` of an empty batch feeds it on: the ``>`` column of no rows."""
    for width in (0, 3):
        tgt = decoder_input_from_generated(torch.zeros((0, width), dtype=torch.long))
        assert tgt.shape == (0, 1) and tgt.dtype == torch.long


@pytest.mark.parametrize(
    ("tgt", "error", "message"),
    [
        ([[ARROW]], TypeError, "tgt must be a [batch, tgt_pos] int64 tensor, got list"),
        (torch.tensor([[1.0]]), TypeError, "tgt must be a [batch, tgt_pos] int64 tensor, got (1, 1) torch.float32"),
        (torch.tensor([ARROW]), TypeError, "tgt must be a [batch, tgt_pos] int64 tensor, got (1,) torch.int64"),
        (torch.tensor([[ARROW, 99]]), ValueError, f"tgt must be token ids 0..{VOCAB_SIZE - 1} (the vocabulary), got "),
        (torch.tensor([[-5, ARROW]]), ValueError, f"tgt must be token ids 0..{VOCAB_SIZE - 1} (the vocabulary), got "),
    ],
    ids=["list", "float", "1-D", "above", "negative"],
)
def test_a_decoder_input_is_checked_as_the_encoder_ids_are(make_tasks, monkeypatch, tgt, error, message):
    """A ``tgt`` the embedding cannot read is named, not an IndexError, torch RuntimeError or AttributeError. Run
    without the test session's runtime type checker, which would refuse the wrong types first, as a user's Python
    does not."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    span = f"{int(tgt.min())}..{int(tgt.max())}" if error is ValueError else ""
    with pytest.raises(error, match="^" + re.escape(message + span) + "$"):
        to_token_batch(make_tasks(1), tgt=tgt)


def test_decoder_inputs_of_every_token_id_are_taken(make_tasks):
    """Both ends of the vocabulary, PAD among them (fed back unmasked when the model emitted it), and no positions."""
    for tgt in (torch.tensor([[ARROW, 0, VOCAB_SIZE - 1, PAD]]), torch.zeros((1, 0), dtype=torch.long)):
        assert to_token_batch(make_tasks(1), tgt=tgt).tgt_in is tgt


def test_inputs_of_every_kind(make_tasks):
    tasks = make_tasks(2)
    encoded = encode_tasks(tasks)
    assert to_token_batch(encoded) is encoded  # a teacher-forced TokenBatch passes through
    single = to_token_batch(tasks[0])
    assert torch.equal(single.src, encoded.src[:1, : single.src.shape[1]]) and torch.equal(
        single.tgt_out[0], encoded.tgt_out[0, : single.tgt_out.shape[1]]
    )
    tgt = torch.full((2, 3), ARROW)
    forced = to_token_batch(encoded, tgt=tgt)
    assert forced.tgt_in is tgt and forced.tgt_out is None and torch.equal(forced.src, encoded.src)
    plain = to_token_batch(encoded, teacher_force=False)
    assert plain.tgt_in.tolist() == [[ARROW], [ARROW]] and plain.tgt_out is None and plain.tgt_in.dtype == torch.long
    ids = to_token_batch(encoded.src)
    assert ids.tgt_in.tolist() == [[ARROW], [ARROW]] and torch.equal(ids.roles, encoded.roles)
    with pytest.raises(TypeError, match=r"int64 tensor, got \(5,\) torch.int64"):
        to_token_batch(torch.zeros(5, dtype=torch.long))
    for shift in (VOCAB_SIZE, -VOCAB_SIZE):  # every id out of range, and the two ends named
        shifted = encoded.src + shift
        found = f"{int(shifted.min())}..{int(shifted.max())}"
        with pytest.raises(ValueError, match=rf"^encoder ids must be token ids 0\.\.{VOCAB_SIZE - 1} .*, got {found}$"):
            to_token_batch(shifted)
    last = encoded.src.clone()
    last[0, 0] = VOCAB_SIZE  # one id out of range is enough
    with pytest.raises(ValueError, match=rf"got \d+\.\.{VOCAB_SIZE}$"):
        to_token_batch(last)
    unanswered = [t.with_answer(None) for t in tasks]
    assert to_token_batch(unanswered, teacher_force=False).tgt_in.tolist() == [[ARROW], [ARROW]]
    text = to_token_batch(str(tasks[0]))  # a task's text, read by Task.parse, answer and all
    assert torch.equal(text.src, single.src) and torch.equal(text.tgt_in, single.tgt_in)
    mixed = to_token_batch([tasks[0], str(tasks[1])])
    assert torch.equal(mixed.src, encoded.src) and torch.equal(mixed.tgt_in, encoded.tgt_in)
    with pytest.raises(ValueError, match="a task needs 'alphabet"):
        to_token_batch("abc")
    with pytest.raises(ValueError, match="a task needs 'alphabet"):
        to_token_batch([tasks[0], "abc"])
    with pytest.raises(TypeError):  # by the package, or first by the test suite's type checks
        to_token_batch([tasks[0], 3])
    with pytest.raises(ValueError, match="empty list"):
        to_token_batch([])


def test_masks_are_built_on_the_padding_masks_device():
    pad = torch.tensor([[False, True]], device="meta")
    assert key_mask(pad, torch.float32).device.type == "meta"
    assert causal_mask(pad, torch.float32).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_inputs_stay_on_the_inputs_device(make_tasks):
    src = encode_tasks(make_tasks(2)).src.cuda()
    batch = to_token_batch(src)
    assert batch.roles.is_cuda and batch.tgt_in.is_cuda
    assert decoder_input_from_generated(torch.tensor([[1, EOS]], device="cuda")).is_cuda
    pad = src == PAD
    assert key_mask(pad, torch.float32).is_cuda and causal_mask(pad, torch.float32).is_cuda
