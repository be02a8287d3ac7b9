"""RASP-L selectors on the paper's running example, entry by entry, and head scores on forced patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lsa_interp.analysis.prompts import paper_prompts
from lsa_interp.analysis.rasp import (
    JUDGED_IN_ANY_LAYER,
    MATCH_THRESHOLD,
    RUNNING_EXAMPLE,
    SELECTORS,
    _average_scores,
    _best_in_layer,
    _findings,
    paper_rasp_tasks,
    rasp_comparison,
    scored_rows,
    seen_rule_tasks,
    selector_masks,
    selector_patterns,
    selector_scores,
)
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import LETTERS, SEP
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.heads import all_heads

torch.set_num_threads(1)

# abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd EOS: alphabet 0-25, | 26, ghi 27-29, > 30, fhi 31-33, | 34,
# bcd 35-37, EOS 38.
N = 39
PIPES, ARROW_AT, EOS_AT = {26, 34}, 30, 38
SAME = [{6, 27}, {7, 28, 32}, {8, 29, 33}, {5, 31}, {1, 35}, {2, 36}, {3, 37}, {26, 34}]
"""Positions holding the same token (every other position holds a token found nowhere else)."""


def running_src() -> torch.Tensor:
    return encode_tasks([Task.parse(RUNNING_EXAMPLE)], with_answers=False).src


def same_positions(q: int) -> set[int]:
    return next((group for group in SAME if q in group), {q})


def test_selectors_of_the_running_example_entry_by_entry():
    src = running_src()
    assert src.shape == (1, N)
    masks = selector_masks(src)[0]
    assert masks.shape == (3, N, N) and SELECTORS == ("pipe", "arrow", "same_as")
    for q in range(N):
        for k in range(N):
            assert bool(masks[0, q, k]) == (k in PIPES), (q, k)
            assert bool(masks[1, q, k]) == (k == ARROW_AT), (q, k)
            assert bool(masks[2, q, k]) == (k in same_positions(q)), (q, k)


def test_patterns_are_row_normalised_and_pad_is_neither_row_nor_key():
    tasks = [Task.parse(RUNNING_EXAMPLE), Task.parse(RUNNING_EXAMPLE + "efg")]
    src = encode_tasks(tasks, with_answers=False).src
    patterns = selector_patterns(src)
    assert torch.allclose(patterns[0, :, :N, :N], selector_patterns(running_src())[0])
    assert (patterns[0, :, N:, :] == 0).all() and (patterns[0, :, :, N:] == 0).all()  # PAD rows and keys
    assert torch.allclose(patterns[1].sum(-1), torch.ones(3, src.shape[1]))
    assert patterns[0, 2, 28, 32].item() == pytest.approx(1 / 3) and patterns[0, 0, 5, 26].item() == 0.5
    no_self = selector_patterns(running_src(), include_self=False)[0]
    assert no_self[1, ARROW_AT].sum() == 0 and no_self[2, 28, 28] == 0 and no_self[2, 28, 32] == 0.5


def test_scored_rows_skip_eos_and_rows_that_only_select_themselves():
    rows = scored_rows(running_src())[0]
    expected_same = {q for group in SAME for q in group}
    assert {q for q in range(N) if rows[0, q]} == set(range(N)) - {EOS_AT}
    assert {q for q in range(N) if rows[1, q]} == set(range(N)) - {EOS_AT, ARROW_AT}
    assert {q for q in range(N) if rows[2, q]} == expected_same


def test_scores_of_hand_made_patterns():
    src = running_src()
    exact = selector_patterns(src, include_self=False)[0]
    uniform = torch.full((N, N), 1 / N)
    identity = torch.eye(N)
    patterns = torch.stack([exact[0], exact[1], exact[2], uniform, identity])[None]
    mass, correlation = selector_scores(patterns, src)
    assert torch.allclose(mass[0, :3].diagonal(), torch.ones(3))
    assert torch.allclose(correlation[0, :3].diagonal(), torch.ones(3), atol=1e-5)
    assert mass[0, 1, 0] == pytest.approx(0.0)  # the arrow head reads no separator
    assert mass[0, 3, 1].item() == pytest.approx(1 / N)  # uniform attention: one arrow among 39 keys
    assert mass[0, 4].abs().max() == 0  # attending to oneself matches nothing, not even same-as


def forcing_hooks(model: HookedEncoderDecoder, forced: dict[tuple[int, int], tuple[int, bool]]):
    """Hooks that overwrite head (layer, head)'s pattern with selector index's pattern (with or without self);
    the encoder ids are captured by a PyTorch pre-hook on the token embedding."""
    seen = {}
    handle = model.encoder.embed.register_forward_pre_hook(lambda module, args: seen.update(src=args[0]))

    def make(layer: int):
        def force(pattern, hook):
            pattern = pattern.clone()
            for (lay, head), (index, with_self) in forced.items():
                if lay == layer:
                    pattern[:, head] = selector_patterns(seen["src"], include_self=with_self)[:, index]
            return pattern

        return force

    layers = sorted({layer for layer, _ in forced})
    return handle, [(f"encoder.{layer}.attn.hook_pattern", make(layer)) for layer in layers]


def test_forced_heads_are_found_and_score_one():
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    forced = {(0, 0): (0, True), (0, 2): (1, True), (1, 3): (2, False)}  # 1.1 pipe, 1.3 arrow, 2.4 same-as
    handle, hooks = forcing_hooks(model, forced)
    try:
        with model.hooks(fwd_hooks=hooks):
            result = rasp_comparison(model.eval(), seen_rule_tasks(30), batch_size=16, model_name="tiny")
    finally:
        handle.remove()
    best = result.data["best"]
    assert {sel: best[sel]["head"] for sel in SELECTORS} == {"pipe": "1.1", "arrow": "1.3", "same_as": "2.4"}
    assert best["arrow"]["mass"] == pytest.approx(1.0) and best["arrow"]["correlation"] == pytest.approx(1.0)
    assert best["same_as"]["mass"] == pytest.approx(1.0)
    # pipe with self: the pipe rows keep half their attention on themselves, which is not scored as a match
    assert 0.9 < best["pipe"]["mass"] < 1.0
    assert all(f.holds for f in result.findings)
    assert result.data["mass"]["1.3"]["arrow"] == best["arrow"]["mass"] and len(result.data["mass"]) == 8
    assert all(0 < result.data["chance"][sel] < 0.1 for sel in SELECTORS)
    assert set(result.figures) == {
        "attention mass on the selector's keys",
        "correlation with the selector",
        "selectors and their best heads",
    }
    example = result.figures["selectors and their best heads"]
    assert len(example.data) == 6 and len(example.data[4].z) == N  # running example: arrow's best head
    mass, correlation = (result.figures[name].data[0] for name in list(result.figures)[:2])
    assert (mass.zmin, mass.zmax, correlation.zmin, correlation.zmax) == (0.0, 1.0, -1.0, 1.0)  # a signed score


def test_unforced_random_model_findings_fail():
    torch.manual_seed(1)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    result = rasp_comparison(model.eval(), seen_rule_tasks(20), model_name="tiny")
    assert not any(f.holds for f in result.findings)
    assert all(row["mass"] < 0.5 for row in result.data["best"].values())


def test_seen_rule_tasks():
    tasks = seen_rule_tasks(23, seed=2)
    assert len(tasks) == 23 and {t.transformation for t in tasks} == set(SEEN)
    assert tasks == seen_rule_tasks(23, seed=2) and tasks != seen_rule_tasks(23, seed=3)
    with pytest.raises(ValueError, match="positive"):
        seen_rule_tasks(0)
    with pytest.raises(ValueError, match="at least one task"):
        rasp_comparison(HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, d_mlp=64)), [])


def test_pipe_and_arrow_are_judged_in_layer_one_and_same_as_in_any_layer():
    """2.2 is the arrow selector and 1.1 the same-as selector: the arrow finding does not hold (the claim names
    layer-1 heads; layer 1's best is reported), same-as holds from layer 1 (the matching head's layer varies)."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    handle, hooks = forcing_hooks(model, {(1, 1): (1, True), (0, 0): (2, False)})
    try:
        with model.hooks(fwd_hooks=hooks):
            result = rasp_comparison(model.eval(), paper_rasp_tasks(8), model_name="tiny")
    finally:
        handle.remove()
    arrow, same = result.data["best"]["arrow"], result.data["best"]["same_as"]
    assert arrow["head"] == "2.2" and arrow["mass"] == pytest.approx(1.0)
    assert arrow["paper_layer_head"].startswith("1.") and arrow["paper_layer_mass"] < 0.5
    assert same["head"] == "1.1" and same["mass"] == pytest.approx(1.0) and same["paper_layer_mass"] < 0.5
    by_name = {f.name: f for f in result.findings}
    assert by_name["RASP arrow selector"].holds is False
    assert by_name["RASP arrow selector"].value == arrow["paper_layer_mass"]
    assert by_name["RASP same_as selector"].holds is True and by_name["RASP same_as selector"].value == same["mass"]
    assert by_name["RASP pipe selector"].holds is False
    assert JUDGED_IN_ANY_LAYER == {"same_as"}


