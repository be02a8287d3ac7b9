"""The explorer's model arithmetic: one task run through the hook API with any mix of interventions.

Interventions (`Interventions`) compose in one greedy decoding, each as TransformerLens hooks:

- decoder lens: the decoder reads encoder layer k's output through the final encoder norm (as in
  `lsa_interp.analysis.decoder_lens`) instead of the last layer's;
- cell ablation: rectangles of (token, dim) cells of an encoder layer's output (``hook_resid_post``) set to 0
  or to the dimension's mean over reference tasks (`reference_means`);
- head ablation: a head's weighted sum of values (``hook_z``) set to 0, in any attention block;
- pattern patching: encoder heads' attention patterns replaced by those of a second task of the same token
  layout (as in `lsa_interp.analysis.patching`: every encoder layer's pattern hook is attached, so the
  clean and patched runs execute the same operations).

`run_task` decodes greedily once with the hooks attached (key/value-cached steps) and records what the view
shows during that one pass: the encoder's patterns and hidden states (the encoder runs once), and at each
decoding step the decoder's self- and cross-attention rows and the final norm's output (the logits of the
step). The rows are the ones a teacher-forced run of the decoded answer gives, up to float rounding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from lsa_interp.analysis.patching import check_heads
from lsa_interp.analysis.pattern_patches import replace_heads
from lsa_interp.analysis.rasp import seen_rule_tasks
from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import decode, encode_tasks
from lsa_interp.data.vocab import PAD, ROLES, display_token
from lsa_interp.model.heads import Head
from lsa_interp.model.hooked import DEFAULT_MAX_NEW_TOKENS, HookedEncoderDecoder
from lsa_interp.model.inputs import decoder_input_from_generated
from lsa_interp.viz.attention_data import AttentionData

ABLATION_MODES: tuple[str, ...] = ("zero", "mean")
REFERENCE_TASKS = 64
"""Tasks (seen rules, standard alphabet) whose non-PAD positions give the per-dimension means of mean ablation."""

Hook = Callable[[Tensor, object], Tensor]


@dataclass(frozen=True)
class CellBox:
    """A rectangle of hidden-state cells of one encoder layer's output, 0-based and inclusive.

    ``layer`` is the encoder layer, ``positions``/``dims`` the (first, last) token positions and dimensions;
    ``mode`` "zero" or "mean".
    """

    layer: int
    positions: tuple[int, int]
    dims: tuple[int, int]
    mode: str = "zero"


@dataclass(frozen=True)
class Interventions:
    """What to change in one run. ``lens_layer``: the 0-based encoder layer the decoder reads (None: the
    last, i.e. the model itself); ``source``: the task whose patterns ``patched_heads`` receive."""

    lens_layer: int | None = None
    cells: tuple[CellBox, ...] = ()
    ablated_heads: tuple[Head, ...] = ()
    patched_heads: tuple[Head, ...] = ()
    source: Task | None = field(default=None)

    @property
    def active(self) -> bool:
        """True when anything besides the lens changes the run."""
        return bool(self.cells or self.ablated_heads or self.patched_heads)

    def without_changes(self) -> Interventions:
        """The same lens with no ablation or patch: the clean run to compare against."""
        return Interventions(lens_layer=self.lens_layer)


@dataclass(frozen=True)
class Prediction:
    """A greedy answer and, per decoding step, the k likeliest next tokens with their probabilities; ``probs``
    holds every token's probability at each step (vocabulary order)."""

    answer: str
    steps: tuple[tuple[tuple[str, float], ...], ...]
    probs: tuple[tuple[tuple[str, float], ...], ...]

    def probability(self, step: int, token: str) -> float:
        """The probability of ``token`` (a `display_token`) at 0-based ``step``; raises KeyError for a token
        outside the vocabulary, IndexError for a step past the run's."""
        return dict(self.probs[step])[token]


def prediction(data: AttentionData) -> Prediction:
    """The answer, per-step top-k and per-step distribution of a run."""
    steps = tuple(
        tuple((display_token(int(i)), float(p)) for i, p in zip(ids, probs))
        for ids, probs in zip(data.top_ids.tolist(), data.top_probs.tolist())
    )
    labels = [display_token(i) for i in range(data.probs.shape[-1])]
    return Prediction(data.answer, steps, tuple(tuple(zip(labels, row)) for row in data.probs.tolist()))


