"""benchmarks/attention_kernel.py: the stack's attention alone, the kernel against SDPA."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import attention_kernel


def test_inputs_have_the_stacks_shapes_and_key_lengths_around_the_mean():
    q, k, v, key_len = attention_kernel.attention_inputs(400, 22, 93, 49.2, torch.float32, torch.device("cpu"))
    assert q.shape == (400, 8, 22, 16) and k.shape == v.shape == (400, 8, 93, 16)
    assert key_len.min() >= 1 and key_len.max() <= 93 and abs(key_len.float().mean().item() - 49.2) < 3


def test_sdpa_sees_only_each_rows_keys():
    q, k, v, _ = attention_kernel.attention_inputs(2, 5, 6, 3, torch.float32, torch.device("cpu"))
    key_len = torch.tensor([2, 6])
    out = attention_kernel.sdpa(q, k, v, key_len, causal=False, dropout=0.0)
    changed = v.detach().clone()
    changed[0, :, 2:] += 100.0  # keys row 0 cannot see
    assert torch.allclose(attention_kernel.sdpa(q, k, changed, key_len, False, 0.0)[0], out[0])
    assert not torch.allclose(attention_kernel.sdpa(q, k, changed + 1, key_len, False, 0.0)[0], out[0])


def test_bad_arguments_are_a_usage_error():
    with pytest.raises(SystemExit) as exit_info:
        attention_kernel.main(["--replicates", "0"])
    assert exit_info.value.code == 2


def test_it_times_the_three_attentions_against_sdpa(tmp_path):
    pytest.importorskip("triton")  # without a GPU: under Triton's interpreter (tests/conftest.py)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = tmp_path / "attention.json"
    args = ["--device", device, "--replicates", "1", "--batch-size", "2", "--rounds", "1", "--precision", "fp32"]
    assert attention_kernel.main([*args, "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert [r["attention"] for r in run["results"]] == ["encoder", "decoder-self", "cross"]
    assert all(r["sdpa_ms"] > 0 and r["ratio"] == pytest.approx(r["sdpa_ms"] / r["kernel_ms"]) for r in run["results"])
    assert all(r["kernel_no_dropout_ms"] > 0 for r in run["results"])  # the default dropout 0.1: both timed
    encoder, decoder_self, cross = run["results"]
    # Sources of 25..73 tokens: the hint leaves out at least the 16 tile's launch; targets keep both classes.
    assert encoder["launches"] == 4 and encoder["hinted_launches"] < 4 and cross["launches"] == 8
    assert decoder_self["launches"] == decoder_self["hinted_launches"] and decoder_self["empty_launch_us"] is None
    for r in (encoder, cross):
        saved = 1000 * (r["kernel_ms"] - r["kernel_hinted_ms"]) / (r["launches"] - r["hinted_launches"])
        assert r["kernel_hinted_ms"] > 0 and r["empty_launch_us"] == pytest.approx(saved)


def test_row_lengths_spread_around_the_mean_within_the_width():
    lengths = attention_kernel.row_lengths(2000, 22, 7.25, torch.device("cpu"))
    assert lengths.min() >= 1 and lengths.max() <= 22 and abs(lengths.float().mean().item() - 7.25) < 0.5
    assert lengths.min() <= 4 and lengths.max() >= 10
