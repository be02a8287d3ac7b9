"""Activation patching (denoising) on minimal pairs: which activations carry the difference between two rules.

A minimal pair's prompts share the alphabet, the example input and the query; only the example output follows a
different rule (`lsa_interp.analysis.prompts.minimal_pairs`). We run the *target* prompt (the "corrupted" run of
TransformerLens's patching) with one activation taken from the *source* prompt (the "clean" run) and read the first
decoding step where the two answers part: both runs are teacher-forced on the answers' shared prefix (``pred`` on
``bcd`` gives ``acd``, ``succ`` gives ``bce``: step 0, ``a`` against ``b``). The measure is the logit difference
there, source letter minus target letter, its mean over pairs normalised as TransformerLens's patching does it::

    (patched - target run) / (source run - target run)

1 means the activation alone moves the answer's logits all the way to the source prompt's, 0 that it changes
nothing. A second number counts the pairs whose top token at that step becomes the source answer's letter.

Sites (TransformerLens's ``get_act_patch_resid_pre``, ``..._attn_out``, ``..._mlp_out`` and
``..._attn_head_out_all_pos``): the encoder's residual stream (``hook_resid_pre`` of each layer, then the memory
``encoder.ln_final.hook_out``), its attention and MLP outputs, one position at a time; and every head's ``hook_z``
at all positions, for the encoder, the decoder's self-attention and its cross-attention. The positions of all pairs
must line up, so the pairs come from one window length. Every run (source, target, patched) calls each attention's
hook points, so all of them execute the same floating-point operations (docs/hooks.md: the fused path rounds
differently): patching nothing gives the target run, patching a whole layer the source run, to the bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lsa_interp.analysis.activations import eval_mode
from lsa_interp.analysis.pair_batch import pair_batch
from lsa_interp.analysis.prompts import MinimalPair, minimal_pairs
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.data.tokenizer import TokenBatch, decode_batch, encode_tasks
from lsa_interp.data.vocab import ROLES, display_token
from lsa_interp.model.hooked import HookedEncoderDecoder

RESID, ATTN_OUT, MLP_OUT, HEADS = "encoder residual", "encoder attention output", "encoder MLP output", "heads"
SITES: tuple[str, ...] = (RESID, ATTN_OUT, MLP_OUT, HEADS)
"""The grids `patch_activations` can fill: three of (hook, encoder position), one of (attention module, head)."""
_ROLE_SHORT = {"example_in": "in", "example_out": "out", "query": "q"}
Patch = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class PatchingGrid:
    """One site's results: a row per hook (or attention module), a column per position (or head)."""

    site: str
    hooks: tuple[str, ...]
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    logit_diff: Float[Tensor, "row column"]
    """Mean over pairs of the patched run's logit difference (source letter minus target letter)."""
    switched: Float[Tensor, "row column"]
    """Fraction of pairs whose top token at the measured step becomes the source answer's letter."""


@dataclass(frozen=True)
class ActivationPatching:
    """What `patch_activations` returns: the grids and the two unpatched runs they are measured against."""

    source_rule: str
    target_rule: str
    pairs: int
    positions: tuple[str, ...]
    source_logit_diff: float
    target_logit_diff: float
    grids: dict[str, PatchingGrid]

    def normalized(self, site: str) -> Float[Tensor, "row column"]:
        """The grid of ``site`` as (patched - target run) / (source run - target run). Raises KeyError for a site
        that was not patched."""
        if site not in self.grids:
            raise KeyError(f"site {site!r} was not patched; patched: {', '.join(self.grids)}")
        span = self.source_logit_diff - self.target_logit_diff
        return (self.grids[site].logit_diff - self.target_logit_diff) / span


