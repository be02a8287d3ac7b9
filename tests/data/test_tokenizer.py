from __future__ import annotations

import inspect
import itertools
import re

import pytest
import torch

from lsa_interp import Task
from lsa_interp.data.tokenizer import TokenBatch, concat_batches, decode, decode_batch, encode_tasks, source_labels
from lsa_interp.data.vocab import (
    ARROW,
    EOS,
    LETTERS,
    PAD,
    ROLE_ID,
    ROLES,
    SEP,
    VOCAB_SIZE,
    display_token,
    position_labels,
    token_str,
)
from lsa_interp.model import HookedEncoderDecoder
from tests.helpers import TINY

PAPER = Task.parse(f"{LETTERS} | ghi > fhi | bcd > acd")
MIXED = [
    PAPER,
    PAPER.with_answer("acde"),
    Task(LETTERS, (("ghijk", "fhijk"),), "bcdefg", "acdefg"),
    Task.parse(f"{LETTERS} | abc > abd | ijk > ijl | pqrs > pqrt"),
    Task(LETTERS, (("ab", "ac"),), "xy", "xz"),
]
"""Five answered tasks of different encoder and decoder lengths: every row but the longest is padded."""
FIELDS = ("src", "roles", "tgt_in", "tgt_out")
ROW_INDICES = [
    (2, [2]),
    (-1, [4]),
    (-5, [0]),
    (slice(1, 4), [1, 2, 3]),
    (slice(None, None, -2), [4, 2, 0]),
    (slice(3, 1), []),
    ([3, 0, 3], [3, 0, 3]),
    ([], []),
    (torch.tensor([4, -4]), [4, 1]),
    (torch.tensor([True, False, True, False, True]), [0, 2, 4]),
]
"""An index of each kind `TokenBatch.__getitem__` takes and the rows of `MIXED` it selects (-5: the first row)."""


def _own_checks(method):
    """``method`` behind jaxtyping's annotation check only: its own checks and messages. `inspect.unwrap` alone
    also went through mutmut's wrapper to the unmutated method, so no mutant of a message was ever seen."""
    return inspect.unwrap(method, stop=lambda f: "jaxtyping" not in f.__code__.co_filename)


def test_reference_layout_of_the_one_shot_example():
    batch = encode_tasks([PAPER])
    src = batch.src[0].tolist()
    assert len(src) == 39 and src[:26] == list(range(26))
    assert src[26] == SEP and src[27:30] == [6, 7, 8] and src[30] == ARROW and src[31:34] == [5, 7, 8]
    assert src[34] == SEP and src[35:38] == [1, 2, 3] and src[38] == EOS
    assert batch.tgt_in[0].tolist() == [ARROW, 0, 2, 3]
    assert batch.tgt_out[0].tolist() == [0, 2, 3, EOS]


def test_position_labels_are_token_dot_position_with_plain_special_tokens():
    labels = source_labels(PAPER)
    assert labels[:2] == ("a·0", "b·1") and labels[26] == "|·26" and labels[30] == ">·30" and labels[38] == "EOS·38"
    assert len(labels) == 39 and len(set(labels)) == 39
    assert labels == position_labels(display_token(t) for t in encode_tasks([PAPER]).src[0].tolist())
    assert [display_token(t) for t in (SEP, EOS, PAD, ARROW, 6)] == ["|", "EOS", "PAD", ">", "g"]
    assert position_labels(["PAD", "PAD"]) == ("PAD·0", "PAD·1")


def test_roles_of_each_position():
    roles = [ROLES[r] for r in encode_tasks([PAPER]).roles[0].tolist()]
    assert roles[:26] == ["alphabet"] * 26
    assert roles[26:] == [
        "separator",
        *["example_in"] * 3,
        "arrow",
        *["example_out"] * 3,
        "separator",
        *["query"] * 3,
        "eos",
    ]


