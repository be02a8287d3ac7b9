"""The helpers every analysis command shares: its output directory, its window lengths, its printed tables."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import plotly.graph_objects as go
import pytest
import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from typer.testing import CliRunner

from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.commands import common
from lsa_interp.data import DatasetConfig, generate_dataset, save_dataset
from tests.helpers import run


def test_the_default_output_is_named_after_the_model_or_its_directory():
    assert common.default_out("copy-200") == common.Path("runs/analysis/copy-200")
    assert common.default_out("replicates/copy-20-s1-bf16") == common.Path("runs/analysis/copy-20-s1-bf16")
    stack = "runs/grid/stacks/stack-000/replicate-1"
    assert common.default_out(stack) == common.default_out(f"{stack}/model/config.json")
    assert common.default_out(stack) == common.Path("runs/analysis/stack-000-replicate-1")
    assert common.default_out("runs/other/replicate-1") != common.default_out(stack)
    assert common.default_out("runs/copy-20-s3/model") == common.Path("runs/analysis/copy-20-s3")
    assert common.default_out("runs/copy-20-s3/model/model.safetensors") == common.Path("runs/analysis/copy-20-s3")


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
    for bad in ("2", "3,x", "-3", "3.5", "14", "3,99"):
        with pytest.raises(ValueError, match="bad --lengths"):
            common.parse_lengths(bad)
    for empty in ("", " ", ",", " , "):
        with pytest.raises(ValueError) as info:
            common.parse_lengths(empty)
        assert str(info.value) == "--lengths is empty: give window lengths in 3..13, e.g. 3 or 3,4,5"


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


def test_the_options_given_are_those_set_on_the_command_line():
    app = typer.Typer()

    @app.command()
    def command(out: str = "x", seed: int = 0, lr: float = 1.0) -> None:
        """A command with three options."""

    ctx = typer.main.get_command(app).make_context("command", ["--seed", "3", "--out", "R"])
    assert sorted(common.given_options(ctx)) == ["out", "seed"]
    ctx.params["added"] = 1  # a value a callback set: no source recorded, not given on the command line
    assert sorted(common.given_options(ctx)) == ["out", "seed"]


def test_a_new_run_records_its_dataset_s_own_preset_or_the_one_asked_for(tmp_path):
    tiny = DatasetConfig(name="tiny", n_alphabets=4, window_lengths=(3,), n_reshuffle=1, n_new_alphabets=4)
    data = save_dataset(generate_dataset(tiny, seed=1), tmp_path / "data")
    assert common.training_preset(None, None) == "copy-20"
    assert common.training_preset("nocopy-20", None) == "nocopy-20"
    assert common.training_preset("nocopy-20", tmp_path / "nowhere") == "nocopy-20"  # the trainer says it is missing
    assert common.training_preset(None, tmp_path / "nowhere") == "copy-20"
    assert common.training_preset(None, data) == common.training_preset("tiny", data) == "tiny"
    with pytest.raises(ValueError, match=r"--preset copy-20 is not the preset of --data .*data \(tiny\); leave"):
        common.training_preset("copy-20", data)


def test_cuda_is_refused_where_torch_sees_no_cuda_device(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(typer.BadParameter, match="torch sees no CUDA device here; use cpu"):
        common.check_device("cuda")
    assert common.check_device("cpu") == "cpu" and common.check_device(None) is None
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert common.check_device("cuda") == common.device_option("cuda") == "cuda"
    with pytest.raises(typer.BadParameter, match="unknown device 'auto'; choose one of: cpu, cuda"):
        common.device_option("auto")
    assert common.check_device("auto", ("auto", "cpu", "cuda")) == "auto"


def _app() -> typer.Typer:
    """Two commands with path parameters of each kind, in the CLI's command group."""
    app = typer.Typer(cls=common.CommandGroup)

    @app.command()
    def one(out: Path = Path("x"), maybe: Path | None = None, many: list[Path] | None = None, name: str = "n") -> None:
        print(f"RAN one {out} {maybe} {many and [str(path) for path in many]} {name!r}")

    @app.command()
    def two(files: list[Path]) -> None:
        print(f"RAN two {[str(path) for path in files]}")

    sub = typer.Typer(cls=common.CommandGroup)
    app.add_typer(sub, name="sub")

    @sub.command()
    def deep(out: Path = Path("x")) -> None:
        print(f"RAN deep {out}")

    return app


@pytest.mark.parametrize(
    ("args", "param"),
    [
        (["one", "--out", ""], "out"),
        (["one", "--maybe="], "maybe"),
        (["one", "--many", "a", "--many", ""], "many"),
        (["two", "a", ""], "files"),
    ],
)
def test_an_empty_path_is_refused_by_name_before_the_command_runs(args, param):
    command = typer.main.get_command(_app()).commands[args[0]]
    with pytest.raises(typer.BadParameter) as info:
        common.refuse_empty_paths(command, typer.Context(command, info_name=args[0]), args[1:])
    assert info.value.message == "an empty path; give a file or directory name ('.' for the working directory)"
    assert info.value.param.name == param
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 2 and "an empty path" in result.output and "RAN" not in result.output


def test_paths_that_are_not_empty_and_empty_text_that_is_no_path_pass():
    runner = CliRunner()
    result = runner.invoke(_app(), ["one", "--name", "", "--out", ".", "--many", "a"])
    assert result.exit_code == 0 and result.output == "RAN one . None ['a'] ''\n"
    assert runner.invoke(_app(), ["two", "a", "b"]).output == "RAN two ['a', 'b']\n"
    result = runner.invoke(_app(), ["one", "--bogus", ""])  # left to the command's own parse
    assert result.exit_code == 2 and "No such option: --bogus" in result.output


