"""An independent solver written from the paper's definitions, working on letter strings.

It shares no code with ``lsa_interp.data.transformations``: given an alphabet, a rule name and a query, it
returns the set of answers the rule allows (one for most rules; the ``fix`` rules can admit more than one
reading of which letter is wrong, so the generated answer must be among them).
"""

from __future__ import annotations


class Alphabet:
    def __init__(self, letters: str) -> None:
        self.letters = letters

    def pos(self, ch: str) -> int:
        return self.letters.index(ch)

    def nxt(self, ch: str, k: int = 1) -> str:
        p = self.pos(ch) + k
        if not 0 <= p < 26:
            raise ValueError("off the alphabet")
        return self.letters[p]

    def is_run(self, s: str) -> bool:
        return len(s) >= 1 and all(self.pos(b) == self.pos(a) + 1 for a, b in zip(s, s[1:]))

    def sort(self, s: str) -> str:
        return "".join(sorted(s, key=self.pos))


def _drop_duplicate(s: str) -> str:
    dups = [i for i in range(len(s) - 1) if s[i] == s[i + 1]]
    assert len(dups) == 1, f"{s!r} should have exactly one doubled letter"
    return s[: dups[0]] + s[dups[0] + 1 :]


def _fixes(al: Alphabet, s: str) -> set[str]:
    """Every run obtained by replacing one letter of ``s`` by a letter not already in the result."""
    out = set()
    for i in range(len(s)):
        try:
            letter = al.nxt(s[i - 1]) if i > 0 else al.nxt(s[1], -1)
        except ValueError:
            continue
        candidate = s[:i] + letter + s[i + 1 :]
        if al.is_run(candidate) and s[i] not in candidate:
            out.add(candidate)
    return out


def _groups(s: str) -> tuple[str, int]:
    k = len(s) - len(s.lstrip(s[0]))
    letters = s[::k]
    assert s == "".join(ch * k for ch in letters), f"{s!r} is not made of equal groups"
    return letters, k


def _uninterleave(s: str) -> tuple[str, str]:
    filler = s[1]
    assert set(s[1::2]) == {filler}, f"{s!r} is not interleaved with one letter"
    return s[0::2], filler


def _interleave(s: str, filler: str) -> str:
    return filler.join(s)


def solve(alphabet: str, rule: str, q: str) -> set[str]:
    """The answers that ``rule`` gives for query ``q`` in ``alphabet``."""
    al = Alphabet(alphabet)
    ext = lambda s: s + al.nxt(s[-1])
    succ = lambda s: s[:-1] + al.nxt(s[-1])
    pred = lambda s: al.nxt(s[0], -1) + s[1:]
    if rule == "extend_sequence":
        assert al.is_run(q)
        return {ext(q)}
    if rule == "succ":
        assert al.is_run(q)
        return {succ(q)}
    if rule == "pred":
        assert al.is_run(q)
        return {pred(q)}
    if rule == "remove_redundant":
        return {_drop_duplicate(q)}
    if rule == "fix_alphabetic_seq":
        return _fixes(al, q)
    if rule == "sort":
        out = al.sort(q)
        assert al.is_run(out) and sum(a != b for a, b in zip(q, out)) == 2
        return {out}
    if rule == "sort_group":
        letters, k = _groups(q)
        return {"".join(ch * k for ch in al.sort(letters))}
    if rule == "rr_interleave":
        letters, filler = _uninterleave(q)
        return {_interleave(_drop_duplicate(letters), filler)}
    if rule == "rr_succ":
        return {succ(_drop_duplicate(q))}
    if rule == "fix_extend":
        return {ext(w) for w in _fixes(al, q)}
    if rule == "rr_sort":
        return {al.sort(_drop_duplicate(al.sort(q)))}
    if rule == "extend_pred":
        return {ext(pred(q))}
    if rule == "fix_interleave":
        letters, filler = _uninterleave(q)
        return {_interleave(w, filler) for w in _fixes(al, letters)}
    if rule == "extend_group":
        letters, k = _groups(q)
        return {"".join(ch * k for ch in ext(letters))}
    if rule == "extend_extend_succ":
        return {succ(ext(ext(q)))}
    if rule == "fix_pred_succ":
        return {succ(pred(w)) for w in _fixes(al, q)}
    if rule == "reverse":
        return {q[::-1]}
    if rule == "shift":
        return {"".join(al.nxt(ch, len(q)) for ch in q)}
    if rule == "replicate":
        return {q + q}
    if rule == "unreverse":
        return {q[::-1]}
    raise KeyError(rule)