def patch_activations(
    model: HookedEncoderDecoder,
    pairs: Sequence[MinimalPair],
    sites: Sequence[str] = SITES,
    progress: Callable[[int, int], None] | None = None,
) -> ActivationPatching:
    """Patch each activation of ``sites`` from the source prompts into the target prompts of ``pairs``, one at a
    time, all pairs in one batch; ``progress(done, total)`` after each patched run. Returns the grids.

    Raises ValueError for an unknown site, pairs that `pair_batch` refuses, or pairs whose prompts do not share
    one token layout across pairs (use one window length)."""
    unknown = [site for site in sites if site not in SITES]
    if unknown or not sites:
        raise ValueError(f"unknown sites {unknown}; choose from: {', '.join(SITES)}")
    with torch.no_grad(), eval_mode(model):
        batch = pair_batch(pairs)
        positions = _position_labels(batch.source, batch.target)
        tgt = encode_tasks([p.target for p in pairs], with_answers=True).tgt_in.to(model.device)
        measure = _measure_at_parting(pairs)
        layout = [(site, *_site(model, site, positions)) for site in dict.fromkeys(sites)]
        needed = [_hook_name(hook, site) for site, hooks, _, _ in layout for hook in hooks]
        source, target = batch.source.to(model.device), batch.target.to(model.device)
        saved = _run(model, source, tgt, {}, save=needed)
        source_diff, _ = measure(saved.pop("logits"))
        target_diff, _ = measure(_run(model, target, tgt, {})["logits"])
        total, done = sum(len(hooks) * len(columns) for _, hooks, _, columns in layout), 0
        grids = {}
        for site, hooks, rows, columns in layout:
            diff, switched = torch.zeros(len(hooks), len(columns)), torch.zeros(len(hooks), len(columns))
            for row, hook in enumerate(hooks):
                name = _hook_name(hook, site)
                for column in range(len(columns)):
                    patch = partial(_replace, donor=saved[name], column=column, heads=site == HEADS)
                    logits = _run(model, target, tgt, {name: patch})["logits"]
                    diff[row, column], switched[row, column] = measure(logits)
                    done += 1
                    if progress:
                        progress(done, total)
            grids[site] = PatchingGrid(site, tuple(hooks), tuple(rows), tuple(columns), diff, switched)
        source_rule, target_rule = pairs[0].source.transformation or "", pairs[0].target.transformation or ""
        return ActivationPatching(
            source_rule, target_rule, len(pairs), positions, float(source_diff), float(target_diff), grids
        )


def activation_patching_analysis(
    model: HookedEncoderDecoder,
    model_name: str = "model",
    source: str = "succ",
    target: str = "pred",
    n_pairs: int = 100,
    seed: int = 0,
    alphabets: str = "standard",
    length: int = 3,
    sites: Sequence[str] = SITES,
    progress: Callable[[int, int], None] | None = None,
) -> AnalysisResult:
    """`patch_activations` on the ``n_pairs`` minimal pairs of ``length``-letter windows (fewer where fewer exist)
    that the model answers right on both sides: the grids normalised, a heat map of each and a row per site naming
    its largest effect (not in the paper: reported, not judged). Raises ValueError for unknown rules or sites, rules
    without minimal pairs, or a model that answers no pair right."""
    offered = minimal_pairs(source, target, n_pairs, seed=seed, alphabets=alphabets, lengths=(length,), at_most=True)
    pairs = solved_pairs(model, offered)
    if not pairs:
        raise ValueError(_none_solved(model, offered))
    result = patch_activations(model, pairs, sites, progress)
    summary: dict[str, float | int | str] = {
        "source rule (patched in)": source,
        "target rule (run)": target,
        "pairs offered": len(offered),
        "pairs solved (both prompts)": len(pairs),
        "logit diff, source run": result.source_logit_diff,
        "logit diff, target run": result.target_logit_diff,
    }
    findings, figures, data = [], {}, {"positions": list(result.positions), "grids": {}}
    for site, grid in result.grids.items():
        normalized = result.normalized(site)
        row, column = divmod(int(normalized.argmax()), normalized.shape[1])
        where = f"{grid.rows[row]}, {grid.columns[column]}"
        summary[f"{site}: largest"] = f"{where}: {float(normalized[row, column]):.3f}"
        findings.append(
            Finding(
                f"Largest effect: {site}",
                "not in the paper (activation patching, as TransformerLens's patching module)",
                f"{where}: {float(normalized[row, column]):.2f} of the logit difference, "
                f"{float(grid.switched[row, column]):.0%} of the pairs switch",
                None,
                value=float(normalized[row, column]),
            )
        )
        figures[site] = _heatmap(grid, normalized, f"{site}: patched from {source} into {target}")
        data["grids"][site] = {
            "hooks": list(grid.hooks),
            "rows": list(grid.rows),
            "columns": list(grid.columns),
            "normalized": normalized,
            "logit_diff": grid.logit_diff,
            "switched": grid.switched,
        }
    return AnalysisResult("activation_patching", model_name, summary, data, figures, findings)


