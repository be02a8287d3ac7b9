"""A command that fails leaves no output directory it made (nothing half-written stays behind); directories that
were there before stay."""

from __future__ import annotations

import pytest

from tests.helpers import run

TASK = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "--model", "nowhere", "--out", "NEW/a/b"],
        ["results", "--runs", "BEFORE", "--out", "NEW/a/b"],
        ["rasp", "--model", "nowhere", "--out", "NEW/a/b"],
        ["report", "--model", "nowhere", "--out", "BEFORE/a"],
        ["attention", "--model", "nowhere", "--task", TASK, "--out", "NEW/a/v.html", "--circuitsvis", "NEW/a/b/c"],
        ["train", "--out", "NEW/run", "--data", "BEFORE"],
        ["ship", "BEFORE", "--name", "replicates/x", "--dest", "NEW/a"],
    ],
)  # fmt: skip
def test_a_failed_command_leaves_no_directory_it_made(args, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BEFORE").mkdir()
    code, _, err = run(args, capsys)
    assert code == 2 and err.startswith("lsa-interp: error: ") and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["BEFORE"] and list((tmp_path / "BEFORE").iterdir()) == []


def test_a_ship_that_fails_after_making_the_checkpoints_folder_leaves_none(tmp_path, capsys, monkeypatch):
    def fails_after_mkdir(run_dir, name, replicate, dest, *args, **kwargs):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)  # as ship_run does before it evaluates
        raise ValueError("fp16 storage changes 9 val answers; keep fp32")

    monkeypatch.setattr("lsa_interp.evaluation.card.ship_run", fails_after_mkdir)
    args = ["ship", str(tmp_path / "run"), "--name", "replicates/x", "--dest", str(tmp_path / "new" / "checkpoints")]
    code, _, err = run(args, capsys)
    assert code == 2 and "keep fp32" in err and list(tmp_path.iterdir()) == []
