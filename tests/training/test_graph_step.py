"""CUDA-graph training steps: the padded plan (everywhere), the optimizer hand-over between step kinds
(everywhere), and graph replay against eager steps (CUDA only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from lsa_interp.data.batching import batch_keys
from lsa_interp.training import TrainConfig, resume_run, start_run
from lsa_interp.training.graph_step import padded_plan
from lsa_interp.training.validation import loss_fn
from lsa_interp.training.vmap_replicates import VmapReplicateTrainer
from tests.helpers import SMALL_MODEL

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    config = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    return save_dataset(generate_dataset(config, seed=3), tmp_path_factory.mktemp("data") / "tiny")


def test_padded_plan_fills_short_batches_with_their_first_row_marked_invalid():
    plan = [np.array([4, 7, 9]), np.array([2])]
    rows, valid = padded_plan(plan, replicates=1, batch_size=3)
    assert rows.tolist() == [[[4, 7, 9]], [[2, 2, 2]]]
    assert valid.tolist() == [[[True, True, True]], [[True, False, False]]]
    rows, valid = padded_plan([(np.array([1, 2]), np.array([3]))], replicates=2, batch_size=2)
    assert rows.tolist() == [[[1, 2], [3, 3]]] and valid.tolist() == [[[True, True], [True, False]]]
    with pytest.raises(ValueError, match="does not fit batch size 1"):
        padded_plan(plan, replicates=1, batch_size=1)


def test_an_eager_state_settles_into_the_other_step_kind(data_dir, tmp_path):
    """A state saved by eager steps keeps the eager optimizer's flags (fused, not capturable) and a float rate."""
    config = TrainConfig(data_dir=str(data_dir), max_steps=3, val_limit=8, device="cpu", model=SMALL_MODEL)
    start_run(config, tmp_path).run()
    resumed = resume_run(tmp_path, max_steps=5)
    group = resumed.optimizer.param_groups[0]
    assert (group["foreach"], group["fused"], group["capturable"]) == (False, True, False)
    assert isinstance(group["lr"], float)
    assert all(s["step"].device.type == "cpu" for s in resumed.optimizer.state.values())
    resumed.run()
    assert resumed.step == 5


def _trained(
    data_dir, run_dir, cuda_graph: bool, replicates: int = 1, steps: int = 12, architecture: str = "hooked"
) -> list[torch.Tensor]:
    config = TrainConfig(
        architecture=architecture,
        data_dir=str(data_dir),
        device="cuda",
        max_steps=steps,
        val_limit=8,
        batch_size=16,
        replicates=replicates,
        cuda_graph=cuda_graph,
        warmup_start=1.0,
        model={**SMALL_MODEL, "dropout": 0.0},
    )
    trainer = VmapReplicateTrainer.start(config, run_dir) if replicates > 1 else start_run(config, run_dir)
    trainer.run()
    return [p.detach().cpu() for p in trainer.trainable_parameters()]


@cuda
@pytest.mark.parametrize("replicates", [1, 3])
def test_graph_replays_train_like_eager_steps(data_dir, tmp_path, replicates):
    eager = _trained(data_dir, tmp_path / "eager", cuda_graph=False, replicates=replicates)
    graphed = _trained(data_dir, tmp_path / "graph", cuda_graph=True, replicates=replicates)
    start = _trained(data_dir, tmp_path / "one", cuda_graph=False, replicates=replicates, steps=1)
    moved = max(float((e - s).abs().max()) for e, s in zip(eager, start))
    gap = max(float((e - g).abs().max()) for e, g in zip(eager, graphed))
    assert moved > 1e-3 and gap < 1e-3 * max(moved, 1.0)


@cuda
def test_a_plain_nn_transformer_graphs_and_trains_like_eager_steps(data_dir, tmp_path):
    """The reference architecture (``--architecture reference``) runs under the same CUDA-graph step."""
    eager = _trained(data_dir, tmp_path / "eager", cuda_graph=False, architecture="reference")
    graphed = _trained(data_dir, tmp_path / "graph", cuda_graph=True, architecture="reference")
    gap = max(float((e - g).abs().max()) for e, g in zip(eager, graphed))
    assert gap < 1e-3