def solved_pairs(model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]) -> list[MinimalPair]:
    """The pairs whose source and target prompts the model both answers right (greedy). Raises ValueError for pairs
    that `pair_batch` refuses."""
    source, target = _greedy_answers(model, pairs)
    right = zip(source, target, pairs)
    return [pair for s, t, pair in right if s == pair.source_answer and t == pair.target_answer]


def _greedy_answers(model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]) -> tuple[list[str], list[str]]:
    batch = pair_batch(pairs)
    with eval_mode(model):
        return decode_batch(model.generate(batch.source)), decode_batch(model.generate(batch.target))


def _none_solved(model: HookedEncoderDecoder, pairs: Sequence[MinimalPair]) -> str:
    """Why no pair is usable: how many prompts of each side the model answers right, and how many pairs it gives one
    answer for both prompts (it does not tell the two rules apart)."""
    source, target = _greedy_answers(model, pairs)
    rules = pairs[0].source.transformation, pairs[0].target.transformation
    right = [
        sum(a == p.source_answer for a, p in zip(source, pairs)),
        sum(a == p.target_answer for a, p in zip(target, pairs)),
    ]
    same = sum(s == t for s, t in zip(source, target))
    return (
        f"the model answers both prompts of none of the {len(pairs)} {rules[0]}/{rules[1]} minimal pairs (right: "
        f"{right[0]} {rules[0]} and {right[1]} {rules[1]} prompts; the same answer to both prompts of {same} pairs); "
        "activation patching needs pairs it solves"
    )


def _site(
    model: HookedEncoderDecoder, site: str, positions: tuple[str, ...]
) -> tuple[list[str], list[str], tuple[str, ...]]:
    """(hooks or attention modules, row labels, column labels) of ``site``."""
    cfg = model.cfg
    layers = range(cfg.n_encoder_layers)
    if site == HEADS:
        modules = [f"encoder.{layer}.attn" for layer in layers]
        for layer in range(cfg.n_decoder_layers):
            modules += [f"decoder.{layer}.attn", f"decoder.{layer}.cross_attn"]
        return modules, [_module_label(m) for m in modules], tuple(f"head {h + 1}" for h in range(cfg.n_heads))
    if site == RESID:
        hooks = [f"encoder.{layer}.hook_resid_pre" for layer in layers] + ["encoder.ln_final.hook_out"]
        rows = ["embeddings", *(f"after layer {layer}" for layer in range(1, cfg.n_encoder_layers)), "memory"]
        return hooks, rows, positions
    suffix = "hook_attn_out" if site == ATTN_OUT else "hook_mlp_out"
    return [f"encoder.{layer}.{suffix}" for layer in layers], [f"layer {layer + 1}" for layer in layers], positions


def _hook_name(hook: str, site: str) -> str:
    return f"{hook}.hook_z" if site == HEADS else hook


def _module_label(module: str) -> str:
    """``decoder.1.cross_attn`` -> ``decoder 2 cross-attention`` (layers 1-based, as the paper counts them)."""
    stack, layer, kind = module.split(".")
    return f"{stack} {int(layer) + 1} {'cross-attention' if kind == 'cross_attn' else 'self-attention'}"


def _position_labels(source: TokenBatch, target: TokenBatch) -> tuple[str, ...]:
    """One label per encoder position shared by every prompt: its token where all prompts have the same one (``a·0``),
    else its role and place in it (``out1·31``). Raises ValueError when the prompts' layouts differ."""
    roles = torch.cat([source.roles, target.roles])
    if not (roles == roles[0]).all():
        row = int((roles != roles[0]).any(1).nonzero()[0]) % len(source)
        raise ValueError(
            f"pair {row} does not share the first pair's token layout; activation patching compares positions across "
            "pairs, so all prompts need one layout (minimal pairs of one window length)"
        )
    tokens = torch.cat([source.src, target.src])
    labels, seen = [], dict.fromkeys(ROLES, 0)
    for position, role in enumerate(ROLES[int(r)] for r in roles[0]):
        seen[role] += 1
        same = bool((tokens[:, position] == tokens[0, position]).all())
        name = display_token(int(tokens[0, position])) if same else f"{_ROLE_SHORT.get(role, role)}{seen[role]}"
        labels.append(f"{name}·{position}")
    return tuple(labels)


