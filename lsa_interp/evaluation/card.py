"""Ship a trained run as a named checkpoint with a model card and its evaluation.

``ship_run`` copies ``RUN_DIR/model`` (or a replicate's model) to ``checkpoints/NAME`` (optionally with
fp16/bf16 parameters), evaluates it with `lsa_interp.evaluation` on its training preset (or reuses the
full-split evaluation and training fit a sweep wrote beside the model), and writes ``evaluation.json`` (every
number), ``check.json`` (`lsa_interp.evaluation.answer_check`, counted on the stored weights) and ``card.md``
(data, recipe, hardware, wall time, Table 1 beside the paper's numbers, accuracy by transformation); a caller's
``analyse`` adds files of its own (``lsa-interp ship``: the matching-head analysis of the stored weights).
Reduced-precision storage is only accepted when it changes fewer than `MAX_CHANGED_ANSWERS` of the greedy
answers on the val split (measured and written to the card).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsa_interp.data.presets import trained_data_seed
from lsa_interp.evaluation.answer_check import count_answers, write_answer_check
from lsa_interp.evaluation.fit import FIT_FILE, FIT_ROWS, FitResult, training_fit, write_fit
from lsa_interp.evaluation.report import markdown_report
from lsa_interp.evaluation.result import SPLIT_OF, EvaluationResult
from lsa_interp.evaluation.run import evaluate_model, evaluation_dataset, predict
from lsa_interp.evaluation.stored import read_evaluation, read_fit
from lsa_interp.model.checkpoint import CHECKPOINTS_DIR, load_model, save_model
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.utils import atomic_write, check_type, read_json_object

MAX_CHANGED_ANSWERS = 0.001
"""Reduced-precision storage must change fewer than this fraction of the val split's greedy answers."""
EVALUATION_FILE, CARD_FILE = "evaluation.json", "card.md"


def precision_check(full: HookedEncoderDecoder, reduced: HookedEncoderDecoder, tasks: list) -> dict[str, Any]:
    """Greedy answers of both models on ``tasks``: how many differ, and the fraction."""
    a, b = predict(full, tasks), predict(reduced, tasks)
    changed = sum(x != y for x, y in zip(a, b))
    return {"tasks": len(tasks), "changed_answers": changed, "fraction": changed / max(len(tasks), 1)}


def _partial_warning(epochs: float | None, planned: int | None) -> list[str]:
    """A card line for a run stopped before the end of its recipe (none for a finished run)."""
    if epochs is None or planned is None or epochs >= planned - 1e-6:
        return []
    return [
        f"- **partly trained: {epochs:.2f} of {planned} epochs.** The run was stopped early; its numbers are not "
        "comparable to the paper's, which are for the full recipe"
    ]


def _fit_line(fit: FitResult | None) -> list[str]:
    """The card's line on the training fit (`lsa_interp.evaluation.fit`), if measured."""
    if fit is None:
        return []
    train, val = fit.overall["train"], fit.overall["val"]
    return [
        f"- training fit (`fit.json`): {train.percent:.1f}% of {train.total:,} train rows, {val.percent:.1f}% of "
        f"{val.total:,} val rows (non-copy, seen transformations; `lsa-interp fit --model {fit.model}`)"
    ]


def _recorded(value: Any, form: str = "{}") -> str:
    """``value`` written by ``form``, or "not recorded" where the metadata lacks it."""
    return "not recorded" if value is None else form.format(value)


def _recipe_line(recipe: dict[str, Any], dropout: float) -> str:
    """The recipe of the card header from a run's ``train_config``; "not recorded" without one."""
    if not recipe:
        return f"- recipe: not recorded (the model carries no training configuration); dropout {dropout}"
    bucketed = " (length-bucketed)" if recipe.get("length_bucketing", True) else ""
    return (
        f"- recipe: {recipe.get('epochs')} epochs, batch {recipe.get('batch_size')}, `{recipe.get('batching')}` "
        f"batching{bucketed}, AdamW lr {recipe.get('lr')} (betas {recipe.get('betas')}, weight decay "
        f"{recipe.get('weight_decay')}), warm-up over epoch 1, linear decay to {recipe.get('final_lr_factor')}x, "
        f"dropout {dropout}, {recipe.get('precision')}"
    )


