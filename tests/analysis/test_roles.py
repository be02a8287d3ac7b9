"""Role assignment: separation measures on constructed data, separator attention under a forced pattern."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from lsa_interp.analysis import roles as roles_module
from lsa_interp.analysis.activations import analysis_tasks, final_norm
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.roles import (
    AFTER,
    BEFORE,
    KDE_ROLES,
    _findings as role_findings,
    balanced_sample,
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
from lsa_interp.data.transformations import SEEN
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
    assert result.name == "roles" and paths == {"json": tmp_path / "roles.json", "html": tmp_path / "roles.html"}
    assert paths["json"].exists() and "role densities before and after" in paths["html"].read_text()


def test_role_assignment_needs_two_tasks(model, tasks):
    with pytest.raises(ValueError, match="at least 2 tasks"):
        role_assignment(model, tasks[:1])


def test_pca_is_fit_on_every_layer_input_and_the_last_output():
    assert pca_hooks(3) == [
        "encoder.0.hook_resid_pre",
        "encoder.1.hook_resid_pre",
        "encoder.2.hook_resid_pre",
        "encoder.2.hook_resid_post",
    ]
    assert pca_hooks(1) == ["encoder.0.hook_resid_pre", "encoder.0.hook_resid_post"]


def test_balanced_sample_takes_at_most_n_distinct_tokens_of_each_plotted_role():
    """At most ``max_per_role`` distinct tokens per `KDE_ROLES` role (all of a smaller role), none of the
    others, as sorted indices; the seed picks which."""
    a, i, q, sep = (ROLE_ID[r] for r in ("alphabet", "example_in", "query", "separator"))
    roles = np.array([a, a, sep, a, i, a, q, a, i, q, sep, q])
    picks = balanced_sample(roles, 3, seed=0)
    assert list(picks) == sorted(set(picks.tolist())) and len(picks) == 3 + 2 + 3
    assert (roles[picks] == a).sum() == 3 and list(picks[roles[picks] != a]) == [4, 6, 8, 9, 11]
    assert len(balanced_sample(roles, 10)) == 10 and ROLE_ID["separator"] not in roles[balanced_sample(roles, 10)]
    draws = {tuple(balanced_sample(roles, 1, seed=s)) for s in range(20)}
    assert len(draws) > 1


def test_silhouette_of_two_hand_placed_roles():
    """Points 0, 1 (alphabet) and 10, 11 (query) on a line: mean of 1 - 1/10.5 and 1 - 1/9.5; tokens of
    roles outside the plot are left out."""
    a, q, sep = ROLE_ID["alphabet"], ROLE_ID["query"], ROLE_ID["separator"]
    x = np.array([[0.0], [1.0], [10.0], [11.0], [5.0], [5.5]])
    roles = np.array([a, a, q, q, sep, sep])
    assert silhouette(x, roles) == pytest.approx((1 - 1 / 10.5 + 1 - 1 / 9.5) / 2)
    with pytest.raises(ValueError):
        silhouette(x, np.array([a, a, a, a, sep, sep]))


def test_probe_accuracy_is_balanced_over_the_plotted_roles_of_the_test_tokens():
    """Balanced accuracy: 90 correct alphabet tokens and 10 query tokens placed among them score 0.5, not 0.9;
    test tokens of other roles are not scored."""
    x, roles = clusters(50, 0.5)
    alphabet = x[roles == ROLE_ID["alphabet"]]
    x_test = np.concatenate([alphabet, alphabet[:40], alphabet[:10], alphabet[:5]])
    y_test = np.repeat([ROLE_ID["alphabet"], ROLE_ID["query"], ROLE_ID["separator"]], [90, 10, 5])
    assert probe_accuracy(x, roles, x_test, y_test) == pytest.approx(0.5)


def test_role_densities_span_the_points_with_a_tenth_of_margin_on_a_y_by_x_grid():
    """The grid runs from 10 % below the smallest to 10 % above the largest coordinate on each axis; densities
    are indexed [y, x] and each sums to 1; a missing role raises."""
    rng = np.random.default_rng(0)
    points = np.concatenate([[-10.0, 0.0] + rng.standard_normal((30, 2)), [10.0, 0.0] + rng.standard_normal((90, 2))])
    roles = np.repeat(ROLE_IDS, 30)
    roles[30:] = np.repeat(ROLE_IDS[1:], 30)
    roles[:30] = ROLE_ID["alphabet"]
    xs, ys, densities = role_densities(points.astype(np.float32), roles)
    lo, hi = points.min(0), points.max(0)
    assert xs[0] == pytest.approx(lo[0] - 0.1 * (hi[0] - lo[0]), rel=1e-5)
    assert xs[-1] == pytest.approx(hi[0] + 0.1 * (hi[0] - lo[0]), rel=1e-5)
    assert ys[0] == pytest.approx(lo[1] - 0.1 * (hi[1] - lo[1]), rel=1e-5) and len(xs) == len(ys) == 60
    peak_y, peak_x = np.unravel_index(densities["alphabet"].argmax(), densities["alphabet"].shape)
    assert xs[peak_x] < -5.0 and abs(ys[peak_y]) < 2.0
    assert all(d.sum() == pytest.approx(1.0) for d in densities.values())
    with pytest.raises(ValueError, match="no query tokens"):
        role_densities(points.astype(np.float32), np.where(roles == ROLE_ID["query"], ROLE_ID["separator"], roles))


def test_overlaps_sum_the_pointwise_minimum_of_each_pair_once():
    d = {"a": np.array([[0.5, 0.5], [0.0, 0.0]]), "b": np.array([[0.25, 0.25], [0.25, 0.25]]), "c": np.eye(2) / 2}
    assert overlaps(d) == pytest.approx({("a", "b"): 0.5, ("a", "c"): 0.5, ("b", "c"): 0.5})
    assert list(overlaps(d)) == [("a", "b"), ("a", "c"), ("b", "c")]
    d["c"] = np.array([[0.0, 0.0], [1.0, 0.0]])
    assert overlaps(d)[("a", "c")] == 0.0 and overlaps(d)[("b", "c")] == 0.25


def test_normed_residuals_are_the_raw_ones_through_the_final_norm(model, tasks):
    raw, _ = collect_residuals(model, tasks[:3], [BEFORE])
    normed, _ = collect_residuals(model, tasks[:3], [BEFORE], normed=True)
    assert np.allclose(normed[BEFORE], final_norm(model, torch.from_numpy(raw[BEFORE])).numpy(), atol=1e-6)


def arrow_stripe(pattern, hook):
    """Every token puts all its attention on the first ``>`` (position 30 of a 1-shot 3-letter task)."""
    forced = torch.zeros_like(pattern)
    forced[..., 30] = 1.0
    return forced


def test_separator_attention_reads_the_given_layer_and_the_arrow():
    """``layer`` picks the encoder layer read; attention on ``>`` is counted as arrow mass."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(CFG).eval()
    three = analysis_tasks(["pred"], 4, seed=0, lengths=(3,))
    with model.hooks(fwd_hooks=[("encoder.1.attn.hook_pattern", arrow_stripe)]):
        second = separator_attention(model, three, layer=1)
        first = separator_attention(model, three)
    assert np.allclose(second["arrow"], 1.0, atol=1e-6) and np.allclose(second["pipe"], 0.0)
    assert (first["arrow"] < 0.5).all() and first["uniform"] == pytest.approx(3 / 39)