def _measure_at_parting(pairs: Sequence[MinimalPair]) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """A function of the decoder's logits returning (mean logit difference, fraction switched) at each pair's first
    answer step where the source and target answers part (an answer's EOS counts: ``ab`` parts from ``abc`` at
    step 2)."""
    source = encode_tasks([p.source for p in pairs], with_answers=True).tgt_out
    target = encode_tasks([p.target for p in pairs], with_answers=True).tgt_out
    width = max(source.shape[1], target.shape[1])
    source, target = (torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-1) for t in (source, target))
    step = (source != target).int().argmax(1)
    rows = torch.arange(len(pairs))
    source_token, target_token = source[rows, step], target[rows, step]

    def measure(logits: Float[Tensor, "batch tgt_pos vocab"]) -> tuple[Tensor, Tensor]:
        at = logits.float().cpu()[rows, step]
        diff = at[rows, source_token] - at[rows, target_token]
        return diff.mean(), (at.argmax(-1) == source_token).float().mean()

    return measure


def _run(
    model: HookedEncoderDecoder,
    inputs: TokenBatch,
    tgt: Int[Tensor, "batch tgt_pos"],
    patches: dict[str, Patch],
    save: Sequence[str] = (),
) -> dict[str, Tensor]:
    """Run ``inputs`` teacher-forced on ``tgt`` with every attention on its hooked path, ``patches`` applied and
    the ``save`` hooks' outputs kept; returns them with the ``"logits"``."""
    saved: dict[str, Tensor] = {}
    hooks: list[tuple[str | Callable[[str], bool], Callable]] = [(_is_pattern, _keep)]
    hooks += [(name, partial(_apply, patch=patch)) for name, patch in patches.items()]
    hooks += [(name, partial(_store, into=saved)) for name in save]
    with model.hooks(fwd_hooks=hooks):
        saved["logits"] = model(inputs, tgt)
    return saved


def _is_pattern(name: str) -> bool:
    return name.endswith("hook_pattern")


def _keep(tensor: Tensor, hook) -> None:
    """A hook that changes nothing: attaching it moves an attention module onto its hooked (explicit) path."""


def _apply(tensor: Tensor, hook, patch: Patch) -> Tensor:
    return patch(tensor)


def _store(tensor: Tensor, hook, into: dict[str, Tensor]) -> None:
    into[hook.name] = tensor.detach().clone()


def _replace(tensor: Tensor, donor: Tensor, column: int, heads: bool) -> Tensor:
    """``tensor`` with one head (``heads``: axis 2 of ``[batch, pos, head, d_head]``) or one position (axis 1) taken
    from ``donor``."""
    patched = tensor.clone()
    if heads:
        patched[:, :, column] = donor[:, :, column]
    else:
        patched[:, column] = donor[:, column]
    return patched


def _heatmap(grid: PatchingGrid, normalized: Tensor, title: str):  # pragma: no mutate block
    """A plotly heat map of the normalised grid; hovering shows the mean logit difference and the switched share."""
    import plotly.graph_objects as go

    detail = torch.stack([grid.logit_diff, grid.switched], -1).tolist()
    return go.Figure(
        go.Heatmap(
            z=normalized.tolist(),
            x=list(grid.columns),
            y=list(grid.rows),
            customdata=detail,
            colorscale="RdBu",
            reversescale=True,
            zmid=0,
            colorbar={"title": "normalised"},
            hovertemplate="%{y}, %{x}<br>normalised %{z:.3f}<br>logit diff %{customdata[0]:.3f}"
            "<br>switched %{customdata[1]:.0%}<extra></extra>",
        ),
        layout={"title": title, "yaxis": {"autorange": "reversed"}, "xaxis": {"tickangle": -60}},
    )
