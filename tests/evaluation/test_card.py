"""Shipping a run: checkpoint, evaluation and model card; reduced precision is checked against fp32."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from lsa_interp import cli
from lsa_interp.analysis.matching import matching_analysis
from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.evaluation import card as card_module
from lsa_interp.evaluation.answer_check import count_answers, read_answer_check
from lsa_interp.evaluation.card import (
    _partial_warning,
    _stored_results,
    card_header,
    card_markdown,
    refresh_card,
    ship_run,
    shipped_name,
)
from lsa_interp.evaluation.fit import FitResult
from lsa_interp.evaluation.metrics import Accuracy
from lsa_interp.evaluation.report import markdown_report
from lsa_interp.evaluation.run import evaluate_model, evaluation_dataset
from lsa_interp.evaluation.stored import read_evaluation
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, checkpoint as checkpoint_module, load_model
from lsa_interp.training import TrainConfig, Trainer
from tests.helpers import SMALL_MODEL


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    data = save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")
    run = tmp_path_factory.mktemp("runs") / "tiny"
    train = TrainConfig(
        data_dir=str(data),
        preset="tiny",
        epochs=1,
        batch_size=64,
        lr=3e-3,
        max_steps=6,
        val_limit=20,
        model=SMALL_MODEL,
    )
    Trainer.start(train, run).run()
    return run


@pytest.fixture(scope="module")
def shipped(run_dir, tmp_path_factory):
    """The tiny run shipped on its full splits into a checkpoints folder of its own."""
    return ship_run(run_dir, "tiny", dest=tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="module")
def data_dir(run_dir):
    """The tiny run's dataset."""
    return json.loads((run_dir / "train_config.json").read_text())["data_dir"]


def test_ship_writes_checkpoint_card_and_evaluation(run_dir, data_dir, tmp_path):
    target = ship_run(run_dir, "tiny-model", dest=tmp_path, limit=200)
    assert sorted(p.name for p in target.iterdir()) == [
        "card.md",
        "check.json",
        "config.json",
        "evaluation.json",
        "fit.json",
        "model.safetensors",
    ]
    fit = json.loads((target / "fit.json").read_text())
    assert fit["rows"] == fit["overall"]["train"]["total"] == fit["overall"]["val"]["total"] <= 200  # rows decoded
    train = fit["overall"]["train"]
    assert (
        f"training fit (`fit.json`): {train['percent']:.1f}% of {train['total']:,} train rows"
        in (target / "card.md").read_text()
    )
    evaluation = json.loads((target / "evaluation.json").read_text())
    card = (target / "card.md").read_text()
    seen = evaluation["table1"]["seen_transformations_seen_alphabets"]
    assert f"{seen['percent']:.1f} ({seen['correct']}/{seen['total']})" in card
    assert "preset `tiny`" in card and "6 steps" in card and "hardware:" in card and "fp32" in card
    assert load_model(target).metadata["steps"] == 6
    assert "partly trained: 0." in card and "of 1 epochs" in card
    assert "`random` batching, AdamW" in card  # new runs use the reference's batches, not length buckets
    assert card.startswith("# tiny-model\n") and "\n## Evaluation\n" in card
    assert (evaluation["model"], evaluation["limit"], fit["model"]) == ("tiny-model", 200, "tiny-model")
    assert (target / "evaluation.json").read_text().startswith('{\n  "')
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
    val = evaluation_dataset(load_model(target), data_dir=data_dir)
    assert read_answer_check(target) == count_answers(load_model(target), val.splits["val"], val.seed)


def test_ship_creates_the_folder_of_a_nested_name(run_dir, tmp_path):
    target = ship_run(run_dir, "replicates/tiny-s0", dest=tmp_path, limit=20)
    assert target == tmp_path / "replicates" / "tiny-s0" and (target / "card.md").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["replicates"]
    assert [p.name for p in (tmp_path / "replicates").iterdir()] == ["tiny-s0"]


def test_reduced_precision_is_measured_on_val(run_dir, tmp_path):
    target = ship_run(run_dir, "tiny-bf16", dest=tmp_path, storage="fp16", limit=50)
    card = (target / "card.md").read_text()
    assert "weights: fp16" in card and "greedy val answers" in card
    stored = load_file(target / "model.safetensors")  # stored in fp16, not only called so
    parameters = {name for name, _ in load_model(target).named_parameters()}
    assert parameters <= set(stored) and {stored[name].dtype for name in parameters} == {torch.float16}