def two_stripes(pattern, hook):
    """Heads 1 and 2 of encoder layer 1 put everything on the first ``|`` (position 26); heads 3 and 4 on
    position 0."""
    forced = torch.zeros_like(pattern)
    forced[:, :2, :, 26] = 1.0
    forced[:, 2:, :, 0] = 1.0
    return forced


def test_role_assignment_summary_data_and_separator_heads(model):
    """The tasks split alternately into a fit and a test half; two stripe heads out of four hold the finding."""
    tasks = analysis_tasks(["pred", "sort"], 6, seed=2, lengths=(3, 4))
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", two_stripes)]):
        result = role_assignment(model, tasks, model_name="tiny", normed=False)
    s, data = result.summary, result.data
    plotted = [len(source_text(t)) - 1 - 3 for t in tasks[1::2]]  # all but EOS and the three separators
    assert s["test_tokens"] == sum(plotted) and s["tasks"] == 6
    assert s["separator_heads"] == 2 and data["separator_heads"] == ["1.1", "1.2"]
    assert s["max_separator_mass"] == pytest.approx(1.0)
    assert [row["pipe"] for row in data["separator_attention"]] == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert result.findings[2].holds is True and "2/4 heads (1.1, 1.2)" in result.findings[2].ours
    assert data["hooks"] == {"pca_fit": pca_hooks(2), "before": BEFORE, "after": AFTER, "final_norm": False}
    assert data["transformations"] == ["pred", "sort"] and set(data["overlaps"]) == {"before", "after"}
    assert 0.0 < s["pca_explained_variance"] <= 1.0
    assert s["overlap_in_out_before"] == data["overlaps"]["before"][("example_in", "example_out")]
    assert s["overlap_out_query_after"] == data["overlaps"]["after"][("example_out", "query")]
    assert data["constants"] == {
        "silhouette_margin": 0.05,
        "probe_margin": 0.02,
        "overlap_margin": 0.05,
        "stripe_mass": 0.5,
        "arrow_alone_mass": 0.9,
    }
    assert (s["arrow_head"], s["max_arrow_mass"], s["arrow_alone_heads"]) == ("1.1", 0.0, 0)
    again = role_assignment(model, n_tasks=6, seed=2, transformations=["pred", "sort"], alphabets="both", normed=False)
    assert again.summary["silhouette_pca_after"] == pytest.approx(
        role_assignment(model, analysis_tasks(["pred", "sort"], 6, 2, "both"), normed=False).summary[
            "silhouette_pca_after"
        ]
    )


