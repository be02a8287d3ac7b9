"""scripts/pack_results.py: a session's results survive the trip in chunks; datasets and states stay behind."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import load_script

SCRIPT = Path(__file__).parents[1] / "scripts" / "pack_results.py"
pack_results = load_script("scripts/pack_results.py")


def _part_sizes(folder: Path, name: str) -> list[int]:
    """The sizes of the chunks ``NAME.tar.partNN`` in ``folder``, in part order."""
    return [p.stat().st_size for p in sorted(folder.glob(f"{name}.tar.part*"))]


def test_chunks_from_several_fetches_rebuild_the_results_without_states_or_data(tmp_path):
    sweep = tmp_path / "grid"
    model = sweep / "stacks" / "stack-0" / "replicate-0" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(os.urandom(300_000))  # weights hardly compress
    (model / "evaluation.json").write_text('{"table1": {}}')
    (sweep / "stacks" / "stack-0" / "state.pt").write_bytes(b"x" * 1000)
    (sweep / "stacks" / "stack-0" / "done").write_text("{}")  # finished: its models travel, its state not
    (sweep / "data" / "copy-20-d0").mkdir(parents=True)
    (sweep / "data" / "copy-20-d0" / "manifest.json").write_text("{}")
    (sweep / "results.csv").write_text("run\n")
    chunks = pack_results.pack([sweep], tmp_path / "nested" / "bundle", chunk_mib=0.1)
    assert len(chunks) > 1 and {chunk.stat().st_size for chunk in chunks[:-1]} == {int(0.1 * 2**20)}
    assert pack_results.pack([sweep], tmp_path / "nested" / "bundle", chunk_mib=0.1) == chunks  # the same folder again
    with pytest.raises(SystemExit, match=f"not a directory: {tmp_path / 'nowhere'}"):
        pack_results.pack([sweep, tmp_path / "nowhere"], tmp_path / "other", chunk_mib=1)
    first, second = tmp_path / "fetch1", tmp_path / "fetch2"
    for folder, part in ((first, chunks[:1]), (second, chunks[1:])):
        folder.mkdir()
        for chunk in part:
            (folder / chunk.name).write_bytes(chunk.read_bytes())
    (first / "bundle.sha256").write_text((tmp_path / "nested" / "bundle" / "bundle.sha256").read_text())
    pack_results.unpack([first, second], tmp_path / "back")
    back = tmp_path / "back" / "grid"
    restored = back / "stacks" / "stack-0" / "replicate-0" / "model"
    assert (restored / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()
    assert (back / "results.csv").is_file()
    assert not (back / "stacks" / "stack-0" / "state.pt").exists() and not (back / "data").exists()
    (second / chunks[-1].name).unlink()
    with pytest.raises(SystemExit, match=f"part\\(s\\) {len(chunks) - 1:02d} of {len(chunks)} missing"):
        pack_results.unpack([first, second], tmp_path / "again")
    (second / chunks[-1].name).write_bytes(b"damaged")
    with pytest.raises(SystemExit, match="checksum"):
        pack_results.unpack([first, second], tmp_path / "again")


def test_the_bundle_holds_exactly_the_kinds_of_file_kept(tmp_path):
    """Cards, logs, reports, tables, JSON, metrics, grid files and finished markers travel; Python caches,
    datasets, dot folders, HTML pages and other files stay behind."""
    session = tmp_path / "session"
    kept = {"card.md": "# card", "sweep.log": "log", "preflight.txt": "PASSED", "results.csv": "run",
            "plan.json": "{}", "metrics.jsonl": "{}", "grid.toml": "seeds = [0]", "done": "{}"}  # fmt: skip
    left = {"__pycache__/cached.json": "{}", "data/copy-20-d0/manifest.json": "{}", ".partial/plan.json": "{}",
            "page.html": "<html>", "notes.rst": "notes", "stacks/plan.json": "{}"}  # fmt: skip
    for name, text in {**kept, **left}.items():
        (session / name).parent.mkdir(parents=True, exist_ok=True)
        (session / name).write_text(text)
    pack_results.pack([session], tmp_path / "bundle", chunk_mib=1)
    pack_results.unpack([tmp_path / "bundle"], tmp_path / "back")
    back = tmp_path / "back" / "session"
    assert {str(p.relative_to(back)) for p in back.rglob("*") if p.is_file()} == {*kept, "stacks/plan.json"}


def test_a_stack_is_found_at_any_depth_below_the_root_and_only_as_a_folder_of_stacks(tmp_path):
    root = tmp_path / "runs"
    deep = root / "done-0" / "grid" / "stacks" / "stack-000"
    assert pack_results.stack_of(deep / "replicate-0" / "model" / "config.json", root) == deep
    assert pack_results.stack_of(deep / "state.pt", root) == deep
    assert pack_results.stack_of(root / "stacks" / "plan.json", root) is None
    assert pack_results.stack_of(root / "grid" / "plan.json", root) is None


def test_upload_cuts_parts_as_large_as_a_call_has_room_for_beside_the_checkout(tmp_path, monkeypatch, capsys):
    """A call takes 64 MiB of working tree less 1 MiB of margin: beside a 62.5 MiB checkout, parts of 0.5 MiB,
    the first less the wheels it shares its call with (0.25 MiB)."""
    source, wheels = tmp_path / "gpu-carry", tmp_path / ".whl"
    source.mkdir()
    wheels.mkdir()
    (source / "state.pt").write_bytes(os.urandom(1_000_000))
    (wheels / "a.whl").write_bytes(b"w" * 2**18)
    monkeypatch.setattr(pack_results, "working_tree_mib", lambda: 62.5)
    pack_results.main(["upload", str(source), "--into", str(tmp_path / "up"), "--wheels", str(wheels)])
    sizes = _part_sizes(tmp_path / "up", "carry")
    assert sizes[:2] == [2**18, 2**19] and len(sizes) == 3
    assert str(wheels) in capsys.readouterr().out
    pack_results.main(["upload", str(source), "--into", str(tmp_path / "up"), "--wheels", str(tmp_path / "no")])
    assert _part_sizes(tmp_path / "up", "carry")[0] == 2**19
    pack_results.main(["upload", str(source), "--into", str(tmp_path / "up"), "--first-mib", "0.125"])
    assert _part_sizes(tmp_path / "up", "carry")[:2] == [2**17, 2**19]
    monkeypatch.setattr(pack_results, "ROOT", tmp_path)  # by default the checkout's .whl, where they are fetched
    capsys.readouterr()
    pack_results.main(["upload", str(source), "--into", str(tmp_path / "up")])
    assert _part_sizes(tmp_path / "up", "carry")[:2] == [2**18, 2**19]
    assert "call 1: carry .whl up/carry.sha256" in capsys.readouterr().out


def test_the_sessions_gpu_test_reports_travel_with_its_results(tmp_path):
    session = tmp_path / "session"
    (session / "triton").mkdir(parents=True)
    (session / "preflight-compiled.txt").write_text("PASSED tests/training/test_stack_graph.py::test_each\n")
    (session / "triton" / "triton_tests.txt").write_text("FAILED tests/training/test_packing.py::test_rows\n")
    (session / "triton" / "triton.json").write_text('{"runs": []}')
    pack_results.pack([session], tmp_path / "bundle", chunk_mib=1)
    pack_results.unpack([tmp_path / "bundle"], tmp_path / "back")
    back = tmp_path / "back" / "session"
    assert (back / "preflight-compiled.txt").read_text().startswith("PASSED")
    assert (back / "triton" / "triton_tests.txt").read_text().startswith("FAILED")
    assert (back / "triton" / "triton.json").is_file()


def test_a_sessions_new_compiled_kernels_travel_whole_but_a_bin_elsewhere_stays(tmp_path):
    cache, session = tmp_path / "compile-cache", tmp_path / "session"
    cache.mkdir()
    session.mkdir()
    (cache / "0123abcd.bin").write_bytes(os.urandom(1000))
    (cache / "0123abcd.json").write_text('{"artifacts": {}}')
    (cache / ".0123abcd.bin.x.tmp").write_bytes(b"half written")
    (session / "other.bin").write_bytes(b"not a kernel cache")
    pack_results.pack([session, cache], tmp_path / "bundle", chunk_mib=1)
    pack_results.unpack([tmp_path / "bundle"], tmp_path / "back")
    back = tmp_path / "back"
    assert (back / "compile-cache" / "0123abcd.bin").read_bytes() == (cache / "0123abcd.bin").read_bytes()
    assert sorted(p.name for p in (back / "compile-cache").iterdir()) == ["0123abcd.bin", "0123abcd.json"]
    assert not (back / "session" / "other.bin").exists()


def test_html_pages_stay_behind_and_records_keep_everything_but_the_weights(tmp_path):
    sweep = tmp_path / "grid"
    replicate = sweep / "stacks" / "stack-0" / "replicate-0"
    (replicate / "model").mkdir(parents=True)
    (replicate / "analysis" / "matching").mkdir(parents=True)
    (replicate / "model" / "model.safetensors").write_bytes(os.urandom(1000))
    (replicate / "model" / "config.json").write_text('{"metadata": {}}')
    (replicate / "model" / "evaluation.json").write_text('{"table1": {}}')
    (replicate / "analysis" / "matching" / "matching.json").write_text("{}")
    (replicate / "analysis" / "matching" / "matching.html").write_text("<html>" + "x" * 1000)
    (sweep / "stacks" / "stack-0" / "metrics.jsonl").write_text("{}\n")
    (sweep / "stacks" / "stack-0" / "state.pt").write_bytes(b"x")
    (sweep / "stacks" / "stack-0" / "done").write_text("{}")
    pack_results.pack([sweep], tmp_path / "bundle", chunk_mib=1)
    pack_results.unpack([tmp_path / "bundle"], tmp_path / "back")
    back = tmp_path / "back" / "grid" / "stacks" / "stack-0" / "replicate-0"
    assert (back / "model" / "model.safetensors").is_file() and (
        back / "analysis" / "matching" / "matching.json"
    ).is_file()
    assert not (back / "analysis" / "matching" / "matching.html").exists()
    assert pack_results.records(sweep, tmp_path / "kept") == 5
    kept = sorted(str(p.relative_to(tmp_path / "kept")) for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert kept == [
        "stacks/stack-0/done",
        "stacks/stack-0/metrics.jsonl",
        "stacks/stack-0/replicate-0/analysis/matching/matching.json",
        "stacks/stack-0/replicate-0/model/config.json",
        "stacks/stack-0/replicate-0/model/evaluation.json",
    ]
    with pytest.raises(SystemExit, match="not a directory"):
        pack_results.records(tmp_path / "missing", tmp_path / "kept")


def _session_with_two_stacks(root: Path) -> Path:
    """An unpacked session: stack-000 finished (done, a model), stack-001 stopped with its state."""
    sweep = root / "grid"
    for name, finished in (("stack-000", True), ("stack-001", False)):
        stack = sweep / "stacks" / name
        (stack / "replicate-0" / "model").mkdir(parents=True)
        (stack / "replicate-0" / "model" / "model.safetensors").write_bytes(os.urandom(1000))
        (stack / "config.json").write_text('{"replicates": 1}')
        (stack / "train_config.json").write_text('{"stack": true}')
        (stack / "metrics.jsonl").write_text(f'{{"step": {name}}}\n')
        (stack / "state.pt").write_bytes(name.encode() * 100)
        if finished:
            (stack / "done").write_text("{}")
    (sweep / "data" / "tiny-d0").mkdir(parents=True)
    (sweep / "data" / "tiny-d0" / "manifest.json").write_text("{}")
    (sweep / "plan.json").write_text('{"stacks": []}')
    (sweep / "grid.toml").write_text("replicates = 1\n")
    (root / "session").mkdir()
    (root / "session" / "grid.toml").write_text("replicates = 1\n")
    (root / "session" / "plan.json").write_text('{"replicates": 1}')
    (root / "session" / "sweep.log").write_text("log\n")
    return sweep


def test_states_travel_only_when_asked_and_only_for_stacks_that_did_not_finish(tmp_path):
    sweep = _session_with_two_stacks(tmp_path / "machine")
    for states, expected in ((None, set()), (False, set()), (True, {"stack-001"})):
        out = tmp_path / f"bundle-{states}"
        pack_results.pack([sweep], out, chunk_mib=1, **({} if states is None else {"states": states}))
        pack_results.unpack([out], tmp_path / f"back-{states}")
        kept = {p.parent.name for p in (tmp_path / f"back-{states}").rglob("state.pt")}
        assert kept == expected


def test_carry_keeps_what_continues_the_unfinished_stack_and_empties_when_all_finished(tmp_path):
    source = tmp_path / "runs"
    sweep = _session_with_two_stacks(source)
    fresh = tmp_path / "new" / "carry"
    assert pack_results.carry(source, fresh) == 1 and (fresh / "grid/stacks/stack-001/state.pt").is_file()
    into = tmp_path / "carry"
    (into / "stale").mkdir(parents=True)
    (tmp_path / ".carry.staging").mkdir()
    (tmp_path / ".carry.staging" / "left.txt").write_text("from a carry that was stopped half-way")
    assert pack_results.carry(source, into) == 1
    assert pack_results.unfinished_stacks(sweep) == [sweep / "stacks" / "stack-001"]
    kept = {str(p.relative_to(into)) for p in into.rglob("*") if p.is_file()}
    assert kept == {
        "grid/plan.json", "grid/grid.toml", "session/grid.toml", "session/plan.json",
        "grid/stacks/stack-001/config.json", "grid/stacks/stack-001/train_config.json",
        "grid/stacks/stack-001/metrics.jsonl", "grid/stacks/stack-001/state.pt",
    }  # fmt: skip
    assert (into / "grid/stacks/stack-001/state.pt").read_bytes() == b"stack-001" * 100
    (sweep / "stacks" / "stack-001" / "done").write_text("{}")
    assert pack_results.carry(source, into) == 0
    assert into.is_dir() and not any(into.iterdir())
    assert pack_results.carry(source, tmp_path / "newer" / "carry") == 0 and (tmp_path / "newer" / "carry").is_dir()
    shutil.rmtree(sweep)
    assert pack_results.carry(source, into) == 0 and not any(into.iterdir())
    with pytest.raises(SystemExit, match="not a directory"):
        pack_results.carry(tmp_path / "nowhere", into)


def test_the_next_stack_follows_only_finished_stacks_whose_failures_are_all_analyses(tmp_path):
    sweep = _session_with_two_stacks(tmp_path / "machine")
    models = [sweep / "stacks" / name / "replicate-0" / "model" for name in ("stack-000", "stack-001")]
    for model in models:
        (model / "config.json").write_text("{}")
    (models[0] / "evaluation.json").write_text("{}")
    assert pack_results.follow_blockers(sweep, 0) == ["stack-001 did not finish"]
    (sweep / "failures").mkdir()
    (sweep / "failures" / "analyse-matching-copy-20-random-s0.txt").write_text("traceback")
    assert pack_results.follow_blockers(sweep, 1) == [
        "stack-001 did not finish"
    ]  # an unfinished stack blocks, not its evaluation
    (sweep / "stacks" / "stack-001" / "done").write_text("{}")
    assert pack_results.follow_blockers(sweep, 0) == []
    assert pack_results.follow_blockers(sweep, 1) == ["stack-001/replicate-0 has no evaluation"]
    (models[1] / "evaluation.json").write_text("{}")
    assert pack_results.follow_blockers(sweep, 1) == []
    assert pack_results.follow_blockers(sweep, 130) == ["the sweep exited 130"]
    assert pack_results.follow_blockers(sweep, 143) == ["the sweep exited 143"]
    (sweep / "failures" / "train-stack-002.txt").write_text("traceback")
    (sweep / "failures" / "evaluate-copy-20-random-s1.txt").write_text("traceback")
    assert pack_results.follow_blockers(sweep, 1) == ["evaluate-copy-20-random-s1 failed", "train-stack-002 failed"]
    assert pack_results.follow_blockers(tmp_path / "nowhere", 2) == ["the sweep exited 2"]
    shutil.rmtree(sweep / "stacks")  # analyses recorded, yet no trained model: the exit came from elsewhere
    assert pack_results.follow_blockers(sweep, 1) == ["the sweep exited 1"]


def test_a_stack_stopped_by_its_step_bound_counts_as_finished_and_an_unfinished_ones_models_stay_behind(tmp_path):
    sweep = _session_with_two_stacks(tmp_path / "machine")
    bounded = sweep / "stacks" / "stack-001"
    (bounded / "train_config.json").write_text('{"max_steps": 50}')
    (bounded / "replicate-0" / "model" / "config.json").write_text('{"metadata": {"steps": 40}}')
    assert not pack_results.stack_finished(bounded)
    assert not pack_results.wanted(bounded / "state.pt", sweep)  # states travel only when asked for
    assert pack_results.wanted(bounded / "state.pt", sweep, states=True)
    assert not pack_results.wanted(bounded / "replicate-0" / "model" / "model.safetensors", sweep)
    assert pack_results.wanted(bounded / "metrics.jsonl", sweep)
    (bounded / "replicate-0" / "model" / "config.json").write_text('{"metadata": {"steps": 50}}')
    assert pack_results.stack_finished(bounded)
    assert pack_results.wanted(bounded / "replicate-0" / "model" / "model.safetensors", sweep)
    assert not pack_results.wanted(bounded / "state.pt", sweep, states=True)
    (bounded / "replicate-0" / "model" / "config.json").write_text('{"metadata": {"steps": 40}}')
    pack_results.records(sweep, tmp_path / "kept")
    (bounded / "train_config.json").write_text('{"max_steps": 1}')
    (bounded / "replicate-0" / "model" / "config.json").write_text("{}")  # a model without its training record
    assert not pack_results.stack_finished(bounded)
    (bounded / "train_config.json").unlink()  # a stack stopped before it wrote its recipe
    assert not pack_results.stack_finished(bounded)
    assert [p.name for p in (tmp_path / "kept" / "stacks").iterdir()] == ["stack-000"]


def test_upload_cuts_the_carried_state_into_parts_one_call_each_that_join_back_exactly(tmp_path, capsys, monkeypatch):
    """The first part shares its call with the wheels; a missing part is named, and the calls are printed with
    the paths a call's ``carry`` names (relative to the checkout)."""
    monkeypatch.setattr(pack_results, "ROOT", tmp_path.resolve())
    source = tmp_path / "gpu-carry"
    _session_with_two_stacks(source / "grid")
    state = source / "grid" / "grid" / "stacks" / "stack-001" / "state.pt"
    state.write_bytes(os.urandom(700_000))  # resumable state hardly compresses
    into = tmp_path / "runs" / "upload"
    parts = pack_results.upload(source, into, first_mib=0.2, part_mib=0.3, wheels=tmp_path / ".whl")
    sizes = [(into / f"carry.tar.part{index:02d}").stat().st_size for index in range(parts)]
    assert parts == 3 and sizes[:2] == [int(0.2 * 2**20), int(0.3 * 2**20)] and 0 < sizes[2] <= 0.3 * 2**20
    assert sorted(p.name for p in into.iterdir()) == ["carry.sha256", *(f"carry.tar.part{i:02d}" for i in range(3))]
    calls = capsys.readouterr().out.splitlines()[1:]
    assert calls == [
        "  call 1: carry .whl runs/upload/carry.sha256 runs/upload/carry.tar.part00; bash scripts/gpu_train.sh receive",
        "  call 2: carry runs/upload/carry.tar.part01; bash scripts/gpu_train.sh receive",
        "  call 3: carry runs/upload/carry.tar.part02; bash scripts/gpu_train.sh start MINUTES",
    ]
    (into.parent / ".upload.staging").mkdir()
    (into.parent / ".upload.staging" / "carry.tar.part07").write_bytes(b"from an upload stopped half-way")
    assert pack_results.upload(source, into, first_mib=0.2, part_mib=0.3) == 3
    assert sorted(p.name for p in into.iterdir()) == ["carry.sha256", *(f"carry.tar.part{i:02d}" for i in range(3))]
    assert capsys.readouterr().out.splitlines()[1].startswith("  call 1: carry runs/upload/carry.sha256 runs/")
    received = tmp_path / "received"
    received.mkdir()
    shutil.copy(into / "carry.sha256", received / "carry.sha256")
    assert pack_results.received(received) == "received part(s) none of 3; still to send: 00, 01, 02"
    for name in ("carry.tar.part00", "carry.tar.part02"):
        shutil.copy(into / name, received / name)
    assert pack_results.received(received) == "received part(s) 00, 02 of 3; still to send: 01"
    with pytest.raises(SystemExit, match="carry: part\\(s\\) 01 of 3 missing"):
        pack_results.unpack([received], tmp_path / "carry", name="carry")
    shutil.copy(into / "carry.tar.part01", received / "carry.tar.part01")
    assert pack_results.received(received) == "received part(s) 00, 01, 02 of 3"
    pack_results.unpack([received], tmp_path / "carry", name="carry")
    back = {p.relative_to(tmp_path / "carry"): p.read_bytes() for p in (tmp_path / "carry").rglob("*") if p.is_file()}
    assert back == {p.relative_to(source): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    shutil.rmtree(source)
    source.mkdir()
    assert pack_results.upload(source, into, 0.2, 0.3) == 0 and not into.exists()
    with pytest.raises(SystemExit, match="no room for a part"):
        pack_results.upload(tmp_path / "carry", into, first_mib=-1.0, part_mib=30)
    with pytest.raises(SystemExit, match="no room for a part: first 0.0 MiB, others 30.0 MiB a call"):
        pack_results.upload(tmp_path / "carry", into, first_mib=0.0, part_mib=30)


def test_command_line_errors_are_one_line_with_exit_code_2(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "upload", str(tmp_path / "nowhere"), "--into",
                             str(tmp_path / "up")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stderr == f"pack_results: error: not a directory: {tmp_path / 'nowhere'}\n"
    assert not (tmp_path / "up").exists()


def test_a_bundle_written_over_a_larger_one_joins_to_itself(tmp_path):
    """A 3-chunk bundle then a 1-chunk one in the same folder left parts 01 and 02 behind, and joining the second
    failed its checksum; now the earlier chunks go first, and parts past the count are never joined."""
    first = pack_results.write_chunks(b"x" * 25, tmp_path, "bundle", 10, 10)
    assert [chunk.name for chunk in first] == [f"bundle.tar.part{i:02d}" for i in range(3)]
    second = pack_results.write_chunks(b"new", tmp_path, "bundle", 10, 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.sha256", "bundle.tar.part00"] and len(second) == 1
    assert pack_results.joined([tmp_path]) == b"new"
    (tmp_path / "bundle.tar.part05").write_bytes(b"a stray part of another bundle")
    assert pack_results.joined([tmp_path]) == b"new"


def test_a_checksum_without_a_count_joins_the_parts_in_order_and_missing_files_are_named(tmp_path):
    """A ``bundle.sha256`` written before it held the count joins whatever parts are there, in part order; a
    folder with parts but no checksum, or a checksum but no parts, is refused; `received` says what is there."""
    data = b"abcdefghij" * 3
    pack_results.write_chunks(data, tmp_path, "bundle", 10, 10)
    (tmp_path / "bundle.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    assert pack_results.parts_status([tmp_path], "bundle")[1:] == (hashlib.sha256(data).hexdigest(), None)
    assert pack_results.joined([tmp_path]) == data
    (tmp_path / "bundle.tar.part00").unlink()
    with pytest.raises(SystemExit, match="checksum mismatch"):
        pack_results.joined([tmp_path])
    (tmp_path / "bundle.sha256").unlink()
    with pytest.raises(SystemExit, match="no bundle.tar.part\\* and bundle.sha256 in"):
        pack_results.joined([tmp_path])
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "bundle.sha256").write_text("0" * 64 + " 1\n")
    with pytest.raises(SystemExit, match="no bundle.tar.part\\* and bundle.sha256 in"):
        pack_results.joined([tmp_path / "only"])
    (tmp_path / "carry.tar.part01").write_bytes(b"x")
    assert pack_results.received(tmp_path) == "1 part(s), no carry.sha256 yet"
    assert pack_results.received(tmp_path / "only") == f"nothing received in {tmp_path / 'only'}"


def test_unpack_extracts_into_a_new_nested_or_an_existing_folder_and_refuses_a_member_outside_it(tmp_path):
    def bundle(folder: Path, members: dict[str, bytes]) -> Path:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, content in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        folder.mkdir()
        pack_results.write_chunks(buffer.getvalue(), folder, "bundle", 2**20, 2**20)
        return folder

    good = bundle(tmp_path / "good", {"grid/results.csv": b"run\n"})
    pack_results.unpack([good], tmp_path / "a" / "b")
    pack_results.unpack([good], tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b" / "grid" / "results.csv").read_bytes() == b"run\n"
    bad = bundle(tmp_path / "bad", {"../escaped.txt": b"outside"})
    with pytest.raises(tarfile.FilterError):
        pack_results.unpack([bad], tmp_path / "into")
    assert not (tmp_path / "escaped.txt").exists()


def test_the_working_tree_a_call_takes_is_the_tracked_and_untracked_files_git_does_not_ignore(tmp_path):
    repo, plain = tmp_path / "repo", tmp_path / "plain"
    repo.mkdir()
    plain.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    (repo / ".gitignore").write_bytes(b"runs/\n")  # 6 bytes
    (repo / "tracked.py").write_bytes(b"t" * 300_000)
    git("add", ".gitignore", "tracked.py")
    (repo / "nouveau fichier é.txt").write_bytes(b"u" * 200_000)  # git quotes such a name unless -z
    (repo / "runs").mkdir()
    (repo / "runs" / "state.pt").write_bytes(b"i" * 1_000_000)
    assert pack_results.working_tree_mib(repo) == (300_000 + 200_000 + 6) / 2**20
    (repo / "tracked.py").unlink()  # listed by git, gone from the tree
    assert pack_results.working_tree_mib(repo) == 200_006 / 2**20
    with pytest.raises(SystemExit, match=f"cannot list the working tree of {plain} with git .*--part-mib"):
        pack_results.working_tree_mib(plain)


def test_each_command_runs_from_the_command_line_with_its_options(tmp_path, capsys):
    """The session's path through the commands, as `gpu_train.sh` and a session here call them."""
    machine = tmp_path / "machine"
    sweep = _session_with_two_stacks(machine)
    (sweep / "stacks/stack-001/state.pt").write_bytes(os.urandom(5000))  # resumable state hardly compresses
    main, bundle, back = pack_results.main, tmp_path / "bundle", tmp_path / "back"
    main(["pack", str(sweep), str(machine / "session"), "--out", str(bundle), "--chunk-mib", "0.001", "--states"])
    chunks = sorted(bundle.glob("bundle.tar.part*"))
    assert len(chunks) > 1 and chunks[0].stat().st_size == int(0.001 * 2**20)
    main(["unpack", str(bundle), "--into", str(back)])
    assert (back / "grid/stacks/stack-001/state.pt").is_file() and (back / "session/grid.toml").is_file()
    main(["records", str(back / "grid"), "--into", str(tmp_path / "kept")])
    assert [p.name for p in (tmp_path / "kept" / "stacks").iterdir()] == ["stack-000"]
    capsys.readouterr()
    main(["unfinished", str(back / "grid")])
    assert capsys.readouterr().out == f"{back / 'grid' / 'stacks' / 'stack-001'}\n"
    main(["blockers", str(back / "grid"), "--status", "143"])
    assert capsys.readouterr().out == "stack-001 did not finish\nthe sweep exited 143\n"
    (back / "grid" / "stacks" / "stack-002").mkdir()
    (back / "grid" / "stacks" / "stack-002" / "state.pt").write_bytes(b"s")
    main(["unfinished", str(back / "grid")])
    assert capsys.readouterr().out == "".join(f"{back / 'grid' / 'stacks' / n}\n" for n in ("stack-001", "stack-002"))
    shutil.rmtree(back / "grid" / "stacks" / "stack-002")
    main(["carry", str(back), "--into", str(tmp_path / "carry")])
    state = (tmp_path / "carry" / "grid/stacks/stack-001/state.pt").read_bytes()
    assert state == (sweep / "stacks/stack-001/state.pt").read_bytes()
    up = ["upload", str(tmp_path / "carry"), "--into", str(tmp_path / "up"), "--wheels", str(tmp_path / "none")]
    main([*up, "--first-mib", "0.001", "--part-mib", "0.002"])
    sizes = _part_sizes(tmp_path / "up", "carry")
    assert sizes[:2] == [int(0.001 * 2**20), int(0.002 * 2**20)]
    assert str(tmp_path / "none") not in capsys.readouterr().out  # no wheels there: the first call carries none
    main(["received", str(tmp_path / "up")])
    assert (
        capsys.readouterr().out
        == f"received part(s) {', '.join(f'{i:02d}' for i in range(len(sizes)))} of {len(sizes)}\n"
    )
    main(["unpack", str(tmp_path / "up"), "--into", str(tmp_path / "joined"), "--name", "carry"])
    assert (tmp_path / "joined" / "grid/stacks/stack-001/state.pt").read_bytes() == state
    for argv in (["pack", str(sweep)], ["unpack", str(bundle)], ["records", str(sweep)], ["carry", str(back)],
                 ["upload", str(back)], ["blockers", str(sweep)], ["unfinished"], []):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2


def test_a_chunk_is_15_mib_by_default_inside_the_16_mib_a_file_may_be_on_its_way_back(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_bytes(os.urandom(int(15.5 * 2**20)))
    pack_results.main(["pack", str(tmp_path / "run"), "--out", str(tmp_path / "bundle")])
    sizes = _part_sizes(tmp_path / "bundle", "bundle")
    assert sizes[0] == 15 * 2**20 and len(sizes) == 2 and max(sizes) <= 16 * 2**20
