"""`Dataset` and its on-disk form: one Parquet file per split plus ``manifest.json``.

Files are written into a temporary directory next to the target and renamed into place, so a failed or
interrupted write never leaves a half-written dataset behind.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lsa_interp.data.presets import DatasetConfig
from lsa_interp.data.task import Task
from lsa_interp.utils import PACKAGE_VERSION, make_staging_dir, no_cyclic_gc, sha256_file

FORMAT = "lsa-interp-dataset"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_SCHEMA = pa.schema(
    [
        ("alphabet", pa.dictionary(pa.int32(), pa.string())),
        ("examples_in", pa.list_(pa.string())),
        ("examples_out", pa.list_(pa.string())),
        ("query", pa.string()),
        ("answer", pa.string()),
        ("transformation", pa.dictionary(pa.int32(), pa.string())),
        ("is_copy", pa.bool_()),
    ]
)


@dataclass
class Dataset:
    """Generated tasks: ``splits`` maps ``train``/``val``/``test``/``test_new_alphabets`` to `Task` lists."""

    config: DatasetConfig
    seed: int
    splits: dict[str, list[Task]]
    train_alphabets: list[str]
    new_alphabets: list[str]

    def sizes(self) -> dict[str, int]:
        """Number of tasks per split."""
        return {name: len(tasks) for name, tasks in self.splits.items()}

    def summary(self) -> pd.DataFrame:
        """Task counts per split x transformation x copy (columns ``split, transformation, copy, tasks``)."""
        counts = Counter((name, t.transformation, t.is_copy) for name, tasks in self.splits.items() for t in tasks)
        frame = pd.DataFrame(
            [(s, tr, cp, n) for (s, tr, cp), n in counts.items()], columns=["split", "transformation", "copy", "tasks"]
        )
        return frame.sort_values(["split", "transformation", "copy"], ignore_index=True)


def _to_table(tasks: list[Task]) -> pa.Table:
    with no_cyclic_gc():
        return _build_table(tasks)


def _build_table(tasks: list[Task]) -> pa.Table:
    offsets = pa.array(np.cumsum([0] + [len(t.examples) for t in tasks]), type=pa.int32())
    examples = [ex for t in tasks for ex in t.examples]
    columns = {
        "alphabet": pa.array([t.alphabet for t in tasks], pa.string()).dictionary_encode(),
        "examples_in": pa.ListArray.from_arrays(offsets, pa.array([ex[0] for ex in examples], pa.string())),
        "examples_out": pa.ListArray.from_arrays(offsets, pa.array([ex[1] for ex in examples], pa.string())),
        "query": pa.array([t.query for t in tasks], pa.string()),
        "answer": pa.array([t.answer for t in tasks], pa.string()),
        "transformation": pa.array([t.transformation for t in tasks], pa.string()).dictionary_encode(),
        "is_copy": pa.array([t.is_copy for t in tasks], pa.bool_()),
    }
    return pa.Table.from_arrays([columns[field.name] for field in _SCHEMA], schema=_SCHEMA)


def _string_column(table: pa.Table, name: str) -> list[str]:
    """A (possibly dictionary-encoded) string column as a list, decoded in bulk."""
    column = table.column(name).combine_chunks()
    if pa.types.is_dictionary(column.type):
        words = column.dictionary.to_pylist()
        return [words[i] for i in column.indices.to_numpy().tolist()]
    return column.to_numpy(zero_copy_only=False).tolist()


def _examples_column(table: pa.Table, name: str) -> list[tuple[str, ...]]:
    """A list<string> column as tuples, rebuilt from its flat values and offsets (much faster than to_pylist)."""
    column = table.column(name).combine_chunks()
    values = column.flatten().to_numpy(zero_copy_only=False).tolist()
    offsets = column.offsets.to_pylist()
    if len(values) == len(column):
        return [(v,) for v in values]
    return [tuple(values[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _from_table(table: pa.Table) -> list[Task]:
    with no_cyclic_gc():
        ins, outs = _examples_column(table, "examples_in"), _examples_column(table, "examples_out")
        examples = [tuple(zip(i, o, strict=True)) for i, o in zip(ins, outs, strict=True)]
        col = {name: _string_column(table, name) for name in ("alphabet", "query", "answer", "transformation")}
        return [
            Task(alphabet, ex, query, answer, transformation)
            for alphabet, ex, query, answer, transformation in zip(
                col["alphabet"], examples, col["query"], col["answer"], col["transformation"], strict=True
            )
        ]


def save_dataset(dataset: Dataset, out_dir: str | os.PathLike, force: bool = False) -> Path:
    """Write ``dataset`` to ``out_dir`` (Parquet per split + manifest) and return the directory.

    Raises FileExistsError when ``out_dir`` exists and is not empty, unless ``force``; ``force`` replaces only a saved
    dataset (a directory holding a manifest), never a file or a directory of other files.
    """
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise FileExistsError(f"{out} exists and is not empty; pass force=True (CLI: --force) to overwrite it")
        if not (out / MANIFEST).is_file():
            raise FileExistsError(
                f"{out} holds no dataset (no {MANIFEST}); force replaces only a saved dataset: give a new or empty "
                "directory"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_staging_dir(out)
    try:
        files = {}
        for name, tasks in dataset.splits.items():
            path = tmp / f"{name}.parquet"
            pq.write_table(_to_table(tasks), path, compression="zstd")
            files[name] = {"file": path.name, "rows": len(tasks), "sha256": sha256_file(path)}
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "preset": dataset.config.name,
            "seed": dataset.seed,
            "package_version": PACKAGE_VERSION,
            "config": dataset.config.to_dict(),
            "sizes": dataset.sizes(),
            "splits": list(dataset.splits),
            "train_alphabets": dataset.train_alphabets,
            "new_alphabets": dataset.new_alphabets,
            "files": files,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)  # a dataset (a file or other files were refused above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


_MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {
    "preset": str,
    "seed": int,
    "package_version": str,
    "config": dict,
    "splits": list,
    "train_alphabets": list,
    "new_alphabets": list,
    "files": dict,
}
"""What `save_dataset` writes into a manifest besides its format, and the JSON type of each (a list: of strings)."""
_FILE_FIELDS: dict[str, type] = {"file": str, "rows": int, "sha256": str}
"""What a manifest records of each split's file."""


