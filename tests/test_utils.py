"""Atomic writes leave complete files with the usual permissions, and nothing behind on error."""

from __future__ import annotations

import os
import stat

import pytest

from lsa_interp.utils import atomic_write, make_staging_dir


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
