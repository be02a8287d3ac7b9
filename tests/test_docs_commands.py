"""Every command written in the docs names a real command and real options; every relative link resolves.

The commands (`lsa-interp ...` and `python benchmarks/..., analyses/..., scripts/...`) are read from the
Markdown files the repository ships and the notebooks' Markdown cells (code blocks and inline code) and
given to the program's own parser, so a renamed option or command fails here instead of in a reader's
terminal.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer._click.exceptions import BadParameter, MissingParameter, UsageError

from lsa_interp.cli import app
from tests.helpers import load_script

Command = typer.core.TyperCommand | typer.core.TyperGroup

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "scripts").glob("*.md")]
    + [*(ROOT / "analyses").glob("**/*.md"), *(ROOT / "checkpoints").glob("**/*.md")]
    + [*(ROOT / "analyses").glob("*.ipynb")]
)
SHELL_ENDS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "&"}
INLINE_CODE = re.compile(r"`([^`]+)`")
LSA_INTERP = re.compile(r"(?:^|[\s/])lsa-interp\s+(?=[a-z-])")
SCRIPT = re.compile(r"(?:^|\s)python3?\s+(?:-m\s+(benchmarks)\.(\w+)|((?:benchmarks|analyses|scripts)/\w+\.py))")


def _text(path: Path) -> str:
    """A Markdown file's text, or a notebook's Markdown cells, one paragraph each."""
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def _snippets(text: str) -> list[str]:
    """The code in a Markdown text: each fenced line (continuations joined) and each inline code span."""
    snippets, prose, fenced, held = [], [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, held = not fenced, ""
            prose.append("")
        elif not fenced:
            prose.append(line)
        elif line.endswith("\\"):
            held += line[:-1] + " "
        else:
            snippets.append(held + line)
            held = ""
    for paragraph in re.split(r"\n\s*\n", "\n".join(prose)):
        snippets.extend(" ".join(span.split()) for span in INLINE_CODE.findall(paragraph))
    return snippets


def _arguments(snippet: str) -> list[str]:
    """The shell words of a command's arguments, up to a comment, a pipe, or prose in brackets."""
    try:
        tokens = shlex.split(snippet, comments=True)
    except ValueError:
        tokens = snippet.split()
    ends = [i for i, token in enumerate(tokens) if token in SHELL_ENDS or token[:1] in "([" or token == "..."]
    return tokens[: ends[0]] if ends else tokens


def commands(text: str) -> list[list[str]]:
    """The argument lists after `lsa-interp` in a Markdown text."""
    return [_arguments(snippet[match.end() :]) for snippet in _snippets(text) for match in LSA_INTERP.finditer(snippet)]


def script_commands(text: str) -> list[tuple[str, list[str]]]:
    """(script path, arguments) of each `python benchmarks/...py`, `python -m benchmarks.NAME`, ... in a text."""
    found = []
    for snippet in _snippets(text):
        for match in SCRIPT.finditer(snippet):
            script = match[3] or f"{match[1]}/{match[2]}.py"
            found.append((script, _arguments(snippet[match.end() :])))
    return found


def _is_placeholder(value: str) -> bool:
    return value.isupper() or any(c in value for c in "<{*$")


def _resolve(group: Command, tokens: list[str]) -> tuple[list[str], Command, list[str]]:
    path, command = [], group
    while hasattr(command, "commands") and tokens and not tokens[0].startswith("-"):
        sub = command.commands.get(tokens[0])
        if sub is None:
            raise LookupError(f"no command {' '.join([*path, tokens[0]])!r}")
        path.append(tokens[0])
        command, tokens = sub, tokens[1:]
    return path, command, tokens


def problems_of(tokens: list[str], group: Command) -> list[str]:
    """What the CLI's own parser refuses in one documented command line.

    A command named without its required arguments, an option named at the end of a line (a mention, not
    a call), and a value refused where the line holds a placeholder (N, DIR, <path>) are not problems.
    """
    try:
        path, command, rest = _resolve(group, tokens)
    except LookupError as error:
        return [str(error)]
    if hasattr(command, "commands"):
        return [] if not rest or rest == ["--help"] else [f"{' '.join(path)}: no subcommand in {rest}"]
    if "--help" in rest:
        return []
    try:
        command.make_context(" ".join(path), list(rest))
    except MissingParameter:
        return []
    except BadParameter as error:
        return [] if any(map(_is_placeholder, rest)) else [f"{' '.join(path)}: {error.format_message()}"]
    except UsageError as error:
        mention = rest and rest[-1].startswith("--") and "requires an argument" in error.format_message()
        return [] if mention else [f"{' '.join(path)}: {error.format_message()}"]
    return []


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


@functools.cache  # a script's parser is built once, however many documented commands name it
def parser_of(script: str) -> argparse.ArgumentParser | None:
    """The argparse parser a script's ``main`` builds (stopped at its ``parse_args``); None when it takes none."""
    if "parse_args" not in (ROOT / script).read_text():
        return None

    def capture(parser, *args, **kwargs):
        raise _Captured(parser)

    module = load_script(script)
    with pytest.MonkeyPatch.context() as patch, pytest.raises(_Captured) as captured:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        module.main()
    return captured.value.parser


def script_problems_of(arguments: list[str], parser: argparse.ArgumentParser | None, capsys) -> list[str]:
    """What a script's parser refuses in one documented command line (missing arguments, placeholders and
    mentions as above are not problems)."""
    if parser is None:
        return [f"takes no arguments, given {arguments}"] if arguments else []
    try:
        parser.parse_args(arguments)
    except SystemExit as exit_:
        message = capsys.readouterr().err.strip().splitlines()[-1:]
        mention = arguments and arguments[-1].startswith("--") and "expected one argument" in "".join(message)
        missing = "the following arguments are required" in "".join(message)
        if exit_.code and not (mention or missing or any(map(_is_placeholder, arguments))):
            return message or [f"exit {exit_.code}"]
    return []


