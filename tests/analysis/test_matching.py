"""Matching-head scores and detection on the planted model (a known matching head) and on models without one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lsa_interp.analysis import matching
from lsa_interp.analysis.matching import (
    MATCHING_RULES,
    MATCHING_THRESHOLD,
    MatchingScores,
    control_head,
    detect_matching_heads,
    example_pattern,
    expand_checkpoints,
    matching_analysis,
    matching_head,
    matching_occurrence,
    matching_scores,
    matching_tasks,
)
from lsa_interp.analysis.planted import PLANTED_HEAD, planted_model
from lsa_interp.analysis.prompts import rule_tasks
from lsa_interp.data.task import Task
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR
from lsa_interp.model.heads import Head

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def planted():
    return planted_model()


@pytest.fixture(scope="module")
def plain():
    """The planted model without its matching head."""
    return planted_model(matching=False)


@pytest.fixture(scope="module")
def uniform():
    """Every encoder head exactly uniform (zero query and key weights)."""
    model = planted_model(matching=False)
    with torch.no_grad():
        for layer in model.encoder.layers():
            layer.attn.in_proj_weight[: 2 * model.cfg.d_model] = 0.0
            layer.attn.in_proj_bias.zero_()
    return model


@pytest.fixture(scope="module")
def tasks():
    return matching_tasks(n_per_rule=3)


RUNNING_EXAMPLE = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd")


def test_detection_finds_exactly_the_planted_head(planted, tasks):
    assert detect_matching_heads(planted, tasks=tasks) == [PLANTED_HEAD]
    assert matching_head(planted, tasks=tasks) == PLANTED_HEAD


def test_no_head_detected_without_the_plant(plain, tasks):
    assert detect_matching_heads(plain, tasks=tasks) == []
    with pytest.raises(ValueError, match="no matching head.*threshold 0.25"):
        matching_head(plain, tasks=tasks)


def test_planted_head_scores_near_one_and_other_heads_near_zero(planted, tasks):
    scores = matching_scores(planted, tasks)
    score = scores.score
    assert score[PLANTED_HEAD.layer, PLANTED_HEAD.head] > 0.9
    others = torch.ones_like(score, dtype=torch.bool)
    others[PLANTED_HEAD.layer, PLANTED_HEAD.head] = False
    assert score[others].abs().max() < 0.1
    # The planted head sends every letter to the alphabet, never to the example input.
    assert scores.by_roles["query", "alphabet"][1, 2] > 0.99
    assert scores.by_roles["example_out", "alphabet"][1, 2] > 0.99
    assert scores.by_roles["example_out", "example_in"][1, 2] < 0.05


def test_baseline_is_the_uniform_mass_counted_by_hand(uniform):
    # ghi > fhi | bcd: partners g:1 h:2 i:2 (example in), f:1 h:2 i:2 (example out), b c d: 1 each = 13
    # over 9 letters; 39 keys.
    scores = matching_scores(uniform, [RUNNING_EXAMPLE])
    assert scores.n_letters == 9
    assert scores.baseline == pytest.approx(13 / (9 * 39))
    torch.testing.assert_close(scores.mass, torch.full_like(scores.mass, 13 / (9 * 39)))
    assert scores.score.abs().max() < 1e-6 and scores.heads() == []


def test_threshold_is_applied(planted, tasks):
    scores = matching_scores(planted, tasks)
    best = float(scores.score.max())
    assert scores.heads(best + 0.01) == [] and scores.heads(best) == [PLANTED_HEAD]
    assert 0 < MATCHING_THRESHOLD < best


def test_example_pattern_of_the_planted_head(planted):
    block = example_pattern(planted, PLANTED_HEAD, rule="pred", n=6, length=4)
    assert block.shape == (4, 4)
    assert float(block.max()) < 0.01  # it reads the alphabet, not the example input
    with pytest.raises(ValueError, match="not an encoder self-attention head"):
        example_pattern(planted, Head("decoder", 0, 0, "cross_attn"))


def test_matching_analysis_result(planted, tasks, tmp_path):
    result = matching_analysis(planted, "planted", tasks=tasks)
    assert result.summary["matching_heads"] == "2.3" and result.findings[0].holds is True
    assert len(result.figures) == 2
    paths = result.write(tmp_path)
    report = json.loads(paths["json"].read_text())
    assert len(report["data"]["score"]) == 3 and len(report["data"]["score"][0]) == 4
    assert report["data"]["example_pattern"]["head"] == "2.3"


def test_occurrence_counts_runs_per_group(planted, plain, tasks):
    result = matching_occurrence({"copy": [planted, planted_model(seed=1)], "nocopy": [plain, planted]}, tasks=tasks)
    assert result.summary["copy"] == "2/2" and result.summary["nocopy"] == "1/2"
    assert result.data["rates"] == {"copy": 1.0, "nocopy": 0.5}
    assert result.findings[0].holds is True
    assert [row["has_matching_head"] for row in result.data["runs"]["nocopy"]] == [False, True]


def test_occurrence_reads_checkpoints_and_run_directories(planted, plain, tasks, tmp_path):
    save_model(planted, tmp_path / "copy-s1" / "model")
    save_model(planted, tmp_path / "copy-s2" / "replicate-0" / "model")
    save_model(plain, tmp_path / "copy-s2" / "replicate-1" / "model")
    paths = expand_checkpoints(str(tmp_path / "copy-s*"))
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        "copy-s1/model",
        "copy-s2/replicate-0/model",
        "copy-s2/replicate-1/model",
    ]
    result = matching_occurrence({"copy": paths}, tasks=tasks)
    assert result.summary["copy"] == "2/3"
    assert [row["model"] for row in result.data["runs"]["copy"]] == [str(p) for p in paths]  # named by path
    with pytest.raises(ValueError, match="no checkpoint matches"):
        expand_checkpoints(str(tmp_path / "nocopy-*"))


def test_shipped_checkpoints_are_found_by_name_or_glob_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert expand_checkpoints("copy-20") == [CHECKPOINTS_DIR / "copy-20"]
    assert expand_checkpoints("checkpoints/nocopy-20") == [CHECKPOINTS_DIR / "nocopy-20"]
    replicates = expand_checkpoints("replicates/copy-20-s*")
    assert replicates and all(path.parent == CHECKPOINTS_DIR / "replicates" for path in replicates)
    (tmp_path / "copy-20").mkdir()  # the working directory comes first
    assert expand_checkpoints("copy-20") == [Path("copy-20")]


def test_bad_inputs_raise(planted):
    with pytest.raises(ValueError, match="at least one task"):
        matching_scores(planted, [])
    with pytest.raises(ValueError, match="group 'copy' has no checkpoints"):
        matching_occurrence({"copy": []})


@pytest.mark.parametrize("batch_size", [0, -1])
def test_a_batch_size_below_one_is_refused(planted, batch_size):
    with pytest.raises(
        ValueError, match=rf"^batch_size must be at least 1 \(tasks scored at a time\), got {batch_size}$"
    ):
        matching_scores(planted, [RUNNING_EXAMPLE], batch_size=batch_size)


def test_occurrence_raises_what_loading_a_checkpoint_raises(tmp_path):
    """As documented (and as the CLI's exit code 2 expects): FileNotFoundError for a missing checkpoint, ValueError for
    a broken one."""
    with pytest.raises(FileNotFoundError, match="no checkpoint named or at 'nope-xyz'"):
        matching_occurrence({"copy": ["nope-xyz"]}, tasks=[RUNNING_EXAMPLE])
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupted"):
        matching_occurrence({"copy": [tmp_path]}, tasks=[RUNNING_EXAMPLE])


PADDED = [RUNNING_EXAMPLE, Task.parse("abcdefghijklmnopqrstuvwxyz | wxyz > wxya | mnop")]
"""39 and 42 positions: the first prompt is padded by 3 in a batch of both."""


def test_baseline_on_a_padded_batch_counts_each_prompts_own_keys(uniform):
    """The uniform baseline divides each letter's partners by its own prompt's non-PAD keys, not the padded width."""
    # Second prompt: wxyz -> alphabet + w,x,y in the output (7), wxya -> alphabet + w,x,y in the input (7),
    # mnop -> alphabet (4) = 18 partners over 12 letters and 42 keys; the first has 13 over 9 letters and 39 keys.
    expected = (13 / 39 + 18 / 42) / 21
    for batch_size in (128, 1):
        scores = matching_scores(uniform, PADDED, batch_size=batch_size)
        assert scores.n_letters == 21
        assert scores.baseline == pytest.approx(expected)
        torch.testing.assert_close(scores.mass, torch.full_like(scores.mass, expected))


def test_role_pairs_average_over_the_letters_that_have_a_partner_there(uniform):
    """by_roles[(q, k)] is the mean mass on k-role partners over the q-role letters having one; absent if none."""
    by_roles = matching_scores(uniform, PADDED).by_roles
    split = matching_scores(uniform, PADDED, batch_size=1).by_roles  # summed over batches
    assert split.keys() == by_roles.keys()
    for key, value in split.items():
        torch.testing.assert_close(value, by_roles[key])
    expected = {
        ("query", "alphabet"): (3 / 39 + 4 / 42) / 7,
        ("example_in", "alphabet"): (3 / 39 + 4 / 42) / 7,
        ("example_out", "example_in"): (2 / 39 + 3 / 42) / 5,  # h, i and w, x, y
        ("example_in", "example_out"): (2 / 39 + 3 / 42) / 5,
    }
    for key, value in expected.items():
        torch.testing.assert_close(by_roles[key], torch.full((3, 4), value))
    assert ("query", "example_in") not in by_roles and ("example_in", "query") not in by_roles
    assert all(q != k and q != "alphabet" for q, k in by_roles)


def _scores(score: list[list[float]], baseline: float = 0.125) -> MatchingScores:
    return MatchingScores(torch.tensor(score) + baseline, baseline, {}, 1)


def test_heads_are_listed_best_first_and_the_threshold_is_inclusive():
    """heads() keeps every head at or above the threshold, highest score first; best() is the argmax."""
    scores = _scores([[0.375, 0.0, 0.5], [0.25, 0.875, -0.25]])  # exact in binary, baseline included
    h = lambda layer, head: Head("encoder", layer, head)
    assert scores.heads(0.25) == [h(1, 1), h(0, 2), h(0, 0), h(1, 0)]
    assert scores.heads(0.375) == [h(1, 1), h(0, 2), h(0, 0)]
    assert scores.heads() == scores.heads(MATCHING_THRESHOLD) and scores.heads(0.9) == []
    assert scores.best() == (h(1, 1), 0.875)
    assert _scores([[0.0, 0.125], [0.25, 0.75]]).best() == (h(1, 1), 0.75)  # flat index -> (layer, head)
    assert _scores([[0.0, 0.75, 0.0], [0.25, 0.5, 0.0]]).best() == (h(0, 1), 0.75)


def test_control_head_is_the_lowest_scoring_head_of_the_same_layer():
    """The control head shares the layer of the patched head and has that layer's lowest score."""
    score = torch.tensor([[0.5, -1.0, 0.2], [0.3, 0.9, 0.1]])
    assert control_head(score, Head("encoder", 1, 1)) == Head("encoder", 1, 2)
    assert control_head(score, Head("encoder", 0, 0)) == Head("encoder", 0, 1)


def test_no_head_found_shows_the_best_head_and_does_not_hold(plain, tasks):
    """Without a matching head the finding fails, names no head and shows the best head's example pattern."""
    result = matching_analysis(plain, "plain", tasks=tasks, threshold=0.3)
    scores = matching_scores(plain, tasks)
    best, best_score = scores.best()
    finding = result.findings[0]
    assert finding.holds is False and finding.value == pytest.approx(best_score) and "0.3" in finding.detail
    assert result.summary["matching_heads"] == "none" and result.summary["best_head"] == best.label
    assert result.summary["threshold"] == 0.3 and result.summary["letters_scored"] == scores.n_letters
    assert result.summary["baseline"] == pytest.approx(scores.baseline)
    assert result.data["example_pattern"]["head"] == best.label and result.data["example_pattern"]["rule"] == "pred"
    torch.testing.assert_close(result.data["score"], scores.score)
    torch.testing.assert_close(result.data["mass"], scores.mass)
    assert result.data["baseline"] == result.summary["baseline"] and result.summary["best_score"] == best_score
    torch.testing.assert_close(result.data["by_roles"]["query->alphabet"], scores.by_roles["query", "alphabet"])
    assert result.model == "plain" and result.name == "matching_heads"
    assert finding.name == "matching head"
    assert finding.paper == "one encoder head (2.7) matches each letter to the same letter in another role"
    assert finding.ours == f"none (best {best.label}: {best_score:.2f} above uniform)"
    heatmap = result.figures["matching score per encoder head"]
    assert heatmap.layout.title.text == "matching score (threshold 0.3)"


def test_a_lower_threshold_lists_every_head_reaching_it(planted, tasks):
    """The analysis lists all heads at or above its threshold, best first, and holds."""
    result = matching_analysis(planted, "planted", threshold=-1.0, tasks=tasks)
    labels = result.summary["matching_heads"].split(", ")
    assert len(labels) == 12 and labels[0] == "2.3" and result.findings[0].holds is True


def test_occurrence_verdict_needs_more_copy_runs_than_nocopy_runs(planted, plain, tasks):
    """copy must beat no-copy strictly; groups other than copy/no-copy give no verdict."""
    tie = matching_occurrence({"copy": [plain, planted], "nocopy": [planted, plain]}, tasks=tasks)
    assert tie.findings[0].holds is False and tie.data["rates"] == {"copy": 0.5, "nocopy": 0.5}
    assert matching_occurrence({"nocopy": [planted], "copy": [plain]}, tasks=tasks).findings[0].holds is False
    other = matching_occurrence({"copy": [planted], "other": [plain]}, threshold=0.5, tasks=tasks)
    assert other.findings[0].holds is None and other.summary == {"copy": "1/1", "other": "0/1", "threshold": 0.5}
    run = other.data["runs"]["copy"][0]
    assert run["model"] == "copy[0]" and run["heads"] == ["2.3"] and run["best_head"] == "2.3"
    assert run["best_score"] > 0.9
    assert "copy 1/1, other 0/1" in other.findings[0].ours and other.model == "copy, other"  # the groups


def test_given_tasks_are_scored_and_the_defaults_only_without_them(planted, monkeypatch):
    """Every entry point scores the tasks it is given; matching_tasks() is the default only when none are."""
    mine = [RUNNING_EXAMPLE]

    def no_defaults(*args, **kwargs):
        raise AssertionError("the default tasks were used although tasks were given")

    monkeypatch.setattr(matching, "matching_tasks", no_defaults)
    assert detect_matching_heads(planted, tasks=mine) == [PLANTED_HEAD]
    assert matching_head(planted, tasks=mine) == PLANTED_HEAD
    assert matching_occurrence({"copy": [planted]}, tasks=mine).summary["copy"] == "1/1"
    assert matching_analysis(planted, "planted", tasks=mine).summary["letters_scored"] == 9
    monkeypatch.setattr(matching, "matching_tasks", lambda: mine)
    assert matching_scores(planted).n_letters == 9
    assert matching_occurrence({"copy": [planted]}).summary["copy"] == "1/1"


def test_analysis_shows_the_example_pattern_of_the_requested_rule(planted):
    """The example-out x example-in block is averaged over tasks of the given rule (extend_sequence: 6 x 5)."""
    result = matching_analysis(planted, "planted", rule="extend_sequence", tasks=[RUNNING_EXAMPLE])
    shown = result.data["example_pattern"]
    assert shown["rule"] == "extend_sequence" and tuple(shown["matrix"].shape) == (6, 5)
    assert "example-out -> example-in (extend_sequence)" in " ".join(result.figures)


def test_occurrence_finding_compares_with_the_papers_counts(planted):
    """The occurrence finding is named for it and states the paper's 20/20 vs 5/20."""
    finding = matching_occurrence({"copy": [planted]}, tasks=[RUNNING_EXAMPLE]).findings[0]
    assert finding.name == "matching-head occurrence"
    assert finding.paper == "20/20 copy runs vs 5/20 no-copy runs (20 alphabets)"


@pytest.fixture(scope="module")
def random_model():
    torch.manual_seed(5)
    cfg = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=1, d_mlp=32, dropout=0.0, max_len=64)
    return HookedEncoderDecoder(cfg).eval()


