"""benchmarks/attention_kernel.py: the stack's attention alone, the kernel against SDPA."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import attention_kernel


def test_inputs_have_the_stacks_shapes_and_spread_lengths_around_the_means():
    q, k, v = attention_kernel.attention_inputs(400, 22, 93, torch.float32, torch.device("cpu"))
    assert q.shape == (400, 8, 22, 16) and k.shape == v.shape == (400, 8, 93, 16)
    sets = attention_kernel.length_sets(400, torch.device("cpu"))
    assert [sets[name][:2] for name in ("encoder", "decoder-self", "cross")] == [(93, 93), (22, 22), (22, 93)]
    src, tgt = sets["encoder"][2], sets["decoder-self"][2]
    assert abs(src.float().mean().item() - 49.2) < 3 and abs(tgt.float().mean().item() - 7.25) < 0.5
    assert sets["cross"][2] is src and sets["decoder-self"][4] and sets["cross"][3] is not None


def test_lengths_from_a_histogram_follow_its_counts_and_keep_each_rows_pair():
    histogram = {"widths": {"src": 60, "tgt": 9}, "row_lengths": [[40, 5, 3], [60, 9, 1], [50, 7, 0]]}
    sets = attention_kernel.length_sets(4000, torch.device("cpu"), histogram)
    src, tgt = sets["encoder"][2], sets["decoder-self"][2]
    assert sets["encoder"][:2] == (60, 60) and sets["cross"][:2] == (9, 60)
    assert set(zip(src.tolist(), tgt.tolist())) == {(40, 5), (60, 9)}  # a pair of count 0 never drawn
    assert abs((src == 40).float().mean().item() - 0.75) < 0.03
    assert torch.equal(sets["cross"][3], tgt) and torch.equal(sets["cross"][2], src)


def test_sdpa_sees_only_each_rows_keys():
    q, k, v = attention_kernel.attention_inputs(2, 5, 6, torch.float32, torch.device("cpu"))
    key_len = torch.tensor([2, 6])
    out = attention_kernel.sdpa(q, k, v, key_len, causal=False, dropout=0.0)
    changed = v.detach().clone()
    changed[0, :, 2:] += 100.0  # keys row 0 cannot see
    assert torch.allclose(attention_kernel.sdpa(q, k, changed, key_len, False, 0.0)[0], out[0])
    assert not torch.allclose(attention_kernel.sdpa(q, k, changed + 1, key_len, False, 0.0)[0], out[0])


def test_rows_packed_for_the_flash_kernel_are_each_rows_own_positions_end_to_end(monkeypatch):
    q, k, v = attention_kernel.attention_inputs(3, 4, 6, torch.float32, torch.device("cpu"), heads=2)
    key_len, query_len = torch.tensor([2, 6, 0]), torch.tensor([4, 1, 0])
    tokens, bounds = attention_kernel.packed(k, key_len)
    assert bounds.dtype == torch.int32 and bounds.tolist() == [0, 2, 8, 8]
    assert tokens.shape == (8, 2, 16) and tokens.requires_grad and tokens.is_leaf
    assert torch.equal(tokens[2:8], k[1].detach().transpose(0, 1)) and torch.equal(
        tokens[:2], k[0, :, :2].transpose(0, 1)
    )
    seen = []
    monkeypatch.setattr("lsa_interp.training.packing.flash_varlen", lambda *args: seen.append(args) or args[0])
    call, grad = attention_kernel.flash_call(q, k, v, key_len, query_len, False, 0.1)
    assert call() is seen[0][0] and grad.shape == (5, 2, 16)
    _, _, _, q_bounds, k_bounds, q_width, k_width, causal, dropout = seen[0]
    assert q_bounds.tolist() == [0, 4, 5, 5] and k_bounds.tolist() == [0, 2, 8, 8]
    assert (q_width, k_width, causal, dropout) == (4, 6, False, 0.1)


@pytest.mark.parametrize("content", [None, "not json", '{"widths": {"src": 93, "tgt": 22}}'])
def test_bad_arguments_are_a_usage_error(tmp_path, content, capsys):
    args = ["--replicates", "0"]
    if content is not None:
        (tmp_path / "lengths.json").write_text(content)
        args = ["--lengths", str(tmp_path / "lengths.json")]
    with pytest.raises(SystemExit) as exit_info:
        attention_kernel.main(args)
    assert exit_info.value.code == 2
    if content is not None:
        assert "not a packing_bound.py --json document with row_lengths" in capsys.readouterr().err


def test_a_negative_warmup_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        attention_kernel.main(["--warmup", "-1"])
    assert exit_info.value.code == 2 and "--warmup a count from 0" in capsys.readouterr().err


@pytest.mark.parametrize("histogram", [False, True], ids=["spread", "lengths"])
def test_it_times_the_three_attentions_against_sdpa(tmp_path, histogram):
    pytest.importorskip("triton")  # without a GPU: under Triton's interpreter (tests/conftest.py)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = tmp_path / "attention.json"
    args = ["--device", device, "--replicates", "1", "--batch-size", "2", "--rounds", "1", "--precision", "fp32"]
    args += ["--warmup", "0"] * (device == "cpu")  # the interpreter compiles nothing; each call costs seconds
    if histogram:  # sources of 40 and 70 tokens: the 64 and 128 tiles
        lengths = {"widths": {"src": 93, "tgt": 22}, "row_lengths": [[40, 5, 1], [70, 9, 1]]}
        (tmp_path / "lengths.json").write_text(json.dumps(lengths))
        args += ["--lengths", str(tmp_path / "lengths.json")]
    assert attention_kernel.main([*args, "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["lengths"] == (str(tmp_path / "lengths.json") if histogram else "spread around the paper's means")
    (run,) = document["runs"]
    assert [r["attention"] for r in run["results"]] == ["encoder", "decoder-self", "cross"]
    assert all(r["sdpa_ms"] > 0 and r["ratio"] == pytest.approx(r["sdpa_ms"] / r["kernel_ms"]) for r in run["results"])
    assert all(r["kernel_no_dropout_ms"] > 0 for r in run["results"])  # the default dropout 0.1: both timed
    assert all(r["kernel_earlier_warps_ms"] > 0 for r in run["results"])
    encoder, decoder_self, cross = run["results"]
    # Sources of at least 25 tokens: the hint leaves out at least the 16 tile's launch; targets keep both classes.
    assert encoder["launches"] == 4 and encoder["hinted_launches"] < 4 and cross["launches"] == 8
    assert decoder_self["launches"] == decoder_self["hinted_launches"] and decoder_self["empty_launch_us"] is None
    for r in (encoder, cross):
        saved = 1000 * (r["kernel_ms"] - r["kernel_hinted_ms"]) / (r["launches"] - r["hinted_launches"])
        assert r["kernel_hinted_ms"] > 0 and r["empty_launch_us"] == pytest.approx(saved)


def test_row_lengths_spread_around_the_mean_within_the_width():
    lengths = attention_kernel.row_lengths(2000, 22, 7.25, torch.device("cpu"))
    assert lengths.min() >= 1 and lengths.max() <= 22 and abs(lengths.float().mean().item() - 7.25) < 0.5
    assert lengths.min() <= 4 and lengths.max() >= 10


def test_the_earlier_table_holds_every_tile_at_its_area_over_512_and_is_set_only_inside_its_block():
    pytest.importorskip("triton")
    from lsa_interp.training import small_attention

    table = attention_kernel.earlier_table()
    assert table["bf16"]["backward"][64, 64] == 8 and table["fp32"]["forward"][16, 16] == 1
    assert table["bf16"]["forward"][16, 64] == 2 and table["bf16"]["forward"][128, 128] == 8
    assert {k: set(v) for k, v in table.items()} == {k: set(v) for k, v in small_attention.WARPS.items()}
    current = small_attention.WARPS
    with attention_kernel.warps_table(table):
        assert small_attention.WARPS is table
    assert small_attention.WARPS is current