def card_header(
    name: str,
    model: HookedEncoderDecoder,
    storage: dict[str, Any],
    fit: FitResult | None = None,
    reused: bool = False,
    reference: str | None = None,
) -> str:
    """The card's first part: provenance and recipe from the model's metadata, how it is stored and, with
    ``fit``, its training fit; ``reused``: the evaluation is the one made at the end of training (of the fp32
    weights, by a sweep or by ``lsa-interp evaluate`` of the run's model). ``reference`` is what ``evaluate
    --model`` takes to find the model (default ``name``: a checkpoint under the repository's checkpoints/)."""
    reference = reference or name
    meta = model.metadata
    recipe = meta.get("train_config") or {}
    epochs = meta.get("epochs_completed")
    seconds = meta.get("train_seconds")
    wall_time = "not recorded" if seconds is None else f"{seconds / 3600:.2f} h ({seconds:.1f} s)"
    lines = [
        f"# {name}",
        "",
        f"- data: preset {_recorded(meta.get('preset'), '`{}`')}, dataset seed {_recorded(meta.get('data_seed'))}; "
        f"model seed {_recorded(meta.get('seed'))}",
        _recipe_line(recipe, model.cfg.dropout),
        f"- trained: {meta.get('steps')} steps ({epochs:.2f} epochs)" if epochs is not None else "- trained: unknown",
        *_partial_warning(epochs, recipe.get("epochs")),
        f"- hardware: {meta.get('hardware', meta.get('device', 'not recorded'))}; training wall time {wall_time}; "
        f"torch {_recorded(meta.get('torch'))}",
        f"- weights: {storage['dtype']} ({storage['bytes'] / 1e6:.1f} MB)"
        + (
            f"; changes {storage['check']['changed_answers']} of {storage['check']['tasks']:,} greedy val answers "
            f"({100 * storage['check']['fraction']:.3f}%) against fp32"
            if "check" in storage
            else ""
        ),
        *_fit_line(fit),
        f"- evaluated at the end of training, on its hardware, in fp32 (the run's `evaluation.json` and "
        f"`fit.json`{'; the stored weights change the val answers counted above' if 'check' in storage else ''}); "
        f"`lsa-interp evaluate --model {reference}` evaluates it again"
        if reused
        else f"- evaluated with `lsa-interp evaluate --model {reference}` (numbers below)",
        "",
    ]
    return "\n".join(lines)


def card_markdown(
    name: str,
    model: HookedEncoderDecoder,
    result: EvaluationResult,
    storage: dict[str, Any],
    fit: FitResult | None = None,
    reused: bool = False,
    reference: str | None = None,
) -> str:
    """The model card: `card_header` (``reference`` as it takes it), then the evaluation report."""
    header = card_header(name, model, storage, fit, reused, reference)
    return header + markdown_report(result).replace("# Evaluation", "## Evaluation", 1)


def _stored_results(
    source: Path, model: HookedEncoderDecoder, name: str, limit: int | None
) -> tuple[EvaluationResult, FitResult] | None:
    """The full-split evaluation and training fit beside ``model`` in ``source`` (a sweep writes them at the end
    of training), renamed ``name``, where shipping may reuse them: no ``limit``, both files readable and the
    evaluation of the whole splits of the model's own dataset (its training preset and data seed)."""
    files = source / EVALUATION_FILE, source / FIT_FILE
    if limit is not None or not all(path.is_file() for path in files):
        return None
    try:
        result, fit = read_evaluation(files[0]), read_fit(files[1])
    except ValueError:  # written before a field existed
        return None
    trained_on = model.metadata.get("preset")
    data_seed = trained_data_seed(model.metadata)
    if result.limit is not None or {result.training_preset, result.preset, fit.preset} != {trained_on}:
        return None
    if result.seed != data_seed or fit.seed != data_seed:  # evaluated on another draw of the preset
        return None
    return dataclasses.replace(result, model=name), dataclasses.replace(fit, model=name)


