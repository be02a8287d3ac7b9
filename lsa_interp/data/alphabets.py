"""Permuted alphabets: the standard alphabet with exactly k letters moved and none of them left in place."""

from __future__ import annotations

import random
from collections.abc import Iterable

from lsa_interp.data.task import STANDARD_ALPHABET

PERMUTATION_LEVELS: tuple[int, ...] = (2, 5, 10, 20)


def permute_alphabet(level: int, rng: random.Random) -> str:
    """Return the standard alphabet with exactly ``level`` letters moved, each to another moved letter's place.

    Raises ValueError unless 2 <= level <= 26.
    """
    if not 2 <= level <= 26:
        raise ValueError(f"permutation level must be between 2 and 26, got {level}")
    positions = rng.sample(range(26), level)
    while True:
        shuffled = positions[:]
        rng.shuffle(shuffled)
        if all(a != b for a, b in zip(positions, shuffled, strict=True)):
            break
    letters = list(STANDARD_ALPHABET)
    for src, dst in zip(positions, shuffled, strict=True):
        letters[dst] = STANDARD_ALPHABET[src]
    return "".join(letters)


def permutation_level(alphabet: str) -> int:
    """Number of letters of ``alphabet`` that are not at their standard place (0 for the standard alphabet)."""
    return sum(a != b for a, b in zip(alphabet, STANDARD_ALPHABET, strict=True))


def make_alphabets(
    n_permuted: int,
    seed: int,
    levels: tuple[int, ...] = PERMUTATION_LEVELS,
    exclude: Iterable[str] = (),
    include_standard: bool = True,
) -> list[str]:
    """``n_permuted`` distinct permuted alphabets, an equal share per level, then (optionally) the standard one.

    Each level draws from its own stream, so the first alphabets of a level are the same for every
    ``n_permuted`` (copy-40's alphabets include copy-20's). Alphabets in ``exclude`` are never returned.
    Raises ValueError when ``n_permuted`` is not a multiple of the number of levels.
    """
    if n_permuted < 0 or n_permuted % len(levels):
        raise ValueError(f"the number of permuted alphabets must be a multiple of {len(levels)}, got {n_permuted}")
    seen = {STANDARD_ALPHABET, *exclude}
    out: list[str] = []
    for level in levels:
        rng = random.Random(f"alphabets/{seed}/{level}")
        made = 0
        while made < n_permuted // len(levels):
            alphabet = permute_alphabet(level, rng)
            if alphabet not in seen:
                seen.add(alphabet)
                out.append(alphabet)
                made += 1
    return out + [STANDARD_ALPHABET] if include_standard else out
