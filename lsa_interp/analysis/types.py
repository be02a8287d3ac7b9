"""The concepts every analysis shares: findings and analysis results (heads: `lsa_interp.model.heads`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsa_interp.utils import atomic_write


@dataclass(frozen=True)
class Finding:
    """One row of the findings table: what the paper reports, what we measured, and whether it holds.

    ``value`` is the finding's headline measure as one number (the one its verdict is read from), so that a
    population of models can be compared finding by finding; None where there is no single number."""

    name: str
    paper: str
    ours: str
    holds: bool | None
    detail: str = ""
    value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The finding as a JSON-able row."""
        return {
            "name": self.name,
            "paper": self.paper,
            "ours": self.ours,
            "holds": self.holds,
            "detail": self.detail,
            "value": _jsonable(self.value),
        }


@dataclass
class AnalysisResult:
    """What an analysis returns: JSON-able ``data``, headline ``summary`` numbers, plotly ``figures`` and
    `Finding` rows. `write` saves ``NAME.json`` and one offline ``NAME.html`` with every figure."""

    name: str
    model: str
    summary: dict[str, Any]
    data: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (``figures`` are left to the HTML file)."""
        return {
            "analysis": self.name,
            "model": self.model,
            "summary": _jsonable(self.summary),
            "findings": [f.to_dict() for f in self.findings],
            "data": _jsonable(self.data),
        }

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``NAME.json`` and (if there are figures) ``NAME.html`` atomically; return their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / f"{self.name}.json"}
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
        atomic_write(paths["json"], lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        if self.figures:
            from lsa_interp.viz.html import figures_page

            paths["html"] = out / f"{self.name}.html"
            page = figures_page(f"{self.name}: {self.model}", self.figures, self.findings)
            atomic_write(paths["html"], lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
        return paths


def _jsonable(value: Any) -> Any:
    """Plain JSON values: tensors/arrays become lists, NaN/inf become None, tuple keys become 'a|b'."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {("|".join(map(str, k)) if isinstance(k, tuple) else str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