def ship_run(
    run_dir: str | Path,
    name: str,
    replicate: int | None = None,
    dest: str | Path = CHECKPOINTS_DIR,
    storage: str = "fp32",
    limit: int | None = None,
    progress: bool = False,
    reevaluate: bool = False,
    analyse: Callable[[HookedEncoderDecoder, Path], object] | None = None,
) -> Path:
    """Copy a finished run's model to ``dest/name``, evaluate it, and write ``evaluation.json``, ``fit.json``
    (`training_fit`: `FIT_ROWS` train and val rows, or ``limit`` if smaller), ``check.json`` (`count_answers` of
    the stored weights) and ``card.md``; ``analyse(stored_model, folder)`` writes further files into the
    checkpoint's folder before it takes the place of an earlier one. Where the run's
    model has its full-split evaluation and training fit beside it (a sweep's) and it ships without ``limit``,
    those are reused unless ``reevaluate`` (the card says so; fp16/bf16 storage still passes its val check).

    ``replicate`` picks ``replicate-{i}/model`` of a stacked run (0 of a single run: its ``model``). The run's
    own dataset (a stacked run's ``runs[i].data_dir``) is used when it is still there, else the training preset
    is regenerated. Returns the checkpoint directory. Raises FileNotFoundError when ``run_dir`` is no directory,
    no training run (neither ``train_config.json`` nor a model) or a run without its final model yet, ValueError
    naming a damaged ``train_config.json``, for a replicate the run does not have or when reduced-precision
    storage changes too many answers (nothing is written then).
    """
    check_checkpoint_name(name)
    if not Path(run_dir).is_dir():
        reason = "a file" if Path(run_dir).exists() else "no such directory"
        raise FileNotFoundError(f"{run_dir} is not a training run ({reason}); give the RUN_DIR of train --out RUN_DIR")
    config_file = Path(run_dir) / "train_config.json"
    recipe = read_json_object(config_file, "a training run's config").data if config_file.is_file() else {}
    runs = recipe.get("runs")  # a stacked run: each replicate has its own dataset
    source = Path(run_dir) / _replicate_folder(run_dir, replicate, recipe) / "model"
    if replicate is None and not source.exists() and any(Path(run_dir).glob("replicate-*/model/config.json")):
        raise ValueError(f"{run_dir} is a stacked run: pick one of its models with --replicate I (0-based)")
    if not (source / "config.json").is_file() and not config_file.is_file():
        raise FileNotFoundError(
            f"{run_dir} is not a training run (no train_config.json, no model/); give the RUN_DIR of train --out "
            "RUN_DIR (a sweep's: DIR/stacks/stack-K with --replicate I)"
        )
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"{source} holds no final model; finish the run first (lsa-interp train --resume)")
    model = load_model(source)
    stored = None if reevaluate else _stored_results(source, model, name, limit)
    data_dir = runs[replicate]["data_dir"] if runs and replicate is not None else recipe.get("data_dir")
    dataset = evaluation_dataset(  # reused: only the val split, for the answer check and the storage check
        model,
        data_dir=data_dir if data_dir and Path(data_dir).is_dir() else None,
        splits=("val",) if stored is not None else (*SPLIT_OF.values(), "train"),
    )
    target = Path(dest) / name
    target.parent.mkdir(parents=True, exist_ok=True)  # a nested name such as replicates/copy-20-s0
    staging = target.with_name(f".{target.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        save_model(model, staging, storage=storage)
        shipped = load_model(staging)
        info: dict[str, Any] = {"dtype": storage, "bytes": (staging / "model.safetensors").stat().st_size}
        if storage != "fp32":
            info["check"] = precision_check(model, shipped, dataset.splits["val"])
            if info["check"]["fraction"] >= MAX_CHANGED_ANSWERS:
                check = info["check"]
                raise ValueError(
                    f"{storage} storage changes {check['changed_answers']:,} of {check['tasks']:,} greedy val answers "
                    f"({check['fraction']:.3%}; allowed: under {MAX_CHANGED_ANSWERS:.1%}); keep fp32"
                )
        if stored is not None:
            result, fit = stored
        else:
            result = evaluate_model(shipped, dataset, limit=limit, progress=progress, model_name=name)
            fit = training_fit(shipped, dataset, min(FIT_ROWS, limit or FIT_ROWS), model_name=name)
        write_answer_check(count_answers(shipped, dataset.splits["val"], dataset.seed), staging)
        atomic_write(
            staging / EVALUATION_FILE,
            lambda p: p.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8"),
        )
        write_fit(fit, staging, page=False)
        if analyse is not None:
            analyse(shipped, staging)
        elsewhere = Path(dest).resolve() != CHECKPOINTS_DIR.resolve()  # evaluate finds it by its path, not its name
        reference = target.as_posix() if elsewhere else None
        card = card_markdown(name, shipped, result, info, fit, reused=stored is not None, reference=reference)
        atomic_write(staging / CARD_FILE, lambda p: p.write_text(card, encoding="utf-8"))
    except BaseException:  # nothing half-written stays behind
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)  # the shipped checkpoint stays whole until the new one takes its place
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def _replicate_folder(run_dir: str | Path, replicate: int | None, recipe: dict[str, Any]) -> str:
    """The folder of ``run_dir`` that holds ``replicate``'s ``model/`` ("" for the run's own), given the run's
    saved ``train_config.json`` (``recipe``). Raises ValueError for a replicate the run does not have, as
    ``evaluate --model RUN/replicate-I`` does (it said the replicate's model was not finished yet)."""
    if replicate is None:
        return ""
    if replicate < 0:
        raise ValueError(f"replicate {replicate} out of range: replicates count from 0")
    if isinstance(recipe.get("runs"), list):  # a stacked run: one entry per replicate
        count = len(recipe["runs"])
    elif recipe:
        count = recipe.get("replicates", 1)  # > 1: a run of the retired vmap stack
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"{run_dir}/train_config.json is damaged: replicates is {count!r}, not a whole number")
        if count == 1:
            if replicate != 0:
                raise ValueError(f"replicate {replicate} out of range: {run_dir} trained one model (replicate 0)")
            return ""  # replicate 0 of a single run is its model
    else:  # no saved config: the replicates found on disk
        return f"replicate-{replicate}"
    if replicate >= count:
        raise ValueError(f"replicate {replicate} out of range: the stack has {count} runs")
    return f"replicate-{replicate}"


