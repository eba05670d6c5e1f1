"""The public API (docs/api.md): the top level's names, documented one by one, imported lazily;
one Lightning strategy; subpackage ``__all__`` lists that resolve; examples that use them only."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import autosync_transfer

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autosync_transfer"
API_DOC = ROOT / "docs" / "api.md"

#: the names a user needs (DESIGN §17)
PUBLIC = {"Cluster", "Workload", "Strategy", "Domain", "DistributedModel", "AutoSyncStrategy",
          "AutotuneConfig", "recommend", "run_search", "adapt_simulator", "load_simulator",
          "__version__"}

SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def _documented() -> list[str]:
    """The names of docs/api.md's headings: ``## `name` ``."""
    return re.findall(r"^## `([A-Za-z_][A-Za-z0-9_]*)`\s*$", API_DOC.read_text(), re.MULTILINE)


def test_the_top_level_exports_exactly_the_public_names() -> None:
    assert set(autosync_transfer.__all__) == PUBLIC
    assert len(autosync_transfer.__all__) == len(PUBLIC)


def test_every_public_name_is_documented_once_and_nothing_else_is() -> None:
    documented = _documented()
    assert sorted(documented) == sorted(set(documented)), "a name documented twice"
    assert set(documented) == set(autosync_transfer.__all__)


def test_every_public_name_resolves() -> None:
    for name in autosync_transfer.__all__:
        obj = getattr(autosync_transfer, name)
        assert obj is not None, name
        if name != "__version__":
            assert callable(obj), name
            assert inspect.getdoc(obj), f"{name} has no docstring"
    with pytest.raises(AttributeError, match="no attribute 'Searcher'"):
        autosync_transfer.Searcher  # noqa: B018 - internal to the top level


def test_importing_the_package_imports_nothing_heavy() -> None:
    code = ("import sys, autosync_transfer\n"
            "heavy = [m for m in ('torch', 'lightning', 'mlflow', 'tensorflow') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert len(autosync_transfer.__all__) == 12\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_functions_and_the_subpackages_keep_their_names() -> None:
    """The top-level functions do not shadow a subpackage: every import idiom of the
    subpackages works, and ``from autosync_transfer.search import recommend`` is the function
    whatever was imported before."""
    import autosync_transfer.adapt.core
    import autosync_transfer.search.loop as loop
    import autosync_transfer.search.recommendation  # noqa: F401
    from autosync_transfer.adapt.workflow import adapt_and_register
    from autosync_transfer.search.recommendation import recommend

    assert autosync_transfer.run_search is loop.search and inspect.isfunction(loop.search)
    assert autosync_transfer.adapt_simulator is adapt_and_register
    from autosync_transfer.search import recommend as search_recommend

    assert search_recommend is recommend is autosync_transfer.recommend
    assert inspect.ismodule(autosync_transfer.search) and inspect.ismodule(autosync_transfer.adapt)
    assert autosync_transfer.search.loop.Searcher.__name__ == "Searcher"


def test_search_refuses_bad_settings_before_anything_runs(tmp_path: Path) -> None:
    from autosync_transfer.errors import ConfigError

    with pytest.raises(ConfigError, match="search settings: per_round"):
        autosync_transfer.run_search("ncf-A", budget=4, per_round=0, store=tmp_path / "s.jsonl")
    with pytest.raises(ConfigError, match="unknown_setting"):
        autosync_transfer.run_search("ncf-A", unknown_setting=1, store=tmp_path / "s.jsonl")
    with pytest.raises(ConfigError, match="simulator needs method='autosync', got method='random'"):
        autosync_transfer.run_search("ncf-A", method="random", simulator="models:/x@champion",
                                 store=tmp_path / "s.jsonl")
    assert not (tmp_path / "s.jsonl").exists()


def test_there_is_one_autosync_strategy_class() -> None:
    defined = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
               if any(isinstance(n, ast.ClassDef) and n.name == "AutoSyncStrategy"
                      for n in ast.walk(ast.parse(p.read_text())))]
    assert defined == ["autosync_transfer/search/lightning.py"]
    from autosync_transfer.search import lightning

    assert autosync_transfer.AutoSyncStrategy is lightning.AutoSyncStrategy
    assert importlib.import_module("autosync_transfer.search").AutoSyncStrategy \
        is lightning.AutoSyncStrategy
    runtime_lightning = importlib.import_module("autosync_transfer.runtime.lightning")
    assert not hasattr(runtime_lightning, "AutoSyncStrategy")
    assert "AutoSyncStrategy" not in importlib.import_module("autosync_transfer.runtime").__all__


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_every_name_a_subpackage_exports_resolves(package: str) -> None:
    module = importlib.import_module(f"autosync_transfer.{package}")
    names = list(getattr(module, "__all__", []))
    assert len(names) == len(set(names)), f"{package}: a name listed twice"
    for name in names:
        assert getattr(module, name) is not None, f"autosync_transfer.{package}.{name}"


def _public_names(module: str) -> set[str]:
    """What a user may import from ``module``: the top level's, a subpackage's ``__all__``, or
    the exceptions of ``autosync_transfer.errors``."""
    parts = module.split(".")
    if parts[0] != "autosync_transfer" or len(parts) > 2:
        return set()
    if len(parts) == 2 and parts[1] not in (*SUBPACKAGES, "errors"):
        return set()
    return set(getattr(importlib.import_module(module), "__all__", ()))


def test_the_examples_import_only_public_names() -> None:
    examples = sorted((ROOT / "examples").glob("*.py")) + \
        sorted((ROOT / "examples" / "workloads").glob("*.py"))
    assert examples
    internal = []
    for path in examples:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                internal += [f"{path.name}:{node.lineno}: import {a.name}" for a in node.names
                             if a.name.startswith("autosync_transfer.")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "autosync_transfer"):
                public = _public_names(node.module)
                internal += [f"{path.name}:{node.lineno}: from {node.module} import {a.name}"
                             for a in node.names if a.name not in public]
    assert not internal, "examples import internal names:\n" + "\n".join(internal)


def _listed_names(module: str) -> set[str]:
    """What a benchmark may import from ``module``: the names its own ``__all__`` or its
    subpackage's lists, and its submodules."""
    mod = importlib.import_module(module)
    names = set(getattr(mod, "__all__", ()))
    parts = module.split(".")
    if len(parts) > 2:
        names |= set(getattr(importlib.import_module(".".join(parts[:2])), "__all__", ()))
    if hasattr(mod, "__path__"):
        names |= {p.stem for p in Path(mod.__path__[0]).glob("*.py") if not p.stem.startswith("_")}
    return names


def test_benchmarks_and_examples_import_listed_names_and_leave_sys_path_alone() -> None:
    """A product benchmark reproduces a figure with the library as a user has it: no name a
    module does not list in its ``__all__`` (nor a private one), no ``sys.path`` edits to reach
    the examples or one another; the examples reach their siblings as scripts do (their folder
    is the script's)."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "examples").glob("*.py"))
    assert len(scripts) > 5
    found = []
    for path in scripts:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"{path.name}:{node.lineno}: sys.path")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "autosync_transfer"):
                listed = _listed_names(node.module)
                found += [f"{path.name}:{node.lineno}: from {node.module} import {a.name}"
                          for a in node.names if a.name.startswith("_") or a.name not in listed]
    assert not found, "benchmarks or examples reach past the listed names:\n" + "\n".join(found)
