"""The command line: generate/show, refusing to overwrite, one-line errors with exit code 2."""

from __future__ import annotations

import pytest

from lsa_interp.data import load_dataset
from lsa_interp.data.presets import PRESETS, DatasetConfig
from tests.helpers import run


@pytest.fixture
def small_preset(monkeypatch):
    """Make 'copy-20' tiny for the duration of a test so the CLI runs in a second."""
    tiny = DatasetConfig(name="copy-20", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4)
    monkeypatch.setitem(PRESETS, "copy-20", tiny)
    return tiny


def test_generate_then_show(small_preset, tmp_path, capsys):
    code, out, _ = run(["data", "generate", "--preset", "copy-20", "--seed", "2", "--out", str(tmp_path / "d")], capsys)
    assert code == 0 and "copy-20 seed 2: train" in out
    assert load_dataset(tmp_path / "d").seed == 2
    code, out, _ = run(["data", "show", str(tmp_path / "d"), "--examples", "2"], capsys)
    assert code == 0 and "tasks per split" in out and "succ" in out and " | " in out


def test_refuses_non_empty_out_without_force(small_preset, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("x")
    refused = (
        f"lsa-interp: error: --out {tmp_path / 'd'} holds no dataset (no manifest.json) and is not empty; give a new "
        "or empty directory (--force replaces only a dataset)\n"
    )
    for force in ([], ["--force"]):  # it said "pass --force", which then refused (--force once removed every file)
        code, _, err = run(["data", "generate", "--preset", "copy-20", "--out", str(tmp_path / "d"), *force], capsys)
        assert code == 2 and err == refused and (tmp_path / "d" / "keep.txt").read_text() == "x"
    run(["data", "generate", "--preset", "copy-20", "--seed", "1", "--out", str(tmp_path / "e")], capsys)
    code, _, err = run(["data", "generate", "--preset", "copy-20", "--out", str(tmp_path / "e")], capsys)
    assert code == 2 and err == f"lsa-interp: error: {tmp_path / 'e'} holds a dataset; pass --force to replace it\n"
    (tmp_path / "e" / "keep.txt").write_text("x")
    code, _, _ = run(["data", "generate", "--preset", "copy-20", "--out", str(tmp_path / "e"), "--force"], capsys)
    assert code == 0 and not (tmp_path / "e" / "keep.txt").exists() and load_dataset(tmp_path / "e").seed == 0


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_an_out_that_is_a_file_is_named_as_one_with_or_without_force(force, tmp_path, capsys, monkeypatch):
    """It said 'exists and is not empty; pass --force', and --force then failed with 'File exists'."""
    monkeypatch.setattr("lsa_interp.data.generate_dataset", lambda *a, **k: pytest.fail("the dataset was generated"))
    (tmp_path / "file").write_text("keep")
    code, _, err = run(["data", "generate", "--preset", "copy-20", "--out", str(tmp_path / "file"), *force], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err == (
        f"lsa-interp: error: --out {tmp_path / 'file'} is a file; give a directory (a new or empty one, "
        "or a dataset's with --force)\n"
    )
    assert (tmp_path / "file").read_text() == "keep" and [p.name for p in tmp_path.iterdir()] == ["file"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["data", "generate", "--preset", "nope", "--out", "x"], "unknown preset 'nope'; choose one of: nocopy-20"),
        (["data", "generate", "--preset", "copy-20", "--out", "x", "--seed", "-1"], "Invalid value for '--seed'"),
        (["data", "generate", "--preset", "copy-20", "--out", "x", "--seed", "a"], "Invalid value for '--seed'"),
        (["data", "generate", "--out", "x"], "Missing option '--preset'"),
        (["data", "show", "/definitely/not/here"], "not a dataset directory"),
        (["data", "frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(args, capsys)
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("lsa-interp: error: ")
    assert "Traceback" not in err + out and not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", [["data", "generate"], ["data", "show"]])
def test_help_has_an_example(command, capsys):
    code, out, _ = run([*command, "--help"], capsys)
    assert code == 0 and "Example: lsa-interp " in out
