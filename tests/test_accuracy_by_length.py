"""analyses/accuracy_by_length.py: per rule and query length, on the rows of one dataset, for every model."""

from __future__ import annotations

import json
from pathlib import Path

from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.checkpoint import save_model
from tests.helpers import TINY, load_script


def _script():
    return load_script("analyses/accuracy_by_length.py")


def _model(path: Path, data_seed: int) -> str:
    save_model(HookedEncoderDecoder(TINY), path, metadata={"preset": "copy-20", "seed": 0, "data_seed": data_seed})
    return str(path)


def test_each_models_cells_count_the_same_rows_by_rule_and_query_length(tmp_path, capsys):
    names = [_model(tmp_path / "a", 0), _model(tmp_path / "b", 0)]
    out = tmp_path / "by_length.json"
    assert _script().main([*sum((["--model", n] for n in names), []), "--rule", "succ", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    cells = result["models"][names[0]]
    assert set(cells) == {f"succ/{n}" for n in range(3, 8)}  # copy-20's windows: 3 to 7 letters
    assert sum(cell["rows"] for cell in cells.values()) == result["rows"]
    assert all(result["models"][names[1]][k]["rows"] == cell["rows"] for k, cell in cells.items())
    assert all(0 <= c["correct"] + c["wrong_same_length"] <= c["rows"] for c in cells.values())
    assert "succ/3" in capsys.readouterr().out


def test_models_of_different_datasets_are_refused(tmp_path, capsys):
    names = [_model(tmp_path / "a", 0), _model(tmp_path / "b", 1)]
    assert _script().main(["--model", names[0], "--model", names[1], "--out", str(tmp_path / "x.json")]) == 2
    assert "trained on different datasets" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