def test_permuted_alphabet_keeps_letter_ids():
    alphabet = "bacdefghijklmnopqrstuvwxyz"
    batch = encode_tasks([Task.parse(f"{alphabet} | ab > ac | ba > bc")])
    assert batch.src[0, :3].tolist() == [1, 0, 2]


def test_padding_and_roles_of_a_mixed_batch():
    two_shot = Task.parse(f"{LETTERS} | abc > abd | ijk > ijl | pqrs > pqrt")
    batch = encode_tasks([PAPER, two_shot])
    assert batch.src.shape == (2, 26 + 1 + 7 + 1 + 7 + 1 + 4 + 1)
    assert (batch.src[0, 39:] == PAD).all() and (batch.roles[0, 39:] == ROLE_ID["pad"]).all()
    assert batch.src_pad_mask[0].sum() == batch.src.shape[1] - 39
    roles = batch.roles[1].tolist()
    assert roles.count(ROLE_ID["example_in"]) == 6 and roles.count(ROLE_ID["example_out"]) == 6
    assert roles.count(ROLE_ID["query"]) == 4 and roles.count(ROLE_ID["separator"]) == 3
    assert (
        batch.tgt_in.shape == (2, 5)
        and batch.tgt_in[0, 4] == PAD
        and batch.tgt_pad_mask[0].tolist() == [False] * 4 + [True]
    )


def test_tasks_without_answers_have_no_targets():
    batch = encode_tasks([Task.parse(f"{LETTERS} | ghi > fhi | bcd")])
    assert batch.tgt_in is None and batch.tgt_out is None and batch.tgt_pad_mask is None
    answered = encode_tasks([Task.parse(f"{LETTERS} | ghi > fhi | bcd > acd")])
    assert torch.equal(batch.src, answered.src) and torch.equal(batch.roles, answered.roles)
    assert encode_tasks([PAPER], with_answers=False).tgt_in is None
    with pytest.raises(ValueError, match="some tasks have no answer"):
        encode_tasks([Task.parse(f"{LETTERS} | ghi > fhi | bcd")], with_answers=True)
    with pytest.raises(ValueError, match="empty list"):
        encode_tasks([])


def test_decode():
    assert decode([0, 2, 3, EOS, PAD]) == "acd"
    assert decode(torch.tensor([0, SEP, EOS])) == "a|"
    assert decode_batch(torch.tensor([[1, EOS, 5, PAD], [2, 3, 4, PAD]])) == ["b", "cde<pad>"]


def test_ids_outside_the_vocabulary_are_refused_by_name():
    """30 raised "tuple index out of range" and -1 decoded silently as ``>`` (it indexed from the end)."""
    assert decode([0, VOCAB_SIZE - 1]) == "a>" and decode_batch(torch.tensor([[0, VOCAB_SIZE - 1]])) == ["a>"]
    for ids, named in (([30], "[30]"), ([-1], "[-1]"), ([0, EOS, 31, -2, 31], "[-2, 31]")):  # also after EOS
        message = f"token id(s) {named} outside the vocabulary: ids run 0..29"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            decode(ids)
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            decode(torch.tensor(ids))
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            decode_batch(torch.tensor([[PAD] * len(ids), ids]))  # the row after a valid one
    assert decode([]) == "" and decode_batch(torch.zeros(2, 0, dtype=torch.long)) == ["", ""]


def test_a_generated_arrow_stays_in_the_answer_and_only_a_decoder_input_drops_its_start_symbol():
    """Generated tokens hold no start symbol: an output ``> a c d`` is not the answer ``acd``."""
    assert decode([ARROW, 0, 2, 3, EOS, PAD]) == ">acd"
    assert decode_batch(torch.tensor([[ARROW, 1, EOS, 5], [ARROW, ARROW, 4, PAD]])) == [">b", ">>e<pad>"]
    assert decode([ARROW, 0, 2, 3, EOS, PAD], skip_start=True) == "acd"
    assert decode_batch(torch.tensor([[ARROW, 1, EOS, 5], [2, 3, 4, PAD]]), skip_start=True) == ["b", "cde<pad>"]
    assert token_str(ARROW) == ">" and token_str(VOCAB_SIZE - 1) == ">" and token_str(0) == "a"
    for outside in (30, -1):  # -1 would otherwise index from the end
        with pytest.raises(IndexError, match="outside the vocabulary 0..29"):
            token_str(outside)


