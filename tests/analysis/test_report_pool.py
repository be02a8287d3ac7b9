"""The report over a pool of processes: which steps go where, in which order, with which model, sizes and seed.

The pool is replaced by one that runs its initializer and every submitted call in this process (the real pool's
workers are spawned, and a test of them is slow: `test_report.py`); the steps and the assembly are stand-ins that
record what they are given."""

from __future__ import annotations

import io
from concurrent.futures import Future

import pytest
import torch

from lsa_interp.analysis import report_pool
from lsa_interp.analysis.report import REPORT_SIZES, STEPS, Report
from lsa_interp.model import HookedEncoderDecoder
from tests.helpers import TINY


class _InlinePool:
    """A process pool that runs its initializer when entered and each call when submitted, in this process."""

    made: list[_InlinePool] = []

    def __init__(self, max_workers, mp_context, initializer, initargs):
        self.max_workers, self.mp_context, self.initializer, self.initargs = (
            max_workers,
            mp_context,
            initializer,
            initargs,
        )
        self.submitted: list[str] = []
        _InlinePool.made.append(self)

    def __enter__(self):
        self.initializer(*self.initargs)
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        self.submitted.extend(args)
        future = Future()
        future.set_result(fn(*args))
        return future


@pytest.fixture
def pool(monkeypatch):
    """The inline pool, stand-ins for `run_step` and `assemble`; restores what a worker's start changes."""
    _InlinePool.made = []
    monkeypatch.setattr(report_pool, "ProcessPoolExecutor", _InlinePool)
    steps, assembled = [], []

    def run_step(model, model_name, seed, name):
        steps.append((model, model_name, seed, name))
        return f"outcome of {name}"

    def assemble(model, model_name, seed, outcomes):
        assembled.append((model, model_name, seed, outcomes))
        return Report(model_name)

    monkeypatch.setattr(report_pool, "run_step", run_step)
    monkeypatch.setattr(report_pool, "assemble", assemble)
    sizes, threads = dict(REPORT_SIZES), torch.get_num_threads()
    yield steps, assembled, _InlinePool.made
    REPORT_SIZES.clear()
    REPORT_SIZES.update(sizes)
    torch.set_num_threads(threads)
    report_pool._WORKER.clear()


@pytest.fixture
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(TINY).eval()


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_one_worker_runs_every_step_here_in_the_reports_order(pool, model):
    steps, assembled, made = pool
    done = []
    report = report_pool.run_report_pool(model, "m", 4, workers=1, progress=done.append)
    assert made == [] and report.model == "m"
    assert [(s[0] is model, s[1], s[2], s[3]) for s in steps] == [(True, "m", 4, name) for name in STEPS]
    assert done == list(STEPS)
    ((given, name, seed, outcomes),) = assembled
    assert (given is model, name, seed) == (True, "m", 4)
    assert outcomes == {step: f"outcome of {step}" for step in STEPS}


def test_workers_get_the_model_name_seed_and_sizes_and_the_costliest_steps_first(pool, model, monkeypatch):
    steps, assembled, made = pool
    monkeypatch.setitem(REPORT_SIZES, "rasp", 7)
    torch.set_num_threads(2)
    done = []
    report_pool.run_report_pool(model, "m", 3, workers=3, progress=done.append)
    (executor,) = made
    assert executor.max_workers == 3 and executor.mp_context.get_start_method() == "spawn"
    assert executor.initializer is report_pool._start_worker
    blob, name, seed, sizes = executor.initargs
    assert (name, seed, sizes) == ("m", 3, REPORT_SIZES) and sizes["rasp"] == 7
    assert sizes is not REPORT_SIZES  # a copy travels to the workers
    assert torch.get_num_threads() == 1  # the worker's start: one torch thread
    assert executor.submitted == list(report_pool.COST_ORDER) and sorted(done) == sorted(STEPS)
    assert all(s[0] is not model and _same_weights(s[0], model) for s in steps)  # the worker's own copy
    assert [s[1:] for s in steps] == [("m", 3, name) for name in report_pool.COST_ORDER]
    ((given, name, seed, outcomes),) = assembled
    assert (given is model, name, seed) == (True, "m", 3)
    assert outcomes == {step: f"outcome of {step}" for step in STEPS}


def test_a_worker_starts_with_the_sizes_it_is_given(pool, model):
    sizes = {**REPORT_SIZES, "roles": 5, "splice_pairs": 2}
    buffer = io.BytesIO()
    torch.save(model, buffer)
    report_pool._start_worker(buffer.getvalue(), "n", 9, sizes)
    assert REPORT_SIZES == sizes and torch.get_num_threads() == 1
    assert (report_pool._WORKER["name"], report_pool._WORKER["seed"]) == ("n", 9)
    assert _same_weights(report_pool._WORKER["model"], model)
    steps, _, _ = pool
    assert report_pool._run("roles") == ("roles", "outcome of roles")
    assert steps[0][1:] == ("n", 9, "roles") and steps[0][0] is report_pool._WORKER["model"]


def test_the_pool_has_at_most_one_worker_per_step_and_defaults_to_the_cpu_count(pool, model, monkeypatch):
    steps, _, made = pool
    report_pool.run_report_pool(model, "m", workers=len(STEPS) + 5)
    monkeypatch.setattr(report_pool.os, "cpu_count", lambda: 2)
    report_pool.run_report_pool(model, "m")
    assert [executor.max_workers for executor in made] == [len(STEPS), 2]
    assert {s[2] for s in steps} == {0}  # the default seed
    monkeypatch.setattr(report_pool.os, "cpu_count", lambda: None)
    report_pool.run_report_pool(model, "m")  # an unknown CPU count: one worker, in this process
    assert len(made) == 2 and len(steps) == 3 * len(STEPS)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="at least 1"):
            report_pool.run_report_pool(model, "m", workers=bad)


def test_no_progress_callback_is_needed(pool, model):
    steps, _, _ = pool
    report_pool.run_report_pool(model, "m", workers=1)
    report_pool.run_report_pool(model, "m", workers=2)
    assert len(steps) == 2 * len(STEPS)
