"""Run directories: a fresh start, the state file and its metrics offset, the generators, the device, signals."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal

import pytest
import torch

from lsa_interp.training import RunSpec, StackConfig, TrainConfig, run_dir as rd


def test_prepare_refuses_a_used_directory_and_with_force_clears_only_the_runs_own_files(tmp_path):
    """A non-empty directory needs ``force``; then the state, metrics, done flag, model and replicate models go,
    other files stay and the config is written as indented JSON."""
    run = tmp_path / "run"
    assert rd.prepare_run_dir(run, {"seed": 1}) == run
    assert json.loads((run / rd.CONFIG_FILE).read_text()) == {"seed": 1}
    assert (run / rd.CONFIG_FILE).read_text().endswith("}\n") and '\n  "seed": 1' in (run / rd.CONFIG_FILE).read_text()
    for name in (rd.STATE_FILE, rd.METRICS_FILE, rd.DONE_FILE, "notes.txt"):
        (run / name).write_text("x")
    for sub in (rd.MODEL_DIR, rd.replicate_dir(0), rd.replicate_dir(11)):
        (run / sub).mkdir()
        (run / sub / "weights").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        rd.prepare_run_dir(run, {"seed": 2})
    assert json.loads((run / rd.CONFIG_FILE).read_text()) == {"seed": 1}
    rd.prepare_run_dir(run, {"seed": 2}, force=True)
    assert sorted(p.name for p in run.iterdir()) == sorted([rd.CONFIG_FILE, "notes.txt"])
    assert json.loads((run / rd.CONFIG_FILE).read_text()) == {"seed": 2}
    empty = tmp_path / "empty"
    empty.mkdir()
    rd.prepare_run_dir(empty, {})  # an existing empty directory needs no force
    assert (rd.prepare_run_dir(tmp_path / "a" / "b" / "run", {}) / rd.CONFIG_FILE).is_file()  # parents made
    (tmp_path / "file").write_text("keep")
    for force in (False, True):  # it was a NotADirectoryError
        with pytest.raises(FileExistsError, match="file is a file; give a directory for the run$"):
            rd.prepare_run_dir(tmp_path / "file", {}, force=force)
    assert (tmp_path / "file").read_text() == "keep"


def test_a_state_records_the_metrics_length_and_cut_metrics_returns_the_log_to_it(tmp_path):
    """``write_state`` stores the length of metrics.jsonl at the save (0 before any line); ``read_state`` gives it
    back on the CPU (None without a state); ``cut_metrics`` drops what was appended later."""
    assert rd.read_state(tmp_path) is None
    assert rd.write_state(tmp_path, {"step": 0}) == 0
    rd.append_record(tmp_path, {"type": "step", "step": 1})
    rd.append_record(tmp_path, {"type": "step", "step": 2})
    text = (tmp_path / rd.METRICS_FILE).read_text()
    assert text == '{"type": "step", "step": 1}\n{"type": "step", "step": 2}\n'
    offset = rd.write_state(tmp_path, {"step": 2, "weights": torch.ones(3)})
    assert offset == len(text.encode())
    rd.append_record(tmp_path, {"type": "step", "step": 3})
    state = rd.read_state(tmp_path)
    assert state["step"] == 2 and state["metrics_offset"] == offset and state["weights"].device.type == "cpu"
    rd.cut_metrics(tmp_path, state["metrics_offset"])
    assert (tmp_path / rd.METRICS_FILE).read_text() == text
    rd.cut_metrics(tmp_path / "elsewhere", 0)  # no metrics file: nothing to cut


def test_restoring_generators_continues_the_saved_random_stream_and_leaves_cuda_alone_on_a_cpu(monkeypatch):
    """The CPU generator continues where it was saved; a state saved on a GPU (with a CUDA generator state) resumed
    on a CPU does not touch CUDA; on a CUDA device a saved CUDA state is restored."""
    state = rd.rng_state(torch.device("cpu"))
    assert state["cuda_rng"] is None
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: torch.full((8,), 7, dtype=torch.uint8))
    assert torch.equal(rd.rng_state(torch.device("cuda"))["cuda_rng"], torch.full((8,), 7, dtype=torch.uint8))
    expected = torch.rand(4)
    torch.rand(7)
    calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s: calls.append(s))
    rd.restore_rng({**state, "cuda_rng": torch.zeros(8, dtype=torch.uint8)}, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected) and calls == []
    saved_on_gpu = torch.arange(8, dtype=torch.uint8)
    rd.restore_rng({**state, "cuda_rng": saved_on_gpu}, torch.device("cuda"))
    assert len(calls) == 1 and torch.equal(calls[0], saved_on_gpu)
    rd.restore_rng(state, torch.device("cuda"))  # a state saved on a CPU has no CUDA generator to restore
    assert len(calls) == 1


def test_pick_device_resolves_auto_and_refuses_a_missing_gpu(monkeypatch):
    """``auto`` is CUDA when there is one and the CPU otherwise; ``cuda`` without a GPU is a ValueError."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rd.pick_device("auto") == torch.device("cpu") and rd.pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        rd.pick_device("cuda")
    for name in ("bogus", "", "mps", "cuda:", "cuda:x"):  # 'bogus' and '' were torch's own errors; 'mps' was taken
        with pytest.raises(ValueError, match=f"^unknown device '{name}'; choose one of: auto, cpu, cuda, cuda:N$"):
            rd.pick_device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert rd.pick_device("auto") == torch.device("cuda") and rd.pick_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"^there is no cuda:2: this machine has 2 CUDA GPU\(s\)$"):
        rd.pick_device("cuda:2")


