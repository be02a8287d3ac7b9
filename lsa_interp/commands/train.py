"""CLI command ``train``: train one model (or a stack of replicates) on a preset or a saved dataset, or resume a
run. The training library is imported inside the command, so ``--help`` stays fast."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from lsa_interp.commands.common import UserError, check_device, given_options, training_preset, writable_out
from lsa_interp.data.presets import DEFAULT_DATA_SEED

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    """Add the ``train`` command to ``app``."""

    @app.command(
        "train",
        epilog="Example: lsa-interp train --preset copy-200 --seed 1 --batching alphabet --out runs/copy-200-s1\n\n"
        "Resume after an interruption: lsa-interp train --resume runs/copy-200-s1",
    )
    def train(
        ctx: typer.Context,
        out: Annotated[
            Path | None, typer.Option(help="Run directory (config, metrics.jsonl, state.pt, model/).")
        ] = None,
        preset: Annotated[
            str | None, typer.Option(help="Dataset preset to train on; default copy-20, with --data the dataset's own.")
        ] = None,
        seed: Annotated[
            int, typer.Option(min=0, help="Seed of the model's initialisation, dropout and data order.")
        ] = 0,
        data: Annotated[
            Path | None, typer.Option(help="A saved dataset; default: generate PRESET into OUT/data.")
        ] = None,
        data_seed: Annotated[
            int, typer.Option(min=0, help="Seed of the generated dataset (without --data).")
        ] = DEFAULT_DATA_SEED,
        epochs: Annotated[int, typer.Option(min=1)] = 20,
        batch_size: Annotated[int, typer.Option(min=1)] = 32,
        batching: Annotated[
            str, typer.Option(help="random, alphabet, transformation or transformation_alphabet.")
        ] = "random",
        lr: Annotated[float, typer.Option(min=0.0)] = 1e-3,
        precision: Annotated[str, typer.Option(help="fp32 (the recipe), tf32 matmuls, or bf16 autocast.")] = "fp32",
        device: Annotated[
            str,
            typer.Option(
                help="auto (CUDA if available), cpu or cuda.",
                callback=lambda value: check_device(value, ("auto", "cpu", "cuda")),
            ),
        ] = "auto",
        max_steps: Annotated[int | None, typer.Option(min=1, help="Stop after this many optimizer steps.")] = None,
        max_minutes: Annotated[float | None, typer.Option(min=0.0, help="Stop after this much wall time.")] = None,
        checkpoint_every: Annotated[int, typer.Option(min=1, help="Save the resumable state every N steps.")] = 2000,
        val_limit: Annotated[int | None, typer.Option(min=1, help="Validate on this many val rows per epoch.")] = None,
        model_config: Annotated[
            str, typer.Option(help='JSON overrides of the model config, e.g. \'{"d_model": 64, "n_heads": 4}\'.')
        ] = "{}",
        replicates: Annotated[
            int,
            typer.Option(min=1, help="Train N models as one natively stacked model (seeds SEED..SEED+N-1, one step)."),
        ] = 1,
        cuda_graph: Annotated[
            bool, typer.Option(help="On CUDA, capture the training step once as a CUDA graph and replay it.")
        ] = True,
        compile: Annotated[
            bool,
            typer.Option(
                help="Run torch.compile inside the stacked step (trains as a stack, also of one model; "
                "measure first: benchmarks/train_throughput.py --stacking native-compile).",
            ),
        ] = False,
        attention: Annotated[
            str,
            typer.Option(
                help="sdpa (torch's scaled_dot_product_attention), triton: the stacked step's own kernel for "
                "short rows and 16-wide heads (needs the triton package), or flash: FlashAttention-2's "
                "variable-length kernel over packed rows (needs --packing and --precision bf16); triton and flash "
                "train as a stack on a CUDA GPU (measure first: benchmarks/train_throughput.py --stacking "
                "native-triton,native-compile-flash-packed).",
            ),
        ] = "sdpa",
        packing: Annotated[
            bool,
            typer.Option(
                help="Pack each step's rows end to end without padding, so that only real tokens are computed (the "
                "same batches and losses up to rounding; trains as a stack; measure first: "
                "benchmarks/train_throughput.py --stacking native-compile-triton-packed).",
            ),
        ] = False,
        length_bucketing: Annotated[
            bool,
            typer.Option(
                help="Sort rows by length within windows of 50 batches: less padding (faster on CPU), "
                "but batches of similar tasks, unlike the reference's random batches."
            ),
        ] = False,
        micro_batches: Annotated[
            int,
            typer.Option(
                min=1,
                help="Cut each batch into N length-sorted parts whose gradients add up before the one optimizer step: "
                "the same batches and updates, less padding (1.18-1.27x faster on CPU with 4; eager step only).",
            ),
        ] = 1,
        architecture: Annotated[
            str,
            typer.Option(
                help="hooked (our model), or reference: the same network as a plain torch.nn.Transformer, trained by "
                "the same loop (to check a result is not our model's doing); both save a hooked checkpoint."
            ),
        ] = "hooked",
        resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory.")] = None,
        force: Annotated[bool, typer.Option(help="Overwrite a non-empty run directory.")] = False,
    ) -> None:
        """Train the paper's encoder-decoder with the reference recipe (AdamW, warm-up, linear decay)."""
        from lsa_interp.training import TrainConfig, resume_run, start_run

        if resume is not None:
            given = [name for name in given_options(ctx) if name not in ("resume", "max_steps", "max_minutes")]
            if given:
                option = "--" + given[0].replace("_", "-")
                raise UserError(f"{option} does not apply with --resume (the run keeps its config); only the bounds do")
            trainer = resume_run(resume, max_steps=max_steps, max_minutes=max_minutes)
        else:
            if out is None:
                raise UserError("give --out RUN_DIR for a new run (or --resume RUN_DIR to continue one)")
            if out.exists() and not out.is_dir():
                raise UserError(f"--out {out} is a file; give a directory for the run (a new or empty one)")
            if out.is_dir() and any(out.iterdir()) and not force:
                raise UserError(f"{out} is not empty; pass --force to overwrite it or --resume {out} to continue it")
            if data is not None and "data_seed" in given_options(ctx):
                raise UserError("--data-seed does not apply with --data (the dataset has its seed); leave it out")
            preset = training_preset(preset, data)
            _check_batch_size(batch_size, data)
            config = TrainConfig(
                data_dir=str((data if data is not None else out / "data").resolve()),
                preset=preset,
                seed=seed,
                epochs=epochs,
                batch_size=batch_size,
                batching=batching,
                lr=lr,
                precision=precision,
                device=device,
                max_steps=max_steps,
                max_minutes=max_minutes,
                checkpoint_every=checkpoint_every,
                val_limit=val_limit,
                replicates=replicates,
                cuda_graph=cuda_graph,
                compile=compile,
                attention=attention,
                packing=packing,
                length_bucketing=length_bucketing,
                micro_batches=micro_batches,
                architecture=architecture,
                model=_parse_model_config(model_config),
            )
            created = not out.exists()
            writable_out(out)
            try:
                if data is None:
                    _generate_into(preset, data_seed, out / "data")
                trainer = start_run(config, out, force=True)
            except BaseException:  # a config the trainer refuses (no CUDA, ...): no dataset left in the way of a retry
                if data is None:
                    shutil.rmtree(out if created else out / "data", ignore_errors=True)
                raise
        first = trainer.step
        with _StepProgress(trainer, console) as bar:

            def show(record: dict) -> None:
                info = f"loss {record['train_loss']:.4f}  {record['tasks_per_s']:,.0f} tasks/s  lr {record['lr']:.2e}"
                bar.update(bar.job, info=info)

            try:
                run_dir = trainer.run(progress=show)
            finally:  # the bar ends at the step reached, however the run stopped
                bar.follow()
        signum = trainer.stopped_by
        state = "model written" if signum is None else "stopped by a signal; continue with --resume"
        bounds = {"max_steps": max_steps, "max_minutes": max_minutes}
        reason = "" if signum is not None else _stop_reason(trainer, first, resume is not None, bounds)
        epochs = trainer.step / trainer.steps_per_epoch
        print(f"{run_dir}: {trainer.step} steps ({epochs:.2f} epochs), {state}" + (f"; {reason}" if reason else ""))
        if signum is not None:  # the state is saved; exit as a program stopped by that signal does (130 for Ctrl-C)
            raise typer.Exit(128 + signum)


