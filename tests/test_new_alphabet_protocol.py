"""analyses/new_alphabet_protocol.py: a model scored on the paper's new-alphabet test splits, with and without
the standard alphabet, per draw and as the mean over models per draw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lsa_interp.data import STANDARD_ALPHABET
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.checkpoint import save_model
from tests.helpers import TINY, load_script


def _script():
    return load_script("analyses/new_alphabet_protocol.py")


def _model(path: Path, data_seed: int = 0) -> str:
    metadata = {"preset": "copy-20", "seed": 0, "data_seed": data_seed, "batching": "random"}
    save_model(HookedEncoderDecoder(TINY), path, metadata=metadata)
    return str(path)


def test_a_model_that_solves_only_the_standard_alphabet_scores_its_share(tmp_path, monkeypatch, capsys):
    script = _script()
    solved = {"succ", "reverse"}  # one seen rule, one new rule

    def only_standard(model, tasks, batch_size):
        return [t.answer if t.alphabet == STANDARD_ALPHABET and t.transformation in solved else "" for t in tasks]

    monkeypatch.setattr(script, "predict", only_standard)
    names = [_model(tmp_path / "a"), _model(tmp_path / "b")]
    out = tmp_path / "protocol.json"
    assert script.main([*sum((["--model", n] for n in names), []), "--draws", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    draws = result["models"][names[0]]["draws"]
    assert len(draws) == 2 and result["models"][names[0]]["batching"] == "random"
    for draw in draws:
        for cell in ("seen_transformations", "new_transformations"):
            found = draw[cell]
            assert found["without_standard"] == 0.0
            assert 0 < found["with_standard"] < 10  # one rule of ten (or nine) in one alphabet of 21
            assert 0 < found["standard_only"] < 100 and 0 < found["standard_rows"] < found["rows"]
    seen = [d["seen_transformations"]["with_standard"] for d in draws]
    assert result["summary"]["seen_transformations"]["draw_means"] == seen  # both models answer alike
    assert result["summary"]["seen_transformations"]["sd_over_draws"] is not None
    assert "paper, copy-20 random batching" in out.with_suffix(".html").read_text()
    assert "with the standard alphabet" in capsys.readouterr().out


def test_fewer_than_one_draw_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--model", "copy-20", "--draws", "0", "--out", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2 and not (tmp_path / "x.json").exists()


def test_models_of_different_datasets_are_refused(tmp_path, capsys):
    names = [_model(tmp_path / "a", 0), _model(tmp_path / "b", 1)]
    out = tmp_path / "x.json"
    assert (
        load_script("analyses/new_alphabet_protocol.py").main(
            ["--model", names[0], "--model", names[1], "--out", str(out)]
        )
        == 2
    )
    assert "trained on different datasets" in capsys.readouterr().err and not out.exists()
