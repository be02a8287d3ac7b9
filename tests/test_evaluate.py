"""Evaluation: metric logic on hand-made predictions, batched prediction on a small random model, reports,
and the ``lsa-interp evaluate`` command end to end."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from lsa_interp.data import PRESETS, STANDARD_ALPHABET, DatasetConfig, Task, generate_dataset, save_dataset
from lsa_interp.data.dataset import Dataset
from lsa_interp.data.tokenizer import source_text
from lsa_interp.evaluation import (
    REPORT_FILES,
    Accuracy,
    accuracy,
    alternate_rule_errors,
    by_transformation,
    copy_split,
    evaluate_model,
    evaluation_dataset,
    exact_match,
    markdown_report,
    other_rule_answer,
    predict,
    rich_tables,
    run as evaluation_run,
    score_predictions,
    standard_alphabet_answer,
    subsample,
    table1,
    transformation_figure,
    write_report,
)
from lsa_interp.evaluation.result import NEW_ALPHABETS, SEEN_ALPHABETS, SPLIT_OF
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.helpers import SWAPPED, answered_rows, joined_rows, run

STD = STANDARD_ALPHABET
PERM = SWAPPED  # a <-> b and y <-> z swapped
SMALL = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64, max_len=128)
TINY = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4)


@pytest.fixture(scope="module")
def handmade():
    """Seen-alphabet (val-like) and new-alphabet sets with known counts per Table 1 cell."""
    seen = joined_rows(
        answered_rows(2, 1, "succ"),
        answered_rows(1, 1, "pred", STD),  # seen T: 3/5 (1/2 of it in the standard alphabet)
        answered_rows(0, 2, "reverse"),
        answered_rows(1, 0, "shift", STD),  # new T: 1/3 (1/1 standard)
        answered_rows(2, 0, "succ", STD, copy=True),
        answered_rows(0, 1, "reverse", copy=True),  # copy rows: left out of Table 1
    )
    new = joined_rows(answered_rows(1, 3, "sort"), answered_rows(1, 1, "rr_sort"))
    return seen, new


def test_exact_match_accuracy_and_errors():
    tasks, predictions = answered_rows(2, 1, "succ")
    assert exact_match(tasks, predictions) == [True, True, False]
    assert accuracy(tasks, predictions) == Accuracy(2, 3) and accuracy([], []).percent is None
    with pytest.raises(ValueError, match="2 predictions for 3 tasks"):
        accuracy(tasks, predictions[:2])
    with pytest.raises(ValueError, match="has no answer"):
        accuracy([tasks[0].with_answer(None)], ["abc"])


def test_table1_cells_on_handmade_predictions(handmade):
    (seen_tasks, seen_preds), (new_tasks, new_preds) = handmade
    t = table1(seen_tasks, seen_preds, new_tasks, new_preds)
    assert t.seen_transformations_seen_alphabets == Accuracy(3, 5)
    assert t.new_transformations_seen_alphabets == Accuracy(1, 3)
    assert t.seen_transformations_new_alphabets == Accuracy(1, 4)
    assert t.new_transformations_new_alphabets == Accuracy(1, 2)
    assert t.seen_transformations_new_alphabets_with_standard == Accuracy(2, 6)
    assert t.new_transformations_new_alphabets_with_standard == Accuracy(2, 3)
    assert [a.percent for a in t.paper_order()] == pytest.approx([60.0, 25.0, 100 / 3, 50.0])
    # "seen" means the training transformations given, not the paper's list
    custom = table1(seen_tasks, seen_preds, new_tasks, new_preds, seen_transformations=("succ", "sort"))
    assert custom.seen_transformations_seen_alphabets == Accuracy(2, 3)
    assert custom.new_transformations_new_alphabets == Accuracy(1, 2)
    with pytest.raises(ValueError, match="no transformation label"):
        table1([Task(PERM, (("mno", "nop"),), "abc", "abd")], ["abd"], [], [])


def test_copy_split_and_by_transformation(handmade):
    (seen_tasks, seen_preds), _ = handmade
    assert copy_split(seen_tasks, seen_preds) == {"copy": Accuracy(2, 3), "non_copy": Accuracy(4, 8)}
    table = by_transformation(seen_tasks, seen_preds)
    assert list(table) == ["succ", "pred", "reverse", "shift"]  # the paper's order, copy rows left out
    assert table == {"succ": Accuracy(2, 3), "pred": Accuracy(1, 2), "shift": Accuracy(1, 1), "reverse": Accuracy(0, 2)}


def test_other_rule_answer():
    def make(alphabet, query, transformation):
        return Task(alphabet, (("mno", "nop"),), query, "zzz", transformation)

    assert other_rule_answer(make(STD, "bcd", "pred")) == "bce"  # succ on a pred task: last letter -> next
    assert other_rule_answer(make(STD, "bcd", "succ")) == "acd"  # pred on a succ task: first letter -> previous
    assert other_rule_answer(make(PERM, "acd", "pred")) == "ace"  # positions in the task's own alphabet
    assert other_rule_answer(make(PERM, "wxz", "succ")) == "vxz"
    assert other_rule_answer(make(PERM, "cde", "succ")) == "ade"
    assert other_rule_answer(make(PERM, "xzy", "pred")) is None  # no letter after the last one
    assert other_rule_answer(make(STD, "abc", "succ")) is None
    assert other_rule_answer(make(STD, "abc", "sort")) is None


def test_other_rule_answer_agrees_with_the_generator(tiny):
    """On generated data, succ's answer for a query is what the pred task's 'other rule' gives, and back."""
    tasks = [t for split in tiny.splits.values() for t in split if t.transformation in ("pred", "succ")]
    answers = {(t.transformation, t.alphabet, t.query): t.answer for t in tasks}
    checked = 0
    for t in tasks:
        other = "succ" if t.transformation == "pred" else "pred"
        assert other_rule_answer(t) != t.answer
        if (other, t.alphabet, t.query) in answers:
            assert other_rule_answer(t) == answers[(other, t.alphabet, t.query)]
            checked += 1
    assert checked >= 20


def test_alternate_rule_classification():
    pred = [
        Task(STD, (("mno", "lno"),), q, a, "pred")
        for q, a in [("bcd", "acd"), ("cde", "bde"), ("def", "cef"), ("efg", "dfg"), ("xyz", "wyz")]
    ]
    pred_out = ["acd", "cdf", "xxx", "efh", "wyz"]  # correct, succ, other, succ, correct (succ impossible)
    succ = [Task(PERM, (("mno", "mnp"),), "acd", "ace", "succ"), Task(PERM, (("mno", "mnp"),), "cde", "cdf", "succ")]
    succ_out = ["bcd", "cdf"]  # pred (the letter before 'a' in PERM is 'b'), correct
    copy = Task(STD, (("bcd", "acd"),), "bcd", "acd", "pred")
    ignored = [copy, Task(STD, (("mno", "mon"),), "bcd", "bdc", "sort")]
    counts = alternate_rule_errors(pred + succ + ignored, pred_out + succ_out + ["bce", "bdc"])
    assert (counts["pred"].correct, counts["pred"].applied_other_rule, counts["pred"].other) == (2, 2, 1)
    assert (counts["succ"].correct, counts["succ"].applied_other_rule, counts["succ"].other) == (1, 1, 0)
    assert counts["pred"].standard_alphabet == counts["succ"].standard_alphabet == 0
    assert counts["pred"].other_rule == "succ" and counts["succ"].total == 2
    assert counts["pred"].percents() == pytest.approx(
        {"correct": 40.0, "applied_other_rule": 40.0, "standard_alphabet": 0.0, "other": 20.0}
    )


def test_rule_applied_in_the_standard_alphabet_is_its_own_outcome():
    # PERM swaps b and c: before 'd' comes 'b', after 'b' comes 'd'; in a..z they are 'c' and 'c'.
    perm = "acbdefghijklmnopqrstuvwxyz"
    pred = Task(perm, (("mno", "lno"),), "def", "bef", "pred")
    succ = Task(perm, (("mno", "mnp"),), "xab", "xad", "succ")
    unchanged = Task(perm, (("stu", "rtu"),), "mno", "lno", "pred")
    assert standard_alphabet_answer(pred) == "cef" and standard_alphabet_answer(succ) == "xac"
    assert standard_alphabet_answer(unchanged) is None  # same neighbour in both alphabets
    assert standard_alphabet_answer(Task(perm, (("mno", "lno"),), "acb", "zcb", "pred")) is None  # no letter before a
    counts = alternate_rule_errors([pred, succ, unchanged], ["cef", "xaz", "mno"])
    assert (counts["pred"].standard_alphabet, counts["pred"].other, counts["succ"].other) == (1, 1, 1)
    assert counts["pred"].to_dict()["percent"]["standard_alphabet"] == 50.0


def test_score_predictions_result_and_json(handmade):
    (seen_tasks, seen_preds), (new_tasks, new_preds) = handmade
    result = score_predictions(seen_tasks, seen_preds, new_tasks, new_preds)
    assert result.n_tasks == {"seen_alphabets": 11, "new_alphabets": 6}
    assert result.overall == {"seen_alphabets": Accuracy(6, 11), "new_alphabets": Accuracy(2, 6)}
    assert result.copy_vs_non_copy["new_alphabets"]["copy"] == Accuracy(0, 0)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["table1"]["seen_transformations_new_alphabets_with_standard"] == {
        "correct": 2,
        "total": 6,
        "percent": pytest.approx(100 / 3),
    }
    assert data["by_transformation"]["new_alphabets"]["rr_sort"]["correct"] == 1
    assert data["alternate_rule"]["seen_alphabets"]["pred"]["correct"] == 1
    assert any("standard alphabet" in note for note in data["notes"])
    perfect = score_predictions(seen_tasks, [t.answer for t in seen_tasks], new_tasks, [t.answer for t in new_tasks])
    assert all(cell.percent == 100.0 for cell in perfect.table1.paper_order())


def test_subsample_is_deterministic_ordered_and_bounded():
    tasks = answered_rows(0, 20, "succ")[0]
    picked = subsample(tasks, 7)
    assert picked == subsample(tasks, 7) and len(picked) == 7
    assert [tasks.index(t) for t in picked] == sorted(tasks.index(t) for t in picked)
    assert subsample(tasks, None) == tasks and subsample(tasks, 50) == tasks
    assert len(subsample(tasks, 1)) == 1
    with pytest.raises(ValueError, match="limit must be positive"):
        subsample(tasks, 0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(SMALL).eval()


@pytest.fixture(scope="module")
def decoded(model, tiny):
    """48 val and 48 new-alphabet tasks of the tiny dataset with the model's uncapped greedy answers."""
    sets = {"val": tiny.splits["val"][:48], "test_new_alphabets": tiny.splits["test_new_alphabets"][:48]}
    return {split: (tasks, model.solve(tasks)) for split, tasks in sets.items()}


