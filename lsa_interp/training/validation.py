"""Device-resident splits, the training loss and the end-of-epoch validation of one model.

Every epoch record also carries ``matching_score``: the model's best matching-head score
(`lsa_interp.analysis.matching`) on `matching_prompts`, a small fixed set of pred prompts, so that a run's
history shows when its matching head forms (paper Appendix B), and ``val_sibling_by_family``: per family of
rules whose queries look alike (`lsa_interp.evaluation.rule_families`), the share of its non-copy val rows
answered with a sibling rule's answer, so that it shows when the run starts to read the rule from the example.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lsa_interp.analysis.matching import matching_scores, matching_tasks
from lsa_interp.data.loaders import TokenizedSplit
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode
from lsa_interp.data.transformations import SEEN
from lsa_interp.data.vocab import EOS, PAD, SEP
from lsa_interp.evaluation.rule_families import FAMILY_OF, RULE_FAMILIES, family_answers
from lsa_interp.model import HookedEncoderDecoder
from lsa_interp.model.reference import ReferenceTransformer

MATCHING_PROMPTS_PER_ALPHABET_KIND = 8
"""pred tasks per alphabet kind (standard, permuted) behind ``matching_score``: 16 prompts, a few ms."""


def matching_prompts() -> list[Task]:
    """The fixed pred prompts on which every run's per-epoch matching score is measured."""
    return matching_tasks(MATCHING_PROMPTS_PER_ALPHABET_KIND, seed=0, rules=("pred",))


def matching_score(model: HookedEncoderDecoder, prompts: list[Task]) -> float:
    """The best matching-head score of ``model`` (in eval mode: no dropout, no random numbers) on ``prompts``."""
    was_training = model.training
    model.eval()
    score = matching_scores(model, prompts).best()[1]
    model.train(was_training)
    return score


def check_position_table(max_len: int, *splits: Any) -> None:
    """Raise ValueError when a row of ``splits`` (`ResidentSplit`s or `StackSplit`s: anything with ``src_len`` and
    ``tgt_len``) has more tokens than the model's position table has rows (``max_len``); the trainers check it
    before training starts, so nothing is written."""
    longest = max(int(max(split.src_len.max(initial=0), split.tgt_len.max(initial=0))) for split in splits)
    if longest > max_len:
        raise ValueError(
            f"the data's longest row has {longest} tokens, more than the model's max_len {max_len} "
            "(the rows of its position table)"
        )


class ResidentSplit:
    """A tokenized split on the training device, with row lengths for bucketed batches."""

    def __init__(self, split: TokenizedSplit, device: torch.device, limit: int | None = None) -> None:
        if limit is not None and limit < len(split):
            split = split.select(np.sort(np.random.default_rng(0).permutation(len(split))[:limit]))
        tokens = split.tokens
        self.src, self.tgt_in, self.tgt_out = (t.to(device) for t in (tokens.src, tokens.tgt_in, tokens.tgt_out))
        self.src_len = (tokens.src != PAD).sum(1).numpy()
        self.tgt_len = (tokens.tgt_in != PAD).sum(1).numpy()
        self.split = split

    @cached_property
    def siblings(self) -> Int[Tensor, "n k t"]:
        """`sibling_targets` of the split (on the CPU; built at the first validation)."""
        return sibling_targets(self.split)

    def batch(self, rows: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        """``(src, tgt_in, tgt_out)`` of ``rows``, cut to the longest row of the batch."""
        index = torch.from_numpy(rows).to(self.src.device)
        src_len, tgt_len = int(self.src_len[rows].max()), int(self.tgt_len[rows].max())
        return self.src[index, :src_len], self.tgt_in[index, :tgt_len], self.tgt_out[index, :tgt_len]

    def micro_batches(self, rows: np.ndarray, parts: int) -> list[tuple[np.ndarray, float]]:
        """``rows`` sorted by source length (stable) and cut into ``parts`` near-equal runs (none empty), each
        with its share of the batch's target tokens: the weights under which the parts' mean losses add up to
        the batch's token-weighted mean loss. One part is ``rows`` as they are, with share 1."""
        if parts == 1:
            return [(rows, 1.0)]
        order = rows[np.argsort(self.src_len[rows], kind="stable")]
        total = int(self.tgt_len[rows].sum())
        chunks = [chunk for chunk in np.array_split(order, min(parts, len(rows))) if len(chunk)]
        return [(chunk, int(self.tgt_len[chunk].sum()) / total) for chunk in chunks]


def sibling_targets(split: TokenizedSplit) -> Int[Tensor, "n k t"]:
    """Per row, the decoder targets (letters, EOS, then PAD) of the answers that its rule's siblings give on its
    query (`family_answers`); all PAD where there is none: rows of rules without a family, copy rows, a sibling
    whose answer runs past the alphabet's end."""
    k = max(map(len, RULE_FAMILIES.values())) - 1
    answers: list[list[str]] = []
    for i, index in enumerate(split.transformation.tolist()):
        name = split.transformation_names[index] if index >= 0 else None
        siblings: list[str] = []
        if name in FAMILY_OF and not bool(split.is_copy[i]):
            src = split.tokens.src[i].tolist()
            last_sep = max(j for j, token in enumerate(src) if token == SEP)
            alphabet, query, answer = (
                split.alphabets[int(split.alphabet[i])],
                decode(src[last_sep + 1 :]),
                decode(split.tokens.tgt_out[i]),
            )
            task = Task(alphabet, (), query, answer, name)
            siblings = [other for rule, other in family_answers(task).items() if rule != name]
        answers.append(siblings + [""] * (k - len(siblings)))
    width = 1 + max((len(answer) for row in answers for answer in row), default=0)
    out = torch.full((len(answers), k, width), PAD, dtype=torch.long)
    for i, row in enumerate(answers):
        for j, answer in enumerate(row):
            if answer:
                out[i, j, : len(answer) + 1] = torch.tensor([ord(c) - ord("a") for c in answer] + [EOS])
    return out


def sibling_hits(generated: Int[Tensor, "n w"], siblings: Int[Tensor, "n k t"]) -> Bool[Tensor, " n"]:
    """Per row: is the greedy output (answer, EOS, PAD) one of its ``siblings``' targets?"""
    width = max(generated.shape[1], siblings.shape[2])
    output = F.pad(generated, (0, width - generated.shape[1]), value=PAD)[:, None]
    targets = F.pad(siblings, (0, width - siblings.shape[2]), value=PAD)
    return ((output == targets).all(-1) & (targets[..., 0] != PAD)).any(-1)


def loss_fn(
    model: HookedEncoderDecoder | ReferenceTransformer,
    src: Int[Tensor, "b s"],
    tgt_in: Int[Tensor, "b t"],
    tgt_out: Int[Tensor, "b t"],
) -> Float[Tensor, ""]:
    """Mean cross-entropy over the non-PAD targets (answer letters and EOS), teacher-forced."""
    logits = model.decode(tgt_in, model.encode(src), src == PAD)
    return F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)


