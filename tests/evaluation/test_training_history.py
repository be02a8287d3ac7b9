"""Per-epoch histories of single and stacked runs, the training-curves figure by preset and the precision check's
curves."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from lsa_interp.evaluation.training_history import (
    epoch_history,
    histories,
    matched_epoch,
    our_runs,
    precision_by_epoch,
    training_runs,
)
from lsa_interp.viz.grid_figures import precision_curves_figure, training_curves_figure


def write_run(path, config, records):
    path.mkdir(parents=True)
    (path / "train_config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def epoch(replicate, n, acc, score=None, **extra):
    record = {"type": "epoch", "step": 100 * n, "epoch": n, "val_acc_noncopy": acc, "replicate": replicate}
    record["val_acc_by_transformation"] = {"succ": acc / 2}
    return {**record, **({} if score is None else {"matching_score": score}), **extra}


def test_a_stack_names_each_replicate_by_its_run_and_ignores_step_records(tmp_path):
    stack = {"runs": [
        {"data_dir": "d", "seed": 0, "batching": "random", "preset": "copy-20", "name": "copy-20-random-s0"},
        {"data_dir": "e", "seed": 1, "batching": "alphabet", "preset": "nocopy-20", "name": "nocopy-20-alphabet-s1"},
    ]}  # fmt: skip
    records = [{"type": "step", "step": 50}, epoch(0, 1, 0.5, 0.9), epoch(1, 1, 0.4, 0.1), epoch(0, 2, 0.7, 1.2)]
    frame = epoch_history(write_run(tmp_path / "stack", stack, records))
    assert frame[["run", "preset", "batching", "epoch"]].values.tolist() == [
        ["copy-20-random-s0", "copy-20", "random", 1],
        ["nocopy-20-alphabet-s1", "nocopy-20", "alphabet", 1],
        ["copy-20-random-s0", "copy-20", "random", 2],
    ]
    assert frame["acc_succ"].tolist() == pytest.approx([0.25, 0.2, 0.35])


def test_a_config_that_names_its_length_bucketing_gives_it_and_a_stacks_run_without_a_seed_none(tmp_path):
    single = write_run(tmp_path / "single", {"preset": "copy-20", "seed": 2, "batching": "random",
                                             "length_bucketing": False}, [epoch(0, 1, 0.3)])  # fmt: skip
    assert epoch_history(single)[["seed", "length_bucketing"]].values.tolist() == [[2, False]]
    stack = write_run(tmp_path / "stack", {"runs": [{"data_dir": "d", "batching": "random", "preset": "copy-20",
                                                     "name": "c"}], "length_bucketing": True},
                      [epoch(0, 1, 0.6)])  # fmt: skip
    assert epoch_history(stack)[["seed", "length_bucketing"]].values.tolist() == [[None, True]]
    with pytest.raises(ValueError, match="length_bucketing"):
        epoch_history(
            write_run(tmp_path / "wrong", {"preset": "copy-20", "length_bucketing": "no"}, [epoch(0, 1, 0.3)])
        )


def test_a_single_run_gets_its_preset_and_seed_and_the_figure_draws_both_presets(tmp_path):
    siblings = {"val_sibling_by_family": {"window": 0.4, "doubled": 0.5}}
    single = write_run(tmp_path / "single", {"preset": "nocopy-20", "seed": 4, "batching": "random"},
                       [epoch(0, 1, 0.3), epoch(0, 2, 0.5, **siblings)])  # fmt: skip
    stack = write_run(tmp_path / "stack", {"runs": [{"data_dir": "d", "seed": 0, "batching": "random",
                                                     "preset": "copy-20", "name": "c"}]},
                      [epoch(0, 1, 0.6, 0.8)])  # fmt: skip
    frame = histories([single, stack])
    assert sorted(frame["run"]) == ["c", "nocopy-20-random-s4", "nocopy-20-random-s4"]
    assert frame.groupby("run")["seed"].first().to_dict() == {"c": 0, "nocopy-20-random-s4": 4}
    assert frame["length_bucketing"].tolist() == [True, True, True]  # configs from before the option
    figure = training_curves_figure(frame)
    means = [trace.name for trace in figure.data if "mean of" in trace.name]
    copy, no_copy = (f"{p} (random): mean of 1 run, one per seed (1 fp32)" for p in ("copy-20", "nocopy-20"))
    assert means == [copy, copy, no_copy, no_copy]  # accuracy and matching score; accuracy and sibling answers
    no_copy_mean = next(t for t in figure.data if t.name == no_copy)
    assert list(no_copy_mean.y) == pytest.approx([30.0, 50.0])
    single_rows = frame[frame["run"] == "nocopy-20-random-s4"]
    assert single_rows["sibling_doubled"].tolist()[1] == 0.5 and single_rows["sibling_window"].isna().tolist() == [
        True,
        False,
    ]
    sibling_panel = [t for t in figure.data if t.yaxis == "y3"]
    assert [list(t.y)[-1] for t in sibling_panel] == pytest.approx([40.0, 40.0])  # the run and its group's mean


def test_the_precision_figure_draws_each_condition_trained_in_two_precisions_with_a_mean_per_precision(tmp_path):
    def seen(replicate, n, acc):
        return epoch(replicate, n, acc, val_acc_seen_transformations=acc)

    runs = [{"data_dir": "d", "seed": s, "batching": "random", "preset": "copy-20", "name": f"c{s}"} for s in (1, 2)]
    bf16 = write_run(tmp_path / "bf16", {"runs": runs, "precision": "bf16"},
                     [seen(0, 1, 0.5), seen(1, 1, 0.7), seen(0, 2, 0.8), seen(1, 2, 0.9)])  # fmt: skip
    fp32 = write_run(tmp_path / "fp32", {"preset": "copy-20", "seed": 0, "batching": "random"}, [seen(0, 1, 0.4)])
    write_run(tmp_path / "longer", {"preset": "copy-20", "seed": 3, "batching": "random"},
              [seen(0, 1, 0.6), seen(0, 2, 0.9)])  # fmt: skip
    nocopy = write_run(tmp_path / "nocopy", {"preset": "nocopy-20", "seed": 0, "batching": "random"}, [seen(0, 1, 0.3)])
    frame = histories([bf16, fp32, tmp_path / "longer", nocopy])
    assert frame.groupby("run")["precision"].first().to_dict() == {
        "c1": "bf16", "c2": "bf16", "copy-20-random-s0": "fp32", "copy-20-random-s3": "fp32",
        "nocopy-20-random-s0": "fp32",
    }  # fmt: skip
    figure = precision_curves_figure(frame)  # no step records: no loss panel
    assert [a.text for a in figure.layout.annotations] == ["copy-20 / random: seen-transformation validation accuracy"]
    means = {trace.name: list(trace.y) for trace in figure.data if "mean" in trace.name}
    # fp32's mean stops where its shorter run does, not at the one run left (90%)
    assert means == {"bf16 (mean of 2)": pytest.approx([60.0, 85.0]), "fp32 (mean of 2)": pytest.approx([50.0])}
    assert precision_curves_figure(histories([fp32, nocopy])) is None
    assert precision_curves_figure(frame.drop(columns="val_acc_seen_transformations")) is None


def test_each_epoch_gets_the_mean_of_its_models_logged_window_losses(tmp_path):
    def step(n, *losses):  # as a stack logs it: None for a replicate that has finished
        trained = [x for x in losses if x is not None]
        return {"type": "step", "step": n, "train_loss": sum(trained) / len(trained), "train_loss_by_replicate": losses}

    def seen(replicate, n):
        return epoch(replicate, n, 0.5, val_acc_seen_transformations=0.5)

    runs = [{"data_dir": "d", "seed": s, "batching": "random", "preset": "copy-20", "name": f"c{s}"} for s in (0, 1)]
    records = [
        step(50, 4.0, 8.0), step(100, 2.0, 6.0), seen(0, 1), seen(1, 1),
        step(150, 1.0, 3.0), step(200, 9.0, 9.0), step(150, 0.5, 1.0), step(200, 0.25, 2.0),  # resumed from step 100
        seen(0, 2), seen(1, 2), step(250, 0.1, None), seen(0, 3),  # replicate 1 has finished
    ]  # fmt: skip
    frame = epoch_history(write_run(tmp_path / "stack", {"runs": runs}, records))
    losses = frame.pivot(index="epoch", columns="run", values="train_loss")
    assert losses["c0"].tolist() == pytest.approx([3.0, 0.375, 0.1])
    assert losses["c1"].tolist()[:2] == pytest.approx([7.0, 1.5])
    config = {"preset": "copy-20", "seed": 0, "batching": "random", "precision": "bf16"}
    single = write_run(tmp_path / "single", config, [{"type": "step", "step": 100, "train_loss": 0.5}, seen(0, 1),
                                                     seen(0, 2)])  # fmt: skip
    assert epoch_history(single)["train_loss"].tolist()[0] == 0.5
    assert epoch_history(single)["train_loss"].isna().tolist() == [False, True]  # no window ended in epoch 2
    figure = precision_curves_figure(histories([tmp_path / "stack", single]))
    assert [a.text for a in figure.layout.annotations] == [
        "copy-20 / random: seen-transformation validation accuracy",
        "copy-20 / random: training loss, mean of the epoch",
    ]
    loss_means = {t.name: list(t.y) for t in figure.data if "mean" in t.name and t.xaxis == "x2"}
    # fp32's mean stops where its shorter run (c1) does
    assert loss_means == {"bf16 (mean of 1)": [0.5], "fp32 (mean of 2)": pytest.approx([5.0, 0.9375])}
    assert figure.layout.yaxis2.type == "log" and figure.layout.yaxis.type == "linear"


def test_a_directory_that_is_no_run_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a training run"):
        epoch_history(tmp_path)
    (tmp_path / "notes").mkdir()
    with pytest.raises(FileNotFoundError, match="not a training run and holds none"):
        histories([tmp_path])


def test_a_directory_of_runs_gives_every_run_below_it(tmp_path):
    config = {"preset": "copy-20", "seed": 0, "batching": "random"}
    write_run(tmp_path / "records" / "cpu" / "b", {**config, "seed": 1}, [epoch(0, 1, 0.5)])
    write_run(tmp_path / "records" / "a" / "stacks" / "stack-000", config, [epoch(0, 1, 0.7)])
    (tmp_path / "records" / "a" / "grid.toml").write_text("")
    runs = training_runs(tmp_path / "records")
    assert runs == [tmp_path / "records" / "a" / "stacks" / "stack-000", tmp_path / "records" / "cpu" / "b"]
    assert training_runs(runs[1]) == [runs[1]]
    frame = histories([tmp_path / "records", runs[1]])  # a run found twice is read once
    assert frame["run"].tolist() == ["copy-20-random-s0", "copy-20-random-s1"]


def test_a_single_runs_config_names_its_replicates_from_its_seed_with_the_defaults_of_a_plain_run(tmp_path):
    frame = epoch_history(write_run(tmp_path / "bare", {}, [epoch(0, 1, 0.5)]))
    assert frame[["run", "preset", "batching", "precision"]].values.tolist() == [
        ["data-random-s0", None, "random", "fp32"]
    ]
    config = {"preset": "copy-20", "seed": 3, "replicates": 2, "batching": "alphabet"}
    frame = epoch_history(write_run(tmp_path / "two", config, [epoch(0, 1, 0.5), epoch(1, 1, 0.6)]))
    assert frame["run"].tolist() == ["copy-20-alphabet-s3", "copy-20-alphabet-s4"]
    assert frame["replicate"].tolist() == [0, 1] and frame["seed"].tolist() == [3, 4]


def test_a_stacks_run_without_a_name_is_named_by_its_replicate(tmp_path):
    runs = [{"data_dir": "d", "seed": 5, "batching": "random", "preset": "copy-20"}] * 2
    frame = epoch_history(write_run(tmp_path / "stack", {"runs": runs}, [epoch(0, 1, 0.5), epoch(1, 1, 0.6)]))
    assert frame["run"].tolist() == ["replicate-0", "replicate-1"]


def test_an_epoch_record_keeps_its_own_run_name_and_scalars_but_not_its_type_or_nested_records(tmp_path):
    records = [epoch(0, 1, 0.5, run="named-by-the-record"), epoch(3, 1, 0.4)]  # replicate 3: past the config's one
    frame = epoch_history(write_run(tmp_path / "run", {"preset": "copy-20"}, records))
    assert frame["run"].tolist() == ["named-by-the-record", "replicate-3"]
    assert frame["replicate"].tolist() == [0, 3] and frame["preset"].isna().tolist() == [False, True]
    assert "type" not in frame and "val_acc_by_transformation" not in frame and frame["epoch"].tolist() == [1, 1]


def test_window_losses_reach_replicates_past_the_configs_and_the_first_epoch_counts_from_step_1(tmp_path):
    records = [
        {"type": "step", "step": 1, "train_loss": 9.0, "train_loss_by_replicate": [9.0, 5.0, 7.0]},
        epoch(0, 1, 0.5), epoch(2, 1, 0.5),
        {"type": "epoch", "epoch": 2, "val_acc_noncopy": 0.6, "replicate": 0},  # no step: no window is its own
    ]  # fmt: skip
    frame = epoch_history(write_run(tmp_path / "run", {"preset": "copy-20"}, records))
    assert frame["replicate"].tolist() == [0, 2, 0]
    assert frame["train_loss"].tolist()[:2] == [9.0, 7.0] and frame["train_loss"].isna().tolist()[2]


def test_only_step_records_are_loss_windows_though_another_record_carries_a_train_loss(tmp_path):
    """An epoch record with a ``train_loss`` of its own (an epoch's mean, say) is no 100-step window: epoch 1's
    loss stays the mean of its one window, 2.0, not (2.0 + 5.0) / 2."""
    records = [
        {"type": "step", "step": 50, "train_loss": 2.0},
        {"type": "epoch", "step": 100, "epoch": 1, "val_acc_noncopy": 0.5, "train_loss": 5.0},
    ]
    frame = epoch_history(write_run(tmp_path / "run", {"preset": "copy-20", "seed": 0}, records))
    assert frame["train_loss"].tolist() == [2.0]


def test_the_runs_a_precision_check_compares_need_the_architecture_and_the_measure_and_nothing_else():
    """`our_runs`: the rows on our model with the measure logged, from a frame of just those two columns; no rows
    from a frame without either of them."""
    column = "val_acc_seen_transformations"
    bare = pd.DataFrame({"architecture": ["hooked", "reference", "hooked"], column: [0.5, 0.6, None]})
    assert our_runs(bare, column)[column].tolist() == [0.5]
    for missing in ("architecture", column):
        assert our_runs(bare.drop(columns=missing), column).empty


def test_a_run_without_metrics_has_no_history_and_histories_number_their_rows_afresh(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "train_config.json").write_text(json.dumps({"preset": "copy-20"}))
    assert epoch_history(bare).empty and histories([bare]).empty
    write_run(tmp_path / "a", {"preset": "copy-20", "seed": 0}, [epoch(0, 1, 0.5), epoch(0, 2, 0.6)])
    write_run(tmp_path / "b", {"preset": "copy-20", "seed": 1}, [epoch(0, 1, 0.7)])
    frame = histories([tmp_path / "a", tmp_path / "b", bare])
    assert frame.index.tolist() == [0, 1, 2] and frame["run"].tolist()[2] == "copy-20-random-s1"


def test_a_plain_runs_records_carry_no_replicate_and_one_past_its_single_model_is_named_by_its_index(tmp_path):
    records = [
        {"type": "step", "step": 50, "train_loss": 2.0},
        {"type": "epoch", "step": 100, "epoch": 1, "val_acc_noncopy": 0.5},  # as a single run's trainer logs it
        epoch(1, 1, 0.4),
    ]
    frame = epoch_history(write_run(tmp_path / "run", {"preset": "copy-20", "seed": 2}, records))
    assert frame["run"].tolist() == ["copy-20-random-s2", "replicate-1"] and frame["replicate"].tolist() == [0, 1]
    assert frame["train_loss"].tolist()[0] == 2.0 and frame["train_loss"].isna().tolist() == [False, True]


def test_runs_of_one_name_in_two_directories_stay_two_runs_and_the_mean_stops_at_the_shorter(tmp_path):
    """The same preset, batching and seed trained on two machines (or on the plain nn.Transformer) are two
    models: each gets its directory in brackets, and the group's mean ends at the last epoch both reached."""
    config = {"preset": "copy-20", "seed": 1, "batching": "random"}
    cpu = write_run(tmp_path / "cpu" / "copy-20-random-s1", config, [epoch(0, n, 0.1 * n) for n in (1, 2, 3)])
    gpu = write_run(tmp_path / "gpu" / "stack-000", config, [epoch(0, n, 0.2 * n) for n in (1, 2)])
    other = write_run(tmp_path / "gpu" / "stack-001", {**config, "seed": 2}, [epoch(0, n, 0.3 * n) for n in (1, 2)])
    frame = histories([cpu, gpu, other])
    assert frame["run_dir"].tolist() == [str(cpu.resolve())] * 3 + [str(gpu.resolve())] * 2 + [str(other.resolve())] * 2
    assert (
        frame["run"].tolist()
        == [f"copy-20-random-s1 [{cpu.resolve()}]"] * 3
        + [f"copy-20-random-s1 [{gpu.resolve()}]"] * 2
        + ["copy-20-random-s2"] * 2
    )
    figure = training_curves_figure(frame)  # seed 1 counts once, as in the tables: its first run, on the CPU
    mean = next(t for t in figure.data if t.name == "copy-20 (random): mean of 2 runs, one per seed (2 fp32)")
    assert list(mean.x) == [1, 2] and list(mean.y) == pytest.approx([20.0, 40.0])  # (0.1 n + 0.3 n) / 2
    assert f"left out: copy-20-random-s1 [{gpu.resolve()}] (another run of the seed counts" in figure.layout.title.text


def test_a_config_is_read_as_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    """A run's name outside ASCII, written by another tool without escapes, reads back on a machine whose locale's
    encoding is not UTF-8."""
    stack = {"runs": [{"data_dir": "/données", "seed": 0, "batching": "random", "preset": "copy-20", "name": "zoë"}]}
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text(json.dumps(stack, ensure_ascii=False), encoding="utf-8")
    (run / "metrics.jsonl").write_text(json.dumps(epoch(0, 1, 0.5)) + "\n", encoding="utf-8")
    assert epoch_history(run)["run"].tolist() == ["zoë"]


def test_a_run_still_training_is_drawn_dotted_and_left_out_of_the_mean_of_the_finished_ones(tmp_path):
    """A seed still training beside finished ones (a CPU run's committed snapshot) would cut the mean short at its
    last epoch; the mean is over the runs that finished their planned epochs, and the other is drawn on its own."""

    def seen(n, acc):
        return epoch(0, n, acc, val_acc_seen_transformations=acc, matching_score=acc / 2)

    config = {"preset": "copy-20", "batching": "random", "epochs": 3}
    done = write_run(tmp_path / "s0", {**config, "seed": 0}, [seen(n, 0.2 * n) for n in (1, 2, 3)])
    training = write_run(tmp_path / "s1", {**config, "seed": 1}, [seen(1, 0.6)])
    bf16 = write_run(tmp_path / "bf16", {**config, "seed": 2, "precision": "bf16"}, [seen(n, 0.1 * n) for n in (1, 2)])
    frame = histories([done, training, bf16])
    assert frame.groupby("run")["planned_epochs"].first().tolist() == [3, 3, 3]
    figure = training_curves_figure(frame)
    accuracy = {t.name: (list(t.x), list(t.y), t.line.dash) for t in figure.data if t.yaxis == "y"}
    mean = "copy-20 (random): mean of 1 run, one per seed (1 fp32)"
    assert accuracy[mean] == ([1, 2, 3], pytest.approx([20.0, 40.0, 60.0]), None)
    assert accuracy["copy-20-random-s1 (training: epoch 1 of 3)"] == ([1], [60.0], "dot")
    assert accuracy["copy-20-random-s0"][2] == "solid"
    matching = next(t for t in figure.data if t.yaxis == "y2" and t.name == mean)
    assert list(matching.y) == pytest.approx([0.1, 0.2, 0.3])
    precision = precision_curves_figure(frame)
    means = {t.name: list(t.y) for t in precision.data if "mean" in t.name}
    # bf16 has no finished run (2 of 3 epochs): its mean is over the runs it has, as before
    assert means == {"bf16 (mean of 1)": pytest.approx([10.0, 20.0]), "fp32 (mean of 1)": pytest.approx([20, 40, 60])}
    names = [t.name for t in precision.data if "mean" not in t.name]
    assert names == ["copy-20-random-s2 (training: epoch 2 of 3)", "copy-20-random-s0",
                     "copy-20-random-s1 (training: epoch 1 of 3)"]  # fmt: skip


def test_a_run_on_the_plain_nn_transformer_has_its_architecture_in_its_name(tmp_path):
    config = {"preset": "copy-200", "seed": 1, "batching": "alphabet", "architecture": "reference", "epochs": 20}
    frame = epoch_history(write_run(tmp_path / "reference", config, [epoch(0, 1, 0.5)]))
    assert frame[["run", "planned_epochs"]].values.tolist() == [["copy-200-alphabet-reference-s1", 20]]
    ours = epoch_history(write_run(tmp_path / "hooked", {**config, "architecture": "hooked"}, [epoch(0, 1, 0.5)]))
    assert ours["run"].tolist() == ["copy-200-alphabet-s1"]


def test_the_precision_check_over_training_counts_every_run_that_reached_each_epoch(tmp_path):
    """Per epoch and precision: the runs of our model that reached it (one still training included), their mean, sample
    sd, lowest and highest in %; a condition in one precision and a run on the plain nn.Transformer are left out. The
    matched epoch is the last that two runs of each precision reached (fp32's second run still trains)."""

    def seen(n, acc):
        return epoch(0, n, acc, val_acc_seen_transformations=acc)

    config = {"preset": "copy-20", "batching": "random", "epochs": 3}
    write_run(tmp_path / "f0", {**config, "seed": 0}, [seen(1, 0.5), seen(2, 0.7), seen(3, 0.9)])
    write_run(tmp_path / "f1", {**config, "seed": 1}, [seen(1, 0.3), seen(2, 0.5)])  # still training
    write_run(tmp_path / "b", {"runs": [{"data_dir": "d", "seed": s, "batching": "random", "preset": "copy-20",
                                         "name": f"b{s}", "epochs": 3} for s in (0, 1)], "precision": "bf16"},
              [epoch(r, n, 0.2 * n + 0.1 * r, val_acc_seen_transformations=0.2 * n + 0.1 * r)
               for n in (1, 2, 3) for r in (0, 1)])  # fmt: skip
    write_run(tmp_path / "nn", {**config, "seed": 2, "architecture": "reference"}, [seen(1, 0.0)])  # stopped early
    write_run(tmp_path / "other", {"preset": "copy-200", "batching": "alphabet", "seed": 0}, [seen(1, 0.4)])
    history = histories([tmp_path])
    table = precision_by_epoch(history)
    assert list(table) == ["preset", "batching", "epoch", "precision", "runs", "mean", "sd", "low", "high"]
    rows = table.set_index(["epoch", "precision"])
    assert rows.loc[(2, "fp32"), ["runs", "mean", "low", "high"]].tolist() == pytest.approx([2, 60.0, 50.0, 70.0])
    assert rows.loc[(2, "fp32"), "sd"] == pytest.approx(100 * 0.2 / 2**0.5)  # sample sd of 0.5 and 0.7
    assert rows.loc[(3, "fp32"), "runs"] == 1 and math.isnan(rows.loc[(3, "fp32"), "sd"])
    assert rows.loc[(3, "bf16"), ["runs", "mean", "low", "high"]].tolist() == pytest.approx([2, 65.0, 60.0, 70.0])
    assert set(table["preset"]) == {"copy-20"} and len(table) == 6
    matched = matched_epoch(table, history)  # the nn.Transformer run, left out of the table, does not hold it at 1
    assert matched[["epoch", "precision", "runs"]].values.tolist() == [[2, "bf16", 2], [2, "fp32", 2]]
    drawn = {trace.name for trace in precision_curves_figure(history).data}
    assert "copy-20-random-s0" in drawn and not any("reference" in name for name in drawn)
    assert "fp32 (mean of 1)" in drawn  # the finished fp32 run only: s1 still trains, the reference run is not ours
    assert precision_by_epoch(histories([tmp_path / "f0", tmp_path / "other"])).empty
    assert matched_epoch(precision_by_epoch(history.iloc[:0]), history).empty


def test_a_young_run_started_since_does_not_pull_the_matched_epoch_back_to_its_first(tmp_path):
    """fp32 seeds 0 and 1 reached epoch 3 and seed 4 only epoch 1, bf16 seeds 0 and 1 epoch 3: the comparison stays
    at epoch 3, with the two fp32 runs there; once a precision's second run is the young one, the epoch follows it."""

    def seen(replicate, n, acc):
        return epoch(replicate, n, acc, val_acc_seen_transformations=acc)

    config = {"preset": "copy-20", "batching": "random", "epochs": 3}
    for seed, last in ((0, 3), (1, 3), (4, 1)):
        write_run(tmp_path / f"f{seed}", {**config, "seed": seed}, [seen(0, n, 0.1 * n) for n in range(1, last + 1)])
    for seed in (0, 1):
        records = [seen(0, n, 0.1 * n + 0.05) for n in (1, 2, 3)]
        write_run(tmp_path / f"b{seed}", {**config, "seed": seed, "precision": "bf16"}, records)
    history = histories([tmp_path])
    matched = matched_epoch(precision_by_epoch(history), history)
    assert matched[["epoch", "precision", "runs"]].values.tolist() == [[3, "bf16", 2], [3, "fp32", 2]]
    history = histories([tmp_path / name for name in ("f0", "f4", "b0", "b1")])  # fp32: seeds 0 and the young 4
    matched = matched_epoch(precision_by_epoch(history), history)
    assert matched[["epoch", "precision", "runs"]].values.tolist() == [[1, "bf16", 2], [1, "fp32", 2]]


def test_results_prints_the_precision_check_over_training_and_writes_every_epoch(tmp_path, capsys):
    """`lsa-interp results --history`: precision_history.csv per epoch and precision, and the table at the matched
    epoch with each precision's difference from fp32."""
    from lsa_interp import cli
    from tests.evaluation.test_runs_table import make_run

    def seen(replicate, n, acc):
        return epoch(replicate, n, acc, val_acc_seen_transformations=acc)

    make_run(tmp_path / "runs", "a", "copy-20", "random", 0, 95.0)
    config = {"preset": "copy-20", "batching": "random", "epochs": 2}
    write_run(tmp_path / "h" / "f0", {**config, "seed": 0}, [seen(0, 1, 0.50), seen(0, 2, 0.80)])
    write_run(tmp_path / "h" / "b0", {**config, "seed": 0, "precision": "bf16"}, [seen(0, 1, 0.40), seen(0, 2, 0.76)])
    out = tmp_path / "results"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["results", "--runs", str(tmp_path / "runs"), "--history", str(tmp_path / "h"), "--out", str(out)])
    assert exit_info.value.code == 0
    csv = pd.read_csv(out / "precision_history.csv")
    assert csv[["epoch", "precision", "runs", "mean"]].values.tolist() == [
        [1, "bf16", 1, pytest.approx(40.0)], [1, "fp32", 1, pytest.approx(50.0)],
        [2, "bf16", 1, pytest.approx(76.0)], [2, "fp32", 1, pytest.approx(80.0)],
    ]  # fmt: skip
    printed = " ".join(capsys.readouterr().out.split())
    assert "Precision check over training: copy-20 / random, seen-transformation val accuracy after epoch 2" in printed
    assert (
        "│ bf16 │ 1 │ 76.0 │ - │ 76.0-76.0 │ -4.0 │" in printed and "│ fp32 │ 1 │ 80.0 │ - │ 80.0-80.0 │ - │" in printed
    )


