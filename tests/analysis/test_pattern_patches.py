"""The head replacement both patching engines share, and the engine names."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.analysis.pattern_patches import ENGINES, check_engine, replace_heads


def test_replace_heads_swaps_only_the_named_heads_in_a_copy():
    """Each (head, replacement) overwrites that head's pattern in a copy; the input is left as it was."""
    pattern = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    original = pattern.clone()
    first, third = torch.full((2, 2, 2), -1.0), torch.full((2, 2, 2), -3.0)
    patched = replace_heads(pattern, [(0, first), (2, third)])
    assert torch.equal(patched[:, 0], first) and torch.equal(patched[:, 2], third)
    assert torch.equal(patched[:, 1], original[:, 1]) and torch.equal(pattern, original)


def test_no_entries_return_the_pattern_itself():
    """Without replacements the pattern is returned as is (no copy)."""
    pattern = torch.rand(1, 2, 3, 3)
    assert replace_heads(pattern, []) is pattern


def test_only_known_engines_are_accepted():
    """ "hooks" and "nnsight" are the engines; any other name is refused."""
    assert ENGINES == ("hooks", "nnsight")
    for engine in ENGINES:
        check_engine(engine)
    with pytest.raises(ValueError, match="unknown engine 'Hooks'"):
        check_engine("Hooks")
