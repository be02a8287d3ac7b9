"""`Task`: one letter-string analogy problem in the paper's notation.

``a b c ... z | g h i > f h i | b c d`` is an alphabet, one example ``ghi > fhi`` and the query ``bcd``;
an answer may follow the query (``| b c d > a c d``). Several examples are separated by ``|``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lsa_interp.data.vocab import LETTERS
from lsa_interp.utils import check_type

STANDARD_ALPHABET: str = LETTERS
_LETTER_SET = frozenset(LETTERS)
_ALLOWED = _LETTER_SET | {"|", ">"}


@dataclass(frozen=True, slots=True)
class Task:
    """A letter-string analogy task.

    ``alphabet`` is a permutation of ``a..z``; ``examples`` a tuple of ``(input, output)`` pairs; ``query``
    the string to transform; ``answer`` the expected output (None when unknown); ``transformation`` the
    generating rule's name (a label only: it takes no part in equality or hashing).
    """

    alphabet: str
    examples: tuple[tuple[str, str], ...]
    query: str
    answer: str | None = None
    transformation: str | None = field(default=None, compare=False)

    @property
    def is_copy(self) -> bool:
        """True when one example is the query problem itself (its input is the query, its output the answer)."""
        if self.answer is None:
            return any(ex_in == self.query for ex_in, _ in self.examples)
        return any(ex_in == self.query and ex_out == self.answer for ex_in, ex_out in self.examples)

    @property
    def n_shots(self) -> int:
        """Number of examples."""
        return len(self.examples)

    def __str__(self) -> str:
        parts = [self.alphabet, *(f"{ex_in} > {ex_out}" for ex_in, ex_out in self.examples), self.query]
        text = " | ".join(parts)
        return text if self.answer is None else f"{text} > {self.answer}"

    def spaced(self) -> str:
        """The paper's notation with a space between letters: ``a b c ... z | g h i > f h i | b c d``."""
        return " ".join(ch for ch in str(self) if ch != " ")

    def with_answer(self, answer: str | None) -> Task:
        """Return a copy of this task with another answer (None: no answer). Spaces between letters are fine, as
        in `parse`. Raises ValueError for an empty answer or one with anything but the letters a-z."""
        check_type(answer, (str, type(None)), "an answer is a str of letters a-z, or None for none")
        if answer is not None:
            answer = "".join(answer.split())
            unknown = sorted({ch for ch in answer if ch not in _LETTER_SET})
            if unknown or not answer:
                found = f"symbol(s) {' '.join(repr(ch) for ch in unknown)}" if unknown else "no letter"
                raise ValueError(f"answer {answer!r} has {found}; an answer is letters a-z (spaces between are fine)")
        return Task(self.alphabet, self.examples, self.query, answer, self.transformation)

    @classmethod
    def parse(cls, text: str, transformation: str | None = None) -> Task:
        """Parse the paper's notation, with or without spaces between letters.

        Raises ValueError naming the problem: an unknown symbol, an alphabet that is not a permutation of
        a..z, an example without ``>`` or with an empty side, an empty query, no example at all.
        """
        check_type(
            text, str, "Task.parse reads a task's text, a str such as 'abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcd'"
        )
        compact = "".join(text.split())
        unknown = sorted({ch for ch in compact if ch not in _ALLOWED})
        if unknown:
            raise ValueError(
                f"unknown symbol(s) {' '.join(repr(ch) for ch in unknown)} in task; allowed: letters a-z, '|', '>'"
            )
        parts = compact.split("|")
        if len(parts) < 3:
            raise ValueError("a task needs 'alphabet | example_in > example_out | query', separated by '|'")
        alphabet, *example_parts, last = parts
        _check_alphabet(alphabet)
        examples = tuple(_parse_example(part, i) for i, part in enumerate(example_parts, start=1))
        query, answer = _parse_query(last)
        return cls(alphabet, examples, query, answer, transformation)


def _check_alphabet(alphabet: str) -> None:
    if len(alphabet) != len(LETTERS) or set(alphabet) != _LETTER_SET:
        missing = "".join(sorted(_LETTER_SET - set(alphabet)))
        detail = f"missing {missing!r}" if missing else f"{len(alphabet)} letters"
        raise ValueError(f"alphabet {alphabet!r} is not a permutation of the 26 letters a..z ({detail})")


def _parse_example(part: str, index: int) -> tuple[str, str]:
    if part.count(">") != 1:
        raise ValueError(f"example {index} {part!r} must have exactly one '>' between its input and output")
    ex_in, ex_out = part.split(">")
    if not ex_in or not ex_out:
        raise ValueError(f"example {index} {part!r} has an empty side; both input and output need letters")
    return ex_in, ex_out


def _parse_query(part: str) -> tuple[str, str | None]:
    if part.count(">") > 1:
        raise ValueError(f"query {part!r} has more than one '>'; write 'query' or 'query > answer'")
    query, _, answer = part.partition(">")
    if not query:
        raise ValueError("the query is empty; the last part after '|' needs letters")
    if ">" in part and not answer:
        raise ValueError(f"query {part!r} has '>' but no answer after it")
    return query, (answer if ">" in part else None)
