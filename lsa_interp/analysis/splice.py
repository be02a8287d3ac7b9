"""Memory splicing (the authors' perturbation experiment): decode one prompt from an encoder output
("memory", ``encoder.ln_final.hook_out``) whose chosen positions come from another prompt's.

The authors decoded the successor prompt ``a..z | ghi > ghj | bcd`` from a memory whose positions 0-31
(alphabet, ``|``, example input, ``>``, first example-output letter) came from the predecessor prompt
``ghi > fhi | bcd``: the output became the predecessor's answer ``acd``; splicing only the alphabet
positions 8-25 changed nothing. `splice_analysis` repeats both cases over many minimal pairs (same
alphabet, example input and query; `prompts.minimal_pairs` with 3-letter windows, so every prompt has the
same 39 positions) and counts the outputs: the donor's answer, the prompt's own answer, or neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode_batch, encode_tasks
from lsa_interp.data.vocab import PAD
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder

MEMORY_HOOK = "encoder.ln_final.hook_out"
CASES: dict[str, tuple[int, ...]] = {
    "positions 0-31": tuple(range(0, 32)),
    "alphabet 8-25": tuple(range(8, 26)),
}
"""The authors' two cases: the donor's positions 0-31 (its rule reaches the output) and 8-25 (no change)."""
EXPECTED: dict[str, str] = {"positions 0-31": "donor", "alphabet 8-25": "own"}
"""The outcome the paper saw in each case."""
MAJORITY = 0.5
"""A case holds when more than half the pairs the model solves give the paper's outcome (the paper shows one pair,
which its model solved). No verdict when the model solves at most half of the target prompts: a model that already
answers them with the donor's rule would pass the first case without any splice doing anything."""
OUTCOMES = ("donor", "own", "neither")


def splice_decode(
    model: HookedEncoderDecoder,
    targets: Sequence[Task],
    donors: Sequence[Task],
    positions: Sequence[int],
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> list[str]:
    """Greedy answers of ``targets`` decoded from their memory with ``positions`` taken from the memory of the
    donor at the same index. Raises ValueError for unequal lists, no tasks, or a position outside a prompt
    (or on padding)."""
    if len(targets) != len(donors) or not targets:
        raise ValueError(f"give as many donors as targets (at least one), got {len(donors)} and {len(targets)}")
    target_batch = encode_tasks(list(targets), with_answers=False).to(model.device)
    donor_batch = encode_tasks(list(donors), with_answers=False).to(model.device)
    index = torch.tensor(list(positions), dtype=torch.long, device=model.device)
    width = min(target_batch.src.shape[1], donor_batch.src.shape[1])
    if not len(index):
        raise ValueError(f"give at least one splice position in 0..{width - 1}")
    if int(index.min()) < 0 or int(index.max()) >= width:
        got = f"{int(index.min())}..{int(index.max())}"
        raise ValueError(f"splice positions must lie in 0..{width - 1} (the prompts' positions), got {got}")
    if bool((target_batch.src[:, index] == PAD).any() | (donor_batch.src[:, index] == PAD).any()):
        raise ValueError("a splice position falls on padding in some prompt; use prompts of equal length")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(donor_batch, names_filter=[MEMORY_HOOK])
            donor_memory = cache[MEMORY_HOOK]

            def splice(memory, hook):
                memory = memory.clone()
                memory[:, index] = donor_memory[:, index].to(memory)
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
    cases: Mapping[str, Sequence[int]] = CASES,
    model_name: str = "model",
) -> AnalysisResult:
    """Splice each case's positions from ``donor_rule`` prompts into ``target_rule`` prompts over ``n_pairs``
    3-letter minimal pairs on the standard alphabet; count the outcomes per case. Returns an
    `AnalysisResult`; raises ValueError for unknown or equal rules, no pairs or bad positions."""
    pairs = minimal_pairs(donor_rule, target_rule, n_pairs, seed=seed, lengths=(3,), at_most=True)
    donors, targets = [p.source for p in pairs], [p.target for p in pairs]
    clean = model.solve(targets)
    solved = [c == t.answer for c, t in zip(clean, targets)]
    table, outputs = {}, {}
    for name, positions in cases.items():
        answers = splice_decode(model, targets, donors, positions)
        kinds = [_outcome(a, d.answer, t.answer) for a, d, t in zip(answers, donors, targets)]
        judged = [kind for kind, ok in zip(kinds, solved) if ok]
        table[name] = {
            **{kind: kinds.count(kind) / len(kinds) for kind in OUTCOMES},
            "unchanged": sum(a == c for a, c in zip(answers, clean)) / len(answers),
            **{f"{kind} of solved": judged.count(kind) / len(judged) if judged else 0.0 for kind in OUTCOMES},
            "positions": f"{min(positions)}-{max(positions)}",
        }
        outputs[name] = answers
    summary = {
        "pairs": len(pairs),
        "clean_own_answer": sum(solved) / len(pairs),
        **{f"{name}: {kind}": table[name][kind] for name in table for kind in (*OUTCOMES, "unchanged")},
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


def _outcome(answer: str, donor: str | None, own: str | None) -> str:
    return "donor" if answer == donor else "own" if answer == own else "neither"


def _finding(name: str, row: dict, donor_rule: str, target_rule: str, verdict: bool = True) -> Finding:
    expected = EXPECTED[name]
    paper = f"{target_rule} prompt decoded from {name} of the {donor_rule} prompt: " + (
        "the output becomes the donor's answer (acd)" if expected == "donor" else "no change"
    )
    share = row[f"{expected} of solved"]
    ours = (
        f"donor's answer {row['donor']:.0%}, own answer {row['own']:.0%}, neither {row['neither']:.0%}; "
        f"unchanged {row['unchanged']:.0%}; of the solved pairs, {share:.0%} the {expected} answer"
    )
    return Finding(
        f"memory splicing, {name}",
        paper,
        ours,
        share > MAJORITY if verdict else None,
        f"holds when more than {MAJORITY:.0%} of the pairs the model solves give the paper's outcome"
        + ("" if verdict else f"; no verdict: the model solves at most {MAJORITY:.0%} of the {target_rule} prompts"),
        share,
    )


def _figure(table: dict[str, dict], donor_rule: str, target_rule: str):  # pragma: no mutate block
    import plotly.graph_objects as go

    names = {"donor": f"{donor_rule} answer (donor)", "own": f"{target_rule} answer (own)", "neither": "neither"}
    return go.Figure(
        [go.Bar(name=names[kind], x=list(table), y=[row[kind] for row in table.values()]) for kind in OUTCOMES],
        layout={"barmode": "stack", "yaxis": {"title": "fraction of pairs", "range": [0, 1]}},
    )