def test_batch_select_and_to():
    batch = encode_tasks([PAPER, PAPER.with_answer("acde")])
    one = batch.select(torch.tensor([1])).to("cpu")
    assert len(one) == 1 and one.tgt_out[0].tolist() == [0, 2, 3, 4, EOS]


def test_concat_batches_pads_each_tensor_to_the_widest_row():
    short, long = PAPER, Task(LETTERS, (("ghijk", "fhijk"),), "bcdefg", "acdefg")
    joined = concat_batches([encode_tasks([long]), encode_tasks([short, short])])
    together = encode_tasks([long, short, short])
    for name in ("src", "roles", "tgt_in", "tgt_out"):
        assert torch.equal(getattr(joined, name), getattr(together, name)), name
    unanswered = concat_batches([encode_tasks([short]), encode_tasks([Task(LETTERS, (("ab", "ac"),), "bc")])])
    assert unanswered.tgt_in is None and unanswered.tgt_out is None and unanswered.src.shape[0] == 2
    with pytest.raises(ValueError, match="^cannot concatenate an empty list of batches$"):
        concat_batches([])


def test_unknown_symbols_are_named_exactly():
    task = Task(LETTERS, (("ab1", "abc"),), "aB#", "abd")
    with pytest.raises(ValueError, match=r"symbol\(s\) \['#', '1', 'B'\]; allowed"):
        encode_tasks([task])
    accented = Task(LETTERS, (("abc", "abd"),), "abé", "abd")  # non-ASCII: named too, not a codec error
    with pytest.raises(ValueError, match=r"symbol\(s\) \['é'\]; allowed"):
        encode_tasks([accented])
    with pytest.raises(ValueError, match=r"symbol\(s\) \['š'\]; allowed"):  # U+0161: its low byte is "a"
        encode_tasks([Task(LETTERS, (("abc", "abd"),), "abc", "abš")])


def test_select_and_to_carry_every_tensor_and_keep_missing_targets_missing():
    batch = encode_tasks([PAPER, PAPER.with_answer("acde")])
    moved = batch.to("meta")
    fields = ("src", "roles", "tgt_in", "tgt_out")
    assert all(
        getattr(moved, f).device.type == "meta" and getattr(moved, f).shape == getattr(batch, f).shape for f in fields
    )
    second = batch.select(slice(1, 2))
    assert all(torch.equal(getattr(second, f), getattr(batch, f)[1:2]) for f in fields)
    unanswered = encode_tasks([PAPER.with_answer(None)] * 3)
    picked = unanswered.select(torch.tensor([True, False, True]))
    assert len(picked) == 2 and picked.tgt_in is None and picked.tgt_out is None
    assert torch.equal(picked.roles, unanswered.roles[[0, 2]])
    assert unanswered.to("meta").tgt_in is None and unanswered.to("meta").roles.device.type == "meta"


@pytest.mark.parametrize(("rows", "expected"), ROW_INDICES)
def test_indexing_selects_the_rows_of_every_tensor_and_keeps_the_columns(rows, expected):
    batch = encode_tasks(MIXED)
    picked = batch[rows]
    assert isinstance(picked, TokenBatch) and len(picked) == len(expected)
    for name in FIELDS:
        full = getattr(batch, name)
        assert torch.equal(getattr(picked, name), full[expected]) and getattr(picked, name).shape[1] == full.shape[1]