def role_summary(**overrides) -> dict:
    s = {
        f"{k}_{stage}": 0.5
        for k in ("silhouette_pca", "silhouette_full", "probe_accuracy")
        for stage in ("before", "after")
    }
    s |= {f"overlap_{n}_{stage}": 0.5 for n in ("in_out", "out_query") for stage in ("before", "after")}
    s |= {"uniform_separator_mass": 0.1, "max_separator_mass": 0.5}
    s |= {"arrow_head": "1.2", "max_arrow_mass": 0.4, "arrow_alone_heads": 0}
    return s | overrides


@pytest.mark.parametrize(
    ("overrides", "holds"),
    [
        ({"silhouette_pca_before": 0.0, "silhouette_pca_after": 0.05}, True),
        ({"silhouette_pca_before": 0.0, "silhouette_pca_after": 0.0499}, False),
        ({"silhouette_pca_before": 0.0, "silhouette_pca_after": 0.3, "probe_accuracy_after": 0.48}, True),
        ({"silhouette_pca_before": 0.0, "silhouette_pca_after": 0.3, "probe_accuracy_after": 0.4799}, False),
        ({"silhouette_pca_before": 0.5, "silhouette_pca_after": 0.52}, False),
    ],
)
def test_roles_separate_when_the_silhouette_rises_by_the_margin_and_the_probe_holds(overrides, holds):
    """Silhouette up by >= 0.05 (exactly 0.05 holds) and probe accuracy down by at most 0.02 (exactly holds)."""
    finding = role_findings(role_summary(**overrides), [], 4)[0]
    assert finding.holds is holds and finding.name == "roles separate more after encoder layer 1"


@pytest.mark.parametrize(
    ("after", "holds"), [((0.0, 0.0), True), ((0.0, 1e-4), False), ((1e-4, 0.0), False), ((-0.5, -0.5), True)]
)
def test_example_out_is_apart_when_both_overlaps_fall_by_the_margin(after, holds):
    """Both overlaps (in/out and out/query) must fall by >= 0.05 (exactly 0.05 holds)."""
    overrides = {"overlap_in_out_before": 0.05, "overlap_out_query_before": 0.05}
    overrides |= {"overlap_in_out_after": after[0], "overlap_out_query_after": after[1]}
    finding = role_findings(role_summary(**overrides), [], 4)[1]
    assert finding.holds is holds and finding.name == "example-out no longer overlaps example-in and query"


def test_separator_finding_needs_at_least_two_heads():
    assert role_findings(role_summary(), ["1.1", "1.3"], 4)[2].holds is True
    one = role_findings(role_summary(), ["1.3"], 4)[2]
    assert one.holds is False and one.name == "layer-1 heads attend to the separators"
    assert one.ours.startswith("1/4 heads (1.3)") and "(none)" in role_findings(role_summary(), [], 4)[2].ours


