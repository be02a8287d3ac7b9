"""scripts/pack_results.py: a session's results survive the trip in chunks; datasets and states stay behind."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "pack_results.py"
spec = importlib.util.spec_from_file_location("pack_results", SCRIPT)
pack_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pack_results)


def test_chunks_from_several_fetches_rebuild_the_results_without_states_or_data(tmp_path):
    sweep = tmp_path / "grid"
    model = sweep / "stacks" / "stack-0" / "replicate-0" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(os.urandom(300_000))  # weights hardly compress
    (model / "evaluation.json").write_text('{"table1": {}}')
    (sweep / "stacks" / "stack-0" / "state.pt").write_bytes(b"x" * 1000)
    (sweep / "data" / "copy-20-d0").mkdir(parents=True)
    (sweep / "data" / "copy-20-d0" / "manifest.json").write_text("{}")
    (sweep / "results.csv").write_text("run\n")
    chunks = pack_results.pack([sweep], tmp_path / "bundle", chunk_mib=0.1)
    assert len(chunks) > 1
    first, second = tmp_path / "fetch1", tmp_path / "fetch2"
    for folder, part in ((first, chunks[:1]), (second, chunks[1:])):
        folder.mkdir()
        for chunk in part:
            (folder / chunk.name).write_bytes(chunk.read_bytes())
    (first / "bundle.sha256").write_text((tmp_path / "bundle" / "bundle.sha256").read_text())
    pack_results.unpack([first, second], tmp_path / "back")
    back = tmp_path / "back" / "grid"
    restored = back / "stacks" / "stack-0" / "replicate-0" / "model"
    assert (restored / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()
    assert (back / "results.csv").is_file()
    assert not (back / "stacks" / "stack-0" / "state.pt").exists() and not (back / "data").exists()
    (second / chunks[-1].name).unlink()
    with pytest.raises(SystemExit, match="checksum"):
        pack_results.unpack([first, second], tmp_path / "again")


def test_html_pages_stay_behind_and_records_keep_everything_but_the_weights(tmp_path):
    sweep = tmp_path / "grid"
    replicate = sweep / "stacks" / "stack-0" / "replicate-0"
    (replicate / "model").mkdir(parents=True)
    (replicate / "analysis" / "matching").mkdir(parents=True)
    (replicate / "model" / "model.safetensors").write_bytes(os.urandom(1000))
    (replicate / "model" / "config.json").write_text('{"metadata": {}}')
    (replicate / "model" / "evaluation.json").write_text('{"table1": {}}')
    (replicate / "analysis" / "matching" / "matching.json").write_text("{}")
    (replicate / "analysis" / "matching" / "matching.html").write_text("<html>" + "x" * 1000)
    (sweep / "stacks" / "stack-0" / "metrics.jsonl").write_text("{}\n")
    (sweep / "stacks" / "stack-0" / "state.pt").write_bytes(b"x")
    pack_results.pack([sweep], tmp_path / "bundle", chunk_mib=1)
    pack_results.unpack([tmp_path / "bundle"], tmp_path / "back")
    back = tmp_path / "back" / "grid" / "stacks" / "stack-0" / "replicate-0"
    assert (back / "model" / "model.safetensors").is_file() and (
        back / "analysis" / "matching" / "matching.json"
    ).is_file()
    assert not (back / "analysis" / "matching" / "matching.html").exists()
    assert pack_results.records(sweep, tmp_path / "kept") == 4
    kept = sorted(str(p.relative_to(tmp_path / "kept")) for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert kept == [
        "stacks/stack-0/metrics.jsonl",
        "stacks/stack-0/replicate-0/analysis/matching/matching.json",
        "stacks/stack-0/replicate-0/model/config.json",
        "stacks/stack-0/replicate-0/model/evaluation.json",
    ]
    with pytest.raises(SystemExit, match="not a directory"):
        pack_results.records(tmp_path / "missing", tmp_path / "kept")
