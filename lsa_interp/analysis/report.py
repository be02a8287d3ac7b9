"""One report of every finding on one model: a findings table (paper vs ours) and every figure, offline.

`run_report` runs each analysis at a size that keeps the whole report under a minute of CPU time on a 2-core
CPU (`REPORT_SIZES`), adds the patching control (the detected matching head against the encoder head with
the lowest matching score), and collects every `Finding`. An analysis that cannot run on this model (e.g.
a val set for a preset the model's metadata does not name) becomes a row that says why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsa_interp.analysis.matching import control_head
from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.model.heads import parse_head
from lsa_interp.model.hooked import HookedEncoderDecoder
from lsa_interp.utils import atomic_write

REPORT_SIZES: dict[str, int] = {
    "roles": 200,
    "patch_pairs": 100,
    "cross_attention": 200,
    "elimination": 200,
    "decoder_lens": 400,
    "rasp": 19,
    "splice_pairs": 100,
}
"""Tasks (or minimal pairs) per analysis in the report; the single commands default to more."""
CONTROL_MAX_FLIP = 0.2
"""The control head must flip at most this fraction of the pairs for the control finding to hold."""
MATCHING_MIN_FLIP = 0.05 ** (1 / 10)
"""The detected matching head(s) must flip at least this fraction for its finding to hold: the paper's 10/10
is at least 5 % likely from a flip rate of 0.741 (as `patching.FLIP_THRESHOLD`)."""
STEPS: tuple[str, ...] = (
    "roles",
    "matching heads",
    "patching",
    "invariance",
    "cross-attention",
    "elimination",
    "decoder lens",
    "rasp",
    "splice",
    "copy attention",
)
"""The report's analyses, in order (`run_report`'s ``steps`` picks some)."""


@dataclass
class Report:
    """Every analysis result of one model, the extra control findings, the failures and the timings."""

    model: str
    results: list[AnalysisResult] = field(default_factory=list)
    extra: list[Finding] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        """Every finding, in the order of the analyses."""
        return [f for r in self.results for f in r.findings] + self.extra

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: findings, each analysis's summary and data, timings."""
        return {
            "model": self.model,
            "findings": [f.to_dict() for f in self.findings],
            "seconds": self.seconds,
            "analyses": {r.name: r.to_dict() for r in self.results},
        }

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``report.json`` and the offline ``report.html`` atomically; return their paths."""
        from lsa_interp.viz.html import figures_page

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "report.json", "html": out / "report.html"}
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
        atomic_write(paths["json"], lambda p: p.write_text(text, encoding="utf-8"))
        figures = {f"{r.name}: {title}": fig for r in self.results for title, fig in r.figures.items()}
        total = sum(self.seconds.values())
        intro = (
            f"<p>Every finding of the paper re-measured on <b>{self.model}</b> in {total:.0f} s of analysis time "
            "(each analysis's own seconds added up; analyses run in parallel take less wall time). "
            "Head labels are 1-based, as in the paper: 2.7 = encoder layer 2, head 7.</p>"
        )
        page = figures_page(f"lsa-interp report: {self.model}", figures, self.findings, intro)
        atomic_write(paths["html"], lambda p: p.write_text(page, encoding="utf-8"))
        return paths


def _steps(model: HookedEncoderDecoder, name: str, seed: int) -> list[tuple[str, Callable[[], AnalysisResult]]]:
    from lsa_interp.analysis import (
        copy_attention,
        cross_attention,
        decoder_lens,
        elimination,
        invariance,
        matching,
        patching,
        rasp,
        roles,
        splice,
    )

    sizes = REPORT_SIZES
    return [
        ("roles", lambda: roles.role_assignment(model, n_tasks=sizes["roles"], seed=seed, model_name=name)),
        ("matching heads", lambda: matching.matching_analysis(model, name)),
        (
            "patching",
            lambda: patching.patching_analysis(model, name, head="all", n_pairs=sizes["patch_pairs"], seed=seed),
        ),
        ("invariance", lambda: invariance.mapping_invariance(model, seed=seed, model_name=name)),
        (
            "cross-attention",
            lambda: cross_attention.cross_attention_targets(
                model, n_tasks=sizes["cross_attention"], seed=seed, model_name=name
            ),
        ),
        (
            "elimination",
            lambda: elimination.elimination(model, n_tasks=sizes["elimination"], seed=seed, model_name=name),
        ),
        (
            "decoder lens",
            lambda: decoder_lens.decoder_lens(
                model, decoder_lens.lens_tasks(model, sizes["decoder_lens"], seed), model_name=name, source="new"
            ),
        ),
        ("rasp", lambda: rasp.rasp_comparison(model, rasp.paper_rasp_tasks(sizes["rasp"], seed), model_name=name)),
        (
            "splice",
            lambda: splice.splice_analysis(model, n_pairs=sizes["splice_pairs"], seed=seed, model_name=name),
        ),
        ("copy attention", lambda: copy_attention.copy_attention_analysis(model, name, seed)),
    ]


def control_findings(report: Report, model: HookedEncoderDecoder, n_pairs: int, seed: int) -> list[Finding]:
    """The detected matching heads patched together (succ -> pred) against their control heads patched together.

    The control of a matching head is the head of its layer with the lowest matching score. The single-head
    flip rates come from the report's patching sweep.
    """
    from lsa_interp.analysis.patching import PAPER_LENGTHS, patch_pairs
    from lsa_interp.analysis.prompts import minimal_pairs

    by_name = {r.name: r for r in report.results}
    if "patching" not in by_name or "matching_heads" not in by_name:
        return []
    paper = "10/10 pred outputs switch to succ (head 2.7)"
    detected_labels = by_name["matching_heads"].summary["matching_heads"]
    if detected_labels == "none":
        return [Finding("patching the matching head", paper, "no matching head detected", False)]
    detected = [parse_head(label.strip(), model.cfg) for label in detected_labels.split(",")]
    scores = by_name["matching_heads"].data["score"]
    controls = [c for c in dict.fromkeys(control_head(scores, h) for h in detected) if c not in detected]
    pairs = minimal_pairs("succ", "pred", n_pairs, seed=seed, alphabets="standard", lengths=PAPER_LENGTHS)
    matched = patch_pairs(model, pairs, detected)
    # switch rates over the pairs the model solves; no verdict under half solved (as `patching_analysis`)
    verdict = matched.solved >= len(pairs) / 2
    unsolved = "" if verdict else f"; no verdict: the model solves {matched.solved} of {len(pairs)} pred prompts"
    single = {label: values["flip_rate"] for label, values in by_name["patching"].data["heads"].items()}
    ours = f"head {matched.label}: {matched.flip_rate:.0%} switch"
    if len(detected) > 1:
        alone = ", ".join(f"{h.label} {single[h.label]:.0%}" for h in detected)
        ours = f"heads {matched.label}: {matched.flip_rate:.0%} switch (alone: {alone})"
    findings = [
        Finding(
            "patching the matching head",
            paper,
            ours,
            matched.flip_rate >= MATCHING_MIN_FLIP if verdict else None,
            f"holds when >= {MATCHING_MIN_FLIP:.0%} of the solved prompts flip" + unsolved,
            matched.flip_rate,
        )
    ]
    if controls:
        control = patch_pairs(model, pairs, controls)
        which = (
            f"head {control.label} (lowest matching score in layer {controls[0].layer + 1})"
            if len(controls) == 1
            else f"heads {control.label} (lowest matching score of each matching head's layer)"
        )
        findings.append(
            Finding(
                "control head flips few",
                f"(not in the paper) at most {CONTROL_MAX_FLIP:.0%}",
                f"{which}: {control.flip_rate:.0%} switch",
                control.flip_rate <= CONTROL_MAX_FLIP if verdict else None,
                f"holds when <= {CONTROL_MAX_FLIP:.0%} of the solved prompts flip" + unsolved,
                value=control.flip_rate,
            )
        )
    return findings


def run_step(
    model: HookedEncoderDecoder, model_name: str, seed: int, name: str
) -> tuple[AnalysisResult | Finding, float]:
    """Run the report step ``name`` (see `STEPS`) on ``model``; return its result (or a `Finding` saying why it
    could not run) and its seconds. Raises ValueError for an unknown step."""
    chosen = dict(_steps(model, model_name, seed))
    if name not in chosen:
        raise ValueError(f"unknown report step {name!r}; choose from {', '.join(STEPS)}")
    started = time.perf_counter()
    try:
        outcome: AnalysisResult | Finding = chosen[name]()
    except ValueError as err:
        outcome = Finding(name, "-", f"could not run: {err}", None)
    return outcome, round(time.perf_counter() - started, 1)


def assemble(
    model: HookedEncoderDecoder,
    model_name: str,
    seed: int,
    outcomes: Mapping[str, tuple[AnalysisResult | Finding, float]],
) -> Report:
    """The `Report` of the `run_step` ``outcomes`` (by step name, put in the order of `STEPS`), with the control
    findings computed on ``model``."""
    report = Report(model_name)
    for name in STEPS:
        if name in outcomes:
            outcome, seconds = outcomes[name]
            (report.results if isinstance(outcome, AnalysisResult) else report.extra).append(outcome)
            report.seconds[name] = seconds
    report.extra[:0] = control_findings(report, model, REPORT_SIZES["patch_pairs"], seed)
    return report


def run_report(
    model: HookedEncoderDecoder,
    model_name: str,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    steps: Sequence[str] | None = None,
) -> Report:
    """Run every analysis (or those named in ``steps``, see `STEPS`) on ``model`` in this process and return
    the `Report` (``progress(name)`` before each analysis). Raises ValueError for an unknown step."""
    unknown = sorted(set(steps or ()) - set(STEPS))
    if unknown:
        raise ValueError(f"unknown report step(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    outcomes = {}
    for name in STEPS:
        if steps is not None and name not in steps:
            continue
        if progress:
            progress(name)
        outcomes[name] = run_step(model, model_name, seed, name)
    return assemble(model, model_name, seed, outcomes)
