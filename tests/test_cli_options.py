"""Options the CLI refuses before any work, each with one line and exit code 2: a device that is not there, options
that do not apply together, an output that cannot be written, a checkpoint name that is taken, an empty path."""

from __future__ import annotations

import pytest

from lsa_interp import cli

EMPTY = "Invalid value for {}: an empty path; give a file or directory name ('.' for the working directory)"
"""An empty path would mean the working directory."""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rasp", "--model", "copy-20", "--device", "foo"], "unknown device 'foo'; choose one of: cpu, cuda"),
        (["evaluate", "--model", "copy-20", "--device", "gpu0"], "unknown device 'gpu0'; choose one of: cpu, cuda"),
        (["patch", "--model", "copy-20", "--rules", "succ,pred"], "--rules chooses the rules of --matrix"),
        (["patch", "--model", "copy-20", "--matrix", "--rules", " , "], "--rules names no rule"),
        (["matching-heads", "--model", "copy-20", "--threshold", "nan"], "--threshold must be in (0, 1]"),
        (["matching-heads", "--model", "copy-20", "--threshold", "-1"], "--threshold must be in (0, 1]"),
        (["patch", "--model", "copy-20", "--matrix", "--from", "reverse"], "--from and --to do not apply"),
        (["report", "--models", "checkpoints/copy-20", "--device", "cuda"], "device"),
        (["report", "--models", "checkpoints/copy-20", "--model", "copy-200"], "give --model or --models, not both"),
        (["evaluate", "--model", "copy-20", "--limit", "5", "--out", "FILE"], "cannot write to --out"),
        (
            ["attention", "--model", "copy-20", "--circuitsvis", "FILE", "--out", "CK/v.html"],
            "cannot write to --circuitsvis",
        ),
        (["attention", "--model", "copy-20", "--out", "CK"], "is a directory; give the page's file name"),
        (["attention", "--model", "copy-20", "--out", "FILE"], "exists and is not an HTML page; give the page a file"),
        (["attention", "--model", "copy-20", "--out", "CK/taken/card.md"], "is not an HTML page"),
        (
            ["attention", "--model", "copy-20", "--out", "CK/v.html", "--circuitsvis", "CK/run"],
            "--circuitsvis CK/run holds a training run; give a folder of its own",
        ),
        (["ship", "nowhere", "--name", "taken", "--dest", "CK"], "exists; pass --force to replace it"),
        (["ship", "nowhere", "--name", "new", "--dest", "FILE"], "cannot write to --dest"),
        (["data", "generate", "--preset", "copy-20", "--out", "/proc/lsa-interp"], "cannot write to --out /proc/"),
        (["train", "--out", "/proc/lsa-interp/run", "--max-steps", "1"], "cannot write to --out /proc/lsa-interp/run"),
        (["sweep", "FILE", "--out", "/proc/lsa-interp"], "cannot write to --out /proc/lsa-interp"),
        (["data", "generate", "--preset", "copy-20", "--out", ""], EMPTY.format("'--out'")),
        (["data", "show", ""], EMPTY.format("'data_dir'")),
        (["train", "--out="], EMPTY.format("'--out'")),
        (["train", "--resume", ""], EMPTY.format("'--resume'")),
        (["sweep", "FILE", "--out", ""], EMPTY.format("'--out'")),
        (["evaluate", "--model", "nowhere", "--out", ""], EMPTY.format("'--out'")),
        (["fit", "--model", "nowhere", "--out", ""], EMPTY.format("'--out'")),
        (["rasp", "--model", "nowhere", "--out", ""], EMPTY.format("'--out'")),
        (["report", "--model", "nowhere", "--out", ""], EMPTY.format("'--out'")),
        (["results", "--out", ""], EMPTY.format("'--out'")),
        (["results", "--runs", "CK", "--runs", "", "--out", "CK"], EMPTY.format("'--runs'")),
        (
            ["attention", "--model", "nowhere", "--circuitsvis", "", "--out", "CK/v.html"],
            EMPTY.format("'--circuitsvis'"),
        ),
        (["ship", "nowhere", "--name", "new", "--dest", ""], EMPTY.format("'--dest'")),
    ],
)
def test_options_that_cannot_work_are_refused_before_any_work(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file, not a directory")
    (tmp_path / "CK" / "taken").mkdir(parents=True)
    (tmp_path / "CK" / "taken" / "card.md").write_text("precious")
    (tmp_path / "CK" / "run").mkdir()
    (tmp_path / "CK" / "run" / "train_config.json").write_text("{}")
    with pytest.raises(SystemExit) as info:
        cli.main([str(tmp_path / a) if a in ("FILE", "CK") else a for a in args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "CK" / "taken" / "card.md").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CK", "FILE"]  # no output directory made
    assert (tmp_path / "FILE").read_text() == "a file, not a directory"
