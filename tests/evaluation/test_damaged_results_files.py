"""Damaged files under ``lsa-interp results --runs`` and ``--history``: each is refused with a one-line ValueError
that names the file, what is wrong and what it should be, and the command exits 2 without writing anything."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lsa_interp import cli
from lsa_interp.evaluation.runs_table import read_metadata, run_record
from lsa_interp.evaluation.training_history import epoch_history

SHIPPED_EVALUATION = Path(__file__).parents[2] / "checkpoints" / "copy-20" / "evaluation.json"
METADATA = {"preset": "copy-20", "batching": "random", "seed": 0, "epochs": 20, "epochs_completed": 20}


def evaluated_run(root: Path, name: str = "m", files: dict[str, object] | None = None) -> Path:
    """A model directory with a config.json and the shipped evaluation, ``files`` (by name: text, bytes or an object
    to write as JSON) in their place or beside them."""
    directory = root / name
    directory.mkdir(parents=True)
    contents = {"config.json": {"metadata": METADATA}, "evaluation.json": json.loads(SHIPPED_EVALUATION.read_text())}
    contents |= files or {}
    for file, content in contents.items():
        path = directory / file
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return directory


def shipped_with(keys: str, value) -> dict:
    """The shipped evaluation with the value at dotted ``keys`` replaced (``...`` deletes it)."""
    evaluation = json.loads(SHIPPED_EVALUATION.read_text())
    *parents, last = keys.split(".")
    inner = evaluation
    for key in parents:
        inner = inner[key]
    if value is ...:
        del inner[last]
    else:
        inner[last] = value
    return evaluation


def assert_refused(call, path: Path, problem: str, expected: str) -> None:
    """``call()`` raises a one-line ValueError ``{path}: {problem}; expected {expected}...``."""
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {problem}; expected {expected}"), message


EVALUATION = "an evaluation written by lsa-interp evaluate or ship"
CONFIG = "a checkpoint's config.json with its training metadata"


@pytest.mark.parametrize(
    ("file", "content", "problem", "expected"),
    [
        ("evaluation.json", {"table1": {}}, "no 'n_tasks.seen_alphabets'", EVALUATION),
        ("evaluation.json", {}, "no 'table1'", EVALUATION),
        ("evaluation.json", [1, 2], "[1, 2] is not a JSON object", EVALUATION),
        ("evaluation.json", b"\xff\x80", "not UTF-8 text", EVALUATION),
        ("evaluation.json", "{bad",
         "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))", EVALUATION),
        ("evaluation.json", shipped_with("n_tasks.seen_alphabets", "many"),
         """'n_tasks.seen_alphabets' is "many", not a whole number""", EVALUATION),
        ("evaluation.json", shipped_with("table1.seen_transformations_new_alphabets.percent", "high"),
         """'table1.seen_transformations_new_alphabets.percent' is "high", not a number""", EVALUATION),
        ("evaluation.json", shipped_with("overall", ...), "no 'overall.seen_alphabets'", EVALUATION),
        ("evaluation.json", shipped_with("by_transformation.new_alphabets.succ", 3),
         "'by_transformation.new_alphabets.succ' is 3, not an object or null", EVALUATION),
        ("evaluation.json", shipped_with("alternate_rule.seen_alphabets.pred.other", 2.5),
         "'alternate_rule.seen_alphabets.pred.other' is 2.5, not a whole number", EVALUATION),
        ("evaluation.json", shipped_with("rule_families.seen_alphabets.succ.as_rule", ...),
         "no 'rule_families.seen_alphabets.succ.as_rule'", EVALUATION),
        ("evaluation.json", shipped_with("training_preset", ["copy-20"]),
         """'training_preset' is ["copy-20"], not a string""", EVALUATION),
        ("fit.json", {}, "no 'overall'", "a training fit written by lsa-interp fit or ship"),
        ("fit.json", {"overall": {"train": {"percent": "x"}}}, """'overall.train.percent' is "x", not a number""",
         "a training fit"),
        ("matching_heads.json", {}, "no 'summary.matching_heads'", "a matching-head analysis written by a sweep"),
        ("matching_heads.json", {"summary": {"matching_heads": "none", "best_head": "1.1", "best_score": None}},
         "'summary.best_score' is null, not a number", "a matching-head analysis"),
        ("config.json", [], "[] is not a JSON object", CONFIG),
        ("config.json", {"model": {}}, "no 'metadata'", CONFIG),
        ("config.json", {"metadata": {**METADATA, "seed": "zero"}}, """'metadata.seed' is "zero", not a whole number""",
         CONFIG),
        ("config.json", {"metadata": {**METADATA, "train_config": []}}, "'metadata.train_config' is [], not an object",
         CONFIG),
    ],
)  # fmt: skip
def test_a_damaged_file_of_a_run_is_refused_naming_it_and_what_it_should_be(tmp_path, file, content, problem, expected):
    directory = evaluated_run(tmp_path, files={file: content})
    assert_refused(lambda: run_record(directory), directory / file, problem, expected)


def test_a_sweeps_matching_analysis_beside_the_model_is_refused_by_its_own_path(tmp_path):
    directory = evaluated_run(tmp_path / "sweep")
    analysis = tmp_path / "sweep" / "analysis" / "matching" / "matching_heads.json"
    analysis.parent.mkdir(parents=True)
    analysis.write_text("{}")
    assert_refused(lambda: run_record(directory), analysis, "no 'summary.matching_heads'", "a matching-head analysis")


def test_the_optional_parts_of_a_run_may_be_missing_or_null(tmp_path):
    """Cells without a percent, a null copy cell (no copy tasks) and no outcome or family analysis read as NaN or
    no columns; a config without metadata has none where it is not needed."""
    evaluation = shipped_with("table1.new_transformations_new_alphabets", ...)
    evaluation["copy_vs_non_copy"]["seen_alphabets"]["copy"] = None
    evaluation["overall"]["seen_alphabets"] = {"correct": 0, "total": 0, "percent": None}
    evaluation["alternate_rule"] = evaluation["rule_families"] = None
    metadata = {**METADATA, "hardware": None, "train_config": {"epochs": None, "length_bucketing": False}}
    row = run_record(
        evaluated_run(tmp_path, files={"evaluation.json": evaluation, "config.json": {"metadata": metadata}})
    )
    assert math.isnan(row["new_transformations_new_alphabets"]) and math.isnan(row["copy_accuracy"])
    assert math.isnan(row["overall_seen_alphabets"]) and math.isnan(row["sibling_percent"])
    assert not any(column.startswith("pred_") for column in row)
    assert row["length_bucketing"] is False and row["acc_seen_succ"] == 100.0
    assert read_metadata(evaluated_run(tmp_path, "bare", files={"config.json": {"model": {}}})) == {}
    no_recipe = {"metadata": {**METADATA, "train_config": None}}
    bare = run_record(evaluated_run(tmp_path, "no-recipe", files={"config.json": no_recipe}))
    assert bare["seen_transformations_seen_alphabets"] == row["seen_transformations_seen_alphabets"]
    assert bare["length_bucketing"] is True  # a run without its recipe predates the option: it bucketed


def training_run(root: Path, config: object = None, log: str | bytes | None = None) -> Path:
    """A run directory with ``config`` (default: a single copy-20 run) and ``log`` as its metrics.jsonl."""
    root.mkdir(parents=True)
    (root / "train_config.json").write_text(json.dumps({"preset": "copy-20"} if config is None else config))
    if log is not None:
        (root / "metrics.jsonl").write_bytes(log if isinstance(log, bytes) else log.encode())
    return root


TRAIN_CONFIG = "a training run's config, as lsa-interp train writes it"
EPOCHS, STEPS = "epoch records as lsa-interp train logs them", "step records as lsa-interp train logs them"


def lines(*records) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


@pytest.mark.parametrize(
    ("file", "config", "log", "problem", "expected"),
    [
        ("train_config.json", [], None, "[] is not a JSON object", TRAIN_CONFIG),
        ("train_config.json", {"seed": "0"}, None, """'seed' is "0", not a whole number""", TRAIN_CONFIG),
        ("train_config.json", {"replicates": 2.0}, None, "'replicates' is 2.0, not a whole number", TRAIN_CONFIG),
        ("train_config.json", {"runs": [{"name": "a"}]}, None, "no 'runs.0.batching'", TRAIN_CONFIG),
        ("train_config.json", {"runs": [{"batching": "random"}, 5]}, None, "'runs.1' is 5, not an object",
         TRAIN_CONFIG),
        ("train_config.json", {"precision": 16}, None, "'precision' is 16, not a string", TRAIN_CONFIG),
        ("metrics.jsonl", None, lines({"type": "epoch", "step": "x"}), """'step' is "x", not a whole number""", EPOCHS),
        ("metrics.jsonl", None, lines({"type": "epoch", "step": 1, "replicate": "a"}),
         """'replicate' is "a", not a whole number""", EPOCHS),
        ("metrics.jsonl", None, lines({"type": "epoch", "val_acc_by_transformation": [0.5]}),
         "'val_acc_by_transformation' is [0.5], not an object", EPOCHS),
        ("metrics.jsonl", None, lines({"type": "epoch", "val_sibling_by_family": 3}),
         "'val_sibling_by_family' is 3, not an object", EPOCHS),
        ("metrics.jsonl", None, lines({"type": "step", "step": "x", "train_loss": 1.0}),
         """'step' is "x", not a whole number""", STEPS),
        ("metrics.jsonl", None, lines({"type": "step", "step": 100, "train_loss": "x"}),
         """'train_loss' is "x", not a number""", STEPS),
        ("metrics.jsonl", None, lines({"type": "step", "step": 100, "train_loss": 1.0,
                                       "train_loss_by_replicate": [0.5, "x"]}),
         """'train_loss_by_replicate.1' is "x", not a number""", STEPS),
    ],
)  # fmt: skip
def test_a_damaged_config_or_log_of_a_training_run_is_refused_naming_it(tmp_path, file, config, log, problem, expected):
    run = training_run(tmp_path / "run", config, log)
    assert_refused(lambda: epoch_history(run), run / file, problem, expected)


@pytest.mark.parametrize(
    ("log", "problem"),
    [("1\n" + lines({"type": "epoch", "step": 1}), "line 1 is 1, not a JSON object"),
     (b"\xff\xfe\x80\n", "line 1 is not UTF-8 text")],
)  # fmt: skip
def test_a_log_line_that_is_no_json_object_is_refused_naming_the_log_and_the_line(tmp_path, log, problem):
    run = training_run(tmp_path / "run", log=log)
    with pytest.raises(ValueError) as error:
        epoch_history(run)
    assert str(error.value) == f"{run / 'metrics.jsonl'} {problem}; the run's log is damaged"


def test_null_settings_and_steps_take_their_defaults(tmp_path):
    """A null seed, batching or loss reads as missing; a null epoch step counts as 0 (no windows before it)."""
    config = {"preset": "copy-20", "seed": None, "batching": None, "precision": None}
    log = lines(
        {"type": "step", "step": 50, "train_loss": 2.0, "train_loss_by_replicate": None},
        {"type": "step", "step": 60, "train_loss": None},
        {"type": "epoch", "epoch": 1, "step": None, "val_acc_by_transformation": None},
        {"type": "epoch", "epoch": 2, "step": 100},
    )
    history = epoch_history(training_run(tmp_path / "run", config, log))
    assert history["run"].tolist() == ["copy-20-random-s0"] * 2 and history["precision"].tolist() == ["fp32"] * 2
    assert math.isnan(history["train_loss"][0]) and history["train_loss"][1] == 2.0
    assert "val_acc_by_transformation" not in history.columns  # a null table of rules adds no column of its own


def _results(argv: list[str], capsys, monkeypatch) -> str:
    """The one line ``lsa-interp results ARGV`` prints to stderr; it must exit 2."""
    monkeypatch.delenv("LSA_INTERP_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["results", *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize(
    ("file", "content"),
    [("evaluation.json", {"table1": {}}), ("evaluation.json", b"\xff\x80"), ("fit.json", {}),
     ("matching_heads.json", {}), ("config.json", [])],
)  # fmt: skip
def test_results_over_a_damaged_run_exits_2_naming_the_file_and_writes_nothing(tmp_path, capsys, monkeypatch, file,
                                                                               content):  # fmt: skip
    evaluated_run(tmp_path / "good", "a")
    directory = evaluated_run(tmp_path / "runs", files={file: content})
    out = tmp_path / "results"
    err = _results(["--runs", str(tmp_path / "good"), "--runs", str(tmp_path / "runs"), "--out", str(out)], capsys,
                   monkeypatch)  # fmt: skip
    assert err.startswith(f"lsa-interp: error: {directory / file}: ") and "; expected " in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("file", "config", "log"),
    [("train_config.json", [], None), ("metrics.jsonl", None, "1\n"),
     ("metrics.jsonl", None, lines({"type": "epoch", "step": "x"})), ("metrics.jsonl", None, b"\xff\n")],
)  # fmt: skip
def test_results_with_a_damaged_history_exits_2_naming_the_file_and_writes_nothing(tmp_path, capsys, monkeypatch,
                                                                                   file, config, log):  # fmt: skip
    evaluated_run(tmp_path / "runs")
    run, out = training_run(tmp_path / "history" / "run", config, log), tmp_path / "results"
    argv = ["--runs", str(tmp_path / "runs"), "--history", str(tmp_path / "history"), "--out", str(out)]
    assert _results(argv, capsys, monkeypatch).startswith(f"lsa-interp: error: {run / file}")
    assert not out.exists()
