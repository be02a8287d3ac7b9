"""The matching-heads and patch commands on the planted model saved to disk: files, help, one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from lsa_interp.analysis.matching import expand_checkpoints
from lsa_interp.analysis.planted import planted_model
from lsa_interp.commands.patching import _groups
from lsa_interp.model import save_model
from tests.helpers import run

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The planted model (head 2.3 is its matching head) and the same model without it, as checkpoints."""
    root = tmp_path_factory.mktemp("models")
    return save_model(planted_model(), root / "planted"), save_model(planted_model(matching=False), root / "plain")


def test_patch_one_head_writes_json_and_html(saved, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["patch", "--model", str(saved[0]), "--head", "2.3", "--pairs", "6", "--out", str(out)]
    code, stdout, _ = run(args, capsys)
    assert code == 0 and "flip_rate" in stdout
    report = json.loads((out / "patching.json").read_text())
    assert report["summary"]["head"] == "2.3" and report["summary"]["pairs"] == 6
    assert (report["summary"]["source"], report["summary"]["target"]) == ("succ", "pred")
    assert len(report["data"]["pairs"]) == 6 and (out / "patching.html").stat().st_size > 10_000


def test_patch_auto_finds_the_planted_head_and_engines_agree(saved, tmp_path, capsys):
    reports = []
    for engine in ("hooks", "nnsight"):
        out = tmp_path / engine
        args = ["patch", "--model", str(saved[0]), "--pairs", "4", "--engine", engine, "--seed", "2", "--out", str(out)]
        assert run(args, capsys)[0] == 0
        reports.append(json.loads((out / "patching.json").read_text()))
    assert reports[0]["summary"]["head"] == "2.3" and reports[1]["summary"]["engine"] == "nnsight"
    assert reports[0]["data"]["pairs"] == reports[1]["data"]["pairs"]


def test_patch_all_heads_gives_a_layer_by_head_grid(saved, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, _ = run(["patch", "--model", str(saved[0]), "--head", "all", "--pairs", "3", "--out", str(out)], capsys)
    report = json.loads((out / "patching.json").read_text())
    assert code == 0 and len(report["data"]["flip_rate"]) == 3 and len(report["data"]["flip_rate"][0]) == 4
    assert len(report["data"]["heads"]) == 12


def test_patch_matrix_records_missing_rule_pairs(saved, tmp_path, capsys):
    out = tmp_path / "out"
    rules = "succ,pred,extend_sequence,extend_pred,sort"
    code, stdout, _ = run(
        [
            "patch",
            "--model",
            str(saved[0]),
            "--head",
            "2.3",
            "--matrix",
            "--rules",
            rules,
            "--pairs",
            "2",
            "--out",
            str(out),
        ],
        capsys,
    )
    report = json.loads((out / "steering.json").read_text())
    assert code == 0 and "cells_missing" in stdout
    assert report["data"]["rules"] == rules.split(",")
    assert set(report["data"]["n_pairs"]) == {
        "succ|pred",
        "pred|succ",
        "extend_sequence|extend_pred",
        "extend_pred|extend_sequence",
    }
    assert "sort|pred" in report["data"]["missing"] and "succ|extend_sequence" in report["data"]["missing"]
    assert report["summary"]["cells_measured"] + report["summary"]["cells_missing"] == 5 * 4


def test_matching_heads_and_occurrence(saved, tmp_path, capsys):
    out = tmp_path / "single"
    assert run(["matching-heads", "--model", str(saved[0]), "--tasks", "2", "--out", str(out)], capsys)[0] == 0
    assert json.loads((out / "matching_heads.json").read_text())["summary"]["matching_heads"] == "2.3"
    out = tmp_path / "groups"
    args = [
        "matching-heads",
        "--compare",
        f"copy={saved[0].parent}/plan*",
        "--compare",
        f"nocopy={saved[1]}",
        "--tasks",
        "2",
        "--out",
        str(out),
    ]
    assert run(args, capsys)[0] == 0
    report = json.loads((out / "matching_occurrence.json").read_text())
    assert report["summary"]["copy"] == "1/1" and report["summary"]["nocopy"] == "0/1"


@pytest.mark.parametrize("command", ["patch", "matching-heads", "path-patching"])
def test_help_has_an_example_and_says_labels_are_one_based(command, capsys):
    code, out, _ = run([command, "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0 and f"Example: lsa-interp {command} --model copy-200" in text and "1-based" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["patch", "--head", "3.9"], "no head '3.9' in this model"),
        (["patch", "--head", "x"], "bad head 'x'"),
        (["patch", "--from", "foo"], "unknown transformation 'foo'"),
        (["patch", "--to", "bar"], "unknown transformation 'bar'"),
        (["patch", "--matrix", "--rules", "succ,nope"], "unknown transformation 'nope'"),
        (["patch", "--engine", "foo"], "unknown engine 'foo'"),
        (["patch", "--matrix", "--head", "all"], "--matrix patches the heads it is given together"),
        (["matching-heads", "--compare", "copy"], "--compare takes NAME=GLOB"),
        (["matching-heads", "--compare", "=/no/such/run-*"], "--compare takes NAME=GLOB"),  # no name
        (["matching-heads", "--compare", "copy= "], "--compare takes NAME=GLOB"),  # "" globs the checkpoints folder
        (["matching-heads", "--compare", "copy=/no/such/run-*"], "no checkpoint matches '/no/such/run-*'"),
        (["path-patching", "--receiver", "3.1/v", "--sender-positions", "31;33"], "bad positions '31;33'"),
        (["path-patching", "--receiver", "1.2/v"], "no head reaches every input of 1.2/v"),  # refused before any bar
        (["path-patching", "--sender", "2.3", "--freeze", "2.3"], "2.3: a head cannot both send and be frozen"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(saved, args, message, capsys):
    code, out, err = run([*args, "--model", str(saved[0])], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in out + err


def test_a_compare_glob_may_hold_an_equals_sign(saved, tmp_path):
    """The first '=' ends the group's name, so a run folder such as lr=1e-3 is globbed whole; spaces around the
    name and the glob are dropped, and a name given twice gathers both globs' checkpoints."""
    run_dir = tmp_path / "lr=1e-3"
    shutil.copytree(saved[0], run_dir / "planted")
    groups = _groups([f"copy={run_dir}/plan*", f" copy = {saved[1]} "])
    assert groups == {"copy": [run_dir / "planted", saved[1]]}


@pytest.mark.parametrize("command", [["patch"], ["matching-heads"], ["path-patching", "--sender", "1.3"]])
def test_missing_checkpoint_is_one_line_and_exit_2(command, capsys):
    code, _, err = run([*command, "--model", "/no/such/checkpoint"], capsys)
    assert code == 2 and "no checkpoint named or at '/no/such/checkpoint'" in err and len(err.strip().splitlines()) == 1


def test_no_matching_head_for_auto_is_one_line(saved, capsys):
    code, _, err = run(["patch", "--model", str(saved[1]), "--pairs", "2"], capsys)
    assert code == 2 and "no matching head" in err and len(err.strip().splitlines()) == 1


def test_command_module_does_not_import_torch():
    code = "import sys, lsa_interp.commands.patching; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _no_work(monkeypatch):
    """Make every piece of matching-heads' work fail the test when it is reached."""

    def work(*args, **kwargs):
        raise AssertionError("the input is checked before any work")

    for name in ("matching_tasks", "matching_analysis", "matching_occurrence"):
        monkeypatch.setattr(f"lsa_interp.analysis.matching.{name}", work)
    monkeypatch.setattr("lsa_interp.commands.patching.open_model", work)


@pytest.mark.parametrize(("under", "reason"), [("", "File exists"), ("x", "Not a directory")])
@pytest.mark.parametrize("how", ["--model", "--compare"])
def test_matching_heads_checks_out_first_as_the_other_commands_do(
    saved, how, under, reason, tmp_path, capsys, monkeypatch
):
    """--out a file, or a folder under one, was found after the work, with a raw '[Errno 17] File exists'."""
    _no_work(monkeypatch)
    (tmp_path / "file").write_text("keep")
    out = tmp_path / "file" / under if under else tmp_path / "file"
    source = ["--model", str(saved[0])] if how == "--model" else ["--compare", f"copy={saved[0]}"]
    code, _, err = run(["matching-heads", *source, "--out", str(out)], capsys)
    assert code == 2 and err == f"lsa-interp: error: cannot write to --out {out}: {reason}; give a writable directory\n"
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "keep"


def test_matching_heads_opens_every_compared_checkpoint_before_any_work(saved, tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    broken = tmp_path / "broken"
    shutil.copytree(saved[1], broken)
    (broken / "model.safetensors").write_bytes(b"\0" * 64)
    args = ["--compare", f"copy={saved[0]}", "--compare", f"nocopy={broken}", "--out", str(tmp_path / "out")]
    code, _, err = run(["matching-heads", *args], capsys)
    assert code == 2 and err.startswith(f"lsa-interp: error: {broken / 'model.safetensors'} is corrupted or truncated")
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lengths", ""], "--lengths is empty: give window lengths in 3..13, e.g. 3 or 3,4,5"),
        (["--lengths", " , "], "--lengths is empty: give window lengths in 3..13, e.g. 3 or 3,4,5"),
        (["--from", "succ", "--to", "succ"], "--from and --to are both 'succ'; give two different rules"),
    ],
)
def test_patch_refuses_empty_lengths_and_one_rule_twice_before_any_work(
    saved, args, message, tmp_path, capsys, monkeypatch
):
    """An empty --lengths ran with the default windows; --from X --to X was refused by the library in its own
    words ('source and target'), after the model was loaded."""
    monkeypatch.setattr("lsa_interp.commands.patching.open_model", lambda *a: pytest.fail("the model was loaded"))
    code, _, err = run(["patch", "--model", str(saved[0]), *args, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith(f"lsa-interp: error: {message}") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pattern", ["", " "])
def test_an_empty_checkpoint_pattern_is_refused_not_read_as_the_checkpoints_folder(pattern):
    with pytest.raises(ValueError, match="an empty checkpoint pattern; give a shipped name, a directory or a glob"):
        expand_checkpoints(pattern)


def test_activation_patching_writes_its_grids_for_pairs_the_model_solves(saved, tmp_path, capsys, monkeypatch):
    from lsa_interp.analysis import activation_patching
    from tests.analysis.patch_setup import planted_pairs

    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "out"
    args = ["activation-patching", "--model", str(saved[0]), "--from", "pred", "--to", "succ", "--pairs", "3"]
    code, stdout, stderr = run([*args, "--site", "heads", "--out", str(out)], capsys)
    assert code == 0 and "heads: largest" in stdout and "patched runs" in stderr
    report = json.loads((out / "activation_patching.json").read_text())
    assert list(report["data"]["grids"]) == ["heads"] and report["summary"]["pairs solved (both prompts)"] == 3
    assert (out / "activation_patching.html").stat().st_size > 10_000


def test_activation_patching_by_attribution_writes_its_own_record(saved, tmp_path, capsys, monkeypatch):
    from lsa_interp.analysis import activation_patching
    from tests.analysis.patch_setup import planted_pairs

    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "out"
    args = ["activation-patching", "--model", str(saved[0]), "--from", "pred", "--to", "succ", "--pairs", "3"]
    code, stdout, stderr = run([*args, "--method", "attribution", "--steps", "3", "--out", str(out)], capsys)
    assert code == 0 and "gradient runs" in stderr and "attribution patching (3 integration steps)" in stdout
    report = json.loads((out / "attribution_patching.json").read_text())
    assert list(report["data"]["grids"]) == [
        "encoder residual",
        "encoder attention output",
        "encoder MLP output",
        "heads",
    ]
    assert not (out / "activation_patching.json").exists()


def test_activation_patching_patches_the_four_default_sites(saved, tmp_path, capsys, monkeypatch):
    from lsa_interp.analysis import activation_patching
    from tests.analysis.patch_setup import planted_pairs

    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "out"
    args = ["activation-patching", "--model", str(saved[0]), "--from", "pred", "--to", "succ", "--pairs", "2"]
    assert run([*args, "--out", str(out)], capsys)[0] == 0
    grids = json.loads((out / "activation_patching.json").read_text())["data"]["grids"]
    assert list(grids) == ["encoder residual", "encoder attention output", "encoder MLP output", "heads"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--site", "resid"], "unknown --site 'resid'; choose from: encoder residual, encoder attention output"),
        (["--from", "pred"], "--from and --to are both 'pred'; give two different rules"),
        (["--alphabets", "greek"], "unknown --alphabets 'greek'; choose one of standard, permuted"),
        (["--method", "gradients"], "unknown --method 'gradients'; choose one of exact, attribution"),
        (["--steps", "0"], "Invalid value for '--steps'"),
        ([], "the model answers both prompts of none of the 4 succ/pred minimal pairs (right: 0 succ and 0 pred"),
    ],
)
def test_activation_patching_refuses_bad_input_in_one_line(saved, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    args = ["activation-patching", "--model", str(saved[0]), "--pairs", "4", "--out", str(out), *extra]
    code, stdout, stderr = run(args, capsys)
    assert code == 2 and message in stderr and "Traceback" not in stderr
    assert not out.exists()


def test_path_patching_writes_the_senders_sweep_for_pairs_the_model_solves(saved, tmp_path, capsys, monkeypatch):
    from lsa_interp.analysis import activation_patching
    from tests.analysis.patch_setup import planted_pairs

    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "out"
    args = ["path-patching", "--model", str(saved[0]), "--from", "pred", "--to", "succ", "--pairs", "3"]
    code, stdout, stderr = run([*args, "--sender", "2.3", "--out", str(out)], capsys)
    assert code == 0 and "paths from 2.3: largest" in stdout and "patched paths" in stderr
    report = json.loads((out / "path_patching.json").read_text())
    assert report["summary"]["paths from 2.3: largest"].startswith("encoder 3 self-attention: v, head 1: 1.0")
    assert (out / "path_patching.html").stat().st_size > 10_000
    into = tmp_path / "into"
    code, stdout, _ = run([*args, "--receiver", "3.1/v", "--sender-positions", "32", "--out", str(into)], capsys)
    summary = json.loads((into / "path_patching.json").read_text())["summary"]
    assert code == 0 and summary["paths into 3.1/v from @32: largest"].endswith(": 0.000")  # not the planted letter


def test_path_patching_of_one_path_names_it(saved, tmp_path, capsys, monkeypatch):
    from lsa_interp.analysis import activation_patching
    from tests.analysis.patch_setup import planted_pairs

    monkeypatch.setattr(activation_patching, "minimal_pairs", lambda source, target, n, **_: planted_pairs(n))
    out = tmp_path / "out"
    args = ["path-patching", "--model", str(saved[0]), "--from", "pred", "--to", "succ", "--pairs", "2"]
    assert run([*args, "--sender", "2.3", "--receiver", "3.1/q", "--out", str(out)], capsys)[0] == 0
    summary = json.loads((out / "path_patching.json").read_text())["summary"]
    assert summary["path"] == "2.3 -> 3.1/q" and abs(summary["path: normalised"]) < 1e-4
    assert (out / "path_patching.html").stat().st_size > 10_000
    at = tmp_path / "at"
    assert run([*args, "--sender", "2.3@31", "--receiver", "3.1/v", "--out", str(at)], capsys)[0] == 0
    summary = json.loads((at / "path_patching.json").read_text())["summary"]
    assert summary["path"] == "2.3@31 -> 3.1/v" and summary["path: normalised"] > 0.99
    assert summary["senders' whole effect: normalised"] > 0.99
    both = tmp_path / "both"  # through the readout's queries alone nothing passes; directly, its values read 2.3
    chain = [*args, "--sender", "2.3", "--through", "3.1/q", "--receiver", "memory", "--direct", "--out", str(both)]
    assert run(chain, capsys)[0] == 0
    report = json.loads((both / "path_patching.json").read_text())
    assert report["summary"]["path"] == "2.3 -> 3.1/q -> memory and directly" and report["data"]["direct"]
    assert report["summary"]["path: normalised"] == pytest.approx(1, abs=1e-4)
    cut = tmp_path / "cut"
    assert (
        run([*args, "--sender", "2.3@31", "--receiver", "3.*/v", "--freeze", "3.1", "--out", str(cut)], capsys)[0] == 0
    )
    report = json.loads((cut / "path_patching.json").read_text())
    assert report["summary"]["path"] == "2.3@31 -> 3.*/v" and report["summary"]["path: normalised"] > 0.99
    assert (
        report["data"]["frozen"] == ["3.1"]
        and abs(report["summary"]["senders' effect with 3.1 frozen: normalised"]) < 1e-4
    )
    chain = tmp_path / "chain"
    hops = ["--through", "3.1/v"]
    assert run([*args, "--sender", "2.3", *hops, "--receiver", "memory", "--out", str(chain)], capsys)[0] == 0
    report = json.loads((chain / "path_patching.json").read_text())
    assert report["summary"]["path"] == "2.3 -> 3.1/v -> memory" and report["summary"]["path: normalised"] > 0.99
    assert report["data"]["through"] == [["3.1/v"]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give --sender heads (e.g. --sender 1.3), --receiver inputs (e.g. --receiver 2.3/v) or both"),
        (["--receiver", "2.3/x"], "bad receiver '2.3/x': after '/' give some of q, k, v"),
        (["--sender", "3.1", "--receiver", "2.3"], "receiver 2.3/qkv: no sender reaches its q/k/v"),
        (["--sender", "2.3", "--receiver", "3.1", "--receiver", "memory"], "the memory cannot receive beside"),
        (["--sender", "5.1"], "no head '5.1' in this model"),
        (["--sender", "2.3@x"], "bad sender '2.3@x': after '@' give 0-based positions, e.g. '1.3@31,33'"),
        (
            ["--receiver", "3.1", "--freeze", "2.*"],
            "frozen heads cut the paths from senders: give sender heads as well",
        ),
        (["--sender", "2.3", "--freeze", "4.*"], "bad heads '4.*': no head '4.1' in this model"),
        (["--sender", "2.3", "--through", "3.1"], "a chain runs from senders through hops into receivers"),
        (["--sender", "2.3", "--through", "memory", "--receiver", "cross:1.1/kv"], "the memory ends a path"),
        (["--sender", "2.3", "--through", "3.1", "--receiver", "3.2"], "receiver 3.2/qkv: no sender reaches its q/k/v"),
        (["--sender", "2.3", "--freeze", "2.*"], "2.3: a head cannot both send and be frozen"),
        (["--sender", "2.3@30", "--receiver", "3.1/v@31"], "receiver 3.1/v@31: its v reads none of the positions"),
        (["--sender", "2.3", "--from", "pred"], "--from and --to are both 'pred'; give two different rules"),
        (["--sender", "2.3", "--alphabets", "greek"], "unknown --alphabets 'greek'; choose one of standard, permuted"),
        (["--sender", "2.3"], "the model answers both prompts of none of the 4 succ/pred minimal pairs"),
    ],
)
def test_path_patching_refuses_bad_input_in_one_line(saved, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    code, stdout, stderr = run(
        ["path-patching", "--model", str(saved[0]), "--pairs", "4", "--out", str(out), *extra], capsys
    )
    errors = [line for line in stderr.splitlines() if line.startswith("lsa-interp: error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0] and "Traceback" not in stderr
    assert not out.exists()
