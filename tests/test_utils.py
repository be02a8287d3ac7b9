"""Utilities: atomic writes leave complete files with the usual permissions and nothing behind on error; JSON
reading; Python arguments of the wrong type named in a TypeError."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import stat
from pathlib import Path

import jaxtyping
import pytest
import torch

from lsa_interp import utils
from lsa_interp.analysis.patching import resolve_heads
from lsa_interp.analysis.path_patching import parse_positions, parse_receiver, parse_senders
from lsa_interp.data import DatasetConfig
from lsa_interp.data.task import Task
from lsa_interp.evaluation.card import check_checkpoint_name
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import parse_head
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.training import TrainConfig
from lsa_interp.utils import (
    atomic_write,
    generated_doc_main,
    hardware_description,
    make_staging_dir,
    no_cyclic_gc,
    sha256_file,
)
from tests.helpers import TINY

TASK = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd")


def test_atomic_write_gives_usual_permissions_and_cleans_up(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "out.txt", lambda p: p.write_text("done"))
        staging = make_staging_dir(tmp_path / "checkpoint")
    finally:
        os.umask(old)
    assert (tmp_path / "out.txt").read_text() == "done"
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE(staging.stat().st_mode) == 0o755 and staging.name.startswith(".checkpoint.")

    def fail(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(tmp_path / "out.txt", fail)
    assert (tmp_path / "out.txt").read_text() == "done"
    assert sorted(p.name for p in tmp_path.iterdir()) == [staging.name, "out.txt"]


def test_atomic_write_replaces_an_old_file_and_cleans_up_after_an_interrupt(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def interrupted(path):
        path.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"] and target.read_text() == "old"
    seen = []
    atomic_write(target, lambda path: (seen.append(path), path.write_text("new")))
    assert target.read_text() == "new" and not seen[0].exists()
    assert seen[0].parent == tmp_path and seen[0].name.startswith(".out.txt.") and seen[0].name.endswith(".tmp")


def test_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "out.txt", lambda p: p.write_text("done"))
        staging = make_staging_dir(tmp_path / "checkpoint")
        assert os.umask(0o027) == 0o027, "the umask is restored"
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE(staging.stat().st_mode) == 0o750 and list(staging.iterdir()) == []
    assert staging.parent == tmp_path and make_staging_dir(tmp_path / "checkpoint") != staging


@pytest.mark.parametrize("enabled", [True, False])
def test_no_cyclic_gc_pauses_the_collector_and_restores_it(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with no_cyclic_gc():
            assert not gc.isenabled()
        assert gc.isenabled() == enabled
        with pytest.raises(ValueError), no_cyclic_gc():
            raise ValueError("inside")
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_sha256_file_reads_files_larger_than_its_block(tmp_path):
    data = bytes(range(256)) * 5000  # 1.22 MiB: two blocks
    (tmp_path / "big").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    assert sha256_file(tmp_path / "big") == hashlib.sha256(data).hexdigest()
    assert sha256_file(str(tmp_path / "empty")) == hashlib.sha256(b"").hexdigest()


def test_hardware_description_names_the_cpu_model_and_torch_threads(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Test CPU 9000: rev 2 \nflags\t: avx\n")
    monkeypatch.setattr(utils, "Path", lambda path: info if path == "/proc/cpuinfo" else Path(path))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    assert hardware_description("cpu") == "Test CPU 9000: rev 2, 3 torch threads"
    info.write_text("processor\t: 0\n")
    assert hardware_description("cpu") == "CPU, 3 torch threads"
    info.unlink()
    assert hardware_description("cpu") == "CPU, 3 torch threads"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert hardware_description("cpu") == "CPU, 1 torch thread"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Test GPU")
    monkeypatch.setattr(torch.version, "cuda", "12.9")
    assert hardware_description("cuda") == "Test GPU (CUDA 12.9)"


def test_generated_doc_main_prints_or_writes_the_document(tmp_path, capsys):
    generated_doc_main(lambda: "# Title\n", "a document", [])
    assert capsys.readouterr().out == "# Title\n"
    generated_doc_main(lambda: "# Title\n", "a document", ["--out", str(tmp_path / "doc.md")])
    assert (tmp_path / "doc.md").read_text() == "# Title\n" and capsys.readouterr().out == ""
    with pytest.raises(SystemExit):
        generated_doc_main(lambda: "", "a document", ["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "a document" in shown and "--out OUT file to write (default: standard output)" in shown


def test_a_writer_that_removed_its_file_still_raises_its_own_error(tmp_path):
    def remove_then_fail(path):
        path.unlink()
        raise RuntimeError("the writer's own error")

    with pytest.raises(RuntimeError, match="the writer's own error"):
        atomic_write(tmp_path / "out.txt", remove_then_fail)
    assert list(tmp_path.iterdir()) == []


def test_json_lines_leave_out_a_last_line_still_being_written_and_name_a_damaged_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert utils.read_json_lines(path) == []
    path.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "los', encoding="utf-8")  # a kill cut the last line
    assert utils.read_json_lines(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{"step": 3}', encoding="utf-8")  # a whole last line without its newline counts
    assert utils.read_json_lines(path) == [{"step": 1}, {"step": 3}]
    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2 is not JSON .*the run's log is damaged"):
        utils.read_json_lines(path)
    path.write_bytes(b'{"step": 1}\n{"step": "\xc3')  # a kill cut the last line inside a letter
    assert utils.read_json_lines(path) == [{"step": 1}]
    path.write_bytes(b'{"step": 1}\n\xff\xfe\n')
    with pytest.raises(ValueError) as error:
        utils.read_json_lines(path)
    assert str(error.value) == f"{path} line 2 is not UTF-8 text; the run's log is damaged"
    path.write_text('{"step": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ValueError) as error:
        utils.read_json_lines(path)
    assert str(error.value) == f"{path} line 2 is [1, 2], not a JSON object; the run's log is damaged"


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"\xff\x80", "not UTF-8 text"), (b"", "not JSON (Expecting value: line 1 column 1 (char 0))"),
     (b'"' + b"x" * 50 + b'"', '"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... is not a JSON object'),
     (b'"' + b"x" * 38 + b'"', '"' + "x" * 38 + '" is not a JSON object'),  # 40 characters: shown whole
     (b'"' + b"x" * 39 + b'"', '"' + "x" * 36 + '... is not a JSON object'),  # 41: cut to 37 and "..."
     (b"null", "null is not a JSON object")],
)  # fmt: skip
def test_a_json_file_that_is_no_object_is_refused_naming_it_and_what_it_should_be(tmp_path, content, problem):
    path = tmp_path / "evaluation.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        utils.read_json_object(path, "an evaluation")
    assert str(error.value) == f"{path}: {problem}; expected an evaluation"


def test_the_fields_of_a_json_object_are_read_checked_with_their_defaults(tmp_path):
    data = {"n": {"seen": 3, "rate": 0.5, "none": None, "flag": True}, "runs": [{"name": "a"}, 7], "text": "x"}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    record = utils.read_json_object(path, "a run")
    assert record.data == data and record.get("n.seen", int) == 3 and record.get("n.rate", utils.NUMBER) == 0.5
    assert record.get("runs.0.name", str) == "a" and record.get("runs", list) == [{"name": "a"}, 7]
    assert record.get("n.none", (int, type(None))) is None and record.get("n.flag", bool) is True
    for keys in ("n.none", "n.missing", "missing.seen", "runs.5.name"):  # missing or null: the default
        assert record.get(keys, int, 9) == 9
    refused = {
        ("n.seen", str): "'n.seen' is 3, not a string",
        ("n.rate", int): "'n.rate' is 0.5, not a whole number",
        ("text", utils.NUMBER): """'text' is "x", not a number""",
        ("text", (dict, type(None))): """'text' is "x", not an object or null""",
        ("n.none", int): "'n.none' is null, not a whole number",
        ("n.missing", int): "no 'n.missing'",
        ("runs.5.name", str): "no 'runs.5.name'",
        ("text.more", str): """'text' is "x", not an object""",
        ("runs.1.name", str): "'runs.1' is 7, not an object",
        ("runs.name", str): """'runs' is [{"name": "a"}, 7], not an object""",
        ("n.flag", int): "'n.flag' is true, not a whole number",  # JSON true is no number, though Python's bool is
        ("n.flag", utils.NUMBER): "'n.flag' is true, not a number",
    }
    for (keys, kinds), problem in refused.items():
        with pytest.raises(ValueError) as error:
            record.get(keys, kinds)
        assert str(error.value) == f"{path}: {problem}; expected a run"
    with pytest.raises(ValueError, match="'text' is"):
        record.get("text.more", str, "default")  # a default stands for a missing value, not a wrong one


def test_generated_documents_and_json_lines_are_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    """A document's dashes are written, and a log's names outside ASCII read, as UTF-8 on a machine whose locale's
    encoding is ASCII."""
    generated_doc_main(lambda: "# Table 1 – copy-20\n", "a document", ["--out", str(tmp_path / "doc.md")])
    assert (tmp_path / "doc.md").read_text(encoding="utf-8") == "# Table 1 – copy-20\n"
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"run": "données-s0"}\n', encoding="utf-8")
    assert utils.read_json_lines(path) == [{"run": "données-s0"}]


def test_check_type_names_what_it_wanted_and_what_it_got():
    utils.check_type("copy-200", str, "unused")
    utils.check_type(None, (str, type(None)), "unused")
    with pytest.raises(TypeError, match=r"^a name is a str, got int 5$"):
        utils.check_type(5, str, "a name is a str")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Task.parse(None), "Task.parse reads a task's text, a str such as"),
        (lambda: TASK.with_answer(5), "an answer is a str of letters a-z, or None for none, got int 5"),
        (lambda: parse_head(5, ModelConfig()), "a head label is a str such as '2.7' or 'cross:3.1', got int 5"),
        (lambda: parse_receiver(("2", "3"), ModelConfig()), "a receiver is a str such as '2.3/v', 'cross:3.1/kv' or"),
        (lambda: parse_senders(1.3, ModelConfig()), "senders are a str such as '1.3', '1.3@31,33' or '1.*', got"),
        (lambda: parse_positions([31, 33]), "positions are a str such as '31,33', got"),
        (lambda: check_checkpoint_name(None), "a checkpoint name is a str such as 'copy-200', got NoneType None"),
        (lambda: DatasetConfig.from_dict(None), "a dataset config is a dict (a JSON object), got NoneType None"),
        (lambda: TrainConfig.from_dict([]), "a training config is a dict (a JSON object), got list []"),
        (lambda: resolve_heads(HookedEncoderDecoder(TINY), 5), "heads are a Head, a label such as '2.7' or '1.3+2.3'"),
    ],
)
def test_python_arguments_of_the_wrong_type_are_named_in_a_type_error(call, message, monkeypatch):
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    with pytest.raises(TypeError, match=re.escape(message)):
        call()