def test_each_replicate_of_a_stack_has_its_own_planned_epochs(tmp_path):
    """A stack's ``planned_epochs`` are each replicate's ``epochs`` (they may differ); None where a run says none."""
    runs = [{"data_dir": "d", "seed": s, "batching": "random", "preset": "copy-20", "name": f"c{s}"} for s in (0, 1)]
    runs[0]["epochs"], runs[1]["epochs"] = 20, 5
    stack = write_run(tmp_path / "stack", {"runs": runs}, [epoch(0, 1, 0.5), epoch(1, 1, 0.4)])
    assert epoch_history(stack)[["run", "planned_epochs"]].values.tolist() == [["c0", 20], ["c1", 5]]
    del runs[1]["epochs"]
    unsaid = write_run(tmp_path / "unsaid", {"runs": runs}, [epoch(1, 1, 0.4)])
    assert epoch_history(unsaid)["planned_epochs"].tolist() == [None]


def test_the_precision_check_keeps_its_columns_when_there_is_nothing_to_compare(tmp_path):
    """`precision_by_epoch` has its columns whether or not a condition was trained in two precisions, is empty for
    histories without the measure or without a column it reads, and needs no other column; `matched_epoch` keeps
    the columns and numbers its rows afresh."""
    columns = ["preset", "batching", "epoch", "precision", "runs", "mean", "sd", "low", "high"]
    assert list(precision_by_epoch(pd.DataFrame())) == columns
    config = {"preset": "copy-20", "batching": "random", "epochs": 2}
    one = write_run(tmp_path / "f0", {**config, "seed": 0}, [epoch(0, 1, 0.5, val_acc_seen_transformations=0.5)])
    alone = precision_by_epoch(histories([one]))
    assert alone.empty and list(alone) == columns
    runs = [write_run(tmp_path / p, {**config, "precision": p}, [epoch(0, 1, 0.5)]) for p in ("fp32", "bf16")]
    unmeasured = precision_by_epoch(histories(runs))  # two precisions, no record with the measure
    assert unmeasured.empty and list(unmeasured) == columns
    assert len(precision_by_epoch(histories(runs), "val_acc_noncopy")) == 2
    bare = pd.DataFrame({"run": ["a", "b", "a"], "preset": "copy-20", "batching": "random", "epoch": [1, 1, 2],
                         "precision": ["fp32", "bf16", "fp32"], "architecture": "hooked",
                         "val_acc_seen_transformations": [0.5, 0.4, 0.6]})  # fmt: skip
    table = precision_by_epoch(bare)
    assert table[["epoch", "precision", "runs", "mean"]].values.tolist() == [
        [1, "bf16", 1, pytest.approx(40.0)], [1, "fp32", 1, pytest.approx(50.0)], [2, "fp32", 1, pytest.approx(60.0)]
    ]  # fmt: skip
    assert precision_by_epoch(bare.drop(columns="run")).empty
    matched = matched_epoch(table, bare)
    assert list(matched) == columns and matched.index.tolist() == [0, 1]
    assert matched["epoch"].tolist() == [1, 1]
