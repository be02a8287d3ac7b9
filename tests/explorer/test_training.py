"""The training tab: every curve of the history in its own colour; the run table tells a seed's runs apart and
marks the runs its means count."""

from __future__ import annotations

import pandas as pd

from lsa_interp.data.transformations import NEW, SEEN
from lsa_interp.evaluation.paper_tables import CELLS
from lsa_interp.explorer.training import LOSS_CURVES, SUMMARY_CURVES, grid_tables, history_figure


def test_every_accuracy_curve_has_a_colour_of_its_own():
    """The seen and new transformations' panels hold 19 curves beside 5 summary ones; on plotly's 10-colour cycle
    a seen and a new transformation shared a colour in the one legend."""
    columns = [*SUMMARY_CURVES, "matching_score", *(f"acc_{rule}" for rule in (*SEEN, *NEW)), *LOSS_CURVES]
    history = pd.DataFrame({"epoch": [1, 2], **{column: [0.5, 0.6] for column in columns}})
    fig = history_figure(history, "t")
    accuracy = [trace for trace in fig.data if trace.line.color != "black"]
    assert len(accuracy) == len(SUMMARY_CURVES) + len(SEEN) + len(NEW) == 24
    assert len({trace.line.color for trace in accuracy}) == len(accuracy) and all(t.line.color for t in accuracy)
    black = [(trace.name, trace.line.dash) for trace in fig.data if trace.line.color == "black"]
    assert black == [("matching-head score (x100)", "dash"), (LOSS_CURVES["train_loss"], "solid"),
                     (LOSS_CURVES["val_loss"], "dot")]  # fmt: skip


def _run(name: str, preset: str, batching: str, seed: int, precision: str, bucketed: bool, acc: float) -> dict:
    return {
        "run": name, "preset": preset, "batching": batching, "condition": f"{preset}/{batching}", "seed": seed,
        "precision": precision, "length_bucketing": bucketed, "architecture": "hooked", "epochs": 20.0,
        "epochs_planned": 20, "complete": True, **dict.fromkeys(CELLS, 0.0), CELLS[0]: acc,
    }  # fmt: skip


def test_the_run_table_names_each_run_and_marks_the_one_run_per_seed_the_means_count():
    """As in the shipped grid: copy-20 seed 0 trained in fp32 and in bf16, copy-200 seed 0 with and without length
    bucketing. The rows showed the same condition and seed; the means count one of each (the recipe's)."""
    rows = [
        _run("checkpoints/copy-20", "copy-20", "random", 0, "fp32", False, 96.5),
        _run("replicates/copy-20-s0-bf16", "copy-20", "random", 0, "bf16", False, 93.0),
        *(_run(f"replicates/copy-20-s{s}-bf16", "copy-20", "random", s, "bf16", False, 90.0) for s in range(1, 5)),
        _run("runs/copy-200-bucketed", "copy-200", "alphabet", 0, "fp32", True, 85.5),
        _run("checkpoints/copy-200", "copy-200", "alphabet", 0, "fp32", False, 87.3),
    ]
    runs = pd.DataFrame(rows).assign(counted=True)  # a stale mark (results --include-partial) is recomputed
    tables = grid_tables(runs)
    shown = tables["runs"]
    assert list(shown.columns[:9]) == [
        "run", "condition", "seed", "precision", "length-bucketed", "epochs", "epochs_planned", "complete", "counted"
    ]  # fmt: skip
    assert shown["run"].tolist() == runs["run"].tolist()
    assert shown.loc[:1, "precision"].tolist() == ["fp32", "bf16"]
    assert shown.loc[6:, "length-bucketed"].tolist() == [True, False]
    assert shown["counted"].tolist() == [True, False, True, True, True, True, False, True]
    table1 = tables["Table 1"].set_index("preset")
    assert table1.loc["copy-20", "runs"] == 5 and table1.loc["copy-200", "runs"] == 1
    assert table1.loc["copy-20", "seenT/seenA"].startswith(f"{(96.5 + 4 * 90.0) / 5:.1f} [")
    assert table1.loc["copy-200", "seenT/seenA"] == "87.3"
