"""How analysis results are written."""

from __future__ import annotations

import json

import plotly.graph_objects as go

from lsa_interp.analysis.types import AnalysisResult, Finding


def test_result_writes_json_without_nan_and_an_offline_page(tmp_path, ascii_locale):
    figure = go.Figure(go.Bar(x=["a"], y=[1.0]))
    result = AnalysisResult(
        "demo",
        "m",
        {"score": float("nan"), "n": 3},
        {"matrix": [[1.0, float("inf")]], ("a", "b"): 1},
        {"bars": figure},
        [Finding("x", "1.0", "0.5", False)],
    )
    paths = result.write(tmp_path)
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert doc["summary"] == {"score": None, "n": 3} and doc["data"]["matrix"] == [[1.0, None]]
    assert doc["data"]["a|b"] == 1 and doc["findings"][0]["holds"] is False
    page = paths["html"].read_text(encoding="utf-8")
    assert "does not hold" in page and "<h2>bars</h2>" in page
    assert "<script src" not in page and "<link" not in page and len(page) > 1_000_000  # plotly.js inlined
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.html", "demo.json"]


def test_a_finding_s_row_and_a_result_written_into_a_new_folder(tmp_path):
    finding = Finding("matching head", "20/20", "head 2.3", True, "score >= 0.5", float("nan"))
    assert finding.to_dict() == {
        "name": "matching head",
        "paper": "20/20",
        "ours": "head 2.3",
        "holds": True,
        "detail": "score >= 0.5",
        "value": None,
    }
    result = AnalysisResult("demo", "m", {"n": 1}, findings=[finding])
    paths = result.write(tmp_path / "new" / "folder")
    assert paths == {"json": tmp_path / "new" / "folder" / "demo.json"}  # no figures, no page
    assert paths["json"].read_text() == json.dumps(result.to_dict(), indent=2) + "\n"
