"""Catalogue, task drawing, training tab and rendering of the explorer, without a browser."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from lsa_interp.analysis.planted import planted_model
from lsa_interp.data.task import Task
from lsa_interp.evaluation.paper_tables import CELLS
from lsa_interp.explorer import draw
from lsa_interp.explorer.catalogue import ModelCatalogue, ModelEntry, discover_models, entries_for_path
from lsa_interp.explorer.draw import draw_tasks, filter_tasks, outcome_of
from lsa_interp.explorer.render import ViewRenderer, export_html
from lsa_interp.explorer.state import ViewState
from lsa_interp.explorer.training import (
    grid_tables,
    history_figure,
    model_history,
    results_table_path,
    training_record,
)
from lsa_interp.model import save_model

PRED = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd", "pred")


@pytest.fixture(scope="module")
def model():
    return planted_model()


def test_catalogue_reads_runs_replicates_sweeps_and_checkpoints(tmp_path, model):
    save_model(model, tmp_path / "run" / "model")
    for i in (0, 1):
        save_model(model, tmp_path / "stack" / f"replicate-{i}" / "model")
    save_model(model, tmp_path / "ckpt")
    save_model(model, tmp_path / "sweep" / "stacks" / "stack-000" / "replicate-1" / "model")
    items = [tmp_path / "run", tmp_path / "stack", tmp_path / "ckpt", tmp_path / "run", tmp_path / "sweep"]
    found = discover_models(items, shipped=False)
    names = ["run", "stack/replicate-0", "stack/replicate-1", "ckpt", "sweep/stack-000/replicate-1"]
    assert [e.name for e in found] == names
    assert found[0].run_dir == tmp_path / "run" and found[2].replicate == 1 and found[2].run_dir == tmp_path / "stack"
    assert found[3].run_dir is None
    assert (found[4].run_dir, found[4].replicate) == (tmp_path / "sweep" / "stacks" / "stack-000", 1)
    (tmp_path / "run" / "metrics.jsonl").write_text("")
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
    assert draw_tasks(model, tasks, "correct").found == [(right, "f")]
    assert {t for t, _ in draw_tasks(model, tasks, "wrong").found} == {PRED, PRED.with_answer("fcd")}
    assert len(draw_tasks(model, tasks, "any", n=2).found) == 2
    with pytest.raises(ValueError, match="unknown outcome"):
        draw_tasks(model, tasks, "lucky")


def _stack_run(run_dir, records):
    run_dir.mkdir(parents=True)
    (run_dir / "train_config.json").write_text(json.dumps({"preset": "copy-20", "batching": "random", "replicates": 2}))
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")


def test_training_history_of_a_replicate_and_why_there_is_none(tmp_path):
    by_rule = lambda acc: {"succ": acc, "fix_pred_succ": acc / 2}
    _stack_run(
        tmp_path / "stack",
        [
            {"type": "step", "step": 1, "train_loss": 3.0},
            {"type": "epoch", "epoch": 1, "val_acc": 0.5, "val_acc_by_transformation": by_rule(0.4), "replicate": 0},
            {"type": "epoch", "epoch": 2, "val_acc": 0.9, "val_acc_by_transformation": by_rule(0.8), "replicate": 1,
             "matching_score": 0.3},
            {"type": "epoch", "epoch": 1, "val_acc": 0.7, "val_acc_by_transformation": by_rule(0.6), "replicate": 1,
             "matching_score": 0.2},
        ],
    )  # fmt: skip
    history = model_history(ModelEntry("stack/replicate-1", None, tmp_path / "stack", 1))
    assert history["epoch"].tolist() == [1, 2] and history["acc_succ"].tolist() == [0.6, 0.8]
    assert history.index.tolist() == [0, 1] and "index" not in history.columns
    fig = history_figure(history, "t")
    assert [(t.name, t.xaxis) for t in fig.data] == [
        ("overall", "x"), ("matching-head score (x100)", "x"), ("succ", "x2"), ("fix_pred_succ", "x3")
    ]  # fmt: skip
    assert list(fig.data[0].y) == [70.0, 90.0] and list(fig.data[3].y) == [30.0, 40.0]
    assert len(fig.layout.annotations) == 3  # no losses recorded: no loss panel
    losses = history_figure(history.assign(train_loss=[0.5, 0.1], val_loss=[0.9, float("nan")]), "t")
    assert [(t.name, t.xaxis, list(t.y)[0]) for t in losses.data[-2:]] == [
        ("training loss (mean of the epoch)", "x4", 0.5), ("validation loss", "x4", 0.9)
    ]  # fmt: skip
    assert [t.name for t in losses.data[:-2]] == [t.name for t in fig.data]
    assert losses.layout.yaxis4.type == "log" and losses.layout.annotations[3].text == "loss"
    with pytest.raises(LookupError, match="checkpoint without its training run"):
        model_history(ModelEntry("copy-200", tmp_path))
    with pytest.raises(LookupError, match="recorded no epoch yet"):
        model_history(ModelEntry("stack/replicate-2", None, tmp_path / "stack", 2))
    with pytest.raises(LookupError, match="not a training run"):
        model_history(ModelEntry("x", None, tmp_path))


def test_a_shipped_checkpoint_shows_the_history_of_its_committed_record(tmp_path):
    records = tmp_path / "records"
    recipe = {"preset": "copy-20", "seed": 0, "batching": "random", "epochs": 20, "precision": "fp32"}
    epoch = lambda acc, replicate=0: {"type": "epoch", "step": 100, "epoch": 1, "val_acc": acc, "replicate": replicate}
    for name, config, history in (
        ("cpu/copy-20-random-s0", {**recipe, "length_bucketing": False}, [epoch(0.9)]),
        ("cpu/bucketed", {**recipe, "length_bucketing": True}, [epoch(0.1)]),  # another run of the same seed
        ("stack", {"runs": [{"name": f"copy-20-random-s{i}-bf16", "batching": "random"} for i in (0, 1)]},
         [epoch(0.2), epoch(0.8, replicate=1)]),
    ):  # fmt: skip
        (records / name).mkdir(parents=True)
        (records / name / "train_config.json").write_text(json.dumps(config))
        (records / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))

    def shipped(name, meta):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"metadata": meta}))
        return ModelEntry(name, tmp_path / name)

    single = shipped("copy-20", {"train_config": {**recipe, "length_bucketing": False, "micro_batches": 4}})
    replicate = shipped("copy-20-s1-bf16", {"run": "copy-20-random-s1-bf16", "train_config": recipe})
    assert training_record({"run": "copy-20-random-s1-bf16"}, records) == (records / "stack", 1)
    assert model_history(single, records)["val_acc"].tolist() == [0.9]
    assert model_history(replicate, records)["val_acc"].tolist() == [0.8]
    legacy = {"train_config": recipe}  # a config without length_bucketing predates it: length-bucketed
    assert training_record(legacy, records) == (records / "cpu" / "bucketed", 0)
    for unknown in ({"train_config": {**recipe, "seed": 1}}, {"run": "copy-20-random-s2-bf16"}, {}):
        assert training_record(unknown, records) is None
    (records / "copy").mkdir()
    (records / "copy" / "train_config.json").write_text(json.dumps({**recipe, "length_bucketing": False}))
    assert training_record({"train_config": {**recipe, "length_bucketing": False}}, records) is None
    with pytest.raises(LookupError, match="without its training run"):
        model_history(single, records)  # two records of that run: which one is unknown


def test_grid_tables_from_the_results_layout(tmp_path, model):
    cells = dict.fromkeys(CELLS, 0.0)
    rows = [
        {"run": f"r{seed}", "preset": "copy-200", "batching": batching, "condition": f"copy-200/{batching}",
         "seed": seed, "epochs": 20, "epochs_planned": 20, "complete": True, **cells,
         "seen_transformations_seen_alphabets": acc}
        for seed, (batching, acc) in enumerate([("alphabet", 90.0), ("alphabet", 94.0), ("random", 92.0)])
    ]  # fmt: skip
    rows.append(
        {**rows[0], "run": "partial", "complete": False, "epochs": 2.16275, "seen_transformations_seen_alphabets": 10.0}
    )
    tables = grid_tables(pd.DataFrame(rows))
    assert len(tables["runs"]) == 4 and tables["runs"].loc[3, "seenT/seenA"] == "10.0"
    assert tables["runs"].loc[3, "epochs"] == 2.16
    table1 = tables["Table 1"].iloc[0]
    assert table1["runs"] == 3 and table1["paper seenT/seenA"] == "96.7"
    low, high = (float(x) for x in table1["seenT/seenA"].split("[")[1].rstrip("]").split(","))
    assert table1["seenT/seenA"].startswith("92.0 [") and 90.0 <= low < 92.0 < high <= 94.0
    batching = tables["batching"].set_index("batching")
    assert batching.loc["random", "seenT/seenA"] == "92.0"  # one run: no interval
    assert batching.loc["alphabet", "paper seenT/seenA"] == "95.8 [87.3, 100.0]"
    assert set(grid_tables(pd.DataFrame([rows[3]]))) == {"runs"}  # no complete run: no summary
    unmeasured = {**rows[0], "preset": "copy-20", "batching": "random", "condition": "copy-20/random"}
    unmeasured["new_transformations_new_alphabets"] = float("nan")
    tables = grid_tables(pd.DataFrame([unmeasured]))
    assert tables["runs"].loc[0, "newT/newA"] == "", "a cell without a number is left empty"
    assert tables["Table 1"].loc[0, "newT/newA"] == "" and tables["batching"].loc[0, "newT/newA"] == ""

    runs_csv = tmp_path / "analyses" / "runs.csv"
    save_model(model, tmp_path / "sweep" / "stacks" / "stack-000" / "replicate-0" / "model")
    (entry,) = entries_for_path(tmp_path / "sweep")
    assert results_table_path(entry, runs_csv) is None
    runs_csv.parent.mkdir()
    runs_csv.write_text("run\n")
    assert results_table_path(entry, runs_csv) == runs_csv
    (tmp_path / "sweep" / "results.csv").write_text("run\n")
    assert results_table_path(entry, runs_csv) == tmp_path / "sweep" / "results.csv"


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


def test_filtering_defaults_to_every_non_copy_task():
    copy = Task.parse("abcdefghijklmnopqrstuvwxyz | bcd > acd | bcd > acd", "pred")
    permuted = Task.parse("bacdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > bcd", "pred")
    assert filter_tasks([PRED, copy, permuted]) == [PRED, permuted]


def test_drawing_shuffles_with_its_seed_and_decodes_a_chunk_at_a_time(model, monkeypatch):
    tasks = [
        Task.parse(f"abcdefghijklmnopqrstuvwxyz | ghi > fhi | {a}{b}c > x", "pred")
        for a in "bcdefghij"
        for b in "klmnopqrstuvwxy"
    ]
    assert len(tasks) == 135
    calls = []
    predict = draw.predict
    monkeypatch.setattr(
        draw, "predict", lambda m, chunk, batch_size: calls.append((len(chunk), batch_size)) or predict(m, chunk)
    )
    drawn = draw_tasks(model, tasks).found
    order = list(tasks)
    random.Random(0).shuffle(order)
    assert [t for t, _ in drawn] == order[:20] and calls == [(64, 64)]
    assert [t for t, _ in draw_tasks(model, tasks, seed=1).found] != order[:20]
    calls.clear()
    wrong = draw_tasks(model, tasks, "wrong", n=100).found
    assert len(wrong) == 100 and calls == [(64, 64), (64, 64)], "found in two chunks: the third is not decoded"
    assert [t for t, _ in wrong] == order[:100]
    calls.clear()
    assert len(draw_tasks(model, tasks, "any", n=64).found) == 64 and calls == [(64, 64)]


def _tasks(n: int) -> list[Task]:
    """``n`` distinct pred tasks the planted model gets wrong."""
    letters = "bcdefghijklmnopqrstuvwxy"
    return [
        Task.parse(f"abcdefghijklmnopqrstuvwxyz | ghi > fhi | {a}{b}c > x", "pred") for a in letters for b in letters
    ][:n]


def test_a_draw_for_a_rare_outcome_stops_after_its_budget_and_says_how_far_it_searched(model, monkeypatch):
    """A draw for an outcome no task has scanned the whole split (copy-200, new alphabets: 10409 tasks, 303 s) with
    the model lock held, and every other view waited. It stops after ``max_tasks`` tasks or ``max_seconds``, takes
    the lock per chunk, and says how many it searched."""
    tasks, held, calls = _tasks(300), [], []

    class Lock:
        def __enter__(self):
            held.append(True)

        def __exit__(self, *exc):
            held.append(False)

    predict = draw.predict
    monkeypatch.setattr(
        draw, "predict", lambda m, chunk, batch_size: calls.append(held[-1]) or predict(m, chunk, batch_size)
    )
    drawn = draw_tasks(model, tasks, "correct", lock=Lock(), max_tasks=150)
    assert (drawn.found, drawn.searched, drawn.total) == ([], 150, 300)
    assert calls == [True] * 3 and held == [True, False] * 3, "three chunks (64, 64, 22), each under the lock"
    assert drawn.message() == (
        f"none found: searched 150 of 300 matching tasks (a draw searches at most {draw.SCAN_TASKS} or"
        f" {draw.SCAN_SECONDS:g} s), none with outcome 'correct'; draw again to search others"
    )
    calls.clear()
    assert draw_tasks(model, tasks, "correct", max_seconds=0.0).searched == 64 and len(calls) == 1
    assert draw_tasks(model, tasks[:10], "correct").message() == (
        "none found: none of the 10 matching tasks has outcome 'correct'"
    )
    assert draw_tasks(model, [], "correct").message().startswith("there are no such tasks: ")
    assert draw_tasks(model, tasks, "wrong", n=3).message() == "3 of 300 matching tasks drawn (searched 64); pick one"


def test_drawn_tasks_carry_the_models_whole_answers(model, monkeypatch):
    """The list shows what opening a task shows: the model's answer decoded without the tasks' answers, which would
    cut decoding at the chunk's longest answer (a long wrong answer came back truncated)."""
    tasks = [Task.parse(f"abcdefghijklmnopqrstuvwxyz | ghi > fhi | {a}cd > x", "pred") for a in "bcdefghij"]
    chunks = []
    predict = draw.predict
    monkeypatch.setattr(draw, "predict", lambda m, chunk, batch_size: chunks.append(chunk) or predict(m, chunk))
    drawn = draw_tasks(model, tasks, "any", n=5).found
    assert all(t.answer is None for chunk in chunks for t in chunk)
    assert [a for _, a in drawn] == model.solve([t.with_answer(None) for t, _ in drawn])
    assert all(t.answer == "x" for t, _ in drawn)  # the outcome is still judged against the task's answer
