"""Catalogue, task drawing, training tab and rendering of the explorer, without a browser."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lsa_interp.analysis.planted import planted_model
from lsa_interp.data.task import Task
from lsa_interp.explorer.catalogue import ModelCatalogue, discover_models, entries_for_path
from lsa_interp.explorer.draw import draw_tasks, filter_tasks, outcome_of
from lsa_interp.explorer.render import ViewRenderer, export_html
from lsa_interp.explorer.state import ViewState
from lsa_interp.explorer.training import condition_intervals, epoch_history, history_figure, run_table
from lsa_interp.model import save_model

PRED = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd", "pred")


@pytest.fixture(scope="module")
def model():
    return planted_model()


def test_catalogue_reads_runs_replicates_and_checkpoints(tmp_path, model):
    save_model(model, tmp_path / "run" / "model")
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    for i in (0, 1):
        save_model(model, tmp_path / "stack" / f"replicate-{i}" / "model")
    save_model(model, tmp_path / "ckpt")
    found = discover_models([tmp_path / "run", tmp_path / "stack", tmp_path / "ckpt", tmp_path / "run"], shipped=False)
    assert [e.name for e in found] == ["run", "stack/replicate-0", "stack/replicate-1", "ckpt"]
    assert found[0].metrics_file == tmp_path / "run" / "metrics.jsonl" and found[2].replicate == 1
    assert found[3].run_dir is None and found[3].metrics_file is None
    with pytest.raises(FileNotFoundError, match="holds no model"):
        entries_for_path(tmp_path / "run" / "metrics.jsonl")
    catalogue = ModelCatalogue(found, {"mem": model})
    assert catalogue.names[0] == "mem" and catalogue.model("ckpt").cfg == model.cfg
    with pytest.raises(ValueError, match="unknown model '/etc'; this explorer offers: mem, run"):
        catalogue.model("/etc")
    calls = []
    assert catalogue.memo("mem", "k", lambda m: calls.append(1) or 5) == catalogue.memo("mem", "k", lambda m: 6) == 5


def test_filter_and_outcomes():
    permuted = Task.parse("bacdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > bcd", "pred")
    copy = Task.parse("abcdefghijklmnopqrstuvwxyz | bcd > acd | bcd > acd", "pred")
    succ = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd > bce", "succ")
    tasks = [PRED, permuted, copy, succ]
    assert filter_tasks(tasks, "pred", "any") == [PRED, permuted]
    assert filter_tasks(tasks, "any", "standard") == [PRED, succ]
    assert filter_tasks(tasks, "any", "permuted") == [permuted]
    assert [outcome_of(PRED, a) for a in ("acd", "bce", "xyz")] == ["correct", "other rule", "wrong"]
    with pytest.raises(ValueError, match="alphabet kind"):
        filter_tasks(tasks, "pred", "latin")


def test_draw_tasks_by_outcome(model):
    # the planted model answers the first letter of the example output: right only for one-letter answers
    right = Task.parse("abcdefghijklmnopqrstuvwxyz | g > f | b > f", "pred")
    tasks = [PRED, right, PRED.with_answer("fcd")]
    assert draw_tasks(model, tasks, "correct") == [(right, "f")]
    assert {t for t, _ in draw_tasks(model, tasks, "wrong")} == {PRED, PRED.with_answer("fcd")}
    assert len(draw_tasks(model, tasks, "any", n=2)) == 2
    with pytest.raises(ValueError, match="unknown outcome"):
        draw_tasks(model, tasks, "lucky")


def test_epoch_history_and_run_table(tmp_path):
    records = [
        {"type": "step", "step": 1, "train_loss": 3.0},
        {"type": "epoch", "epoch": 1, "val_acc": 0.5, "val_acc_by_transformation": {"succ": 0.4}, "replicate": 0},
        {"type": "epoch", "epoch": 1, "val_acc": 0.7, "val_acc_by_transformation": {"succ": 0.6}, "replicate": 1},
        {"type": "epoch", "epoch": 2, "val_acc": 0.9, "val_acc_by_transformation": {"succ": 0.8}, "replicate": 1},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    history = epoch_history(path, replicate=1)
    assert history["epoch"].tolist() == [1, 2] and history["acc:succ"].tolist() == [0.6, 0.8]
    assert epoch_history(path, replicate=None).empty
    fig = history_figure(history, "t")
    assert [t.name for t in fig.data] == ["overall", "succ"] and list(fig.data[0].y) == [70.0, 90.0]
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        epoch_history(path)

    assert run_table(tmp_path / "absent") is None
    (tmp_path / "results").mkdir()
    table = pd.DataFrame({"condition": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0], "acc": [90.0, 92.0, 94.0, 50.0]})
    table.to_csv(tmp_path / "results" / "runs.csv", index=False)
    summary = condition_intervals(run_table(tmp_path / "results"))
    assert summary["runs"].tolist() == [3, 1] and "seed" not in summary
    low, high = (float(x) for x in summary.loc[0, "acc"].split("[")[1].rstrip("]").split(","))
    assert summary.loc[0, "acc"].startswith("92.0 [") and 90.0 <= low < 92.0 < high <= 94.0
    assert summary.loc[1, "acc"] == "50.0"
    assert condition_intervals(table.drop(columns="condition")) is None


def test_render_shows_errors_inline_and_exports(model):
    renderer = ViewRenderer(ModelCatalogue(models={"planted": model}))
    assert "unknown model 'nope'" in renderer.render(ViewState(model="nope")).error
    assert "unknown symbol" in renderer.render(ViewState(model="planted", task="abc | 1 > 2 | x")).error
    assert "no head '9.9'" in renderer.render(ViewState(model="planted", ablate="9.9")).error
    view = renderer.render(ViewState(model="planted", ablate="3.1", graph="2", heads="all"))
    assert view.error == "" and view.clean.answer == "f" and view.answer_changed
    assert set(view.figures) == {"top-k", "encoder self-attention", "encoder hidden states", "decoder self-attention",
                                 "cross-attention"}  # fmt: skip
    assert len(view.figures["encoder self-attention"]["data"]) == 4  # every head of layer 2
    assert any("-> " in line and "(changed)" in line for line in view.summary_lines())
    page = export_html(view)
    assert page.startswith("<!DOCTYPE html>") and "ablate=3.1" in page and "<script src=" not in page