def read_manifest(data_dir: str | os.PathLike) -> dict:
    """The manifest of a saved dataset; raises FileNotFoundError when it is missing and ValueError when it is not
    ours: not UTF-8 JSON, another format or version, or a field missing or of the wrong type (named)."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{data_dir} is not a dataset directory (no {MANIFEST}); create one with 'lsa-interp data generate'"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid UTF-8 JSON ({err})") from None
    if not isinstance(manifest, dict) or (manifest.get("format"), manifest.get("format_version")) != (
        FORMAT,
        FORMAT_VERSION,
    ):
        raise ValueError(f"{path} is not an {FORMAT} manifest of version {FORMAT_VERSION}")
    fields = [(key, manifest.get(key), kind) for key, kind in _MANIFEST_FIELDS.items()]
    for split, info in manifest["files"].items() if isinstance(manifest.get("files"), dict) else ():
        info = info if isinstance(info, dict) else {}
        fields += [(f"files.{split}.{key}", info.get(key), kind) for key, kind in _FILE_FIELDS.items()]
    broken = [
        key
        for key, value, kind in fields
        if not isinstance(value, kind)
        or isinstance(value, bool)
        or (kind is list and not all(isinstance(item, str) for item in value))
    ]
    if not broken and set(manifest["splits"]) - set(manifest["files"]):
        broken = [f"files.{split}" for split in manifest["splits"] if split not in manifest["files"]]
    if broken:
        raise ValueError(
            f"{path} lacks or mistypes {', '.join(broken)}; regenerate the dataset ('lsa-interp data generate')"
        )
    return manifest


def _read_split(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One split's Parquet table (only ``columns`` if given); raises FileNotFoundError when the file is missing and
    ValueError (one line) when it is not Parquet or lacks a column."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; regenerate the dataset")
    try:
        return pq.read_table(path, columns=columns)
    except pa.ArrowException as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{path} is not a Parquet split of this dataset ({reason}); regenerate the dataset") from None


def load_dataset(data_dir: str | os.PathLike, splits: tuple[str, ...] | None = None) -> Dataset:
    """Load a dataset written by `save_dataset` (all splits, or only ``splits``).

    Raises FileNotFoundError for a missing directory or file, ValueError for an unknown split or a file
    whose checksum does not match the manifest.
    """
    manifest = read_manifest(data_dir)
    files = manifest["files"]
    wanted = tuple(files) if splits is None else splits
    unknown = [s for s in wanted if s not in files]
    if unknown:
        raise ValueError(f"unknown split(s) {unknown}; this dataset has: {', '.join(files)}")
    loaded = {}
    for name in wanted:
        path = Path(data_dir) / files[name]["file"]
        if path.is_file() and sha256_file(path) != files[name]["sha256"]:
            raise ValueError(f"{path} does not match the checksum in {MANIFEST}; the file is corrupted or was edited")
        loaded[name] = _from_table(_read_split(path))
    return Dataset(
        DatasetConfig.from_dict(manifest["config"]),
        manifest["seed"],
        loaded,
        manifest["train_alphabets"],
        manifest["new_alphabets"],
    )


def count_rows(data_dir: str | os.PathLike) -> pd.DataFrame:
    """Rows per transformation (index) x (split, is_copy) (columns), read from the Parquet columns alone."""
    manifest = read_manifest(data_dir)
    frames = []
    for split, info in manifest["files"].items():
        frame = _read_split(Path(data_dir) / info["file"], ["transformation", "is_copy"]).to_pandas()
        frame["transformation"] = frame["transformation"].astype(str)
        frame["split"] = split
        frames.append(frame)
    counts = pd.concat(frames).groupby(["transformation", "split", "is_copy"]).size()
    full = pd.MultiIndex.from_product([list(manifest["files"]), [False, True]], names=["split", "is_copy"])
    return counts.unstack(["split", "is_copy"]).reindex(columns=full).fillna(0).astype(int)


def sample_tasks(data_dir: str | os.PathLike, split: str, n: int) -> list[Task]:
    """``n`` tasks of ``split`` at evenly spaced rows (the same ones every time)."""
    manifest = read_manifest(data_dir)
    if split not in manifest["files"]:
        raise ValueError(f"unknown split {split!r}; this dataset has: {', '.join(manifest['files'])}")
    table = _read_split(Path(data_dir) / manifest["files"][split]["file"])
    if n <= 0 or table.num_rows == 0:
        return []
    step = max(table.num_rows // n, 1)
    return _from_table(table.take(list(range(0, table.num_rows, step))[:n]))