@cuda
def test_a_graphed_run_resumes_where_it_stopped(data_dir, tmp_path):
    config = TrainConfig(data_dir=str(data_dir), device="cuda", max_steps=40, val_limit=8, model=SMALL_MODEL)
    start_run(config, tmp_path).run()
    resumed = resume_run(tmp_path, max_steps=60)
    assert isinstance(resumed.optimizer.param_groups[0]["lr"], torch.Tensor)
    resumed.run()
    assert resumed.step == 60 and (tmp_path / "model").is_dir()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert lines and all(np.isfinite(json.loads(line).get("train_loss", 0.0)) for line in lines)


@cuda
@pytest.mark.parametrize("resumed", [False, True])
def test_a_graphs_update_reads_the_schedules_rate_also_after_a_resume(data_dir, tmp_path, resumed):
    """The captured update reads the rate tensor the schedule fills: with the rate at 0 a replay leaves the weights
    as they are (AdamW's decay is scaled by the rate too). A resumed run read its rate onto the CPU, where fused
    AdamW takes it as a number at capture: every later step then ran at that one rate."""
    config = TrainConfig(data_dir=str(data_dir), device="cuda", max_steps=6, val_limit=8, model=SMALL_MODEL)
    trainer = start_run(config, tmp_path)
    if resumed:
        trainer.run()
        trainer = resume_run(tmp_path, max_steps=12)
    trainer.train_step(trainer.epoch_plan(0)[trainer.step])  # captures the graph
    group = trainer.optimizer.param_groups[0]
    assert group["lr"].device.type == "cuda"
    group["lr"].fill_(0.0)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer._graph.replay(trainer.step)
    assert all(torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))
    group["lr"].fill_(1e-3)
    trainer._graph.replay(trainer.step)
    assert not all(torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))


def test_the_optimizer_takes_the_flags_and_rate_type_of_the_step_kind_it_is_handed_to(data_dir, tmp_path):
    """Eager -> graphed: fused, capturable, the rate as a tensor of the same value, float32 step counters on the
    training device; graphed -> eager: not capturable, and a float rate again."""
    config = TrainConfig(data_dir=str(data_dir), max_steps=2, val_limit=8, device="cpu", model=SMALL_MODEL)
    trainer = start_run(config, tmp_path)
    trainer.run()
    group = trainer.optimizer.param_groups[0]
    rate = group["lr"]
    trainer.graphed = True
    trainer._settle_optimizer()
    assert (group["foreach"], group["fused"], group["capturable"]) == (False, True, True)
    assert isinstance(group["lr"], torch.Tensor) and float(group["lr"]) == pytest.approx(rate)
    assert all(s["step"].dtype == torch.float32 for s in trainer.optimizer.state.values())
    trainer.graphed = False
    trainer._settle_optimizer()
    assert (group["foreach"], group["fused"], group["capturable"]) == (False, True, False)
    assert type(group["lr"]) is float and group["lr"] == pytest.approx(rate)
    assert all(s["step"].device.type == "cpu" for s in trainer.optimizer.state.values())
    trainer.graphed = True
    loaded = group["lr"] = torch.tensor(0.25)  # a graphed state's rate, read onto the CPU (read_state)
    trainer._settle_optimizer()
    assert group["lr"] is not loaded and float(group["lr"]) == 0.25 and group["lr"].device == trainer.device
    trainer.graphed = False
    trainer.device = torch.device("meta")  # a stand-in for a CUDA device: eager steps keep the counters there too
    trainer._settle_optimizer()
    assert all(s["step"].device.type == "meta" for s in trainer.optimizer.state.values())


