"""A run's state file (its metrics offset, a damaged or unsafe file refused), its random generators, its device."""

from __future__ import annotations

import datetime

import pytest
import torch

from lsa_interp.training import run_dir as rd, run_state as rs


def test_a_state_records_the_metrics_length_and_cut_metrics_returns_the_log_to_it(tmp_path):
    """``write_state`` stores the length of metrics.jsonl at the save (0 before any line); ``read_state`` gives it
    back on the CPU (None without a state); ``cut_metrics`` drops what was appended later."""
    assert rs.read_state(tmp_path) is None
    assert rs.write_state(tmp_path, {"step": 0}) == 0
    rd.append_record(tmp_path, {"type": "step", "step": 1})
    rd.append_record(tmp_path, {"type": "step", "step": 2})
    text = (tmp_path / rd.METRICS_FILE).read_text()
    assert text == '{"type": "step", "step": 1}\n{"type": "step", "step": 2}\n'
    offset = rs.write_state(tmp_path, {"step": 2, "weights": torch.ones(3)})
    assert offset == len(text.encode())
    rd.append_record(tmp_path, {"type": "step", "step": 3})
    state = rs.read_state(tmp_path)
    assert state["step"] == 2 and state["metrics_offset"] == offset and state["weights"].device.type == "cpu"
    rd.cut_metrics(tmp_path, state["metrics_offset"])
    assert (tmp_path / rd.METRICS_FILE).read_text() == text
    rd.cut_metrics(tmp_path / "elsewhere", 0)  # no metrics file: nothing to cut


def test_restoring_generators_continues_the_saved_random_stream_and_leaves_cuda_alone_on_a_cpu(monkeypatch):
    """The CPU generator continues where it was saved; a state saved on a GPU (with a CUDA generator state) resumed
    on a CPU does not touch CUDA; on a CUDA device a saved CUDA state is restored."""
    state = rs.rng_state(torch.device("cpu"))
    assert state["cuda_rng"] is None
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: torch.full((8,), 7, dtype=torch.uint8))
    assert torch.equal(rs.rng_state(torch.device("cuda"))["cuda_rng"], torch.full((8,), 7, dtype=torch.uint8))
    expected = torch.rand(4)
    torch.rand(7)
    calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s: calls.append(s))
    rs.restore_rng({**state, "cuda_rng": torch.zeros(8, dtype=torch.uint8)}, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected) and calls == []
    saved_on_gpu = torch.arange(8, dtype=torch.uint8)
    rs.restore_rng({**state, "cuda_rng": saved_on_gpu}, torch.device("cuda"))
    assert len(calls) == 1 and torch.equal(calls[0], saved_on_gpu)
    rs.restore_rng(state, torch.device("cuda"))  # a state saved on a CPU has no CUDA generator to restore
    assert len(calls) == 1


def test_pick_device_resolves_auto_and_refuses_a_missing_gpu(monkeypatch):
    """``auto`` is CUDA when there is one and the CPU otherwise; ``cuda`` without a GPU is a ValueError."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rs.pick_device("auto") == torch.device("cpu") and rs.pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        rs.pick_device("cuda")
    for name in ("bogus", "", "mps", "cuda:", "cuda:x"):  # 'bogus' and '' were torch's own errors; 'mps' was taken
        with pytest.raises(ValueError, match=f"^unknown device '{name}'; choose one of: auto, cpu, cuda, cuda:N$"):
            rs.pick_device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert rs.pick_device("auto") == torch.device("cuda") and rs.pick_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"^there is no cuda:2: this machine has 2 CUDA GPU\(s\)$"):
        rs.pick_device("cuda:2")


@pytest.mark.parametrize(
    ("cut", "reason"), [(0, "EOFError"), (100, "PytorchStreamReader failed reading zip archive: failed finding")]
)
def test_an_empty_or_truncated_state_is_named_in_a_value_error(tmp_path, cut, reason):
    """torch.load of an empty file raises EOFError, which click reports as a bare "aborted" (exit 130). The message
    gives torch's reason (its first line), or the error's type where torch gives none."""
    rs.write_state(tmp_path, {"step": 3, "weights": torch.arange(1000.0)})
    assert rs.read_state(tmp_path)["step"] == 3
    data = (tmp_path / rd.STATE_FILE).read_bytes()
    (tmp_path / rd.STATE_FILE).write_bytes(data[:cut])
    damaged = r"state\.pt is empty, truncated or not a training state \("
    with pytest.raises(ValueError, match=damaged + reason + r"[^\n]*\); it cannot be resumed$"):
        rs.read_state(tmp_path)


def test_a_state_holding_an_object_to_unpickle_is_refused_not_loaded(tmp_path):
    """A state holds tensors, dicts, lists and numbers only: a file that would unpickle anything else (and so could
    run code) is refused rather than loaded."""
    torch.save({"step": 1, "when": datetime.date(2026, 12, 5)}, tmp_path / rd.STATE_FILE)
    damaged = r"state\.pt is empty, truncated or not a training state \("
    with pytest.raises(ValueError, match=damaged + "Weights only load failed"):
        rs.read_state(tmp_path)
