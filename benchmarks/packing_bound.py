"""How much a stack could save by computing its rows without their padding (issue 13's next lever).

A CUDA-graphed stack computes every row at the full width of the training tensors (93 source and 22 target
tokens for the paper's data) because a graph has fixed shapes. Packing each replicate's rows end to end into a
buffer of fixed capacity (variable-length attention inside it) keeps the shapes fixed, but the capacity must
hold the largest batch of any replicate at any step; a step that overflows it needs the padded graph. This
script measures, on a dataset's real row lengths and the reference's batches (replicate r: seed r, epoch 0),
for each stack size R:

- ``capacity``: the source and target tokens a per-replicate buffer must hold to cover every sampled step (and
  99% of them), against the padded ``batch * width``;
- ``attention``: the score-matrix elements of the three attentions at each row's own length against the padded
  ones, and the attention tiles (``--tile Q,K``, default the profiled cuDNN kernel's 64x128) per row-head;
- ``class_tile_ratio``: the score elements `small_attention` computes with one tile per full-width row
  (the next power of two of the width, as its first version did) against one tile per row's own length class
  (the next power of two of its length, at least 16: what it computes now);
- ``slots``: rows paired two to a full-width row where both fit (longest with shortest), the slots a replicate
  must hold to cover every sampled step: the fixed-width alternative to a token buffer.

The JSON also keeps the train split's ``row_lengths``: how many rows have each (source, target) length pair,
which ``attention_kernel.py --lengths`` draws its rows from.

With ``--profile`` (a ``profile_stack.py --json`` document) and ``--baseline`` (a ``train_throughput.py
--json`` document), it projects the profiled step at the same R: attention kernels scaled by the tile ratio,
every other kernel by the token ratio at full capacity, and the ratio to the single-model step that document
measured. A projection, not a measurement: it assumes every kernel's time is proportional to its work,
and it means something only where the step is not launch-bound (device time near wall time: R >= 8).

    python benchmarks/packing_bound.py --data DATASET --replicates 1,8,32,64 --steps 2000 \\
        --profile benchmarks/results/profile-compile-h100.json --baseline benchmarks/results/compile-h100.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lsa_interp.data.batching import BATCHING_METHODS, batch_keys, epoch_batches
from lsa_interp.data.loaders import load_tokenized
from lsa_interp.data.vocab import PAD
from lsa_interp.utils import atomic_write

ATTENTION_KERNELS = ("sdpa", "cudnn::fusion", "unpack_cudnn", "fmha", "flash", "attention")
"""Substrings of the kernel names that `project` counts as attention."""


def row_lengths(data_dir: str | Path) -> tuple[np.ndarray, np.ndarray, int, int, np.ndarray, np.ndarray]:
    """Source and target (``>`` included) lengths of the train split's rows, the two tensor widths, and each
    row's alphabet and transformation (for the batching keys)."""
    split = load_tokenized(data_dir, "train")
    tokens = split.tokens
    src_len = (tokens.src != PAD).sum(1).numpy()
    tgt_len = (tokens.tgt_in != PAD).sum(1).numpy()
    return (
        src_len,
        tgt_len,
        int(tokens.src.shape[1]),
        int(tokens.tgt_in.shape[1]),
        split.alphabet.numpy(),
        split.transformation.numpy(),
    )


def length_pairs(src_len: np.ndarray, tgt_len: np.ndarray) -> list[list[int]]:
    """``[source length, target length, rows]`` for every length pair the rows have: their joint histogram."""
    pairs, counts = np.unique(np.stack([src_len, tgt_len], 1), axis=0, return_counts=True)
    return [[int(src), int(tgt), int(count)] for (src, tgt), count in zip(pairs, counts)]


def stack_rows(keys: np.ndarray, batch_size: int, replicates: int, steps: int) -> np.ndarray:
    """Rows ``[steps, replicates, batch_size]`` of the first ``steps`` steps of epoch 0, replicate r with seed
    r (-1 where a group's last batch is short). Raises ValueError when an epoch has fewer than ``steps``."""
    rows = np.full((steps, replicates, batch_size), -1, dtype=np.int64)
    for replicate in range(replicates):
        batches = epoch_batches(keys, None, batch_size, replicate, 0)
        if len(batches) < steps:
            raise ValueError(f"an epoch has {len(batches)} steps, fewer than the {steps} asked for")
        for step, batch in enumerate(batches[:steps]):
            rows[step, replicate, : len(batch)] = batch
    return rows


