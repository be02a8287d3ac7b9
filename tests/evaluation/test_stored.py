"""Evaluations and training fits read back from their JSON: every field, or a clear error for an old file."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from lsa_interp.evaluation.report import markdown_report
from lsa_interp.evaluation.result import NOTES
from lsa_interp.evaluation.stored import (
    evaluation_from_dict,
    fit_from_dict,
    read_evaluation,
    read_fit,
    shipped_evaluation,
)

SHIPPED = Path(__file__).parents[2] / "checkpoints" / "copy-20"


def test_a_shipped_evaluation_and_fit_read_back_to_the_same_json():
    evaluation = json.loads((SHIPPED / "evaluation.json").read_text())
    result = read_evaluation(SHIPPED / "evaluation.json")
    assert result.to_dict() == evaluation
    assert (
        result.n_tasks["seen_alphabets"] == 44_975
        and result.table1.seen_transformations_seen_alphabets.correct == 11_355
    )
    assert result.limit is None
    fit = read_fit(SHIPPED / "fit.json")
    assert fit.to_dict() == json.loads((SHIPPED / "fit.json").read_text())
    assert 0 in fit.by_level["val"]  # permutation levels come back as integers


def test_the_report_of_an_evaluation_read_back_shows_its_numbers():
    result = read_evaluation(SHIPPED / "evaluation.json")
    seen = result.table1.seen_transformations_seen_alphabets
    assert f"{seen.percent:.1f} ({seen.correct}/{seen.total})" in markdown_report(result)


EVALUATION_EXPECTED = "; expected an evaluation written by lsa-interp evaluate or ship"
FIT_EXPECTED = "; expected a training fit written by lsa-interp fit or ship"


def changed(document: dict, keys: str, value) -> dict:
    """A copy of ``document`` with the value at dotted ``keys`` replaced (``...`` deletes it)."""
    document = copy.deepcopy(document)
    *parents, last = keys.split(".")
    inner = document
    for key in parents:
        inner = inner[key]
    if value is ...:
        del inner[last]
    else:
        inner[int(last) if isinstance(inner, list) else last] = value
    return document


@pytest.mark.parametrize("field", ["rule_families", "table1", "n_tasks", "preset", "seen_transformations"])
def test_an_evaluation_without_a_field_names_it(field):
    evaluation = json.loads((SHIPPED / "evaluation.json").read_text())
    with pytest.raises(ValueError, match=f"^the evaluation: no '{field}'{EVALUATION_EXPECTED}$"):
        evaluation_from_dict(changed(evaluation, field, ...))


@pytest.mark.parametrize(
    ("keys", "value", "message"),
    [
        # each raised TypeError or AttributeError, or read back and failed later
        ("table1.new_transformations_new_alphabets_with_standard", ..., "no 'table1.new_transformations_new_alphabets_"
         "with_standard'"),
        ("table1", None, "'table1' is null, not an object"),
        ("table1.seen_transformations_seen_alphabets.correct", "11355", "'table1.seen_transformations_seen_alphabets"
         ".correct' is \"11355\", not a whole number"),
        ("by_transformation.seen_alphabets.succ.total", -1, "'by_transformation.seen_alphabets.succ.total' is -1, "
         "not a count >= 0"),
        ("copy_vs_non_copy.new_alphabets", [], "'copy_vs_non_copy.new_alphabets' is [], not an object"),
        ("by_transformation.seen_alphabets.succ.correct", 10**6, "'by_transformation.seen_alphabets.succ' counts "
         "1000000 right answers of"),
        ("alternate_rule.seen_alphabets.pred.rule", "swap", "'alternate_rule.seen_alphabets.pred.rule' is 'swap', "
         "not one of pred, succ"),
        ("alternate_rule.seen_alphabets.pred.other", 1.5, "'alternate_rule.seen_alphabets.pred.other' is 1.5, not a "
         "whole number"),
        ("rule_families.seen_alphabets.succ.as_rule", None, "'rule_families.seen_alphabets.succ.as_rule' is null, "
         "not an object"),
        ("n_tasks.seen_alphabets", True, "'n_tasks.seen_alphabets' is true, not a whole number"),
        ("seen_transformations", "succ", "'seen_transformations' is \"succ\", not a list"),
        ("seen_transformations.0", 1, "'seen_transformations.0' is 1, not a string"),
        ("model", None, "'model' is null, not a string"),
        ("limit", "200", "'limit' is \"200\", not a whole number or null"),
        ("seconds", "1s", "'seconds' is \"1s\", not a number or null"),
        ("notes", None, "'notes' is null, not a list"),
    ],
)  # fmt: skip
def test_a_damaged_evaluation_names_the_field(keys, value, message):
    evaluation = json.loads((SHIPPED / "evaluation.json").read_text())
    with pytest.raises(ValueError, match=f"^the evaluation: {re.escape(message)}.*{EVALUATION_EXPECTED}$"):
        evaluation_from_dict(changed(evaluation, keys, value))


def test_a_shipped_evaluation_file_without_a_table1_cell_names_the_file_and_the_cell(tmp_path):
    evaluation = json.loads((SHIPPED / "evaluation.json").read_text())
    cell = "table1.new_transformations_new_alphabets_with_standard"
    (tmp_path / "evaluation.json").write_text(json.dumps(changed(evaluation, cell, ...)))
    message = f"{tmp_path / 'evaluation.json'}: no '{cell}'{EVALUATION_EXPECTED}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):  # it raised TypeError: Table1.__init__()
        shipped_evaluation(tmp_path)
    (tmp_path / "evaluation.json").write_text("[]")
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'evaluation.json'))}: \\[\\] is not a JSON obj"):
        read_evaluation(tmp_path / "evaluation.json")


@pytest.mark.parametrize(
    ("keys", "value", "message"),
    [
        ("by_permutation_level", ..., "no 'by_permutation_level'"),
        ("overall.val", ..., "no 'overall.val'"),  # .gap and .to_dict() raised KeyError: 'val'
        ("overall.val", {"correct": 0, "total": 0}, "'overall.val' counts no rows (a fit decodes rows of train and "
         "val)"),  # .gap raised TypeError
        ("overall.train.total", 0, "'overall.train' counts 3974 right answers of 0"),
        ("rows", 0, "'rows' is 0, not a positive count"),
        ("rows", "4000", "'rows' is \"4000\", not a whole number"),
        ("preset", None, "'preset' is null, not a string"),
        ("seed", 0.5, "'seed' is 0.5, not a whole number"),
        ("by_permutation_level.val.two", {"correct": 1, "total": 1}, "'by_permutation_level.val.two' is not a "
         "permutation level (a whole number >= 0)"),
        ("by_transformation.train.succ", None, "'by_transformation.train.succ' is null, not an object"),
    ],
)  # fmt: skip
def test_a_damaged_fit_names_the_field(keys, value, message):
    fit = json.loads((SHIPPED / "fit.json").read_text())
    with pytest.raises(ValueError, match=f"^the training fit: {re.escape(message)}{FIT_EXPECTED}$"):
        fit_from_dict(changed(fit, keys, value))


def test_a_fit_file_that_is_damaged_names_the_file(tmp_path):
    fit = json.loads((SHIPPED / "fit.json").read_text())
    (tmp_path / "fit.json").write_text(json.dumps(changed(fit, "overall.val", ...)))
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'fit.json'))}: no 'overall.val'{FIT_EXPECTED}$"):
        read_fit(tmp_path / "fit.json")


def test_a_shipped_evaluation_is_found_by_name_or_directory_and_a_missing_one_lists_the_names(tmp_path):
    assert shipped_evaluation("copy-20") == read_evaluation(SHIPPED / "evaluation.json")
    replicate = SHIPPED.parent / "replicates" / "copy-20-s1-bf16"
    assert shipped_evaluation("replicates/copy-20-s1-bf16") == shipped_evaluation(replicate)
    assert shipped_evaluation(replicate).model == "replicates/copy-20-s1-bf16"
    with pytest.raises(FileNotFoundError, match=r"at .*copy-2000.*shipped checkpoints: copy-20, copy-200"):
        shipped_evaluation("copy-2000")
    with pytest.raises(FileNotFoundError, match="no evaluation at"):
        shipped_evaluation(tmp_path)  # a directory without one


def test_a_subset_s_limit_its_notes_and_each_family_s_rule_read_back():
    evaluation = json.loads((SHIPPED / "evaluation.json").read_text())
    result = evaluation_from_dict({**evaluation, "limit": 200, "notes": ["a note"]})
    assert result.limit == 200 and result.notes == ("a note",)
    assert evaluation_from_dict({k: v for k, v in evaluation.items() if k != "notes"}).notes == tuple(NOTES)
    families = result.rule_families
    assert families and all(counts.rule == rule for row in families.values() for rule, counts in row.items())