def test_findings_state_the_paper_claim_our_numbers_and_the_rule():
    """The findings table's texts: the paper's claims, our before -> after numbers and each threshold."""
    values = dict(
        silhouette_pca_before=0.11,
        silhouette_pca_after=0.22,
        silhouette_full_before=0.33,
        silhouette_full_after=0.44,
        probe_accuracy_before=0.55,
        probe_accuracy_after=0.66,
        overlap_in_out_before=0.77,
        overlap_in_out_after=0.12,
        overlap_out_query_before=0.88,
        overlap_out_query_after=0.13,
        uniform_separator_mass=0.09,
        max_separator_mass=0.95,
        arrow_head="1.3",
        max_arrow_mass=0.91,
        arrow_alone_heads=1,
    )
    texts = [(f.paper, f.ours, f.detail) for f in role_findings(role_summary(**values), ["1.1", "1.3"], 4)]
    assert texts == [
        (
            "roles cluster to some degree before layer 1, much more clearly after it (PCA(2) + KDE)",
            "silhouette (PCA plane) 0.11 -> 0.22; full space 0.33 -> 0.44; role probe (balanced acc.) 0.55 -> 0.66",
            "holds when the PCA-plane silhouette rises by >= 0.05 and the probe accuracy falls by < 0.02",
        ),
        (
            "after layer 1 the example-out density is apart from example-in and query",
            "density overlap in/out 0.77 -> 0.12, out/query 0.88 -> 0.13",
            "holds when both overlap coefficients fall by >= 0.05",
        ),
        (
            "multiple layer-1 heads put high attention on | and > (vertical stripes)",
            "2/4 heads (1.1, 1.3) put >= 0.5 of their attention on separators (uniform 0.09); max 0.95; "
            "on > alone: 1.3 0.91 (paper's 1.3: 0.97-1.0), 1 heads >= 0.9",
            "holds when at least 2 heads put >= 0.5 of their attention on | and >",
        ),
    ]


def test_default_tasks_are_four_hundred_over_the_seen_rules_and_both_alphabet_kinds(model, tasks, monkeypatch):
    """Without ``tasks``: `analysis_tasks(SEEN, 400, 0, "both")`, residuals through the final norm."""
    calls = []
    monkeypatch.setattr(roles_module, "analysis_tasks", lambda *args: calls.append(args) or tasks)
    result = role_assignment(model)
    assert calls == [(SEEN, 400, 0, "both")] and result.model == "model" and result.data["hooks"]["final_norm"] is True
    assert result.summary["tasks"] == len(tasks)


def test_figures_show_the_densities_the_separator_masses_and_the_layer_one_patterns(model):
    """Three figures: the role densities before and after layer 1, each head's separator masses against the
    uniform mass, and layer 1's patterns on the running example."""
    tasks = analysis_tasks(["pred"], 4, seed=0, lengths=(3,))
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", two_stripes)]):
        result = role_assignment(model, tasks)
    assert list(result.figures) == [
        "role densities before and after encoder layer 1 (PCA plane)",
        "layer-1 attention mass on the separators",
        "layer-1 attention patterns (running example)",
    ]
    densities, separators, patterns = result.figures.values()
    assert len(densities.data) == 2 * len(KDE_ROLES)
    assert list(separators.data[0].y) == pytest.approx([1.0, 1.0, 0.0, 0.0]) and list(separators.data[0].x)[0] == "1.1"
    assert len(patterns.data) == CFG.n_heads and patterns.data[0].z[0][26] == pytest.approx(1.0)


