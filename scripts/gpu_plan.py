"""Plan one GPU session's training: the next runs of a queue grid that one stack can finish in the time left.

This takes the queue (a grid file whose run order is the order to train in, e.g. grids/queue.toml), the runs
already finished (evaluated model directories under ``--done``, e.g. ``analyses/runs`` and ``checkpoints``: a
run counts when it trained all its epochs and its ``config.json`` names it, or, for a model trained on its own,
shows the queue's recipe, `lsa_interp.sweep.done`; a finished fp32 run also stands for the same run in a lower
precision, unless the queue asks for both), and the stack step times that ``benchmarks/train_throughput.py
--json`` measured on this kind of GPU (``--bench`` repeats: the native stack's and the compiled stack's
documents, and the triton attention's where it was timed). It picks the largest stack of the next runs (one
precision: the first unfinished run's) whose estimated time fits ``--minutes`` (with ``--stacking auto``, in
whichever measured stacking trains more runs), and writes a grid file of exactly those runs for
``lsa-interp sweep``:

    python3 scripts/gpu_plan.py --queue grids/queue.toml --done analyses/runs --done checkpoints --stacking auto \
        --bench runs/gpu-session/stacking.json --bench runs/gpu-session/compile.json --minutes 18 \
        --out runs/session.toml

When not even one run fits, ``--carry-mib M`` plans a stack that continues over several sessions: a GPU
session can carry up at most M MiB of resumable state (12 bytes per parameter and run: the fp32 weights and
AdamW's two moments, about 16 MiB per run of the paper's model), so the stack holds at most that many runs,
as many as train the most runs per minute; its ``sessions`` says how many sessions it needs. Without
``--carry-mib`` (0) a stack must finish in the session that starts it.

Moving state and models costs device calls: a call carries up about `UPLOAD_MIB_PER_CALL` MiB (the working
tree's 64 MiB less the checkout; the first call of a session also carries `WHEELS_MIB` of wheels) and ``pack``
brings back `PACK_MIB_PER_CALL` MiB. With ``--call-seconds S`` every call beyond the first of each direction
costs S seconds of the session: the estimate adds them, and the
plan's ``stop_early_seconds`` (the extra ``pack`` calls its models or state need) tells the session to stop
training that much earlier than its deadline. The state waits between GPU sessions on the CPU machine, which
may be replaced: ``--carry-survival P`` (the chance it is still there at the next GPU session) weights a
continued stack's runs per minute by ``P ** (sessions - 1)``, so that a long stack must earn its risk.
``--elsewhere NAME`` leaves a queue run to another machine that trains it (this project's CPUs: `cpu_runs.sh`
prints the names), as if it were done.
``--session-minutes`` is what a later session has (``--minutes`` may be a short rest of this one, after a
benchmark): the count of sessions, and so the choice, comes from it.

The estimate: the stack's longest run (``epochs x`` its steps per epoch, bounded above by
``ceil(rows / batch) + groups``) times the step time at that stack size (interpolated linearly between the
measured sizes, extrapolated from the two largest beyond them), plus ``--overhead`` for validation, plus a
fixed start-up time (every session; with ``--check-seconds S``, S more per GPU check that `gpu_train.sh`
runs on each new machine beside the start-up of a compiled, triton or packed stack, `gpu_checks`; none this
session for a kind given as ``--checked KIND``, whose checks passed on this machine; a kind given as ``--failed
KIND`` failed them here, and its stackings give way to the plain stack), plus ``--eval-seconds`` per run for
evaluation and the queue's analyses. It prints the plan as JSON. Exit code 2 with one line when nothing fits or an
input is bad.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from lsa_interp.evaluation.paper_tables import RECIPE_PRECISION
from lsa_interp.model.config import ModelConfig
from lsa_interp.sweep.done import finished_runs
from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.plan import SweepRun, expand, load_sweep_grid
from lsa_interp.sweep.stackings import (
    AUTO_STACKINGS,
    STACKING_RECIPE,
    check_kind,
    gpu_checks,
    merge_benchmarks,
    step_ms_at,
    step_times,
)
from lsa_interp.utils import atomic_write

TRAIN_ROWS = 359_804
"""Training rows of every paper preset: each is matched to copy-20's size (docs/data.md)."""
TRANSFORMATION_GROUPS = 11
"""Batch groups of transformation batching: the 10 seen transformations and copy (an upper bound)."""
STATE_BYTES_PER_PARAMETER = 12
"""Resumable state of one run per parameter: fp32 weights and AdamW's two fp32 moments."""
MODEL_BYTES_PER_PARAMETER = 4
"""A final model per parameter: fp32 weights."""
UPLOAD_MIB_PER_CALL = 17.0
"""Carried state one device call takes up: 64 MiB of working tree less the checkout (44 MiB on 2026-12-07, 40 of
them the shipped checkpoints) and a margin; tests/test_gpu_plan.py checks it against the checkout."""
WHEELS_MIB = 14.0
"""What the first call of every session carries besides the state: the wheels of `scripts/gpu_wheels.sh`."""
PACK_MIB_PER_CALL = 60.0
"""What one ``gpu_train.sh pack`` call brings back: 4 chunks of 15 MiB."""


