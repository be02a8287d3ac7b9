"""The analysis commands reach the library's options (the paper's way by default), refuse bad combinations in
one line with exit code 2, and state in their help the thresholds the library judges with."""

from __future__ import annotations

import importlib
import json
import re

import pytest
import torch

from lsa_interp.analysis.splice import unused_positions
from lsa_interp.model import HookedEncoderDecoder, ModelConfig, save_model
from tests.helpers import run

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    return str(save_model(model, tmp_path_factory.mktemp("ckpt") / "tiny"))


def _spy(monkeypatch, module: str, function: str) -> dict:
    """Record the keyword arguments the command passes to ``module.function`` (which still runs)."""
    target = importlib.import_module(module)
    real, seen = getattr(target, function), {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, function, spy)
    return seen


@pytest.mark.parametrize(
    ("args", "module", "function", "expected"),
    [
        (
            ["elimination", "--tasks", "4"],
            "lsa_interp.analysis.elimination",
            "elimination",
            {"prompts": "paper", "normed": True, "layer": -1},
        ),
        (
            ["elimination", "--tasks", "4", "--prompts", "random", "--raw", "--layer", "1", "-t", "pred"],
            "lsa_interp.analysis.elimination",
            "elimination",
            {"prompts": "random", "normed": False, "layer": 0, "transformations": ["pred"], "alphabets": "both"},
        ),
        (
            ["invariance", "--tasks", "3", "--compare", "succ"],
            "lsa_interp.analysis.invariance",
            "mapping_invariance",
            {"prompts": "paper", "normed": True, "layer": -1},
        ),
        (
            ["invariance", "--tasks", "3", "--compare", "succ", "--prompts", "random", "--raw", "--lengths", "3,4"],
            "lsa_interp.analysis.invariance",
            "mapping_invariance",
            {"prompts": "random", "normed": False, "lengths": (3, 4), "alphabets": "standard"},
        ),
        (  # the last layer by its 1-based number
            ["invariance", "--tasks", "3", "--compare", "succ", "--layer", "2"],
            "lsa_interp.analysis.invariance",
            "mapping_invariance",
            {"layer": 1},
        ),
        (
            ["cross-attention", "--tasks", "4", "--all-tasks"],
            "lsa_interp.analysis.cross_attention",
            "cross_attention_targets",
            {"prompts": "paper", "solved_only": False},
        ),
        (
            ["roles", "--tasks", "6", "-t", "pred", "--raw"],
            "lsa_interp.analysis.roles",
            "role_assignment",
            {"normed": False, "transformations": ["pred"]},
        ),
        (
            ["patch", "--head", "1.1", "--pairs", "3", "--alphabets", "permuted"],
            "lsa_interp.analysis.patching",
            "patching_analysis",
            {"alphabets": "permuted", "lengths": (3,)},
        ),
        (
            ["patch", "--head", "1.1", "--matrix", "--rules", "succ,pred", "--pairs", "2"],
            "lsa_interp.analysis.steering",
            "steering_analysis",
            {"alphabets": "standard", "lengths": (3, 4, 5, 6, 7)},
        ),
        (
            ["patch", "--head", "1.1", "--matrix", "--rules", "succ,pred", "--pairs", "2", "--lengths", "4"]
            + ["--alphabets", "permuted"],
            "lsa_interp.analysis.steering",
            "steering_analysis",
            {"alphabets": "permuted", "lengths": (4,)},
        ),
        (
            ["splice", "--pairs", "3", "--positions", "8-25", "--positions", "0-3,9", "--positions", "unused"],
            "lsa_interp.analysis.splice",
            "splice_analysis",
            {
                "cases": {
                    "alphabet 8-25": tuple(range(8, 26)),
                    "positions 0-3,9": (0, 1, 2, 3, 9),
                    "unused letters": unused_positions,
                }
            },
        ),
    ],
)
def test_options_reach_the_library(args, module, function, expected, checkpoint, tmp_path, capsys, monkeypatch):
    seen = _spy(monkeypatch, module, function)
    code, _, err = run([*args, "--model", checkpoint, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert {key: seen.get(key) for key in expected} == expected


def test_elimination_raw_last_layer_is_recorded(checkpoint, tmp_path, capsys):
    code, _, err = run(["elimination", "--tasks", "4", "--raw", "--model", checkpoint, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "elimination.json").read_text())
    assert doc["summary"]["normed"] is False and doc["data"]["layer"] == 2
    assert all(prompt.startswith("abcdefghijklmnopqrstuvwxyz") for prompt in doc["data"]["prompts"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["elimination", "--prompts", "mixed"], "unknown --prompts 'mixed'; choose one of paper, random"),
        (["elimination", "-t", "pred"], "--transformation applies to --prompts random only"),
        (["cross-attention", "--alphabets", "both"], "--alphabets applies to --prompts random only"),
        (["invariance", "--lengths", "3,4"], "--lengths applies to --prompts random only"),
        (["invariance", "--prompts", "random", "--lengths", "2"], "bad --lengths '2'"),
        (["elimination", "--layer", "3"], "--layer 3 is beyond the model's 2 encoder layers"),
        (["decoder-lens", "--source", "train"], "unknown task source 'train'"),
        (["patch", "--alphabets", "both"], "unknown --alphabets 'both'; choose one of standard, permuted"),
        (["splice", "--positions", "31-0"], "bad --positions '31-0'"),
        (["splice", "--positions", "8-"], "bad --positions '8-'"),  # was spliced as position 8 alone
        (["splice", "--positions", "0-31,"], "bad --positions '0-31,'"),
        (["rasp", "--out", "/proc/no-such-dir"], "cannot write to --out /proc/no-such-dir"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args, message, checkpoint, capsys):
    code, out, err = run([*args, "--model", checkpoint], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err + out


def _help(command: str, capsys) -> str:
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    return " ".join(out.replace("│", " ").split())


def test_help_texts_state_the_library_thresholds(capsys):
    from lsa_interp.analysis import (
        cross_attention,
        decoder_lens,
        elimination,
        invariance,
        patching,
        rasp,
        roles,
        splice,
    )

    expected = {
        "elimination": [
            f"holds from {elimination.SINK_MIN}",
            f"holds from {elimination.COLLAPSE_MIN}",
            f">= {elimination.NORM_RATIO_MIN}",
            "Default prompts: the paper's",
        ],
        "invariance": [f"smallest is >= {invariance.PAPER_RANGE[0]}", f">= {invariance.CONTROL_MARGIN}"],
        "cross-attention": [f">= {cross_attention.MIN_ARGMAX_SHARE:.0%}".replace("%", " %")],
        "roles": [
            f"rises by >= {roles.SILHOUETTE_MARGIN}",
            f"falls by < {roles.PROBE_MARGIN}",
            f"fall by >= {roles.OVERLAP_MARGIN}",
            f"at least {roles.MIN_STRIPE_HEADS} layer-1 heads put >= {roles.STRIPE_MASS:g} of their attention",
        ],
        "decoder-lens": [f"at most {decoder_lens.PAPER_EARLY_SHARE:.3f} x the last layer"],
        "rasp": [f">= {rasp.MATCH_THRESHOLD} of its attention"],
        "patch": [f">= {patching.FLIP_THRESHOLD:.0%}".replace("%", " %")],
        "splice": ["more than half" if splice.MAJORITY == 0.5 else f"{splice.MAJORITY}"],
    }
    for command, phrases in expected.items():
        text = _help(command, capsys)
        missing = [phrase for phrase in phrases if phrase not in text]
        assert not missing, f"{command} --help lacks {missing}"
    assert "0.3" not in _help("elimination", capsys)


def test_report_runs_on_one_torch_thread_per_process(checkpoint, tmp_path, capsys, monkeypatch):
    from lsa_interp.analysis import report, report_pool

    calls = []

    def fake_pool(model, name, seed, workers, progress=None):
        calls.append((torch.get_num_threads(), workers))
        return report.Report(name)

    monkeypatch.setattr(report_pool, "run_report_pool", fake_pool)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        code, _, err = run(["report", "--model", checkpoint, "--workers", "2", "--out", str(tmp_path)], capsys)
    finally:
        torch.set_num_threads(before)
    assert code == 0, err
    assert calls == [(1, 2)] and (tmp_path / "report.json").is_file()


def test_the_cross_attention_help_example_asks_for_prompts_that_exist(capsys):
    """Its example asked for 500 pred prompts of the paper's form, of which 380 exist (the command exited 2)."""
    from lsa_interp.analysis.prompts import paper_prompts

    tasks = int(re.search(r"--transformation pred --tasks (\d+)", _help("cross-attention", capsys)).group(1))
    assert len(paper_prompts("pred", tasks, fixed_query=False)) == tasks
