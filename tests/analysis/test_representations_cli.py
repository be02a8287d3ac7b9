"""The roles / invariance / cross-attention / elimination commands: help, a run on a saved small model,
one-line errors with exit code 2, and no heavy imports when the module is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.helpers import run

COMMANDS = ("roles", "invariance", "cross-attention", "elimination")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    return str(save_model(model, tmp_path_factory.mktemp("ckpt") / "tiny"))


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_an_example(command, capsys):
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0 and f"Example: lsa-interp {command}" in out and "--tasks" in out and "--model" in out


@pytest.mark.parametrize(
    ("args", "name", "summary_key"),
    [
        (["roles", "--tasks", "8", "-t", "pred", "-t", "succ"], "roles", "probe_accuracy_after"),
        (["invariance", "--tasks", "3", "--compare", "succ"], "invariance", "cosine_min"),
        (["cross-attention", "--tasks", "6", "--transformation", "succ"], "cross_attention", "first_letter_accuracy"),
        (
            ["elimination", "--tasks", "6", "--prompts", "random", "-t", "pred", "--alphabets", "permuted"],
            "elimination",
            "sink_mass",
        ),
    ],
)
def test_command_writes_json_and_html(args, name, summary_key, checkpoint, tmp_path, capsys):
    code, out, err = run([*args, "--model", checkpoint, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "findings" in out and f"{name}.json" in out
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    assert doc["analysis"] == name and doc["model"] == checkpoint and summary_key in doc["summary"]
    assert doc["findings"] and (tmp_path / f"{name}.html").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["roles", "-t", "nope"], "unknown transformation 'nope'"),
        (["invariance", "--compare", "nope"], "unknown transformation 'nope'"),
        (["cross-attention", "--transformation", "nope"], "unknown transformation 'nope'"),
        (["elimination", "--prompts", "random", "--alphabets", "greek"], "unknown --alphabets 'greek'"),
        (["elimination", "--model", "/no/such/checkpoint"], "no checkpoint named or at '/no/such/checkpoint'"),
        (["cross-attention", "--tasks", "0"], "Invalid value for '--tasks'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err + out


def test_importing_the_commands_does_not_import_torch_or_sklearn():
    probe = (
        "import sys, lsa_interp.commands.representations; "
        "print(sorted(m for m in ('torch', 'sklearn', 'scipy', 'plotly') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompts", "random", "--lengths", ""], "--lengths is empty: give window lengths in 3..13"),
        (["--lengths", ""], "--lengths applies to --prompts random only"),
        (["--alphabets", ""], "--alphabets applies to --prompts random only"),
    ],
)
def test_invariance_refuses_an_empty_lengths_or_alphabets_before_any_work(
    args, message, checkpoint, tmp_path, capsys, monkeypatch
):
    """An empty --lengths ran with 3-letter windows (exit 0), and the paper's prompts let empty options pass."""
    monkeypatch.setattr("lsa_interp.commands.representations.open_model", lambda *a: pytest.fail("model loaded"))
    code, _, err = run(["invariance", "--model", checkpoint, *args, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith(f"lsa-interp: error: {message}") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["roles", "invariance"])
def test_roles_and_invariance_declare_their_real_minimum_of_two_tasks(command, checkpoint, capsys):
    """--help said x>=1 while one task was refused by the analysis."""
    code, _, err = run([command, "--model", checkpoint, "--tasks", "1"], capsys)
    assert code == 2 and "Invalid value for '--tasks': Input should be greater than or equal to 2" in err
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0 and "x>=2" in " ".join(out.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tasks", "20"], "--tasks 20 is out of range: pred has 19 prompts of the paper's form, so give 2..19"),
        (
            ["--tasks", "10", "--transformation", "fix_pred_succ"],
            "--tasks 10 is out of range: fix_pred_succ has 9 prompts of the paper's form, so give 2..9",
        ),
        (
            ["--tasks", "600", "--prompts", "random"],
            "--tasks 600 is out of range: give 2 up to the distinct pred tasks these --alphabets and --lengths make "
            "(only 506 distinct pred tasks could be made, 600 asked for)",
        ),
        (  # the count is the --seed's (fix_pred_succ: 9 at seed 0, 12 at seed 5)
            ["--tasks", "13", "--transformation", "fix_pred_succ", "--seed", "5"],
            "--tasks 13 is out of range: fix_pred_succ has 12 prompts of the paper's form, so give 2..12",
        ),
        (  # a seed whose fix_interleave has a single prompt of the paper's form: none to compare
            ["--tasks", "2", "--transformation", "fix_interleave", "--seed", "21763"],
            "--tasks 2 is out of range: fix_interleave has 1 prompts of the paper's form, so give 2..1",
        ),
        (
            ["--tasks", "1100", "--prompts", "random", "--alphabets", "both"],
            "--tasks 1100 is out of range: give 2 up to the distinct pred tasks these --alphabets and --lengths make "
            "(only 506 distinct pred tasks could be made, 550 asked for; --alphabets both asks half the tasks of each "
            "kind)",
        ),
    ],
)
def test_invariance_refuses_more_tasks_than_prompts_exist_naming_the_range_before_any_work(
    args, message, checkpoint, tmp_path, capsys, monkeypatch
):
    """--tasks above the maximum (pred: 19 prompts of the paper's form) was refused by the analysis after the model
    was loaded, in a line that named neither --tasks nor the range; --help gave no maximum."""
    monkeypatch.setattr("lsa_interp.commands.representations.open_model", lambda *a: pytest.fail("model loaded"))
    code, _, err = run(["invariance", "--model", checkpoint, *args, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith(f"lsa-interp: error: {message}") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_invariance_takes_the_most_prompts_there_are_and_its_help_names_the_range(checkpoint, tmp_path, capsys):
    code, _, err = run(
        ["invariance", "--model", checkpoint, "--tasks", "19", "--compare", "succ", "--out", str(tmp_path)], capsys
    )
    assert code == 0, err
    assert json.loads((tmp_path / "invariance.json").read_text())["summary"]["prompts"] == 19
    code, out, _ = run(["invariance", "--help"], capsys)
    text = " ".join(out.replace("│", " ").split())
    assert code == 0 and "x>=2" in text and "(pred: 19;" in text and "more is refused, naming the range" in text