@dataclass(frozen=True)
class SessionPlan:
    """The runs of one stack, its size, and the estimate behind the choice."""

    runs: tuple[SweepRun, ...]
    precision: str
    step_ms: float
    steps: int
    minutes: float
    remaining: int
    batch_size: int
    stacking: str
    sessions: int
    stop_early_seconds: float
    survival: float = 1.0

    @property
    def expected_rate(self) -> float:
        """Runs per minute, times the chance that the state survives every wait between the plan's sessions."""
        return len(self.runs) / self.minutes * self.survival

    def summary(self) -> dict[str, Any]:
        """A JSON-serialisable description of the plan."""
        return {
            "replicates": len(self.runs),
            "runs": [run.name for run in self.runs],
            "precision": self.precision,
            "stacking": self.stacking,
            "step_ms": round(self.step_ms, 3),
            "steps": self.steps,
            "batch_size": self.batch_size,
            "estimated_minutes": round(self.minutes, 2),
            "sessions": self.sessions,
            "stop_early_seconds": round(self.stop_early_seconds, 1),
            "survival": round(self.survival, 3),
            "runs_left_after": self.remaining - len(self.runs),
        }


def steps_per_epoch(run: SweepRun, grid: Grid, batch_size: int) -> int:
    """An upper bound on the run's steps per epoch: a full batch per ``batch_size`` rows plus one per group."""
    n_alphabets = grid.dataset_config(run.dataset).n_alphabets + 1
    groups = {
        "random": 1,
        "alphabet": n_alphabets,
        "transformation": TRANSFORMATION_GROUPS,
        "transformation_alphabet": n_alphabets * TRANSFORMATION_GROUPS,
    }[run.batching]
    return math.ceil(TRAIN_ROWS / batch_size) + groups - 1


def stack_steps(runs: tuple[SweepRun, ...], grid: Grid, batch_size: int) -> int:
    """Steps of a stack of ``runs``: its longest run's (an upper bound), or the recipe's ``max_steps`` if fewer."""
    steps = max(run.epochs * steps_per_epoch(run, grid, batch_size) for run in runs)
    return min(steps, grid.recipe.get("max_steps") or steps)


def state_mib(grid: Grid) -> float:
    """MiB of resumable state per run of the queue's model (`STATE_BYTES_PER_PARAMETER` per parameter)."""
    return _parameters(grid) * STATE_BYTES_PER_PARAMETER / 2**20


def model_mib(grid: Grid) -> float:
    """MiB of one final model of the queue's model (`MODEL_BYTES_PER_PARAMETER` per parameter)."""
    return _parameters(grid) * MODEL_BYTES_PER_PARAMETER / 2**20


def _parameters(grid: Grid) -> int:
    return ModelConfig(**grid.model).n_params


def extra_calls(mib: float, per_call: float) -> int:
    """Device calls beyond the first that moving ``mib`` MiB takes at ``per_call`` MiB a call."""
    return max(0, math.ceil(mib / per_call) - 1)


