"""The import directions between subpackages, pinned.

Every ``import`` in the package (at module level or inside a function: a lazy import is still a
dependency) is mapped to the subpackage it names; each subpackage may import only the rooms listed
for it in :data:`ALLOWED`, and that table itself must be acyclic. Reproduce the check by hand with
``python -m pytest tests/test_layering.py -q``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autosync_transfer"

#: rooms every room may use
BASE = {"errors", "_lazy", "paths", "_files", "_heap"}

#: lower rooms each room may import (besides itself and BASE); flow: domains -> strategies ->
#: rankers / runtime -> dataset -> registry -> adapt -> search -> cli
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_lazy": set(),
    # where shipped data, the registry and default stores live (autosync_transfer/paths.py)
    "paths": set(),
    # files in shared folders: locked side files, atomic writes, no links (autosync_transfer/_files.py)
    "_files": {"errors"},
    # the allocator's slack while vectorized code runs (autosync_transfer/_heap.py)
    "_heap": set(),
    "domains": set(),
    # how configurations are compared: interleaved rounds, intervals, verdicts (pure)
    "measure": set(),
    "strategies": {"domains"},
    "rankers": {"domains", "measure", "strategies"},
    "runtime": {"domains", "measure", "strategies"},
    "dataset": {"domains", "measure", "strategies", "rankers", "runtime"},
    "registry": {"domains", "measure", "strategies", "rankers"},
    "adapt": {"domains", "measure", "strategies", "rankers", "runtime", "dataset", "registry"},
    "search": {"domains", "measure", "strategies", "rankers", "runtime", "dataset", "registry", "adapt"},
    # the demo task the examples and benchmarks share (a classifier, its Lightning fit, a launcher)
    "demos": {"domains", "runtime"},
    "testing": {"domains", "measure", "strategies", "rankers", "runtime", "dataset", "registry"},
    "cli": {"domains", "measure", "strategies", "rankers", "runtime", "dataset", "registry", "adapt",
            "search", "testing"},
    # the package's top level only re-exports lazily (the public API, docs/api.md)
    "__init__": {"search", "adapt", "registry", "runtime", "domains", "strategies"},
    # python -m autosync_transfer: the command line
    "__main__": {"cli"},
}


def _room(path: Path) -> str:
    """``runtime`` for ``autosync_transfer/runtime/x.py``, ``errors`` for ``errors.py``."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_rooms(path: Path, package_parts: list[str] | None = None) -> set[tuple[str, int]]:
    """``(room, line)`` for every import of ``autosync_transfer.<room>`` in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    # the package a relative import starts from: the folder holding the module
    pkg = package_parts if package_parts is not None else \
        list(path.relative_to(PACKAGE.parent).parent.parts)
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = ".".join(pkg[: len(pkg) - (node.level - 1)])
                base = f"{prefix}.{node.module}" if node.module else prefix
            names = [base] if base.count(".") >= 1 else [f"{base}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
              and getattr(node.func, "id", getattr(node.func, "attr", "")) in
              {"lazy_exports", "import_module"}
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            # lazy_exports("autosync_transfer.x", ...) and importlib.import_module(...) import too
            names = [node.args[0].value]
        for name in names:
            parts = name.split(".")
            if parts[0] == "autosync_transfer" and len(parts) > 1 and not parts[1].startswith("__"):
                found.add((parts[1], node.lineno))
    return found


def _violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = _room(path)
        allowed = ALLOWED.get(room)
        assert allowed is not None, f"{path}: room {room!r} is not in the layering table"
        for target, line in sorted(_imported_rooms(path)):
            if target == room or target in BASE or target in allowed:
                continue
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {room} -> {target}")
    return bad


def test_allowed_table_is_acyclic() -> None:
    graph = {k: set(v) for k, v in ALLOWED.items()}
    done: set[str] = set()

    def visit(node: str, stack: tuple[str, ...]) -> None:
        if node in stack:
            pytest.fail(f"cycle in the layering table: {' -> '.join((*stack, node))}")
        if node in done:
            return
        for nxt in graph.get(node, ()):
            visit(nxt, (*stack, node))
        done.add(node)

    for n in graph:
        visit(n, ())


def test_every_room_is_in_the_table() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert rooms <= set(ALLOWED), sorted(rooms - set(ALLOWED))


def test_imports_follow_the_layering() -> None:
    bad = _violations()
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    # a function-level import must count: the cycles this test pins were hidden that way
    src = tmp_path / "m.py"
    src.write_text("import os\n"
                   "def f():\n    from autosync_transfer.cli._common import err\n"
                   "from ..search import loop\n"
                   "from .. import dataset\n"
                   "x = lazy_exports('autosync_transfer.registry', {})\n")
    rooms = {room for room, _ in _imported_rooms(src, ["autosync_transfer", "runtime"])}
    assert rooms == {"cli", "search", "dataset", "registry"}


def room_graph() -> dict[str, set[str]]:
    """The rooms each room imports, as the code stands."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        room = _room(path)
        graph.setdefault(room, set()).update(t for t, _ in _imported_rooms(path) if t != room)
    return graph


if __name__ == "__main__":  # python tests/test_layering.py: the room graph and its cycles
    import itertools

    g = room_graph()
    for room in sorted(g):
        print(f"{room:10} -> {', '.join(sorted(g[room])) or '-'}")
    cycles = [(a, b) for a, b in itertools.combinations(sorted(g), 2) if b in g[a] and a in g[b]]
    print(f"two-room cycles: {len(cycles)} {cycles}")
