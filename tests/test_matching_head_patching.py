"""analyses/matching_head_patching.py: the matching heads patched together against their controls, per model."""

from __future__ import annotations

import json

import pytest

from tests.analysis.patch_setup import planted_pairs, saved_planted
from tests.helpers import load_script


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return saved_planted(tmp_path_factory.mktemp("models"))


def test_the_planted_matching_head_carries_the_answer_and_its_control_nothing(saved, tmp_path, monkeypatch, capsys):
    script = load_script("analyses/matching_head_patching.py")
    monkeypatch.setattr(script, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "patching.json"
    assert script.main(["--model", saved[0], "--model", saved[1], "--pairs", "3", "--out", str(out)]) == 0
    planted, plain = (json.loads(out.read_text())["models"][name] for name in saved)
    assert planted["matching_heads"] == ["2.3"] and planted["pairs_solved"] == 3
    together, controls = planted["matching_together"], planted["controls_together"]
    assert together["heads"] == ["2.3"] and together["normalized"] == pytest.approx(1, abs=1e-3)
    assert together["succ_answers"] == 1 and len(controls["heads"]) == 1 and controls["heads"][0].startswith("2.")
    assert controls["normalized"] == pytest.approx(0, abs=1e-3) and controls["succ_answers"] == 0
    assert len(planted["single_heads"]) == 12 and planted["single_heads"]["3.1"]["succ_answers"] == 1
    assert plain["matching_heads"] == [] and plain["pairs_solved"] == 0  # without the head it reads no example letter
    printed = capsys.readouterr().out
    assert "1.00 / 100%" in printed and "none" in printed


def test_a_model_that_solves_no_pair_keeps_its_row_without_patches(saved, tmp_path):
    script = load_script("analyses/matching_head_patching.py")
    out = tmp_path / "patching.json"
    assert script.main(["--model", saved[0], "--pairs", "2", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["models"][saved[0]]
    assert row["pairs_solved"] == 0 and row["pairs_offered"] == 2 and "single_heads" not in row


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    script = load_script("analyses/matching_head_patching.py")
    out = tmp_path / "patching.json"
    assert script.main(["--model", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "matching_head_patching: error:" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit) as info:
        script.main(["--pairs", "0", "--out", str(out)])
    assert info.value.code == 2 and "--pairs must be at least 1" in capsys.readouterr().err
