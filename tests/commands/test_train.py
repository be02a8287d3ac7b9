"""The train command's helpers: the dataset it generates into a new run's directory."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import lsa_interp.data
from lsa_interp.commands import train
from lsa_interp.commands.common import UserError
from lsa_interp.data import read_manifest
from lsa_interp.data.presets import PRESETS, DatasetConfig


def test_a_run_s_data_folder_of_other_files_is_refused_not_removed(tmp_path, monkeypatch):
    """OUT/data without a manifest (the user's files) is named and kept: the dataset writer replaces only a dataset."""
    monkeypatch.setattr(lsa_interp.data, "generate_dataset", lambda *a, **k: pytest.fail("the dataset was generated"))
    out = tmp_path / "run" / "data"
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(
        UserError, match=r"^.*/run/data holds no dataset \(no manifest.json\); move it away or give --data"
    ):
        train._generate_into("copy-20", 0, out)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_new_run_s_dataset_is_generated_once_per_preset_and_seed(tmp_path, monkeypatch):
    """A dataset of the preset and seed already in OUT/data is kept (a retried command does not generate it again);
    another seed or preset is generated over it."""
    for name in ("copy-20", "nocopy-20"):
        tiny = DatasetConfig(name=name, n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
        monkeypatch.setitem(PRESETS, name, tiny)
    generated = []
    real = lsa_interp.data.generate_dataset

    def generate(config, seed):
        generated.append((config.name, seed))
        return real(config, seed=seed)

    monkeypatch.setattr(lsa_interp.data, "generate_dataset", generate)
    printed = io.StringIO()
    monkeypatch.setattr(train, "console", Console(file=printed, width=1000))
    out = tmp_path / "run" / "data"
    for preset, seed in (("copy-20", 2), ("copy-20", 2), ("copy-20", 3), ("nocopy-20", 3)):
        train._generate_into(preset, seed, out)
        manifest = read_manifest(out)
        assert (manifest["preset"], manifest["seed"]) == (preset, seed)
    assert generated == [("copy-20", 2), ("copy-20", 3), ("nocopy-20", 3)]
    assert printed.getvalue().splitlines() == [
        f"generating copy-20 (seed 2) into {out}",
        f"generating copy-20 (seed 3) into {out}",
        f"generating nocopy-20 (seed 3) into {out}",
    ]
