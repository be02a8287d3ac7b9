"""Attribution patching: its gradients are the measure's (finite differences), integrated they add up to the whole
difference, it finds the planted head where exact patching does, and it leaves the model as it was."""

from __future__ import annotations

import copy
import json
from functools import partial

import pytest
import torch

from lsa_interp.analysis import activation_patching as ap
from lsa_interp.analysis.attribution_patching import attribute_activations, compare_grids
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.patch_runs import parting_steps, run_patched
from lsa_interp.analysis.planted import PLANTED_HEAD, planted_model
from lsa_interp.data.tokenizer import encode_tasks
from tests.analysis.patch_setup import pairs_parting_late, planted_pairs, succ_pred_runs

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def runs():
    return succ_pred_runs(5)


def test_each_cell_moves_the_target_run_by_the_measures_derivative_along_the_patch(small, runs):
    """One step: the estimate minus the target run is the derivative of the measure along (source - target) at the
    cell, which small steps of that patch measure (a head at all positions; the embeddings at the first changed
    example-output letter)."""
    pairs = runs[0]
    estimate = attribute_activations(small, pairs, [ap.HEADS, ap.RESID])
    every = slice(None)
    cells = [
        (ap.HEADS, (1, 2), "encoder.1.attn.hook_z", (every, every, 2)),
        (ap.RESID, (0, 31), "encoder.0.hook_resid_pre", (every, 31)),
    ]
    for site, cell, hook, at in cells:
        assert estimate.grids[site].hooks[cell[0]] == hook
        estimated = float(estimate.grids[site].logit_diff[cell]) - estimate.target_logit_diff
        assert estimated != 0 and estimated == pytest.approx(_derivative(small, pairs, hook, at), rel=1e-4), site


def test_on_pairs_parting_late_the_decoder_rows_are_the_derivative_at_each_pairs_parting_step(small):
    """Answers that part at the first, second and third letter: a decoder residual's cell is the derivative of the
    measure along (source - target) at each pair's own parting step (the residual at earlier steps differs between the
    runs too, and the parting step reads it: counting those steps as well misses by 2 %)."""
    pairs = pairs_parting_late()
    estimate = attribute_activations(small, pairs, [ap.DECODER_RESID])
    at = (torch.arange(len(pairs)), parting_steps(pairs)[0])
    for row in (2, 3):  # after the first layer's cross-attention; before the second layer
        hook = estimate.grids[ap.DECODER_RESID].hooks[row]
        estimated = float(estimate.grids[ap.DECODER_RESID].logit_diff[row, 0]) - estimate.target_logit_diff
        assert estimated == pytest.approx(_derivative(small, pairs, hook, at), rel=1e-4), hook


@torch.no_grad()
def _derivative(model, pairs, hook, at, eps=1e-3) -> float:
    """The measure's derivative along (source - target) at the cells ``at`` of ``hook``: central differences of
    patched runs of a float64 copy of ``model`` (in float32 the rounding of the logits alone is about 1e-3 of it)."""
    model, batch = copy.deepcopy(model).double(), pair_batch(pairs)
    tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in
    step, source_token, target_token = parting_steps(pairs)
    rows = torch.arange(len(pairs))
    source = run_patched(model, batch.source, tgt, {}, save=[hook])[hook]

    def measure(eps: float) -> float:
        moved = partial(_step, donor=source, at=at, eps=eps)
        logits = run_patched(model, batch.target, tgt, {hook: moved})["logits"][rows, step]
        return float((logits[rows, source_token] - logits[rows, target_token]).mean())

    return (measure(eps) - measure(-eps)) / (2 * eps)


def _step(tensor, donor, at, eps):
    moved = tensor.clone()
    moved[at] += eps * (donor[at] - tensor[at])
    return moved


def test_integrated_over_the_inputs_the_embeddings_add_up_to_the_whole_difference(small, runs):
    """Integrated gradients on the inputs are complete: the embeddings' cells over all positions sum to the source run
    minus the target run; at midpoints 16 steps come within 0.005 (left ends would miss by 0.05), one step is far."""
    pairs = runs[0]
    totals = {}
    for steps in (1, 2, 16):
        result = attribute_activations(small, pairs, [ap.RESID], steps=steps)
        totals[steps] = float(result.normalized(ap.RESID)[0].sum())
    assert totals[16] == pytest.approx(1, abs=0.005)
    assert abs(totals[1] - 1) > 0.05
    assert abs(totals[2] - 1) < abs(totals[1] - 1), "two midpoints (1/4, 3/4) are closer than the target run alone"


def test_the_planted_circuit_lights_the_cells_exact_patching_lights():
    """Exact patching moves all of the difference at the planted head, its readout and the decoder's cross head and
    nothing elsewhere; the estimate lights the same three cells, most of the way, and nothing elsewhere."""
    planted = planted_model()
    pairs = planted_pairs(4)
    estimate = attribute_activations(planted, pairs, [ap.HEADS], steps=10)
    exact = ap.patch_activations(planted, pairs, [ap.HEADS], answers=False)
    lit = exact.normalized(ap.HEADS).abs() > 0.5
    assert lit.nonzero().tolist() == [[PLANTED_HEAD.layer, PLANTED_HEAD.head], [2, 0], [4, 0]]
    normalized = estimate.normalized(ap.HEADS)
    assert bool((normalized[lit] > 0.8).all()) and float(normalized[~lit].abs().max()) < 1e-3
    assert bool(estimate.grids[ap.HEADS].source_answers.isnan().all())
    assert (
        estimate.source_logit_diff == exact.source_logit_diff and estimate.target_logit_diff == exact.target_logit_diff
    )
    agreement = compare_grids(estimate, exact)[ap.HEADS]
    assert agreement.correlation > 0.99 and agreement.exact_at_estimated_top == pytest.approx(agreement.exact_top)


