"""Options the CLI refuses before any work, each with one line and exit code 2: a device that is not there, options
that do not apply together, an output that cannot be written, a checkpoint name that is taken."""

from __future__ import annotations

import pytest

from lsa_interp import cli


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
        (["ship", "nowhere", "--name", "taken", "--dest", "CK"], "exists; pass --force to replace it"),
    ],
)
def test_options_that_cannot_work_are_refused_before_any_work(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file, not a directory")
    (tmp_path / "CK" / "taken").mkdir(parents=True)
    (tmp_path / "CK" / "taken" / "card.md").write_text("precious")
    with pytest.raises(SystemExit) as info:
        cli.main([str(tmp_path / a) if a in ("FILE", "CK") else a for a in args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "CK" / "taken" / "card.md").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CK", "FILE"]  # no output directory made
