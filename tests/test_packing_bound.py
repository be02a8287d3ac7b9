"""benchmarks/packing_bound.py: the capacity, attention and slot numbers of packed stacks, and the projection."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import packing_bound
from lsa_interp.data import save_dataset


def test_rows_pair_where_both_lengths_fit_the_full_width():
    src = np.array([[60, 40, 30, 0], [50, 40, 0, 0], [50, 40, 0, 0]])
    tgt = np.array([[5, 5, 5, 0], [12, 12, 0, 0], [10, 12, 0, 0]])
    # 60+30 share a row, 40 is alone; 50+40 fit 93 but their targets (24) do not fit 22; with 22 they do.
    assert packing_bound.paired_slots(src, tgt, 93, 22).tolist() == [2, 2, 1]


def test_capacity_is_the_largest_batch_of_any_replicate_and_step():
    src_len, tgt_len = np.array([10, 20, 30, 64, 93]), np.array([3, 4, 5, 6, 22])
    rows = np.array([[[0, 1], [2, -1]], [[3, 4], [0, 0]]])  # [step, replicate, batch]; -1: a short batch
    one = packing_bound.measure(src_len, tgt_len, (93, 22), rows, 1, (64, 128))
    two = packing_bound.measure(src_len, tgt_len, (93, 22), rows, 2, (64, 128))
    assert one["capacity"]["src_max"] == 157 and one["capacity"]["tgt_max"] == 28
    assert two["capacity"] == one["capacity"] and two["padded_tokens"] == {"src": 186, "tgt": 44}
    assert one["token_ratio"] == pytest.approx((186 + 44) / (157 + 28))
    # A padded row takes 2 (source self) + 1 (target self) + 1 (cross) tiles of 64x128; rows up to 64 long
    # take 1 + 1 + 1, and the 93-long row 2 + 1 + 1.
    assert one["tile_ratio"] == pytest.approx(4 * 4 / (3 + 3 + 3 + 4))
    assert two["slots_max"] == 2 and one["slots_max"] == 2
    # small_attention's class tiles: sources 10, 20, 64, 93 -> 16, 32, 64, 128; targets 3, 4, 6 -> 16, 22 -> 32.
    # Per row source self + target self + cross: 768, 1792, 5376 and 21504 elements; full width 21504 each.
    assert one["class_tile_ratio"] == pytest.approx(4 * 21504 / (768 + 1792 + 5376 + 21504))


def test_class_tiles_are_the_next_power_of_two_of_at_least_16():
    assert packing_bound.class_tile(np.array([0, 1, 16, 17, 33, 64, 65, 93])).tolist() == [
        0, 16, 16, 32, 64, 64, 128, 128,
    ]  # fmt: skip


def test_the_projection_scales_attention_by_tiles_and_the_rest_by_tokens():
    result = {"replicates": 8, "tile_ratio": 2.0, "token_ratio": 1.6}
    kernels = [
        {"name": "cudnn_generated_fort_native_sdpa_fprop", "ms_per_step": 3.0},
        {"name": "gemm", "ms_per_step": 1},
    ]
    entry = {"replicates": 8, "precision": "bf16", "device_ms_per_step": 7.0, "top": kernels}
    profile = {"compile": True, "profiles": [entry]}
    step = {"stacking": "native-compile", "replicates": 8, "precision": "bf16", "step_ms": 7.5, "baseline_step_ms": 3.0}
    native = {**step, "stacking": "native", "baseline_step_ms": 9.0}
    projected = packing_bound.project(result, profile, {"runs": [{"results": [native, step]}]})
    assert projected["attention_ms"] == 3.0 and projected["other_ms"] == 4.0
    assert projected["projected_ms"] == pytest.approx(3.0 / 2.0 + 4.0 / 1.6)
    assert projected["projected_ratio"] == pytest.approx(8 * 3.0 / projected["projected_ms"])
    assert projected["profiled_ratio"] == pytest.approx(8 * 3.0 / 7.5)
    assert packing_bound.project({**result, "replicates": 4}, profile, {"runs": [{"results": [step]}]}) is None
    assert packing_bound.project(result, {**profile, "compile": False}, {"runs": [{"results": [step]}]}) is None


def test_the_script_writes_every_stack_size_on_a_real_dataset(tmp_path, tiny, capsys):
    save_dataset(tiny, tmp_path / "data")
    out = tmp_path / "packing.json"
    args = ["--data", str(tmp_path / "data"), "--replicates", "1,3", "--steps", "2", "--batch-size", "4"]
    assert packing_bound.main([*args, "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    one, three = document["results"]
    assert (one["replicates"], three["replicates"]) == (1, 3) and one["projection"] is None
    assert one["capacity"]["src_max"] <= three["capacity"]["src_max"] <= one["padded_tokens"]["src"]
    assert three["token_ratio"] >= 1 and "R=  3: capacity" in capsys.readouterr().out
    src_len, tgt_len, *_ = packing_bound.row_lengths(tmp_path / "data")
    histogram = document["row_lengths"]
    assert sum(count for _, _, count in histogram) == len(src_len)
    assert {(src, tgt) for src, tgt, _ in histogram} == set(zip(src_len.tolist(), tgt_len.tolist()))


def test_length_pairs_count_each_pair_of_lengths():
    src, tgt = np.array([40, 40, 60, 40]), np.array([5, 5, 5, 7])
    assert packing_bound.length_pairs(src, tgt) == [[40, 5, 2], [40, 7, 1], [60, 5, 1]]


def test_a_bad_tile_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        packing_bound.main(["--data", str(tmp_path), "--tile", "64"])
    assert exit_info.value.code == 2
