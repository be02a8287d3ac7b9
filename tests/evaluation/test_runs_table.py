"""The runs table, the grid summaries with bootstrap intervals, and the ``results`` command on made-up runs."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lsa_interp import cli
from lsa_interp.evaluation.grid_summary import (
    batching_summary,
    bootstrap_interval,
    counted_runs,
    few_shot_summary,
    occurrence_summary,
    precision_summary,
    table1_summary,
)
from lsa_interp.evaluation.paper_tables import CELLS, PAPER_BATCHING, PAPER_TABLE1
from lsa_interp.evaluation.runs_table import (
    find_runs,
    matching_record,
    read_runs_table,
    run_record,
    runs_table,
    training_progress,
    write_runs_table,
)
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.checkpoint import save_model
from lsa_interp.viz.grid_figures import matching_vs_rule_figure
from tests.helpers import TINY

SHIPPED_EVALUATION = Path(__file__).parents[2] / "checkpoints" / "copy-20" / "evaluation.json"


def make_run(
    root: Path,
    name: str,
    preset: str,
    batching: str,
    seed: int,
    seen: float,
    epochs: float = 20,
    precision="bf16",
    train_config: dict | None = None,
    families: dict | None = None,
) -> Path:
    """A saved tiny model with training metadata and an evaluation whose seenT/seenA cell is ``seen`` %."""
    directory = root / name
    metadata = {
        "preset": preset, "seed": seed, "batching": batching, "precision": precision, "epochs": 20,
        "epochs_completed": epochs, "train_seconds": 60.0, "hardware": "test",
    }  # fmt: skip
    if train_config is not None:
        metadata["train_config"] = train_config
    save_model(HookedEncoderDecoder(TINY), directory, metadata=metadata)
    evaluation = json.loads(SHIPPED_EVALUATION.read_text())
    evaluation["table1"]["seen_transformations_seen_alphabets"] = {"correct": 0, "total": 100, "percent": seen}
    evaluation["overall"]["seen_alphabets"]["percent"] = seen / 2
    evaluation.pop("rule_families", None)  # the shipped card's own counts: a run has only those it is given
    if families is not None:
        evaluation["rule_families"] = families
    (directory / "evaluation.json").write_text(json.dumps(evaluation))
    return directory


def test_a_row_holds_the_condition_the_table1_cells_and_the_outcome_counts(tmp_path):
    row = run_record(make_run(tmp_path, "a", "copy-20", "alphabet", 3, 88.5))
    assert (row["condition"], row["seed"], row["precision"], row["n_alphabets"], row["copy"]) == (
        "copy-20/alphabet", 3, "bf16", 20, True,
    )  # fmt: skip
    shipped = json.loads(SHIPPED_EVALUATION.read_text())
    pred = shipped["alternate_rule"]["seen_alphabets"]["pred"]
    assert row["seen_transformations_seen_alphabets"] == 88.5
    assert (
        row["seen_transformations_new_alphabets"] == shipped["table1"]["seen_transformations_new_alphabets"]["percent"]
    )
    assert row["acc_seen_pred"] == shipped["by_transformation"]["seen_alphabets"]["pred"]["percent"]
    assert (row["pred_correct"], row["pred_applied_other_rule"]) == (pred["correct"], pred["applied_other_rule"])
    assert row["complete"] and row["overall_seen_alphabets"] == pytest.approx(44.25)
    assert math.isnan(row["fit_train"]) and math.isnan(row["fit_val"])  # no fit.json beside this run


def test_a_row_holds_the_training_fit_beside_the_model(tmp_path):
    directory = make_run(tmp_path, "a", "copy-200", "alphabet", 0, 87.0)
    overall = {
        "train": {"correct": 9, "total": 10, "percent": 90.0},
        "val": {"correct": 0, "total": 0, "percent": None},
    }
    (directory / "fit.json").write_text(json.dumps({"overall": overall}))
    row = run_record(directory)
    assert row["fit_train"] == 90.0 and math.isnan(row["fit_val"])
    (directory / "fit.json").write_text(json.dumps({"overall": {"train": overall["train"]}}))
    row = run_record(directory)  # a fit without its val split
    assert row["fit_train"] == 90.0 and math.isnan(row["fit_val"])


def test_partly_trained_runs_are_marked_and_left_out_of_the_means_unless_asked(tmp_path):
    make_run(tmp_path, "full", "copy-20", "random", 0, 90.0)
    make_run(tmp_path, "partial", "copy-20", "random", 1, 40.0, epochs=2.16)
    frame = runs_table(find_runs([tmp_path]))
    assert frame["complete"].tolist() == [True, False]
    assert table1_summary(frame)["seen_transformations_seen_alphabets"].tolist() == [90.0]
    assert table1_summary(frame, include_partial=True)["seen_transformations_seen_alphabets"].tolist() == [65.0]


def test_summaries_of_runs_none_of_which_counts_are_empty_tables(tmp_path):
    make_run(tmp_path, "partial", "copy-20", "random", 0, 40.0, epochs=2.16)
    frame = runs_table(find_runs([tmp_path]))
    assert table1_summary(frame).empty and batching_summary(frame).empty and few_shot_summary(frame).empty
    assert batching_summary(frame, include_partial=True)["n"].tolist() == [1]


def test_find_runs_searches_nested_directories_and_skips_unevaluated_models(tmp_path):
    make_run(tmp_path / "grid" / "stack-0", "replicate-0", "copy-20", "random", 0, 90.0)
    save_model(HookedEncoderDecoder(TINY), tmp_path / "grid" / "unevaluated")
    assert [p.name for p in find_runs([tmp_path])] == ["replicate-0"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_runs([tmp_path / "missing"])
    with pytest.raises(FileNotFoundError, match="evaluation.json"):
        run_record(tmp_path / "grid" / "unevaluated")


def test_bootstrap_interval_is_scipys_percentile_interval_of_the_mean():
    values = np.array([90.2, 91.5, 89.9, 92.4, 90.8])
    mean, low, high = bootstrap_interval(values)
    expected = stats.bootstrap((values,), np.mean, n_resamples=10_000, method="percentile", random_state=0)
    assert mean == pytest.approx(values.mean())
    assert (low, high) == pytest.approx(tuple(expected.confidence_interval))
    assert values.min() <= low < mean < high <= values.max()
    assert math.isnan(bootstrap_interval([70.0])[1]) and bootstrap_interval([5.0, 5.0]) == (5.0, 5.0, 5.0)
    assert bootstrap_interval([1.0, float("nan"), 3.0])[0] == 2.0


def test_batching_and_table1_summaries_pool_the_right_runs_beside_the_paper(tmp_path):
    for seed, seen in enumerate([90.0, 92.0, 91.0]):
        make_run(tmp_path, f"cr{seed}", "copy-20", "random", seed, seen)
    make_run(tmp_path, "ca0", "copy-20", "alphabet", 0, 80.0)
    make_run(tmp_path, "ct0", "copy-20", "transformation", 0, 10.0)
    make_run(tmp_path, "cb0", "copy-20", "transformation_alphabet", 0, 20.0)
    make_run(tmp_path, "la0", "copy-200", "alphabet", 0, 96.0)
    make_run(tmp_path, "lr0", "copy-200", "random", 0, 98.0)
    make_run(tmp_path, "lt0", "copy-200", "transformation", 0, 50.0)
    make_run(tmp_path, "ma0", "copy-40", "alphabet", 0, 93.0)
    frame = runs_table(find_runs([tmp_path]))
    batching = batching_summary(frame).set_index(["preset", "batching"])
    assert batching.loc[("copy-20", "random"), "n"] == 3
    assert batching.loc[("copy-20", "random"), CELLS[0]] == pytest.approx(91.0)
    paper = PAPER_BATCHING[("copy-20", "random")][0]
    assert tuple(batching.loc[("copy-20", "random"), [f"paper_{CELLS[0]}{s}" for s in ("", "_low", "_high")]]) == paper
    table1 = table1_summary(frame).set_index("preset")
    assert list(table1.index) == ["copy-20", "copy-200"]  # copy-40 is not a row of Table 1
    assert table1.loc["copy-20", "n"] == 6  # every batching method pooled, as the paper's 20-alphabet rows are
    assert table1.loc["copy-20", CELLS[0]] == pytest.approx((90 + 92 + 91 + 80 + 10 + 20) / 6)
    assert table1.loc["copy-200", "n"] == 2  # alphabet and random batching only, as the paper's copy-200 row
    assert table1.loc["copy-200", CELLS[0]] == pytest.approx(97.0)
    assert table1.loc["copy-20", f"paper_{CELLS[0]}"] == PAPER_TABLE1["copy-20"][0]
    assert table1.loc["copy-200", f"paper_{CELLS[3]}"] == PAPER_TABLE1["copy-200"][3]
    assert few_shot_summary(frame)["n_shots"].tolist() == [1]


def test_a_seed_trained_in_two_precisions_counts_once_in_fp32_and_the_precision_check_compares_them(tmp_path):
    fp32, bf16 = [90.0, 92.0, 91.0, 93.0, 89.0], [89.5, 93.0, 90.0, 92.5, 88.0]  # sd 1.58 and 2.09
    for seed, (a, b) in enumerate(zip(fp32, bf16)):
        make_run(tmp_path, f"f{seed}", "copy-20", "random", seed, a, precision="fp32")
        make_run(tmp_path, f"b{seed}", "copy-20", "random", seed, b)
    make_run(tmp_path, "b5", "copy-20", "random", 5, 70.0)  # a seed in bf16 only counts
    make_run(tmp_path, "n0", "nocopy-20", "random", 0, 60.0)  # one precision only: no check
    frame = runs_table(find_runs([tmp_path]))
    batching = batching_summary(frame).set_index(["preset", "batching"])
    assert batching.loc[("copy-20", "random"), "n"] == 6
    assert batching.loc[("copy-20", "random"), CELLS[0]] == pytest.approx((sum(fp32) + 70.0) / 6)
    check = precision_summary(frame).set_index("precision")
    assert list(check.index) == ["bf16", "fp32"] and set(check["preset"]) == {"copy-20"}
    assert check.loc["bf16", "n"] == 6 and check.loc["fp32", "n"] == 5
    assert check.loc["fp32", "sd"] == pytest.approx(np.std(fp32, ddof=1))
    difference = np.mean([*bf16, 70.0]) - np.mean(fp32)
    assert check.loc["bf16", "difference"] == pytest.approx(difference)
    assert check.loc["bf16", "within_spread"] == (abs(difference) < np.std([*bf16, 70.0], ddof=1))
    assert check.loc["fp32", "within_spread"] is None and math.isnan(check.loc["fp32", "difference"])
    assert precision_summary(frame.drop(columns="precision")).empty  # a table from before precisions were kept


def test_of_a_seeds_runs_the_one_closest_to_the_recipe_counts(tmp_path):
    unbucketed = {"length_bucketing": False}
    make_run(tmp_path, "a-bucketed", "copy-200", "alphabet", 0, 85.0, precision="fp32")  # config predates the key
    make_run(tmp_path, "b-reference", "copy-200", "alphabet", 0, 88.0, precision="fp32", train_config=unbucketed)
    make_run(tmp_path, "c-nn", "copy-200", "alphabet", 1, 70.0, precision="fp32",
             train_config={**unbucketed, "architecture": "reference"})  # fmt: skip
    make_run(tmp_path, "d-hooked", "copy-200", "alphabet", 1, 80.0, precision="fp32", train_config=unbucketed)
    make_run(tmp_path, "e-nn", "copy-200", "alphabet", 2, 90.0, precision="fp32",
             train_config={**unbucketed, "architecture": "reference"})  # fmt: skip
    make_run(tmp_path, "f-bf16", "copy-200", "alphabet", 2, 60.0, train_config=unbucketed)
    frame = runs_table(find_runs([tmp_path]))
    assert frame.set_index("seed")["length_bucketing"].groupby(level=0).sum().tolist() == [1, 0, 0]
    assert sorted(Path(run).name for run in counted_runs(frame)["run"]) == ["b-reference", "d-hooked", "e-nn"]
    table1 = table1_summary(frame).set_index("preset")
    assert table1.loc["copy-200", "n"] == 3 and table1.loc["copy-200", CELLS[0]] == pytest.approx((88 + 80 + 90) / 3)


def test_the_precision_check_says_whether_the_difference_is_within_the_larger_spread(tmp_path):
    for seed, (a, b) in enumerate([(90.0, 89.0), (92.0, 91.0), (91.0, 90.5)]):
        make_run(tmp_path, f"f{seed}", "copy-20", "random", seed, a, precision="fp32")
        make_run(tmp_path, f"b{seed}", "copy-20", "random", seed, b)
    row = precision_summary(runs_table(find_runs([tmp_path]))).set_index("precision").loc["bf16"]
    assert row["difference"] == pytest.approx(-2.5 / 3) and row["within_spread"]  # sd 1.0 and 0.76
    make_run(tmp_path, "b3", "copy-20", "random", 3, 86.0)
    make_run(tmp_path, "f3", "copy-20", "random", 3, 93.0, precision="fp32")
    row = precision_summary(runs_table(find_runs([tmp_path]))).set_index("precision").loc["bf16"]
    assert row["difference"] == pytest.approx(-2.375) and not row["within_spread"]  # sd 1.29 and 2.25


def analysed_run(
    root: Path, name: str, preset: str, batching: str, seed: int, heads: str, precision="bf16", families=None
) -> Path:
    """A run laid out as a sweep's replicate: ``name/model`` and its matching analysis beside it."""
    model = make_run(root / name, "model", preset, batching, seed, 90.0, precision=precision, families=families)
    analysis = root / name / "analysis" / "matching"
    analysis.mkdir(parents=True)
    summary = {"matching_heads": heads, "best_head": "2.7" if heads != "none" else "1.1", "best_score": 0.4}
    (analysis / "matching_heads.json").write_text(json.dumps({"analysis": "matching_heads", "summary": summary}))
    return model


