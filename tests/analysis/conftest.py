"""Fixtures the patching tests share, made once per test module (`tests/analysis/patch_setup.py` builds them)."""

from __future__ import annotations

import pytest

from tests.analysis.patch_setup import small_model, succ_pred_runs


@pytest.fixture(scope="module")
def small():
    """A random two-layer model in eval mode (seed 0)."""
    return small_model()


@pytest.fixture(scope="module")
def small_pairs():
    """Six succ/pred minimal pairs of 3-letter windows."""
    return succ_pred_runs(6)[0]
