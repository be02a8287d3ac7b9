"""Memory splicing (the authors' perturbation experiment): decode one prompt from an encoder output
("memory", ``encoder.ln_final.hook_out``) whose chosen positions come from another prompt's.

The authors decoded the successor prompt ``a..z | ghi > ghj | bcd`` from a memory whose positions 0-31
(alphabet, ``|``, example input, ``>``, first example-output letter) came from the predecessor prompt
``ghi > fhi | bcd``: the output became the predecessor's answer ``acd``; splicing only the alphabet
positions 8-25 changed nothing. `splice_analysis` repeats both cases over many minimal pairs (same
alphabet, example input and query; `prompts.minimal_pairs` with 3-letter windows, so every prompt has the
same 39 positions) and counts the outputs: the donor's answer, the prompt's own answer, or neither.

In the authors' prompt 16 of the 18 letters at positions 8-25 (``k..z``) appear in neither prompt nor answer;
in random windows the same positions hold letters the prompts use. A third case, `UNUSED`, splices per pair
the alphabet positions whose letters neither prompt nor either answer uses: the closer analogue of the
authors' claim that the irrelevant letters carry nothing the decoder reads. Each case also reports how far
the spliced states are from the target's own (relative to their size) and how alike the differences are in
direction (mean pairwise cosine): a shared direction is a signal that all the spliced positions carry.
`near_changed` splits a case's letters by their distance from the answer's changed letter.

Only the authors' direction (`AUTHORS_PAIR`: pred memory into succ prompts) is judged; any other pair of rules is
reported without a verdict, its findings' paper column saying that the paper did not run it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from lsa_interp.analysis.patch_runs import MEMORY_HOOK
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode_batch, encode_tasks
from lsa_interp.data.vocab import PAD
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder


def unused_positions(donor: Task, target: Task) -> tuple[int, ...]:
    """Alphabet positions whose letter (in both prompts' alphabets) appears in neither task: not in an example,
    the query or an answer. For the authors' pair (``ghi > fhi | bcd`` and ``ghi > ghj | bcd``) these are
    10-25 (``k..z``)."""
    used = _letters(donor) | _letters(target)
    pairs = enumerate(zip(donor.alphabet, target.alphabet, strict=True))
    return tuple(p for p, (a, b) in pairs if a not in used and b not in used)


Case = Sequence[int] | Callable[[Task, Task], Sequence[int]]
"""The positions one case splices: the same for every pair, or a function of (donor, target)."""
NEAR = 3
"""Alphabet places from the answer's changed letter that count as near it (`near_changed`)."""


def changed_letter_place(task: Task) -> int | None:
    """Alphabet index of the answer's first letter that is not in the query (None when there is none)."""
    changed = next((letter for letter in task.answer or "" if letter not in task.query), None)
    return None if changed is None else task.alphabet.index(changed)


def near_changed(near: bool) -> Callable[[Task, Task], tuple[int, ...]]:
    """The unused positions within `NEAR` places of the target's changed answer letter (``near``) or further."""

    def positions(donor: Task, target: Task) -> tuple[int, ...]:
        place = changed_letter_place(target)
        return tuple(
            p for p in unused_positions(donor, target) if place is not None and (abs(p - place) <= NEAR) == near
        )

    return positions


UNUSED = "unused letters"
CASES: dict[str, Case] = {
    "positions 0-31": tuple(range(0, 32)),
    "alphabet 8-25": tuple(range(8, 26)),
    UNUSED: unused_positions,
}
"""The authors' two cases: the donor's positions 0-31 (its rule reaches the output) and 8-25 (no change); and per
pair the alphabet letters neither task uses (what 16 of the authors' 18 positions 8-25 held)."""
EXPECTED: dict[str, str] = {"positions 0-31": "donor", "alphabet 8-25": "own", UNUSED: "own"}
"""The outcome the paper saw in each case."""
AUTHORS_PAIR = ("pred", "succ")
"""The (donor, target) rules the paper spliced: pred memory into succ prompts. Only this pair's cases are judged."""
MAJORITY = 0.5
"""A case holds when more than half the pairs the model solves give the paper's outcome (the paper shows one pair,
which its model solved). No verdict when the model solves at most half of the target prompts: a model that already
answers them with the donor's rule would pass the first case without any splice doing anything."""
OUTCOMES = ("donor", "own", "neither")


def splice_mask(
    positions: Sequence[int] | Sequence[Sequence[int]], n_pairs: int, width: int
) -> Bool[Tensor, "pair pos"]:
    """Which memory positions of each of ``n_pairs`` prompts of ``width`` positions are spliced: ``positions`` the
    same for every pair, or one sequence per pair (which may be empty, though not all). Raises ValueError for
    no position at all, a position outside 0..width-1, or a per-pair list of another length."""
    positions = list(positions)
    per_pair = bool(positions) and isinstance(positions[0], Sequence)
    rows = [list(row) for row in positions] if per_pair else [positions] * n_pairs
    if len(rows) != n_pairs:
        raise ValueError(f"give one list of splice positions per pair ({n_pairs}), got {len(rows)}")
    flat = [int(p) for row in rows for p in row]
    if not flat:
        raise ValueError(f"give at least one splice position in 0..{width - 1}")
    if min(flat) < 0 or max(flat) >= width:
        raise ValueError(
            f"splice positions must lie in 0..{width - 1} (the prompts' positions), got {min(flat)}..{max(flat)}"
        )
    mask = torch.zeros(n_pairs, width, dtype=torch.bool)
    for i, row in enumerate(rows):
        mask[i, [int(p) for p in row]] = True
    return mask


def splice_decode(
    model: HookedEncoderDecoder,
    targets: Sequence[Task],
    donors: Sequence[Task],
    positions: Sequence[int] | Sequence[Sequence[int]],
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> list[str]:
    """Greedy answers of ``targets`` decoded from their memory with ``positions`` (the same for every pair, or
    one sequence per pair) taken from the memory of the donor at the same index. Raises ValueError for unequal
    lists, no tasks, no position at all, or a position outside a prompt (or on padding)."""
    if len(targets) != len(donors) or not targets:
        raise ValueError(f"give as many donors as targets (at least one), got {len(donors)} and {len(targets)}")
    target_batch = encode_tasks(list(targets), with_answers=False).to(model.device)
    donor_batch = encode_tasks(list(donors), with_answers=False).to(model.device)
    mask = splice_mask(positions, len(targets), min(target_batch.src.shape[1], donor_batch.src.shape[1]))
    mask = mask.to(model.device)
    if bool(((target_batch.src[:, : mask.shape[1]] == PAD) | (donor_batch.src[:, : mask.shape[1]] == PAD))[mask].any()):
        raise ValueError("a splice position falls on padding in some prompt; use prompts of equal length")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(donor_batch, names_filter=[MEMORY_HOOK])
            donor_memory = cache[MEMORY_HOOK][:, : mask.shape[1]]

            def splice(memory, hook):
                memory = memory.clone()
                memory[:, : mask.shape[1]][mask] = donor_memory[mask].to(memory)
                return memory

            with model.hooks(fwd_hooks=[(MEMORY_HOOK, splice)]):
                tokens = model.greedy_decode(target_batch.src, max_new_tokens)
    finally:
        model.train(was_training)
    return decode_batch(tokens)


def splice_analysis(
    model: HookedEncoderDecoder,
    donor_rule: str = "pred",
    target_rule: str = "succ",
    *,
    n_pairs: int = 100,
    seed: int = 0,
    cases: Mapping[str, Case] = CASES,
    model_name: str = "model",
) -> AnalysisResult:
    """Splice each case's positions from ``donor_rule`` prompts into ``target_rule`` prompts over ``n_pairs``
    3-letter minimal pairs on the standard alphabet; count the outcomes per case (and the answers that copy the
    query unchanged), and measure how the spliced states differ from the target's own. Returns an
    `AnalysisResult`; raises ValueError for unknown or equal rules, no pairs or bad positions."""
    pairs = minimal_pairs(donor_rule, target_rule, n_pairs, seed=seed, lengths=(3,), at_most=True)
    donors, targets = [p.source for p in pairs], [p.target for p in pairs]
    clean = model.solve(targets)
    solved = [c == t.answer for c, t in zip(clean, targets)]
    donor_memory, target_memory = encoder_memory(model, donors), encoder_memory(model, targets)
    table, outputs = {}, {}
    for name, case in cases.items():
        positions = [case(d, t) for d, t in zip(donors, targets)] if callable(case) else case
        answers = splice_decode(model, targets, donors, positions)
        kinds = [_outcome(a, d.answer, t.answer) for a, d, t in zip(answers, donors, targets)]
        judged = [kind for kind, ok in zip(kinds, solved) if ok]
        mask = splice_mask(positions, len(targets), min(donor_memory.shape[1], target_memory.shape[1]))
        table[name] = {
            **{kind: kinds.count(kind) / len(kinds) for kind in OUTCOMES},
            "unchanged": sum(a == c for a, c in zip(answers, clean)) / len(answers),
            "query copied": sum(a == t.query for a, t in zip(answers, targets)) / len(answers),
            **{f"{kind} of solved": judged.count(kind) / len(judged) if judged else 0.0 for kind in OUTCOMES},
            "positions": f"per pair, {mask.sum(1).float().mean():.1f} on average"
            if callable(case)
            else f"{min(case)}-{max(case)}",
            **memory_change(donor_memory, target_memory, mask),
        }
        outputs[name] = answers
    summary = {
        "pairs": len(pairs),
        "clean_own_answer": sum(solved) / len(pairs),
        **{
            f"{name}: {kind}": table[name][kind]
            for name in table
            for kind in (*OUTCOMES, "unchanged", "query copied", "state change", "change alignment")
        },
    }
    data = {
        "donor_rule": donor_rule,
        "target_rule": target_rule,
        "cases": table,
        "pairs": [
            {"donor": str(d), "target": str(t), "clean": c, **{name: outputs[name][i] for name in outputs}}
            for i, (d, t, c) in enumerate(zip(donors, targets, clean))
        ],
    }
    figures = {"outcomes per splice": _figure(table, donor_rule, target_rule)}
    verdict = summary["clean_own_answer"] > MAJORITY
    findings = [_finding(name, table[name], donor_rule, target_rule, verdict) for name in table if name in EXPECTED]
    return AnalysisResult("splice", model_name, summary, data, figures, findings)


def check_pair_counts(counts: Mapping[str, int]) -> None:
    """Raise ValueError, naming each count, unless ``counts`` (what is counted -> how many) all count the same pairs."""
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{count} {name}" for name, count in counts.items())
        raise ValueError(f"unequal numbers of pairs: {listed}; give one of each per pair")


def masked_change(
    donor_memory: Float[Tensor, "pair donor_pos d_model"],
    target_memory: Float[Tensor, "pair target_pos d_model"],
    mask: Bool[Tensor, "pair pos"],
) -> Float[Tensor, "pair pos d_model"]:
    """Donor minus target at the ``mask`` states (the first ``pos`` of each memory), zero elsewhere. Raises ValueError
    for memories and a mask of unequal numbers of pairs, a mask wider than either memory or one that marks no state."""
    counts = (donor_memory.shape[0], target_memory.shape[0], mask.shape[0])
    check_pair_counts(dict(zip(("donor memories", "target memories", "mask rows"), counts)))
    width = mask.shape[1]
    if width > min(donor_memory.shape[1], target_memory.shape[1]):
        raise ValueError(
            f"the mask is {width} positions wide, the memories {donor_memory.shape[1]} and {target_memory.shape[1]}"
        )
    if not bool(mask.any()):
        raise ValueError("the mask marks no state to compare")
    return (donor_memory[:, :width] - target_memory[:, :width]) * mask[..., None]


def memory_change(
    donor: Float[Tensor, "pair donor_pos d_model"],
    target: Float[Tensor, "pair target_pos d_model"],
    mask: Bool[Tensor, "pair pos"],
) -> dict[str, float]:
    """How the spliced states differ from the target's own at the ``mask`` positions (the first ``pos`` of each
    memory): ``state change`` is the mean of |donor - target| / |target| over those states, ``change alignment`` the
    mean cosine between the differences of two different changed states (1: all point one way; about 0 in a random
    layout; 0 with under two states that changed by more than 1e-6 of their size). Raises ValueError as
    `masked_change` does."""
    width = mask.shape[1]
    change = masked_change(donor, target, mask)[mask].double()
    size = change.norm(dim=-1) / target[:, :width][mask].double().norm(dim=-1)
    moved = change[size > 1e-6]
    n = len(moved)
    unit_sum = (moved / moved.norm(dim=-1, keepdim=True)).sum(0)
    alignment = (unit_sum.dot(unit_sum) - n) / (n * n - n) if n > 1 else torch.tensor(0.0)
    return {"state change": float(size.mean()), "change alignment": float(alignment)}


def encoder_memory(model: HookedEncoderDecoder, tasks: Sequence[Task]) -> Float[Tensor, "task pos d_model"]:
    """The memory (`MEMORY_HOOK`) of ``tasks``' prompts in eval mode (the model's mode is restored), as fp32 on the
    CPU. Raises ValueError for no tasks."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            batch = encode_tasks(list(tasks), with_answers=False).to(model.device)
            return model.run_with_cache(batch, names_filter=[MEMORY_HOOK])[1][MEMORY_HOOK].float().cpu()
    finally:
        model.train(was_training)


def _letters(task: Task) -> set[str]:
    letters = set(task.query) | set(task.answer or "")
    for example_in, example_out in task.examples:
        letters |= set(example_in) | set(example_out)
    return letters


def _outcome(answer: str, donor: str | None, own: str | None) -> str:
    return "donor" if answer == donor else "own" if answer == own else "neither"


def _finding(name: str, row: dict, donor_rule: str, target_rule: str, verdict: bool = True) -> Finding:
    """The finding of case ``name``; ``verdict``: whether it may be judged (never for a pair other than the
    authors')."""
    expected = EXPECTED[name]
    authors_pair = (donor_rule, target_rule) == AUTHORS_PAIR
    verdict = verdict and authors_pair
    decoded = f"{target_rule} prompt decoded from {name} of the {donor_rule} prompt"
    if authors_pair:
        paper = f"{decoded}: " + ("the output becomes the donor's answer (acd)" if expected == "donor" else "no change")
        if name == UNUSED:
            paper = f"(not in the paper: the analogue of alphabet 8-25) {paper}"
    else:
        donor, target = AUTHORS_PAIR
        paper = f"not in the paper (it decoded {target} prompts from {donor} memory only): {decoded}"
    share = row[f"{expected} of solved"]
    ours = (
        f"donor's answer {row['donor']:.0%}, own answer {row['own']:.0%}, neither {row['neither']:.0%} (the query "
        f"copied {row['query copied']:.0%}); unchanged {row['unchanged']:.0%}; of the solved pairs, {share:.0%} the "
        f"{expected} answer; spliced states {row['state change']:.2f} of their size from the own, alignment "
        f"{row['change alignment']:.2f}"
    )
    return Finding(
        f"memory splicing, {name}",
        paper,
        ours,
        share > MAJORITY if verdict else None,
        _detail(expected, donor_rule, target_rule, verdict),
        share,
    )


def _detail(expected: str, donor_rule: str, target_rule: str, verdict: bool) -> str:
    """How a case is judged, and why it is not where it has no ``verdict`` (the model's clean answers, or a pair
    of rules the paper did not splice)."""
    if (donor_rule, target_rule) != AUTHORS_PAIR:
        donor, target = AUTHORS_PAIR
        return (
            f"no verdict: the paper spliced only {donor} (donor) into {target} (target) prompts; the value is the "
            f"share of the pairs the model solves that give the {expected} answer"
        )
    rule = f"holds when more than {MAJORITY:.0%} of the pairs the model solves give the paper's outcome"
    return (
        rule if verdict else f"{rule}; no verdict: the model solves at most {MAJORITY:.0%} of the {target_rule} prompts"
    )


def _figure(table: dict[str, dict], donor_rule: str, target_rule: str):  # pragma: no mutate block
    import plotly.graph_objects as go

    names = {"donor": f"{donor_rule} answer (donor)", "own": f"{target_rule} answer (own)", "neither": "neither"}
    return go.Figure(
        [go.Bar(name=names[kind], x=list(table), y=[row[kind] for row in table.values()]) for kind in OUTCOMES],
        layout={"barmode": "stack", "yaxis": {"title": "fraction of pairs", "range": [0, 1]}},
    )