def self_answered(tasks, answers):
    """Every other task with the model's own (letter-only) answer as its answer: a subset it gets right."""
    return [t.with_answer(a) if i % 2 == 0 and a.isalpha() else t for i, (t, a) in enumerate(zip(tasks, answers))]


def test_predict_keeps_input_order_and_exact_match(model, decoded):
    tasks, full = decoded["val"]
    cap = max(len(t.answer) for t in tasks) + 1
    assert predict(model, tasks, batch_size=1000) == model.solve(tasks, max_new_tokens=cap)
    chunked = predict(model, tasks, batch_size=16)
    assert all(f.startswith(c) for f, c in zip(full, chunked))  # per-batch caps only truncate
    assert exact_match(tasks, chunked) == exact_match(tasks, full)
    answered = [t for t in self_answered(tasks, full) if t not in tasks]
    assert len(answered) >= 8
    assert accuracy(answered, predict(model, answered, batch_size=8)).percent == 100.0


def test_predict_decodes_its_batches_in_order_of_encoder_length(model, decoded, monkeypatch):
    tasks, _ = decoded["val"]
    lengths, generate = [], model.generate
    monkeypatch.setattr(
        model,
        "generate",
        lambda batch, **kw: lengths.extend(len(source_text(t)) for t in batch) or generate(batch, **kw),
    )
    sizes = []
    one_by_one = predict(model, tasks, batch_size=1, on_batch=sizes.append)
    assert exact_match(tasks, one_by_one) == exact_match(tasks, predict(model, tasks, batch_size=7))
    assert sizes == [1] * len(tasks)
    assert lengths[: len(tasks)] == sorted(lengths[: len(tasks)]) and len(set(lengths)) > 1


