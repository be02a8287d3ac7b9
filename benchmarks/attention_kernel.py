"""The stack's attention alone: `small_attention` against ``scaled_dot_product_attention`` at the stack's shapes.

For each ``--replicates`` R, the three attentions of the paper's model over R x 32 rows of 8 heads of 16
(encoder self-attention 93 x 93, decoder self-attention 22 x 22 causal, cross-attention 22 x 93), each row
with its own query and key lengths, forward and backward, with attention dropout ``--dropout``, in
``--precision``. The lengths: with ``--lengths`` (a ``packing_bound.py --json`` document), (source, target)
pairs drawn from a dataset's train rows at their widths, the kernel's real mix of length classes; without,
spread evenly around the paper's means (sources of 25-73 tokens: no row in the 128 tile). SDPA computes
every query of the padded rows, as the stack's SDPA path does; the kernel only each row's own. Times come
from CUDA events (medians of ``--rounds``, after ``--warmup`` untimed calls, 2 by default: the first compiles the
kernel); each attention's ratio is SDPA's time over the kernel's (above 1:
the kernel is faster). ``kernel_no_dropout_ms`` times the kernel without dropout (what its random numbers
cost); ``kernel_earlier_warps_ms`` with the warps a program launched with before `small_attention.WARPS` (a
tile's area over 512, 1 to 8: `earlier_table`; ``benchmarks/kernel_registers.py`` says why they changed).
``kernel_hinted_ms`` times it with the rows' shortest length as its hint, as a training stack passes the
data's: it then makes ``hinted_launches`` instead of ``launches`` launches a call, and the launches it
leaves out hold no row, so ``empty_launch_us`` (the time saved per launch left out, forward and backward)
is what a launch whose programs all return at once costs. In bf16 on CUDA, ``flash_ms`` times
FlashAttention-2's variable-length kernel (`lsa_interp.training.packing.flash_varlen`, ``--attention flash``)
over the same rows packed end to end without padding, as a packed stack hands them to it. ``--json OUT`` writes
every number. It tells a slow stack with the kernel apart from a slow kernel.

    python -m benchmarks.attention_kernel --replicates 8,64 --precision bf16 \
        --lengths benchmarks/results/packing-copy-20-random.json --json runs/bench/attention.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from lsa_interp.utils import atomic_write

SOURCE, TARGET = (93, 49.2), (22, 7.25)
"""(width, mean length) of the paper's source and target rows."""


def row_lengths(rows: int, width: int, mean_len: float, device) -> torch.Tensor:
    """``rows`` lengths spread evenly around ``mean_len`` (half of it either way), within 1..``width``."""
    half = int(mean_len) // 2
    spread = torch.randint(-half, half + 1, (rows,), device=device)
    return (round(mean_len) + spread).clamp(1, width)


