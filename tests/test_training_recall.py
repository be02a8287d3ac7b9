"""analyses/training_recall.py: a model's val answers counted against the train split's answers, JSON and page."""

from __future__ import annotations

import json

from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.checkpoint import save_model
from tests.helpers import TINY, load_script


def _model(tmp_path):
    path = tmp_path / "m"
    save_model(HookedEncoderDecoder(TINY), path, metadata={"preset": "copy-20", "seed": 0, "data_seed": 0})
    return path


def test_a_model_that_recalls_every_trained_query_is_counted_so(tmp_path, tiny, monkeypatch):
    script = load_script("analyses/training_recall.py")
    trained = script.trained_answers(tiny.splits["train"])

    def recall_first(model, tasks, size):  # the first trained answer where there is one, else the right answer
        return [next(iter(trained.get((t.alphabet, t.query), {t.answer: ""}))) for t in tasks]

    monkeypatch.setattr(script, "evaluation_dataset", lambda model, splits: tiny)
    monkeypatch.setattr(script, "predict", recall_first)
    model, out = _model(tmp_path), tmp_path / "recall.json"
    args = ["--model", str(model), "--rows", "100000", "--new-alphabet-rows", "50", "--out", str(out)]
    assert script.main(args) == 0
    found = json.loads(out.read_text())["models"][str(model)]
    assert found["val"]["rows"] == sum(1 for t in tiny.splits["val"] if not t.is_copy)
    for group in ("seen", "new"):
        counts = found["val"]["totals"][group]
        assert counts["trained"]["rows"] > 0
        assert counts["trained"]["percent_recalled"] == 100.0
        assert counts["untrained"]["percent_correct"] == 100.0
        assert counts["leaked"] == 0
    seen = found["val"]["totals"]["seen"]
    assert sum(seen["recalled_from"].values()) == seen["trained"]["recalled"]
    new_alphabets = found["new_alphabets"]
    assert new_alphabets["rows"] == 50
    assert sum(c["trained"]["rows"] for c in new_alphabets["totals"].values()) == 0  # no training alphabet
    assert sum(c["untrained"]["percent_correct"] == 100.0 for c in new_alphabets["totals"].values()) == 2
    page = out.with_suffix(".html").read_text()
    assert page.count("plotly.js v") == 1 and "The same rules on new alphabets (nothing to recall)" in page


def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys):
    script = load_script("analyses/training_recall.py")
    out = tmp_path / "r.json"
    assert script.main(["--model", "copy-20", "--rows", "0", "--out", str(out)]) == 2
    assert "--rows must be positive, got 0" in capsys.readouterr().err
    assert script.main(["--model", "copy-20", "--new-alphabet-rows", "-1", "--out", str(out)]) == 2
    assert "--new-alphabet-rows must be positive, got -1" in capsys.readouterr().err
    assert script.main(["--model", "copy-20", "--out", str(tmp_path / "r.csv")]) == 2
    assert "--out must be a .json file" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
