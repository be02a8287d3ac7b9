"""``lsa-interp ship`` given something that is no training run, or a replicate it lacks: one line naming it, exit 2,
nothing made."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run


@pytest.mark.parametrize(("kind", "reason"), [("missing", "no such directory"), ("file", "a file")])
def test_ship_says_when_its_run_directory_is_no_run_at_all(kind, reason, tmp_path, capsys, monkeypatch):
    """It said 'RUN/model holds no final model; finish the run first' for a path that does not exist."""
    monkeypatch.setattr("lsa_interp.evaluation.card.load_model", lambda *a: pytest.fail("a model was loaded"))
    run_dir = tmp_path / kind
    if kind == "file":
        run_dir.write_text("x")
    dest = tmp_path / "checkpoints"
    code, _, err = run(["ship", str(run_dir), "--name", "x", "--dest", str(dest)], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err == (
        f"lsa-interp: error: {run_dir} is not a training run ({reason}); give the RUN_DIR of train --out RUN_DIR\n"
    )
    assert not dest.exists()


@pytest.mark.parametrize(
    ("saved", "replicate", "reason"),
    [
        ({"stack": True, "runs": [{"seed": 0}, {"seed": 1}]}, 5, "the stack has 2 runs"),
        ({"stack": True, "runs": [{"seed": 0}, {"seed": 1}]}, 2, "the stack has 2 runs"),
        ({"seed": 0, "replicates": 1}, 1, "{run} trained one model (replicate 0)"),
    ],
)
def test_ship_says_a_replicate_the_run_does_not_have_is_out_of_range(
    saved, replicate, reason, tmp_path, capsys, monkeypatch
):
    """It said 'RUN/replicate-5/model holds no final model; finish the run first (lsa-interp train --resume)', as
    if training more would make it; ``evaluate --model RUN/replicate-5`` says it is out of range."""
    monkeypatch.setattr("lsa_interp.evaluation.card.load_model", lambda *a: pytest.fail("a model was loaded"))
    run_dir = tmp_path / "run"
    models = [run_dir / f"replicate-{i}" / "model" for i in range(2)] if "runs" in saved else [run_dir / "model"]
    for model in models:
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
    (run_dir / "train_config.json").write_text(json.dumps(saved))
    dest = tmp_path / "checkpoints"
    args = ["ship", str(run_dir), "--name", "x", "--dest", str(dest), "--replicate", str(replicate)]
    code, _, err = run(args, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    expected = f"replicate {replicate} out of range: {reason.format(run=run_dir)}"
    assert err == f"lsa-interp: error: {expected}\n"
    assert not (dest / "x").exists()


def test_replicate_0_of_a_single_run_is_its_model(tmp_path, capsys, monkeypatch):
    loaded = []

    def load_model(path):
        loaded.append(path)
        raise ValueError("stop here")

    monkeypatch.setattr("lsa_interp.evaluation.card.load_model", load_model)
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    (tmp_path / "run" / "train_config.json").write_text(json.dumps({"seed": 0}))
    args = ["ship", str(tmp_path / "run"), "--name", "x", "--dest", str(tmp_path / "c"), "--replicate", "0"]
    code, _, err = run(args, capsys)
    assert code == 2 and err == "lsa-interp: error: stop here\n" and loaded == [tmp_path / "run" / "model"]