def exact_match(generated: Int[Tensor, "b n"], tgt_out: Int[Tensor, "b t"]) -> Bool[Tensor, " b"]:
    """Per row: does the greedy output (answer, EOS, then PAD) equal the target (answer, EOS, PAD)?"""
    width = max(generated.shape[1], tgt_out.shape[1])
    pad = lambda t: F.pad(t, (0, width - t.shape[1]), value=PAD)
    return (pad(generated) == pad(tgt_out)).all(dim=1)


def validate_model(model: HookedEncoderDecoder, val: ResidentSplit, autocast: Callable[[], Any]) -> dict[str, Any]:
    """Validation loss and greedy exact-match accuracy: overall, copy / non-copy, seen / new rules, per rule."""
    was_training = model.training
    model.eval()
    losses, correct, sibling = [], [], []
    with torch.no_grad():
        for start in range(0, len(val.src), 1024):
            rows = np.arange(start, min(start + 1024, len(val.src)))
            src, tgt_in, tgt_out = val.batch(rows)
            with autocast():
                losses.append(loss_fn(model, src, tgt_in, tgt_out) * (tgt_out != PAD).sum())
            generated = model.generate(src)
            correct.append(exact_match(generated, tgt_out))
            sibling.append(sibling_hits(generated.cpu(), val.siblings[rows]))
    model.train(was_training)
    val_loss = float(sum(losses)) / int((val.tgt_out != PAD).sum())
    return accuracy_record(torch.cat(correct).cpu(), val.split, val_loss, torch.cat(sibling))


def accuracy_record(
    hit: Bool[Tensor, " n"], split: TokenizedSplit, val_loss: float, sibling: Bool[Tensor, " n"] | None = None
) -> dict[str, Any]:
    """The validation record of exact-match flags ``hit`` (one per row of ``split``) and the mean loss; with
    ``sibling`` (`sibling_hits` per row), the share of each rule family's non-copy rows answered as a sibling."""
    names = [split.transformation_names[i] for i in split.transformation.tolist()]
    seen = torch.tensor([n in SEEN for n in names])
    rate = lambda mask, flags=hit: float(flags[mask].float().mean()) if mask.any() else float("nan")
    record = {
        "val_loss": val_loss,
        "val_acc": rate(torch.ones_like(hit)),
        "val_acc_copy": rate(split.is_copy),
        "val_acc_noncopy": rate(~split.is_copy),
        "val_acc_seen_transformations": rate(seen & ~split.is_copy),
        "val_acc_new_transformations": rate(~seen & ~split.is_copy),
        "val_acc_by_transformation": {
            name: rate(torch.tensor([n == name for n in names]) & ~split.is_copy) for name in sorted(set(names))
        },
    }
    if sibling is not None:
        families = {
            family: torch.tensor([n in rules for n in names]) & ~split.is_copy
            for family, rules in RULE_FAMILIES.items()
        }
        record["val_sibling_by_family"] = {
            family: rate(mask, sibling) for family, mask in families.items() if mask.any()
        }
    return record