@torch.no_grad()
def reference_means(model: HookedEncoderDecoder, n: int = REFERENCE_TASKS) -> Float[Tensor, "layer d_model"]:
    """Each encoder layer's output (``hook_resid_post``) averaged over the non-PAD positions of ``n`` tasks."""
    tasks = seen_rule_tasks(n)
    names = [f"encoder.{layer}.hook_resid_post" for layer in range(model.cfg.n_encoder_layers)]
    batch = encode_tasks(tasks, with_answers=False)
    _, cache = model.run_with_cache(batch, names_filter=names, device="cpu")
    keep = (batch.src != PAD).float()[:, :, None]
    return torch.stack([(cache[name] * keep).sum((0, 1)) / keep.sum() for name in names])


def check_interventions(model: HookedEncoderDecoder, task: Task, interventions: Interventions) -> None:
    """Raise ValueError naming the problem when ``task`` is longer than ``model`` reads or an intervention does not
    fit ``model`` or ``task``."""
    cfg = model.cfg
    n_enc = cfg.n_encoder_layers
    if interventions.lens_layer is not None and not 0 <= interventions.lens_layer < n_enc:
        raise ValueError(f"lens layer {interventions.lens_layer + 1} is not in 1..{n_enc}")
    n_pos = encode_tasks([task], with_answers=False).src.shape[1]
    if n_pos > cfg.max_len:
        raise ValueError(
            f"the task is {n_pos} tokens long and this model reads at most {cfg.max_len} (its position table); "
            "give fewer or shorter examples"
        )
    for box in interventions.cells:
        if box.mode not in ABLATION_MODES:
            raise ValueError(f"unknown ablation mode {box.mode!r}; choose one of {', '.join(ABLATION_MODES)}")
        if not 0 <= box.layer < n_enc:
            raise ValueError(f"cells in encoder layer {box.layer + 1}: the model has layers 1..{n_enc}")
        for name, (first, last), size in (("positions", box.positions, n_pos), ("dims", box.dims, cfg.d_model)):
            if not 0 <= first <= last < size:
                raise ValueError(f"cell {name} {first}-{last} are outside 0..{size - 1} (first <= last)")
    for head in interventions.ablated_heads:
        if not (0 <= head.layer < cfg.n_layers(head.stack) and 0 <= head.head < cfg.n_heads):
            raise ValueError(
                f"no head {head.label} in this model: {head.stack} layers 1..{cfg.n_layers(head.stack)}, "
                f"heads 1..{cfg.n_heads}"
            )
    if interventions.patched_heads:
        check_heads(model, list(interventions.patched_heads))
        if interventions.source is None:
            raise ValueError("patching needs a source task to take the attention patterns from")
        check_aligned(task, interventions.source)


def check_aligned(target: Task, source: Task) -> None:
    """Raise ValueError unless the two tasks have the same token roles position by position."""
    batch = encode_tasks([target, source], with_answers=False)
    if not torch.equal(batch.roles[0], batch.roles[1]):
        raise ValueError(
            f"the source task {source} does not align token for token with the task {target}; patterns can only "
            "be patched between tasks of the same layout (same lengths of alphabet, example and query)"
        )


@torch.no_grad()
def source_patterns(
    model: HookedEncoderDecoder, source: Task, heads: Sequence[Head]
) -> dict[int, list[tuple[int, Tensor]]]:
    """The patterns of ``heads`` on ``source``, by encoder layer: ``{layer: [(head, [1, q_pos, k_pos])]}``.

    Only the encoder runs, with every layer's pattern hook attached (as in the patched run)."""
    seen: dict[int, Tensor] = {}
    keep = [
        (f"encoder.{layer}.attn.hook_pattern", lambda x, hook, layer=layer: seen.setdefault(layer, x))
        for layer in range(model.cfg.n_encoder_layers)
    ]
    with model.hooks(fwd_hooks=keep):
        model.encode(encode_tasks([source], with_answers=False).src.to(model.device))
    patches: dict[int, list[tuple[int, Tensor]]] = defaultdict(list)
    for head in heads:
        patches[head.layer].append((head.head, seen[head.layer][:, head.head]))
    return dict(patches)


