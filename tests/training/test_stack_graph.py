"""The stack's CUDA-graph step (CUDA only): graph replays train like eager steps, compiling inside the graph
changes nothing, bf16 trains, and a graphed stack resumes where it stopped."""

from __future__ import annotations

import json

import jaxtyping
import numpy as np
import pytest
import torch

from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.transformations import SEEN
from lsa_interp.training import RunSpec, StackConfig, StackTrainer
from tests.helpers import SMALL_MODEL

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    dirs = []
    for window, seed in ((3, 3), (4, 4)):
        config = DatasetConfig(
            name=f"tiny{window}", n_alphabets=4, window_lengths=(window,), n_reshuffle=1, n_new_alphabets=4,
            train_transformations=SEEN[:3],
        )  # fmt: skip
        dirs.append(save_dataset(generate_dataset(config, seed=seed), tmp_path_factory.mktemp("data") / f"t{window}"))
    return dirs


def _config(data_dirs, **overrides):
    runs = (
        RunSpec(str(data_dirs[0]), seed=1, batching="random", epochs=2),
        RunSpec(str(data_dirs[1]), seed=2, batching="alphabet", epochs=3),
        RunSpec(str(data_dirs[0]), seed=3, batching="alphabet", epochs=3),
    )
    base = dict(
        runs=runs, device="cuda", batch_size=32, val_limit=16, warmup_start=1.0, log_every=5,
        model={**SMALL_MODEL, "dropout": 0.0},
    )  # fmt: skip
    return StackConfig(**{**base, **overrides})


def _trained(data_dirs, run_dir, **overrides) -> torch.Tensor:
    trainer = StackTrainer.start(_config(data_dirs, **overrides), run_dir)
    trainer.run()
    return trainer.model.flat.detach().cpu()


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def test_graph_replays_train_like_eager_steps(data_dirs, tmp_path):
    start = _trained(data_dirs, tmp_path / "one", cuda_graph=False, max_steps=1)
    eager = _trained(data_dirs, tmp_path / "eager", cuda_graph=False, max_steps=12)
    graphed = _trained(data_dirs, tmp_path / "graph", cuda_graph=True, max_steps=12)
    moved = _gap(eager, start)
    assert moved > 1e-3 and _gap(eager, graphed) < 1e-3 * max(moved, 1.0)


def test_compiling_inside_the_graph_changes_nothing(data_dirs, tmp_path, monkeypatch):
    # Dynamo cannot trace the shape checks that jaxtyping's pytest hook wraps around the model's methods (it
    # raises TypeCheckError on correct shapes); outside pytest there are none to trace.
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    start = _trained(data_dirs, tmp_path / "one", max_steps=1)
    plain = _trained(data_dirs, tmp_path / "plain", max_steps=12)
    compiled = _trained(data_dirs, tmp_path / "compiled", max_steps=12, compile=True)
    moved = _gap(plain, start)
    assert moved > 1e-3 and _gap(plain, compiled) < 1e-3 * max(moved, 1.0)


def test_a_graphed_stack_with_dropout_in_bf16_trains_to_the_end(data_dirs, tmp_path):
    config = _config(data_dirs, precision="bf16", model=SMALL_MODEL, warmup_start=1e-4)
    trainer = StackTrainer.start(config, tmp_path)
    trainer.run()
    assert (tmp_path / "done").is_file() and trainer.step == trainer.total_steps
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["type"] == "step"]
    assert steps[-1]["train_loss"] < steps[0]["train_loss"]
    spe = trainer.steps_per_epoch
    ends = range(spe, trainer.total_steps + 1, spe)
    expected = [(end, r) for end in ends for r in range(3) if trainer.plan.total_steps[r] > end - spe]
    assert [(r["step"], r["replicate"]) for r in records if r["type"] == "epoch"] == expected
    assert expected[-1][0] == trainer.total_steps and len(expected) < 3 * len(ends)  # replicate 0 stopped early


