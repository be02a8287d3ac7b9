"""The 30-symbol vocabulary shared by encoder and decoder, and the token roles.

Letters ``a``..``z`` are always ids 0..25 in standard letter order: a permuted alphabet only changes the
order of the 26 alphabet tokens in the encoder input, never the ids.
"""

from __future__ import annotations

import string
from collections.abc import Iterable

LETTERS: str = string.ascii_lowercase
N_LETTERS: int = 26
SEP: int = 26
"""``|``: separates the alphabet, each example and the query (the reference calls it SOS)."""
EOS: int = 27
PAD: int = 28
ARROW: int = 29
"""``>``: separates an example's input from its output; also the decoder's first input token."""
VOCAB_SIZE: int = 30

TOKEN_STRINGS: tuple[str, ...] = (*LETTERS, "|", "<eos>", "<pad>", ">")

ROLES: tuple[str, ...] = ("alphabet", "separator", "example_in", "arrow", "example_out", "query", "eos", "pad")
"""Role of each encoder position; the integer role id is the index in this tuple."""
ROLE_ID: dict[str, int] = {name: i for i, name in enumerate(ROLES)}


def token_str(token_id: int) -> str:
    """Return the display string of one token id (raises IndexError for ids outside the vocabulary)."""
    if not 0 <= token_id < VOCAB_SIZE:
        raise IndexError(f"token id {token_id} is outside the vocabulary 0..{VOCAB_SIZE - 1}")
    return TOKEN_STRINGS[token_id]


_SHOWN_AS = {"<eos>": "EOS", "<pad>": "PAD"}
"""Plotly reads ``<...>`` in labels as markup, so figures show the special tokens without brackets."""


def display_token(token_id: int) -> str:
    """The label of one token id in figures: its symbol, with ``EOS``/``PAD`` for the special tokens."""
    text = token_str(token_id)
    return _SHOWN_AS.get(text, text)


def position_labels(tokens: Iterable[str]) -> tuple[str, ...]:
    """One unique label per position of displayed tokens: ``token·position`` (e.g. ``g·27``, ``EOS·38``).

    Every figure that names a position uses these (plotly merges repeated category labels).
    """
    return tuple(f"{token}·{pos}" for pos, token in enumerate(tokens))