def test_the_graph_step_trains_the_models_parameters_on_the_single_models_loss(data_dir, tmp_path):
    """What the CUDA-graph step captures: the optimizer's parameters, and the loss of the one model's batch."""
    config = TrainConfig(data_dir=str(data_dir), max_steps=1, val_limit=8, device="cpu", model=SMALL_MODEL)
    trainer = start_run(config, tmp_path)
    assert trainer.trainable_parameters() == list(trainer.model.parameters())
    trainer.model.eval()
    src, tgt_in, tgt_out = trainer.train.batch(trainer.epoch_plan(0)[0])
    loss = trainer.stacked_loss(src[None], tgt_in[None], tgt_out[None])
    assert loss.shape == (1,) and torch.equal(loss[0], loss_fn(trainer.model, src, tgt_in, tgt_out))


def test_the_recipes_adamw_and_bounds_reach_the_trainer(data_dir, tmp_path):
    """AdamW with the recipe's rate, betas and weight decay; the configured batching keys and validation sample;
    ``resume`` overrides ``max_minutes`` too; a graphed optimizer's tensor rate stays a tensor when settled again."""
    config = TrainConfig(
        data_dir=str(data_dir), max_steps=1, val_limit=8, device="cpu", batching="transformation", model=SMALL_MODEL
    )
    trainer = start_run(config, tmp_path)
    group = trainer.optimizer.param_groups[0]
    assert isinstance(trainer.optimizer, torch.optim.AdamW) and group["lr"] == config.lr
    assert group["betas"] == (0.9, 0.95) and group["weight_decay"] == 0.01 and group["fused"] is True
    split = trainer.train.split
    assert np.array_equal(
        trainer.keys, batch_keys("transformation", split.alphabet.numpy(), split.transformation.numpy())
    )
    assert len(trainer.val.src) == 8
    trainer.run()
    assert resume_run(tmp_path, max_minutes=7.5).config.max_minutes == 7.5
    trainer.graphed = True
    trainer._settle_optimizer()
    trainer._settle_optimizer()
    assert isinstance(group["lr"], torch.Tensor)


@cuda
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_each_graph_replay_draws_fresh_dropout_masks(data_dir, tmp_path, dropout):
    """One batch replayed from the same weights (lr 0): with dropout the loss differs at every replay (the graph
    advances the CUDA generator's offset), without dropout it stays the same. The graph reads the batch of the
    trainer's step count, so the count is set back before each replay."""
    config = TrainConfig(
        data_dir=str(data_dir), device="cuda", lr=0.0, val_limit=8, batch_size=16,
        model={**SMALL_MODEL, "dropout": dropout},
    )  # fmt: skip
    trainer = start_run(config, tmp_path)
    batch = trainer.epoch_plan(0)[0]
    losses = []
    for _ in range(5):
        trainer.step = 0
        losses.append(float(trainer.train_step(batch)))
    losses = losses[2:]  # past the eager warm-up and the capture
    gaps = [abs(a - b) for a, b in zip(losses, losses[1:])]
    assert all(gap > 1e-5 for gap in gaps) if dropout else all(gap < 1e-6 for gap in gaps)


@cuda
def test_micro_batches_are_refused_under_the_cuda_graph_and_run_without_it(data_dir, tmp_path):
    """The graphed step pads every batch to full width, so micro-batches there are an error; eager steps on
    CUDA take them."""
    config = TrainConfig(data_dir=str(data_dir), device="cuda", micro_batches=2, max_steps=2, model=SMALL_MODEL)
    with pytest.raises(ValueError, match="micro-batches need the eager step"):
        start_run(config, tmp_path / "graphed")
    trainer = start_run(TrainConfig(**{**config.__dict__, "cuda_graph": False}), tmp_path / "eager")
    trainer.run()
    assert trainer.step == 2
    resumed = resume_run(tmp_path / "eager", max_steps=3)  # the fused update finds its step counters beside the weights
    resumed.run()
    assert resumed.step == 3
