"""The grid summaries on hand-made run tables: exact counts, means, intervals and paper columns per summary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lsa_interp.evaluation.grid_summary import (
    alphabets_summary,
    batching_summary,
    bootstrap_interval,
    complete_runs,
    counted_histories,
    counted_runs,
    few_shot_summary,
    format_interval,
    occurrence_summary,
    pooled,
    precision_summary,
    summarize,
    table1_summary,
    uncounted_reasons,
)
from lsa_interp.evaluation.paper_tables import CELLS, PAPER_ALPHABETS, PAPER_FEW_SHOT

NAN = float("nan")


def run(preset: str, batching: str, seed: int, seen: float, **columns) -> dict:
    """One row of a runs table: a complete fp32 run of ``preset`` with ``seen`` % on seen/seen (the other cells
    offset from it), plus ``columns``."""
    row = {
        "preset": preset, "batching": batching, "seed": seed, "precision": "fp32", "complete": True,
        "copy": not preset.startswith("nocopy"), "n_alphabets": int(preset.split("-")[1]), "n_shots": 1,
        "overall_seen_alphabets": seen / 2, "matching_head": None,
    }  # fmt: skip
    row.update({cell: seen - 10 * i for i, cell in enumerate(CELLS)})
    return row | columns


def test_bootstrap_interval_is_exactly_scipys_with_the_given_seed():
    values = [90.2, 91.5, 89.9, 92.4, 90.8, 88.1]
    for seed in (0, 3):
        expected = stats.bootstrap(
            (np.array(values),), np.mean, n_resamples=10_000, confidence_level=0.95, method="percentile",
            random_state=seed,
        )  # fmt: skip
        low, high = expected.confidence_interval
        assert bootstrap_interval(values, seed=seed) == (np.mean(values), low, high)
    assert bootstrap_interval(values) == bootstrap_interval(values, seed=0) != bootstrap_interval(values, seed=3)
    assert bootstrap_interval([*values, NAN]) == bootstrap_interval(values)
    assert bootstrap_interval(np.array([*values, None], dtype=object)) == bootstrap_interval(values)
    mean, low, high = bootstrap_interval([7.0])
    assert mean == 7.0 and math.isnan(low) and math.isnan(high)
    mean, low, high = bootstrap_interval([NAN, NAN])
    assert math.isnan(mean) and math.isnan(low) and math.isnan(high)
    assert len(bootstrap_interval([])) == 3
    assert bootstrap_interval([4.0, 4.0, 4.0]) == (4.0, 4.0, 4.0)


def test_bootstrap_interval_asks_scipy_for_the_papers_interval(monkeypatch):
    calls = []
    real = stats.bootstrap
    monkeypatch.setattr(stats, "bootstrap", lambda *args, **kwargs: calls.append(kwargs) or real(*args, **kwargs))
    bootstrap_interval([1.0, 2.0, 4.0], seed=5)
    assert calls == [dict(n_resamples=10_000, confidence_level=0.95, method="percentile", random_state=5)]


def test_format_interval_prints_one_decimal_and_the_interval_only_where_there_is_one():
    assert format_interval(91.46, 90.449, 92.61) == "91.5 [90.4, 92.6]"
    assert format_interval(91.46) == "91.5"
    assert format_interval(91.46, None, None) == "91.5"
    assert format_interval(91.46, NAN, 92.0) == "91.5"
    assert format_interval(None) == "-" and format_interval(NAN) == "-"
    assert format_interval(NAN, 1.0, 2.0, missing="n/a") == "n/a"


def test_summarize_gives_each_group_its_runs_mean_and_interval_in_a_fixed_column_order():
    frame = pd.DataFrame([run("copy-20", "random", s, v) for s, v in enumerate([90.0, 92.0, 95.0])]
                         + [run("copy-20", "alphabet", 0, 80.0)])  # fmt: skip
    summary = summarize(frame, ["preset", "batching"], columns=CELLS[:2])
    assert list(summary.columns) == [
        "preset",
        "batching",
        "n",
        *[c + s for c in CELLS[:2] for s in ("", "_low", "_high")],
    ]
    assert summary[["batching", "n"]].values.tolist() == [["alphabet", 1], ["random", 3]]
    random = summary.iloc[1]
    assert (random[CELLS[1]], random[f"{CELLS[1]}_low"], random[f"{CELLS[1]}_high"]) == bootstrap_interval(
        [80.0, 82.0, 85.0]
    )
    assert summarize(frame, ["preset"])["n"].tolist() == [4]
    assert summarize(frame.iloc[:0], ["preset"]).columns.tolist()[:2] == ["preset", "n"]


def precision_frame(fp32: list[float], bf16: list[float], preset: str = "copy-20") -> list[dict]:
    rows = [run(preset, "random", s, v) for s, v in enumerate(fp32)]
    return rows + [run(preset, "random", s, v, precision="bf16") for s, v in enumerate(bf16)]


def test_the_precision_check_compares_each_precision_with_fp32_per_condition():
    rows = precision_frame([70.0], [60.0, 61.0], preset="nocopy-20")  # one fp32 run: no spread there, no verdict
    rows += precision_frame([90.0, 92.0, 94.0], [89.0, 90.0, 91.0, 95.0])  # sd 2.0 and 2.65
    rows += [run("copy-200", "alphabet", 0, 90.0)]  # one precision: no check
    rows += [run("copy-20", "random", 9, 10.0, complete=False, precision="bf16")]  # partial: left out
    check = precision_summary(pd.DataFrame(rows))
    assert check.columns.tolist() == [
        "preset",
        "batching",
        "precision",
        "n",
        "mean",
        "sd",
        "difference",
        "within_spread",
        "hardware",
        "note",
    ]
    assert check[["preset", "precision", "n"]].values.tolist() == [
        ["copy-20", "bf16", 4], ["copy-20", "fp32", 3], ["nocopy-20", "bf16", 2], ["nocopy-20", "fp32", 1],
    ]  # fmt: skip
    copy = check.set_index(["preset", "precision"])
    assert copy.loc[("copy-20", "bf16"), "mean"] == pytest.approx(91.25)
    assert copy.loc[("copy-20", "bf16"), "sd"] == pytest.approx(np.std([89.0, 90.0, 91.0, 95.0], ddof=1))
    assert copy.loc[("copy-20", "bf16"), "difference"] == pytest.approx(-0.75)
    assert copy.loc[("copy-20", "bf16"), "within_spread"] is True
    assert copy.loc[("copy-20", "fp32"), "within_spread"] is None
    assert math.isnan(copy.loc[("copy-20", "fp32"), "difference"])
    assert math.isnan(copy.loc[("nocopy-20", "fp32"), "sd"])
    assert copy.loc[("nocopy-20", "bf16"), "difference"] == pytest.approx(-9.5)
    assert copy.loc[("nocopy-20", "bf16"), "within_spread"] is None  # 9.5 against the bf16 sd 0.71, fp32 has none
    assert copy.loc[("nocopy-20", "bf16"), "note"] == "no verdict: fp32 has 1 run, so no run-to-run spread"
    assert copy.loc[("copy-20", "bf16"), "note"] == "" and copy.loc[("copy-20", "bf16"), "hardware"] == ""
    with_partial = precision_summary(pd.DataFrame(rows), include_partial=True).set_index(["preset", "precision"])
    assert with_partial.loc[("copy-20", "bf16"), "n"] == 5
    for frame in (pd.DataFrame(rows).iloc[:0], pd.DataFrame(rows).drop(columns="precision")):
        assert precision_summary(frame).empty and precision_summary(frame).columns.tolist() == check.columns.tolist()


def test_a_difference_equal_to_the_larger_spread_is_not_within_it_and_no_spread_says_nothing():
    check = precision_summary(pd.DataFrame(precision_frame([88.0, 90.0, 92.0], [90.0, 92.0, 94.0])))
    check = check.set_index("precision")
    assert (check.loc["bf16", "difference"], check.loc["bf16", "sd"], check.loc["fp32", "sd"]) == (2.0, 2.0, 2.0)
    assert check.loc["bf16", "within_spread"] is False  # 2.0 against sd 2.0 both: not smaller
    check = precision_summary(pd.DataFrame(precision_frame([90.0, 90.0 + 2 * math.sqrt(2)], [91.0, 93.0])))
    row = check.set_index("precision").loc["bf16"]
    assert row["within_spread"] is True  # |-0.41| against the larger sd 2.0 (fp32), not bf16's 1.41
    check = precision_summary(pd.DataFrame(precision_frame([90.0], [88.0]))).set_index("precision")
    assert check.loc["bf16", "within_spread"] is None and check.loc["bf16", "difference"] == pytest.approx(-2.0)
    no_fp32 = [run("copy-20", "random", 0, 90.0, precision="bf16"), run("copy-20", "random", 0, 91.0, precision="tf32")]
    check = precision_summary(pd.DataFrame(no_fp32))
    assert check["within_spread"].tolist() == [None, None] and check["difference"].isna().all()


def test_the_precision_check_judges_only_with_two_runs_of_each_precision_and_names_different_hardware():
    """Issue 14's rule compares the difference with the larger run-to-run standard deviation: a side of one run has
    none, so there is no verdict, however far apart the means (96.5 in fp32 against bf16's 92.4 was judged "no"
    with fp32 alone). Where the precisions trained on different machines, the note says which."""
    cpu, h100 = "AMD EPYC, 1 torch threads", "NVIDIA H100 80GB HBM3 (CUDA 13.0)"
    rows = [run("copy-20", "random", 0, 96.5, hardware=cpu)]
    rows += [run("copy-20", "random", s, v, precision="bf16", hardware=h100) for s, v in enumerate([93.0, 88.8, 92.2])]
    check = precision_summary(pd.DataFrame(rows)).set_index("precision")
    assert check.loc["bf16", "within_spread"] is None
    assert check.loc["bf16", "difference"] == pytest.approx(274 / 3 - 96.5)
    assert check.loc["bf16", "note"] == (
        "no verdict: fp32 has 1 run, so no run-to-run spread; "
        f"trained on different hardware: bf16 on {h100}, fp32 on {cpu}"
    )
    assert check["hardware"].to_dict() == {"bf16": h100, "fp32": cpu} and check.loc["fp32", "note"] == ""
    one_bf16 = precision_summary(pd.DataFrame(rows[:2] + [run("copy-20", "random", 1, 95.0, hardware=cpu)]))
    row = one_bf16.set_index("precision").loc["bf16"]
    assert row["within_spread"] is None and row["note"].startswith("no verdict: bf16 has 1 run, so")
    rows.append(run("copy-20", "random", 1, 95.0, hardware=h100))  # fp32 now 2 runs, one on each machine
    row = precision_summary(pd.DataFrame(rows)).set_index("precision").loc["bf16"]
    assert row["within_spread"] is False  # |91.33 - 95.75| = 4.42 against sd 2.23 (bf16) and 1.06
    assert row["note"] == f"trained on different hardware: bf16 on {h100}, fp32 on {cpu}; {h100}"
    same = [{**r, "hardware": h100} for r in rows]
    assert precision_summary(pd.DataFrame(same)).set_index("precision").loc["bf16", "note"] == ""
    unknown = precision_summary(pd.DataFrame(rows).drop(columns="hardware")).set_index("precision")
    assert unknown.loc["bf16", "note"] == "" and unknown.loc["bf16", "hardware"] == ""


def test_the_precision_check_names_both_sides_of_one_run_and_every_machine_and_no_verdict_without_an_sd():
    rows = [run("copy-20", "random", 0, 96.5, hardware="cpu"), run("copy-20", "random", 0, 93.0, precision="bf16")]
    rows += [run("copy-20", "random", 1, 92.0, precision="bf16", hardware="h100", run="x")]  # seed 1: bf16 only
    rows[1]["hardware"] = "a100"
    check = precision_summary(pd.DataFrame(rows)).set_index("precision")
    assert check.loc["bf16", "hardware"] == "a100; h100"
    assert check.loc["bf16", "note"] == (
        "no verdict: fp32 has 1 run, so no run-to-run spread; trained on different hardware: bf16 on a100; h100, "
        "fp32 on cpu"
    )
    alone = precision_summary(pd.DataFrame(rows[:2])).set_index("precision")
    assert alone.loc["bf16", "note"].startswith("no verdict: bf16 has 1 run and fp32 has 1 run, so no run-to-run")
    no_sd = rows[:2] + [run("copy-20", "random", 1, 95.0), run("copy-20", "random", 1, math.nan, precision="bf16")]
    row = precision_summary(pd.DataFrame(no_sd)).set_index("precision").loc["bf16"]
    assert row["n"] == 2 and math.isnan(row["sd"]) and row["within_spread"] is None


def test_table1_and_the_batching_table_say_which_batching_methods_and_precisions_each_row_pools():
    rows = [run("copy-20", "random", 0, 96.5), run("copy-20", "random", 0, 93.0, precision="bf16")]
    rows += [run("copy-20", "random", s, 90.0, precision="bf16") for s in (1, 2)]
    rows += [run("copy-20", "alphabet", 0, 90.0), run("copy-200", "alphabet", 0, 87.0)]
    rows += [run("copy-200", "transformation", 0, 10.0)]  # not pooled in Table 1's copy-200 row
    table1 = table1_summary(pd.DataFrame(rows)).set_index("preset")
    described = ["n", "batching_methods", "precisions"]
    assert table1.loc["copy-20", described].tolist() == [4, "alphabet, random", "bf16 2, fp32 2"]
    assert table1.loc["copy-200", described].tolist() == [1, "alphabet", "fp32 1"]
    batching = batching_summary(pd.DataFrame(rows)).set_index(["preset", "batching"])
    assert batching.loc[("copy-20", "random"), "precisions"] == "bf16 2, fp32 1" and "batching_methods" not in batching
    empty = table1_summary(pd.DataFrame(rows).iloc[:0])
    assert empty.empty and {"batching_methods", "precisions"} <= set(empty.columns)


def test_pooled_names_no_precisions_for_a_table_without_them():
    runs = pd.DataFrame({"batching": ["random", "alphabet", "random"]})
    assert pooled(runs) == ("alphabet, random", "")
    assert pooled(runs.assign(precision=["fp32", "bf16", "fp32"])) == ("alphabet, random", "bf16 1, fp32 2")


def test_each_run_left_out_of_the_means_says_why():
    rows = [
        run("copy-20", "random", 0, 96.5, run="fp32"),
        run("copy-20", "random", 0, 93.0, precision="bf16", run="bf16"),
        run("copy-200", "alphabet", 0, 87.0, length_bucketing=False, architecture="hooked", run="reference batches"),
        run("copy-200", "alphabet", 0, 85.0, length_bucketing=True, architecture="hooked", run="bucketed"),
        run("copy-200", "alphabet", 1, 80.0, length_bucketing=False, architecture="reference", run="nn"),
        run("copy-200", "alphabet", 1, 81.0, length_bucketing=False, architecture="hooked", run="ours"),
        run("copy-200", "alphabet", 2, 10.0, complete=False, run="partial"),
        run("copy-200", "alphabet", 3, 70.0, length_bucketing=False, architecture="hooked", run="first"),
        run("copy-200", "alphabet", 3, 71.0, length_bucketing=False, architecture="hooked", run="second"),
    ]
    frame = pd.DataFrame(rows)
    reasons = {frame.loc[i, "run"]: reason for i, reason in uncounted_reasons(frame).items()}
    assert reasons == {
        "bf16": "copy-20 / random seed 0 counts once: its fp32 run counts, not this bf16 one",
        "bucketed": "copy-200 / alphabet seed 0 counts once: its run with the reference's batches counts, not this "
        "length-bucketed one",
        "nn": "copy-200 / alphabet seed 1 counts once: its run on our model counts, not this one on the plain "
        "nn.Transformer",
        "partial": "stopped before its last epoch (--include-partial counts it)",
        "second": "copy-200 / alphabet seed 3 counts once: an earlier-listed run of it counts",
    }
    assert "partial" not in {frame.loc[i, "run"] for i in uncounted_reasons(frame, include_partial=True).index}
    assert uncounted_reasons(frame.iloc[:1]).empty


def test_a_table_without_the_batching_or_architecture_columns_says_an_earlier_run_counts():
    """Runs tables from before the length_bucketing and architecture columns: two runs of a seed differ in neither
    (a missing column reads as not bucketed, on our model), so the reason is the listing order."""
    frame = pd.DataFrame(
        [run("copy-20", "random", 0, 96.5, run="first"), run("copy-20", "random", 0, 95.0, run="again")]
    )
    assert "length_bucketing" not in frame and "architecture" not in frame
    assert uncounted_reasons(frame).tolist() == [
        "copy-20 / random seed 0 counts once: an earlier-listed run of it counts"
    ]


def test_runs_without_a_seed_count_once_per_preset_and_batching_and_the_others_say_so():
    frame = pd.DataFrame([run("copy-20", "random", None, 90.0, run="a"), run("copy-20", "random", None, 91.0, run="b")])
    assert uncounted_reasons(frame).to_dict() == {1: "copy-20 / random seed None counts once: another run of it counts"}


def history_rows(run_name, preset, seed, precision="fp32", epochs=2, planned=2, **columns):
    """Epoch rows of one run as `training_history.histories` gives them."""
    base = {"run": run_name, "preset": preset, "batching": "random", "seed": seed, "precision": precision,
            "architecture": "hooked", "length_bucketing": False, "planned_epochs": planned}  # fmt: skip
    return [{**base, "epoch": n, "val_acc_noncopy": 0.1 * n, **columns} for n in range(1, epochs + 1)]


def test_counted_histories_keeps_one_run_per_seed_by_the_tables_rule_a_finished_run_first():
    rows = history_rows("c0", "copy-20", 0) + history_rows("c0-bf16", "copy-20", 0, "bf16")
    rows += history_rows("c1", "copy-20", 1, epochs=1) + history_rows("c1-bf16", "copy-20", 1, "bf16")  # fp32 training
    rows += history_rows("c2", "copy-20", 2, epochs=1)  # still training, the seed's only run
    rows += history_rows("c200", "copy-200", 0) + history_rows("n0", "nocopy-20", 0)  # same seed, other presets
    rows += history_rows("x", "copy-20", None) + history_rows("y", "copy-20", None)  # no seed: each its own
    frame = counted_histories(pd.DataFrame(rows))
    assert frame.groupby("run", sort=False)["counted"].first().to_dict() == {
        "c0": True, "c0-bf16": False, "c1": False, "c1-bf16": True, "c2": True, "c200": True, "n0": True,
        "x": True, "y": True,
    }  # fmt: skip
    assert len(frame) == len(rows) and counted_histories(pd.DataFrame()).empty


def test_counted_histories_ranks_whichever_run_is_listed_first_and_ties_go_to_the_first_listed():
    """The recipe's run counts where it is listed after the other (fp32 after bf16, the reference's batches after
    length-bucketed ones, our model after the plain nn.Transformer); runs that tie count in their listed order, not
    by name."""
    rows = history_rows("b-bf16", "copy-20", 0, "bf16") + history_rows("b", "copy-20", 0)
    rows += history_rows("q-bucketed", "copy-20", 2, length_bucketing=True) + history_rows("q", "copy-20", 2)
    rows += history_rows("r-nn", "copy-20", 3, architecture="reference") + history_rows("r", "copy-20", 3)
    rows += history_rows("z", "copy-200", 1) + history_rows("a", "copy-200", 1)
    frame = counted_histories(pd.DataFrame(rows))
    assert frame.groupby("run", sort=False)["counted"].first().to_dict() == {
        "b-bf16": False, "b": True, "q-bucketed": False, "q": True, "r-nn": False, "r": True, "z": True, "a": False,
    }  # fmt: skip
    empty = counted_histories(pd.DataFrame(columns=["run", "epoch"]))
    assert empty.empty and empty["counted"].dtype == bool


def test_counted_histories_of_runs_without_seed_precision_or_plan_columns():
    """Histories with none of the ranked columns: a run without a seed counts on its own; two runs of a seed, the
    first listed."""
    bare = pd.DataFrame([{"run": r, "preset": "copy-20", "epoch": 1} for r in ("u", "v")])
    assert counted_histories(bare)["counted"].tolist() == [True, True]
    seeded = bare.assign(seed=0, batching="random")
    assert counted_histories(seeded)["counted"].tolist() == [True, False]


def test_figure3_counts_one_shot_copy_runs_of_alphabet_and_random_batching_beside_the_paper():
    rows = [
        run("copy-20", "random", 0, 90.0),
        run("copy-20", "random", 1, 92.0),
        run("copy-40", "alphabet", 0, 93.0),
        run("copy-20", "transformation", 0, 50.0),  # not a batching method of Figure 3
        run("nocopy-20", "random", 0, 60.0),  # no copy tasks
        run("copy-20-3shot", "alphabet", 0, 40.0, n_shots=3),  # more than one example
        run("copy-30", "random", 0, 95.0),  # a number of alphabets the paper did not train
        run("copy-40", "alphabet", 1, 10.0, complete=False),  # partial
    ]
    summary = alphabets_summary(pd.DataFrame(rows))
    assert summary[["n_alphabets", "batching", "n"]].values.tolist() == [[20, "random", 2], [40, "alphabet", 1]]
    assert summary[CELLS[0]].tolist() == [91.0, 93.0]
    for i, cell in enumerate(CELLS):
        assert summary[f"paper_{cell}"].tolist() == [
            PAPER_ALPHABETS[20]["random"][i],
            PAPER_ALPHABETS[40]["alphabet"][i],
        ]
    with_partial = alphabets_summary(pd.DataFrame(rows), include_partial=True)
    assert with_partial[CELLS[0]].tolist() == [91.0, 51.5]


def test_few_shot_counts_copy_20_runs_with_alphabet_batching_by_examples():
    rows = [
        run("copy-20", "alphabet", 0, 60.0),
        run("copy-20-2shot", "alphabet", 0, 50.0, n_shots=2),
        run("copy-20-2shot", "alphabet", 1, 54.0, n_shots=2),
        run("copy-20-3shot", "random", 0, 99.0, n_shots=3),  # random batching: not the paper's few-shot runs
        run("nocopy-20", "alphabet", 0, 99.0),  # no copy tasks
        run("copy-40", "alphabet", 0, 99.0),
        run("copy-20-4shot", "alphabet", 0, 20.0, n_shots=4, complete=False),
    ]
    summary = few_shot_summary(pd.DataFrame(rows))
    assert summary.columns.tolist()[:3] == ["n_shots", "n", "overall_seen_alphabets"]
    assert summary[["n_shots", "n", "overall_seen_alphabets"]].values.tolist() == [[1, 1, 30.0], [2, 2, 26.0]]
    assert summary["paper_overall_seen_alphabets"].tolist() == [PAPER_FEW_SHOT[1], PAPER_FEW_SHOT[2]]
    assert few_shot_summary(pd.DataFrame(rows), include_partial=True)["n_shots"].tolist() == [1, 2, 4]


def test_occurrence_counts_heads_per_batching_method_and_over_all_of_them():
    rows = [
        run("nocopy-20", "transformation", 0, 60.0, matching_head=False),
        run("nocopy-20", "random", 0, 60.0, matching_head=True),
        run("nocopy-20", "random", 1, 60.0, matching_head=False),
        run("nocopy-20", "alphabet", 0, 60.0),  # not analysed: left out
        run("nocopy-20", "alphabet", 1, 60.0, matching_head=True, complete=False),
        run("copy-20", "random", 0, 90.0, matching_head=True),
        run("copy-200", "alphabet", 0, 90.0, matching_head=True),  # not in the paper's occurrence table
    ]
    table = occurrence_summary(pd.DataFrame(rows))
    assert table.columns.tolist() == ["preset", "batching", "n", "with_head", "paper_with_head", "paper_n", "pooled"]
    by = table.set_index(["preset", "batching"])
    assert list(by.index) == [
        ("copy-20", "random"), ("copy-20", "all"), ("nocopy-20", "random"), ("nocopy-20", "transformation"),
        ("nocopy-20", "all"),
    ]  # fmt: skip
    assert by.loc[("nocopy-20", "random"), ["n", "with_head", "paper_with_head", "paper_n"]].tolist() == [2, 1, 1, 5]
    assert by.loc[("nocopy-20", "transformation"), ["n", "with_head", "paper_with_head", "paper_n"]].tolist() == [
        1,
        0,
        0,
        5,
    ]
    assert by.loc[("nocopy-20", "all"), ["n", "with_head", "paper_with_head", "paper_n"]].tolist() == [3, 1, 5, 20]
    assert by.loc[("copy-20", "all"), ["n", "with_head", "paper_with_head", "paper_n"]].tolist() == [1, 1, 20, 20]
    # "all" is over the methods analysed here: copy-20's is random batching only, the paper's all four
    assert by.loc[("copy-20", "all"), "pooled"] == "random" and by.loc[("nocopy-20", "random"), "pooled"] == "random"
    assert by.loc[("nocopy-20", "all"), "pooled"] == "random, transformation"
    assert math.isnan(by.loc[("copy-20", "random"), "paper_n"]) and math.isnan(
        by.loc[("copy-20", "random"), "paper_with_head"]
    )
    partial = occurrence_summary(pd.DataFrame(rows), include_partial=True).set_index(["preset", "batching"])
    assert partial.loc[("nocopy-20", "alphabet"), ["n", "with_head"]].tolist() == [1, 1]
    empty = occurrence_summary(pd.DataFrame([run("copy-20", "random", 0, 90.0)]).drop(columns="matching_head"))
    assert empty.empty and empty.columns.tolist() == table.columns.tolist()


def test_of_a_seeds_equally_ranked_runs_the_first_counts_however_many_there_are():
    rows = [run("copy-20", "random", seed % 40, float(seed)) for seed in range(80)]  # seeds 0-39 twice, in fp32
    counted = counted_runs(pd.DataFrame(rows))
    assert counted[CELLS[0]].tolist() == [float(seed) for seed in range(40)]


def test_complete_runs_leaves_out_partial_runs_unless_asked():
    frame = pd.DataFrame([run("copy-20", "random", 0, 90.0), run("copy-20", "random", 1, 80.0, complete=False)])
    assert complete_runs(frame)[CELLS[0]].tolist() == [90.0]
    assert complete_runs(frame, include_partial=True)[CELLS[0]].tolist() == [90.0, 80.0]


def test_the_precision_check_counts_each_seed_once_per_precision():
    """A seed trained twice in one precision (here copy-200 seed 0: the CPU run and the length-bucketed H100 run)
    is one sample: the run closest to the recipe counts, as in `counted_runs`, and the spread is between seeds."""
    rows = [
        run("copy-200", "alphabet", 0, 84.0, length_bucketing=True, architecture="hooked"),
        run("copy-200", "alphabet", 0, 87.0, length_bucketing=False, architecture="hooked"),
        run("copy-200", "alphabet", 0, 80.0, length_bucketing=False, architecture="reference"),
        run("copy-200", "alphabet", 1, 89.0, length_bucketing=False, architecture="hooked"),
        run("copy-200", "alphabet", 1, 70.0, precision="bf16", length_bucketing=False, architecture="hooked"),
        run("copy-200", "alphabet", 1, 71.0, precision="bf16", length_bucketing=True, architecture="hooked"),
    ]
    check = precision_summary(pd.DataFrame(rows)).set_index("precision")
    assert check["n"].to_dict() == {"bf16": 1, "fp32": 2}
    assert check.loc["fp32", "mean"] == pytest.approx(88.0)  # seeds 0 (87.0, not bucketed, hooked) and 1
    assert check.loc["fp32", "sd"] == pytest.approx(np.std([87.0, 89.0], ddof=1))
    assert check.loc["bf16", "mean"] == pytest.approx(70.0)


def test_counted_runs_keeps_one_run_per_seed_and_every_run_without_precisions():
    rows = [run("copy-20", "random", 0, 90.0, precision="bf16"), run("copy-20", "random", 0, 91.0),
            run("copy-20", "random", 1, 92.0, complete=False)]  # fmt: skip
    frame = pd.DataFrame(rows)
    assert counted_runs(frame)[CELLS[0]].tolist() == [91.0]
    assert counted_runs(frame, include_partial=True)[CELLS[0]].tolist() == [91.0, 92.0]
    assert counted_runs(frame.drop(columns="precision"))[CELLS[0]].tolist() == [90.0, 91.0]
