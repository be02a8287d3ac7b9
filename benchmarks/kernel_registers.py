"""Registers, spills and occupancy of the stack's attention kernel, compiled for an H100 without one.

Triton compiles `lsa_interp.training.small_attention`'s forward and backward programs for ``sm_90`` on any
machine (it ships ``ptxas``); ``ptxas -v`` then says how many registers a thread of each program uses and how
many bytes it spills. A square tile is compiled causal too and counted by the worse of the two. From those,
for every tile (queries x keys, 16 to 128 each), pass and warp count, this computes how many programs an H100
SM holds at once (`resident_programs`: 65,536 registers allocated 256 a warp, at most 64 warps, 32 programs
and 228 KiB of shared memory) and picks the warp count that keeps the most warps resident without spilling
(where every count spills, the one that spills least) and without more warps than the score tile has 16 x 8
MMA tiles (`best_warps`; on a tie the earlier choice, `earlier_warps`, stays). A program of this kernel is
one short dependent chain (load, two or three small dots, a softmax, a store), so the warps resident are what
hides its latency. ``--json OUT`` writes every count and the choice; `small_attention.WARPS` is that choice.
Whether it is faster, a GPU decides: ``benchmarks/attention_kernel.py`` times the kernel with both.

    python -m benchmarks.kernel_registers --json benchmarks/results/kernel-registers-sm90.json

Needs the ``triton`` package (not a dependency of the project); no GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import subprocess
import tempfile
from pathlib import Path

from lsa_interp.utils import atomic_write

TILES = (16, 32, 64, 128)
WARPS = (1, 2, 4, 8, 16)
REGISTERS, WARPS_PER_SM, PROGRAMS_PER_SM, SHARED_PER_SM = 65_536, 64, 32, 233_472
"""An H100 (sm_90) SM: its register file, and the most warps, programs (thread blocks) and bytes of shared
memory it holds at once; each program also reserves 1 KiB of shared memory."""
FORWARD_ARGS = ("Q K V OUT LSE QROW KROW QLEN KLEN SEED q_n q_h q_l k_n k_h k_l v_n v_h v_l o_n o_h o_l width_q "
                "width_k scale p_drop call").split()  # fmt: skip
BACKWARD_ARGS = ("Q K V DO LSE QROW KROW QLEN KLEN SEED DQ DK DV q_n q_h q_l k_n k_h k_l v_n v_h v_l d_n d_h d_l "
                 "gq_n gq_h gq_l gk_n gk_h gk_l width_q width_k scale p_drop call").split()  # fmt: skip


def resident_programs(registers: int, warps: int, shared: int) -> int:
    """Programs of ``warps`` warps, ``registers`` a thread and ``shared`` bytes that an H100 SM holds at once."""
    per_warp = math.ceil(registers * 32 / 256) * 256
    return min(
        PROGRAMS_PER_SM, WARPS_PER_SM // warps, REGISTERS // (per_warp * warps), SHARED_PER_SM // (shared + 1024)
    )


def earlier_warps(tq: int, tk: int) -> int:
    """The warps a ``tq x tk`` tile launched with before `small_attention.WARPS`: its area over 512, 1 to 8."""
    return min(8, max(1, tq * tk // 512))


def best_warps(counts: list[dict], tq: int, tk: int) -> int:
    """Of a ``tq x tk`` tile's compilations for one pass (``warps``, ``spilled``, ``resident_warps``), the warp
    count that spills least (none, where any count does not) and keeps the most warps resident, with no more
    warps than the score tile has 16 x 8 MMA tiles (a warp with none would repeat another's work). On a tie,
    the `earlier_warps` if among them (no change without more warps resident), else the fewest. Raises
    ValueError when no count is allowed."""
    most = max(1, tq * tk // 128)
    allowed = [c for c in counts if c["warps"] <= most]
    if not allowed:
        raise ValueError(f"no compilation of the {tq} x {tk} tile within {most} warps")
    least = min(c["spilled"] for c in allowed)
    earlier = earlier_warps(tq, tk)
    fewest_spills = [c for c in allowed if c["spilled"] == least]
    return min(fewest_spills, key=lambda c: (-c["resident_warps"], c["warps"] != earlier, c["warps"]))["warps"]


def _signature(names: list[str], dtype: str) -> dict[str, str]:
    pointers = {name: f"*{dtype}" for name in ("Q", "K", "V", "OUT", "DO", "DQ", "DK", "DV")}
    pointers |= {"LSE": "*fp32", "SEED": "*i64", "scale": "fp32", "p_drop": "fp32"}
    pointers |= {name: "*i32" for name in ("QROW", "KROW", "QLEN", "KLEN")}
    return {name: pointers.get(name, "i32") for name in names}


def compile_counts(kernel, names: list[str], dtype: str, tq: int, tk: int, causal: bool, warps: int) -> dict:
    """Registers a thread, spilled bytes (stores and loads) and shared memory of ``kernel`` for one tile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from lsa_interp.training.small_attention import CALLS_PER_STEP

    constants = {"CAUSAL": causal, "DROPOUT": True, "Q_LO": 0, "TQ": tq, "K_LO": 0, "TK": tk, "BQ": 128, "BK": 128,
                 "D": 16, "IEEE": dtype == "fp32", "CALLS": CALLS_PER_STEP}  # fmt: skip
    signature = _signature(names, dtype) | dict.fromkeys(constants, "constexpr")
    source = ASTSource(kernel, signature, {(kernel.arg_names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"], encoding="utf-8")
        report = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(ptx), "-o", str(Path(folder) / "k.cubin")],
                                capture_output=True, text=True, check=True)  # fmt: skip
    text = report.stdout + report.stderr
    registers = int(re.search(r"Used (\d+) registers", text).group(1))
    stores, loads = (int(x) for x in re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text).groups())
    return {"registers": registers, "spilled": stores + loads, "shared": int(compiled.metadata.shared)}


def tile_counts(dtype: str, tq: int, tk: int) -> dict[str, list[dict]]:
    """Every warp count's compilation of both passes for one tile (a square tile also causal: the worse of the
    two counts), with its resident programs and warps."""
    from lsa_interp.training import small_attention

    passes = {
        "forward": (small_attention._forward, FORWARD_ARGS),
        "backward": (small_attention._backward, BACKWARD_ARGS),
    }
    found: dict[str, list[dict]] = {}
    for (name, (kernel, names)), warps in itertools.product(passes.items(), WARPS):
        if warps * 32 > tq * tk:
            continue
        variants = [compile_counts(kernel, names, dtype, tq, tk, causal, warps) for causal in {False, tq == tk}]
        worst = {key: max(v[key] for v in variants) for key in ("registers", "spilled", "shared")}
        programs = resident_programs(worst["registers"], warps, worst["shared"])
        found.setdefault(name, []).append(
            {"warps": warps, **worst, "resident_programs": programs, "resident_warps": programs * warps}
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="bf16,fp32", help="comma-separated: bf16, fp32")
    parser.add_argument("--json", type=Path, help="write every count and the chosen warps here")
    args = parser.parse_args(argv)
    precisions = args.precision.split(",")
    if not set(precisions) <= {"bf16", "fp32"}:
        parser.error(f"--precision takes bf16 and fp32, got {args.precision}")
    document: dict = {"target": "sm_90 (H100)", "tiles": {}, "warps": {}}
    for dtype, tq, tk in itertools.product(precisions, TILES, TILES):
        counts = tile_counts(dtype, tq, tk)
        key = f"{dtype} {tq}x{tk}"
        document["tiles"][key] = counts
        document["warps"][key] = {name: best_warps(rows, tq, tk) for name, rows in counts.items()}
        print(key, document["warps"][key], flush=True)
        if args.json:
            atomic_write(args.json, lambda tmp: tmp.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