class _StepsPerSecond(ProgressColumn):
    """Rich's rate of the bar (steps/s over its last 30 s); empty until rich has one."""

    def render(self, task: Task) -> Text:
        """The rate's text."""
        return Text(f"{task.speed:,.1f} steps/s" if task.speed else "", style="progress.data.speed")


class _StepProgress(Progress):
    """The train command's bar: it follows ``trainer.step`` whenever it is drawn (about 10 times a second), so it
    moves, and rich has a rate and an ETA, between the step records (every ``log_every`` steps), without any work in
    the training step. The step records' loss, tasks/s and learning rate go in the ``info`` field of task ``job``."""

    def __init__(self, trainer, console: Console) -> None:
        self.trainer = trainer
        super().__init__(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            _StepsPerSecond(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self.job = self.add_task("train", total=self._total(), completed=trainer.step, info="")

    def _total(self) -> int:
        """The step this invocation trains to: the recipe's end, or ``--max-steps`` (new or saved) if sooner; the
        step reached where that is past it."""
        return max(self.trainer.limit, self.trainer.step)

    def follow(self) -> None:
        """Set the bar (its one task, once added) to the trainer's step."""
        for job in self.task_ids:
            self.update(job, completed=self.trainer.step, total=self._total())

    def get_renderables(self) -> Iterable[RenderableType]:
        """The bar at the trainer's current step (rich calls this at each refresh)."""
        self.follow()
        yield from super().get_renderables()


def _stop_reason(trainer, first: int, resumed: bool, given: dict[str, float | None]) -> str:
    """Why a run that ended without a signal stopped where it did, from step ``first``: at ``--max-steps`` or
    ``--max-minutes`` (``given`` holds this command's bounds, None where not given; others were saved with a resumed
    run), with how to go on, or with nothing trained; "" for a run that trained to the end of its recipe."""
    config, step, run = trainer.config, trainer.step, trainer.run_dir
    saved = " (saved with the run)"
    if step >= trainer.total_steps:
        return "" if step > first else "trained nothing: the run has finished its recipe"
    where = f"(step {step} of {trainer.total_steps})"
    if config.max_steps is not None and step >= config.max_steps:
        bound, total = config.max_steps, "(a total step count)"
        if resumed and given["max_steps"] is None:
            stop = "stopped at" if step == bound else f"trained nothing: the run is at step {step}, past"
            return f"{stop} the run's max_steps {bound}{saved}; pass --max-steps N {total} to go further"
        if step == first:
            return f"trained nothing: the run is at step {step}, --max-steps {bound} {total} is behind it"
        return f"stopped at --max-steps {bound} {where}; continue with --resume {run} --max-steps N {total}"
    if config.max_minutes is not None and step > first:
        minutes = f"{config.max_minutes:g}"
        if resumed and given["max_minutes"] is None:
            again = f"continue with --resume {run}, or pass --max-minutes M to train longer"
            return f"stopped at the run's max_minutes {minutes}{saved}, step {step} of {trainer.total_steps}; {again}"
        return f"stopped at --max-minutes {minutes} {where}; continue with --resume {run}"
    return "" if step > first else "trained nothing"


def _parse_model_config(text: str) -> dict:
    """The ``--model-config`` JSON object, checked against `ModelConfig`."""
    from lsa_interp.model import ModelConfig

    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"--model-config is not valid JSON ({err})") from None
    if not isinstance(overrides, dict):
        raise UserError("--model-config must be a JSON object such as '{\"d_model\": 64}'")
    ModelConfig.from_dict(overrides)
    return overrides


def _generate_into(preset: str, seed: int, out: Path) -> None:
    """Generate ``preset`` into ``out`` unless a dataset of that preset and seed is already there."""
    from lsa_interp.data import generate_dataset, get_preset, read_manifest, save_dataset

    config = get_preset(preset)
    if (out / "manifest.json").is_file():
        manifest = read_manifest(out)
        if (manifest["preset"], manifest["seed"]) == (preset, seed):
            return
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} holds no dataset (no manifest.json); move it away or give --data DATASET")
    console.print(f"generating {preset} (seed {seed}) into {out}")
    save_dataset(generate_dataset(config, seed=seed), out, force=True)


def _check_batch_size(batch_size: int, data: Path | None) -> None:
    """Raise UserError when ``--batch-size`` exceeds the training rows of ``--data`` (read from its manifest, before
    anything is loaded); without a dataset there yet, the trainer checks it once the rows are made."""
    from lsa_interp.data.dataset import MANIFEST, read_manifest

    if data is None or not (data / MANIFEST).is_file():
        return
    rows = read_manifest(data)["files"].get("train", {}).get("rows", batch_size)
    if batch_size > rows:
        raise UserError(f"--batch-size {batch_size:,} exceeds the {rows:,} training rows of --data {data}")
