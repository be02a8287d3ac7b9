"""benchmarks/kernel_registers.py: occupancy from ptxas's counts, the warps it picks, and the committed choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.kernel_registers import best_warps, earlier_warps, resident_programs

RESULTS = Path(__file__).parents[1] / "benchmarks" / "results" / "kernel-registers-sm90.json"


def test_resident_programs_is_bound_by_registers_warps_programs_or_shared_memory():
    assert resident_programs(146, 8, 14_336) == 1  # 19 x 256 registers a warp: 38,912 a program
    assert resident_programs(147, 4, 14_336) == 3  # 19,456 a program
    assert resident_programs(64, 4, 4_096) == 8  # 8,192 a program
    assert resident_programs(32, 1, 1_024) == 32  # at most 32 programs an SM
    assert resident_programs(32, 16, 1_024) == 4  # at most 64 warps an SM
    assert resident_programs(32, 1, 100_000) == 2  # shared memory: 233,472 bytes, 1,024 more a program


def _count(warps: int, resident_warps: int, spilled: int = 0) -> dict:
    return {"warps": warps, "spilled": spilled, "resident_warps": resident_warps}


def test_the_least_spilling_count_with_the_most_resident_warps_wins_and_a_tie_keeps_the_earlier_choice():
    counts = [_count(2, 8), _count(4, 12), _count(8, 8), _count(16, 16, spilled=40)]
    assert best_warps(counts, 64, 64) == 4  # 16 spills
    assert earlier_warps(64, 64) == 8 and earlier_warps(16, 16) == 1 and earlier_warps(32, 64) == 4
    assert best_warps([_count(4, 32), _count(8, 32)], 64, 64) == 8  # a tie: the earlier 8 stays
    assert best_warps([_count(2, 32), _count(4, 32), _count(8, 16)], 64, 64) == 2  # the earlier not tied: fewest
    assert best_warps([_count(1, 28), _count(2, 40), _count(4, 64)], 16, 16) == 2  # 16 x 16: two 16 x 8 tiles
    assert best_warps([_count(8, 8, spilled=1672), _count(16, 16, spilled=3868)], 128, 128) == 8  # all spill
    with pytest.raises(ValueError, match="no compilation of the 16 x 16 tile within 2 warps"):
        best_warps([_count(4, 64)], 16, 16)


def test_the_committed_choice_is_best_warps_of_the_committed_counts():
    document = json.loads(RESULTS.read_text())
    assert len(document["warps"]) == 2 * 16  # bf16 and fp32, tiles of 16 to 128 both ways
    for key, counts in document["tiles"].items():
        tq, tk = (int(side) for side in key.split()[1].split("x"))
        assert document["warps"][key] == {name: best_warps(rows, tq, tk) for name, rows in counts.items()}


def test_the_kernel_launches_with_the_committed_choice():
    pytest.importorskip("triton")
    from lsa_interp.training.small_attention import WARPS

    document = json.loads(RESULTS.read_text())
    launched = {
        f"{precision} {tq}x{tk}": {kind: WARPS[precision][kind][tq, tk] for kind in ("forward", "backward")}
        for precision in ("bf16", "fp32")
        for tq, tk in WARPS[precision]["forward"]
    }
    assert launched == document["warps"]
