"""Helpers shared by test modules."""

from __future__ import annotations

import pytest
import torch

from lsa_interp import cli


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