def test_predict_decodes_with_full_fp32_matmuls_and_gives_the_setting_back(model, decoded, monkeypatch):
    """The cards say "in fp32": a tf32 run earlier in the process (a sweep's) leaves TF32 matmuls on, so predict
    turns them off while it decodes, restores the process's setting after, and keeps the model's mode."""
    tasks, _ = decoded["val"]
    seen, generate = [], model.generate
    monkeypatch.setattr(
        model,
        "generate",
        lambda batch, **kw: seen.append(torch.get_float32_matmul_precision()) or generate(batch, **kw),
    )
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        model.train()
        predict(model, tasks[:8], batch_size=4)
        assert seen == ["highest", "highest"] and torch.get_float32_matmul_precision() == "high" and model.training
    finally:
        torch.set_float32_matmul_precision(before)
        model.eval()


def test_evaluate_model_equals_scoring_the_models_answers(model, tiny, decoded):
    (val, val_out), (new, new_out) = decoded["val"], decoded["test_new_alphabets"]
    val, new = self_answered(val, val_out), self_answered(new, new_out)
    dataset = Dataset(tiny.config, tiny.seed, {"val": val, "test_new_alphabets": new}, [], [])
    expected = score_predictions(val, val_out, new, new_out, tiny.config.train_transformations)
    model.train()
    result = evaluate_model(model, dataset, batch_size=16, model_name="random")
    assert model.training  # the mode is restored
    model.eval()
    meta = ("model", "preset", "training_preset", "seed", "limit", "seconds")
    assert {k: v for k, v in result.to_dict().items() if k not in meta} == {
        k: v for k, v in expected.to_dict().items() if k not in meta
    }
    assert result.table1.seen_transformations_seen_alphabets.correct > 0
    assert (result.model, result.preset, result.seed, result.limit) == ("random", "tiny", tiny.seed, None)
    limited = evaluate_model(model, tiny, limit=10)
    assert limited.n_tasks == {"seen_alphabets": 10, "new_alphabets": 10} and limited.limit == 10
    with pytest.raises(ValueError, match="lacks split"):
        evaluate_model(model, Dataset(tiny.config, 0, {"val": val}, [], []))