def sampled_lengths(histogram: list, rows: int, device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` (source, target) lengths drawn, with replacement, from ``[source, target, count]`` pairs (a
    ``packing_bound.py`` document's ``row_lengths``) in proportion to their counts."""
    table = torch.tensor(histogram, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    picked = torch.multinomial(table[:, 2].double(), rows, replacement=True, generator=generator)
    return table[picked, 0].to(device), table[picked, 1].to(device)


def length_sets(rows: int, device, lengths: dict | None = None) -> dict:
    """Each attention's (query width, key width, key lengths, query lengths or None for self-attention, causal):
    from ``lengths`` (a ``packing_bound.py`` document) or spread around the paper's means."""
    if lengths is None:
        (src_width, src_mean), (tgt_width, tgt_mean) = SOURCE, TARGET
        src, tgt = row_lengths(rows, src_width, src_mean, device), row_lengths(rows, tgt_width, tgt_mean, device)
        cross_queries = row_lengths(rows, tgt_width, tgt_mean, device)
    else:
        src_width, tgt_width = lengths["widths"]["src"], lengths["widths"]["tgt"]
        src, tgt = sampled_lengths(lengths["row_lengths"], rows, device)
        cross_queries = tgt
    return {
        "encoder": (src_width, src_width, src, None, False),
        "decoder-self": (tgt_width, tgt_width, tgt, None, True),
        "cross": (tgt_width, src_width, src, cross_queries, False),
    }


def attention_inputs(rows: int, q_width: int, k_width: int, dtype, device, heads: int = 8):
    """Queries, keys and values ``[rows, heads, width, 16]``."""
    make = lambda width: torch.randn(rows, heads, width, 16, device=device, dtype=dtype, requires_grad=True)
    return make(q_width), make(k_width), make(k_width)


def sdpa(q, k, v, key_len, causal: bool, dropout: float):
    """``scaled_dot_product_attention`` with the stack's boolean mask of valid (and, causal, earlier) keys."""
    mask = torch.arange(k.shape[2], device=k.device)[None, :] < key_len[:, None]
    mask = mask[:, None, None, :]
    if causal:
        mask = mask & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def packed(x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first ``lengths`` positions of ``x [rows, heads, width, d]`` end to end, ``[tokens, heads, d]``
    (a leaf that needs a gradient), and the rows' int32 bounds in it ``[rows + 1]``."""
    keep = torch.arange(x.shape[2], device=x.device)[None, :] < lengths[:, None]
    tokens = x.detach().transpose(1, 2)[keep].requires_grad_()
    return tokens, F.pad(lengths.cumsum(0), (1, 0)).int()


def flash_call(q, k, v, key_len, query_len, causal: bool, dropout: float):
    """`packing.flash_varlen` over the rows of padded ``q``, ``k``, ``v`` packed (see `packed`), and the gradient
    its output takes."""
    from lsa_interp.training.packing import flash_varlen

    (pq, q_bounds), (pk, k_bounds) = packed(q, key_len if query_len is None else query_len), packed(k, key_len)
    pv, _ = packed(v, key_len)
    call = partial(flash_varlen, pq, pk, pv, q_bounds, k_bounds, q.shape[2], k.shape[2], causal, dropout)
    return call, torch.randn_like(pq)


def _forward_backward(attend, grad) -> None:
    torch.autograd.backward(attend(), grad)


def earlier_table() -> dict:
    """`small_attention.WARPS` as it was before the occupancy choice (`kernel_registers.earlier_warps`)."""
    from benchmarks.kernel_registers import earlier_warps
    from lsa_interp.training import small_attention

    return {
        precision: {kind: {tile: earlier_warps(*tile) for tile in tiles} for kind, tiles in passes.items()}
        for precision, passes in small_attention.WARPS.items()
    }


@contextmanager
def warps_table(table: dict):
    """`small_attention.WARPS` set to ``table`` inside the block."""
    from lsa_interp.training import small_attention

    kept, small_attention.WARPS = small_attention.WARPS, table
    try:
        yield
    finally:
        small_attention.WARPS = kept


def _with_warps(table: dict, step) -> None:
    with warps_table(table):
        step()


def timed(step, rounds: int, device: torch.device, warmup: int = 2) -> float:
    """Median milliseconds of ``step`` (forward and backward) over ``rounds``, after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            step()
            times.append(1000 * (time.perf_counter() - began))
    return statistics.median(times)


def compare(
    replicates: int,
    batch: int,
    precision: str,
    dropout: float,
    rounds: int,
    device: torch.device,
    lengths=None,
    warmup: int = 2,
) -> list:
    """Each attention's milliseconds with SDPA and with the kernel, and their ratio, for R x ``batch`` rows
    (their lengths: see `length_sets`), each timed after ``warmup`` calls."""
    from lsa_interp.training.small_attention import launch_count, small_attention

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    seed = torch.zeros(1, dtype=torch.long, device=device)
    results = []
    rows = replicates * batch
    earlier = earlier_table()
    for name, (q_width, k_width, key_len, query_len, causal) in length_sets(rows, device, lengths).items():
        q, k, v = attention_inputs(rows, q_width, k_width, dtype, device)
        kernel = partial(small_attention, q, k, v, key_len, seed, causal, query_len=query_len)
        hint = (int((key_len if query_len is None else query_len).min()), int(key_len.min()))
        calls = {"sdpa_ms": partial(sdpa, q, k, v, key_len, causal, dropout), "kernel_ms": partial(kernel, dropout)}
        calls["kernel_hinted_ms"] = partial(kernel, dropout, shortest=hint)
        if dropout > 0:
            calls["kernel_no_dropout_ms"] = partial(kernel, 0.0)
        grad = torch.randn_like(q)
        steps = {who: partial(_forward_backward, call, grad) for who, call in calls.items()}
        steps["kernel_earlier_warps_ms"] = partial(_with_warps, earlier, steps["kernel_ms"])
        if device.type == "cuda" and dtype == torch.bfloat16:
            steps["flash_ms"] = partial(_forward_backward, *flash_call(q, k, v, key_len, query_len, causal, dropout))
        times = {who: timed(step, rounds, device, warmup) for who, step in steps.items()}
        counts = [launch_count((q_width, k_width), query_len is None, shortest) for shortest in ((1, 1), hint)]
        left_out = counts[0] - counts[1]
        saved = 1000 * (times["kernel_ms"] - times["kernel_hinted_ms"]) / left_out if left_out else None
        results.append(
            {"attention": name, **times, "ratio": times["sdpa_ms"] / times["kernel_ms"], "launches": counts[0],
             "hinted_launches": counts[1], "empty_launch_us": saved}
        )  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", default="8,64", help="stack sizes, comma-separated (32 rows each)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls before each timing (compiles the kernel)")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--lengths", type=Path, help="a packing_bound.py --json document: draw rows' lengths from it")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)
    try:
        sizes = [int(r) for r in args.replicates.split(",")]
        if min(sizes) < 1 or args.batch_size < 1 or args.rounds < 1 or args.warmup < 0 or not 0 <= args.dropout < 1:
            raise ValueError
    except ValueError:
        parser.error(
            "--replicates, --batch-size and --rounds take positive integers, --warmup a count from 0, --dropout a"
            " value in [0, 1)"
        )
    try:
        lengths = json.loads(args.lengths.read_text(encoding="utf-8")) if args.lengths else None
        if lengths is not None and not {"widths", "row_lengths"} <= set(lengths):
            raise ValueError
    except (OSError, ValueError, TypeError):
        parser.error(f"--lengths {args.lengths}: not a packing_bound.py --json document with row_lengths")
    device = torch.device(args.device)
    document = {"device": str(device), "torch": torch.__version__, "precision": args.precision, "runs": []}
    document["lengths"] = str(args.lengths) if args.lengths else "spread around the paper's means"
    if device.type == "cuda":
        document["hardware"] = torch.cuda.get_device_name()
    for reps in sizes:
        results = compare(
            reps, args.batch_size, args.precision, args.dropout, args.rounds, device, lengths, args.warmup
        )
        document["runs"].append({"replicates": reps, "results": results})
        for r in results:
            plain = f"  (no dropout {r['kernel_no_dropout_ms']:8.3f} ms)" if "kernel_no_dropout_ms" in r else ""
            plain += f"  (earlier warps {r['kernel_earlier_warps_ms']:8.3f} ms)"
            empty = "" if r["empty_launch_us"] is None else f", {r['empty_launch_us']:.1f} us per empty launch"
            empty += f"  flash {r['flash_ms']:8.3f} ms" if "flash_ms" in r else ""
            print(
                f"R={reps:>3} {r['attention']:<13} sdpa {r['sdpa_ms']:8.3f} ms  kernel {r['kernel_ms']:8.3f} ms  "
                f"{r['ratio']:.2f}x{plain}  hinted {r['kernel_hinted_ms']:8.3f} ms ({r['launches']} -> "
                f"{r['hinted_launches']} launches{empty})",
                flush=True,
            )
        if args.json:
            atomic_write(args.json, lambda tmp: tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
