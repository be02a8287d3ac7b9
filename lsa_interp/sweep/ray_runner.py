"""Run a sweep's stacks as Ray tasks: one GPU per stack when the cluster has GPUs (else one CPU), and each
finished run's evaluation and analyses as CPU tasks.

A task whose worker dies is retried by Ray (``max_retries``); a retried stack resumes from its saved state.
The sweep directory must be on a filesystem that every node sees at the same path (the datasets, states
and models are files there); the driver follows training through the stacks' ``metrics.jsonl``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from lsa_interp.sweep.failures import FailureLog
from lsa_interp.sweep.grid import Grid
from lsa_interp.sweep.jobs import RunJob, StackJob, past
from lsa_interp.sweep.progress import SweepProgress
from lsa_interp.sweep.work import analyse_run, evaluate_run, steps_logged, train_stack
from lsa_interp.training.run_dir import StoppedBySignal
from lsa_interp.training.stack_config import StackConfig

RAY_EXTRA = "pip install 'lsa-interp[ray]'"
MAX_RETRIES = 3
"""Retries of a task whose worker process died."""
POLL_SECONDS = 1.0
CONNECT_SECONDS = 5.0
"""How long `check_address` waits for a cluster's address to accept a connection."""


def require_ray() -> Any:
    """The ``ray`` module; raises ValueError naming the extra when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray needs Ray, which is not installed; install the extra: {RAY_EXTRA}") from None
    return ray


def check_address(address: str) -> None:
    """Raise ValueError unless ``address`` is ``auto``, ``local`` or a ``[ray://]HOST:PORT`` that accepts a
    connection within `CONNECT_SECONDS` (Ray itself waits minutes on an address where nothing answers)."""
    if address in ("auto", "local"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ValueError(f"--ray {address!r}: not an address; give auto, local, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as err:
        raise ValueError(
            f"--ray {address}: nothing answers there ({err.strerror or err}); start the cluster with "
            "'ray start --head' or use --ray auto"
        ) from None


def connect(address: str) -> bool:
    """Join the Ray instance at ``address`` (``auto``: the running cluster, else a new local instance).

    Returns whether this call initialised Ray (and should shut it down). An instance already initialised in
    this process is used as it is.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False
    if address == "auto":
        try:
            ray.init(address="auto")
        except ConnectionError:
            ray.init()
    else:
        ray.init(address=address)
    return True


def _train_task(config: StackConfig, directory: Path, deadline: float | None) -> bool:
    import torch

    torch.set_num_threads(1)
    try:
        return train_stack(config, directory, deadline)
    except StoppedBySignal:  # the worker was signalled (its node going down): the state is saved, not finished
        return False


def _evaluate_task(run: RunJob, limit: int | None) -> bool:
    import torch

    torch.set_num_threads(1)
    return evaluate_run(run.model_dir, run.data_dir, run.name, limit)


def _analyse_task(run: RunJob, analysis: str, out: Path) -> bool:
    import torch

    torch.set_num_threads(1)
    return analyse_run(run.model_dir, out, analysis, run.name)


def execute_ray(
    jobs: list[StackJob],
    grid: Grid,
    deadline: float | None,
    display: SweepProgress,
    failures: FailureLog,
    address: str,
) -> None:
    """Submit every stack, then each finished stack's evaluations and analyses; wait for all of them.

    A task that raises (or whose worker died more than ``MAX_RETRIES`` times) is recorded in ``failures``; the
    other tasks go on. The display names the tasks in flight (`_in_flight`)."""
    ray = require_ray()
    started = connect(address)
    try:
        gpu = ray.cluster_resources().get("GPU", 0) > 0
        train = ray.remote(_train_task).options(
            num_gpus=1 if gpu else 0, num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False
        )
        evaluate = ray.remote(_evaluate_task).options(num_cpus=1, max_retries=MAX_RETRIES)
        analyse = ray.remote(_analyse_task).options(num_cpus=1, max_retries=MAX_RETRIES)
        pending: dict[Any, tuple[str, Any]] = {
            train.remote(job.config, job.directory, deadline): ("train", job) for job in jobs
        }
        training = {job.name: job for job in jobs}
        while pending:
            display.working(_in_flight(pending))
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            for job in training.values():
                display.trained(job.name, job.tasks(steps_logged(job.directory)))
            for ref in ready:
                kind, item = pending.pop(ref)
                if not _result(ray, ref, kind, item, failures, display):
                    continue
                if kind == "evaluate":
                    display.run_finished()
                elif kind == "train":
                    training.pop(item.name)
                    display.stack_finished(item.name)
                    for run in item.grid_runs:
                        if past(deadline):
                            continue
                        if not run.evaluated:
                            pending[evaluate.remote(run, grid.eval_limit)] = ("evaluate", run)
                        for name, out in run.missing_analyses():
                            pending[analyse.remote(run, name, out)] = (f"analyse {name}", run)
    finally:
        display.working(None)
        if started:
            ray.shutdown()


def _in_flight(pending: dict[Any, tuple[str, Any]]) -> str | None:
    """The tasks submitted and not yet returned, named as the in-process sweep names its work, the first of each
    kind and how many more (``train stack-000 +2, evaluate copy-20-random-s0``); None for none."""
    names: dict[str, list[str]] = {}
    for kind, item in pending.values():
        names.setdefault(kind, []).append(item.name)
    groups = [f"{kind} {first}" + (f" +{len(rest)}" if rest else "") for kind, (first, *rest) in names.items()]
    return ", ".join(groups) or None


def _result(ray: Any, ref: Any, kind: str, item: Any, failures: FailureLog, display: SweepProgress) -> Any:
    """``ray.get(ref)``; None when the task failed, recorded in ``failures`` with Ray's text of it (the remote
    traceback) and its own error's first line (Ray's wrapper's first line is only its task header)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as error:
        cause = getattr(error, "cause", None)
        last_line = (str(error).strip().splitlines() or [type(error).__name__])[-1]
        reason = cause if isinstance(cause, Exception) else RuntimeError(last_line)
        display.failed(failures.record(kind, item.name, reason, str(error)))
        return None