@pytest.mark.parametrize(
    ("args", "path"), [(["one", "--out="], "prog one"), (["sub", "deep", "--out", ""], "prog sub deep")]
)
def test_an_empty_path_s_error_names_the_command_by_its_whole_path(args, path):
    """The CLI's one-line error ends with "(see 'COMMAND PATH --help')", read from the error's context."""
    with pytest.raises(typer.BadParameter) as info:
        _app()(args=args, prog_name="prog", standalone_mode=False)
    assert info.value.ctx.command_path == path and info.value.param.name == "out"


def test_an_unknown_command_resolves_to_none_while_completing():
    """Shell completion resolves partial command lines with resilient parsing: a name that is no command yet gives
    no command, and there are no paths to check."""
    group = typer.main.get_command(_app())
    ctx = group.make_context("prog", ["on"], resilient_parsing=True)
    assert group.resolve_command(ctx, ["on", "--out="]) == (None, None, ["--out="])


@pytest.mark.parametrize(
    "args",
    [
        ["rasp", "--model", ""],
        ["patch", "--model="],
        ["explore", "--model", "copy-20", "--model", ""],
        ["evaluate", "--model", ""],
        ["report", "--models", ""],
    ],
)
def test_an_empty_model_is_refused_by_name_before_any_command_runs(args, tmp_path, capsys, monkeypatch):
    """It was read as the working directory: '. is not a checkpoint directory', '<cwd> holds no model'."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(args, capsys)
    option = "--models" if args[0] == "report" else "--model"
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in out + err
    assert err == (
        f"lsa-interp: error: Invalid value for '{option}': an empty model name; give a shipped checkpoint name "
        f"(e.g. copy-200), a checkpoint or a run directory (see 'lsa-interp {args[0]} --help')\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_models_are_each_opened_once_and_the_first_broken_one_raises(tmp_path, monkeypatch):
    opened = []

    def load(path):
        opened.append(path)
        if path == "bad":
            raise ValueError("bad is corrupted")

    monkeypatch.setattr("lsa_interp.model.load_model", load)
    common.check_models(["a", "b"])
    assert opened == ["a", "b"]
    with pytest.raises(ValueError, match="bad is corrupted"):
        common.check_models(iter(["c", "bad", "d"]))
    assert opened == ["a", "b", "c", "bad"]


@pytest.mark.parametrize(
    ("marker", "what"),
    [("manifest.json", "a dataset"), ("train_config.json", "a training run"), ("model.safetensors", "a model"),
     ("plan.json", "a sweep")],
)  # fmt: skip
def test_results_are_not_written_among_a_dataset_run_model_or_sweep(marker, what, tmp_path):
    """evaluate, fit and results wrote their files beside a dataset's Parquet files (helper-58)."""
    (tmp_path / marker).write_text("{}")
    with pytest.raises(common.UserError, match=rf"^--out {tmp_path} holds {what}; give a folder of its own for these"):
        common.refuse_foreign_out(tmp_path)
    (tmp_path / marker).unlink()
    (tmp_path / "evaluation.json").write_text("{}")
    common.refuse_foreign_out(tmp_path)  # an earlier result of its own, or any other files: allowed
    common.refuse_foreign_out(tmp_path / "new")


@pytest.mark.parametrize("command", [["evaluate", "--model", "copy-20"], ["fit", "--model", "copy-20"], ["results"]])
def test_the_commands_refuse_such_an_out_before_any_work(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("lsa_interp.model.checkpoint.load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    (tmp_path / "manifest.json").write_text("{}")
    code, _, err = run([*command, "--out", str(tmp_path)], capsys)
    assert code == 2
    assert err == f"lsa-interp: error: --out {tmp_path} holds a dataset; give a folder of its own for these results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_a_table_console_is_as_wide_as_the_terminal_or_the_widest_table_and_at_least_the_minimum(monkeypatch):
    import shutil

    from rich.console import Console
    from rich.table import Table

    from lsa_interp.commands.tables import table_console

    wide = Table("x" * 150)
    assert table_console([]).width == 120 and table_console([Table("a")]).width == 120  # piped: at least 120
    assert table_console([Table("a"), wide]).width == 154  # the widest table's width, its borders included
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    for columns, width in ((100, 120), (200, 200)):
        monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, columns=columns: os.terminal_size((columns, 40)))
        assert table_console([wide]).width == width and table_console([], minimum=90).width == max(columns, 90)


def test_a_page_replaces_only_an_earlier_page(tmp_path):
    """`attention --out ck/config.json` replaced a checkpoint's config with the page (the model then failed to load)."""
    common.refuse_foreign_page(tmp_path / "new.html")
    for earlier in ("<!DOCTYPE html>\n<html>", "\n  <html><head>", "<!doctype HTML>"):
        (tmp_path / "page.html").write_text(earlier)
        common.refuse_foreign_page(tmp_path / "page.html")
    for foreign in ('{"model_config": {}}', "", "a,b\n1,2\n"):
        (tmp_path / "config.json").write_text(foreign)
        with pytest.raises(common.UserError, match=r"^--page .*config\.json exists and is not an HTML page; give"):
            common.refuse_foreign_page(tmp_path / "config.json", "--page")


def test_the_progress_bar_is_on_stderr_with_its_five_columns():
    bar = common.progress_bar()
    assert bar.console.stderr is True
    kinds = [type(column) for column in bar.columns]
    assert kinds == [TextColumn, BarColumn, MofNCompleteColumn, TimeElapsedColumn, TimeRemainingColumn]
    assert bar.columns[0].text_format == "{task.description}"