def test_ship_replaces_an_earlier_checkpoint_and_stale_staging_and_old_folders_in_a_new_folder(run_dir, tmp_path):
    dest = tmp_path / "new" / "checkpoints"
    first = ship_run(run_dir, "tiny", dest=dest, limit=20)
    staging, old = dest / ".tiny.staging", dest / ".tiny.old"
    for folder in (staging, old):  # a ship killed while it wrote, or between its two renames
        folder.mkdir()
        (folder / "left-over").write_text("from a ship that was killed")
    (first / "stray").write_text("not part of a checkpoint")
    again = ship_run(run_dir, "tiny", dest=dest, limit=20)
    assert again == first and not (again / "stray").exists() and not (again / "left-over").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["tiny"]


def test_checkpoint_names_of_letters_digits_dots_dashes_and_underscores_in_parts_are_accepted():
    for name in ("copy-200", "replicates/copy-20-s2", "Copy_20.v2/S0", "a"):
        card_module.check_checkpoint_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "../escaped", "/abs", "a//b", "replicates/", "a b", "x/../y"])
def test_a_name_that_is_not_a_checkpoint_name_is_refused_before_anything_is_touched(run_dir, tmp_path, capsys, name):
    """An empty name made the checkpoints directory itself the target: shipping with --force replaced all of it."""
    dest = tmp_path / "checkpoints"
    (dest / "keep").mkdir(parents=True)
    with pytest.raises(ValueError, match="bad checkpoint name"):
        ship_run(run_dir, name, dest=dest, limit=20)
    with pytest.raises(SystemExit) as info:
        cli.main(["ship", str(run_dir), "--name", name, "--dest", str(dest), "--force", "--limit", "20"])
    assert info.value.code == 2 and "bad checkpoint name" in capsys.readouterr().err
    assert sorted(p.name for p in dest.iterdir()) == ["keep"] and not (tmp_path / "escaped").exists()


def test_the_card_of_a_fresh_evaluation_says_how_to_repeat_it():
    result = read_evaluation(checkpoint_module.CHECKPOINTS_DIR / "copy-20" / "evaluation.json")
    card = card_markdown("n", _model_with({}), result, {"dtype": "fp32", "bytes": 1})
    assert card.startswith("# n\n") and "- evaluated with `lsa-interp evaluate --model n` (numbers below)" in card
    assert card.count("\n## Evaluation\n") == 1


