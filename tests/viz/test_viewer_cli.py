"""The ``attention`` command on a tiny saved model: files written, help example, one-line errors, lazy torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.helpers import run

torch.set_num_threads(1)
TASK = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"


@pytest.fixture
def tiny_model(tmp_path):
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    return save_model(model, tmp_path / "tiny")


def test_attention_writes_the_view_and_circuitsvis_pages(tiny_model, tmp_path, capsys):
    out, pages = tmp_path / "view.html", tmp_path / "cv"
    args = [
        "attention",
        "--model",
        str(tiny_model),
        "--task",
        TASK,
        "--out",
        str(out),
        "--circuitsvis",
        str(pages),
        "--top-k",
        "3",
    ]
    code, stdout, _ = run(args, capsys)
    assert code == 0 and "answer:" in stdout and str(out) in stdout
    page = out.read_text(encoding="utf-8")
    assert "<h2>cross-attention (decoder steps x encoder tokens)</h2>" in page and '"#3"' in page
    assert '"#4"' not in page
    assert sorted(p.name for p in pages.iterdir()) == [
        "decoder_layer_1.html",
        "decoder_layer_2.html",
        "encoder_layer_1.html",
        "encoder_layer_2.html",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "abc | x"], "a task needs"),
        (["--task", "abcdefghijklmnopqrstuvwxyz | gh1 > fhi | bcd"], "unknown symbol"),
        (["--task", TASK, "--model", "/nonexistent/checkpoint"], "no checkpoint"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_model, tmp_path, capsys, args, message):
    full = ["attention", "--model", str(tiny_model), "--out", str(tmp_path / "v.html"), *args]
    code, _, err = run(full, capsys)
    assert code == 2 and err.startswith("lsa-interp: error:") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "v.html").exists()


def test_help_has_an_example(capsys):
    code, stdout, _ = run(["attention", "--help"], capsys)
    text = " ".join(stdout.split())
    assert code == 0 and "Example: lsa-interp attention --model copy-200 --task" in text and "--circuitsvis" in text


def test_command_module_does_not_import_torch():
    probe = "import sys, lsa_interp.commands.viewer; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