def _finished(run: SweepRun, done: set[str], queued: set[str]) -> bool:
    """Whether ``run`` is done: by name, or by its fp32 twin (the recipe's precision) unless the queue asks for
    both, as the precision check does."""
    twin = replace(run, precision=RECIPE_PRECISION).name
    return run.name in done or (twin in done and twin not in queued)


def plan_session(
    grid: Grid,
    done: set[str],
    bench: dict[str, Any],
    minutes: float,
    stacking: str = "native",
    max_replicates: int = 64,
    overhead: float = 0.05,
    startup_seconds: float = 90.0,
    eval_seconds: float = 15.0,
    carry_mib: float = 0.0,
    call_seconds: float = 0.0,
    carry_survival: float = 1.0,
    session_minutes: float | None = None,
    check_seconds: float = 0.0,
    checked: Collection[str] = (),
    failed: Collection[str] = (),
) -> SessionPlan:
    """The largest stack of the queue's next unfinished runs that fits in ``minutes``: the first unfinished
    run's precision, and the later unfinished runs of that precision in queue order. When none fits and
    ``carry_mib`` is positive, the stack of at most ``carry_mib`` MiB of state that trains the most runs per
    minute, over as many sessions as it needs: this one (``minutes``) and later ones of ``session_minutes``
    each (default: ``minutes``). ``call_seconds``: what each device call beyond the first of a direction costs;
    ``check_seconds``: what each of the stacking's `gpu_checks` adds to the start-up of every session, but this
    session's where they already passed on this machine (their `check_kind` in ``checked``); a stacking whose checks
    failed here (its kind in ``failed``) is not planned: the plain stack (``native``) takes its place;
    ``carry_survival``: the chance a carried state survives to the next session (the module doc).
    ``stacking="auto"`` plans with each of `AUTO_STACKINGS` that ``bench`` measured at that precision and keeps
    the plan that finishes in this session with the most runs, else the one with the most runs per minute (the
    shorter one on a tie, native first).

    Raises ValueError when every run is finished, not even one run fits, ``carry_survival`` is not in (0, 1], or
    ``check_seconds`` is negative.
    """
    if not 0 < carry_survival <= 1:
        raise ValueError(f"--carry-survival must be in (0, 1], not {carry_survival:g}")
    if check_seconds < 0:
        raise ValueError(f"--check-seconds must be 0 or more, not {check_seconds:g}")
    if stacking == "auto":
        limits = (max_replicates, overhead, startup_seconds, eval_seconds, carry_mib, call_seconds, carry_survival)
        limits += (session_minutes, check_seconds, checked)
        plans, errors = [], []
        for mode in (mode for mode in AUTO_STACKINGS if check_kind(mode) not in failed):
            try:
                plans.append(plan_session(grid, done, bench, minutes, mode, *limits))
            except ValueError as error:
                errors.append(error)
        if not plans:
            raise errors[0]
        return max(plans, key=_preference)
    if check_kind(stacking) and check_kind(stacking) in failed:
        stacking = "native"
    later_startup = startup_seconds + check_seconds * gpu_checks(stacking)
    startup_seconds = startup_seconds if check_kind(stacking) in checked else later_startup
    queue = expand(grid)
    queued = {run.name for run in queue}
    left = [run for run in queue if not _finished(run, done, queued)]
    if not left:
        raise ValueError("every run of the queue is finished")
    precision = left[0].precision
    candidates = [run for run in left if run.precision == precision][:max_replicates]
    table = step_times(bench, stacking, precision)
    batch = int(grid.recipe.get("batch_size", 32))
    best, per_model = None, model_mib(grid)
    for size in range(1, len(candidates) + 1):
        runs = tuple(candidates[:size])
        steps, ms = stack_steps(runs, grid, batch), step_ms_at(table, size)
        pack = extra_calls(size * per_model, PACK_MIB_PER_CALL) * call_seconds
        total = (steps * ms / 1000 * (1 + overhead) + startup_seconds + eval_seconds * size + pack) / 60
        if total <= minutes:
            best = SessionPlan(runs, precision, ms, steps, total, len(left), batch, stacking, 1, pack)
    if best is not None:
        return best
    if carry_mib <= 0:
        raise ValueError(f"not even one {precision} run fits in {minutes:g} minutes at this benchmark's step times")
    costs = (overhead, (startup_seconds, later_startup), eval_seconds, call_seconds)
    later = minutes if session_minutes is None else session_minutes
    return _continued_plan(candidates, grid, table, (minutes, later), carry_mib, costs, len(left), stacking,
                           carry_survival)  # fmt: skip