def test_paper_rasp_tasks_are_the_paper_pred_prompts():
    tasks = paper_rasp_tasks()
    assert len(tasks) == 19 and str(tasks[0]) == "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd"
    assert all(t.query == "bcd" and t.transformation == "pred" for t in tasks)
    with pytest.raises(ValueError, match="19"):
        paper_rasp_tasks(20)


def _row(mass: float, **extra) -> dict:
    return {"head": "2.4", "mass": mass, "correlation": 0.9, "chance": 0.03, **extra}


def test_a_selector_holds_from_half_the_attention_on_its_keys():
    """The verdict is mass >= MATCH_THRESHOLD (0.5) in the judged layer: exactly half holds, just below does
    not; a pipe or arrow row without a layer-1 head does not hold."""
    findings = _findings(
        {
            "pipe": _row(0.9, paper_layer_head="1.1", paper_layer_mass=0.5),
            "arrow": _row(0.9, paper_layer_head="1.1", paper_layer_mass=0.4999),
            "same_as": _row(0.75, paper_layer_head="2.1", paper_layer_mass=0.1),
        }
    )
    assert [(f.name, f.holds, f.value) for f in findings] == [
        ("RASP pipe selector", True, 0.5),
        ("RASP arrow selector", False, 0.4999),
        ("RASP same_as selector", True, 0.75),
    ]
    assert _findings({"arrow": _row(0.9)})[0].holds is False
    assert MATCH_THRESHOLD == 0.5


