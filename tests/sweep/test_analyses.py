"""A grid's analyses by name: each calls its analysis with the one-model report's sizes and the run's seed."""

from __future__ import annotations

import pytest

from lsa_interp.analysis.report import REPORT_SIZES
from lsa_interp.sweep.analyses import ANALYSIS_NAMES, analysis_function

MODEL, NAME, SEED = object(), "copy-20-random-s3", 7

# name -> (the function it calls, by dotted path; the keyword arguments it is given besides model and name)
CALLS = {
    "matching": ("lsa_interp.analysis.matching.matching_analysis", {}),
    "roles": ("lsa_interp.analysis.roles.role_assignment", {"n_tasks": REPORT_SIZES["roles"], "seed": SEED}),
    "patching": (
        "lsa_interp.analysis.patching.patching_analysis",
        {"head": "all", "n_pairs": REPORT_SIZES["patch_pairs"], "seed": SEED},
    ),
    "invariance": ("lsa_interp.analysis.invariance.mapping_invariance", {"seed": SEED}),
    "cross_attention": (
        "lsa_interp.analysis.cross_attention.cross_attention_targets",
        {"n_tasks": REPORT_SIZES["cross_attention"], "seed": SEED},
    ),
    "elimination": (
        "lsa_interp.analysis.elimination.elimination",
        {"n_tasks": REPORT_SIZES["elimination"], "seed": SEED},
    ),
}


def _recorder(calls: list, label: str):
    def record(*args, **kwargs):
        calls.append((label, args, kwargs))
        return label

    return record


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_analysis_gets_the_report_s_size_and_the_seed(name, monkeypatch):
    calls = []
    target, kwargs = CALLS[name]
    monkeypatch.setattr(target, _recorder(calls, name))
    assert analysis_function(name)(MODEL, NAME, SEED) == name
    ((label, args, given),) = calls
    assert args[0] is MODEL
    named = {**given, **dict(zip(["model_name"], args[1:]))}
    assert named == {**kwargs, "model_name": NAME}


def test_the_decoder_lens_reads_its_own_val_tasks(monkeypatch):
    calls = []
    monkeypatch.setattr("lsa_interp.analysis.decoder_lens.lens_tasks", _recorder(calls, "tasks"))
    monkeypatch.setattr("lsa_interp.analysis.decoder_lens.decoder_lens", _recorder(calls, "lens"))
    assert analysis_function("decoder_lens")(MODEL, NAME, SEED) == "lens"
    assert calls == [
        ("tasks", (MODEL, REPORT_SIZES["decoder_lens"], SEED), {}),
        ("lens", (MODEL, "tasks"), {"model_name": NAME, "source": "val"}),
    ]


def test_rasp_compares_on_seen_rule_tasks_of_the_seed(monkeypatch):
    calls = []
    monkeypatch.setattr("lsa_interp.analysis.rasp.seen_rule_tasks", _recorder(calls, "tasks"))
    monkeypatch.setattr("lsa_interp.analysis.rasp.rasp_comparison", _recorder(calls, "rasp"))
    assert analysis_function("rasp")(MODEL, NAME, SEED) == "rasp"
    assert calls == [
        ("tasks", (REPORT_SIZES["rasp"], SEED), {}),
        ("rasp", (MODEL, "tasks"), {"model_name": NAME}),
    ]


def test_report_runs_the_whole_report(monkeypatch):
    calls = []
    monkeypatch.setattr("lsa_interp.analysis.report.run_report", _recorder(calls, "report"))
    assert analysis_function("report")(MODEL, NAME, SEED) == "report"
    assert calls == [("report", (MODEL, NAME, SEED), {})]


def test_every_listed_name_is_an_analysis_and_no_other():
    assert set(ANALYSIS_NAMES) == set(CALLS) | {"decoder_lens", "rasp", "report"}
    for name in ANALYSIS_NAMES:
        assert callable(analysis_function(name))
    with pytest.raises(ValueError, match=r"unknown analysis 'lens'; choose one of: matching, roles, .*, report$"):
        analysis_function("lens")