def test_a_graphed_stack_resumes_where_it_stopped(data_dirs, tmp_path):
    whole = _trained(data_dirs, tmp_path / "whole", max_steps=30)
    _trained(data_dirs, tmp_path / "cut", max_steps=17)
    resumed = StackTrainer.resume(tmp_path / "cut", max_steps=30)
    assert resumed.step == 17
    resumed.run()
    assert resumed.step == 30 and (tmp_path / "cut" / "replicate-2" / "model").is_dir()
    assert _gap(resumed.model.flat.detach().cpu(), whole) < 1e-3


TWO_HEADS = {**SMALL_MODEL, "n_heads": 2}
"""16-wide heads, as the paper's model has: what the triton attention computes."""


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_triton(), reason="needs the triton package")
@pytest.mark.parametrize("compile", [False, True], ids=["plain", "compiled"])
def test_the_triton_attention_trains_like_sdpa_in_the_graph(data_dirs, tmp_path, monkeypatch, compile):
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", compile)  # see the test above
    start = _trained(data_dirs, tmp_path / "one", max_steps=1, model={**TWO_HEADS, "dropout": 0.0})
    sdpa = _trained(data_dirs, tmp_path / "sdpa", max_steps=12, model={**TWO_HEADS, "dropout": 0.0})
    ours = _trained(
        data_dirs, tmp_path / "triton", max_steps=12, model={**TWO_HEADS, "dropout": 0.0}, attention="triton",
        compile=compile,
    )  # fmt: skip
    moved = _gap(sdpa, start)
    assert moved > 1e-3 and _gap(sdpa, ours) < 1e-3 * max(moved, 1.0)


@pytest.mark.parametrize(
    "compile, attention, packing",
    [(False, "sdpa", False), (True, "sdpa", False), (False, "triton", False), (True, "triton", False),
     (True, "sdpa", True), (True, "triton", True), (True, "flash", True)],
    ids=["plain", "compiled", "triton", "triton-compiled", "compiled-packed", "triton-compiled-packed",
         "flash-compiled-packed"],
)  # fmt: skip
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_each_graph_replay_draws_fresh_dropout_masks(
    data_dirs, tmp_path, monkeypatch, dropout, compile, attention, packing
):
    """The same step replayed from the same weights (lr 0): with dropout its losses differ at every replay (the
    graph advances the CUDA generator's offset; compiled, inductor's own random numbers must too; the triton
    attention's seed advances in the graph), without dropout they agree. scripts/gpu_train.sh runs the compiled
    case before it trains a compiled stack."""
    if attention == "triton" and not _has_triton():
        pytest.skip("needs the triton package")
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", compile)  # see the test above
    model = {**(TWO_HEADS if attention == "triton" else SMALL_MODEL), "dropout": dropout}
    precision = "bf16" if attention == "flash" else "fp32"
    config = _config(
        data_dirs, lr=0.0, model=model, compile=compile, attention=attention, packing=packing, precision=precision
    )
    trainer = StackTrainer.start(config, tmp_path / "run")
    trainer.train_step()  # loads the first window, captures the graph and replays step 0
    trainer.stepper.take_losses()
    replays = []
    for _ in range(3):
        trainer.stepper.cursor.zero_()
        trainer.stepper.run(0)
        replays.append(trainer.stepper.take_losses())
    gaps = [float((a - b).abs().max()) for a, b in ((replays[0], replays[1]), (replays[1], replays[2]))]
    assert all(gap > 1e-4 for gap in gaps) if dropout else all(gap < 1e-6 for gap in gaps)


