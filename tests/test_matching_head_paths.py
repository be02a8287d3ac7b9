"""analyses/matching_head_paths.py: the paths from each model's matching heads, per model."""

from __future__ import annotations

import json

import pytest

from tests.analysis.patch_setup import planted_pairs, saved_planted
from tests.helpers import load_script


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return saved_planted(tmp_path_factory.mktemp("models"))


def test_the_planted_matching_heads_path_runs_into_layer_3s_values(saved, tmp_path, monkeypatch, capsys):
    script = load_script("analyses/matching_head_paths.py")
    monkeypatch.setattr(script, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "paths.json"
    assert script.main(["--model", saved[0], "--model", saved[1], "--pairs", "3", "--out", str(out)]) == 0
    planted, plain = (json.loads(out.read_text())["models"][name] for name in saved)
    assert planted["matching_heads"] == ["2.3"] and planted["pairs_solved"] == 3
    assert planted["whole"]["normalized"] == pytest.approx(1, abs=1e-3) and planted["whole"]["succ_answers"] == 1
    assert planted["whole"]["succ_letters"] == [1, None], "one answer letter; the EOS after it never differs"
    layer3 = planted["modules"]["encoder 3 self-attention"]
    assert list(layer3) == ["q", "k", "v", "q,k,v"]
    assert layer3["v"]["normalized"] == pytest.approx(1, abs=1e-3) and layer3["v"]["succ_answers"] == 1
    assert layer3["v"]["best_head"] == 1 and layer3["v"]["best_head_normalized"] == pytest.approx(1, abs=1e-3)
    assert layer3["q"]["normalized"] == pytest.approx(0, abs=1e-3) and layer3["k"]["succ_answers"] == 0
    assert list(planted["modules"]) == ["encoder 3 self-attention", "decoder 1 cross-attention"]
    assert planted["memory"]["normalized"] == pytest.approx(0, abs=1e-3)
    readout = planted["other_heads"]["3.1"]
    assert readout["whole"]["normalized"] == pytest.approx(1, abs=1e-3)
    assert readout["from_matching_heads"]["normalized"] == pytest.approx(1, abs=1e-3)
    assert list(planted["other_heads"]) == ["3.1"], "no other head carries a quarter of the difference"
    assert planted["changed_positions"] == [31, 33]
    at = planted["at_changed"]
    assert at["whole"]["normalized"] == pytest.approx(1, abs=1e-3) and list(at["into_kv_there"]) == ["encoder 3"]
    assert at["into_kv_there"]["encoder 3"]["normalized"] == pytest.approx(1, abs=1e-3)
    assert list(planted["frozen"]) == ["encoder 3", "all later encoder layers"]
    assert all(cell["normalized"] == pytest.approx(0, abs=1e-3) for cell in planted["frozen"].values())
    assert all(cell["succ_letters"] == [0, None] for cell in planted["frozen"].values())
    assert planted["chains"] == planted["chains_and_direct"] == {}, "no layer between the matching head and the last"
    assert plain["matching_heads"] == [] and "whole" not in plain
    printed = capsys.readouterr().out
    assert "into encoder 3 self-attention (all heads): q 0.00 / k 0.00 / v 1.00 / q,k,v 1.00" in printed
    assert "3.1: whole effect 1.00 / 100%, path from the matching heads into it 1.00 / 100%" in printed
    assert "at the changed positions (31,33) only: whole effect 1.00 / 100%; into k,v there: encoder 3 1.00" in printed
    assert "frozen: encoder 3 0.00 / 0%, all later encoder layers 0.00 / 0%" in printed
    assert "no matching head, 0 pairs solved: no paths" in printed


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    script = load_script("analyses/matching_head_paths.py")
    out = tmp_path / "paths.json"
    assert script.main(["--model", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "matching_head_paths: error:" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit) as info:
        script.main(["--pairs", "0", "--out", str(out)])
    assert info.value.code == 2 and "--pairs must be at least 1" in capsys.readouterr().err


def test_heads_that_cannot_read_the_matching_heads_are_not_followed(saved, tmp_path, monkeypatch):
    script = load_script("analyses/matching_head_paths.py")
    monkeypatch.setattr(script, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    monkeypatch.setattr(script, "OTHER_HEAD_THRESHOLD", -1.0)  # follow every head that could read them
    out = tmp_path / "paths.json"
    assert script.main(["--model", saved[0], "--pairs", "2", "--out", str(out)]) == 0
    followed = json.loads(out.read_text())["models"][saved[0]]["other_heads"]
    assert list(followed) == ["3.1", "3.2", "3.3", "3.4"], "only layer 3 comes after the matching head 2.3"


def test_a_matching_head_in_the_first_layer_is_followed_through_the_second_into_the_third(
    saved, tmp_path, monkeypatch, capsys
):
    """With the planted model's 1.1 taken for its matching head, the chain runs through layer 2's heads (the planted
    head 2.3 among them, which reads the example) into layer 3's, and the layers frozen are 2 and 3."""
    from lsa_interp.model.heads import Head

    script = load_script("analyses/matching_head_paths.py")
    monkeypatch.setattr(script, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    scores = lambda model: type("Scores", (), {"heads": lambda self: [Head("encoder", 0, 0)]})()
    monkeypatch.setattr(script, "matching_scores", scores)
    out = tmp_path / "paths.json"
    assert script.main(["--model", saved[0], "--pairs", "3", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["models"][saved[0]]
    assert list(row["chains"]) == ["encoder 2 -> encoder 3"] and row["matching_heads"] == ["1.1"]
    assert list(row["chains_and_direct"]) == ["encoder 2 -> encoder 3"]  # 1.1 sends nothing here: both measure 0
    assert list(row["frozen"]) == ["encoder 2", "encoder 3", "all later encoder layers"]
    assert "chains from the matching heads through a layer's other heads into the next: encoder 2 -> encoder 3" in (
        capsys.readouterr().out
    )


def test_a_chain_beside_the_direct_path_gets_what_a_matching_head_in_the_hops_layer_sends(saved, tmp_path, monkeypatch):
    """With 1.1 and the planted head 2.3 taken for matching heads, the chain from them through layer 2's other heads
    carries nothing into layer 3 (2.3 sends, it does not relay), and beside their direct path all of it."""
    from lsa_interp.model.heads import Head

    script = load_script("analyses/matching_head_paths.py")
    monkeypatch.setattr(script, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    found = [Head("encoder", 0, 0), Head("encoder", 1, 2)]
    monkeypatch.setattr(script, "matching_scores", lambda model: type("Scores", (), {"heads": lambda self: found})())
    out = tmp_path / "paths.json"
    assert script.main(["--model", saved[0], "--pairs", "3", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["models"][saved[0]]
    assert row["whole"]["normalized"] == pytest.approx(1, abs=1e-3), "the second matching head sends it all"
    assert row["chains"]["encoder 2 -> encoder 3"]["normalized"] == pytest.approx(0, abs=1e-3)
    both = row["chains_and_direct"]["encoder 2 -> encoder 3"]
    assert both["normalized"] == pytest.approx(1, abs=1e-3) and both["succ_letters"] == [1, None]
