"""Head labels (1-based, the paper's) against 0-based heads, and how results are written."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from lsa_interp.analysis.types import AnalysisResult, Finding, Head, all_heads, parse_head
from lsa_interp.model import ModelConfig

CFG = ModelConfig()


@pytest.mark.parametrize(
    ("text", "head"),
    [
        ("2.7", Head("encoder", 1, 6)),
        ("enc:1.1", Head("encoder", 0, 0)),
        ("dec:3.8", Head("decoder", 2, 7)),
        ("cross:1.2", Head("decoder", 0, 1, "cross_attn")),
        (" 3.8 ", Head("encoder", 2, 7)),
    ],
)
def test_labels_parse_to_zero_based_heads_and_back(text, head):
    assert parse_head(text, CFG) == head
    assert parse_head(head.label, CFG) == head


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3.9", "no head '3.9'"),
        ("4.1", "no head '4.1'"),
        ("0.1", "no head"),
        ("x", "bad head 'x'"),
        ("2", "bad head"),
        ("2.x", "bad head"),
        ("foo:1.1", "prefix must be one of"),
    ],
)
def test_bad_labels_name_the_allowed_range(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_head(text, CFG)
    assert "\n" not in str(info.value)


def test_hook_names_and_sweep_order():
    assert Head("encoder", 1, 6).hook() == "encoder.1.attn.hook_pattern"
    assert Head("decoder", 2, 0, "cross_attn").hook("z") == "decoder.2.cross_attn.hook_z"
    heads = all_heads(CFG)
    assert len(heads) == 24 and heads[0].label == "1.1" and heads[-1].label == "3.8" and heads == sorted(heads)


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
