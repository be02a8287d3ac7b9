"""Evaluations and training fits read back from their JSON: every field, or a clear error for an old file."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("field", ["rule_families", "table1", "n_tasks"])
def test_an_evaluation_without_a_field_names_it(field):
    evaluation = json.loads((SHIPPED / "evaluation.json").read_text())
    del evaluation[field]
    with pytest.raises(ValueError, match=f"lacks '{field}'"):
        evaluation_from_dict(evaluation)


def test_a_fit_without_its_permutation_levels_names_them():
    fit = json.loads((SHIPPED / "fit.json").read_text())
    del fit["by_permutation_level"]
    with pytest.raises(ValueError, match="lacks 'by_permutation_level'"):
        fit_from_dict(fit)


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
