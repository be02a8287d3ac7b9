"""The answer check of a shipped checkpoint: counted, written, read back, and compared with a recount and a card."""

from __future__ import annotations

import json
import re

import pytest

from lsa_interp.evaluation.answer_check import (
    ANSWER_TOLERANCE,
    CHECK_FILE,
    AnswerCheck,
    check_problems,
    count_answers,
    read_answer_check,
    sampling_sd,
    write_answer_check,
)
from lsa_interp.evaluation.run import subsample
from lsa_interp.model import HookedEncoderDecoder, ModelConfig


def _check(correct: int, rows: int = 1000, seed: int = 0, data_seed: int = 0) -> AnswerCheck:
    return AnswerCheck("val", rows, seed, data_seed, correct)


def test_the_count_is_the_right_answers_of_the_seeded_sample(tiny, monkeypatch):
    """A model that answers every third task right (an untrained one would answer none, and 0 == 0 tests nothing)."""
    from lsa_interp.evaluation import answer_check

    decoded = []

    def every_third_right(model, tasks):
        decoded.append(list(tasks))
        return [task.answer if i % 3 == 0 else "?" for i, task in enumerate(tasks)]

    monkeypatch.setattr(answer_check, "predict", every_third_right)
    val = tiny.splits["val"]
    model = HookedEncoderDecoder(ModelConfig(d_model=16, n_heads=2, d_mlp=32, n_encoder_layers=1, n_decoder_layers=1))
    check = count_answers(model, val, data_seed=7, rows=15, seed=3)
    assert decoded == [subsample(val, 15, 3)] and subsample(val, 15, 3) != subsample(val, 15, 0)
    assert check == AnswerCheck("val", 15, 3, 7, 5) and 15 < len(val)


def test_a_check_round_trips_and_a_missing_or_broken_one_is_named(tmp_path):
    path = write_answer_check(_check(812, data_seed=2), tmp_path)
    assert path == tmp_path / CHECK_FILE and read_answer_check(tmp_path) == _check(812, data_seed=2)
    assert not [p for p in tmp_path.iterdir() if p.name != CHECK_FILE]
    with pytest.raises(FileNotFoundError, match="lsa-interp ship"):
        read_answer_check(tmp_path / "none")
    path.write_text(json.dumps({"split": "val", "rows": 10}))
    with pytest.raises(ValueError, match=CHECK_FILE):
        read_answer_check(tmp_path)
    path.write_text(json.dumps({"split": "val", "rows": 10, "seed": 0, "data_seed": 0, "correct": 11}))
    with pytest.raises(ValueError, match="11 right answers of 10"):
        read_answer_check(tmp_path)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"correct": "5"}, "'correct' is \"5\", not a whole number"),  # it raised TypeError: '<=' not supported
        ({"rows": None}, "'rows' is null, not a whole number"),
        ({"rows": 0, "correct": 0}, "'rows' is 0, not a positive count"),  # its percent divided by zero
        ({"correct": -1}, "-1 right answers of 10 rows"),
        ({"split": 0}, "'split' is 0, not a string"),
        ({"seed": 1.5}, "'seed' is 1.5, not a whole number"),
    ],
)
def test_a_malformed_check_is_one_line_naming_the_file_and_the_field(tmp_path, fields, message):
    path = tmp_path / CHECK_FILE
    path.write_text(json.dumps({"split": "val", "rows": 10, "seed": 0, "data_seed": 0, "correct": 5} | fields))
    expected = "; expected the answer check lsa-interp ship writes (ship it again to count one)"
    with pytest.raises(ValueError, match=f"^{re.escape(f'{path}: {message}{expected}')}$"):
        read_answer_check(tmp_path)


def test_a_check_that_is_not_a_json_object_names_the_file(tmp_path):
    (tmp_path / CHECK_FILE).write_text("[1000, 645]")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / CHECK_FILE))}: \[1000, 645\] is not a JSON"):
        read_answer_check(tmp_path)


def test_an_empty_val_split_has_no_answers_to_count():
    model = HookedEncoderDecoder(ModelConfig(d_model=16, n_heads=2, d_mlp=32, n_encoder_layers=1, n_decoder_layers=1))
    with pytest.raises(ValueError, match="^the val split has no tasks to sample the answer check from"):
        count_answers(model, [], data_seed=3)  # it counted a check of 0 rows, whose percent divides by zero


def test_a_recount_may_differ_by_the_tolerance_and_no_more():
    card = (81.0, 44_975)
    assert check_problems(_check(810), _check(810 + ANSWER_TOLERANCE), *card) == []
    assert check_problems(_check(810), _check(810 - ANSWER_TOLERANCE), *card) == []
    (problem,) = check_problems(_check(810), _check(810 + ANSWER_TOLERANCE + 1), *card)
    assert "813 of 1000 val answers right; 810 when it was shipped" in problem
    (problem,) = check_problems(_check(810), _check(810, seed=1), *card)
    assert "another sample" in problem


def test_the_recorded_count_must_fit_the_card_within_four_sampling_sds():
    sd = sampling_sd(81.0, 1000, 44_975)
    assert sd == pytest.approx(100 * (0.81 * 0.19 / 1000 * (44_975 - 1000) / 44_974) ** 0.5)
    assert sampling_sd(81.0, 1000, 1000) == 0.0  # the whole split: no sampling error
    inside = round(10 * (81.0 + 4 * sd))  # 4 sd and the half-answer margin cover it
    outside = round(10 * (81.0 + 4 * sd + 0.05)) + 1
    assert check_problems(_check(inside), _check(inside), 81.0, 44_975) == []
    (problem,) = check_problems(_check(outside), _check(outside), 81.0, 44_975)
    assert f"{outside / 10:.2f}% of 1000 val rows" in problem and "card's 81.00% of 44,975" in problem
    assert len(check_problems(_check(700), _check(760), 81.0, 44_975)) == 2


def test_the_margin_is_half_an_answer_and_its_edge_passes():
    """A sample that is the whole split has no sampling error: only the half-answer margin (0.5 points of 100
    rows) remains, and a count exactly at its edge passes."""
    whole = (_check(50, rows=100), _check(50, rows=100))
    assert check_problems(*whole, 50.5, 100) == []
    (problem,) = check_problems(*whole, 50.52, 100)
    assert "is 0.52 points from the card's 50.52% of 100 (allowed 0.50)" in problem


def test_the_sampling_sd_of_tiny_populations():
    assert sampling_sd(50.0, 1, 1) == 0.0  # one row of one: no finite-population factor to divide by
    assert sampling_sd(50.0, 1, 2) == pytest.approx(50.0)  # one of two rows: factor (2-1)/(2-1)


def test_a_check_file_is_indented_json_and_every_answer_right_reads_back(tmp_path):
    path = write_answer_check(_check(1000), tmp_path)
    assert path.read_text().startswith('{\n  "split": "val",\n') and path.read_text().endswith("}\n")
    assert read_answer_check(tmp_path).correct == 1000
