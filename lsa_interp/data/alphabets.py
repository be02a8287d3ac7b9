"""Permuted alphabets: the standard alphabet with exactly k letters moved and none of them left in place."""

from __future__ import annotations

import math
import random
from collections import Counter
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


def alphabets_at_level(level: int) -> int:
    """How many alphabets have exactly ``level`` letters moved: the ways to choose them times their derangements
    (325 for 2, 5,200 for 3). Returns 0 for a level outside 2..26."""
    derangements = 1
    for i in range(1, level + 1):
        derangements = i * derangements + (-1) ** i
    return math.comb(26, level) * derangements if 2 <= level <= 26 else 0


def most_permuted(levels: tuple[int, ...]) -> int:
    """The largest ``n_permuted`` that `make_alphabets` can draw over ``levels`` (an equal share per level, a
    level named twice drawing twice from its alphabets): 1,300 for `PERMUTATION_LEVELS`, as 2 letters can be
    moved in only 325 ways. Raises ValueError unless ``levels`` names one or more levels in 2..26."""
    if not levels or not all(2 <= level <= 26 for level in levels):
        raise ValueError(f"levels must be one or more permutation levels in 2..26, got {levels}")
    return len(levels) * min(alphabets_at_level(level) // times for level, times in Counter(levels).items())


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
    Raises ValueError when ``levels`` is empty or holds a level outside 2..26, when ``n_permuted`` is not a
    multiple of the number of levels, or when a level has fewer distinct alphabets outside ``exclude`` than its
    share (see `most_permuted`).
    """
    most_permuted(levels)  # refuses no levels or one outside 2..26
    if n_permuted < 0 or n_permuted % len(levels):
        raise ValueError(f"the number of permuted alphabets must be a multiple of {len(levels)}, got {n_permuted}")
    seen = {STANDARD_ALPHABET, *exclude}
    taken = Counter(permutation_level(a) for a in seen if sorted(a) == sorted(STANDARD_ALPHABET))
    for level, times in Counter(levels).items():
        wanted, free = n_permuted // len(levels) * times, alphabets_at_level(level) - taken[level]
        if wanted > free:
            raise ValueError(
                f"cannot draw {wanted} distinct alphabets with {level} letters moved for n_permuted {n_permuted} over "
                f"levels {levels}: only {free} exist{' outside exclude' if taken[level] else ''}"
            )
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