def test_finding_lines_name_the_best_head_and_the_paper_layers_best():
    """The line gives the best head's mass, chance and r, and the paper layer's best head when there is one."""
    pipe, same = _findings({"pipe": _row(0.6), "same_as": _row(0.6, paper_layer_head="2.1", paper_layer_mass=0.4)})
    assert pipe.ours == "best head 2.4: mass 0.60 (chance 0.03), r 0.90"
    assert same.ours == "best head 2.4: mass 0.60 (chance 0.03), r 0.90; best of layer 2: 2.1 0.40"
    assert pipe.paper == "layer-1 heads resemble the pipe selector"
    assert same.paper == "the matching head (2.7, layer 2) resembles same-as"


def test_best_in_layer_looks_only_at_the_paper_layer():
    """The paper layer's best head and its mass; nothing when the model has no such layer."""
    heads = all_heads(ModelConfig(d_model=32, n_heads=2, n_encoder_layers=2, d_mlp=64))  # 1.1 1.2 2.1 2.2
    mass = torch.tensor([0.9, 0.1, 0.2, 0.3])
    assert _best_in_layer(mass, heads, 2) == {"paper_layer_head": "2.2", "paper_layer_mass": pytest.approx(0.3)}
    assert _best_in_layer(mass, heads, 1) == {"paper_layer_head": "1.1", "paper_layer_mass": pytest.approx(0.9)}
    assert _best_in_layer(mass, heads, 3) == {}


def test_chance_is_uniform_attention_over_each_prompts_own_keys():
    """Chance per selector is the mass of uniform attention over the non-PAD keys, per prompt, averaged; the
    batch size does not change any score."""
    torch.manual_seed(2)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=2, n_encoder_layers=2, n_decoder_layers=1, d_mlp=32))
    tasks = [Task.parse(RUNNING_EXAMPLE), Task.parse(RUNNING_EXAMPLE + "efg")]  # 39 and 42 positions
    mass, correlation, chance = _average_scores(model.eval(), tasks, 128)
    assert chance[1] == pytest.approx((1 / 39 + 1 / 42) / 2)  # arrow: one key per prompt
    one = _average_scores(model, tasks[:1], 128)[2]
    # running example: pipe rows (36 others 2 keys, the 2 pipes 1 other), same-as 24 partners over 18 rows
    assert one[0] == pytest.approx((36 * 2 + 2) / (38 * 39)) and one[2] == pytest.approx(24 / (18 * 39))
    split = _average_scores(model, tasks, 1)
    for whole, part in zip((mass, correlation, chance), split):
        torch.testing.assert_close(part, whole)
    assert mass.shape == correlation.shape == (4, 3) and chance.shape == (3,)