def noisy_roles(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` tokens per plotted role in 2-D, overlapping clusters (every measure depends on which are sampled)."""
    rng = np.random.default_rng(seed)
    roles = np.repeat(ROLE_IDS, n)
    centres = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])[np.repeat(np.arange(4), n)]
    return (centres + 0.6 * rng.standard_normal((len(roles), 2))).astype(np.float32), roles


def test_balanced_sample_is_reproducible_and_seed_zero_by_default():
    _, roles = noisy_roles(50)
    assert list(balanced_sample(roles, 5)) == list(balanced_sample(roles, 5, seed=0))
    assert list(balanced_sample(roles, 5, seed=7)) == list(balanced_sample(roles, 5, seed=7))
    assert list(balanced_sample(roles, 5, seed=7)) != list(balanced_sample(roles, 5, seed=0))


def test_sampled_measures_follow_the_seed(monkeypatch):
    """Past ``MAX_PER_ROLE`` tokens of a role, the silhouette, the probe's training set and the densities use a
    ``seed``-drawn sample: the same seed gives the same numbers, another seed other numbers, the default is 0."""
    monkeypatch.setattr(roles_module, "MAX_PER_ROLE", 15)
    x, roles = noisy_roles(60)
    x_test, roles_test = noisy_roles(60, seed=1)
    measures = {
        "silhouette": lambda **kw: silhouette(x, roles, **kw),
        "probe": lambda **kw: probe_accuracy(x, roles, x_test, roles_test, **kw),
        "densities": lambda **kw: role_densities(x, roles, **kw)[2]["query"].round(12).tolist(),
    }
    for name, measure in measures.items():
        assert measure(seed=3) == measure(seed=3), name
        assert measure(seed=3) != measure(seed=0) != measure(seed=1), name
        assert measure() == measure(seed=0), name


def test_the_probe_standardises_its_features():
    """Roles told apart by a feature a million times smaller than a noise feature: with standardised features
    the probe finds them, a probe on the raw features would not."""
    rng = np.random.default_rng(0)
    roles = np.repeat(ROLE_IDS, 100)
    signal = np.repeat(np.arange(4.0), 100) * 1e-6 + 1e-8 * rng.standard_normal(400)
    x = np.stack([signal, 1.0 * rng.standard_normal(400)], axis=1)
    assert probe_accuracy(x, roles, x, roles) > 0.95


def test_role_assignment_fits_on_the_even_tasks_and_measures_on_the_odd_ones(model):
    """The PCA is fit on the normed residuals of tasks 0, 2, 4, ...; the silhouettes are those of tasks 1, 3, ...;
    two tasks are enough."""
    from sklearn.decomposition import PCA

    tasks = analysis_tasks(["pred", "sort"], 6, seed=4, lengths=(5,))
    result = role_assignment(model, tasks)
    fit, _ = collect_residuals(model, tasks[0::2], pca_hooks(2), normed=True)
    pca = PCA(2).fit(np.concatenate(list(fit.values())))
    assert result.summary["pca_explained_variance"] == pytest.approx(float(pca.explained_variance_ratio_.sum()))
    test, test_roles = collect_residuals(model, tasks[1::2], [BEFORE], normed=True)
    assert result.summary["silhouette_full_before"] == pytest.approx(silhouette(test[BEFORE], test_roles))
    assert role_assignment(model, tasks[:2]).summary["tasks"] == 2


def test_role_assignment_draws_its_samples_from_the_seed(model, monkeypatch):
    """With more tokens than ``MAX_PER_ROLE``, the same seed repeats every sampled measure and another seed
    changes them."""
    monkeypatch.setattr(roles_module, "MAX_PER_ROLE", 12)
    tasks = analysis_tasks(["pred", "sort"], 8, seed=4, lengths=(5,))
    keys = ["silhouette_pca_after", "silhouette_full_after", "overlap_in_out_after", "probe_accuracy_after"]
    one, again, zero = (role_assignment(model, tasks, seed=s).summary for s in (1, 1, 0))
    for key in keys:
        assert one[key] == again[key] and one[key] != zero[key], key


def test_the_pca_is_reproducible_when_sklearn_picks_its_randomized_solver(monkeypatch):
    """A 128-wide model and 624 fit vectors (sklearn's randomized PCA solver): the same seed gives the same
    plane, so the same numbers (the probe and silhouettes, not under test, are stubbed out for speed)."""
    monkeypatch.setattr(roles_module, "probe_accuracy", lambda *args: 0.0)
    monkeypatch.setattr(roles_module, "silhouette", lambda *args: 0.0)
    planted = planted_model()
    tasks = analysis_tasks(["pred"], 8, seed=0, lengths=(3,))
    one, again = (role_assignment(planted, tasks, seed=2).summary for _ in range(2))
    assert one["pca_explained_variance"] == again["pca_explained_variance"]
    assert one["overlap_in_out_after"] == again["overlap_in_out_after"]


def at_the_bar(pattern, hook):
    """6-letter windows (48 positions, 3 separators: uniform mass 1/16). Head 1 puts exactly half of every row
    on the first ``|`` (26), head 2 a quarter on that ``|`` and a quarter on ``>`` (33), head 3 0.4375 on ``>``;
    the rest goes to position 0."""
    forced = torch.zeros_like(pattern)
    forced[:, :, :, 0] = 1.0
    forced[:, 0, :, 26], forced[:, 0, :, 0] = 0.5, 0.5
    forced[:, 1, :, 26], forced[:, 1, :, 33], forced[:, 1, :, 0] = 0.25, 0.25, 0.5
    forced[:, 2, :, 33], forced[:, 2, :, 0] = 0.4375, 0.5625
    return forced


def test_separator_heads_count_both_separators_and_include_exactly_half(model):
    """A head's separator mass is its mass on ``|`` plus on ``>``; a head at exactly half counts, one below
    does not; the head with most attention on ``>`` alone is named beside the finding."""
    tasks = analysis_tasks(["pred"], 4, seed=0, lengths=(6,))
    tasks[0] = dataclasses.replace(tasks[0], transformation=None)
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", at_the_bar)]):
        result = role_assignment(model, tasks, normed=False)
    data, s = result.data, result.summary
    assert s["uniform_separator_mass"] == 1 / 16
    assert data["separator_heads"] == ["1.1", "1.2"] and s["max_separator_mass"] == pytest.approx(0.5)
    assert data["separator_attention"][:3] == [
        {"head": "1.1", "pipe": 0.5, "arrow": 0.0},
        {"head": "1.2", "pipe": 0.25, "arrow": 0.25},
        {"head": "1.3", "pipe": 0.0, "arrow": 0.4375},
    ]
    assert (s["arrow_head"], s["max_arrow_mass"], s["arrow_alone_heads"]) == ("1.3", 0.4375, 0)
    assert result.findings[2].holds is True and "on > alone: 1.3 0.44" in result.findings[2].ours
    assert data["transformations"] == ["?", "pred"]
    assert data["pca_explained_variance_ratio"].sum() == pytest.approx(result.summary["pca_explained_variance"])


def constant_stream(resid, hook):
    """Every token's residual is 5 e0."""
    out = torch.zeros_like(resid)
    out[..., 0] = 5.0
    return out


def test_residuals_are_raw_by_default(model, tasks):
    """`collect_residuals` returns the hook's values as they are unless ``normed``."""
    with model.hooks(fwd_hooks=[(BEFORE, constant_stream)]):
        raw, _ = collect_residuals(model, tasks[:2], [BEFORE])
        normed, _ = collect_residuals(model, tasks[:2], [BEFORE], normed=True)
    assert (raw[BEFORE][:, 0] == 5.0).all() and (raw[BEFORE][:, 1:] == 0.0).all()
    assert np.allclose(np.linalg.norm(normed[BEFORE], axis=1), 32**0.5, rtol=1e-4)


def test_heads_that_send_almost_everything_to_the_arrow_are_counted(model):
    """Every layer-1 head on ``>`` alone (the paper's 1.3: 0.97-1.0): all four count at >= 0.9."""
    three = analysis_tasks(["pred"], 4, seed=0, lengths=(3,))
    with model.hooks(fwd_hooks=[("encoder.0.attn.hook_pattern", arrow_stripe)]):
        s = role_assignment(model, three, normed=False).summary
    assert (s["arrow_alone_heads"], s["max_arrow_mass"]) == (CFG.n_heads, pytest.approx(1.0))


def test_a_head_at_exactly_the_arrow_alone_mass_counts(model, tasks, monkeypatch):
    """`arrow_alone_heads` counts the heads with at least `ARROW_ALONE_MASS` (0.9) on ``>``: 0.9 exactly counts,
    the float just below does not; the strongest head on ``>`` is named with its mass."""
    arrow = np.array([0.3, 0.9, np.nextafter(0.9, 0.0), 0.0])
    sep = {"pipe": np.zeros(CFG.n_heads), "arrow": arrow, "uniform": 0.06}
    monkeypatch.setattr(roles_module, "separator_attention", lambda model, tasks: sep)
    s = role_assignment(model, tasks, normed=False).summary
    assert (s["arrow_alone_heads"], s["arrow_head"], s["max_arrow_mass"]) == (1, "1.2", 0.9)
