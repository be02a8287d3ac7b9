"""Matching-head scores and detection on the planted model (a known matching head) and on models without one."""

from __future__ import annotations

import json

import pytest
import torch

from lsa_interp.analysis.matching import (
    MATCHING_THRESHOLD,
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
from lsa_interp.analysis.types import Head
from lsa_interp.data.task import Task
from lsa_interp.model import save_model

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
    with pytest.raises(ValueError, match="no checkpoint matches"):
        expand_checkpoints(str(tmp_path / "nocopy-*"))


def test_bad_inputs_raise(planted):
    with pytest.raises(ValueError, match="at least one task"):
        matching_scores(planted, [])
    with pytest.raises(ValueError, match="group 'copy' has no checkpoints"):
        matching_occurrence({"copy": []})
