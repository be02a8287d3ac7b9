"""Run directories: a fresh start, the metrics log, a damaged config, signals."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

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