def _preference(plan: SessionPlan) -> tuple:
    """How `plan_session` ranks plans: finishing in this session, then runs (or the expected runs per minute of
    a continued stack), then speed."""
    finishes = plan.sessions == 1
    return finishes, len(plan.runs) if finishes else plan.expected_rate, -plan.minutes


def _continued_plan(
    candidates: list[SweepRun],
    grid: Grid,
    table: dict[int, float],
    minutes: tuple[float, float],
    carry_mib: float,
    costs: tuple,
    remaining: int,
    stacking: str,
    survival: float,
) -> SessionPlan:
    """The stack of at most ``carry_mib`` MiB of state that trains the most runs per minute (weighted by
    ``survival ** (sessions - 1)``, the chance its state survives every wait between sessions), over this
    session and later ones (``minutes``: this one's and a later one's), each of which starts up again and moves
    the state down and (but the first) up again (``costs``: overhead, start-up (this session's, a later one's),
    evaluation and call seconds as in `plan_session`). Raises ValueError when a run's state or the start-up does
    not fit."""
    overhead, (startup_seconds, later_startup), eval_seconds, call_seconds = costs
    now, later = minutes
    per_run = state_mib(grid)
    if per_run > carry_mib or now <= startup_seconds / 60:
        raise ValueError(
            f"not even one run fits in {now:g} minutes, and a stack cannot continue: one run's state is "
            f"{per_run:.1f} MiB of the {carry_mib:g} MiB a session carries, start-up {startup_seconds:g} s"
        )
    batch = int(grid.recipe.get("batch_size", 32))
    best = None
    for size in range(1, min(len(candidates), int(carry_mib // per_run)) + 1):
        runs = tuple(candidates[:size])
        steps, ms = stack_steps(runs, grid, batch), step_ms_at(table, size)
        pack = extra_calls(size * per_run, PACK_MIB_PER_CALL) * call_seconds
        upload = extra_calls(size * per_run + WHEELS_MIB, UPLOAD_MIB_PER_CALL) * call_seconds
        first, each = now - (startup_seconds + pack) / 60, later - (later_startup + pack + upload) / 60
        if first <= 0 or each <= 0:
            continue
        work = (steps * ms / 1000 * (1 + overhead) + eval_seconds * size) / 60
        sessions = 1 + math.ceil(max(0.0, work - first) / each)
        total = work + (startup_seconds + sessions * pack + (sessions - 1) * (later_startup + upload)) / 60
        plan = SessionPlan(runs, candidates[0].precision, ms, steps, total, remaining, batch, stacking, sessions, pack)
        plan = replace(plan, survival=survival ** (sessions - 1))
        if best is None or plan.expected_rate > best.expected_rate:
            best = plan
    if best is None:
        raise ValueError(f"not even one run fits in {now:g} minutes with its start-up and transfers")
    return best


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def session_grid(grid: Grid, plan: SessionPlan) -> str:
    """A grid file with exactly the plan's runs in one stack, the queue's recipe with what the plan's stacking
    adds to it, and the queue's model and analyses."""
    recipe = {**grid.recipe, **STACKING_RECIPE[plan.stacking]}
    lines = [f"# Written by scripts/gpu_plan.py: {len(plan.runs)} runs, about {plan.minutes:.1f} minutes."]
    lines.append(f"replicates = {len(plan.runs)}")
    lines.append(f"analyses = {_toml_value(list(grid.analyses))}")
    if grid.eval_limit is not None:
        lines.append(f"eval_limit = {grid.eval_limit}")
    for table, values in (("recipe", recipe), ("model", grid.model)):
        if values:
            lines += ["", f"[{table}]"] + [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    for name in dict.fromkeys(run.dataset for run in plan.runs if run.dataset in grid.datasets):
        options = {k: v for k, v in grid.datasets[name].to_dict().items() if k != "name" and v is not None}
        lines += ["", f"[datasets.{name}]"] + [f"{key} = {_toml_value(value)}" for key, value in options.items()]
    for run in plan.runs:
        cell = {**asdict(run), "presets": [run.dataset], "batching": [run.batching], "seeds": [run.seed]}
        del cell["dataset"], cell["seed"]
        lines += ["", "[[cells]]"] + [f"{key} = {_toml_value(value)}" for key, value in cell.items()]
    return "\n".join(lines) + "\n"


def elsewhere(grid: Grid, names: list[str]) -> set[str]:
    """``names``, runs of the queue that train elsewhere (this project's CPU machine, `scripts/cpu_runs.sh`), which
    the plan leaves to it as if they were done. Raises ValueError naming one that is not a run of the queue."""
    queued = [run.name for run in expand(grid)]
    unknown = [name for name in names if name not in queued]
    if unknown:
        raise ValueError(f"--elsewhere: not a run of the queue: {', '.join(unknown)} (its runs: {queued[0]}, ...)")
    return set(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=Path, required=True, help="grid file listing the runs in training order")
    parser.add_argument("--done", type=Path, action="append", default=[], help="directory of finished runs")
    parser.add_argument(
        "--bench", type=Path, action="append", required=True, help="train_throughput.py --json output (repeatable)"
    )
    parser.add_argument("--minutes", type=float, required=True, help="minutes the stack may take, evaluation included")
    parser.add_argument("--stacking", default="native", choices=[*STACKING_RECIPE, "auto"])
    parser.add_argument("--max-replicates", type=int, default=64)
    parser.add_argument("--startup-seconds", type=float, default=90.0, help="a session's start-up before training")
    parser.add_argument("--eval-seconds", type=float, default=15.0, help="evaluation and analyses per run")
    parser.add_argument(
        "--check-seconds", type=float, default=0.0, help="start-up per GPU check of a compiled, triton or packed stack"
    )
    parser.add_argument(
        "--checked", action="append", default=[], help="a check kind (gpu_train.sh) that passed here: not charged now"
    )
    parser.add_argument(
        "--failed", action="append", default=[], help="a check kind that failed here: its stackings are not planned"
    )
    parser.add_argument(
        "--carry-mib", type=float, default=0.0, help="state a session carries up: plan a stack over sessions (0: no)"
    )
    parser.add_argument(
        "--call-seconds", type=float, default=0.0, help="device seconds each extra transfer call costs (0: none)"
    )
    parser.add_argument(
        "--carry-survival", type=float, default=1.0, help="chance a carried state is there at the next session"
    )
    parser.add_argument(
        "--session-minutes", type=float, help="a later session's minutes, for a continued stack (default: --minutes)"
    )
    parser.add_argument(
        "--elsewhere", action="append", default=[], help="a queue run training elsewhere (cpu_runs.sh): left to it"
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the session's grid file")
    args = parser.parse_args(argv)
    try:
        grid = load_sweep_grid(args.queue)
        bench = merge_benchmarks([json.loads(path.read_text(encoding="utf-8")) for path in args.bench])
        missing = [str(root) for root in args.done if not root.is_dir()]
        if missing:
            raise ValueError(f"--done: not a directory: {', '.join(missing)}")
        plan = plan_session(
            grid,
            finished_runs(args.done, grid) | elsewhere(grid, args.elsewhere),
            bench,
            args.minutes,
            stacking=args.stacking,
            max_replicates=args.max_replicates,
            startup_seconds=args.startup_seconds,
            eval_seconds=args.eval_seconds,
            carry_mib=args.carry_mib,
            call_seconds=args.call_seconds,
            carry_survival=args.carry_survival,
            session_minutes=args.session_minutes,
            check_seconds=args.check_seconds,
            checked=args.checked,
            failed=args.failed,
        )
        text = session_grid(grid, plan)
    except (OSError, ValueError) as error:
        print(f"gpu_plan: error: {error}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    print(json.dumps({**plan.summary(), "grid": str(args.out)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