def test_task_helpers_take_their_seed_and_accept_one_task():
    """seen_rule_tasks and paper_rasp_tasks use seed 0 by default, pass the seed on, and accept n = 1."""
    standard = "abcdefghijklmnopqrstuvwxyz"
    assert seen_rule_tasks(6) == seen_rule_tasks(6, seed=0) != seen_rule_tasks(6, seed=1)
    assert len(seen_rule_tasks(1)) == 1 and all("".join(t.alphabet) == standard for t in seen_rule_tasks(6, 3))
    assert paper_rasp_tasks(3) == paper_prompts("pred", 3, 0) and paper_rasp_tasks(3, 1) == paper_prompts("pred", 3, 1)
    assert paper_prompts("pred", 3, 0) != paper_prompts("pred", 3, 1) and len(paper_rasp_tasks(1)) == 1


def test_comparison_result_records_its_tables_example_and_figures():
    """The result carries the selectors, both score tables, the example and its tokens, titled heat maps, the
    model name (empty by default) and each finding's criterion."""
    torch.manual_seed(3)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=2, n_encoder_layers=2, n_decoder_layers=1, d_mlp=32))
    result = rasp_comparison(model.eval(), [Task.parse(RUNNING_EXAMPLE)])
    assert result.model == "" and result.name == "rasp"
    data = result.data
    assert data["selectors"] == list(SELECTORS) and set(data["correlation"]) == {"1.1", "1.2", "2.1", "2.2"}
    assert data["example"] == RUNNING_EXAMPLE and len(data["example_tokens"]) == N
    assert data["example_tokens"][ARROW_AT] == ">·30" and data["example_tokens"][EOS_AT] == "EOS·38"
    titles = {name: figure.layout.title.text for name, figure in result.figures.items()}
    assert titles["attention mass on the selector's keys"] == "Encoder heads vs RASP-L selectors: mass on selected keys"
    assert titles["correlation with the selector"] == "Encoder heads vs RASP-L selectors: Pearson correlation"
    assert [f.detail for f in result.findings[1:]] == [
        "holds when some head of encoder layer 1, the layer the claim names, puts >= 0.5 of its attention on the "
        "selected keys",
        "holds when some head in any layer (the matching head's layer varies between runs) puts >= 0.5 of its "
        "attention on the selected keys",
    ]
    assert rasp_comparison(model, [Task.parse(RUNNING_EXAMPLE)], model_name="tiny").model == "tiny"


def test_correlation_is_pearson_over_the_scored_off_diagonal_entries():
    """For a non-selector pattern, the correlation equals numpy's Pearson r over the scored rows' off-diagonal,
    non-PAD entries (here of the arrow and same-as selectors on the running example)."""
    src = running_src()
    generator = torch.Generator().manual_seed(0)
    pattern = torch.softmax(torch.randn(N, N, generator=generator, dtype=torch.float64), -1).float()
    _, correlation = selector_scores(pattern[None, None], src)
    target = selector_patterns(src, include_self=False)[0]
    rows = scored_rows(src)[0]
    off_diagonal = ~torch.eye(N, dtype=torch.bool)
    for index in (1, 2):
        entries = rows[index][:, None] & off_diagonal
        expected = np.corrcoef(pattern[entries].double().numpy(), target[index][entries].double().numpy())[0, 1]
        assert correlation[0, 0, index].item() == pytest.approx(expected, rel=1e-4)


def test_a_single_scored_row_or_entry_is_not_averaged_away():
    """With one scored row the mass is that row's mass; with one scored entry the correlation is undefined (NaN)."""
    src = torch.tensor([[LETTERS.index("a"), SEP]])  # "a |": only row a selects the pipe (one key)
    mass, correlation = selector_scores(torch.full((1, 1, 2, 2), 0.5), src)
    assert mass[0, 0, 0].item() == 0.5 and torch.isnan(correlation[0, 0, 0])
