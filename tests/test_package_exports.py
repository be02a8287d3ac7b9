"""The packages' public names are imported on first use (`utils.lazy_exports`): each resolves to the object its module
defines, and importing a light module does not import torch, TransformerLens or pandas through its siblings."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
import types

import pytest

from lsa_interp.utils import lazy_exports

PACKAGES = ["lsa_interp", "lsa_interp.data", "lsa_interp.model", "lsa_interp.training", "lsa_interp.evaluation"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_is_its_modules_object_and_listed(name):
    package = importlib.import_module(name)
    for export, module in package._EXPORTS.items():
        assert getattr(package, export) is getattr(importlib.import_module(f"{name}.{module}"), export)
    assert set(package._EXPORTS) <= set(package.__all__) <= set(package._EXPORTS) | {"__version__"}
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'no_such_name'"):
        package.no_such_name  # noqa: B018


@pytest.mark.parametrize("name", PACKAGES)
def test_what_type_checkers_read_names_the_same_objects(name):
    """The ``if TYPE_CHECKING:`` imports (what editors and type checkers see) are exactly ``_EXPORTS``."""
    package = importlib.import_module(name)
    (block,) = [n for n in ast.parse(inspect.getsource(package)).body if isinstance(n, ast.If)]
    assert ast.unparse(block.test) == "TYPE_CHECKING"
    imported = {}
    for statement in block.body:
        assert isinstance(statement, ast.ImportFrom) and statement.module.startswith(f"{name}.")
        for alias in statement.names:
            assert alias.asname == alias.name, "a re-export is written `X as X`"
            imported[alias.name] = statement.module.removeprefix(f"{name}.")
    assert imported == package._EXPORTS


def test_a_name_is_imported_once_and_then_is_the_packages_own_attribute(monkeypatch):
    package = types.ModuleType("lazy_pkg")
    monkeypatch.setitem(sys.modules, "lazy_pkg", package)
    monkeypatch.setitem(sys.modules, "lazy_pkg.part", types.SimpleNamespace(thing=object()))
    calls = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda path: calls.append(path) or real(path))
    package.__getattr__, package.__dir__ = lazy_exports("lazy_pkg", {"thing": "part"})
    assert "thing" in package.__dir__() and "thing" not in vars(package)
    thing = package.thing
    assert thing is sys.modules["lazy_pkg.part"].thing and vars(package)["thing"] is thing
    assert package.thing is thing and calls == ["lazy_pkg.part"]


def _imported_after(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after running ``statement``."""
    code = f"import json, sys; {statement}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out))


@pytest.mark.parametrize(
    ("statement", "left_out"),
    [
        ("import lsa_interp", {"torch", "transformer_lens", "pandas"}),
        ("from lsa_interp import Task", {"torch", "transformer_lens", "pandas"}),
        ("import lsa_interp.sweep.grid", {"torch", "transformer_lens"}),
        ("from lsa_interp.model import ModelConfig", {"torch", "transformer_lens"}),
        ("from lsa_interp.training import Recipe, StackConfig", {"torch", "transformer_lens"}),
    ],
)
def test_light_modules_do_not_import_torch_or_transformer_lens(statement, left_out):
    assert not _imported_after(statement) & left_out


def test_a_heavy_name_still_imports_what_it_needs():
    assert {"torch", "transformer_lens"} <= _imported_after("from lsa_interp import load_model; load_model")