def test_an_int_keeps_a_batch_of_one_row_and_iterating_gives_one_row_batches():
    batch = encode_tasks(MIXED)
    one = batch[3]
    assert one.src.shape == (1, batch.src.shape[1]) and one.tgt_out[0].tolist() == [15, 16, 17, 19, EOS, PAD, PAD]
    rows = list(itertools.islice(batch, 6))  # bounded: a batch that never raised IndexError would iterate forever
    assert len(rows) == 5 and all(torch.equal(row.tgt_in, batch.tgt_in[i : i + 1]) for i, row in enumerate(rows))


def test_indexing_a_batch_without_answers_keeps_its_targets_missing():
    unanswered = encode_tasks([task.with_answer(None) for task in MIXED])
    for rows, expected in ROW_INDICES:
        picked = unanswered[rows]
        assert picked.tgt_in is None and picked.tgt_out is None, rows
        assert all(torch.equal(getattr(picked, name), getattr(unanswered, name)[expected]) for name in FIELDS[:2])


def test_an_index_out_of_range_or_of_another_length_is_an_index_error():
    batch = encode_tasks(MIXED)
    for rows, outside in ((5, [5]), (-6, [-6]), ([0, 7, -9], [7, -9]), (torch.tensor([2, 5]), [5])):
        with pytest.raises(
            IndexError, match=f"^{re.escape(f'row(s) {outside} out of range for a TokenBatch of 5 rows')}$"
        ):
            batch[rows]
    with pytest.raises(
        IndexError, match=r"^index a TokenBatch of 5 rows by an int, .*, not a torch.bool tensor of shape \(4,\)$"
    ):
        batch[torch.tensor([True, False, True, False])]
    getitem = _own_checks(TokenBatch.__getitem__)
    for rows in (torch.tensor([[0, 1]]), torch.tensor(1)):
        given = re.escape(f"not a torch.int64 tensor of shape {tuple(rows.shape)}")
        with pytest.raises(IndexError, match=f"^index a TokenBatch of 5 rows by an int, .*, {given}$"):
            getitem(batch, rows)


def test_any_other_index_is_a_type_error_naming_the_kinds_taken():
    batch = encode_tasks(MIXED)
    allowed = "an int, a slice, a list of ints, a 1-D int64 index tensor or a bool mask of the batch's length"
    getitem = _own_checks(TokenBatch.__getitem__)
    for rows, given in (
        ((0, 1), "tuple"),
        (1.0, "float"),
        (True, "bool"),
        ([0, 1.5], "a list holding float, int"),
        ([True, False], "a list holding bool"),
        (torch.tensor([0.0]), "a torch.float32 tensor"),
        (torch.tensor([0], dtype=torch.int32), "a torch.int32 tensor"),
    ):
        with pytest.raises(TypeError, match=f"^{re.escape(f'index a TokenBatch by {allowed}, not {given}')}$"):
            getitem(batch, rows)
        with pytest.raises(TypeError):
            batch[rows]


def test_the_rows_of_a_batch_give_the_model_the_logits_of_those_rows():
    """Padding is kept, and masked: each row's logits are the same alone, in any selection or in the full batch."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(TINY).eval()
    batch = encode_tasks(MIXED)
    with torch.no_grad():
        full = model(batch)
        for rows, expected in ROW_INDICES:
            if expected:  # the empty selections aside
                torch.testing.assert_close(model(batch[rows]), full[expected], rtol=1e-5, atol=1e-5)
    assert not any(torch.allclose(full[i], full[j]) for i in range(5) for j in range(i))  # a wrong row would be seen


def test_shapes_are_checked_at_runtime():
    """conftest installs jaxtyping's import hook: a wrongly shaped tensor is refused."""
    from jaxtyping import TypeCheckError

    with pytest.raises(TypeCheckError):
        decode_batch(torch.tensor([1, 2, 3]))
    batch = encode_tasks([PAPER])
    with pytest.raises(TypeCheckError):
        type(batch)(batch.src, batch.roles[:, :5])
    with pytest.raises(TypeCheckError):  # a 2-D index is refused by the annotation, before the method's own check
        batch[torch.tensor([[0]])]