def paired_slots(src: np.ndarray, tgt: np.ndarray, src_width: int, tgt_width: int) -> np.ndarray:
    """Full-width rows needed when rows go two to a row where both lengths fit (the longest left with the
    shortest left, else alone): ``[...]`` over the leading axes of ``src``/``tgt`` ``[..., batch]`` (0: no row)."""
    order = np.argsort(-src, axis=-1, kind="stable")
    src, tgt = np.take_along_axis(src, order, -1), np.take_along_axis(tgt, order, -1)
    flat_src, flat_tgt = src.reshape(-1, src.shape[-1]), tgt.reshape(-1, tgt.shape[-1])
    slots = np.zeros(len(flat_src), dtype=np.int64)
    for index, (lengths, targets) in enumerate(zip(flat_src, flat_tgt)):
        left, right = 0, int(np.count_nonzero(lengths)) - 1
        while left <= right:
            if (
                left < right
                and lengths[left] + lengths[right] <= src_width
                and targets[left] + targets[right] <= tgt_width
            ):
                right -= 1
            left += 1
            slots[index] += 1
    return slots.reshape(src.shape[:-1])


def tiles(q_len: np.ndarray, k_len: np.ndarray, tile: tuple[int, int]) -> np.ndarray:
    """Attention tiles of ``tile`` (query rows, key columns) that a row of these lengths needs (0 for none)."""
    return np.ceil(q_len / tile[0]) * np.ceil(k_len / tile[1])


def class_tile(length: np.ndarray) -> np.ndarray:
    """The side of `small_attention`'s tile for rows of ``length`` (the next power of two, at least 16; 0 for none)."""
    length = np.asarray(length, dtype=np.float64)
    side = np.maximum(16.0, 2.0 ** np.ceil(np.log2(np.maximum(length, 1.0))))
    return np.where(length > 0, side, 0.0)


def measure(
    src_len: np.ndarray,
    tgt_len: np.ndarray,
    widths: tuple[int, int],
    rows: np.ndarray,
    replicates: int,
    tile: tuple[int, int],
) -> dict:
    """The packing numbers of the stack of the first ``replicates`` replicates of ``rows`` (see module doc)."""
    rows = rows[:, :replicates]
    present = rows >= 0
    src = np.where(present, src_len[rows.clip(0)], 0)
    tgt = np.where(present, tgt_len[rows.clip(0)], 0)
    batch = rows.shape[-1]
    need_src, need_tgt = src.sum(-1).max(-1), tgt.sum(-1).max(-1)
    capacity = {
        "src_max": int(need_src.max()),
        "tgt_max": int(need_tgt.max()),
        "src_p99": int(np.quantile(need_src, 0.99, method="higher")),
        "tgt_p99": int(np.quantile(need_tgt, 0.99, method="higher")),
    }
    padded_tokens = batch * (widths[0] + widths[1])
    scores = src**2 + tgt**2 + tgt * src
    padded_scores = present * (widths[0] ** 2 + widths[1] ** 2 + widths[1] * widths[0])
    row_tiles = tiles(src, src, tile) + tiles(tgt, tgt, tile) + tiles(tgt, src, tile)
    src_width, tgt_width = (np.float64(w) for w in widths)
    per_padded_row = tiles(src_width, src_width, tile) + tiles(tgt_width, tgt_width, tile)
    padded_tiles = present.sum() * (per_padded_row + tiles(tgt_width, src_width, tile))
    class_elements = class_tile(src) ** 2 + class_tile(tgt) ** 2 + class_tile(tgt) * class_tile(src)
    full_src, full_tgt = class_tile(widths[0]), class_tile(widths[1])
    full_elements = present.sum() * (full_src**2 + full_tgt**2 + full_tgt * full_src)
    slots = paired_slots(src, tgt, *widths).max(-1)
    return {
        "replicates": replicates,
        "steps": len(rows),
        "padded_tokens": {"src": batch * widths[0], "tgt": batch * widths[1]},
        "mean_tokens": {"src": float(src.sum(-1).mean()), "tgt": float(tgt.sum(-1).mean())},
        "capacity": capacity,
        "token_ratio": padded_tokens / (capacity["src_max"] + capacity["tgt_max"]),
        "token_ratio_p99": padded_tokens / (capacity["src_p99"] + capacity["tgt_p99"]),
        "score_ratio": float(padded_scores.sum() / scores.sum()),
        "tile_ratio": float(padded_tiles / row_tiles.sum()),
        "class_tile_ratio": float(full_elements / class_elements.sum()),
        "slots_max": int(slots.max()),
        "slot_ratio": batch / int(slots.max()),
    }