def test_signals_become_a_flag_inside_the_context_and_handlers_are_restored_after():
    """SIGTERM and SIGINT set the flag (the first signal wins) instead of ending the process; the previous
    handlers are back afterwards."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with rd.stop_on_signals() as flag:
        assert flag == {}
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert flag == {"signal": signal.SIGTERM}
    assert {sig: signal.getsignal(sig) for sig in before} == before


@pytest.mark.parametrize(
    ("cut", "reason"), [(0, "EOFError"), (100, "PytorchStreamReader failed reading zip archive: failed finding")]
)
def test_an_empty_or_truncated_state_is_named_in_a_value_error(tmp_path, cut, reason):
    """torch.load of an empty file raises EOFError, which click reports as a bare "aborted" (exit 130). The message
    gives torch's reason (its first line), or the error's type where torch gives none."""
    rd.write_state(tmp_path, {"step": 3, "weights": torch.arange(1000.0)})
    assert rd.read_state(tmp_path)["step"] == 3
    data = (tmp_path / rd.STATE_FILE).read_bytes()
    (tmp_path / rd.STATE_FILE).write_bytes(data[:cut])
    damaged = r"state\.pt is empty, truncated or not a training state \("
    with pytest.raises(ValueError, match=damaged + reason + r"[^\n]*\); it cannot be resumed$"):
        rd.read_state(tmp_path)


def test_a_state_holding_an_object_to_unpickle_is_refused_not_loaded(tmp_path):
    """A state holds tensors, dicts, lists and numbers only: a file that would unpickle anything else (and so could
    run code) is refused rather than loaded."""
    torch.save({"step": 1, "when": datetime.date(2026, 12, 5)}, tmp_path / rd.STATE_FILE)
    damaged = r"state\.pt is empty, truncated or not a training state \("
    with pytest.raises(ValueError, match=damaged + "Weights only load failed"):
        rd.read_state(tmp_path)


@pytest.mark.parametrize(
    ("text", "problem"), [("{\n", "not JSON"), ("[1, 2]", "not a JSON object"), ("\xff", "not JSON")]
)
def test_a_damaged_config_is_named_in_a_value_error(tmp_path, text, problem):
    (tmp_path / rd.CONFIG_FILE).write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=rf"train_config\.json is damaged \({problem}"):
        rd.read_config(tmp_path)
    (tmp_path / rd.CONFIG_FILE).write_text(json.dumps({"seed": 1}), encoding="utf-8")
    assert rd.read_config(tmp_path) == {"seed": 1}


def test_runs_of_the_wrong_type_are_left_to_the_stack_config_to_name(tmp_path):
    """``{"runs": 5}`` was a TypeError while the dataset paths were resolved."""
    (tmp_path / rd.CONFIG_FILE).write_text(json.dumps({"runs": 5}))
    assert rd.read_config(tmp_path) == {"runs": 5}
    with pytest.raises(ValueError, match="runs must be a list of run objects, got 5"):
        StackConfig.from_dict({**StackConfig(runs=(RunSpec("d"),)).to_dict(), **rd.read_config(tmp_path)})


def test_a_config_is_read_as_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    """A data directory's name outside ASCII, written by another tool without escapes, reads back on a machine whose
    locale's encoding is not UTF-8."""
    config = {"data_dir": "/données/copy-20", "seed": 1}
    (tmp_path / rd.CONFIG_FILE).write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    assert rd.read_config(tmp_path) == config


