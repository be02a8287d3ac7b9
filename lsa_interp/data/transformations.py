"""The paper's 19 transformations (plus ``unreverse``), defined on positions in an alphabet.

A problem is built from a *window*: a contiguous run ``start .. start+length-1`` of alphabet positions.
Each transformation maps a window (and random choices drawn once for it) to query positions and answer
positions; letters are read from the task's alphabet afterwards, so every answer is relative to it.
A transformation returns None for a window it cannot handle (e.g. the successor of the last letter).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

ALPHABET_SIZE = 26
Positions = list[int]
Problem = tuple[Positions, Positions]
Builder = Callable[[int, int, random.Random], Problem | None]


@dataclass(frozen=True)
class Transformation:
    """A named rule: ``category`` is "seen", "compositional", "novel" or "extra"; ``example`` is paper notation."""

    name: str
    category: str
    example: str
    build: Builder


def _window(start: int, length: int) -> Positions:
    return list(range(start, start + length))


def _outside(window: Positions, rng: random.Random, exclude: int | None = None) -> int:
    """A random alphabet position outside the contiguous ``window`` (and other than ``exclude``)."""
    blocked = [(window[0], len(window))] + ([] if exclude is None else [(exclude, 1)])
    pick = rng.randrange(ALPHABET_SIZE - sum(span for _, span in blocked))
    for start, span in sorted(blocked):
        if pick >= start:
            pick += span
    return pick


def _duplicate(seq: Positions, rng: random.Random) -> Positions:
    i = rng.randrange(len(seq))
    return seq[: i + 1] + seq[i:]


def _swap(seq: Positions, rng: random.Random) -> Positions:
    i = rng.randrange(len(seq))
    j = rng.randrange(len(seq) - 1)
    j += j >= i
    out = list(seq)
    out[i], out[j] = out[j], out[i]
    return out


def _replace_one(seq: Positions, rng: random.Random, exclude: int | None = None) -> Positions:
    i = rng.randrange(len(seq))
    out = list(seq)
    out[i] = _outside(seq, rng, exclude)
    return out


def _interleave(seq: Positions, filler: int) -> Positions:
    out = [seq[0]]
    for p in seq[1:]:
        out += [filler, p]
    return out


def _group(seq: Positions, k: int) -> Positions:
    return [p for p in seq for _ in range(k)]


def _fits(start: int, length: int, before: int = 0, after: int = 0) -> bool:
    """True when ``before`` letters precede the window and ``after`` letters follow it in the alphabet."""
    return start - before >= 0 and start + length - 1 + after < ALPHABET_SIZE


def _extend_sequence(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (w, w + [s + n]) if _fits(s, n, after=1) else None


def _succ(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (w, w[:-1] + [s + n]) if _fits(s, n, after=1) else None


def _pred(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (w, [s - 1] + w[1:]) if _fits(s, n, before=1) else None


def _remove_redundant(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return _duplicate(w, rng), w


def _fix_alphabetic_seq(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return _replace_one(w, rng), w


def _sort(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return _swap(w, rng), w


def _sort_group(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    k = 2 + rng.randrange(2)
    return _group(_swap(w, rng), k), _group(w, k)


def _rr_interleave(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    filler = _outside(w, rng)
    return _interleave(_duplicate(w, rng), filler), _interleave(w, filler)


def _rr_succ(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (_duplicate(w, rng), w[:-1] + [s + n]) if _fits(s, n, after=1) else None


def _fix_extend(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (_replace_one(w, rng), w + [s + n]) if _fits(s, n, after=1) else None


def _rr_sort(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return _duplicate(_swap(w, rng), rng), w


def _extend_pred(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (w, [s - 1] + w[1:] + [s + n]) if _fits(s, n, before=1, after=1) else None


def _fix_interleave(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    filler = _outside(w, rng)
    return _interleave(_replace_one(w, rng, exclude=filler), filler), _interleave(w, filler)


def _extend_group(s: int, n: int, rng: random.Random) -> Problem | None:
    if not _fits(s, n, after=1):
        return None
    w = _window(s, n)
    k = 2 + rng.randrange(2)
    return _group(w, k), _group(w + [s + n], k)


def _extend_extend_succ(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (w, w + [s + n, s + n + 2]) if _fits(s, n, after=3) else None


def _fix_pred_succ(s: int, n: int, rng: random.Random) -> Problem | None:
    if not _fits(s, n, before=1, after=1):
        return None
    w = _window(s, n)
    return _replace_one(w, rng), [s - 1] + w[1:-1] + [s + n]


def _reverse(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return w, w[::-1]


def _shift(s: int, n: int, rng: random.Random) -> Problem | None:
    w = _window(s, n)
    return (w, [p + n for p in w]) if _fits(s, n, after=n) else None


def _replicate(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return w, w + w


def _unreverse(s: int, n: int, rng: random.Random) -> Problem:
    w = _window(s, n)
    return w[::-1], w


_ALL = (
    Transformation("extend_sequence", "seen", "abc > abcd", _extend_sequence),
    Transformation("succ", "seen", "abc > abd", _succ),
    Transformation("pred", "seen", "bcd > acd", _pred),
    Transformation("remove_redundant", "seen", "abbc > abc", _remove_redundant),
    Transformation("fix_alphabetic_seq", "seen", "abwd > abcd", _fix_alphabetic_seq),
    Transformation("sort", "seen", "adcb > abcd", _sort),
    Transformation("sort_group", "seen", "ddccbb > bbccdd", _sort_group),
    Transformation("rr_interleave", "seen", "axbxbxc > axbxc", _rr_interleave),
    Transformation("rr_succ", "seen", "abbc > abd", _rr_succ),
    Transformation("fix_extend", "seen", "abwd > abcde", _fix_extend),
    Transformation("rr_sort", "compositional", "addcb > abcd", _rr_sort),
    Transformation("extend_pred", "compositional", "bcd > acde", _extend_pred),
    Transformation("fix_interleave", "compositional", "afbfw > afbfc", _fix_interleave),
    Transformation("extend_group", "compositional", "aabb > aabbcc", _extend_group),
    Transformation("extend_extend_succ", "compositional", "abc > abcdf", _extend_extend_succ),
    Transformation("fix_pred_succ", "compositional", "bcwe > acdf", _fix_pred_succ),
    Transformation("reverse", "novel", "abc > cba", _reverse),
    Transformation("shift", "novel", "abc > def", _shift),
    Transformation("replicate", "novel", "abc > abcabc", _replicate),
    Transformation("unreverse", "extra", "cba > abc", _unreverse),
)

TRANSFORMATIONS: dict[str, Transformation] = {t.name: t for t in _ALL}
"""Every transformation by name, in the paper's order (the optional ``unreverse`` last)."""
SEEN: tuple[str, ...] = tuple(t.name for t in _ALL if t.category == "seen")
COMPOSITIONAL: tuple[str, ...] = tuple(t.name for t in _ALL if t.category == "compositional")
NOVEL: tuple[str, ...] = tuple(t.name for t in _ALL if t.category == "novel")
NEW: tuple[str, ...] = COMPOSITIONAL + NOVEL
"""The transformations never seen in training (test only)."""
PAPER: tuple[str, ...] = SEEN + NEW
"""The paper's 19 transformations."""


def get_transformation(name: str) -> Transformation:
    """Look a transformation up by name; raises ValueError listing the known names."""
    try:
        return TRANSFORMATIONS[name]
    except KeyError:
        raise ValueError(f"unknown transformation {name!r}; known: {', '.join(TRANSFORMATIONS)}") from None
