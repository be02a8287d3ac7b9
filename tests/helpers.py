"""Helpers shared by test modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from lsa_interp import cli
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import PAD
from lsa_interp.model import ModelConfig

ROOT = Path(__file__).parents[1]
TINY = ModelConfig(d_model=16, n_heads=2, d_mlp=32, n_encoder_layers=1, n_decoder_layers=1)
"""A model small enough to build, save and decode with in a test."""
SMALL_MODEL = {"d_model": 32, "n_heads": 4, "d_mlp": 64, "n_encoder_layers": 2, "n_decoder_layers": 2}
"""The training tests' model, as a config's ``model`` mapping."""


def load_script(relative: str) -> ModuleType:
    """The module of the repository's script at ``relative`` (e.g. ``analyses/accuracy_by_length.py``), registered
    in ``sys.modules`` under its file name so that its dataclasses can find it."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def run(args: list[str], capsys) -> tuple[int, str, str]:
    """Run ``lsa-interp ARGS`` in-process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def assert_same_weights(
    first: dict[str, torch.Tensor], second: dict[str, torch.Tensor], d_model: int, rtol: float = 0.0, atol: float = 1e-5
) -> None:
    """Two state dicts of the same architecture hold the same weights, except the attention key biases.

    A key bias adds the same number to every score of a query, so its true gradient is zero; AdamW divides the
    rounding noise left in it by its own tiny magnitude, and that noise differs between equal computations.
    """
    assert first.keys() == second.keys()
    for name in first:
        a, b = first[name], second[name]
        if name.endswith("in_proj_bias"):
            a, b = torch.cat([a[:d_model], a[2 * d_model :]]), torch.cat([b[:d_model], b[2 * d_model :]])
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=name)


def ragged_stack_batch(device: str = "cpu", src_width: int = 12) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of a stack of 2 replicates x 3 rows (sources ``src_width`` wide, targets 5) with rows of several
    lengths (two sources of 7 and 4 tokens, the others full)."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, 20, (2, 3, src_width), generator=generator)
    src[0, 1, 7:], src[1, 2, 4:] = PAD, PAD
    tgt_in, tgt_out = (torch.randint(4, 20, (2, 3, 5), generator=generator) for _ in range(2))
    tgt_in[0, 0, 3:], tgt_out[0, 0, 3:] = PAD, PAD
    return src.to(device), tgt_in.to(device), tgt_out.to(device)


SWAPPED = "bacdefghijklmnopqrstuvwxzy"
"""A permuted alphabet: a <-> b and y <-> z swapped."""


def answered_rows(n_correct: int, n_wrong: int, rule: str, alphabet: str = SWAPPED, copy: bool = False):
    """``n_correct + n_wrong`` distinct tasks of ``rule`` and answers to them, the first ``n_correct`` right (a
    copy row's example is its own query and answer)."""
    tasks, answers = [], []
    for i in range(n_correct + n_wrong):
        query, answer = alphabet[i : i + 3], alphabet[i + 1 : i + 4]
        example = (query, answer) if copy else ("mno", "nop")
        tasks.append(Task(alphabet, (example,), query, answer, rule))
        answers.append(answer if i < n_correct else answer[::-1] + "q")
    return tasks, answers


def joined_rows(*parts):
    """The tasks and answers of several `answered_rows` parts, end to end."""
    return [t for p in parts for t in p[0]], [a for p in parts for a in p[1]]


def explicit_attention(q, k, v, key_len, causal=False, keep=None, p=0.0, query_len=None):
    """Explicit attention of the first ``query_len`` queries (default: ``key_len``) over the first ``key_len``
    keys, with a given dropout mask; zeros for later queries."""
    positions = lambda n: torch.arange(n, device=q.device)[None, :]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    valid = (positions(k.shape[2]) < key_len[:, None])[:, None, None, :]
    if causal:
        valid = valid & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    weights = scores.masked_fill(~valid, float("-inf")).softmax(-1).nan_to_num()
    if keep is not None:
        weights = torch.where(keep, weights / (1 - p), 0.0)
    asked = positions(q.shape[2]) < (key_len if query_len is None else query_len)[:, None]
    return (weights @ v) * asked[:, None, :, None]
