"""The report: every analysis on one model, the control finding, failures as rows, files written."""

from __future__ import annotations

import json
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest
import torch

from lsa_interp import cli
from lsa_interp.analysis import patching as patching_module, report as report_module
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.report import Report, run_report
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.model.checkpoint import save_model


@pytest.fixture
def small_sizes(monkeypatch):
    for key, value in {
        "roles": 24,
        "patch_pairs": 12,
        "cross_attention": 12,
        "elimination": 12,
        "decoder_lens": 12,
        "rasp": 12,
        "splice_pairs": 6,
    }.items():
        monkeypatch.setitem(report_module.REPORT_SIZES, key, value)


def test_report_on_the_planted_model(small_sizes, tmp_path):
    seen = []
    report = run_report(planted_model(), "planted", progress=seen.append)
    assert seen == [
        "roles",
        "matching heads",
        "patching",
        "invariance",
        "cross-attention",
        "elimination",
        "decoder lens",
        "rasp",
        "splice",
        "copy attention",
    ]
    by_name = {f.name: f for f in report.findings}
    assert by_name["matching head"].holds is True and "2.3" in by_name["matching head"].ours
    results = {r.name: r for r in report.results}
    flips = {label: v["flip_rate"] for label, v in results["patching"].data["heads"].items()}
    scores = results["matching_heads"].data["score"][1]
    control = f"2.{int(scores.argmin()) + 1}"
    assert control != "2.3"
    matched, controlled = by_name["patching the matching head"], by_name["control head flips few"]
    assert matched.ours == f"head 2.3: {flips['2.3']:.0%} switch" and matched.value == flips["2.3"]
    assert controlled.ours.startswith(f"head {control} (lowest matching score in layer 2)")
    # the planted model answers no pred prompt with pred's answer: no verdict on either
    assert matched.holds is None and controlled.holds is None and "the model solves 0 of" in matched.detail
    assert by_name["decoder lens"].holds is None and "could not run" in by_name["decoder lens"].ours  # no preset
    paths = report.write(tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert len(doc["findings"]) == len(report.findings) and "patching" in doc["analyses"]
    page = paths["html"].read_text()
    assert "patching the matching head" in page and "matching_heads: matching score per encoder head" in page


def test_without_a_matching_head_the_patching_finding_fails(small_sizes):
    report = run_report(planted_model(matching=False), "plain")
    by_name = {f.name: f for f in report.findings}
    assert by_name["matching head"].holds is False
    assert by_name["patching the matching head"].holds is False


def test_report_command(small_sizes, tmp_path, capsys):
    save_model(planted_model(), tmp_path / "planted")
    with pytest.raises(SystemExit) as info:
        # In this process: the pool has its own test below (each spawned worker spends seconds importing).
        cli.main(["report", "--model", str(tmp_path / "planted"), "--workers", "1", "--out", str(tmp_path / "out")])
    assert info.value.code == 0
    assert (tmp_path / "out" / "report.html").is_file() and "findings" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        cli.main(["report", "--model", str(tmp_path / "nowhere")])
    assert info.value.code == 2


@pytest.mark.slow
def test_the_report_over_two_processes_equals_the_serial_one(small_sizes):
    from lsa_interp.analysis.report_pool import COST_ORDER, run_report_pool

    assert sorted(COST_ORDER) == sorted(report_module.STEPS)
    model = planted_model()
    done = []
    pooled = run_report_pool(model, "planted", workers=2, progress=done.append)
    serial = run_report(model, "planted")
    assert sorted(done) == sorted(report_module.STEPS)
    assert [r.name for r in pooled.results] == [r.name for r in serial.results]
    assert [(f.name, f.ours, f.holds) for f in pooled.findings] == [(f.name, f.ours, f.holds) for f in serial.findings]
    elimination = {r.name: r for r in pooled.results}["elimination"]
    assert elimination.summary["tasks"] == report_module.REPORT_SIZES["elimination"] == 12  # sizes reach the workers


def _analysis_stand_ins(monkeypatch, calls, failing=()):
    """Replace every analysis the report runs by a stand-in that records its call (``failing``: raise
    ValueError instead); the helpers that draw task sets return their name."""

    def stand_in(name, returns=None):
        def record(*args, **kwargs):
            calls[name] = (args, kwargs)
            if name in failing:
                raise ValueError(f"{name} needs a preset")
            return returns or AnalysisResult(f"stand-in {name}", "m", {})

        return record

    for path in [
        "roles.role_assignment",
        "matching.matching_analysis",
        "patching.patching_analysis",
        "invariance.mapping_invariance",
        "cross_attention.cross_attention_targets",
        "elimination.elimination",
        "decoder_lens.decoder_lens",
        "rasp.rasp_comparison",
        "splice.splice_analysis",
        "copy_attention.copy_attention_analysis",
    ]:
        monkeypatch.setattr(f"lsa_interp.analysis.{path}", stand_in(path.split(".")[1]))
    monkeypatch.setattr("lsa_interp.analysis.decoder_lens.lens_tasks", stand_in("lens_tasks", "lens tasks"))
    monkeypatch.setattr("lsa_interp.analysis.rasp.paper_rasp_tasks", stand_in("paper_rasp_tasks", "rasp tasks"))


def test_the_report_passes_each_analysis_its_size_seed_and_name(monkeypatch):
    sizes = dict(zip(report_module.REPORT_SIZES, range(11, 11 + len(report_module.REPORT_SIZES))))
    monkeypatch.setattr(report_module, "REPORT_SIZES", sizes)
    calls, controls = {}, []
    _analysis_stand_ins(monkeypatch, calls)
    monkeypatch.setattr(report_module, "control_findings", lambda *args: controls.append(args[2:]) or [])
    model = planted_model()
    report = run_report(model, "m", seed=7)
    assert report.model == "m" and controls == [(sizes["patch_pairs"], 7)]
    common = {"seed": 7, "model_name": "m"}
    assert calls == {
        "role_assignment": ((model,), {"n_tasks": sizes["roles"]} | common),
        "matching_analysis": ((model, "m"), {}),
        "patching_analysis": ((model, "m"), {"head": "all", "n_pairs": sizes["patch_pairs"], "seed": 7}),
        "mapping_invariance": ((model,), common),
        "cross_attention_targets": ((model,), {"n_tasks": sizes["cross_attention"]} | common),
        "elimination": ((model,), {"n_tasks": sizes["elimination"]} | common),
        "lens_tasks": ((model, sizes["decoder_lens"], 7), {}),
        "decoder_lens": ((model, "lens tasks"), {"model_name": "m", "source": "new"}),
        "paper_rasp_tasks": ((sizes["rasp"], 7), {}),
        "rasp_comparison": ((model, "rasp tasks"), {"model_name": "m"}),
        "splice_analysis": ((model,), {"n_pairs": sizes["splice_pairs"]} | common),
        "copy_attention_analysis": ((model, "m", 7), {}),
    }
    assert len(report.results) == 10 and report.extra == [] and list(report.seconds) == list(report_module.STEPS)


def test_a_step_that_cannot_run_becomes_a_row_and_steps_run_in_the_report_s_order(monkeypatch):
    calls, clock = {}, iter([10.0, 12.26, 20.0, 20.04])
    _analysis_stand_ins(monkeypatch, calls, failing=("rasp_comparison",))
    monkeypatch.setattr(report_module.time, "perf_counter", lambda: next(clock))
    seen = []
    report = run_report(planted_model(), "m", progress=seen.append, steps=["rasp", "roles"])
    assert seen == ["roles", "rasp"] and set(calls) == {"role_assignment", "paper_rasp_tasks", "rasp_comparison"}
    assert calls["role_assignment"][1]["seed"] == 0 and calls["paper_rasp_tasks"][0][1] == 0  # the default seed
    assert report.seconds == {"roles": 2.3, "rasp": 0.0}
    assert [r.name for r in report.results] == ["stand-in role_assignment"]
    assert report.extra == [Finding("rasp", "-", "could not run: rasp_comparison needs a preset", None)]
    with pytest.raises(ValueError, match="unknown report step"):
        run_report(planted_model(), "m", steps=["roles", "patchin"])
    with pytest.raises(ValueError, match="unknown report step 'patchin'"):
        report_module.run_step(planted_model(), "m", 0, "patchin")


def _detected(labels, score):
    """A report whose matching analysis detected ``labels`` on ``score`` and whose sweep flipped 60% and 25%."""
    flips = {"2.3": {"flip_rate": 0.6}, "1.2": {"flip_rate": 0.25}}
    return Report(
        "m",
        [
            AnalysisResult("matching_heads", "m", {"matching_heads": labels}, {"score": torch.tensor(score)}),
            AnalysisResult("patching", "m", {}, {"heads": flips}),
        ],
    )


def _patched_together(monkeypatch, rates, solved=5):
    """Stand-ins for the minimal pairs (5 of them) and for patching heads together at ``rates`` (by joined label),
    ``solved`` of the pairs solved clean. The patching module is imported at the top of this file: imported for the
    first time while the prompts' ``minimal_pairs`` is the stand-in, it would keep the stand-in for the rest of the
    test process (as it did for tests/analysis/test_patching_cli.py in the same xdist worker)."""
    calls = []
    record_pairs = lambda *args, **kwargs: calls.append((args, kwargs)) or "pairs"
    monkeypatch.setattr("lsa_interp.analysis.prompts.minimal_pairs", record_pairs)

    def patch(model, pairs, heads):
        label = "+".join(h.label for h in heads)
        calls.append((pairs, label))
        return SimpleNamespace(label=label, flip_rate=rates[label], solved=solved)

    monkeypatch.setattr(patching_module, "patch_pairs", patch)
    return calls


SCORES = [[0.5, 0.9, 0.1, 0.4], [0.3, 0.2, 0.95, 0.05], [0.0, 0.0, 0.0, 0.0]]


def test_control_findings_patch_the_matching_heads_together_against_their_layers_lowest(monkeypatch):
    calls = _patched_together(monkeypatch, {"2.3+1.2": 0.8, "2.4+1.3": 0.2})
    model = planted_model()
    findings = report_module.control_findings(_detected("2.3, 1.2", SCORES), model, n_pairs=9, seed=4)
    assert calls == [
        (("succ", "pred", 9), {"seed": 4, "alphabets": "standard", "lengths": (3,)}),
        ("pairs", "2.3+1.2"),
        ("pairs", "2.4+1.3"),
    ]
    assert findings == [
        Finding(
            "patching the matching head",
            "10/10 pred outputs switch to succ (head 2.7)",
            "heads 2.3+1.2: 80% switch (alone: 2.3 60%, 1.2 25%)",
            True,
            "holds when >= 74% of the solved prompts flip",
            0.8,
        ),
        Finding(
            "control head flips few",
            "(not in the paper) at most 20%",
            "heads 2.4+1.3 (lowest matching score of each matching head's layer): 20% switch",
            True,
            "holds when <= 20% of the solved prompts flip",
            value=0.2,
        ),
    ]


@pytest.mark.parametrize(("solved", "judged"), [(3, True), (2, False)])
def test_control_findings_give_no_verdict_unless_the_model_solves_more_than_half_the_pred_prompts(
    monkeypatch, solved, judged
):
    """Switch rates are over the solved pairs; a model that solves at most half of them gets no verdict."""
    _patched_together(monkeypatch, {"2.3": 0.9, "2.4": 0.0}, solved=solved)
    matched, control = report_module.control_findings(_detected("2.3", SCORES), planted_model(), n_pairs=5, seed=0)
    assert (matched.holds, control.holds) == ((True, True) if judged else (None, None))
    note = f"; no verdict: the model solves {solved} of 5 pred prompts"
    assert matched.detail.endswith(note) != judged and control.detail.endswith(note) != judged


def test_control_findings_thresholds_and_a_control_that_is_a_matching_head(monkeypatch):
    limit = report_module.MATCHING_MIN_FLIP
    model = planted_model()
    for flip, control, holds in ((limit, 0.21, (True, False)), (limit - 1e-9, 0.0, (False, True))):
        _patched_together(monkeypatch, {"2.3": flip, "2.4": control})
        one = report_module.control_findings(_detected("2.3", SCORES), model, n_pairs=5, seed=0)
        assert [f.holds for f in one] == list(holds)
        assert one[0].ours == f"head 2.3: {flip:.0%} switch" and one[0].value == flip
        assert one[1].ours == f"head 2.4 (lowest matching score in layer 2): {control:.0%} switch"
    own_lowest = [SCORES[0], [0.3, 0.2, 0.01, 0.05], SCORES[2]]
    calls = _patched_together(monkeypatch, {"2.3": 0.9})
    findings = report_module.control_findings(_detected("2.3", own_lowest), model, n_pairs=5, seed=0)
    assert [f.name for f in findings] == ["patching the matching head"] and calls[-1] == ("pairs", "2.3")
    assert report_module.control_findings(_detected("none", SCORES), model, 5, 0) == [
        Finding(
            "patching the matching head",
            "10/10 pred outputs switch to succ (head 2.7)",
            "no matching head detected",
            False,
        )
    ]
    assert report_module.control_findings(Report("m", _detected("2.3", SCORES).results[:1]), model, 5, 0) == []


def test_the_report_files_name_the_model_its_time_and_each_figure(tmp_path, ascii_locale):
    figure = go.Figure(go.Bar(x=["a"], y=[1.0]))
    results = [AnalysisResult("roles", "m", {"n": 1}, figures={"bars": figure}), AnalysisResult("rasp", "m", {})]
    report = Report("copy-x", results, [Finding("x", "1", "2", True)], {"roles": 1.2, "rasp": 3.4})
    paths = report.write(tmp_path / "new" / "report")
    text = paths["json"].read_text(encoding="utf-8")
    assert text.startswith('{\n  "model": "copy-x",\n  "findings": [') and text.endswith("}\n")
    assert json.loads(text)["seconds"] == {"roles": 1.2, "rasp": 3.4}
    page = paths["html"].read_text(encoding="utf-8")
    assert (
        "<p>Every finding of the paper re-measured on <b>copy-x</b> in 5 s of analysis time (each analysis's own "
        "seconds added up; analyses run in parallel take less wall time). Head labels are 1-based, as in the paper: "
        "2.7 = encoder layer 2, head 7.</p>"
    ) in page  # the sum of the steps' seconds, not the wall time of a parallel run
    assert "lsa-interp report: copy-x" in page
    assert "<h2>roles: bars</h2>" in page


def test_assemble_puts_the_control_findings_before_the_rows_of_steps_that_could_not_run(monkeypatch):
    calls = []

    def controls(report, model, n_pairs, seed):
        calls.append((report.model, n_pairs, seed, [r.name for r in report.results]))
        return [Finding("control", "-", "measured", True)]

    monkeypatch.setattr(report_module, "control_findings", controls)
    failed = Finding("rasp", "-", "could not run: no preset", None)
    outcomes = {
        "rasp": (failed, 0.5),
        "roles": (AnalysisResult("roles", "m", {}), 1.5),
        "splice": (AnalysisResult("splice", "m", {}), 2.5),
    }
    report = report_module.assemble(planted_model(), "m", 7, outcomes)
    assert calls == [("m", report_module.REPORT_SIZES["patch_pairs"], 7, ["roles", "splice"])]
    assert report.model == "m" and report.extra == [Finding("control", "-", "measured", True), failed]
    assert list(report.seconds.items()) == [("roles", 1.5), ("rasp", 0.5), ("splice", 2.5)]
