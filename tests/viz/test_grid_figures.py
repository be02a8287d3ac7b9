"""The training-curves figure of `lsa-interp results --history`: one mean per preset, over one run per seed."""

from __future__ import annotations

import pandas as pd
import pytest

from lsa_interp.viz.grid_figures import _preset_colours, _still_training, training_curves_figure


def curve(run, preset, seed, accuracy, precision="fp32", batching="random", epochs=2):
    """Epoch rows of one finished run as `lsa_interp.evaluation.training_history.histories` gives them."""
    base = {"run": run, "preset": preset, "batching": batching, "seed": seed, "precision": precision,
            "architecture": "hooked", "length_bucketing": False, "planned_epochs": epochs}  # fmt: skip
    return [{**base, "epoch": n, "val_acc_noncopy": accuracy * n} for n in range(1, epochs + 1)]


def test_each_preset_has_its_own_mean_over_one_run_per_seed_and_the_legend_says_how_many():
    """copy-200 (another dataset) is not pooled with copy-20, and copy-20's seed 0, trained in fp32 and bf16,
    counts once (its fp32 run, as in the tables); the bf16 run is left out and named in the title."""
    rows = curve("c20-s0", "copy-20", 0, 0.40) + curve("c20-s0-bf16", "copy-20", 0, 0.10, precision="bf16")
    rows += curve("c20-s1-bf16", "copy-20", 1, 0.30, precision="bf16")
    rows += curve("c200-s0", "copy-200", 0, 0.45, batching="alphabet") + curve("n20-s0", "nocopy-20", 0, 0.20)
    figure = training_curves_figure(pd.DataFrame(rows))
    means = {t.name: list(t.y) for t in figure.data if t.showlegend}
    assert means == {
        "copy-20 (random): mean of 2 runs, one per seed (1 bf16, 1 fp32)": pytest.approx([35.0, 70.0]),
        "nocopy-20 (random): mean of 1 run, one per seed (1 fp32)": pytest.approx([20.0, 40.0]),
        "copy-200 (alphabet): mean of 1 run, one per seed (1 fp32)": pytest.approx([45.0, 90.0]),
    }
    runs = [t.name for t in figure.data if not t.showlegend]
    assert runs == ["c20-s0", "c20-s1-bf16", "n20-s0", "c200-s0"]  # copy-20 and nocopy-20 first
    assert "left out: c20-s0-bf16 (another run of the seed counts" in figure.layout.title.text
    assert figure.layout.title.text.startswith("Training by preset: copy-20 against nocopy-20")


def test_still_training_names_the_epoch_reached_of_those_planned_and_nothing_without_a_plan():
    frame = pd.DataFrame({"run": ["a", "a", "b"], "epoch": [1, 2, 1]})
    assert _still_training(frame).to_dict() == {"a": "", "b": ""}
    planned = _still_training(frame.assign(planned_epochs=[2, 2, 3]))
    assert planned.to_dict() == {"a": "", "b": " (training: epoch 1 of 3)"}


def test_presets_are_ordered_copy_20_and_nocopy_20_first_and_the_other_presets_cycle_through_six_colours():
    presets = pd.Series(["x7", "copy-200", "nocopy-20", "x1", "x2", "x3", "x4", "x5", "x6", "copy-20", "x1"])
    order, colours = _preset_colours(presets)
    assert order == ["copy-20", "nocopy-20", "copy-200", "x1", "x2", "x3", "x4", "x5", "x6", "x7"]
    assert [colours[p] for p in order] == [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd",
    ]  # fmt: skip
    assert _preset_colours(pd.Series(["copy-40"])) == (["copy-40"], {"copy-40": "#9467bd"})
