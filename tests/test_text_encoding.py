"""Every text file the project reads or writes is opened as UTF-8, never in the locale's encoding.

The pages inline plotly.js (which holds characters outside ASCII and cp1252) and the cards hold dashes: opened
in the locale's encoding, a machine whose locale is not UTF-8 (Windows' cp1252, a POSIX locale in Latin-1) fails
after the work is done or writes files other machines misread. The behaviour itself is tested under an ASCII
locale where the files are written (`ascii_locale` in tests/conftest.py); this test finds every call site, as
ruff's PLW1514 does only where it can tell that the receiver is a path.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("lsa_interp", "scripts", "benchmarks", "analyses")
_BINARY_OPENERS = {"tarfile", "zipfile"}


def _mode(call: ast.Call) -> str | None:
    """The literal mode of an ``open`` call (``"r"`` when none is given), None when it is not a literal."""
    mode = next((kw.value for kw in call.keywords if kw.arg == "mode"), None)
    if mode is None:
        positional = 1 if isinstance(call.func, ast.Name) else 0  # open(path, mode) or path.open(mode)
        mode = call.args[positional] if len(call.args) > positional else ast.Constant("r")
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else None


def unspecified_encodings(source: str) -> list[tuple[int, str]]:
    """(line, call) of every ``read_text``, ``write_text`` and text-mode ``open`` call without an ``encoding=``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or any(kw.arg == "encoding" for kw in node.keywords):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "open":
            receiver = func.value if isinstance(func, ast.Attribute) else None
            if isinstance(receiver, ast.Name) and receiver.id in _BINARY_OPENERS:
                continue
            mode = _mode(node)
            if mode is not None and "b" in mode:
                continue
        elif name not in ("read_text", "write_text"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_checker_finds_text_calls_without_an_encoding():
    source = """
a = path.read_text()
b = path.read_text(encoding="utf-8")
path.write_text(text)
path.write_text(text, "utf-8")
Path(x).write_text(text, encoding="utf-8")
with open(name) as f: pass
with open(name, "a") as f: pass
with open(name, "rb") as f: pass
with open(name, mode="wb") as f: pass
with path.open("a") as f: pass
with path.open("ab") as f: pass
with path.open(mode, encoding="utf-8") as f: pass
tarfile.open(fileobj=buffer, mode="w:gz")
"""
    assert [line for line, _ in unspecified_encodings(source)] == [2, 4, 5, 7, 8, 11]


@pytest.mark.parametrize("folder", CHECKED)
def test_every_text_file_is_opened_as_utf_8(folder):
    missing = [
        f"{path.relative_to(ROOT)}:{line}: {call}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, call in unspecified_encodings(path.read_text(encoding="utf-8"))
    ]
    assert not missing, "give encoding='utf-8':\n" + "\n".join(missing)
