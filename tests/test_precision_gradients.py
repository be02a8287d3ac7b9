"""analyses/precision_gradients.py: what bf16 autocast changes in a model's loss and gradients, beside batch noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.checkpoint import save_model
from tests.helpers import TINY, load_script


@pytest.fixture(scope="module")
def script():
    return load_script("analyses/precision_gradients.py")


class _NoRows:
    """A split whose batches the fake `loss_and_gradient` below ignores."""

    def batch(self, rows):
        return None


_NO_ROWS = _NoRows()


def _model(path: Path, **metadata) -> str:
    torch.manual_seed(0)
    save_model(HookedEncoderDecoder(TINY), path, metadata={"seed": 0, "data_seed": 0, **metadata})
    return str(path)


def test_a_model_gets_both_losses_and_a_small_but_real_bf16_gradient_error(script, tmp_path, capsys):
    name, out = _model(tmp_path / "m", preset="copy-20"), tmp_path / "precision.json"
    assert script.main(["--model", name, "--batches", "4", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    row = document["models"][name]
    assert document["batches"] == 4 and document["batch_size"] == 32
    assert math.isclose(row["loss_fp32"], row["loss_bf16"], rel_tol=0.05)
    assert 0 < row["batch_error"] < 0.2 and row["batch_cosine"] > 0.98
    assert 0 < row["adam_error"] < row["adam_halves"]
    assert name[-28:] in capsys.readouterr().out


def test_both_precisions_draw_the_same_dropout_masks_and_the_gradient_is_the_stacks(script):
    torch.manual_seed(0)
    model = HookedEncoderDecoder(TINY)
    stack = script.replicate_stack(model)
    rows = torch.tensor([[1, 2, 3, 4, 27] * 4]), torch.tensor([[26, 5, 6]]), torch.tensor([[5, 6, 27]])
    loss_a, gradient_a = script.loss_and_gradient(stack, rows, False, seed=3)
    loss_b, gradient_b = script.loss_and_gradient(stack, rows, False, seed=3)
    _, other_masks = script.loss_and_gradient(stack, rows, False, seed=4)
    _, in_bf16 = script.loss_and_gradient(stack, rows, True, seed=3)
    assert loss_a == loss_b and torch.equal(gradient_a, gradient_b)
    assert gradient_a.dtype == torch.float64 and gradient_a.numel() == sum(p.numel() for p in model.parameters())
    distance = lambda g: float((g - gradient_a).norm() / gradient_a.norm())
    assert 0 < distance(in_bf16) < 0.05 < distance(other_masks)


def test_a_constant_difference_is_told_from_noise(script, monkeypatch):
    """bf16 gradients = fp32 gradients + a fixed vector: the mean keeps all of it (sqrt(K) times what independent
    noise would leave), and the batch spread and half-split direction come from the fp32 gradients alone."""
    rng = np.random.default_rng(0)
    fp32 = [torch.tensor(rng.normal(1.0, 0.5, 6)) for _ in range(4)]
    bias = torch.tensor([0.1, 0, 0, 0, 0, 0], dtype=torch.float64)

    def fake(stack, batch, bf16, seed):
        return 1.0 + bf16, fp32[seed] + (bias if bf16 else 0)

    monkeypatch.setattr(script, "loss_and_gradient", fake)
    row = script.precision_effect(HookedEncoderDecoder(TINY), _NO_ROWS, 4)
    mean = torch.stack(fp32).mean(0)
    assert row["loss_fp32"] == 1.0 and row["loss_bf16"] == 2.0
    assert row["mean_error"] == pytest.approx(0.1 / float(mean.norm()))
    assert row["mean_error"] == pytest.approx(2 * row["mean_error_if_noise"])
    spread = math.sqrt(np.mean([float((g - mean).norm() ** 2) for g in fp32])) / float(mean.norm())
    assert row["batch_spread"] == pytest.approx(spread)
    assert row["adam_halves"] > 0 and row["adam_error"] > 0


def test_without_a_difference_every_error_is_zero(script, monkeypatch):
    rng = np.random.default_rng(1)
    fp32 = [torch.tensor(rng.normal(0.0, 1.0, 5)) for _ in range(6)]
    monkeypatch.setattr(script, "loss_and_gradient", lambda stack, batch, bf16, seed: (0.5, fp32[seed]))
    row = script.precision_effect(HookedEncoderDecoder(TINY), _NO_ROWS, 6)
    assert row["batch_error"] == row["mean_error"] == row["adam_error"] == 0.0
    assert row["batch_cosine"] == pytest.approx(1.0) and row["batch_spread"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batches", "0"], "--batches must be even (two halves) and at least 2, got 0"),
        (["--batches", "5"], "--batches must be even (two halves) and at least 2, got 5"),
        ([], "records no training preset"),
    ],
)
def test_bad_input_is_a_one_line_error_and_writes_nothing(script, tmp_path, capsys, args, message):
    out = tmp_path / "precision.json"
    assert script.main(["--model", _model(tmp_path / "m"), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()