def intervention_hooks(
    model: HookedEncoderDecoder, interventions: Interventions, means: Tensor | None = None
) -> list[tuple[str, Hook]]:
    """The forward hooks of ``interventions`` (one per hook point, applied in the order listed above).

    ``means`` (`reference_means`) is needed only for mean ablation; raises ValueError when it is missing.
    """
    cfg = model.cfg
    steps: dict[str, list[Hook]] = defaultdict(list)
    patches = (
        source_patterns(model, interventions.source, interventions.patched_heads)
        if interventions.patched_heads and interventions.source is not None
        else {}
    )
    for layer in range(cfg.n_encoder_layers):
        entries = patches.get(layer, [])
        steps[f"encoder.{layer}.attn.hook_pattern"].append(lambda x, hook, entries=entries: replace_heads(x, entries))
    for head in interventions.ablated_heads:
        steps[head.hook("z")].append(lambda z, hook, index=head.head: _zero_head(z, index))
    for box in interventions.cells:
        if box.mode == "mean" and means is None:
            raise ValueError("mean ablation needs the reference means (reference_means(model))")
        fill = None if box.mode == "zero" else means[box.layer, box.dims[0] : box.dims[1] + 1]
        steps[f"encoder.{box.layer}.hook_resid_post"].append(lambda x, hook, box=box, fill=fill: _fill(x, box, fill))
    lens = interventions.lens_layer
    if lens is not None and lens != cfg.n_encoder_layers - 1:
        saved: dict[str, Tensor] = {}
        steps[f"encoder.{lens}.hook_resid_post"].append(lambda x, hook: saved.setdefault("resid", x))
        steps["encoder.ln_final.hook_out"].append(
            lambda x, hook: _final_norm(model, saved.pop("resid")).to(x.dtype) if "resid" in saved else x
        )
    return [(name, _chain(fns)) for name, fns in steps.items()]


def _chain(fns: list[Hook]) -> Hook:
    def run(x: Tensor, hook) -> Tensor:
        for fn in fns:
            x = fn(x, hook)
        return x

    return run


def _zero_head(z: Tensor, head: int) -> Tensor:
    z = z.clone()
    z[:, :, head] = 0.0
    return z


def _fill(x: Tensor, box: CellBox, fill: Tensor | None) -> Tensor:
    x = x.clone()
    rows, dims = slice(box.positions[0], box.positions[1] + 1), slice(box.dims[0], box.dims[1] + 1)
    x[:, rows, dims] = 0.0 if fill is None else fill.to(x.device, x.dtype)
    return x


def _final_norm(model: HookedEncoderDecoder, resid: Tensor) -> Tensor:
    """The final encoder norm applied to ``resid`` (what the model applies to its last layer's output)."""
    norm = model.encoder.ln_final
    return F.layer_norm(resid, resid.shape[-1:], norm.weight, norm.bias, norm.eps)


class _Recorder:
    """Forward hooks that keep a greedy run's encoder activations (one call each) and its decoder
    activations step by step (one call per decoding step, one query position each)."""

    FINAL_NORM = "decoder.ln_final.hook_out"

    def __init__(self, model: HookedEncoderDecoder) -> None:
        cfg = model.cfg
        self.model = model
        self.encoder_names = [f"encoder.{layer}.attn.hook_pattern" for layer in range(cfg.n_encoder_layers)]
        self.resid_names = [f"encoder.{layer}.hook_resid_post" for layer in range(cfg.n_encoder_layers)]
        self.self_names = [f"decoder.{layer}.attn.hook_pattern" for layer in range(cfg.n_decoder_layers)]
        self.cross_names = [f"decoder.{layer}.cross_attn.hook_pattern" for layer in range(cfg.n_decoder_layers)]
        self.encoder: dict[str, Tensor] = {}
        self.steps: dict[str, list[Tensor]] = defaultdict(list)

    def hooks(self) -> list[tuple[str, Hook]]:
        """The recording hooks (to be attached after the intervention hooks, so they see the changed values)."""
        once = [(name, self._keep) for name in self.encoder_names + self.resid_names]
        return once + [(name, self._append) for name in [*self.self_names, *self.cross_names, self.FINAL_NORM]]

    def _keep(self, x: Tensor, hook) -> None:
        self.encoder[hook.name] = x[0]

    def _append(self, x: Tensor, hook) -> None:
        self.steps[hook.name].append(x[0])

    def encoder_patterns(self) -> Float[Tensor, "layer head src src"]:
        return torch.stack([self.encoder[name] for name in self.encoder_names])

    def resid(self) -> Float[Tensor, "layer src d_model"]:
        return torch.stack([self.encoder[name] for name in self.resid_names])

    def decoder_patterns(self, n: int) -> Float[Tensor, "layer head tgt tgt"]:
        """Each layer's causal self-attention over the ``n`` steps: step i's row holds its i + 1 keys."""
        rows = [self.steps[name] for name in self.self_names]
        full = rows[0][0].new_zeros(len(rows), rows[0][0].shape[0], n, n)
        for layer, layer_rows in enumerate(rows):
            for step, row in enumerate(layer_rows):
                full[layer, :, step, : step + 1] = row[:, 0]
        return full

    def cross_patterns(self) -> Float[Tensor, "layer head tgt src"]:
        return torch.stack([torch.cat(self.steps[name], dim=1) for name in self.cross_names])

    def logits(self) -> Float[Tensor, "tgt vocab"]:
        return self.model.unembed(torch.cat(self.steps[self.FINAL_NORM], dim=0))


