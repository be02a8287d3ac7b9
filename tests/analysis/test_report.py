"""The report: every analysis on one model, the control finding, failures as rows, files written."""

from __future__ import annotations

import json

import pytest

from lsa_interp import cli
from lsa_interp.analysis import report as report_module
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.report import run_report
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
    assert matched.ours == f"head 2.3: {flips['2.3']:.0%} switch" and matched.holds == (flips["2.3"] >= 0.741)
    assert controlled.ours.startswith(f"head {control} (lowest matching score in layer 2)")
    assert controlled.holds == (flips[control] <= 0.2)
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