def test_evaluate_model_scores_the_datasets_own_training_rules_and_times_itself(model, tiny, decoded, monkeypatch):
    (val, val_out), (new, new_out) = decoded["val"], decoded["test_new_alphabets"]
    rules = tiny.config.train_transformations[:2]
    splits = {SPLIT_OF[SEEN_ALPHABETS]: val, SPLIT_OF[NEW_ALPHABETS]: new}
    dataset = Dataset(replace(tiny.config, train_transformations=rules), tiny.seed, splits, [], [])
    expected = score_predictions(val, val_out, new, new_out, rules)
    clock = iter([100.0, 101.23456])  # the decoding's start and end
    monkeypatch.setattr(evaluation_run, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    result = evaluate_model(model, dataset, batch_size=16)
    assert result.table1 == expected.table1 and result.by_transformation == expected.by_transformation
    assert result.model == "" and result.seconds == 1.235


def test_evaluate_model_draws_a_progress_bar_on_stderr_only_when_asked(model, tiny, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    evaluate_model(model, tiny, limit=6, batch_size=4)
    assert capsys.readouterr() == ("", "")
    evaluate_model(model, tiny, limit=6, batch_size=4, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    for split in SPLIT_OF.values():
        line = next(line for line in err.splitlines() if f"decoding {split} " in line).strip()
        assert line.startswith(f"decoding {split} ") and " 6/6 " in line and " 100% " in line
        assert re.search(r" [0-9,]+ tasks/s ", line) and re.search(r"(?<![A-Za-z])ETA(?![A-Za-z])", line)
        assert "━" in line and len(re.findall(r"(?<!\S)\d+:\d\d:\d\d(?!\S)", line)) == 2  # the bar, elapsed, left


@pytest.fixture
def tiny_copy20(monkeypatch):
    """Make the 'copy-20' preset tiny for the duration of a test."""
    monkeypatch.setitem(PRESETS, "copy-20", replace(TINY, name="copy-20"))


def test_evaluation_dataset_preset_and_seed(model, tiny_copy20, tmp_path):
    trained = HookedEncoderDecoder(SMALL, metadata={"preset": "copy-20", "seed": 2})
    dataset = evaluation_dataset(trained)
    assert (dataset.config.name, dataset.seed) == ("copy-20", 0)  # no data seed recorded: the trainers' default
    assert evaluation_dataset(trained, seed=1).seed == 1
    recorded = HookedEncoderDecoder(SMALL, metadata={"preset": "copy-20", "seed": 2, "data_seed": 4})
    assert evaluation_dataset(recorded).seed == 4  # the dataset's seed, not the initialisation seed
    assert evaluation_dataset(HookedEncoderDecoder(SMALL, metadata={"preset": "copy-20"})).seed == 0
    with pytest.raises(ValueError, match="records no training preset"):
        evaluation_dataset(model)
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        evaluation_dataset(trained, preset="nope")
    save_dataset(generate_dataset(TINY, seed=5), tmp_path / "d")
    loaded = evaluation_dataset(trained, data_dir=tmp_path / "d")
    assert set(loaded.splits) == {"val", "test_new_alphabets"} and loaded.seed == 5
    with pytest.raises(ValueError, match="preset 'copy-20' does not match"):
        evaluation_dataset(trained, preset="copy-20", data_dir=tmp_path / "d")
    with pytest.raises(ValueError, match=r"^seed 4 does not match the dataset in .* \(seed 5\)$"):
        evaluation_dataset(trained, seed=4, data_dir=tmp_path / "d")
    # a grid's own dataset (no paper preset of its name): the dataset its training config names, while it is there
    own = HookedEncoderDecoder(SMALL, metadata={"preset": "tiny", "train_config": {"data_dir": str(tmp_path / "d")}})
    assert evaluation_dataset(own).seed == 5 and evaluation_dataset(own).config.name == TINY.name
    moved = HookedEncoderDecoder(SMALL, metadata={"preset": "tiny", "train_config": {"data_dir": "no/such/dir"}})
    message = r"^the model trained on a dataset of its own, no/such/dir, not found from here .*; pass the dataset with"
    with pytest.raises(ValueError, match=message):  # it said "unknown preset 'tiny'", which is not the cause
        evaluation_dataset(moved)
    bare = HookedEncoderDecoder(SMALL, metadata={"preset": "tiny"})
    with pytest.raises(ValueError, match="unknown preset 'tiny'"):
        evaluation_dataset(bare)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            {"preset": ["copy-20"]},
            r"^the model's metadata records preset \['copy-20'\]; a preset is a name \(a string\)$",
        ),
        (
            {"preset": None, "train_config": "x"},
            "^the model's metadata records train_config 'x'; a training config is a JSON",
        ),
        ({"preset": "tiny", "train_config": {"data_dir": 5}}, "records train_config.data_dir 5; a dataset is a path"),
    ],
)
def test_evaluation_dataset_names_metadata_of_the_wrong_type(metadata, message, tiny_copy20):
    """A model's metadata comes from its config.json: a damaged one raised AttributeError or TypeError (unhashable)."""
    damaged = HookedEncoderDecoder(SMALL, metadata=metadata)
    with pytest.raises(ValueError, match=message):
        evaluation_dataset(damaged)
    assert evaluation_dataset(damaged, preset="copy-20").config.name == "copy-20"  # a given preset needs none of it