def check_checkpoint_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a checkpoint name: one or more parts of letters, digits, ``-``, ``_``
    and ``.`` joined by ``/`` (``copy-200``, ``replicates/copy-20-s2``), none of them ``.`` or ``..``, nothing
    absolute. (An empty name made the checkpoints directory itself the target, which shipping replaces.)"""
    check_type(name, str, "a checkpoint name is a str such as 'copy-200'")
    parts = name.split("/")
    if not name or any(part in ("", ".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in parts):
        raise ValueError(
            f"bad checkpoint name {name!r}: use letters, digits, '-', '_' and '.', with '/' between parts "
            "(e.g. copy-200 or replicates/copy-20-s2)"
        )


def shipped_name(checkpoint_dir: str | Path) -> str | None:
    """The name a checkpoint was shipped under, as its ``evaluation.json`` records it; None without one."""
    path = Path(checkpoint_dir) / EVALUATION_FILE
    return read_json_object(path, "a shipped model's evaluation").get("model", str, None) if path.is_file() else None


def refresh_card(checkpoint_dir: str | Path, result: EvaluationResult, reference: str | None = None) -> Path:
    """Replace a shipped checkpoint's ``evaluation.json`` and the evaluation part of its ``card.md`` with
    ``result`` (an evaluation of that checkpoint on the full splits), keeping the card's header (provenance,
    storage, training fit). For evaluations that gained sections after the model was shipped.

    Returns the card's path. Raises FileNotFoundError when the directory holds no card, ValueError when the
    card has no evaluation part or ``result`` is of another model, preset or dataset seed, or of a subset. The
    header's line on how the numbers were made names this evaluation (``evaluate --model REFERENCE``, by default the
    checkpoint's name).
    """
    directory = Path(checkpoint_dir)
    card_path = directory / CARD_FILE
    if not card_path.is_file():
        raise FileNotFoundError(f"{directory} holds no {CARD_FILE}: ship the run first (lsa-interp ship)")
    header, marker, _ = card_path.read_text(encoding="utf-8").partition("## Evaluation")
    if not marker:
        raise ValueError(f"{card_path} has no '## Evaluation' part to replace")
    if result.limit is not None:
        raise ValueError(f"the evaluation covers {result.limit} rows per split; a card needs the full splits")
    old = (
        json.loads((directory / EVALUATION_FILE).read_text(encoding="utf-8"))
        if (directory / EVALUATION_FILE).is_file()
        else {}
    )
    new = result.to_dict()
    for field in ("model", "preset", "seed"):
        if field in old and old[field] != new.get(field):
            raise ValueError(f"the evaluation is of {field} {new.get(field)!r}; the checkpoint's: {old[field]!r}")
    report = markdown_report(result).replace("# Evaluation", "## Evaluation", 1)
    made = f"- evaluated with `lsa-interp evaluate --model {reference or result.model}` (numbers below)"
    header = "\n".join(made if line.startswith("- evaluated") else line for line in header.split("\n"))
    atomic_write(
        directory / EVALUATION_FILE, lambda path: path.write_text(json.dumps(new, indent=2) + "\n", encoding="utf-8")
    )
    atomic_write(card_path, lambda path: path.write_text(header + report, encoding="utf-8"))
    return card_path