def test_ship_refuses_unfinished_runs_and_bad_storage(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit) as info:  # an empty folder, a checkpoint, a dataset: they said "finish the run"
        cli.main(["ship", str(tmp_path / "run"), "--name", "x", "--dest", str(tmp_path)])
    assert info.value.code == 2 and "is not a training run (no train_config.json, no model/)" in capsys.readouterr().err
    for text, problem in (("[]", "[] is not a JSON object"), ('{"seed": 0, "dat', "not JSON (Unterminated string")):
        (tmp_path / "run" / "train_config.json").write_text(text)
        with pytest.raises(SystemExit) as info:  # a list ended in an AttributeError; a truncated file went unnamed
            cli.main(["ship", str(tmp_path / "run"), "--name", "x", "--dest", str(tmp_path)])
        err = capsys.readouterr().err
        assert info.value.code == 2 and err.count("\n") == 1 and f"run/train_config.json: {problem}" in err
    (tmp_path / "run" / "train_config.json").write_text("{}")  # a started run
    with pytest.raises(SystemExit) as info:
        cli.main(["ship", str(tmp_path / "run"), "--name", "x", "--dest", str(tmp_path)])
    assert info.value.code == 2 and "run/model holds no final model; finish the run" in capsys.readouterr().err
    (tmp_path / "run" / "train_config.json").unlink()
    (tmp_path / "run" / "replicate-0" / "model").mkdir(parents=True)
    (tmp_path / "run" / "replicate-0" / "model" / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as info:
        cli.main(["ship", str(tmp_path / "run"), "--name", "x", "--dest", str(tmp_path)])
    assert (
        info.value.code == 2 and "is a stacked run: pick one of its models with --replicate" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as info:
        cli.main(["ship", str(tmp_path / "run"), "--name", "x", "--storage", "int8"])
    assert info.value.code == 2 and "unknown storage 'int8'" in capsys.readouterr().err


def test_ship_command_adds_the_matching_head_analysis_of_the_stored_weights(run_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["ship", str(run_dir), "--name", "tiny", "--dest", str(tmp_path), "--limit", "20"])
    assert info.value.code == 0 and "shipped" in capsys.readouterr().out
    written = json.loads((tmp_path / "tiny" / "matching_heads.json").read_text())
    expected = matching_analysis(load_model(tmp_path / "tiny"), "tiny").summary
    assert written["model"] == "tiny" and written["summary"]["best_head"] == expected["best_head"]
    assert written["summary"]["best_score"] == pytest.approx(expected["best_score"], abs=1e-6)
    assert not list(tmp_path.glob("**/*.html"))  # the JSON alone: a checkpoint carries no pages


def test_an_analysis_that_fails_leaves_the_earlier_checkpoint_in_place(run_dir, shipped, tmp_path):
    before = sorted(p.name for p in shipped.iterdir())

    def broken(model, folder):
        raise RuntimeError("analysis failed")

    with pytest.raises(RuntimeError, match="analysis failed"):
        ship_run(run_dir, shipped.name, dest=shipped.parent, limit=20, analyse=broken)
    assert sorted(p.name for p in shipped.iterdir()) == before and "matching_heads.json" not in before
    assert sorted(p.name for p in shipped.parent.iterdir()) == [shipped.name]  # no staging folder left


def test_only_runs_stopped_early_are_marked_partial():
    assert _partial_warning(20.0, 20) == [] and _partial_warning(None, 20) == []
    assert "2.16 of 20 epochs" in _partial_warning(2.1627, 20)[0]


def test_a_refreshed_card_keeps_its_header_and_takes_the_new_evaluation(shipped, data_dir, tmp_path, ascii_locale):
    """Cards are UTF-8 (their tables' dashes, a header's names) whatever the locale's encoding."""
    target = shutil.copytree(shipped, tmp_path / "tiny")
    header = (target / "card.md").read_text(encoding="utf-8").partition("## Evaluation")[0]
    made = f"- evaluated with `lsa-interp evaluate --model {shipped.as_posix()}` (numbers below)"  # shipped elsewhere
    assert made in header
    header += "Trained by Zoë – here.\n\n"
    at_the_end = "- evaluated at the end of training, on its hardware, in fp32 (the run's `evaluation.json`)"
    (target / "evaluation.json").write_text(json.dumps({"model": "tiny", "preset": "tiny", "stale": True}))
    (target / "card.md").write_text(
        header.replace(made, at_the_end) + "## Evaluation\n\nstale numbers\n", encoding="utf-8"
    )
    model = load_model(target)
    result = evaluate_model(model, evaluation_dataset(model, data_dir=data_dir), model_name="tiny")
    assert refresh_card(target, result) == target / "card.md"
    evaluation = json.loads((target / "evaluation.json").read_text(encoding="utf-8"))
    assert evaluation == json.loads(json.dumps(result.to_dict()))
    card = (target / "card.md").read_text(encoding="utf-8")
    # the header says how these numbers were made (by `evaluate --model` of the name given): not at the end of training
    refreshed = header.replace(made, "- evaluated with `lsa-interp evaluate --model tiny` (numbers below)")
    assert card == refreshed + markdown_report(result).replace("# Evaluation", "## Evaluation", 1)
    assert "stale" not in card and "Which rule was applied" in card
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in shipped.iterdir())


def test_a_card_is_not_refreshed_from_a_subset_another_preset_or_without_a_card(shipped, data_dir, tmp_path):
    model = load_model(shipped)
    dataset = evaluation_dataset(model, data_dir=data_dir)
    before = {path.name: path.read_bytes() for path in shipped.iterdir()}
    with pytest.raises(ValueError, match="covers 10 rows per split; a card needs the full splits"):
        refresh_card(shipped, evaluate_model(model, dataset, limit=10))
    full = evaluate_model(model, dataset, model_name="tiny")
    with pytest.raises(ValueError, match="of preset 'copy-200'; the checkpoint's: 'tiny'"):
        refresh_card(shipped, dataclasses.replace(full, preset="copy-200"))
    with pytest.raises(ValueError, match="of model 'copy-200'; the checkpoint's: 'tiny'"):
        refresh_card(shipped, dataclasses.replace(full, model="copy-200"))
    with pytest.raises(ValueError, match=f"of seed 9; the checkpoint's: {full.seed}"):  # another draw of the preset
        refresh_card(shipped, dataclasses.replace(full, seed=9))
    assert {path.name: path.read_bytes() for path in shipped.iterdir()} == before
    with pytest.raises(FileNotFoundError, match="holds no card.md"):
        refresh_card(tmp_path, full)
    (tmp_path / "card.md").write_text("# tiny\n\nno evaluation here\n")
    with pytest.raises(ValueError, match="has no '## Evaluation' part to replace"):
        refresh_card(tmp_path, full)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.md"]


def test_evaluate_card_rewrites_a_shipped_checkpoint_and_refuses_anything_else(
    shipped, run_dir, data_dir, monkeypatch, capsys
):
    monkeypatch.setattr(checkpoint_module, "CHECKPOINTS_DIR", shipped.parent)
    stale = json.loads((shipped / "evaluation.json").read_text()) | {"stale": True}
    (shipped / "evaluation.json").write_text(json.dumps(stale))
    with pytest.raises(SystemExit) as info:
        cli.main(["evaluate", "--model", "tiny", "--data", data_dir, "--card", "--device", "cpu"])
    assert info.value.code == 0 and f"wrote {shipped / 'card.md'}" in capsys.readouterr().out
    fresh = json.loads((shipped / "evaluation.json").read_text())
    assert "stale" not in fresh and fresh["model"] == "tiny" and fresh["limit"] is None
    for args, message in (
        (
            ["--model", str(run_dir)],
            f"--card needs a checkpoint with a card.md (lsa-interp ship writes one); '{run_dir}' has none",
        ),
        (["--model", "tiny", "--limit", "5"], "drop --limit"),
        (["--model", "tiny", "--seed", "0"], "drop --seed"),
    ):
        with pytest.raises(SystemExit) as info:
            cli.main(["evaluate", *args, "--data", data_dir, "--card"])
        assert info.value.code == 2 and message in capsys.readouterr().err
    monkeypatch.setattr(checkpoint_module, "CHECKPOINTS_DIR", shipped.parent / "elsewhere")
    with pytest.raises(SystemExit) as info:  # a checkpoint shipped with --dest: found by its path
        cli.main(["evaluate", "--model", str(shipped), "--data", data_dir, "--card", "--device", "cpu"])
    assert info.value.code == 0 and f"wrote {shipped / 'card.md'}" in capsys.readouterr().out
    made = f"- evaluated with `lsa-interp evaluate --model {shipped}` (numbers below)"
    assert made in (shipped / "card.md").read_text()
    assert json.loads((shipped / "evaluation.json").read_text())["model"] == "tiny"  # the name it was shipped under


def test_ship_reuses_the_full_split_evaluation_and_fit_beside_the_model_unless_asked_to_evaluate(
    run_dir, shipped, tmp_path, monkeypatch
):
    """A sweep writes the model's full-split evaluation and training fit beside it: shipping takes them (renamed)
    without evaluating, also in fp16 after its val check; --reevaluate or a limit evaluate again."""
    run = shutil.copytree(run_dir, tmp_path / "run")
    for name in ("evaluation.json", "fit.json"):
        shutil.copy(shipped / name, run / "model" / name)  # the tiny run's own full-split numbers
    evaluated = []
    monkeypatch.setattr(card_module, "evaluate_model", lambda *args, **kwargs: evaluated.append(1) or 1 / 0)
    stored, cards = json.loads((shipped / "evaluation.json").read_text()), {}
    for storage in ("fp32", "fp16"):
        target = ship_run(run, f"again-{storage}", dest=tmp_path / "checkpoints", storage=storage)
        assert json.loads((target / "evaluation.json").read_text()) == {**stored, "model": f"again-{storage}"}
        assert json.loads((target / "fit.json").read_text()) == {
            **json.loads((shipped / "fit.json").read_text()),
            "model": f"again-{storage}",
        }
        card_text = (target / "card.md").read_text()
        cards[storage] = card_text
        assert "evaluated at the end of training, on its hardware, in fp32" in card_text
        assert ("greedy val answers" in card_text) == (storage == "fp16") and "## Evaluation" in card_text
        recorded = read_answer_check(target)  # counted on the stored weights, with the evaluation reused
        assert recorded.rows == read_answer_check(shipped).rows
        assert storage == "fp16" or recorded == read_answer_check(shipped)
    assert evaluated == []
    elsewhere = (tmp_path / "checkpoints" / "again-fp32").as_posix()  # shipped outside the repository's checkpoints/
    assert f"`lsa-interp evaluate --model {elsewhere}` evaluates it again" in cards["fp32"]
    for options in ({"reevaluate": True}, {"limit": 20}):
        with pytest.raises(ZeroDivisionError):
            ship_run(run, "again-fp32", dest=tmp_path / "checkpoints", **options)
    assert len(evaluated) == 2
    assert (tmp_path / "checkpoints" / "again-fp32" / "card.md").read_text() == cards["fp32"]  # left as it was


def _model_with(metadata: dict, dropout: float = 0.1):
    cfg = ModelConfig(d_model=16, n_heads=2, d_mlp=32, n_encoder_layers=1, n_decoder_layers=1, dropout=dropout)
    model = HookedEncoderDecoder(cfg)
    model.metadata = metadata
    return model


def test_the_card_header_states_provenance_recipe_storage_and_fit():
    recipe = {"epochs": 20, "batch_size": 32, "batching": "alphabet", "lr": 0.001, "betas": [0.9, 0.95]}
    recipe |= {"weight_decay": 0.01, "final_lr_factor": 0.05, "precision": "bf16", "length_bucketing": False}
    model = _model_with(
        {"preset": "copy-20", "data_seed": 0, "seed": 3, "train_config": recipe, "epochs_completed": 12.5}
        | {"steps": 1234, "train_seconds": 5400.0, "hardware": "NVIDIA H100", "torch": "2.11.0"},
        dropout=0.2,
    )
    fit = FitResult("x", "copy-20", 0, 10, {"train": Accuracy(9, 10), "val": Accuracy(1234, 2000)}, {}, {})
    storage = {
        "dtype": "fp16",
        "bytes": 2_800_000,
        "check": {"changed_answers": 3, "tasks": 45000, "fraction": 3 / 45000},
    }
    assert card_header("copy-20", model, storage, fit, reused=True).splitlines() == [
        "# copy-20",
        "",
        "- data: preset `copy-20`, dataset seed 0; model seed 3",
        "- recipe: 20 epochs, batch 32, `alphabet` batching, AdamW lr 0.001 (betas [0.9, 0.95], weight decay 0.01), "
        "warm-up over epoch 1, linear decay to 0.05x, dropout 0.2, bf16",
        "- trained: 1234 steps (12.50 epochs)",
        "- **partly trained: 12.50 of 20 epochs.** The run was stopped early; its numbers are not comparable to the "
        "paper's, which are for the full recipe",
        "- hardware: NVIDIA H100; training wall time 1.50 h (5400.0 s); torch 2.11.0",
        "- weights: fp16 (2.8 MB); changes 3 of 45,000 greedy val answers (0.007%) against fp32",
        "- training fit (`fit.json`): 90.0% of 10 train rows, 61.7% of 2,000 val rows (non-copy, seen "
        "transformations; `lsa-interp fit --model x`)",
        "- evaluated at the end of training, on its hardware, in fp32 (the run's `evaluation.json` and `fit.json`; "
        "the stored weights change the val answers counted above); `lsa-interp evaluate --model copy-20` evaluates "
        "it again",
    ]
    bare = card_header("bare", _model_with({"device": "cpu"}), {"dtype": "fp32", "bytes": 5e6})
    assert bare.splitlines()[2:] == [
        "- data: preset not recorded, dataset seed not recorded; model seed not recorded",
        "- recipe: not recorded (the model carries no training configuration); dropout 0.1",
        "- trained: unknown",
        "- hardware: cpu; training wall time not recorded; torch not recorded",
        "- weights: fp32 (5.0 MB)",
        "- evaluated with `lsa-interp evaluate --model bare` (numbers below)",
    ]
    seeded = _model_with({"preset": "copy-20", "data_seed": 0, "seed": 0, "train_seconds": 0.0})
    assert card_header("s", seeded, {"dtype": "fp32", "bytes": 1}).splitlines()[2] == (
        "- data: preset `copy-20`, dataset seed 0; model seed 0"
    )
    assert "training wall time 0.00 h (0.0 s)" in card_header("s", seeded, {"dtype": "fp32", "bytes": 1})
    bucketed = _model_with({"train_config": {"epochs": 20, "batching": "random"}})
    assert "`random` batching (length-bucketed)" in card_header("b", bucketed, {"dtype": "fp32", "bytes": 1})
    assert "hardware: not recorded;" in card_header("x", _model_with({}), {"dtype": "fp32", "bytes": 1})


def test_a_run_at_its_planned_epochs_is_not_partial_and_the_warning_reads_in_full():
    assert _partial_warning(20 - 1e-6, 20) == []
    assert _partial_warning(2.1627, 20) == [
        "- **partly trained: 2.16 of 20 epochs.** The run was stopped early; its numbers are not comparable to the "
        "paper's, which are for the full recipe"
    ]


def test_the_precision_check_counts_changed_answers(monkeypatch):
    full, reduced = _model_with({}), _model_with({})
    answers = {id(full): ["b", "a", "c", "d"], id(reduced): ["x", "a", "c", "d"]}
    monkeypatch.setattr(card_module, "predict", lambda model, tasks: answers[id(model)][: len(tasks)])
    assert card_module.precision_check(full, reduced, [1, 2, 3, 4]) == {
        "tasks": 4,
        "changed_answers": 1,
        "fraction": 0.25,
    }
    assert card_module.precision_check(full, reduced, [1])["fraction"] == 1.0
    assert card_module.precision_check(full, reduced, [])["fraction"] == 0.0


def test_the_header_s_hours_megabytes_and_changed_share_and_a_reused_fp32_evaluation():
    model = _model_with({"train_config": {}, "train_seconds": 18.0})
    storage = {"dtype": "fp16", "bytes": 2_850_000, "check": {"changed_answers": 5, "tasks": 1000, "fraction": 0.005}}
    lines = card_header("n", model, storage).splitlines()
    assert "- hardware: not recorded; training wall time 0.01 h (18.0 s); torch not recorded" in lines
    assert "- weights: fp16 (2.9 MB); changes 5 of 1,000 greedy val answers (0.500%) against fp32" in lines
    reused = card_header("n", model, {"dtype": "fp32", "bytes": 1}, reused=True).splitlines()[-1]
    assert reused == (
        "- evaluated at the end of training, on its hardware, in fp32 (the run's `evaluation.json` and `fit.json`); "
        "`lsa-interp evaluate --model n` evaluates it again"
    )


def test_stored_results_are_reused_only_for_the_whole_splits_of_the_training_preset(tmp_path):
    shipped = checkpoint_module.CHECKPOINTS_DIR / "copy-20"
    evaluation, fit = (
        json.loads((shipped / "evaluation.json").read_text()),
        json.loads((shipped / "fit.json").read_text()),
    )
    model = _model_with({"preset": evaluation["training_preset"]})

    def stored(evaluation_overrides: dict, fit_overrides: dict):
        (tmp_path / "evaluation.json").write_text(json.dumps({**evaluation, **evaluation_overrides}))
        (tmp_path / "fit.json").write_text(json.dumps({**fit, **fit_overrides}))
        return _stored_results(tmp_path, model, "n", None)

    result, fit_result = stored({}, {})
    assert result.model == fit_result.model == "n"
    assert stored({}, {"preset": "another"}) is None
    assert stored({"limit": 200}, {}) is None
    assert stored({"preset": "nocopy-20"}, {}) is None  # the model evaluated on another preset's data
    assert stored({"seed": 7}, {}) is None and stored({}, {"seed": 7}) is None  # on another draw of its preset
    model.metadata = {"preset": evaluation["training_preset"], "seed": 7, "data_seed": 7}
    assert stored({"seed": 7}, {"seed": 7}) is not None and stored({}, {}) is None  # the recorded data seed counts
    model.metadata = {"preset": evaluation["training_preset"], "seed": 7}  # no data seed recorded: the default 0
    assert stored({}, {}) is not None and stored({"seed": 7}, {"seed": 7}) is None  # not the model's own seed


def test_a_refreshed_card_writes_indented_json_where_the_checkpoint_had_none(shipped, tmp_path):
    copy = shutil.copytree(shipped, tmp_path / "copy")
    result = read_evaluation(copy / "evaluation.json")
    (copy / "evaluation.json").unlink()
    refresh_card(copy, result)
    assert (copy / "evaluation.json").read_text().startswith('{\n  "')


class _DatasetChosen(Exception):
    """Raised by a stand-in for `evaluation_dataset` to end a ship once it has chosen the run's dataset."""


def _dataset_dir_shipped_with(monkeypatch, run, replicate=None, splits=None):
    """The ``data_dir`` that shipping ``run`` hands to `evaluation_dataset` (None: the preset is regenerated);
    the splits it asks for are appended to ``splits``."""
    splits = [] if splits is None else splits
    chosen = []

    def record(model, **options):
        assert isinstance(model, HookedEncoderDecoder) and model.metadata["preset"] == "tiny"
        chosen.append(options["data_dir"])
        splits.append(options["splits"])
        raise _DatasetChosen

    monkeypatch.setattr(card_module, "evaluation_dataset", record)
    with pytest.raises(_DatasetChosen):
        ship_run(run, "x", replicate=replicate, dest=run.parent / "checkpoints")
    return chosen[0]


def test_a_ship_evaluates_on_the_run_s_own_dataset_while_it_is_there(run_dir, data_dir, tmp_path, monkeypatch):
    run = shutil.copytree(run_dir, tmp_path / "run")
    config = run / "train_config.json"
    splits = []
    assert _dataset_dir_shipped_with(monkeypatch, run, splits=splits) == data_dir
    with monkeypatch.context() as stored:
        stored.setattr(card_module, "_stored_results", lambda *args: ("evaluation", "fit"))
        assert _dataset_dir_shipped_with(monkeypatch, run, splits=splits) == data_dir
    assert splits == [("val", "test_new_alphabets", "train"), ("val",)]  # stored results: the val check only
    config.write_text(json.dumps(json.loads(config.read_text()) | {"data_dir": str(tmp_path / "gone")}))
    assert _dataset_dir_shipped_with(monkeypatch, run) is None
    config.unlink()
    assert _dataset_dir_shipped_with(monkeypatch, run) is None
    stack = tmp_path / "stack"
    shutil.copytree(run_dir / "model", stack / "replicate-1" / "model")
    runs = [{"data_dir": str(tmp_path / "other")}, {"data_dir": data_dir}]
    (stack / "train_config.json").write_text(json.dumps({"runs": runs, "data_dir": str(tmp_path / "other")}))
    (tmp_path / "other").mkdir()
    assert _dataset_dir_shipped_with(monkeypatch, stack, replicate=1) == data_dir


def test_reduced_precision_is_refused_from_exactly_the_limit_of_changed_answers(run_dir, tmp_path, monkeypatch):
    limit = card_module.MAX_CHANGED_ANSWERS
    for fraction, ships in ((limit, False), (limit * 0.99, True)):
        check = {"tasks": 1000, "changed_answers": round(fraction * 1000), "fraction": fraction}
        monkeypatch.setattr(card_module, "precision_check", lambda full, reduced, tasks, check=check: check)
        dest = tmp_path / str(ships)
        if ships:
            assert (ship_run(run_dir, "tiny", dest=dest, storage="fp16", limit=20) / "card.md").is_file()
        else:
            message = (
                r"^fp16 storage changes 1 of 1,000 greedy val answers \(0\.100%; allowed: under 0\.1%\); keep fp32$"
            )
            with pytest.raises(ValueError, match=message):
                ship_run(run_dir, "tiny", dest=dest, storage="fp16", limit=20)
            assert list(dest.iterdir()) == []


def test_a_ship_that_fails_before_its_staging_folder_exists_raises_its_own_error(run_dir, tmp_path, monkeypatch):
    def no_space(model, directory, storage):
        raise OSError("no space left on device")

    monkeypatch.setattr(card_module, "save_model", no_space)
    with pytest.raises(OSError, match="no space left"):
        ship_run(run_dir, "tiny", dest=tmp_path, limit=20)
    assert list(tmp_path.iterdir()) == []


def test_a_ship_shows_no_progress_bar_unless_asked(run_dir, tmp_path, monkeypatch):
    asked = []

    def evaluate(model, dataset, limit=None, progress=False, model_name=""):  # `evaluate_model`'s defaults
        asked.append(bool(progress))
        raise _DatasetChosen

    monkeypatch.setattr(card_module, "evaluate_model", evaluate)
    for options in ({}, {"progress": True}):
        with pytest.raises(_DatasetChosen):
            ship_run(run_dir, "tiny", dest=tmp_path, limit=20, **options)
    assert asked == [False, True]


def test_a_ship_reads_its_run_s_config_and_writes_its_card_as_utf_8_whatever_the_locale(
    run_dir, data_dir, tmp_path, ascii_locale
):
    """A dataset's folder named outside ASCII, written into the run's config by another tool without escapes, and
    the card's dashes: on a machine whose locale's encoding is not UTF-8."""
    run = shutil.copytree(run_dir, tmp_path / "run")
    data = shutil.copytree(data_dir, tmp_path / "données")  # the tiny preset is not one to regenerate
    config = run / "train_config.json"
    recipe = json.loads(config.read_text(encoding="utf-8")) | {"data_dir": str(data)}
    config.write_text(json.dumps(recipe, ensure_ascii=False), encoding="utf-8")
    card = (ship_run(run, "tiny", dest=tmp_path / "checkpoints", limit=20) / "card.md").read_text(encoding="utf-8")
    assert card.startswith("# tiny\n") and "–" in card  # a cell without rows


def test_a_card_is_refreshed_beside_an_evaluation_written_without_escapes_whatever_the_locale(
    shipped, tmp_path, ascii_locale
):
    copy = shutil.copytree(shipped, tmp_path / "copy")
    result = read_evaluation(copy / "evaluation.json")
    written = json.loads((copy / "evaluation.json").read_text(encoding="utf-8")) | {"note": "Zoë’s"}
    (copy / "evaluation.json").write_text(json.dumps(written, ensure_ascii=False), encoding="utf-8")
    refresh_card(copy, result)
    assert json.loads((copy / "evaluation.json").read_text(encoding="utf-8")) == json.loads(
        json.dumps(result.to_dict())
    )


def test_shipped_name_is_the_evaluations_model_or_none_without_one(tmp_path, ascii_locale):
    """The name recorded in a checkpoint's ``evaluation.json`` (read as UTF-8 whatever the locale: a hand-edited file
    may hold a note outside ASCII); a directory without that file has none."""
    assert shipped_name(tmp_path) is None
    record = {"model": "replicates/copy-20-s2", "note": "réévalué"}
    (tmp_path / "evaluation.json").write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
    assert shipped_name(tmp_path) == shipped_name(str(tmp_path)) == "replicates/copy-20-s2"


def test_the_replicate_folder_is_checked_against_the_runs_saved_config(tmp_path):
    """Replicate -1 of a stack looked for replicate--1/model; replicates "3" was a TypeError."""
    folder = card_module._replicate_folder
    stack, single = {"runs": [{}, {}]}, {"seed": 0}
    assert (folder(tmp_path, None, stack), folder(tmp_path, 1, stack), folder(tmp_path, 0, single)) == (
        "",
        "replicate-1",
        "",
    )
    assert folder(tmp_path, 3, {}) == "replicate-3"  # no saved config: the replicates found on disk
    with pytest.raises(ValueError, match="^replicate -1 out of range: replicates count from 0$"):
        folder(tmp_path, -1, stack)
    with pytest.raises(ValueError, match="^replicate 2 out of range: the stack has 2 runs$"):
        folder(tmp_path, 2, stack)
    with pytest.raises(ValueError, match=r"trained one model \(replicate 0\)$"):
        folder(tmp_path, 1, single)
    with pytest.raises(ValueError, match=r"train_config\.json is damaged: replicates is '3', not a whole number$"):
        folder(tmp_path, 1, {"replicates": "3"})
    assert folder(tmp_path, 2, {"replicates": 3}) == "replicate-2"  # the retired vmap stack's runs
