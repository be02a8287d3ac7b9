"""Role assignment: separation measures on constructed data, separator attention under a forced pattern."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lsa_interp.analysis.activations import analysis_tasks
from lsa_interp.analysis.roles import (
    KDE_ROLES,
    collect_residuals,
    overlaps,
    pca_hooks,
    probe_accuracy,
    role_assignment,
    role_densities,
    separator_attention,
    silhouette,
)
from lsa_interp.data.tokenizer import source_text
from lsa_interp.data.vocab import ROLE_ID
from lsa_interp.model import HookedEncoderDecoder, ModelConfig

CFG = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=128)
ROLE_IDS = np.array([ROLE_ID[r] for r in KDE_ROLES])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(CFG).eval()


@pytest.fixture(scope="module")
def tasks():
    return analysis_tasks(["pred", "succ"], 12, seed=1)


def clusters(n: int, spread: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points per role around four far-apart centres in 16 dimensions, with Gaussian noise ``spread``."""
    rng = np.random.default_rng(seed)
    roles = np.repeat(ROLE_IDS, n)
    centres = 10.0 * np.eye(16)[: len(ROLE_IDS)]
    x = centres[np.repeat(np.arange(len(ROLE_IDS)), n)] + spread * rng.standard_normal((len(roles), 16))
    return x.astype(np.float32), roles


def test_probe_is_perfect_on_separable_roles_and_at_chance_on_shuffled_ones():
    x, roles = clusters(100, 0.5)
    x_test, roles_test = clusters(100, 0.5, seed=1)
    assert probe_accuracy(x, roles, x_test, roles_test) > 0.99
    shuffled = np.random.default_rng(2).permutation(roles)
    assert probe_accuracy(x, shuffled, x_test, roles_test) < 0.5


def test_silhouette_high_for_clusters_near_zero_for_shuffled_labels():
    x, roles = clusters(100, 0.5)
    assert silhouette(x, roles) > 0.8
    assert abs(silhouette(x, np.random.default_rng(0).permutation(roles))) < 0.1


def test_density_overlap_is_one_for_identical_roles_and_zero_for_distant_ones():
    rng = np.random.default_rng(0)
    blob = rng.standard_normal((200, 2)).astype(np.float32)
    same = np.concatenate([blob] * 4)
    roles = np.repeat(ROLE_IDS, 200)
    _, _, densities = role_densities(same, roles)
    assert all(v == pytest.approx(1.0, abs=1e-6) for v in overlaps(densities).values())
    apart = same + np.repeat(np.arange(4), 200)[:, None] * 50.0
    xs, ys, densities = role_densities(apart.astype(np.float32), roles)
    assert len(xs) == len(ys) and all(d.sum() == pytest.approx(1.0) for d in densities.values())
    assert max(overlaps(densities).values()) < 0.01


def test_residuals_cover_every_non_pad_token(model, tasks):
    x, roles = collect_residuals(model, tasks, pca_hooks(CFG.n_encoder_layers))
    assert list(x) == ["encoder.0.hook_resid_pre", "encoder.1.hook_resid_pre", "encoder.1.hook_resid_post"]
    assert len(roles) == sum(len(source_text(t)) for t in tasks) == x["encoder.0.hook_resid_pre"].shape[0]
    assert (roles == ROLE_ID["eos"]).sum() == len(tasks) and (roles != ROLE_ID["pad"]).all()


def force_onto_first_separator(pattern, hook):
    """All attention of every token onto position 26, the ``|`` after the alphabet."""
    forced = torch.zeros_like(pattern)
    forced[..., 26] = 1.0
    return forced


def test_separator_attention_reports_a_forced_stripe(model, tasks):
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", force_onto_first_separator)]):
        sep = separator_attention(model, tasks)
    assert np.allclose(sep["pipe"], 1.0, atol=1e-6) and np.allclose(sep["arrow"], 0.0)
    tokens = sum(len(source_text(t)) for t in tasks)
    assert sep["uniform"] == pytest.approx(3 * len(tasks) / tokens)  # two '|' and one '>' per 1-shot task
    plain = separator_attention(model, tasks)
    assert (plain["pipe"] + plain["arrow"] < 0.5).all()


def test_role_assignment_result_findings_and_files(model, tasks, tmp_path):
    model.train()
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", force_onto_first_separator)]):
        result = role_assignment(model, tasks, model_name="tiny")
    assert model.training, "the analysis must restore the model's mode"
    model.eval()
    s = result.summary
    assert s["tasks"] == len(tasks) and s["separator_heads"] == CFG.n_heads
    for key in ("silhouette_pca", "silhouette_full", "probe_accuracy"):
        assert -1.0 <= s[f"{key}_before"] <= 1.0 and -1.0 <= s[f"{key}_after"] <= 1.0
    assert [f.holds for f in result.findings][2] is True
    assert len(result.findings) == 3 and all(f.detail for f in result.findings)
    again = role_assignment(model, tasks, model_name="tiny")
    assert again.summary["probe_accuracy_before"] == s["probe_accuracy_before"]  # eval mode: no dropout noise
    assert again.findings[2].holds is False
    paths = result.write(tmp_path)
    assert paths["json"].exists() and "role densities before and after" in paths["html"].read_text()


def test_role_assignment_needs_two_tasks(model, tasks):
    with pytest.raises(ValueError, match="at least 2 tasks"):
        role_assignment(model, tasks[:1])
