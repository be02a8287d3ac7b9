"""The path-patching analysis: `lsa_interp.analysis.path_patching` on the minimal pairs a model solves, as a JSON
record, heat maps and unjudged findings (path patching is not a method of the paper)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from lsa_interp.analysis.activation_patching import (
    answers_text,
    grid_data,
    letters_text,
    offered_and_solved,
    patching_heatmap,
)
from lsa_interp.analysis.path_patching import (
    PatchEffect,
    PathPatcher,
    PathSweep,
    Positions,
    Sender,
    Target,
    check_chain,
    check_direct,
    check_frozen,
    check_paths,
    labels,
    parse_positions,
    parse_receivers,
    parse_senders,
    senders_reaching,
    short_labels,
)
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.heads import Head, parse_heads
from lsa_interp.model.hooked import HookedEncoderDecoder

_NOT_IN_PAPER = "not in the paper (path patching, as in Wang et al.'s IOI circuit)"


def path_patching_analysis(
    model: HookedEncoderDecoder,
    model_name: str = "model",
    senders: Sequence[str] = (),
    receivers: Sequence[str] = (),
    source: str = "succ",
    target: str = "pred",
    n_pairs: int = 100,
    seed: int = 0,
    alphabets: str = "standard",
    length: int = 3,
    progress: Callable[[int, int], None] | None = None,
    frozen: Sequence[str] = (),
    through: Sequence[str] = (),
    sender_positions: str | None = None,
    direct: bool = False,
) -> AnalysisResult:
    """Path patching from the ``senders`` (heads, ``"1.3"``, at some positions only: ``"1.3@31,33"``) into the
    ``receivers`` (``"2.3/v"``, ``"cross:3.1/kv"``, ``"memory"``) on the pairs of `offered_and_solved`: with both,
    the one path beside the senders' whole effect; with senders only, every receiver they reach (a heat map, and the
    memory); with receivers only, every head as their sender (a heat map). Raises ValueError for neither, bad labels,
    receivers the senders do not reach, fewer than one pair, or a model that answers no pair right. Labels may name
    a layer's heads (``"3.*/kv"``). With ``frozen`` heads (``"2.7"``, ``"2.*"``) it also measures the senders' whole
    effect with those heads' outputs kept at the target prompt's: what is left with the paths through them cut. With
    ``through`` hops (one receiver label each, ``"2.3"``, ``"2.*/v"``) the one path runs senders -> hops ->
    receivers (`patch_path`'s chain), and with ``direct`` along the senders' direct path beside it. With receivers
    only, ``sender_positions`` (``"31,33"``) takes each head's output at those positions only. Raises as
    `path_request` too."""
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be at least 1 (minimal pairs offered), got {n_pairs}")
    asked = path_request(model.cfg, senders, receivers, frozen, through, sender_positions, direct)
    heads, targets, cut = asked.senders, asked.receivers, asked.frozen
    offered, pairs = offered_and_solved(model, source, target, n_pairs, seed, alphabets, length)
    summary: dict[str, float | int | str] = {
        "source rule (patched in)": source,
        "target rule (run)": target,
        "pairs offered": len(offered),
        "pairs solved (both prompts)": len(pairs),
    }
    patcher = PathPatcher(model, pairs)
    if heads and targets:
        return _one_path(patcher, model_name, asked, summary)
    at = asked.sender_positions
    sweep = patcher.paths_from(heads, progress) if heads else patcher.paths_into(targets, progress, positions=at)
    return _sweep_result(patcher, model_name, heads, cut, sweep, summary)


@dataclass(frozen=True)
class PathRequest:
    """What a path-patching analysis is asked for, parsed and checked (`path_request`)."""

    senders: list[Sender]
    receivers: list[Target]
    frozen: list[Head]
    through: list[list[Target]]
    sender_positions: Positions
    direct: bool = False


def path_request(
    cfg: ModelConfig,
    senders: Sequence[str] = (),
    receivers: Sequence[str] = (),
    frozen: Sequence[str] = (),
    through: Sequence[str] = (),
    sender_positions: str | None = None,
    direct: bool = False,
) -> PathRequest:
    """The labels of `path_patching_analysis` parsed for a model of ``cfg`` and checked together, before anything
    runs. Raises ValueError for neither senders nor receivers, bad labels, receivers the senders do not reach,
    frozen heads or hops without the senders (and receivers) they need, a head both sending and frozen, and sender
    positions beside senders, without receivers or read by none of them."""
    if not senders and not receivers:
        raise ValueError("give senders (heads such as '1.3'), receivers ('2.3/v', 'memory') or both")
    heads = [sender for label in senders for sender in parse_senders(label, cfg)]
    targets = [receiver for label in receivers for receiver in parse_receivers(label, cfg)]
    cut = [head for label in frozen for head in parse_heads(label, cfg)]
    hops = [parse_receivers(label, cfg) for label in through]
    at = None if sender_positions is None else parse_positions(sender_positions)
    if at is not None and heads:  # (neither senders nor receivers is refused above)
        raise ValueError(
            "sender positions apply to the sweep of every head into receivers: give receivers and no senders (a "
            "sender's own positions follow '@', e.g. '1.3@31,33')"
        )
    if cut and not heads:
        raise ValueError("frozen heads cut the paths from senders: give sender heads as well (e.g. '1.3')")
    if hops and not (heads and targets):
        raise ValueError("a chain runs from senders through hops into receivers: give sender heads and receivers too")
    if heads:
        check_chain(cfg, heads, hops, targets)
        if direct:
            check_direct(heads, hops)
        check_frozen(heads, cut)
    else:
        reaching = [Sender(head, at) for head in senders_reaching(cfg, targets)]
        if at is not None:  # one set of positions for every head: the first one's check holds for all
            check_paths(cfg, reaching[:1], targets)
    if direct and not heads:
        raise ValueError("a direct path joins a chain's: give sender heads, through hops and receivers")
    return PathRequest(heads, targets, cut, hops, at, direct)


def _one_path(patcher: PathPatcher, model_name: str, asked: PathRequest, summary: dict) -> AnalysisResult:
    heads, hops, targets, cut = asked.senders, asked.through, asked.receivers, asked.frozen
    path = patcher.patch_path(heads, targets, through=hops, direct=asked.direct)
    name = " -> ".join(_joined(stage, patcher.model.cfg.n_heads) for stage in [heads, *hops, targets])
    name += " and directly" if asked.direct else ""
    summary |= {"path": name, "path: normalised": path.normalized} | _answer_rows("path", path)
    findings = [Finding(f"Path {name}", _NOT_IN_PAPER, _effect_text(path), None, value=path.normalized)]
    data = {"senders": labels(heads), "through": [labels(hop) for hop in hops], "receivers": labels(targets)}
    data["direct"] = asked.direct
    data["path"] = path
    effects = {f"path {name}": path} | _whole_effects(patcher, heads, cut, summary, findings, data)
    figures = {"path": _path_bars(effects, summary)}
    return AnalysisResult("path_patching", model_name, summary, _jsonable(data), figures, findings)


def _whole_effects(
    patcher: PathPatcher,
    heads: list[Sender],
    cut: list[Head],
    summary: dict,
    findings: list[Finding],
    data: dict,
) -> dict[str, PatchEffect]:
    """The senders' whole effect, and with ``cut`` the effect left with those heads frozen, added to ``summary``,
    ``findings`` and ``data``; returns them by name."""
    n_heads = patcher.model.cfg.n_heads
    senders, frozen = _joined(heads, n_heads), _joined(cut, n_heads)
    data["whole"] = patcher.sender_effect(heads)
    effects, titles = {"senders' whole effect": data["whole"]}, [f"Whole effect of {senders}"]
    if cut:
        data["frozen"], data["frozen_effect"] = labels(cut), patcher.sender_effect(heads, cut)
        effects[f"senders' effect with {frozen} frozen"] = data["frozen_effect"]
        titles.append(f"Effect of {senders} with {frozen} frozen")
    for (name, effect), title in zip(effects.items(), titles):
        summary |= {f"{name}: normalised": effect.normalized} | _answer_rows(name, effect)
        findings.append(Finding(title, _NOT_IN_PAPER, _effect_text(effect), None, value=effect.normalized))
    return effects


def _path_bars(effects: dict[str, PatchEffect], summary: dict):  # pragma: no mutate block
    """A bar per effect: the path's normalised logit difference beside the senders' whole effect (and what is left of
    it with heads frozen); hover shows the answers."""
    import plotly.graph_objects as go

    answers = [
        "answers not decoded" if e.source_answers != e.source_answers else _answers_line(e) for e in effects.values()
    ]
    rules = f"{summary['source rule (patched in)']} into {summary['target rule (run)']}"
    return go.Figure(
        go.Bar(
            x=list(effects),
            y=[e.normalized for e in effects.values()],
            customdata=answers,
            hovertemplate="%{x}<br>normalised %{y:.3f}<br>%{customdata}<extra></extra>",
        ),
        layout={"title": f"path patching from {rules}", "yaxis": {"title": "normalised logit difference"}},
    )


def _sweep_result(
    patcher: PathPatcher,
    model_name: str,
    heads: list[Sender],
    cut: list[Head],
    sweep: PathSweep,
    summary: dict,
) -> AnalysisResult:
    grid, normalized = sweep.grid, sweep.normalized
    summary |= {"logit diff, source run": sweep.source_logit_diff, "logit diff, target run": sweep.target_logit_diff}
    findings, data = [], {"grid": _grid_data(sweep)}
    if not torch.isnan(normalized).all():
        best = int(normalized.nan_to_num(float("-inf")).argmax())
        row, column = divmod(best, normalized.shape[1])
        where = f"{grid.rows[row]}, {grid.columns[column]}"
        summary[f"{grid.site}: largest"] = f"{where}: {float(normalized[row, column]):.3f}"
        findings.append(
            Finding(
                f"Largest {grid.site}",
                _NOT_IN_PAPER,
                f"{where}: {float(normalized[row, column]):.2f} of the logit difference"
                + answers_text(grid.source_answers[row, column], grid.other_answers[row, column])
                + letters_text(grid.letters_at(row, column)),
                None,
                value=float(normalized[row, column]),
            )
        )
    if heads:
        _whole_effects(patcher, heads, cut, summary, findings, data)
    if sweep.memory is not None:
        summary["path into the memory: normalised"] = sweep.memory.normalized
        findings.append(
            Finding(
                f"Path {_joined(heads, patcher.model.cfg.n_heads)} -> memory",
                _NOT_IN_PAPER,
                _effect_text(sweep.memory),
                None,
                value=sweep.memory.normalized,
            )
        )
        data["memory"] = sweep.memory
    title = f"{grid.site}: patched from {summary['source rule (patched in)']} into {summary['target rule (run)']}"
    figures = {grid.site: patching_heatmap(grid, normalized, title)}
    return AnalysisResult("path_patching", model_name, summary, _jsonable(data), figures, findings)


def _grid_data(sweep: PathSweep) -> dict:
    return {"site": sweep.grid.site} | grid_data(sweep.grid, sweep.normalized)


def _joined(items: Sequence[Head | Sender | Target], n_heads: int) -> str:
    return ", ".join(short_labels(items, n_heads))


def _effect_text(effect: PatchEffect) -> str:
    answers = answers_text(torch.tensor(effect.source_answers), torch.tensor(effect.other_answers))
    return f"{effect.normalized:.2f} of the logit difference{answers}{letters_text(effect.source_letters)}"


def _answers_line(effect: PatchEffect) -> str:
    shares = answers_text(torch.tensor(effect.source_answers), torch.tensor(effect.other_answers))
    return shares.removeprefix(", ") + letters_text(effect.source_letters)


def _answer_rows(name: str, effect: PatchEffect) -> dict[str, float]:
    if effect.source_answers != effect.source_answers:
        return {}
    letters = {
        f"{name}: source's token at answer position {position}": share
        for position, share in enumerate(effect.source_letters, 1)
        if share == share
    }
    shares = {f"{name}: source's answers": effect.source_answers, f"{name}: neither answer": effect.other_answers}
    return shares | letters


def _jsonable(data: dict) -> dict:
    """``data`` with each `PatchEffect` as a dict."""
    return {key: vars(value) if isinstance(value, PatchEffect) else value for key, value in data.items()}