def project(result: dict, profile: dict, baseline: dict) -> dict | None:
    """The profiled bf16 step at ``result``'s R with attention scaled by the tile ratio and every other kernel
    by the token ratio, and its ratio to the single-model step of ``baseline`` (its step of the profiled
    stacking: compiled or not). None without both at that R."""
    reps = result["replicates"]
    entries = [p for p in profile.get("profiles", []) if p["replicates"] == reps and p["precision"] == "bf16"]
    stacking = "native-compile" if profile.get("compile") else "native"
    steps = [r for run in baseline.get("runs", []) for r in run["results"] if r["replicates"] == reps]
    steps = [r for r in steps if r["precision"] == "bf16" and r["stacking"] == stacking]
    if not entries or not steps:
        return None
    kernels = entries[0]["top"]
    attention = sum(k["ms_per_step"] for k in kernels if any(s in k["name"] for s in ATTENTION_KERNELS))
    other = entries[0]["device_ms_per_step"] - attention
    projected = attention / result["tile_ratio"] + other / result["token_ratio"]
    single = steps[0]["baseline_step_ms"]
    return {
        "profiled_ms": entries[0]["device_ms_per_step"],
        "attention_ms": attention,
        "other_ms": other,
        "projected_ms": projected,
        "single_model_ms": single,
        "profiled_ratio": reps * single / steps[0]["step_ms"],
        "projected_ratio": reps * single / projected,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a dataset directory (lsa-interp data generate)")
    parser.add_argument("--replicates", default="1,8,32,64", help="stack sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=2000, help="steps of epoch 0 to sample")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batching", default="random", choices=BATCHING_METHODS)
    parser.add_argument("--tile", default="64,128", help="attention tile: query rows, key columns")
    parser.add_argument("--profile", type=Path, help="a profile_stack.py --json document to project")
    parser.add_argument("--baseline", type=Path, help="a train_throughput.py --json document (its single-model step)")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)
    try:
        sizes = [int(r) for r in args.replicates.split(",")]
        tile = tuple(int(t) for t in args.tile.split(","))
        if min(sizes) < 1 or len(tile) != 2 or min(tile) < 1 or args.steps < 1:
            raise ValueError
    except ValueError:
        parser.error("--replicates, --tile and --steps take positive integers (--tile: two)")
    src_len, tgt_len, src_width, tgt_width, alphabet, transformation = row_lengths(args.data)
    keys = batch_keys(args.batching, alphabet, transformation)
    rows = stack_rows(keys, args.batch_size, max(sizes), args.steps)
    profile = json.loads(args.profile.read_text(encoding="utf-8")) if args.profile else {}
    baseline = json.loads(args.baseline.read_text(encoding="utf-8")) if args.baseline else {}
    results = []
    for reps in sizes:
        result = measure(src_len, tgt_len, (src_width, tgt_width), rows, reps, tile)
        result["projection"] = project(result, profile, baseline)
        results.append(result)
        cap = result["capacity"]
        line = (
            f"R={reps:>3}: capacity {cap['src_max']}+{cap['tgt_max']} tokens of {result['padded_tokens']['src']}"
            f"+{result['padded_tokens']['tgt']} padded ({result['token_ratio']:.2f}x; 99% of steps "
            f"{result['token_ratio_p99']:.2f}x), scores {result['score_ratio']:.2f}x, "
            f"tiles {result['tile_ratio']:.2f}x, class tiles {result['class_tile_ratio']:.2f}x, "
            f"paired slots {result['slots_max']} ({result['slot_ratio']:.2f}x)"
        )
        if result["projection"]:
            p = result["projection"]
            line += (
                f"; profiled {p['profiled_ms']:.1f} ms (attention {p['attention_ms']:.1f}) -> projected "
                f"{p['projected_ms']:.1f} ms, {p['profiled_ratio']:.2f}x -> {p['projected_ratio']:.2f}x"
            )
        print(line)
    if args.json:
        document = {
            "data": str(args.data),
            "batching": args.batching,
            "batch_size": args.batch_size,
            "tile": list(tile),
            "widths": {"src": src_width, "tgt": tgt_width},
            "results": results,
            "row_lengths": length_pairs(src_len, tgt_len),
        }
        atomic_write(args.json, lambda tmp: tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
