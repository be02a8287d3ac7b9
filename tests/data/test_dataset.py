"""On-disk format: Parquet per split + manifest, byte-for-byte determinism, atomic writes, checksums."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pandas as pd
import pyarrow.parquet as pq
import pytest

from lsa_interp.data import generate_dataset, load_dataset, read_manifest, save_dataset
from lsa_interp.data.dataset import Dataset, count_rows, sample_tasks
from lsa_interp.utils import sha256_file


def test_round_trip(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    loaded = load_dataset(out)
    assert loaded.splits == tiny.splits
    for split in tiny.splits:
        assert [t.transformation for t in loaded.splits[split]] == [t.transformation for t in tiny.splits[split]]
    assert loaded.config == tiny.config and loaded.seed == tiny.seed
    assert loaded.train_alphabets == tiny.train_alphabets and loaded.new_alphabets == tiny.new_alphabets


def test_a_few_shot_dataset_round_trips_with_every_example(tiny_config, tmp_path):
    three_shot = generate_dataset(replace(tiny_config, name="tiny-3shot", n_shots=3, window_lengths=(3,)), seed=1)
    assert {len(t.examples) for t in three_shot.splits["train"]} == {3}
    assert load_dataset(save_dataset(three_shot, tmp_path / "ds")).splits == three_shot.splits


def test_manifest_content(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    manifest = read_manifest(out)
    assert manifest["preset"] == "tiny" and manifest["seed"] == 3
    assert manifest["sizes"] == tiny.sizes() and manifest["splits"] == ["train", "val", "test", "test_new_alphabets"]
    assert {split: info["rows"] for split, info in manifest["files"].items()} == tiny.sizes()  # the sweep reads these
    assert len(manifest["train_alphabets"]) == 5 and manifest["package_version"]
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{s}.parquet" for s in tiny.splits] + ["manifest.json"])


def test_same_seed_gives_identical_bytes(tiny_config, tmp_path):
    first = save_dataset(generate_dataset(tiny_config, seed=3), tmp_path / "a")
    second = save_dataset(generate_dataset(tiny_config, seed=3), tmp_path / "b")
    for path in sorted(first.iterdir()):
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name


def test_refuses_to_overwrite_without_force(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    with pytest.raises(FileExistsError, match="not empty"):
        save_dataset(tiny, out)
    (out / "extra.txt").write_text("x")
    save_dataset(tiny, out, force=True)
    assert not (out / "extra.txt").exists()
    assert save_dataset(tiny, tmp_path / "empty_dir_ok").exists()
    stray = tmp_path / "stray"
    stray.write_text("a file where the dataset goes")
    with pytest.raises(FileExistsError, match="not empty"):
        save_dataset(tiny, stray)


def test_force_replaces_only_a_saved_dataset(tiny, tmp_path):
    """A file, or a directory of other files, is refused even with force (it removed them: a user's notes, a home
    directory); a dataset's directory is replaced, an empty one written into."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("precious")
    stray = tmp_path / "stray"
    stray.write_text("a file where the dataset goes")
    for target in (notes, stray):
        with pytest.raises(
            FileExistsError, match=r"holds no dataset \(no manifest.json\); force replaces only a saved"
        ):
            save_dataset(tiny, target, force=True)
    assert (notes / "notes.txt").read_text() == "precious" and stray.read_text() == "a file where the dataset goes"
    assert not list(tmp_path.glob(".*"))  # no staging directory left behind
    (tmp_path / "empty").mkdir()
    assert load_dataset(save_dataset(tiny, tmp_path / "empty", force=True)).splits == tiny.splits


