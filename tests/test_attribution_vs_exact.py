"""analyses/attribution_vs_exact.py: attribution patching against exact patching, per model and step count."""

from __future__ import annotations

import json

import pytest

from tests.analysis.patch_setup import planted_pairs, saved_planted
from tests.helpers import load_script


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return saved_planted(tmp_path_factory.mktemp("models"))


def test_every_site_and_step_count_is_compared_with_the_exact_grid(saved, tmp_path, monkeypatch, capsys):
    script = load_script("analyses/attribution_vs_exact.py")
    monkeypatch.setattr(script, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "agreement.json"
    args = ["--model", saved[0], "--model", saved[1], "--pairs", "3", "--steps", "1", "--steps", "4", "--out", str(out)]
    assert script.main(args) == 0
    report = json.loads(out.read_text())
    planted, plain = (report["models"][name] for name in saved)
    assert report["steps"] == [1, 4] and planted["pairs_solved"] == 3 and plain == {"pairs_solved": 0}
    assert list(planted["estimates"]) == ["1", "4"]
    sites = planted["estimates"]["4"]["sites"]
    assert list(sites) == [
        "encoder residual",
        "encoder attention output",
        "encoder MLP output",
        "heads",
        "encoder heads by position",
        "decoder residual",
    ]
    heads = sites["heads"]
    assert heads["correlation"] > 0.99 and heads["exact_top"] == pytest.approx(1, abs=1e-3)
    assert heads["exact_at_estimated_top"] == pytest.approx(heads["exact_top"])
    printed = capsys.readouterr().out
    assert "4 step(s)" in printed and "no pair solved on both sides" in printed


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    script = load_script("analyses/attribution_vs_exact.py")
    out = tmp_path / "agreement.json"
    assert script.main(["--model", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "attribution_vs_exact: error:" in capsys.readouterr().err and not out.exists()
    for bad, message in (
        (["--pairs", "0"], "--pairs must be at least 1"),
        (["--steps", "0"], "--steps must be at least 1"),
    ):
        with pytest.raises(SystemExit) as info:
            script.main([*bad, "--out", str(out)])
        assert info.value.code == 2 and message in capsys.readouterr().err
