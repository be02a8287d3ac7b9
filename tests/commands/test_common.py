"""The helpers every analysis command shares: its output directory, its window lengths, its printed tables."""

from __future__ import annotations

import contextlib
import os

import plotly.graph_objects as go
import pytest
import typer

from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.commands import common


def test_the_default_output_is_named_after_the_model_or_its_directory():
    assert common.default_out("copy-200") == common.Path("runs/analysis/copy-200")
    assert common.default_out("replicates/copy-20-s1-bf16") == common.Path("runs/analysis/copy-20-s1-bf16")
    stack = "runs/grid/stacks/stack-000/replicate-1"
    assert common.default_out(stack) == common.default_out(f"{stack}/model/config.json")
    assert common.default_out(stack) == common.Path("runs/analysis/stack-000-replicate-1")
    assert common.default_out("runs/other/replicate-1") != common.default_out(stack)
    assert common.default_out("runs/copy-20-s3/model") == common.Path("runs/analysis/copy-20-s3")


def test_an_output_directory_is_made_with_its_parents_and_tried_before_any_work(tmp_path, monkeypatch):
    out = tmp_path / "a" / "b" / "c"
    assert common.writable_out(out) == out and out.is_dir() and list(out.iterdir()) == []
    monkeypatch.chdir(tmp_path)
    assert common.out_dir(None, "models/copy-20") == common.Path("runs/analysis/copy-20")
    assert (tmp_path / "runs" / "analysis" / "copy-20").is_dir()
    assert common.out_dir(tmp_path / "given", "copy-20") == tmp_path / "given"


def test_an_output_that_cannot_be_written_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"cannot write to --out .*file.*give a writable directory"):
        common.writable_out(tmp_path / "file")


def test_a_directory_whose_write_probe_fails_is_refused(tmp_path, monkeypatch):
    """The probe file, not the directory's mode bits, decides (root may write into a read-only directory)."""

    def refuse(**kwargs):
        assert kwargs["dir"] == tmp_path / "out" and kwargs["prefix"] == ".write-test-"
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.NamedTemporaryFile", refuse)
    with pytest.raises(ValueError, match=r"cannot write to --out .*out: Permission denied; give a writable directory"):
        common.writable_out(tmp_path / "out")


def test_a_failed_command_removes_the_directories_made_for_it_that_are_still_empty(tmp_path):
    (tmp_path / "before").mkdir()
    with pytest.raises(KeyboardInterrupt), common.made_dirs_removed_on_failure():
        common.writable_out(tmp_path / "new" / "a")
        common.writable_out(tmp_path / "new" / "a" / "b" / "c")  # inside the first: removed before it
        common.writable_out(tmp_path / "before" / "d")
        common.writable_out(tmp_path / "written")
        (tmp_path / "written" / "result.json").write_text("{}")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["before", "written"]
    assert list((tmp_path / "before").iterdir()) == [] and (tmp_path / "written" / "result.json").is_file()


@pytest.mark.parametrize(("stop", "kept"), [(None, True), (typer.Exit(0), True), (typer.Exit(1), False)])
def test_the_directories_stay_when_the_command_succeeds(stop, kept, tmp_path):
    with pytest.raises(type(stop)) if stop else contextlib.nullcontext(), common.made_dirs_removed_on_failure():
        common.writable_out(tmp_path / "out")
        if stop:
            raise stop
    assert (tmp_path / "out").is_dir() == kept


def test_window_lengths():
    assert common.parse_lengths("3") == (3,) and common.parse_lengths(" 3, 4,5 ,") == (3, 4, 5)
    assert common.parse_lengths("13") == (13,)
    for bad in ("", "2", "3,x", "-3", "3.5", "14", "3,99"):
        with pytest.raises(ValueError, match="bad --lengths"):
            common.parse_lengths(bad)


def test_a_model_is_opened_on_the_device_asked_for(monkeypatch):
    calls = []
    monkeypatch.setattr(
        "lsa_interp.training.snapshot.load_run_or_model", lambda name, device: calls.append((name, device))
    )
    common.open_model("copy-200", device="cuda")
    common.open_model("copy-20")
    assert calls == [("copy-200", "cuda"), ("copy-20", "cpu")]


def _cells(printed: str) -> list[tuple[str, ...]]:
    """The cells of every table row that rich printed (header and body), stripped."""
    return [
        tuple(cell.strip() for cell in line.strip()[1:-1].replace("┃", "│").split("│"))
        for line in printed.splitlines()
        if line.strip()[:1] in ("│", "┃")
    ]


def test_finish_prints_the_summary_and_findings_then_writes_the_files(tmp_path, capsys):
    result = AnalysisResult(
        "matching", "copy-20", {"best score": 0.123456, "heads": 3, "label": "2.7"},
        findings=[
            Finding("a head matches", "yes", "0.12", True),
            Finding("no-copy lacks it", "5/20", "7/20", False),
            Finding("untested", "-", "-", None),
        ],
    )  # fmt: skip
    common.finish(result, tmp_path / "out", "copy-20")
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].strip() == "matching: copy-20"
    assert _cells(printed) == [
        ("measure", "value"), ("best score", "0.1235"), ("heads", "3"), ("label", "2.7"),
        ("finding", "paper", "ours", "verdict"),
        ("a head matches", "yes", "0.12", "holds"),
        ("no-copy lacks it", "5/20", "7/20", "does not hold"),
        ("untested", "-", "-", "n/a"),
    ]  # fmt: skip
    heads = next(line for line in printed.splitlines() if "heads" in line)
    assert heads.rstrip().endswith("      3 │"), "values are right-aligned"
    assert "findings" in [line.strip() for line in printed.splitlines()]
    assert printed.splitlines()[-1] == f"wrote {tmp_path / 'out' / 'matching.json'}"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["matching.json"]


def test_finish_names_every_file_it_wrote(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(common.shutil, "get_terminal_size", lambda: os.terminal_size((400, 24)))  # one line
    figure = go.Figure(go.Bar(x=["a"], y=[1.0]))
    common.finish(AnalysisResult("roles", "copy-20", {"n": 1}, figures={"bars": figure}), tmp_path, "copy-20")
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == f"wrote {tmp_path / 'roles.json'}, {tmp_path / 'roles.html'}"


@pytest.mark.parametrize(("columns", "width"), [(80, 120), (200, 200)])
def test_tables_are_printed_at_least_120_columns_wide(columns, width, monkeypatch, tmp_path, capsys):
    """A narrow terminal still gets 120 columns (a finding's text wraps less); a wider one gets its own width."""
    monkeypatch.setattr(common.shutil, "get_terminal_size", lambda: os.terminal_size((columns, 24)))
    long = "a finding whose statement runs on " * 12
    common.finish(AnalysisResult("x", "m", {"n": 1}, findings=[Finding(long, long, long, True)]), tmp_path, "m")
    lines = capsys.readouterr().out.splitlines()[:-1]
    assert max(len(line) for line in lines) == width


def test_finish_without_findings_prints_no_findings_table_and_writes_to_the_default(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common.finish(AnalysisResult("roles", "runs/x/copy-200", {"tasks": 4}), None, "runs/x/copy-200")
    printed = capsys.readouterr().out
    assert _cells(printed) == [("measure", "value"), ("tasks", "4")] and "findings" not in printed
    assert (tmp_path / "runs" / "analysis" / "copy-200" / "roles.json").is_file()
