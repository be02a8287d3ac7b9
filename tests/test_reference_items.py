"""analyses/reference_items.py: our models on the authors' item file, row for row beside their model's answers,
grouped by whose training alphabets a row's alphabet is."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lsa_interp.data import STANDARD_ALPHABET, make_alphabets
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.checkpoint import save_model
from tests.helpers import TINY, load_script

NEW = make_alphabets(20, 77, exclude=make_alphabets(20, 0), include_standard=False)[0]  # in neither training set


def _spaced(letters: str) -> str:
    return " ".join(letters)


def _row(alphabet: str, testlet: str, rule: str, distribution: str, correct: int, answer: str = "bcdf") -> dict:
    return {
        "model": "copy_20",
        "A": _spaced("abc"),
        "B": _spaced("abd"),
        "C": _spaced("bcde"),
        "D": _spaced(answer),
        "testlet": testlet,
        "alphabet": _spaced(alphabet),
        "n_perm": "5",
        "transformation": rule,
        "query_length": "4",
        "distribution": distribution,
        "pred": "",
        "correct": str(correct),
    }


@pytest.fixture
def items(tmp_path):
    rows = [
        _row(NEW, "unseen alphabets", "succ", "in", 1),
        _row(NEW, "unseen alphabets", "succ", "in", 0),
        _row(NEW, "unseen alphabets", "pred", "in", 1),
        _row(NEW, "unseen alphabets", "reverse", "out-of", 0, "edcb"),
        _row(NEW, "seen alphabets", "succ", "in", 1),
        _row(STANDARD_ALPHABET, "seen alphabets", "succ", "in", 1),  # the standard alphabet: ours trained on it
    ]
    path = tmp_path / "results_copy_20.csv"
    pd.DataFrame(rows).to_csv(path)
    return path


def test_rows_are_compared_with_their_model_in_the_groups_of_alphabets(tmp_path, items, monkeypatch):
    script = load_script("analyses/reference_items.py")
    monkeypatch.setattr(
        script, "predict", lambda model, tasks, size: [t.answer if t.transformation == "succ" else "" for t in tasks]
    )
    model = tmp_path / "m"
    save_model(HookedEncoderDecoder(TINY), model, metadata={"preset": "copy-20", "seed": 0, "data_seed": 0})
    out = tmp_path / "items.json"
    assert script.main(["--items", str(items), "--model", str(model), "--out", str(out)]) == 0
    found = json.loads(out.read_text())["models"][str(model)]
    new_in = found["new_to_both"]["in"]
    assert new_in["rows"] == 3 and new_in["ours"] == pytest.approx(200 / 3, abs=0.01)
    assert new_in["theirs"] == pytest.approx(200 / 3, abs=0.01)
    assert (new_in["both_right"], new_in["only_ours"], new_in["only_theirs"]) == (1, 1, 1)
    assert found["new_to_both"]["out-of"] == {
        "rows": 1,
        "ours": 0.0,
        "theirs": 0.0,
        "both_right": 0,
        "only_ours": 0,
        "only_theirs": 0,
    }
    assert found["their_training_alphabets"]["in"]["rows"] == 1
    assert found["our_training_alphabets"]["in"]["rows"] == 1 and found["standard_alphabet_rows"] == 1
    assert found["new_to_both_in_by_level"] == {
        "5": {"rows": 3, "ours": pytest.approx(66.67), "theirs": pytest.approx(66.67)}
    }


def test_a_file_without_the_expected_columns_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("A,B\nabc,abd\n")
    with pytest.raises(SystemExit) as exit_info:
        load_script("analyses/reference_items.py").main(["--items", str(bad), "--model", "copy-20"])
    assert exit_info.value.code == 2 and "lacks the column(s) C, D" in capsys.readouterr().err
