"""The ``report`` and ``splice`` commands' helpers: ``--positions`` parsing, the findings table, the progress bar,
one torch thread, and ``report --models`` (the pool and its population replaced by stand-ins)."""

from __future__ import annotations

import shutil

import pytest
import torch

from lsa_interp.analysis import matching, population
from lsa_interp.analysis.splice import CASES, UNUSED, unused_positions
from lsa_interp.commands import report
from lsa_interp.model import HookedEncoderDecoder, save_model
from tests.helpers import TINY, run


@pytest.mark.parametrize(
    ("text", "name", "positions"),
    [
        ("0-31", "positions 0-31", tuple(range(32))),
        ("8-25", "alphabet 8-25", tuple(range(8, 26))),
        ("8-8", "positions 8-8", (8,)),  # a range of one position
        ("3", "positions 3", (3,)),
        (" 8-10 , 33,9", "positions 8-10,33,9", (8, 9, 10, 33)),  # spaces dropped from the name, repeats once
        ("0-7,8-25,26-31", "positions 0-7,8-25,26-31", tuple(range(32))),  # not named by its positions' case
    ],
)
def test_positions_parse_to_a_known_cases_name_or_their_own(text, name, positions):
    parsed = report._parse_case(text, CASES)
    assert parsed[1] == positions
    assert parsed[0] == (name if text != "0-7,8-25,26-31" else "positions 0-31")


@pytest.mark.parametrize("text", ["unused", " unused "])
def test_unused_names_the_per_pair_case(text):
    assert report._parse_case(text, CASES) == (UNUSED, unused_positions) == (UNUSED, CASES[UNUSED])


@pytest.mark.parametrize("text", ["unused,3", "Unused", "8-", "-3", "a", "10-8", "1-2-3", "", "3,", "٣", "1-٣", "²"])
def test_anything_but_ranges_of_positions_is_refused(text):
    with pytest.raises(ValueError, match="bad --positions"):
        report._parse_case(text, CASES)


LONG = "a finding whose text is long enough " * 3


def test_findings_print_as_a_table_with_verdicts_for_one_model(capsys):
    rows = [("matching", "yes", "2.3", True), ("patching", "0.9", "0.1", False), (LONG, "-", "0.5", None)]
    report._print_findings("findings: m", rows)
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert lines[0].strip() == "findings: m"
    assert [cell.strip() for cell in lines[2].strip("┃").split("┃")] == ["finding", "paper", "ours", "verdict"]
    assert [cell.strip() for cell in lines[4].strip("│").split("│")] == ["matching", "yes", "2.3", "holds"]
    assert [cell.strip() for cell in lines[5].strip("│").split("│")] == ["patching", "0.9", "0.1", "does not hold"]
    assert [cell.strip() for cell in lines[6].strip("│").split("│")][1:] == ["-", "0.5", ""]
    assert lines[6].startswith("│ a finding whose text") and lines[7].startswith("│ enough ")  # wrapped
    assert {len(line) for line in lines[1:]} == {140}  # a long finding: the table is 140 columns wide


def test_findings_over_many_models_have_no_verdict_column(capsys):
    report._print_findings("findings over 2 models", [("matching", "yes", "holds in 1/2 of 2", None)], verdicts=False)
    lines = capsys.readouterr().out.splitlines()
    assert [cell.strip() for cell in lines[2].strip("┃").split("┃")] == ["finding", "paper", "ours"]
    assert [cell.strip() for cell in lines[4].strip("│").split("│")] == ["matching", "yes", "holds in 1/2 of 2"]


def test_one_thread():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        report._one_thread()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


class _Population:
    """What `run_population` returns, with fixed findings, conditions and files."""

    def __init__(self):
        self.written = []

    def table(self):
        return [
            {"finding": "matching", "paper": "yes", "holds": 1, "judged": 2, "models": 3},
            {"finding": "copy attention", "paper": "0.4", "holds": 0, "judged": 0, "models": 3},
        ]

    def by_condition(self):
        return {
            "copy-20 / random": {"models": 2, "matching_head": "1/2", "figure5_attention": 0.12345},
            "nocopy-20 / random": {"models": 1, "matching_head": "0/1", "figure5_attention": None},
        }

    def write(self, target):
        self.written.append(target)
        return {"html": target / "population.html", "json": target / "population.json"}