def assert_offline_html(path):
    html = path.read_text()
    assert "<script src=" not in html.replace(" ", "") and "plotly.js v" in html and len(html) > 1_000_000


def test_write_report_files(handmade, tmp_path):
    (seen_tasks, seen_preds), (new_tasks, new_preds) = handmade
    result = replace(
        score_predictions(seen_tasks, seen_preds, new_tasks, new_preds),
        training_preset="copy-200",
        preset="copy-200",
        model="m",
    )
    paths = write_report(result, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(REPORT_FILES.values())
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(result.to_dict()))
    markdown = paths["markdown"].read_text()
    assert "| seen | 60.0 (3/5) | 25.0 (1/4) | 33.3 (2/6) | 96.7 | 93.9 |" in markdown
    assert "| new | 33.3 (1/3) | 50.0 (1/2) | 66.7 (2/3) | 13.1 | 12.3 |" in markdown
    assert "| seen alphabets | pred | 50.0 | 0.0 | 0.0 | 50.0 | succ | 2 |" in markdown
    assert_offline_html(paths["html"])
    unknown = markdown_report(replace(result, training_preset=None, preset="tiny"))
    assert "96.7" not in unknown and "The paper reports Table 1 for" in unknown
    figure = transformation_figure(result)
    assert {bar.offsetgroup for bar in figure.data} == {"seen_alphabets", "new_alphabets"}
    colours = {bar.name.split(",")[0]: bar.marker.color for bar in figure.data}
    assert set(colours) == {"seen", "compositional", "novel"} and len(set(colours.values())) == 3
    console = Console(record=True, width=200)
    for table in rich_tables(result):
        console.print(table)
    text = console.export_text()
    assert "Table 1" in text and "rr_sort" in text


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny random checkpoint without metadata, one recording preset copy-20, and a tiny saved dataset."""
    root = tmp_path_factory.mktemp("evaluate")
    torch.manual_seed(0)
    save_model(HookedEncoderDecoder(SMALL), root / "model")
    save_model(
        HookedEncoderDecoder(SMALL), root / "copy20-model", metadata={"preset": "copy-20", "seed": 1, "data_seed": 2}
    )
    save_dataset(generate_dataset(TINY, seed=0), root / "data")
    return root


def test_cli_evaluate_end_to_end(saved, tmp_path, capsys):
    out = tmp_path / "report"
    args = ["evaluate", "--model", str(saved / "model"), "--data", str(saved / "data"), "--out", str(out)]
    code, stdout, _ = run([*args, "--limit", "60"], capsys)
    assert code == 0 and "Table 1" in stdout and "Alternate-rule errors" in stdout and "wrote" in stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORT_FILES.values())
    report = json.loads((out / REPORT_FILES["json"]).read_text())
    assert report["n_tasks"] == {"seen_alphabets": 60, "new_alphabets": 60} and report["preset"] == "tiny"
    assert "## Table 1" in (out / REPORT_FILES["markdown"]).read_text()
    assert_offline_html(out / REPORT_FILES["html"])


def test_cli_preset_and_seed_from_model_metadata(saved, tiny_copy20, tmp_path, capsys):
    code, stdout, _ = run(
        ["evaluate", "--model", str(saved / "copy20-model"), "--limit", "30", "--out", str(tmp_path)], capsys
    )
    assert code == 0 and "91.0" in stdout  # the paper's copy-20 row
    report = json.loads((tmp_path / REPORT_FILES["json"]).read_text())
    assert (report["preset"], report["seed"], report["training_preset"]) == ("copy-20", 2, "copy-20")


def test_cli_tables_piped_keep_every_count_whole(saved, tmp_path, capsys):
    """Piped output is as wide as its widest table: at 120 columns rich cut cells to '25.8 (49/19…'."""
    args = ["evaluate", "--model", str(saved / "model"), "--data", str(saved / "data"), "--limit", "150"]
    code, stdout, err = run([*args, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    report = json.loads((tmp_path / REPORT_FILES["json"]).read_text())
    counts = [f"({cell['correct']}/{cell['total']})" for cell in report["table1"].values()]
    assert len(counts) == 6 and all(count in stdout for count in counts), (counts, stdout)
    assert "…" not in stdout and "new alphabets + standard" in stdout and "applied other rule" in stdout


@pytest.fixture
def card_dir(saved, tmp_path):
    """A checkpoint with a card (the test writes the evaluation.json it was shipped with)."""
    directory = save_model(HookedEncoderDecoder(SMALL), tmp_path / "shipped", metadata={"preset": "tiny"})
    (directory / "card.md").write_text("# shipped\n\n## Evaluation\n")
    return directory


@pytest.mark.parametrize(
    ("recorded", "message"),
    [
        ({"preset": "tiny", "seed": 7}, "is of seed 0; the checkpoint's: 7: --card needs the model's own dataset"),
        (
            {"preset": "copy-20", "seed": 0},
            "is of preset 'tiny'; the checkpoint's: 'copy-20': --card needs the model's own dataset",
        ),
    ],
)
def test_cli_card_refuses_another_dataset_before_evaluating(saved, card_dir, recorded, message, monkeypatch, capsys):
    """The preset and dataset seed of the card's evaluation.json (saved/data: tiny, seed 0) are compared with --data's
    manifest up front: refresh_card refused them only after the full evaluation (~20 min on CPU)."""
    (card_dir / "evaluation.json").write_text(json.dumps({"model": "shipped", **recorded}))
    before = {path.name: path.read_bytes() for path in card_dir.iterdir()}

    def never(*args, **kwargs):
        raise AssertionError("evaluated a dataset --card refuses")

    monkeypatch.setattr("lsa_interp.evaluation.evaluate_model", never)
    monkeypatch.setattr("lsa_interp.evaluation.evaluation_dataset", never)
    code, out, err = run(["evaluate", "--model", str(card_dir), "--data", str(saved / "data"), "--card"], capsys)
    assert code == 2 and out == "" and {path.name: path.read_bytes() for path in card_dir.iterdir()} == before
    assert err == f"lsa-interp: error: --data {saved / 'data'} {message} (leave --data out to regenerate it)\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no-such-model"], "no checkpoint named or at 'no-such-model'"),
        (["--model", "{saved}/model", "--preset", "nope"], "unknown preset 'nope'; choose one of"),
        (
            ["--model", "{saved}/model"],
            "records no training preset, so its dataset is not known; pass --preset or --data",
        ),
        (["--model", "{saved}/model", "--data", "{saved}/data", "--preset", "copy-20"], "does not match"),
        (["--model", "{saved}/model", "--data", "{saved}/missing"], "not a dataset directory"),
        (["--model", "{saved}/model", "--limit", "0"], "Invalid value for '--limit'"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(saved, args, message, capsys):
    code, out, err = run(["evaluate", *(a.format(saved=saved) for a in args)], capsys)
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("lsa-interp: error: ")
    assert "Traceback" not in err + out


@pytest.mark.parametrize(
    ("command", "remedy"),
    [
        (["fit", "--rows", "1"], "pass its dataset with --data"),  # it said --preset, which fit does not take
        (["decoder-lens", "--tasks", "1"], "use --source rules, which needs none"),  # neither --preset nor --data
    ],
)
def test_a_model_without_a_preset_is_told_what_this_command_takes(saved, command, remedy, capsys):
    code, out, err = run([*command, "--model", str(saved / "model")], capsys)
    unknown = "the model's metadata records no training preset, so its dataset is not known"
    assert code == 2 and err == f"lsa-interp: error: {unknown}; {remedy}\n"


def _scored_task(rule: str, alphabet: str = PERM, copy: bool = False) -> Task:
    example = ("bcd", "bce") if copy else ("mno", "nop")
    return Task(alphabet, (example,), "bcd", "bce", rule)


def test_score_predictions_uses_the_given_training_rules_and_writes_every_key():
    seen = [_scored_task("succ"), _scored_task("reverse", STANDARD_ALPHABET), _scored_task("succ", copy=True)]
    new = [_scored_task("succ"), _scored_task("reverse")]
    result = score_predictions(seen, ["bce", "x", "bce"], new, ["x", "bce"], seen_transformations=("reverse",))
    assert result.table1.seen_transformations_seen_alphabets == Accuracy(0, 1)  # reverse is the training rule here
    assert result.table1.new_transformations_seen_alphabets == Accuracy(1, 1)
    assert result.overall == {SEEN_ALPHABETS: Accuracy(2, 3), NEW_ALPHABETS: Accuracy(1, 2)}
    data = json.loads(json.dumps(replace(result, limit=7, model="m").to_dict()))
    assert data["limit"] == 7 and data["model"] == "m" and data["splits"] == SPLIT_OF
    assert data["seen_transformations"] == ["reverse"]
    assert data["overall"][SEEN_ALPHABETS] == {"correct": 2, "total": 3, "percent": 200 / 3}
    assert data["copy_vs_non_copy"][SEEN_ALPHABETS]["copy"] == {"correct": 1, "total": 1, "percent": 100.0}
    assert data["n_tasks"] == {SEEN_ALPHABETS: 3, NEW_ALPHABETS: 2}
    assert data["by_transformation"][NEW_ALPHABETS]["reverse"]["correct"] == 1
    assert data["alternate_rule"][SEEN_ALPHABETS]["succ"]["correct"] == 1  # the copy row is left out
    assert data["table1"]["new_transformations_new_alphabets"]["total"] == 1 and len(data["notes"]) == 6
    assert data["rule_families"][SEEN_ALPHABETS]["succ"]["total"] == 1  # the copy row is left out