@torch.no_grad()
def run_task(
    model: HookedEncoderDecoder,
    task: Task,
    interventions: Interventions | None = None,
    top_k: int = 5,
    means: Tensor | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> AttentionData:
    """Greedy-decode ``task`` with ``interventions`` and return what the explorer shows of the run: answer,
    attention of every block, encoder hidden states, the next-token distribution and its top-k per step (all under
    the interventions).

    Raises ValueError for interventions that do not fit the model or the task (see `check_interventions`), a
    ``top_k`` outside 1..vocab, or mean ablation without ``means``.
    """
    interventions = interventions or Interventions()
    if not 1 <= top_k <= model.cfg.vocab_size:
        raise ValueError(f"top_k must be in 1..{model.cfg.vocab_size}, got {top_k}")
    check_interventions(model, task, interventions)
    task = task.with_answer(None)
    inputs = encode_tasks([task], with_answers=False).to(model.device)
    recorder = _Recorder(model)
    with model.hooks(fwd_hooks=intervention_hooks(model, interventions, means) + recorder.hooks()):
        generated = model.greedy_decode(inputs.src, max_new_tokens, drop_finished=False)
    tgt = decoder_input_from_generated(generated)
    n_steps = tgt.shape[1]
    probs = torch.softmax(recorder.logits().float().cpu(), dim=-1)
    return AttentionData(
        task=task,
        answer=decode(generated[0]),
        src_tokens=tuple(display_token(t) for t in inputs.src[0].tolist()),
        src_roles=tuple(ROLES[role] for role in inputs.roles[0].tolist()),
        tgt_tokens=tuple(display_token(t) for t in tgt[0].tolist()),
        predicted=tuple(display_token(t) for t in generated[0, :n_steps].tolist()),
        encoder_attn=recorder.encoder_patterns().cpu(),
        decoder_attn=recorder.decoder_patterns(n_steps).cpu(),
        cross_attn=recorder.cross_patterns().cpu(),
        resid=recorder.resid().cpu(),
        probs=probs,
        top_k=top_k,
    )


def lens_top_k(model: HookedEncoderDecoder, task: Task, layer: int, k: int = 5) -> Prediction:
    """The greedy answer and top-``k`` per step when the decoder reads encoder ``layer`` (1-based).

    Raises ValueError when ``layer`` is not in 1..n_encoder_layers or ``k`` is out of range.
    """
    return prediction(run_task(model, task, Interventions(lens_layer=layer - 1), top_k=k))


def ablate_cells(
    model: HookedEncoderDecoder, task: Task, cells: Sequence[CellBox], means: Tensor | None = None, k: int = 5
) -> Prediction:
    """The answer and top-``k`` with ``cells`` ablated (``means`` from `reference_means` for mean ablation).

    Raises ValueError for cells outside the model or task, or an unknown mode."""
    if means is None and any(box.mode == "mean" for box in cells):
        means = reference_means(model)
    return prediction(run_task(model, task, Interventions(cells=tuple(cells)), top_k=k, means=means))


def ablate_heads(model: HookedEncoderDecoder, task: Task, heads: Sequence[Head], k: int = 5) -> Prediction:
    """The answer and top-``k`` with the outputs of ``heads`` (any block) set to zero.

    Raises ValueError for a head outside the model."""
    return prediction(run_task(model, task, Interventions(ablated_heads=tuple(heads)), top_k=k))


def patch_heads_from(
    model: HookedEncoderDecoder, task: Task, source: Task, heads: Sequence[Head], k: int = 5
) -> Prediction:
    """The answer and top-``k`` of ``task`` with the encoder ``heads``' patterns taken from ``source``.

    Raises ValueError for a head that is not an encoder self-attention head of the model or tasks whose
    token layouts differ."""
    return prediction(run_task(model, task, Interventions(patched_heads=tuple(heads), source=source), top_k=k))


@dataclass(frozen=True)
class StepChange:
    """One decoding step, clean vs intervened: the emitted token and its probability in each run."""

    step: int
    clean: str
    changed: str
    clean_prob: float
    changed_prob: float

    @property
    def differs(self) -> bool:
        """Whether the intervention changed this step's token."""
        return self.clean != self.changed


def compare(clean: Prediction, changed: Prediction) -> list[StepChange]:
    """Per step (up to the longer run), the top token and its probability in both runs ("" past the end)."""
    rows = []
    for step in range(max(len(clean.steps), len(changed.steps))):
        a = clean.steps[step][0] if step < len(clean.steps) else ("", 0.0)
        b = changed.steps[step][0] if step < len(changed.steps) else ("", 0.0)
        rows.append(StepChange(step + 1, a[0], b[0], a[1], b[1]))
    return rows