def test_example_pattern_defaults_are_20_pred_tasks_of_5_letters_seed_0(random_model, monkeypatch):
    """By default the block averages 20 pred tasks of 5-letter windows on permuted alphabets, seed 0."""
    head = Head("encoder", 1, 1)
    calls = []
    monkeypatch.setattr(matching, "rule_tasks", lambda *a, **k: calls.append((a, k)) or rule_tasks(*a, **k))
    block = example_pattern(random_model, head)
    assert calls == [(("pred", 20), {"seed": 0, "alphabets": "permuted", "lengths": (5,)})]
    assert block.shape == (5, 5)
    torch.testing.assert_close(block, example_pattern(random_model, head, "pred", 20, 5, 0), rtol=0, atol=0)
    assert calls[1] == (("pred", 20), {"seed": 0, "alphabets": "permuted", "lengths": (5,)})
    example_pattern(random_model, head, "succ", 7, 4, 3)
    assert calls[2] == (("succ", 7), {"seed": 3, "alphabets": "permuted", "lengths": (4,)})


def test_example_pattern_averages_the_most_common_shape(uniform):
    """When example lengths vary (sort_group), only the tasks of the most common block shape are averaged."""
    # 40 sort_group tasks of 3-letter groups: 22 have 6-letter examples, 18 have 9-letter ones.
    block = example_pattern(uniform, Head("encoder", 0, 0), "sort_group", n=40, length=3)
    assert block.shape == (6, 6)
    with pytest.raises(ValueError, match="not an encoder self-attention head"):
        example_pattern(uniform, Head("decoder", 0, 0))


def test_role_pairs_count_letters_not_keys(uniform):
    """A pair's mean is over the scoring letters: two query b's share one alphabet b but count twice."""
    by_roles = matching_scores(uniform, [Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bbc")]).by_roles
    torch.testing.assert_close(by_roles["query", "alphabet"], torch.full((3, 4), 1 / 39))


def test_default_tasks_are_20_per_rule_on_standard_and_permuted_alphabets(monkeypatch):
    """matching_tasks draws n_per_rule tasks per rule on the standard alphabet, then as many on permuted ones."""
    calls = []
    monkeypatch.setattr(matching, "rule_tasks", lambda *a, **k: calls.append((a, k)) or [RUNNING_EXAMPLE])
    assert matching_tasks() == [RUNNING_EXAMPLE] * 2 * len(MATCHING_RULES)
    assert calls == [
        ((rule, 20), {"seed": 0, "alphabets": kind}) for rule in MATCHING_RULES for kind in ("standard", "permuted")
    ]
    calls.clear()
    matching_tasks(3, seed=4, rules=("sort",))
    assert calls == [
        (("sort", 3), {"seed": 4, "alphabets": "standard"}),
        (("sort", 3), {"seed": 4, "alphabets": "permuted"}),
    ]