def test_the_model_keeps_its_mode_and_its_parameters_gain_no_gradient(small, runs):
    small.train()
    try:
        attribute_activations(small, runs[0], [ap.HEADS], steps=2)
        assert small.training and all(p.grad is None for p in small.parameters())
    finally:
        small.eval()


def test_progress_counts_the_integration_steps(small, runs):
    seen = []
    attribute_activations(small, runs[0], [ap.HEADS], steps=3, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_bad_steps_and_sites_are_refused(small, runs):
    with pytest.raises(ValueError, match="steps must be at least 1"):
        attribute_activations(small, runs[0], [ap.HEADS], steps=0)
    with pytest.raises(ValueError, match="unknown sites"):
        attribute_activations(small, runs[0], ["resid"])


def test_grids_compare_with_themselves_perfectly_and_refuse_what_does_not_match(small, runs):
    exact = ap.patch_activations(small, runs[0], [ap.HEADS, ap.ATTN_OUT], answers=False)
    agreement = compare_grids(exact, exact)
    assert list(agreement) == [ap.HEADS, ap.ATTN_OUT] and agreement[ap.ATTN_OUT].site == ap.ATTN_OUT
    assert agreement[ap.HEADS].correlation == pytest.approx(1) and agreement[ap.HEADS].max_abs_error == 0
    only_resid = attribute_activations(small, runs[0], [ap.RESID])
    with pytest.raises(ValueError, match="no site in both results"):
        compare_grids(only_resid, exact)


def test_pairs_parting_at_later_steps_are_measured_there_as_exact_patching_measures_them(small):
    """Answers that part at the first, second and third letter: the target and source runs' measures are exact
    patching's (teacher-forced on each pair's target answer, read at its own parting step), and the result names the
    rules and the pairs as exact patching's does."""
    pairs = pairs_parting_late()
    estimate = attribute_activations(small, pairs, [ap.DECODER_RESID])
    exact = ap.patch_activations(small, pairs, [ap.DECODER_RESID], answers=False)
    assert (estimate.source_rule, estimate.target_rule, estimate.pairs) == ("succ", "pred", 3)
    assert estimate.source_logit_diff == pytest.approx(exact.source_logit_diff, abs=1e-6)
    assert estimate.target_logit_diff == pytest.approx(exact.target_logit_diff, abs=1e-6)
    assert estimate.grids[ap.DECODER_RESID].site == ap.DECODER_RESID
    assert estimate.grids[ap.DECODER_RESID].columns == exact.grids[ap.DECODER_RESID].columns


def test_the_analysis_writes_an_attribution_record_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setattr(ap, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    estimated = []
    monkeypatch.setattr(
        ap, "attribute_activations", lambda *args: estimated.append(args[3]) or attribute_activations(*args)
    )
    result = ap.activation_patching_analysis(
        planted_model(), "planted", "pred", "succ", 3, sites=[ap.HEADS], method="attribution", steps=4
    )
    assert (
        result.name == "attribution_patching"
        and result.summary["method"] == "attribution patching (4 integration steps)"
    )
    assert result.summary["heads: largest"].startswith("decoder 1 cross-attention, head 1: 0.94")
    assert "a linear estimate" in result.findings[0].paper and estimated == [4]
    result.write(tmp_path)
    assert (
        json.loads((tmp_path / "attribution_patching.json").read_text())["summary"]["pairs solved (both prompts)"] == 3
    )


def test_the_analysis_integrates_over_ten_steps_by_default_and_reports_each(monkeypatch):
    monkeypatch.setattr(ap, "minimal_pairs", lambda source, target, n, **_: planted_pairs(2))
    ticks = []
    result = ap.activation_patching_analysis(
        planted_model(), sites=[ap.HEADS], method="attribution", progress=lambda *tick: ticks.append(tick)
    )
    assert result.summary["method"] == "attribution patching (10 integration steps)"
    assert ticks == [(step, 10) for step in range(1, 11)]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"method": "gradient"}, "unknown method 'gradient'; choose one of exact, attribution"), ({"steps": 0}, "steps")],
)
def test_the_analysis_refuses_a_bad_method_or_steps_before_it_decodes(monkeypatch, options, message):
    monkeypatch.setattr(ap, "minimal_pairs", lambda *a, **k: pytest.fail("decoded before refusing"))
    with pytest.raises(ValueError, match=message):
        ap.activation_patching_analysis(planted_model(), "planted", **options)


def _result(values: list[list[float]]) -> ap.ActivationPatching:
    diff = torch.tensor(values)
    grid = ap.PatchingGrid(ap.HEADS, ("a", "b"), ("a", "b"), ("1", "2"), diff, diff * torch.nan, diff * torch.nan)
    return ap.ActivationPatching("succ", "pred", 1, (), 1.0, 0.0, {ap.HEADS: grid})


def test_the_agreement_reads_the_exact_grid_at_the_estimates_largest_cell():
    estimate, exact = _result([[0.9, 0.1], [0.2, 0.0]]), _result([[0.3, 0.8], [0.2, 0.1]])
    agreement = compare_grids(estimate, exact)[ap.HEADS]
    assert agreement.exact_at_estimated_top == pytest.approx(0.3) and agreement.exact_top == pytest.approx(0.8)
    assert agreement.max_abs_error == pytest.approx(0.7)
    expected = float(torch.corrcoef(torch.tensor([[0.9, 0.1, 0.2, 0.0], [0.3, 0.8, 0.2, 0.1]]))[0, 1])
    assert agreement.correlation == pytest.approx(expected)
