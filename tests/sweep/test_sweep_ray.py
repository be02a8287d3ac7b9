"""The sweep on a local Ray instance (started once for this module) gives the in-process sweep's results."""

from __future__ import annotations

import builtins

import pandas as pd
import pytest

from lsa_interp.cli import main
from lsa_interp.sweep.runner import run_sweep
from tests.sweep.tiny_grid import evaluations, model_weights, same_weights, write_tiny_grid

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_sweep_equals_the_in_process_sweep(local_ray, tmp_path):
    grid = write_tiny_grid(tmp_path / "grid.toml", analyses=("matching",))
    local = run_sweep(grid, tmp_path / "local", progress=False)
    distributed = run_sweep(grid, tmp_path / "ray", ray="auto", progress=False)
    assert local.complete and distributed.complete and distributed.runs == 4
    assert same_weights(model_weights(tmp_path / "ray"), model_weights(tmp_path / "local"))
    assert evaluations(tmp_path / "ray") == evaluations(tmp_path / "local")
    tables = [pd.read_csv(path / "results.csv") for path in (tmp_path / "local", tmp_path / "ray")]
    # Rows differ only in where the models lie (the two output directories) and how long they took.
    differing = ["run", *[c for c in tables[0].columns if "second" in c]]
    pd.testing.assert_frame_equal(tables[0].drop(columns=differing), tables[1].drop(columns=differing))
    assert len(list((tmp_path / "ray").glob("stacks/*/replicate-*/analysis/matching/*.json"))) == 4


def test_ray_missing_names_the_extra(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def without_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_ray)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(write_tiny_grid(tmp_path / "grid.toml")), "--out", str(tmp_path / "out"), "--ray", "auto"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'lsa-interp[ray]'" in err
    assert not (tmp_path / "out").exists()