def test_occurrence_counts_the_analysed_runs_with_a_matching_head_beside_the_paper(tmp_path):
    for seed, heads in enumerate(["2.7", "2.7, 1.3", "none"]):
        analysed_run(tmp_path, f"nr{seed}", "nocopy-20", "random", seed, heads)
    analysed_run(tmp_path, "nr0-fp32", "nocopy-20", "random", 0, "none", precision="fp32")  # counts for seed 0
    analysed_run(tmp_path, "na0", "nocopy-20", "alphabet", 0, "1.2")
    analysed_run(tmp_path, "c0", "copy-20", "transformation", 0, "2.7")
    analysed_run(tmp_path, "c200", "copy-200", "alphabet", 0, "2.7")  # not in the paper's occurrence table
    make_run(tmp_path, "unanalysed", "copy-20", "random", 1, 90.0)
    frame = runs_table(find_runs([tmp_path]))
    row = frame.set_index("run").loc[str(tmp_path / "nr1" / "model")]
    assert row["matching_head"] and (row["matching_heads"], row["matching_best_score"]) == ("2.7, 1.3", 0.4)
    assert frame.set_index("run").loc[str(tmp_path / "unanalysed"), "matching_head"] is None
    table = occurrence_summary(frame).set_index(["preset", "batching"])
    assert list(table.index) == [
        ("copy-20", "transformation"), ("copy-20", "all"),
        ("nocopy-20", "alphabet"), ("nocopy-20", "random"), ("nocopy-20", "all"),
    ]  # fmt: skip
    assert table.loc[("nocopy-20", "random"), ["n", "with_head", "paper_with_head", "paper_n"]].tolist() == [3, 1, 1, 5]
    assert table.loc[("nocopy-20", "all"), ["n", "with_head", "paper_with_head", "paper_n"]].tolist() == [4, 2, 5, 20]
    assert table.loc[("copy-20", "all"), ["n", "with_head"]].tolist() == [1, 1]
    assert math.isnan(table.loc[("copy-20", "transformation"), "paper_n"])
    assert occurrence_summary(runs_table(find_runs([tmp_path / "unanalysed"]))).empty


