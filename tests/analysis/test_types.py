"""How analysis results are written."""

from __future__ import annotations

import json

import plotly.graph_objects as go

from lsa_interp.analysis.types import AnalysisResult, Finding


def test_result_writes_json_without_nan_and_an_offline_page(tmp_path):
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
    doc = json.loads(paths["json"].read_text())
    assert doc["summary"] == {"score": None, "n": 3} and doc["data"]["matrix"] == [[1.0, None]]
    assert doc["data"]["a|b"] == 1 and doc["findings"][0]["holds"] is False
    page = paths["html"].read_text()
    assert "does not hold" in page and "<h2>bars</h2>" in page
    assert "<script src" not in page and "<link" not in page and len(page) > 1_000_000  # plotly.js inlined
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.html", "demo.json"]
