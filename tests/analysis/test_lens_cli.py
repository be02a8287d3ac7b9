"""The decoder-lens and rasp commands on a tiny saved model: files written, help examples, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from lsa_interp.data.presets import PRESETS, DatasetConfig
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.helpers import run

torch.set_num_threads(1)


@pytest.fixture
def tiny_model(tmp_path, monkeypatch):
    """A random 2-layer model saved with metadata preset 'copy-20', which is made tiny for the test."""
    tiny = DatasetConfig(name="copy-20", n_alphabets=4, window_lengths=(3,), n_reshuffle=2, n_new_alphabets=4)
    monkeypatch.setitem(PRESETS, "copy-20", tiny)
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    return save_model(model, tmp_path / "tiny", metadata={"preset": "copy-20", "data_seed": 0})


@pytest.mark.parametrize("source", ["new", "rules"])
def test_decoder_lens_writes_json_and_html(tiny_model, tmp_path, capsys, source):
    out = tmp_path / "out"
    args = ["decoder-lens", "--model", str(tiny_model), "--tasks", "12", "--source", source, "--out", str(out)]
    code, stdout, _ = run(args, capsys)
    assert code == 0 and "layer_2_accuracy" in stdout and "findings" in stdout
    report = json.loads((out / "decoder_lens.json").read_text())
    assert report["summary"]["tasks"] == 12 and report["summary"]["source"] == source
    assert report["data"]["layers"] == [1, 2] and report["data"]["last_layer_reproduces_model"] is True
    assert (out / "decoder_lens.html").stat().st_size > 10_000


def test_rasp_writes_json_and_html(tiny_model, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["rasp", "--model", str(tiny_model), "--tasks", "10", "--seed", "1", "--seen-rules", "--out", str(out)]
    code, stdout, _ = run(args, capsys)
    assert code == 0 and "best_same_as" in stdout
    report = json.loads((out / "rasp.json").read_text())
    assert report["summary"]["tasks"] == 10 and len(report["data"]["heads"]) == 8
    assert [f["name"] for f in report["findings"]] == [
        "RASP pipe selector",
        "RASP arrow selector",
        "RASP same_as selector",
    ]
    assert (out / "rasp.html").exists()


@pytest.mark.parametrize("command", ["decoder-lens", "rasp"])
def test_help_has_an_example(command, capsys):
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0 and f"Example: lsa-interp {command} --model copy-200" in " ".join(out.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["decoder-lens", "--model", "/no/such/checkpoint"], "no checkpoint named or at '/no/such/checkpoint'"),
        (["rasp", "--model", "nope"], "no checkpoint named or at 'nope'"),
        (["decoder-lens", "--tasks", "0"], "Invalid value for '--tasks'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in out + err


def test_unknown_source_is_one_line_and_exit_2(tiny_model, capsys):
    code, _, err = run(["decoder-lens", "--model", str(tiny_model), "--source", "test"], capsys)
    assert code == 2 and "unknown task source 'test'" in err and len(err.strip().splitlines()) == 1


def test_command_module_does_not_import_torch():
    code = "import sys, lsa_interp.commands.lens; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
