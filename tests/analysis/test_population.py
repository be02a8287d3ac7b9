"""Findings over a population: planted models with and without a matching head, the k/N counts, the CLI."""

from __future__ import annotations

import json
import os

import pytest

from lsa_interp import cli
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.population import MATCHING, condition, run_population
from lsa_interp.model.checkpoint import save_model

STEPS = ("matching heads", "copy attention")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("population")
    made = []
    for name, matching, preset in (("a", True, "copy-20"), ("b", True, "copy-20"), ("c", False, "nocopy-20")):
        made.append(root / name)
        metadata = {"preset": preset, "train_config": {"batching": "alphabet"}}
        save_model(planted_model(matching=matching), made[-1], metadata=metadata)
    return made


@pytest.mark.slow
def test_counts_over_planted_models(checkpoints, tmp_path):
    seen = []
    population = run_population(checkpoints, workers=2, steps=STEPS, progress=seen.append)
    assert sorted(seen) == sorted(map(str, checkpoints))
    assert [r["model"] for r in population.rows] == [str(c) for c in checkpoints]
    table = {row["finding"]: row for row in population.table()}
    assert (table[MATCHING]["holds"], table[MATCHING]["judged"], table[MATCHING]["models"]) == (2, 3, 3)
    values = table[MATCHING]["values"]
    assert values[str(checkpoints[0])] > 0.25 > values[str(checkpoints[2])]
    conditions = population.by_condition()
    assert conditions["copy-20 / alphabet"]["matching_head"] == "2/2"
    assert conditions["nocopy-20 / alphabet"]["matching_head"] == "0/1"
    assert conditions["copy-20 / alphabet"]["figure5_attention"] is not None
    paths = population.write(tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert len(doc["models"]) == 3 and doc["conditions"]["nocopy-20 / alphabet"]["models"] == 1
    assert "holds in (k/N judged)" in paths["html"].read_text()


def test_condition_reads_preset_and_batching():
    assert condition({"preset": "copy-20", "train_config": {"batching": "random"}}) == "copy-20 / random"
    assert condition({}) == "unknown / unknown"


def test_no_checkpoints_and_bad_steps_raise():
    with pytest.raises(ValueError, match="at least one"):
        run_population([])


@pytest.mark.slow
def test_report_models_command(checkpoints, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("lsa_interp.analysis.population.DEFAULT_STEPS", STEPS)
    pattern = str(checkpoints[0].parent / "*")
    with pytest.raises(SystemExit) as info:
        cli.main(["report", "--models", pattern, "--workers", "2", "--out", str(tmp_path / "pop")])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "holds in 2/3 of 3" in out and "nocopy-20 / alphabet: 1 models, matching head 0/1" in out
    assert (tmp_path / "pop" / "population.html").is_file()


@pytest.mark.parametrize("where", ["/proc/x", "file", "readonly/sub"])
def test_an_unwritable_out_is_refused_before_any_work(tmp_path, capsys, monkeypatch, where):
    monkeypatch.setattr("lsa_interp.commands.report.open_model", lambda *a: pytest.fail("a model was loaded"))
    (tmp_path / "file").write_text("x")
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly").chmod(0o500)
    out = where if where.startswith("/") else str(tmp_path / where)
    try:
        if where.startswith("readonly") and os.access(tmp_path / "readonly", os.W_OK):
            pytest.skip("running as root: a read-only directory is still writable")
        for command in ("report", "splice"):
            with pytest.raises(SystemExit) as info:
                cli.main([command, "--model", "copy-200", "--out", out])
            err = capsys.readouterr().err
            assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "cannot write to --out" in err
    finally:
        (tmp_path / "readonly").chmod(0o700)
