"""``lsa-interp ship`` given something that is no training run: one line naming it, exit 2, nothing made."""

from __future__ import annotations

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