def _step_losses(run_dir) -> torch.Tensor:
    """Each logged step's training loss per replicate, ``[step, replicate]``."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return torch.tensor([r["train_loss_by_replicate"] for r in records if r["type"] == "step"], dtype=torch.float64)


@pytest.mark.parametrize(
    "compile, attention", [(False, "sdpa"), (True, "sdpa"), (False, "triton"), (True, "triton")],
    ids=["plain", "compiled", "triton", "triton-compiled"],
)  # fmt: skip
def test_a_packed_graph_trains_like_the_padded_one(data_dirs, tmp_path, monkeypatch, compile, attention):
    """The packed stack computes the padded stack's loss at every one of 12 steps (to 1e-4 relative; step 1,
    from the same weights, to 1e-5). Its weights after 12 steps agree only loosely: AdamW's first steps move
    each weight by about ``lr`` in the direction of its gradient's sign, so a weight whose gradient is near
    zero moves either way on rounding alone. Measured on the CPU (2026-11-27), scaling the initial weights by
    1 + 1e-5 noise moves them 1.8e-3 apart after 12 steps (the packed H100 stack with the triton attention,
    compiled: 1.77e-3) while the losses stay within 4e-6; a wrong attention changes the first loss itself."""
    if attention == "triton" and not _has_triton():
        pytest.skip("needs the triton package")
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", compile)  # see the compile test above
    model = {**TWO_HEADS, "dropout": 0.0}
    start = _trained(data_dirs, tmp_path / "one", max_steps=1, model=model)
    padded = _trained(data_dirs, tmp_path / "padded", max_steps=12, model=model, log_every=1)
    packed = _trained(
        data_dirs, tmp_path / "packed", max_steps=12, model=model, log_every=1, packing=True, compile=compile,
        attention=attention,
    )  # fmt: skip
    expected, losses = _step_losses(tmp_path / "padded"), _step_losses(tmp_path / "packed")
    relative = (losses - expected).abs() / expected
    assert losses.shape == expected.shape == (12, 3)
    assert relative[0].max() < 1e-5 and relative.max() < 1e-4, f"relative loss gaps by step: {relative.amax(1)}"
    moved = _gap(padded, start)
    assert moved > 1e-3 and _gap(padded, packed) < 0.25 * moved


@pytest.mark.parametrize("compile", [False, True], ids=["plain", "compiled"])
def test_a_packed_graph_with_the_flash_attention_trains_like_packed_sdpa_in_bf16(
    data_dirs, tmp_path, monkeypatch, compile
):
    """FlashAttention-2's variable-length kernel over the packed buffer computes packed SDPA's losses at each of 12
    steps in bf16 (both round the same projections; only the attention kernels differ)."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", compile)  # see the compile test above
    common = dict(max_steps=12, model={**TWO_HEADS, "dropout": 0.0}, log_every=1, packing=True, precision="bf16")
    _trained(data_dirs, tmp_path / "sdpa", compile=compile, **common)
    _trained(data_dirs, tmp_path / "flash", compile=compile, attention="flash", **common)
    expected, losses = _step_losses(tmp_path / "sdpa"), _step_losses(tmp_path / "flash")
    relative = (losses - expected).abs() / expected
    assert losses.shape == expected.shape == (12, 3)
    assert relative[0].max() < 5e-3 and relative.max() < 2e-2, f"relative loss gaps by step: {relative.amax(1)}"


def test_a_step_too_full_for_the_packed_graph_runs_eagerly_at_its_own_size(data_dirs, tmp_path, monkeypatch):
    from lsa_interp.training import stack_step, stack_trainer

    half = lambda needs: tuple(int(n) for n in np.median(needs, axis=0))  # about half the steps overflow
    monkeypatch.setattr(stack_trainer, "capacity_for", half)
    sizes = []
    original = stack_step.StackStep._step

    def spy(self, loss, widths=None, capacity=None):
        sizes.append(capacity)
        original(self, loss, widths, capacity)

    monkeypatch.setattr(stack_step.StackStep, "_step", spy)
    model = {**TWO_HEADS, "dropout": 0.0}
    start = _trained(data_dirs, tmp_path / "one", max_steps=1, model=model)
    padded = _trained(data_dirs, tmp_path / "padded", max_steps=12, model=model)
    sizes.clear()
    trainer = StackTrainer.start(_config(data_dirs, max_steps=12, model=model, packing=True), tmp_path / "packed")
    trainer.run()
    eager = [size for size in sizes if size != trainer.capacity]
    assert eager and all(any(n > c for n, c in zip(size, trainer.capacity)) for size in eager)
    assert sizes.count(trainer.capacity) == stack_step.WARMUP_STEPS + 1  # warm-up and capture: a step that fits replays
    moved = _gap(padded, start)
    assert _gap(padded, trainer.model.flat.detach().cpu()) < 1e-3 * max(moved, 1.0)