def test_failed_write_leaves_nothing_behind(tiny, tmp_path, monkeypatch):
    import lsa_interp.data.dataset as module

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(module.pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        save_dataset(tiny, tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


def test_corrupted_file_is_detected(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    data = bytearray((out / "val.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (out / "val.parquet").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match the checksum"):
        load_dataset(out)
    assert load_dataset(out, splits=("train",)).splits["train"] == tiny.splits["train"]


def test_missing_or_foreign_directories(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a dataset directory"):
        load_dataset(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not an lsa-interp-dataset manifest"):
        load_dataset(tmp_path)


@pytest.mark.parametrize(
    ("manifest", "error", "message"),
    [
        ("{not json", ValueError, r"manifest.json is not valid UTF-8 JSON \("),
        (b"\xff\xfe{}", ValueError, r"manifest.json is not valid UTF-8 JSON \(.*can't decode byte 0xff"),
        ('{"format": "lsa-interp-dataset", "format_version": 2}', ValueError, "manifest of version 1$"),
        ('{"format_version": 1}', ValueError, "not an lsa-interp-dataset manifest"),
        ("[]", ValueError, "not an lsa-interp-dataset manifest"),
        ('{"format": "lsa-interp-dataset", "format_version": 1, "seed": 7}', ValueError, "lacks or mistypes preset, "),
        (None, FileNotFoundError, "no manifest.json\\); create one with 'lsa-interp data generate'"),
    ],
)
def test_a_manifest_that_is_not_ours_is_refused_with_its_reason(tmp_path, manifest, error, message):
    if manifest is None:
        (tmp_path / "manifest.json").mkdir()  # a directory of that name is no manifest
    elif isinstance(manifest, bytes):
        (tmp_path / "manifest.json").write_bytes(manifest)
    else:
        (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(error, match=message):
        read_manifest(tmp_path)


def test_a_manifest_of_ours_is_read_whole(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    assert read_manifest(str(out)) == json.loads((out / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda m: m.pop("files"), "files"),
        (lambda m: m.update(seed="7"), "seed"),
        (lambda m: m.update(seed=True), "seed"),  # a JSON true is no seed
        (lambda m: m.update(splits={}), "splits"),
        (lambda m: m.update(splits=[["val"]]), "splits"),  # a list, but not of split names
        (lambda m: m.update(train_alphabets=[1, 2]), "train_alphabets"),
        (lambda m: m["files"].update(train=[]), "files.train.file, files.train.rows, files.train.sha256"),
        (lambda m: m["files"]["val"].pop("sha256"), "files.val.sha256"),
        (lambda m: m["files"].pop("test"), "files.test"),  # a split the manifest lists without its file
        (lambda m: m.pop("package_version") and m.pop("preset"), "preset, package_version"),
    ],
)
def test_a_manifest_missing_or_mistyping_a_field_names_it(tiny, tmp_path, change, named):
    """Every field that the loaders and `data show` read is checked with its JSON type, so a damaged manifest is one
    ValueError naming the fields, not a KeyError or AttributeError later."""
    out = save_dataset(tiny, tmp_path / "ds")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    change(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"manifest.json lacks or mistypes {re.escape(named)}; regenerate the dataset"
    ):
        read_manifest(out)


def test_a_split_file_that_is_not_parquet_or_missing_is_named(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    (out / "val.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"val.parquet is missing; regenerate the dataset"):
        count_rows(out)
    with pytest.raises(FileNotFoundError, match=r"val.parquet is missing"):
        sample_tasks(out, "val", 2)
    (out / "val.parquet").write_text("not parquet")
    with pytest.raises(
        ValueError, match=r"val.parquet is not a Parquet split of this dataset \(.*\); regenerate the dataset"
    ):
        count_rows(out)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"]["val"]["sha256"] = sha256_file(out / "val.parquet")
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ValueError, match=r"val.parquet is not a Parquet split of this dataset"):
        load_dataset(out)  # its checksum matches, so the reading fails


def test_row_counts_refuse_a_split_file_without_the_columns_they_read(tiny, tmp_path):
    """`count_rows` reads only the rule and copy columns, so a Parquet file without one is named in a ValueError
    (not a KeyError from pandas after reading every column)."""
    out = save_dataset(tiny, tmp_path / "ds")
    pq.write_table(pq.read_table(out / "val.parquet").drop_columns(["is_copy"]), out / "val.parquet")
    message = (
        r"val.parquet is not a Parquet split of this dataset \(No match for .*is_copy.*\); regenerate the dataset$"
    )
    with pytest.raises(ValueError, match=message) as error:
        count_rows(out)
    assert "\n" not in str(error.value)  # pyarrow's schema dump is left out: one line for the CLI


def test_a_manifest_written_without_escapes_is_read_as_utf_8_whatever_the_locale(tiny, tmp_path, ascii_locale):
    out = save_dataset(tiny, tmp_path / "ds")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["config"]["notes"] = "données à 20 alphabets"
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    assert read_manifest(out)["config"]["notes"] == "données à 20 alphabets"


def test_unknown_split(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    with pytest.raises(ValueError, match="unknown split"):
        load_dataset(out, splits=("nope",))


def test_counts_and_samples(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    counts = count_rows(out)
    assert counts[("train", True)].sum() == counts[("train", False)].sum() == len(tiny.splits["train"]) // 2
    assert counts[("test_new_alphabets", True)].sum() == 0
    assert int(counts.to_numpy().sum()) == sum(tiny.sizes().values())
    sample = sample_tasks(out, "val", 4)
    assert len(sample) == 4 and all(t in tiny.splits["val"] for t in sample)
    summary = tiny.summary()
    assert summary["tasks"].sum() == sum(tiny.sizes().values())


def test_row_counts_are_integers_per_rule_name_under_named_columns(tiny, tmp_path):
    counts = count_rows(save_dataset(tiny, tmp_path / "ds"))
    assert counts.columns.names == ["split", "is_copy"]
    assert sorted(counts.columns) == sorted((split, copy) for split in tiny.splits for copy in (False, True))
    assert not isinstance(counts.index, pd.CategoricalIndex)  # plain rule names, not the Parquet dictionary
    assert counts.index.tolist() == sorted({t.transformation for tasks in tiny.splits.values() for t in tasks})
    assert all(dtype == "int64" for dtype in counts.dtypes)
    val = tiny.splits["val"]  # one split: no concatenation that would turn the Parquet dictionary into strings
    one = count_rows(save_dataset(Dataset(tiny.config, tiny.seed, {"val": val}, [], []), tmp_path / "one"))
    assert not isinstance(one.index, pd.CategoricalIndex)
    assert one.index.tolist() == sorted({t.transformation for t in val})


def test_samples_are_the_evenly_spaced_rows_from_the_first(tiny, tmp_path):
    out = save_dataset(tiny, tmp_path / "ds")
    val = tiny.splits["val"]
    step = len(val) // 4
    assert sample_tasks(out, "val", 4) == [val[i] for i in range(0, len(val), step)][:4]
    assert sample_tasks(out, "val", 1) == [val[0]]
    assert sample_tasks(out, "val", len(val)) == val
    assert sample_tasks(out, "val", 0) == []
    one = save_dataset(Dataset(tiny.config, tiny.seed, {"val": val[:1]}, [], []), tmp_path / "one")
    assert sample_tasks(one, "val", 3) == val[:1]


def test_summary_is_sorted_with_a_fresh_index(tiny):
    summary = tiny.summary()
    assert summary.index.tolist() == list(range(len(summary)))
    keys = list(zip(summary["split"], summary["transformation"], summary["copy"]))
    assert keys == sorted(keys)


def test_a_dataset_saves_into_an_empty_or_new_nested_directory_and_keeps_an_empty_split(tiny, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_dataset(save_dataset(tiny, empty)).splits == tiny.splits
    splits = {**tiny.splits, "test": []}
    out = save_dataset(Dataset(tiny.config, tiny.seed, splits, [], []), tmp_path / "new" / "nested" / "ds")
    assert load_dataset(out).splits == splits


def test_a_manifest_whose_config_holds_a_nan_fraction_is_refused_by_name(tiny, tmp_path):
    """JSON's NaN passed the config's check and failed in numpy when the dataset was generated again."""
    out = save_dataset(tiny, tmp_path / "ds")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["config"]["split_fractions"] = [float("nan"), 0.5, 0.5]
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")  # json writes NaN
    with pytest.raises(ValueError, match=re.escape("split_fractions must each lie between 0 and 1 (exclusive)")):
        load_dataset(out)