def test_sibling_percent_pools_the_family_rules_and_the_page_plots_it_against_the_matching_score(tmp_path, capsys):
    succ = {"correct": 6, "as_rule": {"extend_sequence": 0, "pred": 3}, "other": 1, "total": 10}
    rr_succ = {"correct": 9, "as_rule": {"remove_redundant": 1}, "other": 0, "total": 10}
    families = {"seen_alphabets": {"succ": succ, "rr_succ": rr_succ}, "new_alphabets": {}}
    model = analysed_run(tmp_path / "runs", "n0", "nocopy-20", "random", 0, "none", families=families)
    make_run(tmp_path / "runs", "plain", "copy-20", "random", 1, 90.0)  # an evaluation from before the analysis
    frame = runs_table(find_runs([tmp_path / "runs"]))
    rows = frame.set_index("run")
    assert rows.loc[str(model), "sibling_percent"] == pytest.approx(20.0)  # (3 + 1) of 20 tasks
    assert rows.loc[str(model), "succ_as_pred"] == 3 and rows.loc[str(model), "rr_succ_as_remove_redundant"] == 1
    assert math.isnan(rows.loc[str(tmp_path / "runs" / "plain"), "sibling_percent"])
    figure = matching_vs_rule_figure(frame)
    assert [(t.name, list(t.x), list(t.y)) for t in figure.data] == [("nocopy-20 (1 run)", [0.4], [20.0])]
    copy_20, copy_200 = (analysed_run(tmp_path / "more", name, preset, "random", 0, "none", families=families)
                         for name, preset in (("c20", "copy-20"), ("c200", "copy-200")))  # fmt: skip
    both = runs_table(find_runs([tmp_path / "runs", tmp_path / "more"]))
    traces = {t.name: (list(t.customdata[:, 0]), t.marker.color) for t in matching_vs_rule_figure(both).data}
    assert traces == {
        "copy-20 (1 run)": ([str(copy_20)], "#1f77b4"),
        "nocopy-20 (1 run)": ([str(model)], "#ff7f0e"),
        "copy-200 (1 run)": ([str(copy_200)], "#2ca02c"),
    }
    out = tmp_path / "results"
    with pytest.raises(SystemExit):
        cli.main(["results", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert "Matching head and rule identification" in (out / "figures.html").read_text()
    with pytest.raises(SystemExit):
        cli.main(["results", "--runs", str(tmp_path / "runs" / "plain"), "--out", str(out)])
    assert "Matching head and rule identification" not in (out / "figures.html").read_text()


def test_results_by_default_reads_the_shipped_checkpoints_from_anywhere_and_writes_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository: its checkpoints/ and analyses/results/ are not here
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["results"])
    assert exit_info.value.code == 0 and sorted(path.name for path in tmp_path.iterdir()) == ["runs"]
    table = read_runs_table(tmp_path / "runs" / "results" / "runs.csv")
    assert {Path(run).name for run in table["run"]} >= {"copy-200", "copy-20", "nocopy-20", "copy-20-s1-bf16"}
    assert all(Path(run).parent.name in {"checkpoints", "replicates"} for run in table["run"])


def test_results_command_writes_the_tables_and_figures(tmp_path, capsys):
    make_run(tmp_path / "runs", "a", "copy-200", "alphabet", 0, 95.0)
    make_run(tmp_path / "runs", "b", "copy-200", "alphabet", 1, 97.0)
    out = tmp_path / "results"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["results", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert exit_info.value.code == 0
    assert read_runs_table(out / "runs.csv")["counted"].tolist() == [True, True]
    alphabets = pd.read_csv(out / "alphabets.csv")
    assert alphabets[["n_alphabets", "batching", "n"]].values.tolist() == [[200, "alphabet", 2]]
    page = (out / "figures.html").read_text()
    assert "<h2>Figure 3</h2>" in page and "plotly" in page and not re.search(r"<script[^>]*\bsrc=", page)
    assert "<p>2 runs in runs.csv, 2 counted in the tables and Figure 3" in page
    printed = capsys.readouterr().out
    assert "96.0 [95.0, 97.0] (n=2)" in printed and "Precision check" not in printed
    assert "counted the standard alphabet" in " ".join(printed.split())  # the caption under each table
    assert pd.read_csv(out / "precision.csv").empty
    make_run(tmp_path / "runs", "c", "copy-200", "alphabet", 0, 91.0, precision="fp32")
    with pytest.raises(SystemExit):
        cli.main(["results", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    printed = capsys.readouterr().out
    assert "Precision check" in printed and "94.0 [91.0, 97.0] (n=2)" in printed
    counted = read_runs_table(out / "runs.csv").set_index("run")["counted"]
    assert counted.to_dict() == {str(tmp_path / "runs" / name): name != "a" for name in "abc"}
    assert (
        f"not counted: {tmp_path / 'runs' / 'a'} (copy-200 / alphabet seed 0 counts once: its fp32 run counts, not "
        "this bf16 one)" in (out / "figures.html").read_text()
    )
    assert pd.read_csv(out / "precision.csv")["precision"].tolist() == ["bf16", "fp32"]
    assert "Matching-head occurrence" not in printed and pd.read_csv(out / "occurrence.csv").empty
    analysed_run(tmp_path / "runs", "n", "nocopy-20", "random", 0, "none")
    with pytest.raises(SystemExit):
        cli.main(["results", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert re.search(r"nocopy-20 .* random .* 0/1 .* 1/5", capsys.readouterr().out)
    record = {"type": "epoch", "epoch": 1, "val_acc_noncopy": 0.5, "val_acc_seen_transformations": 0.6}
    for precision in ("bf16", "fp32"):  # the histories of one condition in two precisions
        (tmp_path / precision).mkdir()
        config = {"preset": "copy-200", "batching": "alphabet", "precision": precision}
        (tmp_path / precision / "train_config.json").write_text(json.dumps(config))
        (tmp_path / precision / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    history = ["--history", str(tmp_path / "bf16"), "--history", str(tmp_path / "fp32")]
    with pytest.raises(SystemExit):
        cli.main(["results", "--runs", str(tmp_path / "runs"), *history, "--out", str(out)])
    page = (out / "figures.html").read_text()
    assert "Training curves" in page and "Precision check over training" in page
    (tmp_path / "started").mkdir()  # a run of --history that has not finished an epoch: no empty panels
    (tmp_path / "started" / "train_config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit):
        cli.main(
            ["results", "--runs", str(tmp_path / "runs"), "--history", str(tmp_path / "started"), "--out", str(out)]
        )
    page = (out / "figures.html").read_text()
    assert "Training curves" not in page and "have no epoch records yet" in page
    (tmp_path / "notes").mkdir()  # a --history that holds no run: an error before anything is written
    fresh, notes = tmp_path / "fresh", ["--history", str(tmp_path / "notes")]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["results", "--runs", str(tmp_path / "runs"), *notes, "--out", str(fresh)])
    assert exit_info.value.code == 2 and "holds none" in capsys.readouterr().err and not fresh.exists()


@pytest.mark.parametrize("out", ["/proc/lsa-results", "FILE"])
def test_results_refuses_an_unwritable_out_before_reading_runs(tmp_path, capsys, out):
    target = tmp_path / "file" if out == "FILE" else Path(out)
    target.parent.mkdir(exist_ok=True) if out == "FILE" else None
    if out == "FILE":
        target.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["results", "--runs", str(tmp_path / "nothing-here"), "--out", str(target)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--out" in err


def test_a_run_found_shipped_and_in_its_sweeps_records_is_one_row_with_the_checkpoints_or_records_matching(tmp_path):
    record = analysed_run(tmp_path / "records", "stack-0", "copy-20", "random", 0, "1.3, 2.4")
    shipped = shutil.copytree(record, tmp_path / "checkpoints" / "replicates" / "copy-20-s0")
    (record / "model.safetensors").unlink()  # what pack_results.py records keeps: no weights
    other_seed = analysed_run(tmp_path / "records", "stack-1", "copy-20", "random", 1, "none")
    frame = runs_table(find_runs([tmp_path / "records", tmp_path / "checkpoints"]))
    assert frame["run"].tolist() == [str(shipped), str(other_seed)]
    assert frame["matching_heads"].tolist() == ["1.3, 2.4", "none"] and frame["complete"].all()
    reevaluated = json.loads((shipped / "evaluation.json").read_text())
    reevaluated["table1"]["seen_transformations_seen_alphabets"]["percent"] = 91.0  # on other hardware, say
    (shipped / "evaluation.json").write_text(json.dumps(reevaluated))
    frame = runs_table(find_runs([tmp_path / "records", tmp_path / "checkpoints"]))
    assert frame["run"].tolist() == [str(shipped), str(other_seed)]
    assert frame["seen_transformations_seen_alphabets"].tolist()[0] == 91.0  # the shipped copy's evaluation
    own = {"analysis": "matching_heads", "summary": {"matching_heads": "none", "best_head": "1.1", "best_score": 0.1}}
    (shipped / "matching_heads.json").write_text(json.dumps(own))  # lsa-interp ship: of the stored weights
    frame = runs_table(find_runs([tmp_path / "records", tmp_path / "checkpoints"]))
    assert frame["matching_heads"].tolist() == ["none", "none"] and frame["matching_best_score"][0] == 0.1
    config = json.loads((record / "config.json").read_text())
    config["metadata"]["train_seconds"] = 75.0  # the same seed, trained again
    (record / "config.json").write_text(json.dumps(config))
    assert len(runs_table(find_runs([tmp_path / "records", tmp_path / "checkpoints"]))) == 3


def test_the_table_writes_and_reads_back_as_it_was_into_new_folders(tmp_path):
    for name, seed in (("b", 1), ("a", 0)):
        make_run(tmp_path / "runs", name, "copy-20", "random", seed, 90.0 + seed)
    frame = runs_table(find_runs([tmp_path / "runs"]))
    assert frame.index.tolist() == [0, 1] and "index" not in frame and frame["seed"].tolist() == [0, 1]
    path = write_runs_table(frame, tmp_path / "new" / "nested" / "runs.csv")
    back = read_runs_table(path)
    assert back.columns.tolist() == frame.columns.tolist()
    assert back[CELLS[0]].tolist() == [90.0, 91.0] and back["run"].tolist() == frame["run"].tolist()
    assert find_runs([path]) == [] and find_runs([tmp_path / "runs" / "a"]) == [tmp_path / "runs" / "a"]


def test_training_progress_counts_a_run_complete_within_a_millionth_of_its_planned_epochs():
    assert training_progress({"epochs_completed": 20 - 1e-6, "epochs": 20}) == (20 - 1e-6, 20, True)
    assert training_progress({"epochs_completed": 19.5, "epochs": 20})[2] is False
    assert training_progress({"epochs_completed": 20.0, "train_config": {"epochs": 20}}) == (20.0, 20, True)
    assert training_progress({"epochs_completed": 20.0}) == (20.0, None, False)
    assert training_progress({"epochs": 20}) == (None, 20, False)


def test_a_run_record_needs_both_files_and_takes_its_preset_from_the_evaluation_when_its_metadata_has_none(tmp_path):
    directory = make_run(tmp_path, "run", "copy-20", "random", 0, 90.0)
    config = json.loads((directory / "config.json").read_text())
    del config["metadata"]["preset"]
    (directory / "config.json").write_text(json.dumps(config))
    evaluation = json.loads((directory / "evaluation.json").read_text())
    for key in ("training_preset", "preset"):
        evaluation.pop(key, None)
    (directory / "evaluation.json").write_text(json.dumps({**evaluation, "preset": "nocopy-20"}))
    assert run_record(directory)["preset"] == "nocopy-20"
    (directory / "evaluation.json").write_text(json.dumps({**evaluation, "training_preset": "copy-200"}))
    assert run_record(directory)["preset"] == "copy-200"
    (directory / "config.json").write_text(json.dumps({"model": {}}))
    with pytest.raises(ValueError, match=r"config\.json: no 'metadata'; expected a checkpoint"):
        run_record(directory)


def test_matching_columns_without_an_analysis_and_from_a_checkpoints_own(tmp_path):
    directory = make_run(tmp_path, "run", "copy-20", "random", 0, 90.0)
    nothing = matching_record(directory)
    assert list(nothing) == ["matching_head", "matching_heads", "matching_best_head", "matching_best_score"]
    assert nothing["matching_head"] is None and nothing["matching_heads"] is None
    assert nothing["matching_best_head"] is None and math.isnan(nothing["matching_best_score"])
    summary = {"matching_heads": "2.7", "best_head": "2.7", "best_score": 0.61}
    (directory / "matching_heads.json").write_text(json.dumps({"summary": summary}))
    assert matching_record(directory) == {
        "matching_head": True, "matching_heads": "2.7", "matching_best_head": "2.7", "matching_best_score": 0.61,
    }  # fmt: skip


def test_a_run_found_twice_keeps_the_copy_with_weights_wherever_it_comes_and_a_missing_key_value(tmp_path):
    records = make_run(tmp_path / "a-records", "run", "copy-20", "random", 0, 80.0)  # sorts first
    shipped = make_run(tmp_path / "z-checkpoints", "run", "copy-20", "random", 0, 95.0)
    (records / "model.safetensors").unlink()
    for directory in (records, shipped):  # hardware unknown: a key column with a missing value
        config = json.loads((directory / "config.json").read_text())
        config["metadata"].pop("hardware")
        (directory / "config.json").write_text(json.dumps(config))
    (records / "matching_heads.json").write_text(
        json.dumps({"summary": {"matching_heads": "2.7", "best_head": "2.7", "best_score": 0.5}})
    )
    frame = runs_table(find_runs([tmp_path]))
    assert len(frame) == 1 and frame.index.tolist() == [0]
    row = frame.iloc[0]
    assert row["run"] == str(shipped) and row[CELLS[0]] == 95.0 and row["matching_best_score"] == 0.5


def test_two_runs_that_differ_only_in_their_data_seed_are_two_rows(tmp_path):
    """A stack's replicates share their training time: two cells of one seed on data seeds 0 and 1 were merged."""
    for data_seed in (0, 1):
        directory = make_run(tmp_path / f"d{data_seed}", "run", "copy-20", "random", 0, 80.0 + data_seed)
        config = json.loads((directory / "config.json").read_text())
        config["metadata"]["data_seed"] = data_seed
        (directory / "config.json").write_text(json.dumps(config))
    frame = runs_table(find_runs([tmp_path]))
    assert sorted(frame["data_seed"]) == [0, 1] and sorted(frame[CELLS[0]]) == [80.0, 81.0]


def test_a_row_holds_the_recipe_the_task_counts_and_every_transformations_accuracy(tmp_path):
    row = run_record(make_run(tmp_path, "a", "copy-20", "alphabet", 3, 88.5, epochs=12.5))
    shipped = json.loads(SHIPPED_EVALUATION.read_text())
    assert (row["hardware"], row["epochs"], row["epochs_planned"], row["complete"]) == ("test", 12.5, 20, False)
    assert (row["n_val"], row["n_new"]) == (shipped["n_tasks"]["seen_alphabets"], shipped["n_tasks"]["new_alphabets"])
    assert row["copy_accuracy"] == shipped["copy_vs_non_copy"]["seen_alphabets"]["copy"]["percent"]
    for prefix, split in (("acc_seen_", "seen_alphabets"), ("acc_new_", "new_alphabets")):
        cells = shipped["by_transformation"][split]
        assert len(cells) > 10 and {rule: row[prefix + rule] for rule in cells} == {
            rule: cell["percent"] for rule, cell in cells.items()
        }


def test_settings_the_metadata_leaves_out_come_from_the_recipe_then_the_defaults(tmp_path):
    directory = make_run(tmp_path, "a", "copy-20", "alphabet", 0, 90.0, train_config={"batching": "random"})
    config = json.loads((directory / "config.json").read_text())
    meta = config["metadata"]
    for key in ("batching", "precision", "hardware"):
        meta.pop(key)
    meta["device"] = "cpu"
    meta["train_config"]["precision"] = "tf32"
    (directory / "config.json").write_text(json.dumps(config))
    row = run_record(directory)
    assert (row["batching"], row["condition"], row["precision"], row["hardware"]) == (
        "random", "copy-20/random", "tf32", "cpu",
    )  # fmt: skip
    assert "data_seed" not in meta and row["data_seed"] == 0  # metadata from before the data seed, of seed 0
    meta["train_config"] = {}
    meta.pop("device")
    (directory / "config.json").write_text(json.dumps(config))
    row = run_record(directory)
    assert (row["batching"], row["precision"], row["hardware"]) == ("unknown", "fp32", None)


def test_a_run_of_data_no_preset_names_and_an_evaluation_without_the_outcome_analysis(tmp_path):
    directory = make_run(tmp_path, "a", "my-data", "random", 0, 90.0)
    evaluation = json.loads((directory / "evaluation.json").read_text())
    evaluation.pop("alternate_rule")
    (directory / "evaluation.json").write_text(json.dumps(evaluation))
    row = run_record(directory)
    assert (row["condition"], row["n_alphabets"], row["copy"], row["n_shots"]) == ("my-data/random", None, None, None)
    assert not [column for column in row if column.endswith(("_correct", "_applied_other_rule"))]
    evaluation["alternate_rule"] = {"new_alphabets": {}}
    (directory / "evaluation.json").write_text(json.dumps(evaluation))
    assert run_record(directory)[CELLS[0]] == 90.0


def test_of_several_copies_of_a_run_with_weights_the_first_by_path_counts_in_any_order(tmp_path):
    copies = [
        make_run(tmp_path / folder, "run", "copy-20", "random", 0, seen) for folder, seen in (("b", 91.0), ("a", 93.0))
    ]
    records = make_run(tmp_path / "c", "run", "copy-20", "random", 0, 80.0)
    (records / "model.safetensors").unlink()
    for order in (copies + [records], [records, *reversed(copies)]):
        frame = runs_table(order)
        assert frame["run"].tolist() == [str(copies[1])] and frame[CELLS[0]].tolist() == [93.0]


def test_a_hand_edited_table_is_named_with_its_column(tmp_path):
    """A cell holding text made the explorer's summaries fail with a TypeError (math.isnan of a str) that its
    training tab did not catch; a missing identity column was a KeyError listing a pandas Index."""
    for name, seed in (("b", 1), ("a", 0)):
        make_run(tmp_path / "runs", name, "copy-20", "random", seed, 90.0 + seed)
    frame = runs_table(find_runs([tmp_path / "runs"]))
    path = write_runs_table(frame.assign(**{CELLS[0]: ["abc", 91.0]}), tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=rf"bad\.csv: column {CELLS[0]} holds 'abc', not a number; write it again"):
        read_runs_table(path)
    path = write_runs_table(frame.drop(columns=["preset", "complete"]), tmp_path / "bare.csv")
    with pytest.raises(ValueError, match=r"bare\.csv: no column preset, complete; write it again with lsa-interp"):
        read_runs_table(path)
    path = write_runs_table(frame.assign(**{CELLS[0]: [None, 91.0]}), tmp_path / "gap.csv")
    assert read_runs_table(path)[CELLS[0]].isna().tolist() == [True, False]  # a run not evaluated yet