@pytest.fixture
def population_run(monkeypatch, tmp_path):
    calls, made = [], []
    expand = {"p*": [tmp_path / "b", tmp_path / "a"], "q": [tmp_path / "a", tmp_path / "c"]}
    monkeypatch.setattr(matching, "expand_checkpoints", lambda pattern: expand[pattern])
    monkeypatch.setattr(report, "check_models", lambda paths: None)  # stand-in paths: nothing to open

    def run_population(paths, seed, workers, progress=None):
        calls.append((paths, seed, workers))
        for path in paths:
            progress(str(path))
        made.append(_Population())
        return made[-1]

    monkeypatch.setattr(population, "run_population", run_population)
    return calls, made


def test_report_models_runs_each_checkpoint_once_and_prints_the_k_of_n_table(
    population_run, tmp_path, capsys, monkeypatch
):
    calls, made = population_run
    monkeypatch.setenv("COLUMNS", "400")  # the last line on one line
    report._population(["p*", "q"], 3, tmp_path / "out", 7)
    assert calls == [([tmp_path / "b", tmp_path / "a", tmp_path / "c"], 7, 3)]
    assert made[0].written == [tmp_path / "out"] and (tmp_path / "out").is_dir()
    captured = capsys.readouterr()
    assert "report on 3 models" in captured.err and "3/3" in captured.err  # the bar, advanced once per model
    lines = [line.strip() for line in captured.out.splitlines()]
    assert lines[0] == "findings over 3 models"
    assert [cell.strip() for cell in lines[2].strip("┃").split("┃")] == ["finding", "paper", "ours"]
    assert [cell.strip() for cell in lines[4].strip("│").split("│")] == ["matching", "yes", "holds in 1/2 of 3"]
    assert [cell.strip() for cell in lines[5].strip("│").split("│")] == [
        "copy attention", "0.4", "a measure, no verdict (in 3 models)",
    ]  # fmt: skip
    assert lines[7:] == [
        "copy-20 / random: 2 models, matching head 1/2, Figure 5 0.123",
        "nocopy-20 / random: 1 models, matching head 0/1, Figure 5 -",
        f"wrote {tmp_path / 'out' / 'population.html'} and {tmp_path / 'out' / 'population.json'}",
    ]


def test_report_models_writes_to_runs_report_population_by_default(population_run, tmp_path, monkeypatch):
    _, made = population_run
    monkeypatch.chdir(tmp_path)
    report._population(["q"], None, None, 0)
    assert made[0].written == [report.Path("runs") / "report" / "population"]
    assert (tmp_path / "runs" / "report" / "population").is_dir()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    return save_model(HookedEncoderDecoder(TINY), tmp_path_factory.mktemp("models") / "tiny")


def _broken(kind: str, root, good):
    """A --models item that is no loadable checkpoint: weights that fail their SHA-256, an empty folder, a file."""
    path = root / kind
    if kind == "sha":
        shutil.copytree(good, path)
        (path / "model.safetensors").write_bytes(b"\0" * 64)
    elif kind == "empty":
        path.mkdir()
    else:
        path.write_text("epoch,loss\n")
    return path


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("sha", "model.safetensors is corrupted or truncated: SHA-256 "),
        ("empty", "empty is not a checkpoint directory: config.json is missing"),
        ("file", "file is not a checkpoint (not a torch.save file); a model is a shipped checkpoint name, "),
    ],
)
def test_report_models_opens_every_checkpoint_before_the_pool_starts(
    kind, message, tiny_checkpoint, tmp_path, capsys, monkeypatch
):
    """A bad checkpoint after a good one failed only when its worker got to it (~20 s), below a progress bar."""
    monkeypatch.setattr(population, "run_population", lambda *a, **k: pytest.fail("the pool started"))
    bad = _broken(kind, tmp_path, tiny_checkpoint)
    out = tmp_path / "out"
    code, _, err = run(["report", "--models", str(tiny_checkpoint), "--models", str(bad), "--out", str(out)], capsys)
    assert code == 2 and err.startswith("lsa-interp: error: ") and message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_report_models_refuses_an_empty_pattern_by_name(tmp_path, capsys, monkeypatch):
    """--models "" globbed the checkpoints folder itself."""
    monkeypatch.setattr(population, "run_population", lambda *a, **k: pytest.fail("the pool started"))
    code, _, err = run(["report", "--models", "copy-20", "--models", "", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith("lsa-interp: error: Invalid value for '--models': an empty model name; ")
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_splice_names_its_own_options_for_one_rule_twice(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    """It said 'source and target are both 'succ'; patching needs ...', in the library's words, after loading."""
    monkeypatch.setattr(report, "open_model", lambda *a: pytest.fail("the model was loaded"))
    args = ["splice", "--model", str(tiny_checkpoint), "--donor", "succ", "--target", "succ", "--out", str(tmp_path)]
    code, _, err = run(args, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("lsa-interp: error: --donor and --target are both 'succ'; give two different rules")
