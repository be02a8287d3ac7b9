"""Findings over a population: planted models with and without a matching head, the k/N counts, the CLI."""

from __future__ import annotations

import json
import os
from concurrent.futures import Future

import pytest
import torch

from lsa_interp import cli
from lsa_interp.analysis import population
from lsa_interp.analysis.copy_attention import example_match_attention
from lsa_interp.analysis.planted import planted_model
from lsa_interp.analysis.population import FIGURE5, MATCHING, Population, condition, holds_text, run_population
from lsa_interp.model.checkpoint import load_model, save_model

STEPS = ("matching heads", "copy attention")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("population")
    made = []
    for name, matching, preset in (("a", True, "copy-20"), ("b", True, "copy-20"), ("c", False, "nocopy-20")):
        made.append(root / name)
        metadata = {"preset": preset, "train_config": {"batching": "alphabet"}}
        save_model(planted_model(matching=matching), made[-1], metadata=metadata)
    return made


@pytest.mark.slow
def test_counts_over_planted_models(checkpoints, tmp_path):
    seen = []
    population = run_population(checkpoints, workers=2, steps=STEPS, progress=seen.append)
    assert sorted(seen) == sorted(map(str, checkpoints))
    assert [r["model"] for r in population.rows] == [str(c) for c in checkpoints]
    table = {row["finding"]: row for row in population.table()}
    assert (table[MATCHING]["holds"], table[MATCHING]["judged"], table[MATCHING]["models"]) == (2, 3, 3)
    values = table[MATCHING]["values"]
    assert values[str(checkpoints[0])] > 0.25 > values[str(checkpoints[2])]
    conditions = population.by_condition()
    assert conditions["copy-20 / alphabet"]["matching_head"] == "2/2"
    assert conditions["nocopy-20 / alphabet"]["matching_head"] == "0/1"
    assert conditions["copy-20 / alphabet"]["figure5_attention"] is not None
    paths = population.write(tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert len(doc["models"]) == 3 and doc["conditions"]["nocopy-20 / alphabet"]["models"] == 1
    assert "<th>ours</th>" in paths["html"].read_text()


def test_condition_reads_preset_and_batching():
    assert condition({"preset": "copy-20", "train_config": {"batching": "random"}}) == "copy-20 / random"
    assert condition({}) == "unknown / unknown"


def test_no_checkpoints_and_bad_steps_raise():
    with pytest.raises(ValueError, match="at least one"):
        run_population([])


@pytest.mark.slow
def test_report_models_command(checkpoints, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("lsa_interp.analysis.population.DEFAULT_STEPS", STEPS)
    pattern = str(checkpoints[0].parent / "*")
    with pytest.raises(SystemExit) as info:
        cli.main(["report", "--models", pattern, "--workers", "2", "--out", str(tmp_path / "pop")])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "holds in 2/3 of 3" in out and "nocopy-20 / alphabet: 1 models, matching head 0/1" in out
    assert (tmp_path / "pop" / "population.html").is_file()


@pytest.mark.parametrize("where", ["/proc/x", "file", "readonly/sub"])
def test_an_unwritable_out_is_refused_before_any_work(tmp_path, capsys, monkeypatch, where):
    monkeypatch.setattr("lsa_interp.commands.report.open_model", lambda *a: pytest.fail("a model was loaded"))
    (tmp_path / "file").write_text("x")
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly").chmod(0o500)
    out = where if where.startswith("/") else str(tmp_path / where)
    try:
        if where.startswith("readonly") and os.access(tmp_path / "readonly", os.W_OK):
            pytest.skip("running as root: a read-only directory is still writable")
        for command in ("report", "splice"):
            with pytest.raises(SystemExit) as info:
                cli.main([command, "--model", "copy-200", "--out", out])
            err = capsys.readouterr().err
            assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "cannot write to --out" in err
    finally:
        (tmp_path / "readonly").chmod(0o700)


def _finding(name: str, holds: bool | None, value: float | None, paper: str = "p") -> dict:
    return {"name": name, "paper": paper, "ours": "", "holds": holds, "detail": "", "value": value}


OTHER = "another finding"
"""Hand-made rows: m1 and m2 trained with copy tasks, m3 without; m3 has no Figure-5 finding and m2 no OTHER."""
ROWS = [
    {
        "model": "m1",
        "condition": "copy / alphabet",
        "findings": [_finding(MATCHING, True, 0.9, "paper A"), _finding(FIGURE5, None, 0.2)],
        "seconds": 1.0,
    },
    {
        "model": "m2",
        "condition": "copy / alphabet",
        "findings": [_finding(MATCHING, False, 0.1, "paper B"), _finding(FIGURE5, None, 0.3), _finding(OTHER, None, 5)],
        "seconds": 1.0,
    },
    {
        "model": "m3",
        "condition": "nocopy / alphabet",
        "findings": [_finding(OTHER, True, 7), _finding(MATCHING, True, 0.5)],
        "seconds": 1.0,
    },
]


def test_table_counts_holding_and_judged_models_per_finding():
    """k counts the models where a finding holds, judged the models with a verdict, models all of them."""
    table = Population(ROWS).table()
    assert [row["finding"] for row in table] == [MATCHING, FIGURE5, OTHER]  # first-seen order
    matching, figure5, other = table
    assert (matching["holds"], matching["judged"], matching["models"]) == (2, 3, 3)
    assert matching["paper"] == "paper A"  # the first model's claim
    assert matching["values"] == {"m1": 0.9, "m2": 0.1, "m3": 0.5}
    assert (figure5["holds"], figure5["judged"], figure5["models"]) == (0, 0, 3)
    assert figure5["values"] == {"m1": 0.2, "m2": 0.3, "m3": None}  # a model without the finding gives None
    assert (other["holds"], other["judged"]) == (1, 1) and other["values"] == {"m1": None, "m2": 5, "m3": 7}
    assert Population([]).table() == [] and Population(ROWS).finding_names() == [MATCHING, FIGURE5, OTHER]


def test_by_condition_counts_matching_heads_and_averages_figure5_attention():
    """Per condition: the number of models, k/N models with a matching head, the mean Figure-5 attention."""
    conditions = Population(ROWS).by_condition()
    assert list(conditions) == ["copy / alphabet", "nocopy / alphabet"]
    copy, nocopy = conditions["copy / alphabet"], conditions["nocopy / alphabet"]
    assert copy == {"models": 2, "matching_head": "1/2", "figure5_attention": pytest.approx(0.25)}
    assert nocopy == {"models": 1, "matching_head": "1/1", "figure5_attention": None}
    without = [{**ROWS[0], "findings": [_finding(FIGURE5, None, 0.4)]}]
    assert Population(without).by_condition()["copy / alphabet"]["matching_head"] == "-"


def test_written_population_holds_rows_table_conditions_and_the_page(tmp_path, ascii_locale):
    """population.json has the rows, the k/N table and the conditions; the page shows k/N and the attention."""
    paths = Population(ROWS).write(tmp_path / "out" / "deeper")
    assert paths == {"json": tmp_path / "out/deeper/population.json", "html": tmp_path / "out/deeper/population.html"}
    assert Population(ROWS).write(tmp_path / "out" / "deeper") == paths  # an existing directory is reused
    text = paths["json"].read_text(encoding="utf-8")
    assert text.startswith('{\n  "models": [\n    {') and text.endswith("}\n")  # indented by 2, newline-ended
    doc = json.loads(text)
    assert doc["models"] == ROWS and doc["table"][0]["holds"] == 2 and doc["table"][0]["judged"] == 3
    assert doc["conditions"]["copy / alphabet"]["matching_head"] == "1/2"
    page = paths["html"].read_text(encoding="utf-8")
    assert "over 3 models" in page and f"<td>{MATCHING}</td><td>paper A</td><td>holds in 2/3 of 3</td>" in page
    assert "<td>copy / alphabet</td><td>2</td><td>1/2</td><td>0.250</td>" in page
    assert "<td>nocopy / alphabet</td><td>1</td><td>1/1</td><td>-</td>" in page
    assert "<table class='findings'><tr><th>finding</th><th>paper</th><th>ours</th></tr><tr><td>" in page
    no_verdict = "a measure, no verdict (in 3 models)"
    assert f"<td>{no_verdict}</td></tr><tr><td>{OTHER}</td>" in page  # one table row per finding
    assert "<td>0.250</td></tr><tr><td>nocopy / alphabet</td>" in page  # one table row per condition
    with pytest.raises(ValueError, match="Out of range float"):  # strict JSON: no NaN
        Population([{**ROWS[0], "seconds": float("nan")}]).write(tmp_path / "nan")


def test_the_page_escapes_findings_and_shows_each_models_measure_with_its_units(tmp_path):
    """A paper claim such as ``| and > (vertical stripes)`` is text, not markup; each box point's hover is the model
    and its finding's own reading (the measure with its units), and the axes say what they hold."""
    rows = [
        {**ROWS[0], "findings": [{**_finding("pipe | and >", True, 0.9, "a < b"), "ours": "90% of heads"}]},
        {**ROWS[2], "findings": [{**_finding("pipe | and >", False, 0.2, "a < b"), "ours": "20% of heads"}]},
    ]
    population = Population(rows)
    page = population.write(tmp_path)["html"].read_text(encoding="utf-8")
    assert (
        "<td>pipe | and &gt;</td><td>a &lt; b</td><td>holds in 1/2 of 2</td>" in page and "<td>a < b</td>" not in page
    )
    (figure,) = population._figures().values()
    assert list(figure.data[0].text) == ["m1: 90% of heads", "m3: 20% of heads"]
    assert figure.layout.yaxis.title.text and figure.layout.xaxis.title.text == "preset / batching"
    assert "paper: a < b" in figure.layout.title.text


def test_the_page_shows_every_finding_in_every_model_with_its_verdict(tmp_path):
    """The per-model table: one column per model (its folder name and condition), one row per finding, each cell the
    model's own reading and its verdict; a model without the finding has an empty cell. The roles findings, which have
    no single measure (no box plot), are shown there too."""
    rows = [
        {**ROWS[0], "model": "ckpt/m1", "findings": [{**_finding("roles <", True, None), "ours": "0.29 -> 0.34"}]},
        {**ROWS[2], "model": "ckpt/m3", "findings": [{**_finding("roles <", None, None), "ours": "none solved"}]},
        {**ROWS[1], "model": "ckpt/m2", "findings": [{**_finding(OTHER, False, 5), "ours": "5 of 9"}]},
    ]
    page = Population(rows).write(tmp_path)["html"].read_text(encoding="utf-8")
    _, per_model = page.split("<h2>per model</h2>")
    header = (
        "<tr><th>finding</th><th>m1<br>copy / alphabet</th><th>m3<br>nocopy / alphabet</th>"
        "<th>m2<br>copy / alphabet</th></tr>"
    )
    assert per_model.startswith(f"<table class='findings'>{header}<tr><td>")  # the finding rows follow the header
    assert (
        "<tr><td>roles &lt;</td><td>0.29 -&gt; 0.34 (<b>holds</b>)</td><td>none solved (<b>-</b>)</td><td></td></tr>"
        in (per_model)
    )
    assert f"<tr><td>{OTHER}</td><td></td><td></td><td>5 of 9 (<b>no</b>)</td></tr>" in per_model


def test_condition_falls_back_to_the_training_config_preset():
    """The metadata's own preset wins; else the training config's; missing parts read "unknown"."""
    assert condition({"train_config": {"preset": "copy-20", "batching": "alphabet"}}) == "copy-20 / alphabet"
    assert condition({"preset": "a", "train_config": {"preset": "b"}}) == "a / unknown"
    assert condition({"preset": None, "train_config": None}) == "unknown / unknown"


class _InlineExecutor:
    """Runs each submitted call at once in this process and records how the pool was asked for."""

    made: list[_InlineExecutor] = []

    def __init__(self, max_workers, mp_context=None):
        self.max_workers, self.mp_context = max_workers, mp_context
        _InlineExecutor.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        future = Future()
        future.set_result(fn(*args))
        return future


@pytest.fixture
def inline(monkeypatch):
    """run_population with an in-process pool and a stub report that echoes its arguments."""
    _InlineExecutor.made = []
    monkeypatch.setattr(population, "ProcessPoolExecutor", _InlineExecutor)
    stub = lambda path, seed, steps: {"model": path, "condition": "c", "findings": [], "seed": seed, "steps": steps}
    monkeypatch.setattr(population, "_report_one", stub)
    return _InlineExecutor.made


def test_run_population_keeps_the_order_of_paths_and_passes_seed_and_steps(inline, tmp_path):
    """Rows come back in the order of the paths, each made with the given seed and steps; progress per model."""
    seen = []
    result = run_population([tmp_path / "b", "a", "c"], seed=3, workers=2, steps=("x",), progress=seen.append)
    assert [row["model"] for row in result.rows] == [str(tmp_path / "b"), "a", "c"]
    assert all(row["seed"] == 3 and row["steps"] == ("x",) for row in result.rows)
    assert sorted(seen) == sorted([str(tmp_path / "b"), "a", "c"])
    assert inline[0].max_workers == 2 and inline[0].mp_context.get_start_method() == "spawn"


def test_run_population_uses_at_most_one_worker_per_model_and_the_default_steps(inline, monkeypatch):
    """Workers default to the CPU count (1 if unknown), capped at the number of models; steps to DEFAULT_STEPS."""
    monkeypatch.setattr(population, "DEFAULT_STEPS", ("y",))
    monkeypatch.setattr(population.os, "cpu_count", lambda: 3)
    assert run_population(["a", "b"], workers=8).rows[0]["steps"] == ("y",)
    assert run_population(["a"], workers=1).rows[0]["seed"] == 0  # the default seed
    run_population([str(i) for i in range(5)])
    monkeypatch.setattr(population.os, "cpu_count", lambda: None)
    run_population(["a", "b"])
    assert [pool.max_workers for pool in inline] == [2, 1, 3, 1]
    for bad in (0, -1):  # 0 is refused, not read as "the default"
        with pytest.raises(ValueError, match="at least 1"):
            run_population(["a"], workers=bad)


def test_one_model_report_gives_its_condition_and_findings(tmp_path):
    """A worker's row: the checkpoint path, its condition from the metadata, each finding as a dict."""
    path = tmp_path / "m"
    save_model(planted_model(), path, metadata={"preset": "copy-20", "train_config": {"batching": "random"}})
    torch.set_num_threads(2)
    try:
        row = population._report_one(str(path), 1, ("copy attention",))
        assert torch.get_num_threads() == 1  # each worker runs torch on one thread
    finally:
        torch.set_num_threads(1)
    assert row["model"] == str(path) and row["condition"] == "copy-20 / random"
    assert [f["name"] for f in row["findings"]] == [FIGURE5] and row["seconds"] >= 0
    assert row["findings"][0]["value"] == pytest.approx(example_match_attention(load_model(path), seed=1))


def test_the_population_table_on_the_console_has_no_verdict_column(capsys):
    """One model's table says per finding whether it holds; over models the verdict is the count ("ours"), and a
    finding without verdicts says so (it printed "holds in 0/0 of 3" under an empty verdict column)."""
    from lsa_interp.commands.report import _print_findings

    table = Population(ROWS).table()
    _print_findings("over 3", [(r["finding"], r["paper"], holds_text(r), None) for r in table], verdicts=False)
    out = capsys.readouterr().out
    header = lambda text: next(line for line in text.splitlines() if "finding" in line and "paper" in line)
    assert header(out).replace("┃", " ").split() == ["finding", "paper", "ours"]
    assert "holds in 2/3 of 3" in out and "a measure, no verdict (in 3 models)" in out
    _print_findings("one model", [("f", "paper", "0.9", True), ("g", "paper", "0.1", False)])
    out = capsys.readouterr().out
    assert header(out).replace("┃", " ").split() == ["finding", "paper", "ours", "verdict"] and "does not hold" in out
