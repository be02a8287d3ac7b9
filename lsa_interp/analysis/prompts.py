"""Tasks built for the analyses: one rule's tasks, minimal pairs that differ only in the example's rule, pairs of
one rule that differ only in where the example changes a letter, and tasks given another task's example.

All tasks are 1-shot (alphabet | example | query) with windows of 3..7 letters, as in training. Random
choices come from ``random.Random(seed)``, so the same arguments give the same tasks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import no_type_check

from lsa_interp.data.alphabets import make_alphabets
from lsa_interp.data.task import STANDARD_ALPHABET, Task
from lsa_interp.data.transformations import ALPHABET_SIZE, Problem, get_transformation

WINDOW_LENGTHS: tuple[int, ...] = (3, 4, 5, 6, 7)
_STALE_TRIES = 2_000
"""Draws in a row that add nothing new before concluding that no more distinct tasks or pairs exist."""


def analysis_alphabets(kind: str | Sequence[str], seed: int = 0, n: int = 20) -> list[str]:
    """``"standard"`` (the paper's running example), ``"permuted"`` (``n`` permuted alphabets drawn with seed
    ``10_000 + seed``, none of them a training alphabet of any preset generated with data seed 0: copy-400's
    include every smaller preset's), or an explicit non-empty list of permutations of a..z. Raises ValueError
    otherwise."""
    if not isinstance(kind, str):
        alphabets = list(kind)
        bad = next((a for a in alphabets if not isinstance(a, str) or sorted(a) != sorted(STANDARD_ALPHABET)), None)
        if not alphabets or bad is not None:
            problem = f"{bad!r} is not a permutation of a..z" if alphabets else "no alphabet given"
            raise ValueError(f"{problem}; give alphabets of all 26 letters a..z, each once")
        return alphabets
    if kind == "standard":
        return [STANDARD_ALPHABET]
    if kind == "permuted":
        training = make_alphabets(400, seed=0)
        return make_alphabets(n - n % 4 or 4, seed=10_000 + seed, exclude=training, include_standard=False)
    raise ValueError(f"unknown alphabets {kind!r}; choose standard, permuted or give a list of alphabets")


MIN_LENGTH, MAX_LENGTH = 2, ALPHABET_SIZE - 2
"""Window lengths for which every rule can build its problems within the alphabet."""


def _check_lengths(lengths: Sequence[int]) -> list[int]:
    """``lengths`` as a list; raises ValueError unless it is non-empty and each is in `MIN_LENGTH`..`MAX_LENGTH`."""
    lengths = list(lengths)
    if not lengths or any(not MIN_LENGTH <= n <= MAX_LENGTH for n in lengths):
        raise ValueError(
            f"window lengths must be in {MIN_LENGTH}..{MAX_LENGTH} (every rule's problems then fit the alphabet), "
            f"got {lengths}"
        )
    return lengths


@no_type_check
def _problem(name: str, start: int, length: int, seed: int) -> Problem | None:
    return get_transformation(name).build(start, length, random.Random(seed))


@no_type_check
def _letters(alphabet: str, positions: list[int]) -> str:
    return "".join(alphabet[p] for p in positions)


def rule_tasks(
    transformation: str,
    n: int,
    seed: int = 0,
    alphabets: str | Sequence[str] = "standard",
    lengths: Sequence[int] = WINDOW_LENGTHS,
) -> list[Task]:
    """``n`` distinct 1-shot tasks of one transformation, each with another problem of the same rule and
    alphabet as its example (never the query problem itself). Raises ValueError for an unknown rule, bad
    ``alphabets`` (`analysis_alphabets`) or ``lengths`` (none, or one outside 2..24), or when fewer than ``n``
    distinct tasks exist."""
    get_transformation(transformation)
    rng = random.Random(f"rule_tasks/{transformation}/{seed}")
    pool, lengths = analysis_alphabets(alphabets, seed), _check_lengths(lengths)
    tasks: dict[Task, None] = {}
    stale = 0
    while len(tasks) < n and stale < _STALE_TRIES:
        stale += 1
        alphabet, length = rng.choice(pool), rng.choice(lengths)
        made = []
        for _ in range(2):
            start = rng.randrange(ALPHABET_SIZE - length + 1)
            made.append(_problem(transformation, start, length, rng.randrange(2**31)))
        if None in made or made[0] == made[1]:
            continue
        (ex_in, ex_out), (q_in, q_out) = ((_letters(alphabet, a), _letters(alphabet, b)) for a, b in made)
        task = Task(alphabet, ((ex_in, ex_out),), q_in, q_out, transformation)
        if task not in tasks:
            tasks[task], stale = None, 0
    if len(tasks) < n:
        raise ValueError(f"only {len(tasks)} distinct {transformation} tasks could be made, {n} asked for")
    return list(tasks)


PAPER_QUERY_START = 1
"""The paper's query ``bcd`` starts at alphabet index 1."""
PAPER_EXAMPLE_START = 6
"""The paper's example ``ghi`` starts at alphabet index 6."""


def paper_prompts(transformation: str, n: int, seed: int = 0, fixed_query: bool = True, length: int = 3) -> list[Task]:
    """``n`` prompts built the way the paper's were: the standard alphabet, ``length``-letter windows (3, as in
    ``a..z | ghi > fhi | bcd``) and an example that shares no letter (input or output) with the query.

    With ``fixed_query`` the query is the paper's ``bcd`` (its window under the rule) and only the example
    varies; otherwise both vary. The paper's own example ``ghi`` comes first when it fits; the rest follow
    in a ``seed``-shuffled order. Raises ValueError for an unknown rule, a ``length`` outside 2..24 or fewer than
    ``n`` such prompts.
    """
    get_transformation(transformation)
    _check_lengths([length])
    rng = random.Random(f"paper_prompts/{transformation}/{seed}")
    starts = range(ALPHABET_SIZE - length + 1)
    problems = {s: _problem(transformation, s, length, rng.randrange(2**31)) for s in starts}
    valid = {s: p for s, p in problems.items() if p is not None}
    query_starts = [PAPER_QUERY_START] if fixed_query else list(valid)
    combos = [
        (e, q)
        for q in query_starts
        if q in valid
        for e in valid
        if not set(valid[e][0] + valid[e][1]) & set(valid[q][0] + valid[q][1])
    ]
    rng.shuffle(combos)
    combos.sort(key=lambda combo: (combo[0] != PAPER_EXAMPLE_START, combo[1] != PAPER_QUERY_START))
    if len(combos) < n:
        raise ValueError(f"only {len(combos)} {transformation} prompts of the paper's form exist, {n} asked for")
    letters = lambda positions: _letters(STANDARD_ALPHABET, positions)
    return [
        Task(
            STANDARD_ALPHABET,
            ((letters(valid[e][0]), letters(valid[e][1])),),
            letters(valid[q][0]),
            letters(valid[q][1]),
            transformation,
        )
        for e, q in combos[:n]
    ]


@dataclass(frozen=True)
class MinimalPair:
    """Two tasks with the same alphabet, example input and query whose example outputs follow different rules.

    ``target`` follows rule ``target_rule`` (its answer is the target rule applied to the query);
    ``source`` shows rule ``source_rule`` (its answer is the source rule applied to the same query).
    """

    source: Task
    target: Task

    @property
    def source_answer(self) -> str:
        """The source prompt's answer (empty where it has none)."""
        return self.source.answer or ""

    @property
    def target_answer(self) -> str:
        """The target prompt's answer (empty where it has none)."""
        return self.target.answer or ""


def minimal_pairs(
    source: str,
    target: str,
    n: int,
    seed: int = 0,
    alphabets: str | Sequence[str] = "standard",
    lengths: Sequence[int] = WINDOW_LENGTHS,
    at_most: bool = False,
) -> list[MinimalPair]:
    """``n`` distinct minimal pairs (e.g. source ``succ``: ``ghi > ghj | bcd``; target ``pred``: ``ghi > fhi |
    bcd``). Both rules build the example and the query from the same windows and random choices; only windows
    where both rules give the same example input and the same query input, and different answers, are kept.

    With ``at_most``, fewer than ``n`` pairs are returned when no more exist (at least one). Raises ValueError
    for unknown rules, equal rules, bad ``alphabets`` or ``lengths`` (as `rule_tasks`), rules whose inputs never
    agree (e.g. sort vs pred), or (without ``at_most``) fewer than ``n`` distinct pairs.
    """
    get_transformation(source), get_transformation(target)
    if source == target:
        raise ValueError(f"source and target are both {source!r}; minimal pairs need two different rules")
    rng = random.Random(f"minimal_pairs/{source}/{target}/{seed}")
    pool, lengths = analysis_alphabets(alphabets, seed), _check_lengths(lengths)
    pairs: dict[MinimalPair, None] = {}
    stale = 0
    while len(pairs) < n and stale < _STALE_TRIES:
        stale += 1
        alphabet, length = rng.choice(pool), rng.choice(lengths)
        ex_start, q_start = (rng.randrange(ALPHABET_SIZE - length + 1) for _ in range(2))
        ex_seed, q_seed = rng.randrange(2**31), rng.randrange(2**31)
        problems = [
            (_problem(rule, ex_start, length, ex_seed), _problem(rule, q_start, length, q_seed))
            for rule in (source, target)
        ]
        if any(p is None for pair in problems for p in pair):
            continue
        (s_ex, s_q), (t_ex, t_q) = problems
        if s_ex[0] != t_ex[0] or s_q[0] != t_q[0] or s_ex[1] == t_ex[1] or s_q[1] == t_q[1] or s_ex == s_q:
            continue
        to_task = lambda ex, q, rule, alphabet=alphabet: Task(
            alphabet,
            ((_letters(alphabet, ex[0]), _letters(alphabet, ex[1])),),
            _letters(alphabet, q[0]),
            _letters(alphabet, q[1]),
            rule,
        )
        pair = MinimalPair(to_task(s_ex, s_q, source), to_task(t_ex, t_q, target))
        if pair not in pairs:
            pairs[pair], stale = None, 0
    if not pairs:
        raise ValueError(f"{source} and {target} never give the same example input and query; no minimal pairs")
    if len(pairs) < n and not at_most:
        raise ValueError(f"only {len(pairs)} distinct {source}/{target} minimal pairs exist here, {n} asked for")
    return list(pairs)


def changed_place_pairs(n: int, seed: int = 0, length: int = 3) -> list[tuple[Task, Task]]:
    """``n`` distinct pairs of fix_alphabetic_seq prompts on the standard alphabet whose examples differ only in which
    letter of the window is wrong: the first (``xcd > bcd``) or the last (``bcx > bcd``). Both prompts of a pair share
    the example's window and wrong letter (so they use the same letters), the query and its answer; the query shares
    no letter with the example. Where pred and succ change the first and the last letter, these change the same places
    under one rule. Raises ValueError for windows outside 2..12 letters (the example and the query each need one more
    letter than the window, all different) or when fewer than ``n`` distinct pairs exist.
    """
    longest = (ALPHABET_SIZE - 2) // 2
    if not 2 <= length <= longest:
        raise ValueError(
            f"windows of {length} letters leave no room for a wrong letter and a query apart; use 2..{longest}"
        )
    rng = random.Random(f"changed_place_pairs/{length}/{seed}")
    letters = lambda positions: _letters(STANDARD_ALPHABET, positions)
    pairs: dict[tuple[Task, Task], None] = {}
    stale = 0
    while len(pairs) < n and stale < _STALE_TRIES:
        stale += 1
        ex_start, q_start = (rng.randrange(ALPHABET_SIZE - length + 1) for _ in range(2))
        window = list(range(ex_start, ex_start + length))
        wrong = rng.choice([p for p in range(ALPHABET_SIZE) if p not in window])
        query_in, query_out = _problem("fix_alphabetic_seq", q_start, length, rng.randrange(2**31))
        if set(window + [wrong]) & set(query_in + query_out):
            continue
        first, last = (
            Task(
                STANDARD_ALPHABET,
                ((letters(shown), letters(window)),),
                letters(query_in),
                letters(query_out),
                "fix_alphabetic_seq",
            )
            for shown in ([wrong] + window[1:], window[:-1] + [wrong])
        )
        if (first, last) not in pairs:
            pairs[first, last], stale = None, 0
    if len(pairs) < n:
        raise ValueError(f"only {len(pairs)} distinct changed-place pairs of {length} letters exist, {n} asked for")
    return list(pairs)


def other_example_tasks(targets: Sequence[Task]) -> list[Task]:
    """For each target, the same prompt with the example of the next target (cyclically) whose example is not its
    own and shares no letter with its query and answer: same rule, same query, another example window. Raises
    ValueError when some target has no such example among the others."""
    donors = []
    for i, target in enumerate(targets):
        own = set(target.query) | set(target.answer or "")
        others = (targets[(i + k) % len(targets)] for k in range(1, len(targets)))
        fitting = (t.examples for t in others if t.examples != target.examples)
        example = next((e for e in fitting if not own & set("".join(e[0]))), None)
        if example is None:
            raise ValueError(f"no other example shares no letter with {target}")
        donors.append(Task(target.alphabet, example, target.query, target.answer, target.transformation))
    return donors
