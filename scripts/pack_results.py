"""Pack what a training session produced into tar chunks small enough for a size-limited copy, and unpack them.

A lent GPU machine hands back at most 8 files of 16 MiB, 64 MiB in all, per command. This bundles the
parts of one or more run or sweep directories that are worth keeping (final models with their evaluations
and cards, configs, metrics, result tables, plans and benchmark JSON; never datasets, and resumable
``state.pt`` only with ``--states``, of stacks that have not finished) into ``bundle.tar.partNN`` chunks of
at most ``--chunk-mib`` MiB plus ``bundle.sha256``. Pack into a folder on the GPU machine, then copy at
most 4 chunks (and the checksum) to ``$OUT`` per command:

    python scripts/pack_results.py pack runs/grid runs/session --states --out /tmp/bundle   # fp32 model 5.6 MB
    cp /tmp/bundle/bundle.sha256 /tmp/bundle/bundle.tar.part0[0-3] "$OUT"/  # next command: part0[4-7] ...
    python scripts/pack_results.py unpack FETCHED_DIR [FETCHED_DIR ...] --into runs/   # here, afterwards
    python scripts/pack_results.py records runs/grid --into analyses/runs/2026-12-01-h100   # what is committed
    python scripts/pack_results.py carry runs --into ~/.local/share/lsa-interp/gpu-carry   # what continues

``unfinished SWEEP`` prints the stacks of a sweep that have not finished; ``blockers SWEEP --status N`` why the
queue's next stack should not follow it (scripts/gpu_train.sh's driver). ``carry`` keeps, of an unpacked
session (``grid/`` the sweep, ``session/`` its plan), only what the next GPU session needs to continue its
unfinished stacks (their config, metrics and state, the sweep's plan and the session's grid file: about
17 MB per fp32 run); it replaces ``--into`` and empties it when every stack finished.

A device call carries up at most 64 MiB of working tree, the checkout included, so the next session takes
that folder up in parts, one call each (scripts/gpu_train.sh ``receive``, then ``start``, which joins them
into ``runs/carry``); ``upload`` cuts them to fit and prints the calls:

    python scripts/pack_results.py upload ~/.local/share/lsa-interp/gpu-carry --into runs/upload
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

KEEP_SUFFIXES = (".json", ".csv", ".md", ".log", ".txt")
"""Results (configs, evaluations, cards, plans, manifests), tables, logs and the GPU test reports (`gpu_train.sh`'s
preflight checks, `gpu_session.sh`'s)."""
KEEP_NAMES = {"metrics.jsonl", "grid.toml", "done"}
"""Kept besides `KEEP_SUFFIXES`: a run's metrics, a sweep's grid file and its finished stack's marker."""
SKIP_PARTS = {"data", "__pycache__"}
WEIGHTS, STATE, DONE = "model.safetensors", "state.pt", "done"
FAILURES = "failures"
"""A sweep's folder of failed units, one ``{kind}-{name}.txt`` each (lsa_interp/sweep/failures.py)."""
COMPILE_CACHE = "compile-cache"
"""A root of this name holds a session's new compiled kernels (lsa_interp/training/compile_cache.py): kept whole."""
CONTINUES = ("config.json", "train_config.json", "metrics.jsonl", STATE)
"""What continues an unfinished stack in its run directory (datasets are made again from their seeds)."""
ROOT = Path(__file__).resolve().parents[1]
TREE_LIMIT_MIB = 64.0
"""The working tree one device call takes along: tracked and untracked-not-ignored files and carried paths."""
MARGIN_MIB = 1.0
"""Room left in each call for files that change between the upload and the call."""


def wanted(
    path: Path, root: Path, weights: bool = True, states: bool = False, finished: Callable[[Path], bool] | None = None
) -> bool:
    """Keep small result files and (with ``weights``) final models; of a stack that has not finished, only
    what continues it (`CONTINUES`; its resumable state only with ``states``). Skip datasets, other states,
    temporary files and HTML pages (each inlines plotly.js, about 4.8 MB: make them again here from the JSON
    or model). ``finished``: `stack_finished`, or a cached copy of it when many files are asked about."""
    parts = path.relative_to(root).parts
    if any(part in SKIP_PARTS or part.startswith(".") for part in parts):
        return False
    if root.name == COMPILE_CACHE:
        return True
    stack = stack_of(path, root)
    if stack is not None and not (finished or stack_finished)(stack):
        return path.parent == stack and path.name in CONTINUES and (states or path.name != STATE)
    if path.name == STATE:
        return False
    if path.name == WEIGHTS:
        return weights
    return path.name in KEEP_NAMES or path.suffix in KEEP_SUFFIXES


def stack_of(path: Path, root: Path) -> Path | None:
    """The stack run directory (``.../stacks/NAME``) that holds ``path``, if any."""
    parts = path.relative_to(root).parts
    if "stacks" not in parts[:-2]:
        return None
    index = parts.index("stacks")
    return root.joinpath(*parts[: index + 2])


def stack_finished(stack: Path) -> bool:
    """Whether the stack trained all it will: its ``done`` marker, or its recipe's ``max_steps`` reached by
    the replicates' final models (the sweep's test, read from the files alone)."""
    if (stack / DONE).is_file():
        return True
    config = stack / "train_config.json"
    max_steps = json.loads(config.read_text(encoding="utf-8")).get("max_steps") if config.is_file() else None
    models = list(stack.glob("replicate-*/model/config.json")) if max_steps else []
    if not models:
        return False
    return (
        max(json.loads(m.read_text(encoding="utf-8")).get("metadata", {}).get("steps", 0) for m in models) >= max_steps
    )


def bundle_bytes(roots: list[Path], states: bool) -> bytes:
    """A gzip-compressed tar of the wanted files under ``roots``, named by each root's last component."""
    buffer, finished = io.BytesIO(), functools.cache(stack_finished)
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for root in roots:
            kept = (p for p in root.rglob("*") if p.is_file() and wanted(p, root, states=states, finished=finished))
            for path in sorted(kept):
                tar.add(path, arcname=str(Path(root.name) / path.relative_to(root)))
    return buffer.getvalue()


def pack(roots: list[Path], out: Path, chunk_mib: float, states: bool = False) -> list[Path]:
    """Write ``bundle.tar.partNN`` chunks and ``bundle.sha256`` (of the whole bundle) into ``out``."""
    missing = [str(root) for root in roots if not root.is_dir()]
    if missing:
        raise SystemExit(f"not a directory: {', '.join(missing)}")
    data = bundle_bytes(roots, states)
    size = int(chunk_mib * 2**20)
    out.mkdir(parents=True, exist_ok=True)
    chunks = write_chunks(data, out, "bundle", size, size)
    print(f"packed {len(data) / 2**20:.1f} MiB from {', '.join(map(str, roots))} into {len(chunks)} chunk(s)")
    return chunks


def write_chunks(data: bytes, out: Path, name: str, first: int, rest: int) -> list[Path]:
    """Write ``data`` into ``out`` as ``NAME.tar.partNN`` chunks, the first of at most ``first`` bytes and the
    others ``rest`` (at least one chunk, empty for empty data), and ``NAME.sha256``: the checksum of the whole
    and the number of chunks. Returns the chunks. Each file is written atomically, the checksum last, after the
    chunks of an earlier bundle of that name (which would join into this one) and its checksum are removed."""
    bounds = [0]
    while bounds[-1] < len(data) or len(bounds) == 1:
        bounds.append(min(len(data), bounds[-1] + (first if len(bounds) == 1 else rest)))
    (out / f"{name}.sha256").unlink(missing_ok=True)
    for stale in out.glob(f"{name}.tar.part[0-9]*"):
        stale.unlink()
    chunks = [out / f"{name}.tar.part{index:02d}" for index in range(len(bounds) - 1)]
    for chunk, start, end in zip(chunks, bounds, bounds[1:], strict=False):
        _replace_with(chunk, data[start:end])
    _replace_with(out / f"{name}.sha256", f"{hashlib.sha256(data).hexdigest()} {len(chunks)}\n".encode())
    return chunks


def _replace_with(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it (no half-written file under its name)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    partial.replace(path)


def parts_status(sources: list[Path], name: str) -> tuple[dict[int, Path], str | None, int | None]:
    """The chunks ``NAME.tar.partNN`` found in ``sources`` by part number, the bundle's checksum and how many
    chunks it has (from ``NAME.sha256``; None when that file is missing, the count also when it predates the
    count)."""
    chunks = {int(c.name.rsplit("part", 1)[1]): c for source in sources for c in source.glob(f"{name}.tar.part[0-9]*")}
    sums = [s / f"{name}.sha256" for s in sources if (s / f"{name}.sha256").is_file()]
    fields = sums[0].read_text(encoding="utf-8").split() if sums else []
    return chunks, fields[0] if fields else None, int(fields[1]) if len(fields) > 1 else None


def joined(sources: list[Path], name: str = "bundle") -> bytes:
    """The bundle ``name`` joined from its chunks in ``sources``, checked against its checksum.

    Raises SystemExit naming the missing parts, or when the checksum or the chunks are missing or damaged.
    """
    chunks, expected, count = parts_status(sources, name)
    if not chunks or expected is None:
        raise SystemExit(f"no {name}.tar.part* and {name}.sha256 in {', '.join(map(str, sources))}")
    missing = [f"{index:02d}" for index in range(count or 0) if index not in chunks]
    if missing:
        raise SystemExit(f"{name}: part(s) {', '.join(missing)} of {count} missing from {', '.join(map(str, sources))}")
    order = range(count) if count is not None else sorted(chunks)  # parts past the count are another bundle's
    data = b"".join(chunks[index].read_bytes() for index in order)
    if hashlib.sha256(data).hexdigest() != expected:
        raise SystemExit("checksum mismatch: a chunk is missing or damaged")
    return data


def unpack(sources: list[Path], into: Path, name: str = "bundle") -> None:
    """Join the chunks found in ``sources`` (in part order), check the checksum and extract into ``into``."""
    data = joined(sources, name)
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    print(f"unpacked {len(data) / 2**20:.1f} MiB into {into}")


def records(source: Path, into: Path) -> int:
    """Copy the run records under ``source`` (configs, evaluations, metrics, tables, analysis JSON; no weights;
    nothing of a stack that has not finished) into ``into``, the form in which every trained run is kept in the
    repository; returns the files copied."""
    if not source.is_dir():
        raise SystemExit(f"not a directory: {source}")
    finished = functools.cache(stack_finished)
    files = sorted(p for p in source.rglob("*") if p.is_file() and wanted(p, source, weights=False, finished=finished))
    files = [p for p in files if (stack := stack_of(p, source)) is None or finished(stack)]
    for path in files:
        target = into / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_bytes(path.read_bytes())
        temporary.replace(target)
    print(f"copied {len(files)} record files from {source} into {into}")
    return len(files)


def unfinished_stacks(sweep: Path) -> list[Path]:
    """The stack directories of ``sweep`` that saved a state and have not finished, in name order."""
    return sorted(state.parent for state in sweep.glob("stacks/*/" + STATE) if not stack_finished(state.parent))


def follow_blockers(sweep: Path, status: int) -> list[str]:
    """Why the queue's next stack should not follow the sweep in ``sweep`` that exited with ``status``, one line
    each; empty when it may. It may after exit 0, or after exit 1 whose recorded failures are all analyses and whose
    trained models all have their evaluation (so the planner counts the runs as done; the same sweep run again
    retries the analyses), when no stack is left unfinished. A failed training or evaluation would have its runs
    planned again, and any other exit is a crash (as is an exit 1 with nothing recorded: a traceback)."""
    unfinished = unfinished_stacks(sweep)
    blockers = [f"{stack.name} did not finish" for stack in unfinished]
    failed = sorted((sweep / FAILURES).glob("*.txt"))
    models = [m.parent for m in sorted(sweep.glob("stacks/*/replicate-*/model/config.json"))]
    if status == 1 and failed and models:
        blockers += [f"{path.stem} failed" for path in failed if not path.name.startswith("analyse-")]
        blockers += [
            f"{model.parents[1].name}/{model.parent.name} has no evaluation"
            for model in models
            if model.parents[1] not in unfinished and not (model / "evaluation.json").is_file()
        ]
    elif status != 0:
        blockers.append(f"the sweep exited {status}")
    return blockers


def carry(source: Path, into: Path) -> int:
    """Replace ``into`` with what continues the unfinished stacks of the session unpacked in ``source``
    (``source/grid``: the sweep, ``source/session``: its grid file and plan); returns the stacks kept.

    ``into`` ends empty when every stack finished or there is no ``source/grid``. Raises SystemExit when
    ``source`` is not a directory.
    """
    sweep, session = source / "grid", source / "session"
    if not source.is_dir():
        raise SystemExit(f"not a directory: {source}")
    unfinished = unfinished_stacks(sweep)
    staging = into.with_name(f".{into.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    files = (
        [sweep / "plan.json", sweep / "grid.toml", session / "grid.toml", session / "plan.json"] if unfinished else []
    )
    files += [stack / name for stack in unfinished for name in CONTINUES]
    for path in (p for p in files if p.is_file()):
        target = staging / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    staging.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(into, ignore_errors=True)
    staging.rename(into)
    size = sum(p.stat().st_size for p in into.rglob("*") if p.is_file())
    print(f"kept {len(unfinished)} unfinished stack(s) to continue, {size / 2**20:.1f} MiB, in {into}")
    return len(unfinished)


def working_tree_mib(root: Path = ROOT) -> float:
    """MiB of what a device call takes of ``root`` without carried paths: tracked and untracked-not-ignored
    files. Raises SystemExit when git cannot list them."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as error:
        message = f"cannot list the working tree of {root} with git ({error}): give --first-mib and --part-mib"
        raise SystemExit(message) from None
    files = (root / name for name in dict.fromkeys(listed.decode().split("\0")) if name)
    return sum(path.stat().st_size for path in files if path.is_file()) / 2**20


def upload(source: Path, into: Path, first_mib: float, part_mib: float, wheels: Path | None = None) -> int:
    """Cut what ``carry`` kept in ``source`` into parts for the calls of the next GPU session: the first
    (which also carries ``wheels``) at most ``first_mib`` MiB, the others ``part_mib``. Replaces ``into`` with
    ``carry.tar.partNN`` and ``carry.sha256`` (checksum and count), prints the calls and returns the parts
    (0, leaving ``into`` absent, when ``source`` holds nothing). Raises SystemExit when ``source`` is not a
    directory or a part would hold nothing."""
    if not source.is_dir():
        raise SystemExit(f"not a directory: {source}")
    if min(first_mib, part_mib) <= 0:
        raise SystemExit(f"no room for a part: first {first_mib:.1f} MiB, others {part_mib:.1f} MiB a call")
    shutil.rmtree(into, ignore_errors=True)
    files = sorted(p for p in source.rglob("*") if p.is_file())
    if not files:
        print(f"nothing to carry up: {source} is empty")
        return 0
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in files:
            tar.add(path, arcname=str(path.relative_to(source)))
    data = buffer.getvalue()
    staging = into.with_name(f".{into.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    parts = len(write_chunks(data, staging, "carry", int(first_mib * 2**20), int(part_mib * 2**20)))
    staging.rename(into)
    print(f"cut {len(data) / 2**20:.1f} MiB from {source} into {parts} part(s) in {into}; the session's calls:")
    for index in range(parts):
        carried = [into / f"carry.tar.part{index:02d}"]
        if index == 0:
            carried = [*([wheels] if wheels else []), into / "carry.sha256", *carried]
        carried = [str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else str(p) for p in carried]
        command = "bash scripts/gpu_train.sh " + ("start MINUTES" if index == parts - 1 else "receive")
        print(f"  call {index + 1}: carry {' '.join(carried)}; {command}")
    return parts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="bundle run or sweep directories into chunks")
    packing.add_argument("roots", nargs="+", type=Path)
    packing.add_argument("--out", type=Path, required=True)
    packing.add_argument("--chunk-mib", type=float, default=15.0)
    packing.add_argument("--states", action="store_true", help="include the states of stacks that did not finish")
    unpacking = commands.add_parser("unpack", help="join, check and extract a bundle")
    unpacking.add_argument("sources", nargs="+", type=Path)
    unpacking.add_argument("--into", type=Path, required=True)
    unpacking.add_argument("--name", default="bundle", help="the bundle's name: bundle (pack), carry (upload)")
    keeping = commands.add_parser("records", help="copy a sweep's run records, without weights, for the repository")
    keeping.add_argument("source", type=Path)
    keeping.add_argument("--into", type=Path, required=True)
    listing = commands.add_parser("unfinished", help="print the stacks of a sweep that have not finished")
    listing.add_argument("sweep", type=Path)
    blocking = commands.add_parser("blockers", help="why the queue's next stack should not follow a sweep")
    blocking.add_argument("sweep", type=Path)
    blocking.add_argument("--status", type=int, required=True, help="the sweep's exit status")
    carrying = commands.add_parser("carry", help="keep what continues a session's unfinished stacks")
    carrying.add_argument("source", type=Path, help="an unpacked session (with grid/ and session/)")
    carrying.add_argument("--into", type=Path, required=True)
    uploading = commands.add_parser("upload", help="cut a kept carry folder into parts, one per device call")
    uploading.add_argument("source", type=Path, help="what `carry` kept")
    uploading.add_argument("--into", type=Path, required=True, help="where the parts go (replaced)")
    uploading.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="what the first call also carries")
    uploading.add_argument("--first-mib", type=float, help="the first part (default: what the call has room for)")
    uploading.add_argument("--part-mib", type=float, help="every other part (default: what a call has room for)")
    receiving = commands.add_parser("received", help="which parts of an upload a folder holds")
    receiving.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        pack(args.roots, args.out, args.chunk_mib, args.states)
    elif args.command == "records":
        records(args.source, args.into)
    elif args.command == "carry":
        carry(args.source, args.into)
    elif args.command == "unfinished":
        print("\n".join(map(str, unfinished_stacks(args.sweep))))
    elif args.command == "blockers":
        print("\n".join(follow_blockers(args.sweep, args.status)))
    elif args.command == "upload":
        upload_parts(args)
    elif args.command == "received":
        print(received(args.folder))
    else:
        unpack(args.sources, args.into, args.name)


def upload_parts(args: argparse.Namespace) -> None:
    """`upload` with each part as large as its call has room for, unless given."""
    wheels = args.wheels if args.wheels.is_dir() else None
    room = None if args.first_mib and args.part_mib else TREE_LIMIT_MIB - MARGIN_MIB - working_tree_mib()
    wheels_mib = sum(p.stat().st_size for p in wheels.rglob("*") if p.is_file()) / 2**20 if wheels else 0.0
    first = args.first_mib or room - wheels_mib
    upload(args.source, args.into, first, args.part_mib or room, wheels)


def received(folder: Path) -> str:
    """One line: the parts of an upload that ``folder`` holds, and those still to send."""
    chunks, _, count = parts_status([folder], "carry")
    if count is None:
        return f"nothing received in {folder}" if not chunks else f"{len(chunks)} part(s), no carry.sha256 yet"
    missing = [f"{index:02d}" for index in range(count) if index not in chunks]
    held = ", ".join(f"{index:02d}" for index in sorted(chunks)) or "none"
    return f"received part(s) {held} of {count}" + (f"; still to send: {', '.join(missing)}" if missing else "")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as error:
        if not isinstance(error.code, str):
            raise
        print(f"pack_results: error: {error.code}", file=sys.stderr)
        sys.exit(2)