@pytest.fixture(scope="module")
def cli() -> Command:
    return typer.main.get_command(app)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_docs_hold_many_commands_from_every_kind_of_file():
    per_file = {_relative(path): len(commands(_text(path))) for path in DOCS}
    assert sum(per_file.values()) >= 180
    assert per_file["README.md"] >= 15 and per_file["docs/cli.md"] >= 30
    assert per_file["checkpoints/copy-200/card.md"] >= 1
    assert per_file["analyses/02_copy_vs_nocopy_matching.ipynb"] >= 1
    scripts = {script for path in DOCS for script, _ in script_commands(_text(path))}
    assert {"benchmarks/train_throughput.py", "analyses/reference_items.py", "scripts/pack_results.py"} <= scripts


@pytest.mark.parametrize("doc", [_relative(path) for path in DOCS])
def test_every_documented_command_parses(doc, cli, capsys):
    text = _text(ROOT / doc)
    problems = [
        f"lsa-interp {shlex.join(tokens)} -> {problem}"
        for tokens in commands(text)
        for problem in problems_of(tokens, cli)
    ]
    for script, arguments in script_commands(text):
        assert (ROOT / script).is_file(), f"{doc}: no script {script}"
        problems += [
            f"python {script} {shlex.join(arguments)} -> {problem}"
            for problem in script_problems_of(arguments, parser_of(script), capsys)
        ]
    assert not problems, f"{doc}:\n" + "\n".join(problems)


def test_the_reader_finds_fenced_continued_and_inline_commands():
    text = (
        "Run `lsa-interp evaluate --model copy-200` or `python benchmarks/a.py\n--steps 3`, or\n```\n"
        ".venv/bin/lsa-interp train --preset copy-20 \\\n  --out runs/x  # a comment --bogus\n"
        "lsa-interp results --runs a | head\nlsa-interp ship R (a note)\n```\nnot lsa-interp prose\n"
    )
    assert commands(text) == [
        ["train", "--preset", "copy-20", "--out", "runs/x"],
        ["results", "--runs", "a"],
        ["ship", "R"],
        ["evaluate", "--model", "copy-200"],
    ]
    assert script_commands(text) == [("benchmarks/a.py", ["--steps", "3"])]
    assert script_commands("`python -m benchmarks.profile_stack --x 1`") == [
        ("benchmarks/profile_stack.py", ["--x", "1"])
    ]


def test_wrong_commands_options_and_values_are_reported(cli):
    assert problems_of(["evaluate", "--model", "copy-200", "--limit", "5"], cli) == []
    assert problems_of(["evaluate"], cli) == [] and problems_of(["results", "--history"], cli) == []
    assert problems_of(["evaluat"], cli) == ["no command 'evaluat'"]
    assert problems_of(["data", "make"], cli) == ["no command 'data make'"]
    assert problems_of(["evaluate", "--limit", "N"], cli) == []
    [problem] = problems_of(["evaluate", "--modle", "copy-200"], cli)
    assert problem.startswith("evaluate: ") and "--modle" in problem
    [problem] = problems_of(["evaluate", "--model", "copy-200", "--limit=many"], cli)
    assert problem.startswith("evaluate: ") and "--limit" in problem
    [problem] = problems_of(["evaluate", "--model", "copy-200", "--limit", "5", "extra"], cli)
    assert problem == "evaluate: Got unexpected extra argument(s) (extra)"


def test_wrong_script_options_are_reported(capsys):
    parser = parser_of("benchmarks/train_throughput.py")
    assert script_problems_of(["--device", "cpu", "--steps", "30"], parser, capsys) == []
    assert script_problems_of(["--steps", "N"], parser, capsys) == []
    assert script_problems_of(["--device"], parser, capsys) == []
    assert script_problems_of([], parser_of("analyses/splice_controls.py"), capsys) == []
    [problem] = script_problems_of(["--device", "cpu", "--stepz", "30"], parser, capsys)
    assert "unrecognized arguments: --stepz 30" in problem
    [problem] = script_problems_of(["--steps", "many"], parser, capsys)
    assert "--steps" in problem and "invalid int value" in problem
    assert parser_of("benchmarks/data_generation.py") is None
    assert script_problems_of(["--fast"], None, capsys) == ["takes no arguments, given ['--fast']"]


MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped, spaces to -)."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file whose file, or whose #anchor in a Markdown file, is missing."""
    broken = []
    for target in MARKDOWN_LINK.findall(_text(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        destination = (path.parent / file) if file else path
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination.read_text()):
            broken.append(f"{target}: no heading with that anchor")
    return broken


@pytest.mark.parametrize("doc", [_relative(path) for path in DOCS])
def test_relative_links_and_anchors_resolve(doc):
    assert broken_links(ROOT / doc) == []


def test_broken_links_are_found(tmp_path):
    (tmp_path / "b.md").write_text("# Grid runs: the plan (2026)\n")
    page = tmp_path / "a.md"
    page.write_text("[x](b.md#grid-runs-the-plan-2026) [y](https://e.org/z) [z](c.md) [w](b.md#other) [v](#here)\n")
    assert broken_links(page) == [
        "c.md: no such file",
        "b.md#other: no heading with that anchor",
        "#here: no heading with that anchor",
    ]