def test_a_relative_dataset_path_is_found_from_another_directory(tmp_path, monkeypatch):
    """Runs stored the dataset path as typed (``runs/gen/data``), so resuming or evaluating them from elsewhere
    failed ('runs/gen/data is not a dataset directory'); a relative path not found from here is read as the run's
    own ``RUN/data`` where that holds a dataset, in a single run's config and in each run of a stack's."""
    run = tmp_path / "runs" / "gen"
    (run / "data").mkdir(parents=True)
    (run / "data" / "manifest.json").write_text("{}")
    (tmp_path / "elsewhere").mkdir()
    other = tmp_path / "mine"
    (other / "ds").mkdir(parents=True)
    (other / "ds" / "manifest.json").write_text("{}")
    config = {"data_dir": "runs/gen/data", "runs": [{"data_dir": "runs/gen/data"}, {"data_dir": "ds"}, "x"]}
    (run / rd.CONFIG_FILE).write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path / "elsewhere")
    read = rd.read_config(run)
    assert read["data_dir"] == str(run / "data") and read["runs"][0]["data_dir"] == str(run / "data")
    assert read["runs"][1]["data_dir"] == "ds" and read["runs"][2] == "x"  # not found either way: left for the loader
    monkeypatch.chdir(tmp_path)
    assert rd.read_config(run)["data_dir"] == "runs/gen/data"  # found from here: kept as stored
    monkeypatch.chdir(other)
    assert rd.located_data_dir("ds", run) == "ds" and rd.located_data_dir("/abs/gone", run) == "/abs/gone"


def test_a_relative_dataset_path_is_read_as_the_runs_own_only_where_it_names_it(tmp_path, monkeypatch):
    """Only a path ending in ``RUN/data`` (the run's own name, then ``data``) is read as the run's own dataset: another
    run's ``data`` or another folder of this run is left as stored, even where the run's own ``data`` holds one."""
    run = tmp_path / "runs" / "gen"
    (run / "data").mkdir(parents=True)
    (run / "data" / "manifest.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert rd.located_data_dir("other/gen/data", run) == str(run / "data")
    assert rd.located_data_dir("runs/other/data", run) == "runs/other/data"
    assert rd.located_data_dir("runs/gen/dataset", run) == "runs/gen/dataset"


def test_a_config_that_does_not_parse_is_named_by_its_path(tmp_path):
    (tmp_path / rd.CONFIG_FILE).write_text(json.dumps({"seed": "one"}), encoding="utf-8")
    path = re.escape(str(tmp_path / rd.CONFIG_FILE))
    with pytest.raises(ValueError, match=f"^{path}: not a training config: .*seed must be an integer, got 'one'"):
        rd.parse_config(tmp_path, TrainConfig.from_dict)
    (tmp_path / rd.CONFIG_FILE).write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{path} is damaged \\(not a JSON object\\)"):  # read_config names it once
        rd.parse_config(tmp_path, TrainConfig.from_dict)
    (tmp_path / rd.CONFIG_FILE).write_text(json.dumps({"seed": 1}), encoding="utf-8")
    assert rd.parse_config(tmp_path, lambda data: data["seed"] + 1) == 2
