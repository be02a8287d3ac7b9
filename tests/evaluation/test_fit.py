"""Training fit: train rows against val rows, non-copy rows of the seen transformations only."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from lsa_interp.data import Task, save_dataset
from lsa_interp.evaluation import fit
from lsa_interp.evaluation.metrics import Accuracy
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.helpers import run

SMALL = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=128)


def test_fit_rows_keep_only_non_copy_rows_of_the_seen_rules_and_are_repeatable(tiny):
    seen = tiny.config.train_transformations
    val = tiny.splits["val"]
    assert any(t.is_copy for t in val) and any(t.transformation not in seen for t in val)
    eligible = [t for t in val if not t.is_copy and t.transformation in seen]
    picked = fit.fit_rows(val, seen, 10)
    assert len(picked) == 10 and picked == fit.fit_rows(val, seen, 10)
    assert all(not t.is_copy and t.transformation in seen for t in picked)
    assert fit.fit_rows(val, seen, 10, seed=1) != picked
    assert fit.fit_rows(val, seen, 10**6) == eligible


def test_training_fit_scores_each_split_on_its_own_rows(tiny, monkeypatch):
    train_rows = set(tiny.splits["train"])

    def answers_train_only(model, tasks, batch_size):  # right on training rows, wrong elsewhere
        return [t.answer if t in train_rows else t.answer + "z" for t in tasks]

    monkeypatch.setattr(fit, "predict", answers_train_only)
    result = fit.training_fit(HookedEncoderDecoder(SMALL), tiny, rows=25, model_name="m")
    assert (result.overall["train"].correct, result.overall["train"].total) == (25, 25)
    assert (result.overall["val"].correct, result.overall["val"].total) == (0, 25)
    assert result.gap == 100.0
    assert set(result.by_transformation["val"]) <= set(tiny.config.train_transformations)
    assert sum(a.total for a in result.by_transformation["train"].values()) == 25
    levels = result.by_level["val"]
    assert list(levels) == sorted(levels) and sum(a.total for a in levels.values()) == 25
    assert all(a.correct == 0 for a in levels.values()) and result.by_level["train"][max(levels)].percent == 100.0
    saved = result.to_dict()
    assert saved["gap_points"] == 100.0 and saved["overall"]["val"]["percent"] == 0.0
    assert saved["by_permutation_level"]["val"].keys() == {str(level) for level in levels}
    figure = fit.fit_figure(result)
    assert [trace.name.split()[0] for trace in figure.data] == ["train", "train", "val", "val"]
    by_level = figure.data[3]
    assert list(by_level.y) == [levels[level].percent for level in levels] and by_level.customdata[-1][1] > 0


def test_levels_count_the_letters_out_of_their_standard_place():
    standard = "abcdefghijklmnopqrstuvwxyz"
    swapped = "bacdefghijklmnopqrstuvwxyz"
    tasks = [
        Task(standard, (("abc", "abd"),), "ijk", "ijl", "succ"),
        Task(swapped, (("abc", "abd"),), "ijk", "ijl", "succ"),
    ]
    levels = fit.by_permutation_level([tasks[1], tasks[0], tasks[1]], ["ijl", "x", "x"])
    assert {level: (a.correct, a.total) for level, a in levels.items()} == {0: (0, 1), 2: (1, 2)}
    assert list(levels) == [0, 2]


def test_training_fit_refuses_bad_rows_and_missing_splits(tiny):
    with pytest.raises(ValueError, match="rows must be positive"):
        fit.training_fit(HookedEncoderDecoder(SMALL), tiny, rows=0)
    no_train = replace(tiny, splits={"val": tiny.splits["val"]})
    with pytest.raises(ValueError, match=r"lacks split\(s\) \['train'\]"):
        fit.training_fit(HookedEncoderDecoder(SMALL), no_train, rows=5)
    copies_only = replace(tiny, splits={**tiny.splits, "val": [t for t in tiny.splits["val"] if t.is_copy]})
    with pytest.raises(ValueError, match="val split has no non-copy rows"):
        fit.training_fit(HookedEncoderDecoder(SMALL), copies_only, rows=5)


def test_fit_command_prints_the_table_and_writes_an_offline_page(tiny, tmp_path, capsys):
    data = save_dataset(tiny, tmp_path / "data")
    model = save_model(HookedEncoderDecoder(SMALL), tmp_path / "model")
    code, out, err = run(
        ["fit", "--model", str(model), "--data", str(data), "--rows", "30", "--out", str(tmp_path / "f")], capsys
    )
    assert code == 0, err
    assert "train - val" in out and "all" in out and "permutation level" in out
    saved = json.loads((tmp_path / "f" / "fit.json").read_text())
    assert saved["overall"]["train"]["total"] == saved["overall"]["val"]["total"] == 30
    page = (tmp_path / "f" / "fit.html").read_text()
    assert "Plotly.newPlot" in page and "<script src=" not in page.replace(" ", "") and "plotly.js v" in page
    code, _, err = run(["fit", "--model", str(model), "--data", str(tmp_path / "absent")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "absent" in err


def _result() -> fit.FitResult:
    """val lacks succ, train lacks permutation level 5."""
    return fit.FitResult(
        model="m",
        preset="p",
        seed=1,
        rows=10,
        overall={"train": Accuracy(9, 10), "val": Accuracy(6, 10)},
        by_transformation={"train": {"succ": Accuracy(4, 5), "pred": Accuracy(5, 5)}, "val": {"pred": Accuracy(6, 10)}},
        by_level={"train": {0: Accuracy(9, 10)}, "val": {0: Accuracy(2, 4), 5: Accuracy(4, 6)}},
    )


def test_the_figure_plots_each_split_s_own_bars_with_their_counts():
    figure = fit.fit_figure(_result())
    train_rules, train_levels, val_rules, val_levels = figure.data
    assert list(train_rules.x) == ["succ", "pred"] and list(train_rules.y) == [80.0, 100.0]
    assert list(val_rules.x) == ["pred"] and [list(c) for c in val_rules.customdata] == [[6, 10]]
    assert list(train_levels.x) == ["standard"] and list(val_levels.x) == ["standard", "5"]
    assert list(val_levels.y) == [50.0, 200 / 3] and [list(c) for c in val_levels.customdata] == [[2, 4], [4, 6]]
    assert val_rules.name == "val (60.0% overall)" and (val_rules.showlegend, val_levels.showlegend) == (True, False)
    assert "Training fit of m on p" in figure.layout.title.text


def test_write_fit_makes_missing_folders_and_writes_indented_json(tmp_path):
    paths = fit.write_fit(_result(), tmp_path / "a" / "b", page=False)
    assert set(paths) == {"json"} and not (tmp_path / "a" / "b" / "fit.html").exists()
    text = paths["json"].read_text()
    assert text.startswith('{\n  "model": "m",\n') and json.loads(text)["gap_points"] == pytest.approx(30.0)


def test_training_fit_records_the_dataset_and_takes_a_single_row(tiny, monkeypatch):
    monkeypatch.setattr(fit, "predict", lambda model, tasks, batch_size: [t.answer for t in tasks])
    result = fit.training_fit(HookedEncoderDecoder(SMALL), tiny, rows=1)
    assert (result.model, result.preset, result.seed, result.rows) == ("", tiny.config.name, tiny.seed, 1)
    assert result.overall["train"].total == result.overall["val"].total == 1


def test_levels_need_one_prediction_per_task():
    task = Task("abcdefghijklmnopqrstuvwxyz", (("abc", "abd"),), "ijk", "ijl", "succ")
    with pytest.raises(ValueError):
        fit.by_permutation_level([task, task], ["ijl"])


def test_training_fit_decodes_and_records_as_many_rows_of_each_split_as_the_smaller_has(tiny, monkeypatch):
    """Rows beyond a split's size decode the same number of each split, and the result records that number (it
    recorded the number asked for, and decoded all of the larger split)."""
    monkeypatch.setattr(fit, "predict", lambda model, tasks, batch_size: [t.answer for t in tasks])
    sizes = fit.fit_pool_sizes(tiny)
    assert sizes["train"] != sizes["val"]
    result = fit.training_fit(HookedEncoderDecoder(SMALL), tiny, rows=10**8)
    assert result.rows == result.overall["train"].total == result.overall["val"].total == min(sizes.values())
    assert fit.training_fit(HookedEncoderDecoder(SMALL), tiny, rows=7).rows == 7


def test_fit_command_says_when_rows_exceed_a_split_and_writes_the_rows_decoded(tiny, tmp_path, capsys):
    data = save_dataset(tiny, tmp_path / "data")
    model = save_model(HookedEncoderDecoder(SMALL), tmp_path / "model")
    size = min(fit.fit_pool_sizes(tiny).items(), key=lambda item: item[1])
    args = ["fit", "--model", str(model), "--data", str(data), "--device", "cpu", "--out", str(tmp_path / "f")]
    code, out, err = run([*args, "--rows", "100000000"], capsys)
    assert code == 0, err
    notice = (
        f"--rows 100,000,000 is more than the {size[0]} split's {size[1]:,} non-copy rows of the seen "
        f"transformations: decoding {size[1]:,} rows of each split"
    )
    assert err.splitlines() == [notice]
    saved = json.loads((tmp_path / "f" / "fit.json").read_text())
    assert saved["rows"] == saved["overall"]["train"]["total"] == saved["overall"]["val"]["total"] == size[1]
    overall = saved["overall"]
    assert all(f"({overall[s]['correct']}/{overall[s]['total']})" in out for s in ("train", "val")) and "…" not in out
    code, _, err = run([*args, "--rows", str(size[1])], capsys)
    assert code == 0 and "is more than" not in err


def test_fit_takes_cuda_when_there_is_one_as_evaluate_does(monkeypatch, capsys):
    """Its default was cpu whatever the machine; --device cpu still picks the CPU."""
    import torch

    from lsa_interp.commands import common

    opened = []

    def record_device(name, device="cpu"):
        opened.append(device)
        raise ValueError("stop here")

    monkeypatch.setattr(common, "open_model", record_device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run(["fit", "--model", "copy-20"], capsys)[0] == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run(["fit", "--model", "copy-20"], capsys)[0] == 2
    assert run(["fit", "--model", "copy-20", "--device", "cpu"], capsys)[0] == 2
    assert opened == ["cuda", "cpu", "cpu"]
